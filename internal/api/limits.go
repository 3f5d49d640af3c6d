package api

import (
	"context"
	"net/http"

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
	// The change is made: a client that hangs up now does not cancel its entry.
	if err := s.audit.Audit(context.WithoutCancel(c.Request.Context()), &t, s.actor(c), action, target, detail); err != nil {
		s.log.ErrorContext(c.Request.Context(), "audit log write failed", "action", action, "err", err)
	}
}

// auditTx records a change in the tenant's audit log inside the change's own transaction
// (limiter.AuditTx); nil, recording nothing, on a server without an audit log.
func (s *Server) auditTx() limiter.AuditTx {
	if s.audit == nil {
		return nil
	}
	return s.audit.AuditTx
}

func (s *Server) putDefinition(c *gin.Context) {
	name, ok := limitName(c)
	if !ok {
		writeProblem(c, s.log, badRequest("name", "limit names match ^[A-Za-z0-9_.:-]{1,128}$ and are not \".\" or \"..\""))
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
	stored, _, err := s.engine.PutDefinition(c.Request.Context(), tenantOf(c).TenantID, name, def, s.auditTx().DefinitionChange(s.actor(c), ""))
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
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
	if err := s.engine.DeleteDefinition(c.Request.Context(), tenantOf(c).TenantID, name, s.auditTx().DefinitionChange(s.actor(c), "")); err != nil {
		writeProblem(c, s.log, err)
		return
	}
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
	key, err := resetKey(body)
	if err != nil {
		writeProblem(c, s.log, err)
		return
	}
	if err := s.engine.Reset(c.Request.Context(), tenantOf(c).TenantID, name, key, s.auditTx().Reset(tenantOf(c).TenantID, s.actor(c), name, key)); err != nil {
		writeProblem(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// resetKey reads which state a reset body names (DESIGN: {"key"?} or {"allKeys": true}): nil
// for every key, "" for the limit's global key (no key given), or the key.
func resetKey(body ResetBody) (*string, error) {
	allKeys := body.AllKeys != nil && *body.AllKeys
	switch {
	case body.AllKeys != nil && !allKeys:
		return nil, badRequest("allKeys", `"allKeys": false resets nothing; omit it to reset the global key, or give "key"`)
	case allKeys && body.Key != nil:
		return nil, badRequest("allKeys", `give either "key" or "allKeys": true, not both`)
	case allKeys:
		return nil, nil
	case body.Key == nil:
		global := ""
		return &global, nil
	}
	if !limiter.ValidKey(*body.Key) {
		return nil, badRequest("key", limiter.KeyRule)
	}
	return body.Key, nil
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
