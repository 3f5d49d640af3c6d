// Package webhooks tells a tenant's own services what happened, by HTTP POST: per-tenant
// endpoints (a URL, a signing secret shown once, the events it wants), an outbox of deliveries
// written in the same transaction as the event (Enqueue), and a dispatcher (Run) that sends them
// signed by the Standard Webhooks convention and retries failures with exponential backoff for
// 24 hours. Delivery is at least once: a dispatcher that stops between sending and recording
// sends again. The outbox is bounded per endpoint and pruned (housekeeping.go). Requests go only
// to public addresses unless the operator allows private ones (ssrf.go).
package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/hostname"
)

// The events an endpoint may subscribe to.
const (
	EventKeyCreated        = "key.created"
	EventKeyRevoked        = "key.revoked"
	EventDefinitionChanged = "definition.changed"
	// EventTenantQuotaNear: the tenant's count of limits, API keys or overrides has just reached
	// 80 % of its plan (queued in the creating transaction), or a decision left under 20 % of its
	// plan's burst (tenants.EventQuotaNear).
	EventTenantQuotaNear = "tenant.quota_near"
	EventLimitRefusals   = "limit.refusals" // a limit's refusals in a minute reached the endpoint's threshold
	EventKeyNearLimit    = "key.near_limit" // a key was left below 20 % of its limit
	EventTest            = "webhook.test"   // sent on request only, to every endpoint asked
)

// Events lists the events an endpoint may subscribe to.
var Events = []string{EventKeyCreated, EventKeyRevoked, EventDefinitionChanged, EventTenantQuotaNear, EventLimitRefusals, EventKeyNearLimit}

// Bounds on what a tenant may configure.
const (
	MaxEndpointsPerTenant = 16
	// MaxURLLength bounds an endpoint's URL twice, in characters: as the tenant writes it, and
	// as it is stored and shown, after checkURL's escaping (ASCII, so characters are bytes). The
	// second can be the longer (a space or é is escaped to 3 or 6 characters) or the shorter (a
	// fragment and surrounding white space are dropped), so neither bound implies the other.
	MaxURLLength = 2048
)

// Endpoint is one tenant's webhook receiver.
type Endpoint struct {
	ID        int64
	TenantID  int64
	URL       string
	Events    []string
	Enabled   bool
	CreatedAt time.Time
	// RefusalThreshold is the refusals of one limit in one minute at or above which the
	// endpoint hears limit.refusals (if it subscribes to it).
	RefusalThreshold int64
}

type endpointRow struct {
	ID           int64 `gorm:"primaryKey"`
	TenantID     int64
	URL          string `gorm:"column:url"`
	SecretSealed string
	Events       string
	Enabled      bool
	CreatedAt    int64
	// RefusalThreshold: see Endpoint.
	RefusalThreshold int64
}

func (endpointRow) TableName() string { return "webhook_endpoints" }

func (r endpointRow) toDomain() Endpoint {
	return Endpoint{ID: r.ID, TenantID: r.TenantID, URL: r.URL, Events: strings.Split(r.Events, ","), Enabled: r.Enabled,
		CreatedAt: time.UnixMilli(r.CreatedAt).UTC(), RefusalThreshold: r.RefusalThreshold}
}

// Options tune a Service; the zero value is production's.
type Options struct {
	// AllowPrivate lets endpoints be loopback, private, link-local or otherwise non-public
	// addresses (WEBHOOK_ALLOW_PRIVATE): for a receiver inside the operator's own network.
	AllowPrivate bool
	// Now, when set, replaces every clock of the outbox on every dialect: tests move it. Unset
	// (production), on PostgreSQL every time two instances must agree on (an event's created_at
	// and next attempt, the dispatcher's due look and claim lease, an attempt's recorded retry
	// or given-up time, housekeeping's cut-offs, the threshold events' memory) is the
	// database's, so that an instance whose clock runs ahead neither claims a delivery another
	// is still sending nor retries early; on SQLite (one process) it is Clock's.
	Now func() time.Time
	// Clock is this process's clock: SQLite's outbox time, and times no other instance reads
	// (the webhook-timestamp of a request, an endpoint's created_at, how often housekeeping
	// runs); time.Now when nil. Tests skew it to show that PostgreSQL's outbox does not read it.
	Clock  func() time.Time
	Logger *slog.Logger
	// OnAttempt, when set, is told the outcome of every delivery attempt whose outcome is
	// recorded: "delivered", "failed" (to be retried) or "given_up" (the last try failed).
	OnAttempt func(outcome string)
	// Interval is how often Run looks for due deliveries; default one second.
	Interval time.Duration
}

// Service owns webhook endpoints and their deliveries.
type Service struct {
	db           *db.DB
	sealer       sealer
	allowPrivate bool
	testNow      func() time.Time // Options.Now: replaces every clock when set
	clock        func() time.Time // this process's clock (Options.Clock)
	log          *slog.Logger
	onAttempt    func(outcome string) // Options.OnAttempt; never nil
	client       *http.Client
	interval     time.Duration
	// lastHousekeeping is when (Unix ms, by now) housekeep last ran; 0 before it ever did.
	lastHousekeeping atomic.Int64
}

// NewService returns the webhooks of d; sealKey (32 bytes, derived from the root secret)
// encrypts the endpoints' signing secrets at rest. It starts nothing: Run sends.
func NewService(d *db.DB, sealKey []byte, opts Options) (*Service, error) {
	s, err := newSealer(sealKey)
	if err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.OnAttempt == nil {
		opts.OnAttempt = func(string) {}
	}
	return &Service{db: d, sealer: s, allowPrivate: opts.AllowPrivate, testNow: opts.Now, clock: opts.Clock, log: opts.Logger,
		onAttempt: opts.OnAttempt, client: newClient(opts.AllowPrivate), interval: opts.Interval}, nil
}

// wallClock is this process's time, for times no other instance reads: the test clock when
// set, else Clock.
func (s *Service) wallClock() time.Time {
	if s.testNow != nil {
		return s.testNow()
	}
	return s.clock()
}

// nowIn is the outbox's time (ms since the epoch) for what is done in tx, which instances must
// agree on: the test clock when set, the database's on PostgreSQL, the process's on SQLite.
func (s *Service) nowIn(tx *gorm.DB) (int64, error) {
	if s.testNow != nil {
		return s.testNow().UnixMilli(), nil
	}
	ms, err := s.db.TimeIn(tx, s.clock)
	if err != nil {
		return 0, fmt.Errorf("webhooks: the database's time: %w", err)
	}
	return ms, nil
}

// The problems of this package, in the project's vocabulary.
var (
	ErrEndpointNotFound = apperr.New(apperr.NotFound, "no such webhook endpoint")
	ErrDeliveryNotFound = apperr.New(apperr.NotFound, "no such webhook delivery")
)

func invalid(field, msg string) error { return apperr.Invalid(field, msg) }

// CreateEndpoint adds an endpoint for tenantID and returns it with its signing secret
// ("whsec_" + base64 of 32 random bytes), which is shown this once: only a sealed copy is kept.
//
// refusalThreshold, when given, is the endpoint's RefusalThreshold (1 to MaxRefusalThreshold);
// DefaultRefusalThreshold otherwise.
func (s *Service) CreateEndpoint(ctx context.Context, tenantID int64, rawURL string, events []string, refusalThreshold ...int64) (Endpoint, string, error) {
	u, err := s.checkURL(rawURL)
	if err != nil {
		return Endpoint{}, "", err
	}
	threshold := int64(DefaultRefusalThreshold)
	if len(refusalThreshold) > 0 {
		threshold = refusalThreshold[0]
		if threshold < 1 || threshold > MaxRefusalThreshold {
			return Endpoint{}, "", invalid("refusalThreshold", fmt.Sprintf("must be a whole number of refusals per minute from 1 to %d", MaxRefusalThreshold))
		}
	}
	if len(events) == 0 {
		return Endpoint{}, "", invalid("events", "choose at least one event: "+strings.Join(Events, ", "))
	}
	events = slices.Compact(slices.Sorted(slices.Values(events)))
	for _, e := range events {
		if !slices.Contains(Events, e) {
			return Endpoint{}, "", invalid("events", fmt.Sprintf("unknown event %q; the events are %s", e, strings.Join(Events, ", ")))
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	sealed, err := s.sealer.seal(secret)
	if err != nil {
		return Endpoint{}, "", err
	}
	row := endpointRow{TenantID: tenantID, URL: u, SecretSealed: sealed, Events: strings.Join(events, ","), Enabled: true,
		CreatedAt: s.wallClock().UnixMilli(), RefusalThreshold: threshold}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&endpointRow{}).Where("tenant_id = ?", tenantID).Count(&n).Error; err != nil {
			return err
		}
		if n >= MaxEndpointsPerTenant {
			return apperr.New(apperr.Conflict, fmt.Sprintf("a tenant may have at most %d webhook endpoints", MaxEndpointsPerTenant))
		}
		row.ID = 0
		return tx.Create(&row).Error
	})
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("webhooks: create endpoint: %w", err)
	}
	return row.toDomain(), secret, nil
}

// checkURL accepts http and https URLs with a host, no credentials and no impossible port;
// unless private addresses are allowed, a literal IP address must be public (names are checked
// when dialled, after DNS). It returns the URL to store: ASCII, with spaces and other characters
// a request line may not carry percent-encoded, without the fragment, at most MaxURLLength long.
func (s *Service) checkURL(raw string) (string, error) {
	if !db.ComparableText(raw) {
		// url.Parse keeps a query's bytes as they are, and PostgreSQL refuses to store text
		// that is not UTF-8 (an error where the tenant typed a wrong URL).
		return "", invalid("url", "must be valid UTF-8 text without NUL characters")
	}
	if utf8.RuneCountInString(raw) > MaxURLLength {
		return "", invalid("url", fmt.Sprintf("must be at most %d characters", MaxURLLength))
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "" {
		return "", invalid("url", "must be an absolute http or https URL, e.g. https://hooks.example.com/sluice")
	}
	if u.User != nil {
		return "", invalid("url", "must not contain a user name or password; the signature authenticates Sluice")
	}
	if p := u.Port(); p != "" && !validPort(p) {
		return "", invalid("url", "must have a port from 1 to 65535 (without leading zeros), or none for the scheme's own")
	}
	ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]"))
	if err != nil && !hostName.MatchString(u.Hostname()) {
		// url.Parse takes any UTF-8 name (and escapes it when written back), which no resolver
		// finds: every delivery would fail. The captcha origins refuse such hosts alike.
		return "", invalid("url", "has an invalid host: a name must be ASCII letters, digits, hyphens, underscores and dots (write an international name in its xn-- form)")
	}
	if err != nil && hostname.EndsInANumber(u.Hostname()) {
		// 127.1 or 2130706433 is an address to a browser and to some clients, and a name to
		// others: only one spelling is checked as what it is.
		return "", invalid("url", "has a host that is an IPv4 address in another spelling than four decimal numbers (such as 203.0.113.7); write it so")
	}
	if err == nil && ip.Zone() != "" {
		// Only a link-local address has one, and any text may follow its %: stored escaped, it
		// would not parse again, and a receiver is reached by its address alone anyway.
		return "", invalid("url", "must not name an IPv6 zone (the %… after a link-local address)")
	}
	if err == nil && !s.allowPrivate && !publicAddr(ip) {
		return "", invalid("url", "must be a public address (the operator has not allowed private ones)")
	}
	u.Fragment = ""
	u.RawQuery = escapeQuery(u.RawQuery)
	out := u.String()
	if len(out) > MaxURLLength {
		return "", invalid("url", fmt.Sprintf("must be at most %d characters as stored: %d once escaped (a space or other character outside ASCII counts 3 for each of its UTF-8 bytes, é 6, and so does a character a path may not carry as typed, such as { or |)", MaxURLLength, len(out)))
	}
	return out, nil
}

// hostName is what a receiver's name may be: what a resolver can look up.
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$`)

// escapeQuery percent-encodes the bytes of a query that url.Parse keeps as typed but a request
// line may not carry: spaces, control characters and every byte beyond ASCII. The rest (% escapes,
// & and = included) is the receiver's business and kept as it is.
func escapeQuery(q string) string {
	var b strings.Builder
	for i := range len(q) {
		if c := q[i]; c <= ' ' || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// validPort reports whether p (the digits url.Parse keeps after the host's colon, any number
// of them) is a port a receiver can listen on: 1 to 65535, written without leading zeros.
func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0 && p[0] != '0'
}

// Endpoints lists a tenant's endpoints, oldest first.
func (s *Service) Endpoints(ctx context.Context, tenantID int64) ([]Endpoint, error) {
	var rows []endpointRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Where("tenant_id = ?", tenantID).Order("id").Find(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: endpoints: %w", err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Endpoint is one of tenantID's endpoints (ErrEndpointNotFound for another tenant's, or none).
func (s *Service) Endpoint(ctx context.Context, tenantID, id int64) (Endpoint, error) {
	var r endpointRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		res := tx.Where("tenant_id = ? AND id = ?", tenantID, id).Limit(1).Find(&r)
		if res.Error == nil && res.RowsAffected == 0 {
			return ErrEndpointNotFound
		}
		return res.Error
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("webhooks: endpoint: %w", err)
	}
	return r.toDomain(), nil
}

// DeleteEndpoint removes one of tenantID's endpoints and (ON DELETE CASCADE) its deliveries.
func (s *Service) DeleteEndpoint(ctx context.Context, tenantID, id int64) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		res := tx.Where("tenant_id = ? AND id = ?", tenantID, id).Delete(&endpointRow{})
		if res.Error == nil && res.RowsAffected == 0 {
			return ErrEndpointNotFound
		}
		return res.Error
	})
	if err != nil {
		return fmt.Errorf("webhooks: delete endpoint: %w", err)
	}
	return nil
}

// Enqueue writes a delivery of event to every enabled endpoint of tenantID that subscribes to
// it, inside tx: the deliveries exist if and only if the event's transaction commits. data is
// the event's "data" object.
func (s *Service) Enqueue(tx *gorm.DB, tenantID int64, event string, data any) error {
	var rows []endpointRow
	if err := tx.Where("tenant_id = ? AND enabled", tenantID).Find(&rows).Error; err != nil {
		return err
	}
	rows = slices.DeleteFunc(rows, func(r endpointRow) bool { return !slices.Contains(strings.Split(r.Events, ","), event) })
	if len(rows) == 0 {
		return nil
	}
	now, err := s.nowIn(tx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := s.insertDelivery(tx, r, event, data, now); err != nil {
			return err
		}
	}
	return nil
}

// SendTest queues a webhook.test event to one endpoint, whatever it subscribes to; none when
// the endpoint has the most deliveries waiting (ErrOutboxFull). Callers on behalf of a client
// spend SpendManual first.
func (s *Service) SendTest(ctx context.Context, tenantID, endpointID int64) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var r endpointRow
		res := tx.Where("tenant_id = ? AND id = ?", tenantID, endpointID).Limit(1).Find(&r)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrEndpointNotFound
		}
		if err := roomForManual(tx, r.TenantID, r.ID); err != nil {
			return err
		}
		now, err := s.nowIn(tx)
		if err != nil {
			return err
		}
		return s.insertDelivery(tx, r, EventTest, map[string]string{"message": "a test event sent from Sluice"}, now)
	})
	if err != nil {
		return fmt.Errorf("webhooks: send test: %w", err)
	}
	return nil
}

// payload is the body of every delivery (the Standard Webhooks shape).
type payload struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      any    `json:"data"`
}

// insertDelivery writes event's delivery to endpoint r, created and due at now (nowIn's, ms).
func (s *Service) insertDelivery(tx *gorm.DB, r endpointRow, event string, data any, now int64) error {
	body, err := json.Marshal(payload{Type: event, Timestamp: time.UnixMilli(now).UTC().Format(time.RFC3339Nano), Data: data})
	if err != nil {
		return err
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return tx.Create(&deliveryRow{
		ID: "msg_" + base64.RawURLEncoding.EncodeToString(id), TenantID: r.TenantID, EndpointID: r.ID, Event: event,
		Payload: string(body), CreatedAt: now, NextAttemptAt: now,
	}).Error
}

// RootSecretWitness says what the webhook endpoints tell of the root secret the service was made
// with (its sealing key): anyEndpoint, whether any exists; opens, whether the newest one's
// signing secret opens with it. Sealing authenticates, so a secret that does not open is proof
// of another root secret, and one that opens proof of this one.
func (s *Service) RootSecretWitness(ctx context.Context) (anyEndpoint, opens bool, err error) {
	var rows []endpointRow
	err = s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		return tx.Order("id DESC").Limit(1).Find(&rows).Error
	})
	if err != nil || len(rows) == 0 {
		return false, false, err
	}
	_, openErr := s.sealer.open(rows[0].SecretSealed)
	return true, openErr == nil, nil
}
