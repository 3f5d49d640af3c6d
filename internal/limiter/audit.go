package limiter

// AuditChange is how the audit log describes a stored definition that replaced another: the
// one before and the one after (AuditDetail each), or only the new one when there was none.
func AuditChange(before *Definition, after Definition) string {
	if before == nil {
		return AuditDetail(after)
	}
	return AuditDetail(*before) + " → " + AuditDetail(after)
}
