package mail

import (
	"strings"
	"time"
)

// Link kinds: what a one-time link does.
const (
	LinkInvite = "invite"
	LinkReset  = "reset"
)

// LinkMessage is the email carrying a one-time link of kind (LinkInvite or LinkReset) to to:
// the link, the tenant it is for ("" for an operator, who has none), its role for an invite,
// and when it expires.
func LinkMessage(kind, to, tenant, role, link string, expires time.Time) Message {
	where := "the Sluice server, as an operator"
	if tenant != "" {
		where = "the tenant " + quoteName(tenant) + " on Sluice"
		if role != "" {
			where += ", as " + role
		}
	}
	var subject, intro, action string
	if kind == LinkReset {
		subject = "Reset your Sluice password"
		intro = "An operator made a link for you to choose a new password for your account on " + where + "."
		action = "Open this link to choose a new password"
	} else {
		subject = "You are invited to Sluice"
		if tenant != "" {
			subject = "You are invited to " + quoteName(tenant) + " on Sluice"
		}
		intro = "You are invited to " + where + "."
		action = "Open this link to choose a password and join"
	}
	var b strings.Builder
	b.WriteString("Hello,\n\n" + intro + "\n\n" + action + ":\n\n" + link + "\n\n")
	b.WriteString("The link works once and expires " + expires.UTC().Format("Mon, 2 Jan 2006 15:04 MST") + ".\n")
	b.WriteString("If you did not expect this email, ignore it.\n")
	return Message{To: to, Subject: subject, Body: b.String()}
}

// quoteName quotes a tenant name for a sentence, its line breaks (none are possible in a tenant
// name, but the subject must never hold one) turned into spaces.
func quoteName(name string) string {
	return "\u201c" + strings.NewReplacer("\r", " ", "\n", " ").Replace(name) + "\u201d"
}
