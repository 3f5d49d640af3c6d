package tenants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
)

// Role is what a dashboard user may do: an operator everything on every tenant; a tenant's
// admin everything on that tenant; a viewer reads that tenant and changes nothing.
type Role string

// The roles.
const (
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
	RoleViewer   Role = "viewer"
)

// ErrLastOperator refuses to remove, disable or demote the only active operator: nobody would be
// left to manage the server.
var ErrLastOperator = apperr.New(apperr.Conflict, "the last operator cannot be removed, disabled or demoted")

// ErrLastTenantAdmin refuses a tenant's member who would remove, disable or make a viewer of its
// only active admin: nobody of the tenant could change it any more, nor undo this.
var ErrLastTenantAdmin = apperr.New(apperr.Conflict, "the tenant's last admin cannot be removed, disabled or made a viewer "+
	"by its members: make another member an admin first (an operator still can)")

// DefaultLinkTTL is how long an invite or a password reset link stays valid.
const DefaultLinkTTL = 7 * 24 * time.Hour

// Kinds of one-time links.
const (
	linkInvite = "invite"
	linkReset  = "reset"
)

// CanChange reports whether u may change tenant tenantID: operators always, its admins.
func (u User) CanChange(tenantID int64) bool {
	return u.IsOperator || (u.Role == RoleAdmin && u.TenantID != nil && *u.TenantID == tenantID)
}

// Invite is a pending (or used, or expired) invitation to a tenant, or for an operator.
type Invite struct {
	ID        int64
	TenantID  *int64
	Email     string
	Role      Role
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    *time.Time
}

func inviteFromRow(r userTokenRow) Invite {
	return Invite{ID: r.ID, TenantID: r.TenantID, Email: r.Email, Role: Role(r.Role), CreatedBy: r.CreatedBy,
		CreatedAt: utc(r.CreatedAt), ExpiresAt: utc(r.ExpiresAt), UsedAt: utcPtr(r.UsedAt)}
}

// checkRole validates a role for a user of tenantID (nil: an operator).
func checkRole(role Role, tenantID *int64) error {
	switch {
	case role == RoleOperator && tenantID == nil:
		return nil
	case (role == RoleAdmin || role == RoleViewer) && tenantID != nil:
		return nil
	case tenantID == nil:
		return invalid("role", "a user without a tenant is an operator")
	default:
		return invalid("role", "role must be admin or viewer")
	}
}

// checkPassword is the password rule: at least MinPasswordLen characters (runes), at most
// maxPasswordLen bytes of UTF-8 (the bound only stops absurd inputs, and a login compares it
// with the bytes typed: passwordMatches). Its message says both units, so that a password of
// 400 "€" (1,200 bytes) is not told it breaks a rule of 1024 characters.
func checkPassword(field, password string) error {
	if n := utf8.RuneCountInString(password); n < MinPasswordLen || len(password) > maxPasswordLen {
		return invalid(field, "password must be at least %d characters and at most %d bytes (a character outside ASCII takes 2 to 4)",
			MinPasswordLen, maxPasswordLen)
	}
	return nil
}

// CheckPassword reports whether password meets the password rule (ErrInvalid for the field
// "password" if not), for a form that reports it beside other problems before calling the
// method that sets the password (which checks it again).
func CheckPassword(password string) error { return checkPassword("password", password) }

// newLinkToken returns a one-time link's token (256 random bits) and the hash that is stored.
func newLinkToken() (token, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	return token, hashSessionID(token)
}

func userTarget(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

// auditUserChange records a change to a user in the user's tenant log (if any) and in the
// server's security log, inside the caller's transaction.
func (s *Service) auditUserChange(tx *gorm.DB, tenantID *int64, actor, action, target, detail string) error {
	if tenantID != nil {
		if err := s.audit(tx, tenantID, actor, action, target, detail); err != nil {
			return err
		}
	}
	return s.audit(tx, nil, actor, action, target, detail)
}

// linkMaker is the user who makes a one-time link, when actor names one: the dashboard names its
// users "user:<email>" (other actors, such as the command line's "cli", are no user). That user
// must still exist and be allowed to make the link (ErrUnauthorized otherwise: removed, disabled
// or demoted since the request began), and is stored as the link's maker, so that losing that
// right deletes the link (dropLinksMadeBy).
func linkMaker(tx *gorm.DB, actor, kind string, tenantID *int64) (*int64, error) {
	row, named, err := actingUser(tx, actor)
	if err != nil || !named {
		return nil, err
	}
	if !mayMakeLink(userFromRow(row), kind, tenantID) {
		return nil, ErrUnauthorized
	}
	return &row.ID, nil
}

// actingUser is the user an audit actor names ("user:" and their email, as the dashboard names
// the user acting), read in tx; named is false for an actor that names no user (the command line,
// the system). A named user who no longer exists is ErrUnauthorized: nobody acts for them.
func actingUser(tx *gorm.DB, actor string) (row userRow, named bool, err error) {
	email, named := strings.CutPrefix(actor, "user:")
	if !named {
		return row, false, nil
	}
	if err := first(tx, &row, "email = ?", email); errors.Is(err, ErrNotFound) {
		return row, true, ErrUnauthorized
	} else if err != nil {
		return row, true, err
	}
	return row, true, nil
}

// mayMakeLink reports whether u may make a one-time link of kind for tenantID (nil: an operator's
// invite, or a reset link of any user): operators any, a tenant's admin only invites to it.
func mayMakeLink(u User, kind string, tenantID *int64) bool {
	switch {
	case u.DisabledAt != nil:
		return false
	case u.IsOperator:
		return true
	default:
		return kind == linkInvite && tenantID != nil && u.CanChange(*tenantID)
	}
}

// dropLinksMadeBy deletes the unused one-time links user id made that they may no longer make:
// all of them (role "": the user is removed or disabled), none for an operator, and for a
// tenant's admin all but their invites to that tenant. It returns how many it deleted.
func dropLinksMadeBy(tx *gorm.DB, id int64, role Role, tenant *int64) (int64, error) {
	q := tx.Where("created_by_user_id = ? AND used_at IS NULL", id)
	switch role {
	case RoleOperator:
		return 0, nil
	case RoleAdmin:
		q = tx.Where("created_by_user_id = ? AND used_at IS NULL AND (kind <> ? OR tenant_id IS NULL OR tenant_id <> ?)", id, linkInvite, *tenant)
	}
	res := q.Delete(&userTokenRow{})
	return res.RowsAffected, res.Error
}

// linksDropped is what an audit entry adds when a change to a user deleted links they made.
func linksDropped(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d unused link(s) they made deleted", n)
}

// CreateInvite invites email to tenantID with role (admin or viewer), or, with tenantID nil, as
// an operator (role RoleOperator). It returns the invite and its token, valid once within ttl
// (DefaultLinkTTL if ttl <= 0); only the token's hash is stored, so the caller shows the token
// once. An email that already has a user is ErrConflict (field "email"; its message says so only
// where that reveals nothing, see emailTaken); bad input ErrInvalid
// naming the field; an unknown tenant ErrNotFound. An actor that names a dashboard user is the
// invite's maker (linkMaker): ErrUnauthorized when that user may no longer invite, and the
// invite dies with their right to make it. Audited in the tenant's log and the server's.
func (s *Service) CreateInvite(ctx context.Context, tenantID *int64, email string, role Role, ttl time.Duration, actor string) (Invite, string, error) {
	email, err := newEmail(email)
	roleErr := checkRole(role, tenantID)
	if err != nil || roleErr != nil {
		return Invite{}, "", wrap("create invite", errors.Join(err, roleErr))
	}
	if ttl <= 0 {
		ttl = DefaultLinkTTL
	}
	token, hash := newLinkToken()
	var row userTokenRow
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		if tenantID != nil {
			if _, err := changeableTenant(tx, *tenantID); err != nil {
				return err
			}
		}
		maker, err := linkMaker(tx, actor, linkInvite, tenantID)
		if err != nil {
			return err
		}
		var existing userRow
		if err := first(tx, &existing, "email = ?", email); err == nil {
			if err := emailTaken(tx, existing, maker, tenantID); err != nil {
				return err
			}
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		now := s.clock()
		replaced, err := clearInvites(tx, tenantID, email, now)
		if err != nil {
			return err
		}
		row = userTokenRow{TenantID: tenantID, Kind: linkInvite, TokenHash: hash, Email: email, Role: string(role),
			CreatedBy: truncate(actor), CreatedByUserID: maker, CreatedAt: now, ExpiresAt: now.Add(ttl)}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		detail := fmt.Sprintf("%s as %s, expires %s", email, role, row.ExpiresAt.Format(time.RFC3339))
		if replaced > 0 {
			detail += fmt.Sprintf("; replaces %d unused invite(s) to the address", replaced)
		}
		return s.auditUserChange(tx, tenantID, actor, "user.invite", "invite:"+strconv.FormatInt(row.ID, 10), detail)
	})
	if err != nil {
		return Invite{}, "", wrap("create invite", err)
	}
	return inviteFromRow(row), token, nil
}

// clearInvites makes room for a new invite of email to tenantID (nil: the operators'), so that
// invites cannot pile up: it deletes the unused invites to that address (one link per address,
// the newest: an older one stops working) and returns how many, and it deletes the invites of
// the same tenant that expired more than DefaultLinkTTL before now unused (the members page shows
// an expired invite for that long).
func clearInvites(tx *gorm.DB, tenantID *int64, email string, now time.Time) (int64, error) {
	if err := unusedInvites(tx, tenantID).Where("expires_at < ?", now.Add(-DefaultLinkTTL)).Delete(&userTokenRow{}).Error; err != nil {
		return 0, err
	}
	res := unusedInvites(tx, tenantID).Where("email = ?", email).Delete(&userTokenRow{})
	return res.RowsAffected, res.Error
}

// unusedInvites selects the unused invites of tenantID (nil: the operators').
func unusedInvites(tx *gorm.DB, tenantID *int64) *gorm.DB {
	q := tx.Where("kind = ? AND used_at IS NULL", linkInvite)
	if tenantID == nil {
		return q.Where("tenant_id IS NULL")
	}
	return q.Where("tenant_id = ?", *tenantID)
}

// emailTaken is CreateInvite's answer when existing already has the invited email: a conflict on
// the email field, for an operator, an actor that is no dashboard user (maker nil), and about a
// member of the tenant invited to (whom the inviter sees in its members list anyway). To a
// tenant's admin about anyone else it is nil: the invite is made as for an address without an
// account (its acceptance then fails), so that the invite form does not tell them which emails
// have an account on the server. Accepting the link does tell whoever holds it (README, Members).
func emailTaken(tx *gorm.DB, existing userRow, maker *int64, tenantID *int64) error {
	e := ErrConflict.WithField("email")
	e.Message = "a user with this email exists"
	if tenantID == nil || maker == nil || (existing.TenantID != nil && *existing.TenantID == *tenantID) {
		return e
	}
	var inviter userRow
	if err := first(tx, &inviter, "id = ?", *maker); err != nil {
		return err
	}
	if inviter.IsOperator {
		return e
	}
	return nil
}

// ListInvites returns the invites of a tenant (nil: the operators' invites) not yet used,
// newest first, expired ones included (the page says so).
func (s *Service) ListInvites(ctx context.Context, tenantID *int64) ([]Invite, error) {
	var rows []userTokenRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return unusedInvites(tx, tenantID).Order("id DESC").Limit(1000).Find(&rows).Error
	})
	if err != nil {
		return nil, wrap("list invites", err)
	}
	return fromRows(rows, inviteFromRow), nil
}

// liveToken loads the unused, unexpired link of kind with this token, or ErrNotFound.
func (s *Service) liveToken(tx *gorm.DB, kind, token string) (userTokenRow, error) {
	var row userTokenRow
	if len(token) != 64 {
		return row, ErrNotFound
	}
	if err := first(tx, &row, "token_hash = ? AND kind = ?", hashSessionID(token), kind); err != nil {
		return row, err
	}
	if row.UsedAt != nil || !s.clock().Before(row.ExpiresAt) {
		return row, ErrNotFound
	}
	return row, nil
}

// InviteByToken returns the live invite of token: ErrNotFound when it is unknown, used or expired;
// ErrTenantBeingDeleted when its tenant is being deleted (AcceptInvite would refuse it).
func (s *Service) InviteByToken(ctx context.Context, token string) (Invite, error) {
	var row userTokenRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) (err error) {
		if row, err = s.liveToken(tx, linkInvite, token); err != nil || row.TenantID == nil {
			return err
		}
		_, err = changeableTenant(tx, *row.TenantID)
		return err
	})
	if err != nil {
		return Invite{}, wrap("invite", err)
	}
	return inviteFromRow(row), nil
}

// AcceptInvite uses an invite: it creates the user with the invite's email, tenant and role and
// the given password (ErrInvalid, field "password", when too short or long), and marks the link
// used. A link that is unknown, used or expired is ErrNotFound; an email taken meanwhile
// ErrConflict; an invitation to a tenant being deleted ErrTenantBeingDeleted. Audited as the new
// user ("user.join").
func (s *Service) AcceptInvite(ctx context.Context, token, password string) (User, error) {
	if err := checkPassword("password", password); err != nil {
		return User{}, wrap("accept invite", err)
	}
	hash := hashPassword(password)
	var user userRow
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		inv, err := s.liveToken(tx, linkInvite, token)
		if err != nil {
			return err
		}
		if inv.TenantID != nil {
			if _, err := changeableTenant(tx, *inv.TenantID); err != nil {
				return err
			}
		}
		var n int64
		if err := tx.Model(&userRow{}).Where("email = ?", inv.Email).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return ErrConflict
		}
		now := s.clock()
		role := inv.Role
		if role == string(RoleOperator) {
			role = string(RoleAdmin) // operators are is_operator; the column is a member's role
		}
		user = userRow{Email: inv.Email, PasswordHash: hash, TenantID: inv.TenantID, IsOperator: inv.TenantID == nil,
			Role: role, CreatedAt: now}
		if err := tx.Create(&user).Error; err != nil {
			return err
		}
		if err := tx.Model(&userTokenRow{}).Where("id = ?", inv.ID).Update("used_at", now).Error; err != nil {
			return err
		}
		return s.auditUserChange(tx, inv.TenantID, user.Email, "user.join", userTarget(user.ID),
			fmt.Sprintf("accepted invite %d from %s as %s", inv.ID, inv.CreatedBy, inv.Role))
	})
	if err != nil {
		return User{}, wrap("accept invite", err)
	}
	return userFromRow(user), nil
}

// RevokeInvite deletes an unused invite of tenantID (nil: an operator invite), audited.
func (s *Service) RevokeInvite(ctx context.Context, tenantID *int64, id int64, actor string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var row userTokenRow
		if err := unusedInvites(tx, tenantID).Where("id = ?", id).Take(&row).Error; errors.Is(err, gorm.ErrRecordNotFound) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if err := tx.Delete(&userTokenRow{}, row.ID).Error; err != nil {
			return err
		}
		return s.auditUserChange(tx, tenantID, actor, "user.invite.revoke", "invite:"+strconv.FormatInt(id, 10), row.Email)
	})
	return wrap("revoke invite", err)
}

// memberOf loads user id, which must belong to tenant scope (nil: any user), or ErrNotFound.
func memberOf(tx *gorm.DB, scope *int64, id int64) (userRow, error) {
	var row userRow
	if err := first(tx, &row, "id = ?", id); err != nil {
		return row, err
	}
	if scope != nil && (row.TenantID == nil || *row.TenantID != *scope) {
		return row, ErrNotFound
	}
	return row, nil
}

// lastOperator reports whether row is an active operator and no other active operator exists.
func lastOperator(tx *gorm.DB, row userRow) (bool, error) {
	if !row.IsOperator || row.DisabledAt != nil {
		return false, nil
	}
	var n int64
	err := tx.Model(&userRow{}).Where("is_operator = ? AND disabled_at IS NULL AND id <> ?", true, row.ID).Count(&n).Error
	return n == 0, err
}

// lastTenantAdmin returns ErrLastTenantAdmin when a member of the tenant (actor, named as the
// dashboard names the user acting: "user:" and their email) changes, on the tenant's own page
// (scope set), its only active admin. Operators and the command line act from outside the
// tenant and may (the tenant's deletion sets the rule aside: removeUser). Two admins demoting, disabling or removing each other at once
// are two transactions that each read the other still an admin: serializable, one of them
// retries and is refused (a removed actor is no longer there to act).
func lastTenantAdmin(tx *gorm.DB, scope *int64, row userRow, actor string) error {
	if scope == nil || row.IsOperator || row.DisabledAt != nil || row.Role != string(RoleAdmin) {
		return nil
	}
	// A member removed since they asked (another admin removing them at the same moment, whom
	// this change would leave last) is refused: nobody acts for a user who is gone.
	acting, named, err := actingUser(tx, actor)
	if errors.Is(err, ErrUnauthorized) {
		return fmt.Errorf("the acting user no longer exists: %w", err)
	}
	if err != nil || !named || acting.IsOperator {
		return err
	}
	var n int64
	err = tx.Model(&userRow{}).Where("tenant_id = ? AND role = ? AND is_operator = ? AND disabled_at IS NULL AND id <> ?",
		*scope, string(RoleAdmin), false, row.ID).Count(&n).Error
	if err == nil && n == 0 {
		err = ErrLastTenantAdmin
	}
	return err
}

// endSessions revokes every live session of user id but keep (a session ID, or "").
func (s *Service) endSessions(tx *gorm.DB, id int64, keep string) error {
	q := tx.Model(&adminSessionRow{}).Where("user_id = ? AND revoked_at IS NULL", id)
	if keep != "" {
		q = q.Where("id_hash <> ?", hashSessionID(keep))
	}
	return q.Update("revoked_at", s.clock()).Error
}

func roleName(r userRow) Role { return userFromRow(r).Role }

// SetRole gives user id a new role: admin or viewer of tenant (which must then be set), or
// operator (tenant nil). With scope set (a tenant's admin acting) the user must be a member of
// scope and stays one. Demoting the last active operator is ErrLastOperator. Audited with the
// role before and after, in the tenant logs concerned and the server's.
func (s *Service) SetRole(ctx context.Context, scope *int64, id int64, role Role, tenant *int64, actor string) error {
	if err := checkRole(role, tenant); err != nil {
		return wrap("set role", err)
	}
	if scope != nil && (tenant == nil || *tenant != *scope) {
		return wrap("set role", invalid("role", "role must be admin or viewer"))
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row, err := memberOf(tx, scope, id)
		if err != nil {
			return err
		}
		if tenant != nil {
			if _, err := changeableTenant(tx, *tenant); errors.Is(err, ErrNotFound) {
				return invalid("tenant", "choose an existing tenant for an admin or a viewer")
			} else if err != nil {
				return err
			}
		}
		if role != RoleOperator {
			if last, err := lastOperator(tx, row); err != nil {
				return err
			} else if last {
				return ErrLastOperator
			}
		}
		if role != RoleAdmin {
			if err := lastTenantAdmin(tx, scope, row, actor); err != nil {
				return err
			}
		}
		before := describeRole(tx, roleName(row), row.TenantID)
		after := describeRole(tx, role, tenant)
		if before == after {
			return nil
		}
		newRole := string(role)
		if role == RoleOperator {
			newRole = string(RoleAdmin)
		}
		if err := tx.Model(&userRow{}).Where("id = ?", id).Updates(map[string]any{
			"role": newRole, "is_operator": role == RoleOperator, "tenant_id": tenant,
		}).Error; err != nil {
			return err
		}
		dropped, err := dropLinksMadeBy(tx, id, role, tenant)
		if err != nil {
			return err
		}
		detail := func(before, after string) string {
			return row.Email + ": " + before + " → " + after + linksDropped(dropped)
		}
		if row.TenantID == nil || (tenant != nil && *tenant == *row.TenantID) {
			return s.auditUserChange(tx, tenant, actor, "user.role", userTarget(id), detail(before, after))
		}
		// A move between tenants is in both tenants' logs, each naming only its own tenant (an
		// admin of one may not learn the other's name); the server's log names both.
		const elsewhere = "member of another tenant"
		became := after // "operator"
		if tenant != nil {
			became = elsewhere
		}
		if err := s.audit(tx, row.TenantID, actor, "user.role", userTarget(id), detail(before, became)); err != nil {
			return err
		}
		if tenant != nil {
			if err := s.audit(tx, tenant, actor, "user.role", userTarget(id), detail(elsewhere, after)); err != nil {
				return err
			}
		}
		return s.audit(tx, nil, actor, "user.role", userTarget(id), detail(before, after))
	})
	return wrap("set role", err)
}

// describeRole names a role for the audit log: "operator", or "viewer of acme".
func describeRole(tx *gorm.DB, role Role, tenant *int64) string {
	if role == RoleOperator || tenant == nil {
		return string(RoleOperator)
	}
	var t tenantRow
	if err := first(tx, &t, "id = ?", *tenant); err != nil {
		return string(role) + " of tenant " + strconv.FormatInt(*tenant, 10)
	}
	return string(role) + " of " + t.Name
}

// RemoveUser deletes user id (with scope set, a member of that tenant only: ErrNotFound
// otherwise); their sessions end at once. Removing the last active operator is ErrLastOperator.
// Audited in the tenant's log and the server's.
func (s *Service) RemoveUser(ctx context.Context, scope *int64, id int64, actor string) error {
	return s.removeUser(ctx, scope, id, actor, true)
}

// removeUser is RemoveUser; keepAnAdmin false sets the last-admin rule aside (the tenant's
// deletion, which removes every member whoever is left).
func (s *Service) removeUser(ctx context.Context, scope *int64, id int64, actor string, keepAnAdmin bool) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row, err := memberOf(tx, scope, id)
		if err != nil {
			return err
		}
		if last, err := lastOperator(tx, row); err != nil {
			return err
		} else if last {
			return ErrLastOperator
		}
		if keepAnAdmin {
			if err := lastTenantAdmin(tx, scope, row, actor); err != nil {
				return err
			}
		}
		if err := tx.Where("user_id = ?", id).Delete(&adminSessionRow{}).Error; err != nil {
			return err
		}
		if err := tx.Where("user_id = ?", id).Delete(&userTokenRow{}).Error; err != nil {
			return err
		}
		dropped, err := dropLinksMadeBy(tx, id, "", nil)
		if err != nil {
			return err
		}
		if err := tx.Delete(&userRow{}, id).Error; err != nil {
			return err
		}
		return s.auditUserChange(tx, row.TenantID, actor, "user.remove", userTarget(id), row.Email+" ("+string(roleName(row))+")"+linksDropped(dropped))
	})
	return wrap("remove user", err)
}

// UserByEmail returns the user with this email, or ErrNotFound.
func (s *Service) UserByEmail(ctx context.Context, email string) (User, error) {
	e, err := normalizeEmail(email)
	if err != nil {
		return User{}, wrap("user by email", ErrNotFound)
	}
	var row userRow
	if err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "email = ?", e) }); err != nil {
		return User{}, wrap("user by email", err)
	}
	return userFromRow(row), nil
}

// SetDisabled disables (or enables) user id, with scope as RemoveUser. A disabled user cannot
// log in and their sessions end at once. Disabling the last active operator is
// ErrLastOperator. Audited.
func (s *Service) SetDisabled(ctx context.Context, scope *int64, id int64, disabled bool, actor string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row, err := memberOf(tx, scope, id)
		if err != nil {
			return err
		}
		if (row.DisabledAt != nil) == disabled {
			return nil
		}
		var at *time.Time
		var dropped int64
		action := "user.enable"
		if disabled {
			if last, err := lastOperator(tx, row); err != nil {
				return err
			} else if last {
				return ErrLastOperator
			}
			if err := lastTenantAdmin(tx, scope, row, actor); err != nil {
				return err
			}
			now := s.clock()
			at, action = &now, "user.disable"
			if err := s.endSessions(tx, id, ""); err != nil {
				return err
			}
			if err := dropResetLinks(tx, id); err != nil {
				return err
			}
			if dropped, err = dropLinksMadeBy(tx, id, "", nil); err != nil {
				return err
			}
		}
		if err := tx.Model(&userRow{}).Where("id = ?", id).Update("disabled_at", at).Error; err != nil {
			return err
		}
		return s.auditUserChange(tx, row.TenantID, actor, action, userTarget(id), row.Email+linksDropped(dropped))
	})
	return wrap("set disabled", err)
}

// ChangePassword changes user id's password: current must be right (ErrInvalid, field
// "current"), the new one follows CreateUser's rule (field "password"); every session of the
// user but keep (the session making the change) ends. Both problems are reported at once. A
// wrong current password is audited ("user.password_failed", with clientAddr) like a failed
// login: a stolen session guessing the password shows in the logs.
func (s *Service) ChangePassword(ctx context.Context, id int64, current, password, keep, clientAddr string) error {
	var row userRow
	if err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "id = ?", id) }); err != nil {
		return wrap("change password", err)
	}
	var curErr error
	if !passwordMatches(row.PasswordHash, current) {
		curErr = invalid("current", "the current password is not right")
		err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
			return s.auditUserChange(tx, row.TenantID, row.Email, "user.password_failed", userTarget(row.ID),
				"client "+clientAddr+"; wrong current password")
		})
		if err != nil {
			return wrap("change password", err)
		}
	}
	if err := errors.Join(curErr, checkPassword("password", password)); err != nil {
		return wrap("change password", err)
	}
	return wrap("change password", s.setPassword(ctx, row, password, keep, row.Email, "user.password", "changed by the user"))
}

// SetPassword sets user id's password (the CLI's `user passwd`), ending every session of theirs.
func (s *Service) SetPassword(ctx context.Context, id int64, password, actor string) error {
	if err := checkPassword("password", password); err != nil {
		return wrap("set password", err)
	}
	var row userRow
	if err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "id = ?", id) }); err != nil {
		return wrap("set password", err)
	}
	return wrap("set password", s.setPassword(ctx, row, password, "", actor, "user.password", "set by "+actor))
}

func (s *Service) setPassword(ctx context.Context, row userRow, password, keep, actor, action, detail string) error {
	hash := hashPassword(password)
	return s.db.Serializable(ctx, func(tx *gorm.DB) error {
		if err := tx.Model(&userRow{}).Where("id = ?", row.ID).Update("password_hash", hash).Error; err != nil {
			return err
		}
		if err := s.endSessions(tx, row.ID, keep); err != nil {
			return err
		}
		if err := dropResetLinks(tx, row.ID); err != nil {
			return err
		}
		return s.auditUserChange(tx, row.TenantID, actor, action, userTarget(row.ID), row.Email+": "+detail+"; other sessions ended")
	})
}

// dropResetLinks makes user id's unused reset links stop working: a password they set themselves
// (or one an operator set) and a disabled account leave no older way in.
func dropResetLinks(tx *gorm.DB, id int64) error {
	return tx.Where("user_id = ? AND kind = ? AND used_at IS NULL", id, linkReset).Delete(&userTokenRow{}).Error
}

// CreateResetLink makes a one-time password reset link for user id (an operator's action),
// valid within ttl (DefaultLinkTTL if <= 0). Only its hash is stored; earlier unused reset links
// of the user stop working. Audited.
func (s *Service) CreateResetLink(ctx context.Context, id int64, ttl time.Duration, actor string) (string, error) {
	_, token, err := s.NewResetLink(ctx, id, ttl, actor)
	return token, err
}

// NewResetLink is CreateResetLink returning also what the link is for: the user's email, tenant
// and role, and when the link expires (as an Invite value), so that it can be emailed. An actor
// that names a dashboard user is the link's maker, as for CreateInvite.
func (s *Service) NewResetLink(ctx context.Context, id int64, ttl time.Duration, actor string) (Invite, string, error) {
	if ttl <= 0 {
		ttl = DefaultLinkTTL
	}
	token, hash := newLinkToken()
	var link userTokenRow
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var row userRow
		if err := first(tx, &row, "id = ?", id); err != nil {
			return err
		}
		maker, err := linkMaker(tx, actor, linkReset, nil)
		if err != nil {
			return err
		}
		if err := dropResetLinks(tx, id); err != nil {
			return err
		}
		now := s.clock()
		link = userTokenRow{TenantID: row.TenantID, Kind: linkReset, TokenHash: hash, Email: row.Email, Role: string(roleName(row)),
			UserID: &row.ID, CreatedBy: truncate(actor), CreatedByUserID: maker, CreatedAt: now, ExpiresAt: now.Add(ttl)}
		if err := tx.Create(&link).Error; err != nil {
			return err
		}
		return s.auditUserChange(tx, row.TenantID, actor, "user.reset_link", userTarget(id), row.Email+", expires "+link.ExpiresAt.Format(time.RFC3339))
	})
	if err != nil {
		return Invite{}, "", wrap("create reset link", err)
	}
	return inviteFromRow(link), token, nil
}

// AuditLinkEmailed records that a one-time link (an invite's, or a password reset's) was
// emailed to email: never the link itself. action is "user.invite_emailed" or
// "user.reset_emailed"; the entry goes to the tenant's log (if any) and the server's.
func (s *Service) AuditLinkEmailed(ctx context.Context, tenantID *int64, actor, action, target, email string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		return s.auditUserChange(tx, tenantID, actor, action, target, "emailed to "+email)
	})
	return wrap("audit email", err)
}

// ResetUser returns the user a live reset link is for: ErrNotFound when the link is unknown,
// used or expired.
func (s *Service) ResetUser(ctx context.Context, token string) (User, error) {
	var user userRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		link, err := s.liveToken(tx, linkReset, token)
		if err != nil || link.UserID == nil {
			return errors.Join(err, ErrNotFound)
		}
		return first(tx, &user, "id = ?", *link.UserID)
	})
	if err != nil {
		return User{}, wrap("reset user", err)
	}
	return userFromRow(user), nil
}

// ResetPassword uses a reset link: the user's password becomes password (field "password"), the
// link is used up and every session of the user ends. ErrNotFound for a dead link.
func (s *Service) ResetPassword(ctx context.Context, token, password string) (User, error) {
	if err := checkPassword("password", password); err != nil {
		return User{}, wrap("reset password", err)
	}
	hash := hashPassword(password)
	var user userRow
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		link, err := s.liveToken(tx, linkReset, token)
		if err != nil || link.UserID == nil {
			return errors.Join(err, ErrNotFound)
		}
		if err := first(tx, &user, "id = ?", *link.UserID); err != nil {
			return err
		}
		now := s.clock()
		if err := tx.Model(&userTokenRow{}).Where("id = ?", link.ID).Update("used_at", now).Error; err != nil {
			return err
		}
		if err := tx.Model(&userRow{}).Where("id = ?", user.ID).Update("password_hash", hash).Error; err != nil {
			return err
		}
		user.PasswordHash = hash // the user returned logs in with the new password
		if err := s.endSessions(tx, user.ID, ""); err != nil {
			return err
		}
		return s.auditUserChange(tx, user.TenantID, user.Email, "user.password_reset", userTarget(user.ID),
			fmt.Sprintf("%s: reset with the link of %s; sessions ended", user.Email, link.CreatedBy))
	})
	if err != nil {
		return User{}, wrap("reset password", err)
	}
	return userFromRow(user), nil
}
