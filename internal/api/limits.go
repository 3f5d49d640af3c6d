package api

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// limitName is the {name} path parameter, validated. An invalid name cannot exist, so it is a 404
// on reads and a 400 on writes.
func limitName(c *gin.Context) (string, bool) {
	name := c.Param("name")
	return name, limiter.ValidName(name)
}

// existingLimitName is limitName for the routes on a limit that must already exist: an impossible
// name cannot name one, so the answer is 404 not_found (written here), not a 400.
func (s *Server) existingLimitName(c *gin.Context) (string, bool) {
	name, ok := limitName(c)
	if !ok {
		writeProblem(c, s.log, limiter.ErrLimitNotFound)
	}
	return name, ok
}

func (s *Server) actor(c *gin.Context) string { return "key:" + tenantOf(c).KeyID }

func (s *Server) recordAudit(c *gin.Context, action, target, detail string) {
	if s.audit == nil {
		return
	}
	t := tenantOf(c).TenantID
	if err := s.audit.Audit(c.Request.Context(), &t, s.actor(c), action, target, detail); err != nil {
		s.log.ErrorContext(c.Request.Context(), "audit log write failed", "action", action, "err", err)
	}
}

func (s *Server) putDefinition(c *gin.Context) {
	name, ok := limitName(c)
	if !ok {
		writeProblem(c, s.log, badRequest("name", "limit names match ^[A-Za-z0-9_.:-]{1,128}$"))
		return
	}
	var body DefinitionBody
	if err := decodeJSON(c, &body); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	def, err := body.ToDefinition()
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	stored, created, err := s.engine.PutDefinition(c.Request.Context(), tenantOf(c).TenantID, name, def)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	action := "limit.update"
	if created {
		action = "limit.create"
	}
	s.recordAudit(c, action, name, string(def.Kind)+" rate="+strconv.FormatFloat(def.Rate, 'g', -1, 64)+" period="+strconv.FormatInt(def.Period, 10))
	c.JSON(http.StatusOK, toDefinitionResponse(stored))
}

func (s *Server) listDefinitions(c *gin.Context) {
	defs, err := s.engine.ListDefinitions(c.Request.Context(), tenantOf(c).TenantID)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	out := struct {
		Limits []DefinitionResponse `json:"limits"`
	}{Limits: make([]DefinitionResponse, len(defs))}
	for i, d := range defs {
		out.Limits[i] = toDefinitionResponse(d)
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) getDefinition(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	d, err := s.engine.GetDefinition(c.Request.Context(), tenantOf(c).TenantID, name)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, toDefinitionResponse(d))
}

func (s *Server) deleteDefinition(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	if err := s.engine.DeleteDefinition(c.Request.Context(), tenantOf(c).TenantID, name); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	s.recordAudit(c, "limit.delete", name, "")
	c.Status(http.StatusNoContent)
}

func (s *Server) reset(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	var body ResetBody
	if err := decodeJSON(c, &body); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	switch {
	case body.AllKeys && body.Key != nil:
		writeProblem(c, s.log, badRequest("allKeys", `give either "key" or "allKeys": true, not both`))
		return
	case !body.AllKeys && body.Key == nil:
		writeProblem(c, s.log, badRequest("key", `give "key", or "allKeys": true to reset every key`))
		return
	case body.Key != nil && !limiter.ValidKey(*body.Key):
		writeProblem(c, s.log, badRequest("key", limiter.KeyRule))
		return
	}
	if err := s.engine.Reset(c.Request.Context(), tenantOf(c).TenantID, name, body.Key); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	target := name + " (all keys)"
	if body.Key != nil {
		target = name + " key " + strconv.Quote(*body.Key)
	}
	s.recordAudit(c, "limit.reset", target, "")
	c.Status(http.StatusNoContent)
}

func (s *Server) value(c *gin.Context) {
	name, ok := s.existingLimitName(c)
	if !ok {
		return
	}
	key, present := c.GetQuery("key")
	if present && !limiter.ValidKey(key) {
		writeProblem(c, s.log, badRequest("key", limiter.KeyRule))
		return
	}
	v, err := s.engine.GetValue(c.Request.Context(), tenantOf(c).TenantID, name, key)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, toValueResponse(v))
}
