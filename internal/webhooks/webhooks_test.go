package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// received is one request a test receiver got.
type received struct {
	id, timestamp, signature string
	body                     []byte
}

// receiver is a real HTTP server that answers with the statuses of answers in turn (200 once
// they run out) and records every request.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	answers []int
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, received{req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body})
		status := http.StatusOK
		if len(r.answers) > 0 {
			status, r.answers = r.answers[0], r.answers[1:]
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// clock is a test clock the service reads from several goroutines.
type clock struct{ ms atomic.Int64 }

// newClock is a clock the tests start at the same moment (2023-11-14T22:13:20Z).
func newClock() *clock {
	c := &clock{}
	c.ms.Store(1_700_000_000_000)
	return c
}

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

var sealKey = []byte("0123456789abcdef0123456789abcdef")

func newService(t *testing.T, d *db.DB, c *clock, allowPrivate bool) *Service {
	t.Helper()
	s, err := NewService(d, sealKey, Options{AllowPrivate: allowPrivate, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTenant(t *testing.T, d *db.DB, name string) int64 {
	t.Helper()
	if err := d.Gorm.Exec("INSERT INTO tenants (name, created_at) VALUES (?, ?)", name, time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := d.Gorm.Raw("SELECT id FROM tenants WHERE name = ?", name).Scan(&id).Error; err != nil {
		t.Fatal(err)
	}
	return id
}

// emit writes an event the way the rest of Sluice does: inside the transaction of the change.
func emit(t *testing.T, s *Service, tenantID int64, event string, data any) {
	t.Helper()
	err := s.db.Serializable(context.Background(), func(tx *gorm.DB) error { return s.Enqueue(tx, tenantID, event, data) })
	if err != nil {
		t.Fatal(err)
	}
}

func deliverDue(t *testing.T, s *Service) int {
	t.Helper()
	n, err := s.DeliverDue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDeliveriesAreSignedByTheStandardWebhooksConvention(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		r := newReceiver(t)
		ep, secret, err := s.CreateEndpoint(context.Background(), tenant, r.URL+"/hooks", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, "whsec_") || ep.URL != r.URL+"/hooks" {
			t.Fatalf("endpoint %+v, secret %q", ep, secret)
		}
		var sealed string
		d.Gorm.Raw("SELECT secret_sealed FROM webhook_endpoints WHERE id = ?", ep.ID).Scan(&sealed)
		if strings.Contains(sealed, strings.TrimPrefix(secret, "whsec_")) {
			t.Fatal("the signing secret is stored in the clear")
		}
		emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k1"})
		emit(t, s, tenant, EventKeyRevoked, map[string]string{"keyId": "k1"}) // not subscribed
		if n := deliverDue(t, s); n != 1 {
			t.Fatalf("sent %d deliveries, want 1 (the endpoint subscribes to key.created only)", n)
		}
		got := r.requests()
		if len(got) != 1 {
			t.Fatalf("receiver got %d requests", len(got))
		}
		g := got[0]
		ts, _ := strconv.ParseInt(g.timestamp, 10, 64)
		if ts != c.now().Unix() || !strings.HasPrefix(g.id, "msg_") {
			t.Fatalf("webhook-id %q, webhook-timestamp %q", g.id, g.timestamp)
		}
		if !Verify(secret, g.id, ts, g.body, g.signature) {
			t.Fatalf("signature %q does not verify", g.signature)
		}
		if Verify(secret, g.id, ts, append(g.body, ' '), g.signature) || Verify(secret, g.id, ts+1, g.body, g.signature) {
			t.Fatal("a signature verifies a body or timestamp it was not made for")
		}
		var p struct {
			Type string            `json:"type"`
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(g.body, &p); err != nil || p.Type != EventKeyCreated || p.Data["keyId"] != "k1" {
			t.Fatalf("payload %s (%v)", g.body, err)
		}
		if n := deliverDue(t, s); n != 0 || len(r.requests()) != 1 {
			t.Fatalf("a delivered event was sent again (%d)", n)
		}
	})
}

// TestAFailingReceiverGetsTheEventExactlyOnceMoreAfterItRecovers: three failures, each followed
// by a retry once (and only once) its backoff has passed, then one success, then nothing more.
func TestAFailingReceiverGetsTheEventExactlyOnceMoreAfterItRecovers(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		r := newReceiver(t, 500, 503, 404)
		ep, _, err := s.CreateEndpoint(context.Background(), tenant, r.URL, []string{EventDefinitionChanged})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventDefinitionChanged, map[string]string{"name": "api"})
		for attempt := 1; attempt <= 3; attempt++ {
			if n := deliverDue(t, s); n != 0 || len(r.requests()) != attempt {
				t.Fatalf("attempt %d: %d delivered, receiver has %d requests", attempt, n, len(r.requests()))
			}
			c.advance(retryWait(attempt) - time.Millisecond)
			if deliverDue(t, s); len(r.requests()) != attempt {
				t.Fatalf("attempt %d was retried before its backoff of %v", attempt, retryWait(attempt))
			}
			c.advance(time.Millisecond)
		}
		if n := deliverDue(t, s); n != 1 || len(r.requests()) != 4 {
			t.Fatalf("after the failures: %d delivered, receiver has %d requests; want 1 and 4", n, len(r.requests()))
		}
		c.advance(48 * time.Hour)
		if deliverDue(t, s); len(r.requests()) != 4 {
			t.Fatalf("the event was sent again after it was delivered: %d requests", len(r.requests()))
		}
		got := r.requests()
		for _, g := range got[1:] {
			if g.id != got[0].id {
				t.Fatalf("retries changed the webhook-id: %q then %q (receivers deduplicate on it)", got[0].id, g.id)
			}
		}
		log, err := s.Deliveries(context.Background(), tenant, ep.ID, 10)
		if err != nil || len(log) != 1 || log[0].Attempts != 4 || log[0].DeliveredAt == nil || *log[0].LastStatus != 200 {
			t.Fatalf("delivery log %+v (%v)", log, err)
		}
	})
}

func TestADeliveryIsGivenUpAfter24HoursAndCanBeResent(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		failing := make([]int, 100)
		for i := range failing {
			failing[i] = 500
		}
		r := newReceiver(t, failing...)
		ep, _, err := s.CreateEndpoint(context.Background(), tenant, r.URL, []string{EventKeyRevoked})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyRevoked, map[string]string{"keyId": "k"})
		start := c.now()
		for c.now().Sub(start) < 30*time.Hour {
			deliverDue(t, s)
			c.advance(time.Minute)
		}
		attempts := len(r.requests())
		log, _ := s.Deliveries(context.Background(), tenant, ep.ID, 10)
		if len(log) != 1 || log[0].GivenUpAt == nil || log[0].NextAttempt != nil {
			t.Fatalf("after 30 hours of failures: %+v", log)
		}
		if attempts < 8 || attempts > 14 {
			t.Fatalf("%d attempts in 24 hours; the backoff should give about 11", attempts)
		}
		if err := s.Resend(context.Background(), tenant, ep.ID+1, log[0].ID); !errors.Is(err, ErrDeliveryNotFound) {
			t.Fatalf("resent through another endpoint's id: %v", err)
		}
		if err := s.Resend(context.Background(), tenant, ep.ID, log[0].ID); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		r.answers = nil
		r.mu.Unlock()
		if n := deliverDue(t, s); n != 1 || len(r.requests()) != attempts+1 {
			t.Fatalf("resend: %d delivered, %d requests", n, len(r.requests()))
		}
		if err := s.Resend(context.Background(), tenant+1, ep.ID, log[0].ID); !errors.Is(err, ErrDeliveryNotFound) {
			t.Fatalf("another tenant resent the delivery: %v", err)
		}
		// An ID no delivery can have is not found either, not a database error (PostgreSQL
		// refuses NUL bytes and invalid UTF-8 in a query): the dashboard's resend button put the
		// URL's ID through as a 500.
		for _, id := range []string{"\x00", log[0].ID + "\x00", "\xff\xfe", "msg_\xff"} {
			if err := s.Resend(context.Background(), tenant, ep.ID, id); !errors.Is(err, ErrDeliveryNotFound) {
				t.Errorf("Resend(%q): %v, want ErrDeliveryNotFound", id, err)
			}
		}
	})
}

func TestPrivateReceiversAreRefusedUnlessTheOperatorAllowsThem(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, false)
		tenant := newTenant(t, d, "acme")
		r := newReceiver(t)
		_, port, _ := strings.Cut(strings.TrimPrefix(r.URL, "http://"), ":")
		for _, u := range []string{"http://127.0.0.1:" + port, "http://[::1]:" + port, "http://169.254.169.254/latest/meta-data", "http://10.0.0.7/", "http://[::ffff:127.0.0.1]:" + port} {
			_, _, err := s.CreateEndpoint(context.Background(), tenant, u, []string{EventKeyCreated})
			if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Field != "url" {
				t.Errorf("%s: got %v, want invalid_request on url", u, err)
			}
		}
		// A name is resolved when dialled: localhost resolves to loopback, and is refused there.
		ep, _, err := s.CreateEndpoint(context.Background(), tenant, "http://localhost:"+port+"/", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k"})
		if n := deliverDue(t, s); n != 0 || len(r.requests()) != 0 {
			t.Fatalf("a loopback receiver got %d requests", len(r.requests()))
		}
		log, _ := s.Deliveries(context.Background(), tenant, ep.ID, 1)
		if len(log) != 1 || !strings.Contains(log[0].LastError, "no public address") {
			t.Fatalf("delivery log %+v: the refusal should be recorded", log)
		}
		if strings.Contains(log[0].LastError, "127.0.0.1") || strings.Contains(log[0].LastError, "::1") {
			t.Fatalf("delivery error %q names the address localhost resolved to", log[0].LastError)
		}

		allowed := newService(t, d, c, true)
		c.advance(time.Minute)
		if n := deliverDue(t, allowed); n != 1 || len(r.requests()) != 1 {
			t.Fatalf("with private receivers allowed: %d delivered, %d requests", n, len(r.requests()))
		}
	})
}

func TestPublicAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700:4700::1111": true, "93.184.216.34": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "100.64.0.1": false, "0.0.0.0": false,
		"::": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "224.0.0.1": false, "192.0.2.1": false,
		"255.255.255.255": false,
		// Deprecated site-local, discard-only, SRv6, NAT64, IPv4-compatible: outside 2000::/3.
		"fec0::1": false, "feff::1": false, "100::1": false, "5f00::1": false, "64:ff9b::808:808": false, "::808:808": false,
		// Within 2000::/3 but not public: IETF protocol assignments (Teredo among them),
		// documentation, 6to4; and the IPv4 6to4 relays.
		"2001::1": false, "2001:1ff:ffff::1": false, "2001:db8::1": false, "3fff::1": false, "3fff:fff:ffff::1": false,
		"2002:c000:0204::1": false, "192.88.99.1": false,
		// Their public neighbours.
		"2001:200::1": true, "2001:4860:4860::8888": true, "3ffe::1": true, "3fff:1000::1": true, "2003::1": true,
		"192.88.100.1": true, "192.88.98.1": true,
	} {
		if got := publicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestTheOutboxSurvivesARestart: an event committed while no dispatcher runs (or just before the
// process died) is sent by the next one, on a fresh connection to the same database.
func TestTheOutboxSurvivesARestart(t *testing.T) {
	for _, dialect := range testkit.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			url := testkit.URL(t, dialect)
			c := newClock()
			first := testkit.OpenURL(t, url)
			s := newService(t, first, c, true)
			tenant := newTenant(t, first, "acme")
			r := newReceiver(t)
			if _, _, err := s.CreateEndpoint(context.Background(), tenant, r.URL, []string{EventKeyCreated}); err != nil {
				t.Fatal(err)
			}
			emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k"})
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			again := newService(t, testkit.OpenURL(t, url), c, true)
			if n := deliverDue(t, again); n != 1 || len(r.requests()) != 1 {
				t.Fatalf("after the restart: %d delivered, %d requests", n, len(r.requests()))
			}
		})
	}
}

func TestEndpointsAreValidatedAndKeptPerTenant(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		a, b := newTenant(t, d, "a"), newTenant(t, d, "b")
		ctx := context.Background()
		for _, tc := range []struct {
			url    string
			events []string
			field  string
		}{
			{"ftp://example.com/", []string{EventKeyCreated}, "url"},
			{"/relative", []string{EventKeyCreated}, "url"},
			{"https://user:pw@example.com/", []string{EventKeyCreated}, "url"},
			{"https://example.com/" + strings.Repeat("x", 3000), []string{EventKeyCreated}, "url"},
			{"https://example.com/", nil, "events"},
			{"https://example.com/", []string{"key.exploded"}, "events"},
		} {
			_, _, err := s.CreateEndpoint(ctx, a, tc.url, tc.events)
			if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Field != tc.field {
				t.Errorf("%.40s %v: got %v, want invalid_request on %s", tc.url, tc.events, err, tc.field)
			}
		}
		ra, rb := newReceiver(t), newReceiver(t)
		epA, _, err := s.CreateEndpoint(ctx, a, ra.URL, Events)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateEndpoint(ctx, b, rb.URL, Events); err != nil {
			t.Fatal(err)
		}
		emit(t, s, a, EventKeyCreated, nil)
		if err := s.SendTest(ctx, a, epA.ID); err != nil {
			t.Fatal(err)
		}
		deliverDue(t, s)
		if len(ra.requests()) != 2 || len(rb.requests()) != 0 {
			t.Fatalf("tenant a's receiver got %d, tenant b's %d; want 2 and 0", len(ra.requests()), len(rb.requests()))
		}
		if err := s.SendTest(ctx, b, epA.ID); !errors.Is(err, ErrEndpointNotFound) {
			t.Fatalf("tenant b sent a test to tenant a's endpoint: %v", err)
		}
		if err := s.DeleteEndpoint(ctx, b, epA.ID); !errors.Is(err, ErrEndpointNotFound) {
			t.Fatalf("tenant b deleted tenant a's endpoint: %v", err)
		}
		if err := s.DeleteEndpoint(ctx, a, epA.ID); err != nil {
			t.Fatal(err)
		}
		if eps, _ := s.Endpoints(ctx, a); len(eps) != 0 {
			t.Fatalf("endpoints after delete: %+v", eps)
		}
		var left int64
		d.Gorm.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ?", epA.ID).Scan(&left)
		if left != 0 {
			t.Fatalf("%d deliveries of the deleted endpoint are left", left)
		}
		for range MaxEndpointsPerTenant - 1 {
			if _, _, err := s.CreateEndpoint(ctx, b, rb.URL, Events); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.CreateEndpoint(ctx, b, rb.URL, Events); apperr.From(err).Code != apperr.Conflict {
			t.Fatalf("endpoint %d: got %v, want a conflict naming the maximum", MaxEndpointsPerTenant+1, err)
		}
	})
}

// TestAnEndpointURLThatIsNotTextIsRefusedAsInvalid: a URL with bytes that are not UTF-8 (a
// dashboard form sends them as typed) or a NUL is refused as an invalid url on both databases,
// not passed to the INSERT, which PostgreSQL refuses with an error (a 500).
func TestAnEndpointURLThatIsNotTextIsRefusedAsInvalid(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tn := newTenant(t, d, "acme")
		for _, raw := range []string{"https://example.com/hook?q=\xff", "https://example.com/hook?q=\xc3", "https://example.com/hook?q=a\x00b",
			"https://example.com/\xff/hook"} {
			_, _, err := s.CreateEndpoint(context.Background(), tn, raw, []string{EventKeyCreated})
			if err == nil {
				t.Errorf("%q: accepted, want invalid_request on url", raw)
			} else if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Field != "url" {
				t.Errorf("%q: got %v, want invalid_request on url", raw, err)
			}
		}
		if eps, err := s.Endpoints(context.Background(), tn); err != nil || len(eps) != 0 {
			t.Fatalf("endpoints: %+v, %v; want none", eps, err)
		}
	})
}

// TestAnEndpointURLIsBoundedAsStored: the URL stored and shown is ASCII (spaces and other
// characters escaped, in the path and the query alike) and at most MaxURLLength characters, which
// a URL as typed can pass when escaping makes it longer (a space counts 3, an é 6); and the URL as
// typed is bounded in characters, not bytes (an é is one, as the OpenAPI document's maxLength
// counts).
func TestAnEndpointURLIsBoundedAsStored(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tn := newTenant(t, d, "acme")
		ctx := context.Background()
		const base = "http://example.com/" // 19 characters
		for _, tc := range []struct{ name, raw, stored string }{
			{"spaces", base + " a b", base + "%20a%20b"},
			{"a query's space and é", base + "?q=é a", base + "?q=%C3%A9%20a"},
			// 1,119 characters, 2,219 bytes as typed; the fragment is not stored.
			{"a long fragment of é", base + "#" + strings.Repeat("é", 1100), base},
		} {
			ep, _, err := s.CreateEndpoint(ctx, tn, tc.raw, []string{EventKeyCreated})
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if ep.URL != tc.stored {
				t.Errorf("%s: stored %q, want %q", tc.name, ep.URL, tc.stored)
			}
		}
		for _, tc := range []struct{ name, raw, says string }{
			// 1,119 characters as typed, 6,619 escaped.
			{"1,100 é", base + strings.Repeat("é", 1100), "as stored"},
			// 2,019 bytes as typed, 6,019 escaped.
			{"1,000 é", base + strings.Repeat("é", 1000), "as stored"},
			// 721 characters as typed, 2,121 escaped.
			{"700 spaces", base + "a" + strings.Repeat(" ", 700) + "b", "as stored"},
			{"2,049 characters as typed", base + "#" + strings.Repeat("x", MaxURLLength-len(base)), "at most 2048 characters"},
		} {
			_, _, err := s.CreateEndpoint(ctx, tn, tc.raw, []string{EventKeyCreated})
			if e := apperr.From(err); err == nil || e.Code != apperr.InvalidRequest || e.Field != "url" || !strings.Contains(e.Message, tc.says) {
				t.Errorf("%s: got %v, want invalid_request on url saying %q", tc.name, err, tc.says)
			}
		}
		eps, err := s.Endpoints(ctx, tn)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			if len(ep.URL) > MaxURLLength || strings.ContainsFunc(ep.URL, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
				t.Errorf("stored %.60q (%d bytes)", ep.URL, len(ep.URL))
			}
		}
	})
}

// TestAnEndpointHostOutsideASCIIIsRefused: url.Parse takes a UTF-8 host name (typed, or
// percent-encoded) and writes it back escaped, which no resolver finds: every delivery would
// fail. It is refused as an invalid host, as the captcha origins refuse one.
func TestAnEndpointHostOutsideASCIIIsRefused(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tn := newTenant(t, d, "acme")
		for _, raw := range []string{"https://ünï.example/h", "https://%C3%BCn%C3%AF.example/h", "https://exa*mple.com/"} {
			_, _, err := s.CreateEndpoint(context.Background(), tn, raw, []string{EventKeyCreated})
			if e := apperr.From(err); err == nil || e.Code != apperr.InvalidRequest || e.Field != "url" || !strings.Contains(e.Message, "invalid host") {
				t.Errorf("%q: got %v, want invalid_request on url saying invalid host", raw, err)
			}
		}
		if _, _, err := s.CreateEndpoint(context.Background(), tn, "https://xn--n-bga6a.example/h", []string{EventKeyCreated}); err != nil {
			t.Fatalf("the name's xn-- form: %v", err)
		}
	})
}

// FuzzCheckURL: whatever a tenant types as an endpoint URL, checking it never panics, and what
// it accepts is an absolute http(s) URL with a host, no credentials and, unless private
// addresses are allowed, no literal address that is not public.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://hooks.example.com/x", "http://127.0.0.1:9/", "http://[::ffff:10.0.0.1]/",
		"https://u:p@example.com/", "ftp://x/", "//example.com", "http://[fe80::1%25eth0]/", "https://0x7f000001/", "",
		"http://[fe80::1%25é]:9/h", "http://example.com/ a b?q=é x#f"} {
		f.Add(s)
	}
	s, err := NewService(nil, sealKey, Options{})
	if err != nil {
		f.Fatal(err)
	}
	private, err := NewService(nil, sealKey, Options{AllowPrivate: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// What either accepts is stored, and accepted again as it is: a stored URL that did not
		// parse again could never be delivered.
		if got, err := private.checkURL(raw); err == nil {
			if again, err := private.checkURL(got); err != nil || again != got {
				t.Fatalf("accepted %q as %q, which gives %q, %v", raw, got, again, err)
			}
		}
		got, err := s.checkURL(raw)
		if err != nil {
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || !db.ComparableText(got) {
			t.Fatalf("accepted %q as %q", raw, got)
		}
		if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !publicAddr(ip) {
			t.Fatalf("accepted the non-public address %q", raw)
		}
		if len(got) > MaxURLLength || strings.ContainsFunc(got, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			t.Fatalf("accepted %q as %q: not ASCII without spaces, or longer than %d", raw, got, MaxURLLength)
		}
	})
}

// TestDeliveryErrorsMapNothingOfTheNetwork: the delivery log says the same of a receiver's name
// that does not resolve and of one that resolves only to private addresses, and names neither
// the address refused nor the resolver asked (a tenant could map the operator's network by them).
func TestDeliveryErrorsMapNothingOfTheNetwork(t *testing.T) {
	t.Parallel()
	refused := &url.Error{Op: "Post", URL: "http://db.internal:5432/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: fmt.Errorf("webhooks: dial 10.1.2.3:5432: %w", errPrivateAddress)}}
	missing := &url.Error{Op: "Post", URL: "http://db.internal:5432/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "db.internal", Server: "10.255.255.53:53", IsNotFound: true}}}
	slow := &url.Error{Op: "Post", URL: "http://db.internal:5432/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "i/o timeout", Name: "db.internal", Server: "10.255.255.53:53", IsTimeout: true}}}
	// A connection the receiver resets after accepting it names both ends: Sluice's own (behind
	// NAT, the receiver never sees it) must not reach the log, the receiver's may.
	reset := &url.Error{Op: "Post", URL: "https://hooks.example.com/", Err: &net.OpError{Op: "read", Net: "tcp",
		Source: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 40000}, Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 5), Port: 443},
		Err: errors.New("read: connection reset by peer")}}
	a, b, c, d := deliveryError(refused, false), deliveryError(missing, false), deliveryError(slow, false), deliveryError(reset, false)
	if a != b || a != `Post "http://db.internal:5432/": `+noPublicAddress {
		t.Errorf("a refused private address says %q and a missing name %q: want the same, without either", a, b)
	}
	if want := `Post "https://hooks.example.com/": read tcp 203.0.113.5:443: read: connection reset by peer`; d != want {
		t.Errorf("a reset connection says %q, want %q", d, want)
	}
	allowed := deliveryError(missing, true) // private receivers allowed: nothing to hide, no hint to give
	for _, msg := range []string{a, b, c, d, allowed} {
		if strings.Contains(msg, "10.") || strings.Contains(msg, ":53") {
			t.Errorf("delivery error %q names an address of Sluice's network or the resolver", msg)
		}
	}
	if strings.Contains(allowed, "WEBHOOK_ALLOW_PRIVATE") || !strings.Contains(allowed, "does not resolve") {
		t.Errorf("with private receivers allowed, a missing name says %q", allowed)
	}
	if plain := errors.New("connection reset by peer"); deliveryError(plain, false) != plain.Error() {
		t.Errorf("another error is rewritten: %q", deliveryError(plain, false))
	}
}
