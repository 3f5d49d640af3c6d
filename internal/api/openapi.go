package api

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPIDocument is the OpenAPI 3.1 description of /v1, kept true by TestOpenAPIMatchesRoutes.
//
//go:embed openapi.json
var OpenAPIDocument []byte

func (s *Server) openAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", OpenAPIDocument)
}
