package api

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPIDocument is the OpenAPI 3.1 description of the API, kept true by TestOpenAPIMatchesRoutes
// (its paths are the routes) and by the contract check of every response the API tests receive.
//
//go:embed openapi.json
var OpenAPIDocument []byte

func (s *Server) openAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", OpenAPIDocument)
}
