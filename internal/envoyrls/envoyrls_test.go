package envoyrls_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/envoyrls"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/tenants"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// harness is the real application with the Envoy rate limit service on a loopback port, a
// tenant with a secret key, and a gRPC client of Envoy's generated kind.
type harness struct {
	app      *app.App
	tenantID int64
	key      string
	client   rls.RateLimitServiceClient
}

func start(t *testing.T, url string, allowUnknown bool) *harness {
	t.Helper()
	cfg := apptest.Config(url)
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.GRPCAllowUnknown = allowUnknown
	return startWith(t, cfg, app.Options{})
}

func startWith(t *testing.T, cfg config.Config, o app.Options) *harness {
	t.Helper()
	a := apptest.Start(t, cfg, o)
	if a.GRPCAddr() == "" {
		t.Fatal("GRPC_ADDR is set but the application reports no gRPC address")
	}
	h := &harness{app: a, client: dial(t, a.GRPCAddr())}
	tn, err := a.Tenants.CreateTenant(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	h.tenantID = tn.ID
	h.key = h.newKey(t, tenants.KindSecret)
	return h
}

// join is a second instance on the database of h, sharing its tenant and key.
func (h *harness) join(t *testing.T, url string) *harness {
	t.Helper()
	cfg := apptest.Config(url)
	cfg.GRPCAddr = "127.0.0.1:0"
	a := apptest.Start(t, cfg, app.Options{})
	return &harness{app: a, tenantID: h.tenantID, key: h.key, client: dial(t, a.GRPCAddr())}
}

func dial(t *testing.T, addr string) rls.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rls.NewRateLimitServiceClient(conn)
}

func (h *harness) newKey(t *testing.T, kind tenants.KeyKind) string {
	t.Helper()
	_, secret, err := h.app.Tenants.CreateKey(context.Background(), h.tenantID, kind, "tests", "test")
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// define stores a fixed window of rate per hour called name.
func (h *harness) define(t *testing.T, name string, rate float64) {
	t.Helper()
	def := limiter.Definition{Kind: limiter.FixedWindow, Rate: rate, Period: 3_600_000}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, name, def, nil); err != nil {
		t.Fatal(err)
	}
}

// value is the engine's value of one key (the tokens left).
func (h *harness) value(t *testing.T, name, key string) float64 {
	t.Helper()
	v, err := h.app.Engine.GetValue(context.Background(), h.tenantID, name, key)
	if err != nil {
		t.Fatal(err)
	}
	return v.Value
}

// call sends ShouldRateLimit with header: value as metadata (none when header is "").
func (h *harness) call(t *testing.T, header, value string, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if header != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, header, value)
	}
	return h.client.ShouldRateLimit(ctx, req)
}

// decide calls with the tenant's key and fails the test on an error.
func (h *harness) decide(t *testing.T, req *rls.RateLimitRequest) *rls.RateLimitResponse {
	t.Helper()
	resp, err := h.call(t, "authorization", "Bearer "+h.key, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// descriptor is one descriptor of key/value pairs.
func descriptor(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, ds ...*rlcommon.RateLimitDescriptor) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// headers are the response headers Envoy is asked to add, by name.
func headers(resp *rls.RateLimitResponse) map[string]string {
	out := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		out[h.Key] = h.Value
	}
	return out
}

func requireCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != want {
		t.Fatalf("got %v (%v), want %v", st.Code(), err, want)
	}
	if st.Message() == "" {
		t.Fatalf("%v has no message", want)
	}
}

func TestAdmitsUpToTheLimitThenOverLimit(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.define(t, "api.user", 3)
		req := request("api", descriptor("user", "alice"))
		for i := range 3 {
			resp := h.decide(t, req)
			st := resp.Statuses[0]
			if resp.OverallCode != rls.RateLimitResponse_OK || st.Code != rls.RateLimitResponse_OK {
				t.Fatalf("call %d: %v, want OK", i+1, resp)
			}
			if want := uint32(2 - i); st.LimitRemaining != want {
				t.Fatalf("call %d: remaining %d, want %d", i+1, st.LimitRemaining, want)
			}
			if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_HOUR {
				t.Fatalf("current limit %v, want 3 per HOUR", st.CurrentLimit)
			}
			hs := headers(resp)
			if want := fmt.Sprintf(`"api.user";r=%d;t=`, 2-i); !strings.HasPrefix(hs["ratelimit"], want) || hs["ratelimit-policy"] != `"api.user";q=3;w=3600` {
				t.Fatalf("call %d: headers %v, want RateLimit %s… and RateLimit-Policy \"api.user\";q=3;w=3600", i+1, hs, want)
			}
			if _, ok := hs["retry-after"]; ok {
				t.Fatalf("call %d: an admitted request has Retry-After: %v", i+1, hs)
			}
		}
		resp := h.decide(t, req)
		st := resp.Statuses[0]
		if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || st.Code != rls.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 {
			t.Fatalf("fourth call: %v, want OVER_LIMIT with 0 remaining", resp)
		}
		d := st.DurationUntilReset.AsDuration()
		if d <= 0 || d > time.Hour {
			t.Fatalf("duration until reset %v, want within the hour", d)
		}
		if want := strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10); headers(resp)["retry-after"] != want {
			t.Fatalf("headers %v, want Retry-After %s (the duration until reset, rounded up)", headers(resp), want)
		}
		if v := h.value(t, "api.user", "alice"); v != 0 {
			t.Fatalf("engine value %v after 3 admitted of 3, want 0", v)
		}
		// Another key has its own allowance; hits_addend counts as several.
		many := request("api", descriptor("user", "bob"))
		many.HitsAddend = 2
		if resp := h.decide(t, many); resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("hits_addend 2 on a fresh key: %v, want OK with 1 remaining", resp)
		}
	})
}

func TestDescriptorsAreAllOrNothing(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.define(t, "api.user", 10)
		h.define(t, "api.route", 1)
		h.decide(t, request("api", descriptor("route", "/login"))) // spends route's only token
		resp := h.decide(t, request("api", descriptor("user", "alice"), descriptor("route", "/login")))
		if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v, want OVER_LIMIT", resp)
		}
		if resp.Statuses[0].Code != rls.RateLimitResponse_OK || resp.Statuses[1].Code != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("statuses %v, want OK (would pass) then OVER_LIMIT", resp.Statuses)
		}
		if v := h.value(t, "api.user", "alice"); v != 10 {
			t.Fatalf("the refused request consumed from api.user: value %v, want 10", v)
		}
		resp = h.decide(t, request("api", descriptor("user", "alice"), descriptor("route", "/home")))
		if resp.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("%v, want OK", resp)
		}
		if v := h.value(t, "api.user", "alice"); v != 9 {
			t.Fatalf("the admitted request: api.user value %v, want 9", v)
		}
	})
}

func TestKeysAreCheckedFromTheConfiguredHeader(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.define(t, "api.user", 10)
		req := request("api", descriptor("user", "alice"))
		_, err := h.call(t, "", "", req)
		requireCode(t, err, codes.Unauthenticated)
		_, err = h.call(t, "authorization", "Bearer sk_live_not-a-key", req)
		requireCode(t, err, codes.Unauthenticated)
		_, err = h.call(t, "x-other", h.key, req)
		requireCode(t, err, codes.Unauthenticated)
		_, err = h.call(t, "authorization", h.newKey(t, tenants.KindPublishable), req)
		requireCode(t, err, codes.PermissionDenied)
		if _, err := h.call(t, "authorization", h.key, req); err != nil {
			t.Fatalf("the bare secret key: %v", err)
		}
		if v := h.value(t, "api.user", "alice"); v != 9 {
			t.Fatalf("value %v after one authenticated call, want 9", v)
		}
	})
}

func TestTheKeyHeaderIsConfigurableAndTheAddressPrinted(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config("sqlite:" + t.TempDir() + "/sluice.db")
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.GRPCKeyHeader = "x-sluice-key"
	var out testkit.SyncBuffer
	h := startWith(t, cfg, app.Options{Stdout: &out})
	if want := "Envoy rate limit service on " + h.app.GRPCAddr() + "\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("stdout %q does not say %q", out.String(), want)
	}
	h.define(t, "api.user", 10)
	req := request("api", descriptor("user", "alice"))
	_, err := h.call(t, "authorization", "Bearer "+h.key, req)
	requireCode(t, err, codes.Unauthenticated)
	if _, err := h.call(t, "x-sluice-key", "Bearer "+h.key, req); err != nil {
		t.Fatalf("the key in x-sluice-key: %v", err)
	}
}

// TestFailedCallsAreLoggedOncePerMinuteAndCode: a call refused for its key (Envoy configured with
// a wrong one, which with failure_mode_deny refuses all traffic) or for its request leaves a
// warning naming the status code, at most one a minute for each code, never with the key.
func TestFailedCallsAreLoggedOncePerMinuteAndCode(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config("sqlite:" + t.TempDir() + "/sluice.db")
	cfg.GRPCAddr = "127.0.0.1:0"
	var out testkit.SyncBuffer
	h := startWith(t, cfg, app.Options{Stdout: &out})
	h.define(t, "api.user", 10)
	req := request("api", descriptor("user", "alice"))
	for range 3 {
		_, err := h.call(t, "authorization", "Bearer sk_live_not-a-key", req)
		requireCode(t, err, codes.Unauthenticated)
		_, err = h.call(t, "authorization", "Bearer "+h.key, request(""))
		requireCode(t, err, codes.InvalidArgument)
	}
	logs := out.String()
	for _, code := range []string{"Unauthenticated", "InvalidArgument"} {
		if n := strings.Count(logs, "a call failed\" code="+code); n != 1 {
			t.Errorf("%d warnings for %s calls, want 1:\n%s", n, code, logs)
		}
	}
	if strings.Contains(logs, "not-a-key") || strings.Contains(logs, h.key) {
		t.Fatalf("a failed call's warning carries the key:\n%s", logs)
	}
}

func TestWithoutGRPCAddrNothingListens(t *testing.T) {
	t.Parallel()
	a := apptest.Start(t, apptest.Config("sqlite:"+t.TempDir()+"/sluice.db"), app.Options{})
	if a.GRPCAddr() != "" || a.Envoy != nil {
		t.Fatalf("GRPC_ADDR is off, yet the service is at %q", a.GRPCAddr())
	}
}

func TestUnknownLimitsFollowThePolicy(t *testing.T) {
	t.Parallel()
	t.Run("deny", func(t *testing.T) {
		testkit.EachURL(t, func(t *testing.T, url string) {
			h := start(t, url, false)
			h.define(t, "api.user", 10)
			resp := h.decide(t, request("api", descriptor("user", "alice"), descriptor("nosuch", "x")))
			if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%v, want OVER_LIMIT for the unknown descriptor and the request", resp)
			}
			// Refused as a whole, it counted nothing: the known limit's balance as it stands.
			if st := resp.Statuses[0]; st.Code != rls.RateLimitResponse_OK || st.LimitRemaining != 10 {
				t.Fatalf("the known descriptor of a denied request: %v, want OK with 10 remaining (nothing counted)", st)
			}
			if hs := headers(resp); hs["ratelimit"] != `"api.user";r=10;t=0` {
				t.Fatalf("headers %v, want the known limit's balance as it stands", hs)
			}
			if v := h.value(t, "api.user", "alice"); v != 10 {
				t.Fatalf("a denied request consumed from api.user: value %v, want 10", v)
			}
			if hs := headers(resp); hs["ratelimit-policy"] != `"api.user";q=10;w=3600` {
				t.Fatalf("headers %v, want a RateLimit-Policy of the known limit only", hs)
			}
			if resp := h.decide(t, request("api", descriptor("nosuch", "x"))); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("only unknown descriptors: %v, want OVER_LIMIT", resp)
			}
		})
	})
	t.Run("allow", func(t *testing.T) {
		testkit.EachURL(t, func(t *testing.T, url string) {
			h := start(t, url, true)
			h.define(t, "api.user", 10)
			resp := h.decide(t, request("api", descriptor("user", "alice"), descriptor("nosuch", "x")))
			if resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[1].Code != rls.RateLimitResponse_OK {
				t.Fatalf("%v, want OK", resp)
			}
			if v := h.value(t, "api.user", "alice"); v != 9 {
				t.Fatalf("the known descriptor is still counted: value %v, want 9", v)
			}
			if resp := h.decide(t, request("api", descriptor("nosuch", "x"))); resp.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("only unknown descriptors: %v, want OK", resp)
			}
		})
	})
}

func TestInvalidDescriptorsAreInvalidArguments(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		for name, req := range map[string]*rls.RateLimitRequest{
			"a name with a space": request("api", descriptor("user id", "alice")),
			"a name too long":     request(stringOf('a', 130), descriptor("k", "v")),
			"no domain":           request("", descriptor("user", "alice")),
			"no descriptors":      request("api"),
			"no entries":          request("api", descriptor()),
		} {
			_, err := h.call(t, "authorization", "Bearer "+h.key, req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || st.Message() == "" {
				t.Errorf("%s: %v, want INVALID_ARGUMENT with a message", name, err)
			}
		}
	})
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func TestADatabaseThatIsGoneFailsClosed(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.define(t, "api.user", 10)
		req := request("api", descriptor("user", "alice"))
		h.decide(t, req) // the key is now cached: the decision itself meets the closed database
		fresh := h.newKey(t, tenants.KindSecret)
		if err := h.app.DB.SQL.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := h.call(t, "authorization", "Bearer "+h.key, req)
		requireCode(t, err, codes.Unavailable)
		_, err = h.call(t, "authorization", "Bearer "+fresh, req)
		requireCode(t, err, codes.Unavailable)
	})
}

// TestTwoInstancesNeverOverAdmit: concurrent calls on one key through two application instances
// on one PostgreSQL admit exactly the limit.
func TestTwoInstancesNeverOverAdmit(t *testing.T) {
	t.Parallel()
	url := testkit.URL(t, db.Postgres)
	first := start(t, url, false)
	second := first.join(t, url)
	first.define(t, "api.user", 50)
	const workers, calls = 8, 20
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		h := first
		if w%2 == 1 {
			h = second
		}
		wg.Go(func() {
			for range calls {
				resp, err := h.call(t, "authorization", "Bearer "+h.key, request("api", descriptor("user", "shared")))
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("ShouldRateLimit: %v", err)
				case resp.OverallCode == rls.RateLimitResponse_OK:
					admitted++
				case resp.OverallCode == rls.RateLimitResponse_OVER_LIMIT:
					refused++
				default:
					t.Errorf("overall code %v", resp.OverallCode)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 50 || admitted+refused != workers*calls {
		t.Fatalf("admitted %d, refused %d of %d calls on a limit of 50", admitted, refused, workers*calls)
	}
}

func TestDescriptorHitsAddendOverridesTheRequests(t *testing.T) {
	t.Parallel()
	h := start(t, "sqlite:"+t.TempDir()+"/sluice.db", false)
	h.define(t, "api.user", 10)
	d := descriptor("user", "alice")
	d.HitsAddend = wrapperspb.UInt64(4)
	req := request("api", d)
	req.HitsAddend = 2
	if resp := h.decide(t, req); resp.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("%v, want 6 remaining after 4 hits", resp)
	}
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(11)
	if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("more hits than the limit's capacity: %v, want OVER_LIMIT", resp)
	}
	// A concurrency limit takes one lease per decision: 2 hits are refused, not failed.
	jobs := limiter.Definition{Kind: limiter.Concurrency, Rate: 5, LeaseTTL: 3_600_000}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.job", jobs, nil); err != nil {
		t.Fatal(err)
	}
	twice := descriptor("job", "j1")
	twice.HitsAddend = wrapperspb.UInt64(2)
	if resp := h.decide(t, request("api", twice)); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("2 hits on a concurrency limit: %v, want OVER_LIMIT", resp)
	}
	// More than any limit can hold (a route can derive hits_addend from the request): refused, not failed.
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(1e15 + 1)
	if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits_addend above 10^15: %v, want OVER_LIMIT", resp)
	}
	if v := h.value(t, "api.user", "alice"); v != 6 {
		t.Fatalf("value %v, want 6", v)
	}
	// A descriptor's hits_addend set to 0 asks without counting (the request's 0 is unset: 1).
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("a descriptor's hits_addend 0: %v, want OK with 6 remaining", resp)
	}
	req.Descriptors[0].HitsAddend, req.HitsAddend = nil, 0
	if resp := h.decide(t, req); resp.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("the request's hits_addend 0: %v, want 1 counted (5 remaining)", resp)
	}
	if v := h.value(t, "api.user", "alice"); v != 5 {
		t.Fatalf("value %v, want 5", v)
	}
}

// defineOrgAndUser defines api.org (2 an hour) and api.org.user (10 an hour), whose parent is
// api.org under the key "{org}".
func (h *harness) defineOrgAndUser(t *testing.T) {
	t.Helper()
	h.define(t, "api.org", 2)
	child := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000,
		Parents: []limiter.Parent{{Name: "api.org", Key: "{org}"}}}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.org.user", child, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDescriptorEntriesFillTheKeysOfParents: a descriptor's entries are the decision's
// attributes, so a limit with a parent whose key template names an entry key spends that
// parent too (nested budgets through Envoy); both are refused together once the parent is spent.
func TestDescriptorEntriesFillTheKeysOfParents(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.defineOrgAndUser(t)
		for i, user := range []string{"alice", "bob", "carol"} {
			resp := h.decide(t, request("api", descriptor("org", "acme", "user", user)))
			if want := i < 2; (resp.OverallCode == rls.RateLimitResponse_OK) != want {
				t.Fatalf("user %s: %v, want OK %v (the org's budget is 2)", user, resp, want)
			}
		}
		if v := h.value(t, "api.org", "acme"); v != 0 {
			t.Fatalf("the org's budget after two admitted users: %v, want 0", v)
		}
		if v := h.value(t, "api.org.user", "acme/carol"); v != 10 {
			t.Fatalf("the refused user was counted: %v, want 10", v)
		}
	})
}

// TestRateLimitHeadersNameTheAncestors: as the JSON API's, the RateLimit and RateLimit-Policy
// headers name a descriptor's limit and its parents, so a client refused by the parent's budget
// sees which one; the statuses stay one per descriptor.
func TestRateLimitHeadersNameTheAncestors(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.defineOrgAndUser(t)
		for _, user := range []string{"a", "b"} {
			if resp := h.decide(t, request("api", descriptor("org", "acme", "user", user))); resp.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("user %s: %v, want OK", user, resp)
			}
		}
		resp := h.decide(t, request("api", descriptor("org", "acme", "user", "c")))
		if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 1 || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("user c: %v, want one status, OVER_LIMIT (the org's budget is 2)", resp)
		}
		hs := headers(resp)
		if !strings.HasPrefix(hs["ratelimit"], `"api.org.user";r=`) || !strings.Contains(hs["ratelimit"], `, "api.org";r=`) {
			t.Fatalf("ratelimit %q, want api.org.user then api.org", hs["ratelimit"])
		}
		if want := `"api.org.user";q=10;w=3600, "api.org";q=2;w=3600`; hs["ratelimit-policy"] != want {
			t.Fatalf("ratelimit-policy %q, want %q", hs["ratelimit-policy"], want)
		}
		if hs["retry-after"] == "" {
			t.Fatalf("headers %v, want a Retry-After", hs)
		}
	})
}

// TestVisitorValuesCannotSwitchTheLimitOff: a descriptor value that cannot fill a parent's key
// (it fills a reserved or too long one, or is empty) is answered OVER_LIMIT with nothing counted,
// not with an error, which Envoy would let through unless failure_mode_deny is set.
func TestVisitorValuesCannotSwitchTheLimitOff(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		h.defineOrgAndUser(t)
		for _, org := range []string{"session:0123456789abcdef0123456789abcdef", "ip:0123", strings.Repeat("x", 257), ""} {
			resp := h.decide(t, request("api", descriptor("org", org, "user", "dave")))
			if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("org %.20q…: %v, want OVER_LIMIT", org, resp)
			}
		}
		if v := h.value(t, "api.org.user", "session%3A0123456789abcdef0123456789abcdef/dave"); v != 10 {
			t.Fatalf("a refused request was counted: %v, want 10", v)
		}
		// Without parents, such values are counted like any other, under keys of their own.
		h.define(t, "api.user", 10)
		for _, user := range []string{strings.Repeat("y", 300), "", "session:x"} {
			if resp := h.decide(t, request("api", descriptor("user", user))); resp.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("user %.20q…: %v, want OK", user, resp)
			}
			if v := h.value(t, "api.user", envoyrls.LimitKey(entries("user", user))); v != 9 {
				t.Fatalf("user %.20q…: value %v, want 9", user, v)
			}
		}
	})
}

// TestAMissingParentIsOverLimitAndLogged: a child whose parent has no stored definition yet
// (README allows it) is refused, OVER_LIMIT with nothing counted, under either unknown-limit
// policy, rather than failing every call with UNAVAILABLE (which Envoy lets through unless
// failure_mode_deny is set); a warning names the child and the missing parent, once however
// many calls. So is a child whose grandparent is missing; once the ancestors exist, it decides.
func TestAMissingParentIsOverLimitAndLogged(t *testing.T) {
	t.Parallel()
	for _, allowUnknown := range []bool{false, true} {
		t.Run(map[bool]string{false: "deny", true: "allow"}[allowUnknown], func(t *testing.T) {
			testkit.EachURL(t, func(t *testing.T, url string) {
				cfg := apptest.Config(url)
				cfg.GRPCAddr = "127.0.0.1:0"
				cfg.GRPCAllowUnknown = allowUnknown
				var out testkit.SyncBuffer
				h := startWith(t, cfg, app.Options{Stdout: &out})
				child := limiter.Definition{Kind: limiter.FixedWindow, Rate: 2, Period: 3_600_000,
					Parents: []limiter.Parent{{Name: "api.org", Key: "{org}"}}}
				if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.org.user", child, nil); err != nil {
					t.Fatal(err)
				}
				req := request("api", descriptor("org", "acme", "user", "u"))
				for i := range 5 {
					resp, err := h.call(t, "authorization", "Bearer "+h.key, req)
					if err != nil {
						t.Fatalf("call %d: %v, want OVER_LIMIT", i, err)
					}
					if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 1 || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
						t.Fatalf("call %d: %v, want OVER_LIMIT", i, resp)
					}
				}
				if v := h.value(t, "api.org.user", "acme/u"); v != 2 {
					t.Fatalf("a refused request was counted: %v, want 2", v)
				}
				var warnings []string
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.Contains(l, "missing_parent=") {
						warnings = append(warnings, l)
					}
				}
				if len(warnings) != 1 || !strings.Contains(warnings[0], "limit=api.org.user") || !strings.Contains(warnings[0], "missing_parent=api.org ") {
					t.Fatalf("warnings %q, want one naming limit=api.org.user and missing_parent=api.org", warnings)
				}
				// A missing grandparent refuses the request too.
				parent := limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000,
					Parents: []limiter.Parent{{Name: "api.region", Key: "all"}}}
				if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.org", parent, nil); err != nil {
					t.Fatal(err)
				}
				if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("grandparent missing: %v, want OVER_LIMIT", resp)
				}
				h.define(t, "api.region", 10)
				if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OK {
					t.Fatalf("every ancestor defined: %v, want OK", resp)
				}
				if v := h.value(t, "api.org.user", "acme/u"); v != 1 {
					t.Fatalf("the admitted request: value %v, want 1", v)
				}
			})
		})
	}
}

func TestAttributesOfADescriptor(t *testing.T) {
	got := envoyrls.Attributes(descriptor("org", "acme", "bad-key", "x", "user", "u1", "org", "beta").Entries)
	if len(got) != 2 || got["org"] != "beta" || got["user"] != "u1" {
		t.Fatalf("attributes %v, want org=beta (the later entry) and user=u1, no bad-key", got)
	}
	if got := envoyrls.Attributes(entries("org", "acme", "user", strings.Repeat("u", 257), "team", "t", "team", "")); got["org"] != "acme" || len(got) != 1 {
		t.Fatalf("attributes %v, want org=acme only (a value too long, and a later empty one, are none)", got)
	}
	if got := envoyrls.Attributes(descriptor("a", "1").Entries); got["a"] != "1" {
		t.Fatalf("attributes %v", got)
	}
	// A header value in Latin-1 is a value like any other, its bytes that are not UTF-8 written
	// %XX as in keys (a parent's template naming it must not refuse every such visitor), and
	// nothing else in it escaped.
	if got := envoyrls.Attributes(entries("cnt", "Espa\xf1a", "path", "a/b%c")); got["cnt"] != "Espa%F1a" || got["path"] != "a/b%c" {
		t.Fatalf("attributes %q, want cnt=Espa%%F1a and path=a/b%%c", got)
	}
	// More than the 16 attributes a decision takes: none (docs/envoy.md), so a parent's template
	// refuses the request as it refuses one missing its attribute; 16 are all kept.
	var kv []string
	for i := range 17 {
		kv = append(kv, fmt.Sprintf("k%d", i), "v")
	}
	if got := envoyrls.Attributes(entries(kv...)); got != nil {
		t.Fatalf("attributes of 17 entries %v, want none", got)
	}
	if got := envoyrls.Attributes(entries(kv[:32]...)); len(got) != 16 {
		t.Fatalf("attributes of 16 entries %v, want all 16", got)
	}
}

// TestUnknownDescriptorsSpendNothingOfThePlan: with GRPC_UNKNOWN_LIMIT=allow, a request of one
// known and one unknown descriptor spends one decision of the plan, not two. The plan admits 2 a
// second with a burst of 2, so a second such request at once fits only if the first spent one
// (two spent would need a whole second of refill).
func TestUnknownDescriptorsSpendNothingOfThePlan(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, true)
		perSecond := 2.0
		if err := h.app.Tenants.SetPlan(context.Background(), h.tenantID, tenants.PlanSettings{DecisionsPerSecond: &perSecond}, "test"); err != nil {
			t.Fatal(err)
		}
		h.define(t, "api.user", 10)
		req := request("api", descriptor("user", "alice"), descriptor("nosuch", "x"))
		for i := range 2 {
			if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("call %d of one known and one unknown descriptor: %v, want OK (the plan spent for the unknown one too?)", i+1, resp)
			}
		}
		if v := h.value(t, "api.user", "alice"); v != 8 {
			t.Fatalf("api.user = %v after two calls, want 8", v)
		}
	})
}

// TestAPlanOverItsRateIsOverLimitWithoutSpending: a tenant over its plan's decision rate gets
// OVER_LIMIT with the plan's Retry-After, and its descriptors' limits are not spent; another
// tenant on the same service is unaffected.
func TestAPlanOverItsRateIsOverLimitWithoutSpending(t *testing.T) {
	t.Parallel()
	testkit.EachURL(t, func(t *testing.T, url string) {
		h := start(t, url, false)
		ctx := context.Background()
		perSecond := 0.001 // one decision, then one per 1,000 s: nothing refills during the test
		if err := h.app.Tenants.SetPlan(ctx, h.tenantID, tenants.PlanSettings{DecisionsPerSecond: &perSecond}, "test"); err != nil {
			t.Fatal(err)
		}
		h.define(t, "api.user", 10)
		req := request("api", descriptor("user", "alice"))
		if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OK {
			t.Fatalf("first call: %v, want OK", resp)
		}
		resp := h.decide(t, req)
		if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("second call over the plan: %v, want OVER_LIMIT", resp)
		}
		if s, _ := strconv.Atoi(headers(resp)["retry-after"]); s < 990 || s > 1000 {
			t.Fatalf("headers %v, want the plan's Retry-After of about 1000 s", headers(resp))
		}
		if v := h.value(t, "api.user", "alice"); v != 9 {
			t.Fatalf("api.user = %v after one admitted and one plan-refused call, want 9", v)
		}
		// Another tenant, same service, same limit: its own default plan.
		other, err := h.app.Tenants.CreateTenant(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		_, secret, err := h.app.Tenants.CreateKey(ctx, other.ID, tenants.KindSecret, "tests", "test")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.app.Engine.PutDefinition(ctx, other.ID, "api.user", limiter.Definition{Kind: limiter.FixedWindow, Rate: 10, Period: 3_600_000}, nil); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			resp, err := h.call(t, "authorization", "Bearer "+secret, req)
			if err != nil || resp.OverallCode != rls.RateLimitResponse_OK {
				t.Fatalf("the other tenant's call %d: %v, %v", i, resp, err)
			}
		}
	})
}

// TestAPlanRefusalKeepsADescriptorsLongerWait: when the plan and a descriptor's own limit both
// refuse, Retry-After is the longer wait (the day the limit needs, not the plan's second), as
// the descriptor's duration_until_reset says.
func TestAPlanRefusalKeepsADescriptorsLongerWait(t *testing.T) {
	t.Parallel()
	h := start(t, testkit.URL(t, "sqlite"), false)
	perSecond := 1.0
	if err := h.app.Tenants.SetPlan(context.Background(), h.tenantID, tenants.PlanSettings{DecisionsPerSecond: &perSecond}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.user",
		limiter.Definition{Kind: limiter.TokenBucket, Rate: 1, Period: 86_400_000}, nil); err != nil {
		t.Fatal(err)
	}
	req := request("api", descriptor("user", "alice"))
	if resp := h.decide(t, req); resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("first call: %v, want OK", resp)
	}
	resp := h.decide(t, req) // the plan's one decision a second and the day's one token are spent
	retry, err := strconv.ParseInt(headers(resp)["retry-after"], 10, 64)
	if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT ||
		err != nil || retry < 86_000 || retry > 86_400 {
		t.Fatalf("%v: want OVER_LIMIT with the limit's Retry-After of about a day, not the plan's second", resp)
	}
}

// TestALongWaitIsTheSameInTheStatusAndTheHeader: a refusal that waits longer than a
// time.Duration holds (292 years) says so in duration_until_reset, as in Retry-After.
func TestALongWaitIsTheSameInTheStatusAndTheHeader(t *testing.T) {
	t.Parallel()
	h := start(t, testkit.URL(t, "sqlite"), false)
	capacity := 1.0 // a token per 1,000 years
	def := limiter.Definition{Kind: limiter.TokenBucket, Rate: 0.01, Period: 10 * 365 * 86_400_000, Capacity: &capacity}
	if _, _, err := h.app.Engine.PutDefinition(context.Background(), h.tenantID, "api.user", def, nil); err != nil {
		t.Fatal(err)
	}
	req := request("api", descriptor("user", "alice"))
	h.decide(t, req)
	resp := h.decide(t, req)
	st := resp.Statuses[0]
	retry, err := strconv.ParseInt(headers(resp)["retry-after"], 10, 64)
	if resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || err != nil || retry < 365*86_400*999 {
		t.Fatalf("%v: want OVER_LIMIT and a Retry-After of about 1,000 years", resp)
	}
	if s := st.DurationUntilReset.GetSeconds(); s < retry-1 || s > retry {
		t.Fatalf("duration_until_reset %d s, Retry-After %d s: want the same wait", s, retry)
	}
}

// TestASuspendedTenantsPublishableKeyIsRefusedAsSuspended: every key of a suspended tenant is
// PERMISSION_DENIED, a publishable one too (not UNAUTHENTICATED, as an unknown key).
func TestASuspendedTenantsPublishableKeyIsRefusedAsSuspended(t *testing.T) {
	t.Parallel()
	h := start(t, testkit.URL(t, "sqlite"), false)
	h.define(t, "api.user", 10)
	pk := h.newKey(t, tenants.KindPublishable)
	if err := h.app.Tenants.SetSuspended(context.Background(), h.tenantID, true, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := h.call(t, "authorization", pk, request("api", descriptor("user", "alice")))
	requireCode(t, err, codes.PermissionDenied)
}
