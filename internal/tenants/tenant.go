package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/hostname"
)

// Tenant is one customer of the service; every limit, key and session belongs to exactly one.
type Tenant struct {
	ID                int64
	Name              string
	AllowedOrigins    []string // origins ("https://host[:port]") allowed to fetch captcha challenges
	CaptchaDifficulty int      // proof-of-work difficulty (maximum number the client searches)
	CreatedAt         time.Time
	// SuspendedAt is when an operator suspended the tenant (nil: active). A suspended tenant's
	// API keys are refused with ErrTenantSuspended; its data is kept.
	SuspendedAt *time.Time
	// Deleting is true once its deletion has begun (DeleteTenant): it stays suspended, and
	// nothing can be changed in it, until the deletion ends.
	Deleting bool
}

// Captcha difficulty bounds: below the minimum the proof of work costs a bot nothing; above the
// maximum a phone takes too long to solve it.
const (
	MinCaptchaDifficulty = 1000
	MaxCaptchaDifficulty = 5_000_000
	maxAllowedOrigins    = 100
)

// namePattern is the naming rule shared with limit names (DESIGN §4), so a tenant name is
// always safe in URLs, logs and metric labels.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func tenantFromRow(r tenantRow) Tenant {
	var origins []string
	if r.AllowedOrigins != "" {
		origins = strings.Split(r.AllowedOrigins, "\n")
	}
	return Tenant{
		ID:                r.ID,
		Name:              r.Name,
		AllowedOrigins:    origins,
		CaptchaDifficulty: r.CaptchaDifficulty,
		CreatedAt:         utc(r.CreatedAt),
		SuspendedAt:       utcPtr(r.SuspendedAt),
		Deleting:          r.DeletingAt != nil,
	}
}

// State is the tenant's state as the command line and the dashboard name it: "active",
// "suspended", or "being deleted" (a deletion begun, and perhaps cut short: deleting it again
// finishes it).
func (t Tenant) State() string {
	switch {
	case t.Deleting:
		return "being deleted"
	case t.SuspendedAt != nil:
		return "suspended"
	}
	return "active"
}

// changeableTenant reads tenant id inside a transaction that changes something in it:
// ErrNotFound for no such tenant, ErrTenantBeingDeleted once its deletion has begun, since what
// the change made would be deleted with it (a member moved in, a key, a link, a plan), unaudited,
// or would undo the deletion's suspension.
func changeableTenant(tx *gorm.DB, id int64) (tenantRow, error) {
	var row tenantRow
	if err := first(tx, &row, "id = ?", id); err != nil {
		return tenantRow{}, err
	}
	if row.DeletingAt != nil {
		return tenantRow{}, ErrTenantBeingDeleted
	}
	return row, nil
}

// CreateTenant creates a tenant with the default captcha settings. The name must match
// ^[A-Za-z0-9_.:-]{1,128}$ (ErrInvalid); a taken name, in any case, is ErrConflict.
func (s *Service) CreateTenant(ctx context.Context, name string) (Tenant, error) {
	return s.createTenant(ctx, name, "")
}

// CreateTenantBy is CreateTenant for actor (the dashboard's user, "cli"), recorded as
// tenant.create in the tenant's log and the security log by the transaction that creates it: a
// tenant exists if and only if its creation is audited.
func (s *Service) CreateTenantBy(ctx context.Context, name, actor string) (Tenant, error) {
	return s.createTenant(ctx, name, actor)
}

// createTenant is CreateTenant, audited for actor unless actor is "".
func (s *Service) createTenant(ctx context.Context, name, actor string) (Tenant, error) {
	if !namePattern.MatchString(name) {
		return Tenant{}, wrap("create tenant", invalid("name", "name must match %s", namePattern))
	}
	var row tenantRow
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		// Check first so that the common duplicate case is a clean ErrConflict on both dialects;
		// a concurrent insert that slips past is a unique violation, which db retries into this
		// check, or (a name in another case) a serialization failure, likewise.
		if err := checkNameFree(tx, name, 0); err != nil {
			return err
		}
		row = tenantRow{Name: name, CaptchaDifficulty: 50000, CreatedAt: s.clock()}
		if err := tx.Create(&row).Error; err != nil || actor == "" {
			return err
		}
		return s.auditTenantAndServer(tx, row.ID, actor, "tenant.create", name)
	})
	if err != nil {
		return Tenant{}, wrap("create tenant", err)
	}
	return tenantFromRow(row), nil
}

// checkNameFree returns ErrConflict when a tenant other than except has name in any case:
// "Acme" beside "acme" would be two tenants an operator cannot tell apart in a list, a log or an
// audit entry. (The names are ASCII, which lower folds alike on both dialects.)
func checkNameFree(tx *gorm.DB, name string, except int64) error {
	var n int64
	if err := tx.Model(&tenantRow{}).Where("lower(name) = lower(?) AND id <> ?", name, except).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return ErrConflict
	}
	return nil
}

// Tenant returns the tenant with the given ID, or ErrNotFound.
func (s *Service) Tenant(ctx context.Context, id int64) (Tenant, error) {
	var row tenantRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "id = ?", id) })
	if err != nil {
		return Tenant{}, wrap("tenant", err)
	}
	return tenantFromRow(row), nil
}

// TenantByName returns the tenant with the given name or, when none has it exactly, the one
// tenant whose name is it in another case (names are compared ignoring case: checkNameFree);
// ErrNotFound when there is none, or several look-alikes made before that rule.
func (s *Service) TenantByName(ctx context.Context, name string) (Tenant, error) {
	if !namePattern.MatchString(name) {
		return Tenant{}, wrap("tenant by name", ErrNotFound) // cannot exist; and keeps odd bytes away from SQL
	}
	var row tenantRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		err := first(tx, &row, "name = ?", name)
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		var rows []tenantRow
		if err := tx.Where("lower(name) = lower(?)", name).Limit(2).Find(&rows).Error; err != nil {
			return err
		}
		if len(rows) != 1 {
			return ErrNotFound
		}
		row = rows[0]
		return nil
	})
	if err != nil {
		return Tenant{}, wrap("tenant by name", err)
	}
	return tenantFromRow(row), nil
}

// ListTenants returns every tenant ordered by name. It is for operators only.
func (s *Service) ListTenants(ctx context.Context) ([]Tenant, error) {
	var rows []tenantRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return tx.Order("name").Find(&rows).Error })
	if err != nil {
		return nil, wrap("list tenants", err)
	}
	return fromRows(rows, tenantFromRow), nil
}

// RenameTenant gives a tenant a new name (the rule of CreateTenant; another tenant's name, in
// any case, is ErrConflict, an unknown tenant ErrNotFound), audited in the tenant's log and the
// server's.
func (s *Service) RenameTenant(ctx context.Context, id int64, name, actor string) error {
	if !namePattern.MatchString(name) {
		return wrap("rename tenant", invalid("name", "name must match %s", namePattern))
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		old, err := changeableTenant(tx, id)
		if err != nil {
			return err
		}
		if old.Name == name {
			return nil
		}
		if err := checkNameFree(tx, name, id); err != nil {
			return err
		}
		if err := tx.Model(&tenantRow{}).Where("id = ?", id).Update("name", name).Error; err != nil {
			return err
		}
		return s.auditTenantAndServer(tx, id, actor, "tenant.rename", old.Name+" → "+name)
	})
	return wrap("rename tenant", err)
}

// SetSuspended suspends (suspend true) or resumes a tenant, audited in the tenant's log and the
// server's. Suspension takes effect at once on this instance and, on PostgreSQL, on every
// instance that listens (the key cache is dropped everywhere); at worst within the key cache's
// TTL. Suspending a suspended tenant (or resuming an active one) changes nothing.
// A tenant being deleted cannot be resumed (ErrTenantBeingDeleted).
func (s *Service) SetSuspended(ctx context.Context, id int64, suspend bool, actor string) error {
	return wrap("set suspended", s.setSuspended(ctx, id, suspend, false, actor))
}

// setSuspended is SetSuspended; with deleting (DeleteTenant's first step) it also marks the
// tenant's deletion begun, in the same transaction.
func (s *Service) setSuspended(ctx context.Context, id int64, suspend, deleting bool, actor string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var row tenantRow
		if err := first(tx, &row, "id = ?", id); err != nil {
			return err
		}
		if row.DeletingAt != nil && !suspend {
			return ErrTenantBeingDeleted
		}
		if deleting && row.DeletingAt == nil {
			if err := tx.Model(&tenantRow{}).Where("id = ?", id).Update("deleting_at", s.clock()).Error; err != nil {
				return err
			}
		}
		if (row.SuspendedAt != nil) == suspend {
			return nil
		}
		var at *time.Time
		action := "tenant.resume"
		if suspend {
			now := s.clock()
			at, action = &now, "tenant.suspend"
		}
		if err := tx.Model(&tenantRow{}).Where("id = ?", id).Update("suspended_at", at).Error; err != nil {
			return err
		}
		// Every instance forgets every cached key (an empty payload), so that none keeps
		// admitting the tenant's keys from its cache.
		if err := db.Notify(tx, s.db.Dialect, revocationChannel, ""); err != nil {
			return err
		}
		return s.auditTenantAndServer(tx, id, actor, action, row.Name)
	})
	if err == nil {
		s.forgetKey("")
	}
	return err
}

// auditTenantAndServer records an operator's change of tenant id in the tenant's log and in the
// server's security log, inside the caller's transaction.
func (s *Service) auditTenantAndServer(tx *gorm.DB, id int64, actor, action, detail string) error {
	target := "tenant:" + strconv.FormatInt(id, 10)
	if err := s.audit(tx, &id, actor, action, target, detail); err != nil {
		return err
	}
	return s.audit(tx, nil, actor, action, target, detail)
}

// UpdateCaptchaSettings replaces a tenant's allowed origins and captcha difficulty. Each origin
// must be http(s)://host[:port] without path, query or credentials (a single trailing "/" is
// tolerated and removed); origins are lower-cased and de-duplicated because browsers send the
// Origin header in that canonical form. difficulty must be within
// [MinCaptchaDifficulty, MaxCaptchaDifficulty]. Bad input is ErrInvalid; an unknown tenant is
// ErrNotFound. The change is audited as actor in the same transaction.
func (s *Service) UpdateCaptchaSettings(ctx context.Context, tenantID int64, origins []string, difficulty int, actor string) error {
	canon, err := NormalizeOrigins(origins)
	if err != nil {
		return wrap("update captcha settings", err)
	}
	if difficulty < MinCaptchaDifficulty || difficulty > MaxCaptchaDifficulty {
		return wrap("update captcha settings", invalid("difficulty", "difficulty must be between %d and %d", MinCaptchaDifficulty, MaxCaptchaDifficulty))
	}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		old, err := changeableTenant(tx, tenantID)
		if err != nil {
			return err
		}
		res := tx.Model(&tenantRow{}).Where("id = ?", tenantID).Updates(map[string]any{
			"allowed_origins":    strings.Join(canon, "\n"),
			"captcha_difficulty": difficulty,
		})
		if res.Error != nil {
			return res.Error
		}
		before := captchaDetail(old.CaptchaDifficulty, tenantFromRow(old).AllowedOrigins)
		return s.audit(tx, &tenantID, actor, "captcha.settings", "tenant:"+strconv.FormatInt(tenantID, 10),
			before+" → "+captchaDetail(difficulty, canon))
	})
	return wrap("update captcha settings", err)
}

// captchaDetail describes captcha settings in the audit log.
func captchaDetail(difficulty int, origins []string) string {
	if len(origins) == 0 {
		return fmt.Sprintf("difficulty %d, no origins", difficulty)
	}
	return fmt.Sprintf("difficulty %d, origins %s", difficulty, strings.Join(origins, " "))
}

// NormalizeOrigins validates origins (see UpdateCaptchaSettings) and returns them in canonical
// form, or an error wrapping ErrInvalid that names the first bad one.
func NormalizeOrigins(origins []string) ([]string, error) {
	if len(origins) > maxAllowedOrigins {
		return nil, invalid("origins", "at most %d allowed origins", maxAllowedOrigins)
	}
	out := make([]string, 0, len(origins))
	for _, o := range origins {
		c, err := normalizeOrigin(o)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

var hostPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

func normalizeOrigin(raw string) (string, error) {
	o := strings.ToLower(strings.TrimSpace(raw))
	o = strings.TrimSuffix(o, "/")
	bad := func(why string) (string, error) {
		return "", invalid("origins", "origin %q: %s", raw, why)
	}
	if len(o) > 300 {
		return bad("too long")
	}
	u, err := url.Parse(o)
	if err != nil {
		return bad("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("scheme must be http or https")
	}
	if u.Opaque != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.Contains(o, "#") {
		return bad("must be scheme://host[:port] with nothing after it")
	}
	host := u.Hostname()
	switch {
	case host == "":
		return bad("missing host")
	case strings.HasPrefix(u.Host, "["):
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("invalid IPv6 address")
		}
		if a.Is4In6() {
			return bad("an IPv4-mapped IPv6 address is not taken (browsers send it in another form, [::ffff:7f00:1]); serve the page from the IPv4 address (" + a.Unmap().String() + ") and allow that")
		}
		host = "[" + a.String() + "]" // as a browser serialises it: lower case, zeros compressed
	case !hostPattern.MatchString(host):
		return bad("invalid host")
	case hostname.EndsInANumber(host):
		// A browser reads such a host as an IPv4 address (127.1, 0x7f.0.0.1) and sends it as four
		// decimal numbers: any other spelling would be saved and never match.
		if a, err := netip.ParseAddr(host); err != nil || !a.Is4() || a.String() != host {
			return bad("an IPv4 address must be four decimal numbers without leading zeros, as browsers send it (such as 127.0.0.1)")
		}
	}
	port := u.Port()
	if port != "" || strings.HasSuffix(u.Host, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("invalid port")
		}
		host += ":" + port
	}
	return withoutDefaultPort(u.Scheme + "://" + host), nil
}

// withoutDefaultPort is an origin as browsers send it (RFC 6454): without its scheme's default
// port, which an origin saved as "https://shop.example:443" would otherwise never match.
func withoutDefaultPort(origin string) string {
	switch {
	case strings.HasPrefix(origin, "https://"):
		return strings.TrimSuffix(origin, ":443")
	case strings.HasPrefix(origin, "http://"):
		return strings.TrimSuffix(origin, ":80")
	}
	return origin
}

// OriginAllowed reports whether a browser's Origin header is one of a tenant's allowed origins
// (normalised; one saved with its default port before that was dropped matches too).
func OriginAllowed(allowed []string, origin string) bool {
	o := withoutDefaultPort(strings.ToLower(origin))
	for _, a := range allowed {
		if withoutDefaultPort(a) == o {
			return true
		}
	}
	return false
}
