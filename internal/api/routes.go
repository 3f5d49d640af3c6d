package api

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// Register mounts every /v1 route. This is the complete list; the OpenAPI document is checked
// against it by a test.
func (s *Server) Register(r gin.IRouter) {
	v1 := r.Group("/v1")
	v1.GET("/openapi.json", s.openAPI) // public: the contract holds no tenant data

	authed := v1.Group("", s.authenticate)
	authed.GET("/limits", s.listDefinitions)
	authed.PUT("/limits/:name", s.putDefinition)
	authed.GET("/limits/:name", s.getDefinition)
	authed.DELETE("/limits/:name", s.deleteDefinition)
	authed.POST("/limits/:name/limit", s.limitOne)
	authed.POST("/limits/:name/check", s.checkOne)
	authed.POST("/limits/:name/reset", s.reset)
	authed.GET("/limits/:name/value", s.value)
	authed.POST("/limit", s.limitBatch)
	authed.POST("/check", s.checkBatch)

	for _, register := range s.extra {
		register(v1, authed)
	}
}

// NotFound renders unknown /v1 paths as problems; the caller decides which paths are the API's.
func (s *Server) NotFound(c *gin.Context) {
	WriteProblem(c, NewProblem(http.StatusNotFound, CodeNotFound, "no such route"))
}

// IsAPIPath reports whether path belongs to this API.
func IsAPIPath(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// InternalError is the renderer for recovered panics on API paths.
func InternalError(c *gin.Context) {
	p := NewProblem(http.StatusInternalServerError, CodeInternal, "internal error")
	p.RequestID = c.GetString(RequestIDKey)
	WriteProblem(c, p)
}
