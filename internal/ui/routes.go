package ui

import "github.com/gin-gonic/gin"

// Register mounts every dashboard route and /static. This is the complete list.
//
// Every route passes the cross-origin check (state-changing requests from another origin are
// 403); everything below /tenants needs a live session; /tenants/:tid/... also needs access to
// that tenant (404 otherwise), and a POST there needs the right to change it (an operator, or
// the tenant's admin while it is not suspended: 403 otherwise, see requireTenant).
func (u *UI) Register(r *gin.Engine) {
	r.GET("/static/*filepath", u.static.serve)
	r.HEAD("/static/*filepath", u.static.serve)

	d := r.Group("", u.csrfCheck, refuseOversizedForms)
	d.GET("/", u.home)
	d.GET("/login", u.loginForm)
	d.POST("/login", u.login)
	d.POST("/logout", u.logout)
	d.GET("/setup", u.setupForm)
	d.POST("/setup", u.setup)
	invitation, reset := u.invitation(), u.passwordReset()
	d.GET("/invite", u.showLink(invitation)) // a one-time invitation link: choose a password, join
	d.POST("/invite", u.submitLink(invitation))
	d.GET("/reset", u.showLink(reset)) // a one-time password reset link, made by an operator
	d.POST("/reset", u.submitLink(reset))

	authed := d.Group("", u.requireUser)
	authed.GET("/account", u.accountPage) // one's own password, whatever the role
	authed.POST("/account/password", u.changePassword)
	op := authed.Group("", u.requireOperator)
	op.GET("/tenants", u.tenantsPage)
	op.POST("/tenants", u.createTenant)
	// Not below /tenants/:tid, whose routes a suspended tenant's members reach read-only.
	op.GET("/tenants/:tid/manage", u.manageTenant)
	op.POST("/tenants/:tid/manage/rename", u.renameTenant)
	op.POST("/tenants/:tid/manage/state", u.setTenantState)
	op.POST("/tenants/:tid/manage/plan", u.setTenantPlan)
	op.POST("/tenants/:tid/manage/delete", u.deleteTenant)
	op.GET("/tenants/go", u.switchTenant) // the operator's tenant switcher (a GET form)
	op.GET("/audit", u.serverAuditPage)   // server-wide events: operators' logins, failures, lockouts
	op.GET("/users", u.usersPage)         // every user: roles, disabling, removal, reset links
	op.POST("/users/invite", u.inviteUser)
	op.POST("/users/invites/:iid/revoke", u.revokeOperatorInvite)
	op.POST("/users/:uid/role", u.setUserRole)
	op.POST("/users/:uid/disable", u.disableUser)
	op.POST("/users/:uid/remove", u.removeUser)
	op.POST("/users/:uid/reset-link", u.createResetLink)

	t := authed.Group("/tenants/:tid", u.requireTenant)
	t.GET("", u.tenantHome)
	t.GET("/limits", u.limitsPage)
	// Not below /limits/: "new" and "values" are valid limit names.
	t.GET("/limit-values", u.limitsValues) // htmx fragment: the live values table body
	t.GET("/new-limit", u.forChangers, u.newLimitForm)
	t.POST("/limits", u.createLimit)
	t.GET("/limits/:name", u.limitPage)
	t.GET("/limits/:name/keys", u.limitKeys) // htmx fragment: recent keys with values
	t.GET("/limits/:name/edit", u.forChangers, u.editLimitForm)
	t.POST("/limits/:name", u.updateLimit)
	t.POST("/limits/:name/reset", u.resetKey)
	t.GET("/limits/:name/reset-all", u.forChangers, u.resetAllConfirm)
	t.POST("/limits/:name/reset-all", u.resetAll)
	t.GET("/limits/:name/delete", u.forChangers, u.deleteLimitConfirm)
	t.POST("/limits/:name/delete", u.deleteLimit)
	t.GET("/limits/:name/enforce", u.forChangers, u.enforceConfirm) // shadow -> enforce: the confirmation
	t.POST("/limits/:name/enforce", u.enforce)
	t.GET("/limits/:name/overrides/new", u.forChangers, u.newOverrideForm)
	t.GET("/limits/:name/overrides/edit", u.forChangers, u.editOverrideForm) // ?match=…
	t.POST("/limits/:name/overrides", u.saveOverride)
	t.POST("/limits/:name/overrides/delete", u.deleteOverride)
	t.GET("/limits/:name/holds/:hid/release", u.forChangers, u.releaseHoldConfirm)
	t.POST("/limits/:name/holds/:hid/release", u.releaseHold)
	t.GET("/limits/:name/leases/:lid/release", u.forChangers, u.releaseLeaseConfirm)
	t.POST("/limits/:name/leases/:lid/release", u.releaseLease)
	t.GET("/keys", u.keysPage)
	t.POST("/keys", u.createKey)
	t.POST("/keys/:kid/revoke", u.revokeKey)
	t.GET("/captcha", u.captchaPage)
	t.POST("/captcha/settings", u.saveCaptchaSettings)
	t.POST("/captcha/keys", u.createPublishableKey)
	t.POST("/captcha/sessions/:hash/revoke", u.revokeSession)
	t.GET("/webhooks", u.webhooksPage)
	t.POST("/webhooks", u.createWebhook)
	t.GET("/webhooks/:id", u.webhookLog)
	t.POST("/webhooks/:id/test", u.testWebhook)
	t.POST("/webhooks/:id/delete", u.deleteWebhook)
	t.POST("/webhooks/:id/deliveries/:did/resend", u.resendWebhook)
	t.GET("/audit", u.auditPage)
	t.GET("/plan", u.planPage) // the tenant's plan and its use of it
	t.GET("/analytics", u.analyticsPage)
	t.GET("/analytics/panel", u.analyticsPanelFragment) // htmx fragment: refreshes every 10 s
	t.GET("/analytics/keys.csv", u.analyticsKeysCSV)
	t.GET("/analytics/ratio.csv", u.analyticsRatioCSV)
	t.GET("/members", u.membersPage)
	t.POST("/members/invite", u.inviteMember)
	t.POST("/members/:uid/role", u.setMemberRole)
	t.POST("/members/:uid/disable", u.disableMember)
	t.POST("/members/:uid/remove", u.removeMember)
	t.POST("/invites/:iid/revoke", u.revokeInvite)
}
