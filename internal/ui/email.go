package ui

import (
	"context"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/mail"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// With SMTP configured (Deps.Mailer), a new invite or password reset link is also emailed to
// its user, after the transaction that stored it has committed; the page still shows it once.
// A failure to send loses nothing: the page says so and the admin copies the link by hand.

// LinkMailer sends an email (mail.Sender).
type LinkMailer interface {
	Send(ctx context.Context, msg mail.Message) error
}

// What the page after the redirect says about the email (the third line of the one-time secret).
const (
	mailOff    = ""
	mailSent   = "sent"
	mailFailed = "failed: "
)

// emailLink emails link (of kind mail.LinkInvite or mail.LinkReset, described by inv) to its
// user and returns what the page should say: mailOff, mailSent, or mailFailed and the reason.
// It logs and audits the sending, never the link.
func (u *UI) emailLink(c *gin.Context, kind string, inv tenants.Invite, target, link string) string {
	if u.mailer == nil {
		return mailOff
	}
	ctx := c.Request.Context()
	tenant, role := "", ""
	if inv.TenantID != nil {
		t, err := u.tenants.Tenant(ctx, *inv.TenantID)
		if err != nil {
			u.log.WarnContext(ctx, "link not emailed: tenant", "kind", kind, "target", target, "err", err)
			return mailFailed + "its tenant could not be read"
		}
		tenant, role = t.Name, string(inv.Role)
	}
	if kind == mail.LinkReset {
		role = ""
	}
	// The invite is committed: a browser that goes away meanwhile does not cancel its email (the
	// sender's own timeout bounds it, below the request's).
	if err := u.mailer.Send(context.WithoutCancel(ctx), mail.LinkMessage(kind, inv.Email, tenant, role, link, inv.ExpiresAt)); err != nil {
		u.log.WarnContext(ctx, "link not emailed", "kind", kind, "target", target, "to", inv.Email, "err", err)
		return mailFailed + strings.TrimPrefix(err.Error(), "mail: ")
	}
	u.log.InfoContext(ctx, "link emailed", "kind", kind, "target", target, "to", inv.Email)
	if err := u.tenants.AuditLinkEmailed(ctx, inv.TenantID, actor(c), "user."+kind+"_emailed", target, inv.Email); err != nil {
		u.log.ErrorContext(ctx, "audit of an emailed link", "target", target, "err", err)
	}
	return mailSent
}

// oneTimeLink packs what the page after an invite or a reset shows once: whom for, the link,
// and what became of its email.
func oneTimeLink(email, link, mailed string) string { return email + "\n" + link + "\n" + mailed }

// readOneTimeLink unpacks oneTimeLink.
func readOneTimeLink(s string) (email, link, mailed string) {
	email, rest, _ := strings.Cut(s, "\n")
	link, mailed, _ = strings.Cut(rest, "\n")
	return email, link, mailed
}
