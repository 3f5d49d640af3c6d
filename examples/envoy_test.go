package examples_test

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// The Envoy configurations of this repository are loaded the way Envoy loads them: YAML into
// the bootstrap message from Envoy's own Go types (go-control-plane), rejecting unknown fields
// and unknown "@type"s, then validated with the message's validation rules (the constraints
// Envoy enforces at start-up). No Envoy binary could be installed here (see examples/README.md).

// placeholder is where examples/envoy/envoy.yaml holds the tenant's secret key.
const placeholder = "SLUICE_SECRET_KEY_HERE"

// validator is a message with go-control-plane's generated validation.
type validator interface{ ValidateAll() error }

// loadBootstrap parses an Envoy configuration strictly and validates it.
func loadBootstrap(src []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		return nil, fmt.Errorf("YAML: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, &b); err != nil { // DiscardUnknown false: strict
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return &b, nil
}

// unpack reads a typed config into m and validates it (the bootstrap's validation does not look
// inside an Any).
func unpack(a *anypb.Any, m interface {
	proto.Message
	validator
}) error {
	if err := a.UnmarshalTo(m); err != nil {
		return fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
	}
	if err := m.ValidateAll(); err != nil {
		return fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
	}
	return nil
}

// rateLimitSetup is what Envoy does with Sluice according to one configuration.
type rateLimitSetup struct {
	filter   *ratelimitv3.RateLimit
	cluster  *clusterv3.Cluster    // the rate limit service's
	endpoint *corev3.SocketAddress // the cluster's one endpoint
	// descriptors: per rate_limits entry of the routes, the descriptor entries' keys Envoy
	// sends, in order.
	descriptors [][]string
	// actions are the routes' rate limit actions, in that order.
	actions []*routev3.RateLimit_Action
	// trustsForwardedFor names the listeners whose HTTP connection manager takes the client's
	// address from X-Forwarded-For (use_remote_address unset), which the client writes.
	trustsForwardedFor []string
}

// descriptorKey is the key Envoy gives the descriptor entry of a rate limit action.
func descriptorKey(a *routev3.RateLimit_Action) (string, error) {
	switch {
	case a.GetRemoteAddress() != nil:
		return "remote_address", nil
	case a.GetMaskedRemoteAddress() != nil:
		return "masked_remote_address", nil
	case a.GetRequestHeaders() != nil:
		return a.GetRequestHeaders().GetDescriptorKey(), nil
	case a.GetGenericKey() != nil:
		if k := a.GetGenericKey().GetDescriptorKey(); k != "" {
			return k, nil
		}
		return "generic_key", nil
	}
	return "", fmt.Errorf("this test knows no descriptor key for the action %v", a)
}

// inspect finds the rate limit filter, its cluster and the descriptors of the routes, and
// checks every typed config it passes.
func inspect(b *bootstrapv3.Bootstrap) (*rateLimitSetup, error) {
	s := &rateLimitSetup{}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := unpack(f.GetTypedConfig(), &hcm); err != nil {
					return nil, fmt.Errorf("listener %s, filter %s: %w", l.GetName(), f.GetName(), err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					switch hf.GetName() {
					case "envoy.filters.http.ratelimit":
						s.filter = &ratelimitv3.RateLimit{}
						if err := unpack(hf.GetTypedConfig(), s.filter); err != nil {
							return nil, err
						}
					case "envoy.filters.http.router":
						if err := unpack(hf.GetTypedConfig(), &routerv3.Router{}); err != nil {
							return nil, err
						}
					default:
						return nil, fmt.Errorf("an HTTP filter this test does not know: %s", hf.GetName())
					}
				}
				if !hcm.GetUseRemoteAddress().GetValue() && hcm.GetXffNumTrustedHops() == 0 && len(hcm.GetOriginalIpDetectionExtensions()) == 0 {
					s.trustsForwardedFor = append(s.trustsForwardedFor, l.GetName())
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						for _, rl := range r.GetRoute().GetRateLimits() {
							var keys []string
							for _, a := range rl.GetActions() {
								k, err := descriptorKey(a)
								if err != nil {
									return nil, err
								}
								keys = append(keys, k)
								s.actions = append(s.actions, a)
							}
							s.descriptors = append(s.descriptors, keys)
						}
					}
				}
			}
		}
	}
	if s.filter == nil {
		return nil, fmt.Errorf("no envoy.filters.http.ratelimit filter")
	}
	name := s.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != name {
			continue
		}
		s.cluster = c
		var opts upstreamhttpv3.HttpProtocolOptions
		a, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if !ok {
			return nil, fmt.Errorf("cluster %s has no HttpProtocolOptions: gRPC needs HTTP/2", name)
		}
		if err := unpack(a, &opts); err != nil {
			return nil, err
		}
		if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			return nil, fmt.Errorf("cluster %s does not speak HTTP/2 (explicit_http_config.http2_protocol_options): gRPC needs it", name)
		}
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
			return nil, fmt.Errorf("cluster %s: want one endpoint", name)
		}
		s.endpoint = eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	}
	if s.cluster == nil {
		return nil, fmt.Errorf("the rate limit service's cluster %q is not defined", name)
	}
	return s, nil
}

// limitName is the rule of docs/envoy.md: the domain, then each entry's key, joined with ".".
var limitNameRE = regexp.MustCompile(`^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,126}|\.\.[A-Za-z0-9_.:-]{1,126})$`)

func (s *rateLimitSetup) limitNames() []string {
	var names []string
	for _, keys := range s.descriptors {
		names = append(names, strings.Join(append([]string{s.filter.GetDomain()}, keys...), "."))
	}
	return names
}

// checkAsDocumented checks what docs/envoy.md asks of a configuration.
func checkAsDocumented(t *testing.T, s *rateLimitSetup) {
	t.Helper()
	f := s.filter
	if f.GetRateLimitService().GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("transport_api_version %v, want V3", f.GetRateLimitService().GetTransportApiVersion())
	}
	if !f.GetFailureModeDeny() {
		t.Error("failure_mode_deny is not true: Envoy would let traffic through while Sluice cannot answer")
	}
	md := f.GetRateLimitService().GetGrpcService().GetInitialMetadata()
	if len(md) != 1 || md[0].GetKey() != "authorization" || !strings.HasPrefix(md[0].GetValue(), "Bearer ") {
		t.Errorf("initial_metadata %v: want the secret key as authorization: Bearer … (GRPC_KEY_HEADER's default)", md)
	}
	if len(s.descriptors) == 0 {
		t.Error("no route has rate_limits: Envoy would never ask Sluice")
	}
	// Sluice uses the address Envoy sends as it is: the mask is what groups an IPv6 client by
	// its /64, as the JSON API's ip does.
	for _, a := range s.actions {
		if (a.GetRemoteAddress() != nil || a.GetMaskedRemoteAddress() != nil) && len(s.trustsForwardedFor) > 0 {
			// Without use_remote_address, Envoy takes the client's address from the last
			// X-Forwarded-For entry, which the client writes: a new one each request, a new key.
			t.Errorf("listeners %v limit by the client's address but take it from X-Forwarded-For: set use_remote_address: true (an edge proxy), or xff_num_trusted_hops behind trusted ones", s.trustsForwardedFor)
			s.trustsForwardedFor = nil
		}
		switch {
		case a.GetRemoteAddress() != nil:
			t.Error("a remote_address action counts each IPv6 address (/128) apart: use masked_remote_address with v6_prefix_mask_len: 64")
		case a.GetMaskedRemoteAddress() != nil && a.GetMaskedRemoteAddress().GetV6PrefixMaskLen().GetValue() != 64:
			t.Errorf("masked_remote_address %v: want v6_prefix_mask_len: 64 (an IPv6 client by its /64)", a.GetMaskedRemoteAddress())
		}
	}
	for _, n := range s.limitNames() {
		if !limitNameRE.MatchString(n) {
			t.Errorf("descriptors make the limit name %q, which Sluice refuses (INVALID_ARGUMENT)", n)
		}
	}
}

// docsConfig is the Envoy configuration docs/envoy.md shows.
func docsConfig(t *testing.T) []byte {
	t.Helper()
	doc := string(repoFile(t, "docs/envoy.md"))
	_, rest, ok := strings.Cut(doc, "```yaml\nstatic_resources:")
	if !ok {
		t.Fatal("docs/envoy.md has no ```yaml block starting with static_resources:")
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("docs/envoy.md: the yaml block is not closed")
	}
	return []byte("static_resources:" + block + "\n")
}

func TestEnvoyConfigsAreValidAndUseSluiceAsDocumented(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   []byte
		limit []string
	}{
		{"docs/envoy.md", docsConfig(t), []string{"api.masked_remote_address", "api.masked_remote_address.path"}},
		{"examples/envoy/envoy.yaml", []byte(strings.ReplaceAll(string(repoFile(t, "examples/envoy/envoy.yaml")), placeholder, "sk_live_x")),
			[]string{"examples.masked_remote_address", "examples.masked_remote_address.path"}},
	} {
		b, err := loadBootstrap(tc.src)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s, err := inspect(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		checkAsDocumented(t, s)
		if got := s.limitNames(); strings.Join(got, " ") != strings.Join(tc.limit, " ") {
			t.Errorf("%s: the descriptors count against %v, want %v", tc.name, got, tc.limit)
		}
	}
}

func TestEnvoyExampleMatchesTheReadmesSluice(t *testing.T) {
	src := string(repoFile(t, "examples/envoy/envoy.yaml"))
	if !strings.Contains(src, `"Bearer `+placeholder+`"`) {
		t.Fatalf("examples/envoy/envoy.yaml does not hold the key's place as \"Bearer %s\"", placeholder)
	}
	run := readmeBlock(t, "envoy")
	if !strings.Contains(run, `sed "s/`+placeholder+`/$SLUICE_SECRET_KEY/" examples/envoy/envoy.yaml`) {
		t.Fatalf("the README's envoy command does not fill in the key: %q", run)
	}
	b, err := loadBootstrap([]byte(strings.ReplaceAll(src, placeholder, secretKey)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := inspect(b)
	if err != nil {
		t.Fatal(err)
	}
	// The README starts Sluice with GRPC_ADDR=127.0.0.1:9091 and defines the limits.
	if got := net.JoinHostPort(s.endpoint.GetAddress(), strconv.Itoa(int(s.endpoint.GetPortValue()))); got != "127.0.0.1:9091" {
		t.Errorf("the rate limit service's endpoint is %s; the README starts Sluice with GRPC_ADDR=127.0.0.1:9091", got)
	}
	defined := regexp.MustCompile(`/v1/limits/([A-Za-z0-9_.:-]+)"`).FindAllStringSubmatch(readmeBlock(t, "envoy limits"), -1)
	var names []string
	for _, m := range defined {
		names = append(names, m[1])
	}
	if strings.Join(names, " ") != strings.Join(s.limitNames(), " ") {
		t.Errorf("the README defines the limits %v; the configuration's descriptors count against %v", names, s.limitNames())
	}
}

func TestEnvoyConfigWithAMistakeIsRejected(t *testing.T) {
	src := string(repoFile(t, "examples/envoy/envoy.yaml"))
	for mistake, edit := range map[string][2]string{
		"a misspelt field":            {"failure_mode_deny:", "failure_mode_denny:"},
		"a field of another message":  {"stat_prefix: ingress", "stat_prefix: ingress\n          domain: examples"},
		"an unknown @type":            {"filters.http.ratelimit.v3.RateLimit", "filters.http.ratelimit.v3.RateLimits"},
		"a value out of range":        {"port_value: 9091", "port_value: 99999"},
		"an enum that does not exist": {"transport_api_version: V3", "transport_api_version: V4"},
		// Inside a typed config (an Any), which the bootstrap's own validation does not enter.
		"a required field left out": {"              domain: examples\n", ""},
		"an action without its key": {"descriptor_key: path", "descriptor_key: \"\""},
	} {
		bad := strings.Replace(src, edit[0], edit[1], 1)
		if bad == src {
			t.Fatalf("%s: %q is not in the file", mistake, edit[0])
		}
		b, err := loadBootstrap([]byte(bad))
		if err == nil {
			_, err = inspect(b)
		}
		if err == nil {
			t.Errorf("%s (%q) was accepted", mistake, edit[1])
		}
	}
}

// TestEnvoyExampleDescriptorsAreDecidedBySluice sends Sluice, over gRPC, the request Envoy
// makes with the example configuration for GET /hello from 192.0.2.7 (descriptors built from the
// route's actions, the key from initial_metadata), after the README's commands define the
// limits: OK five times, then OVER_LIMIT with the limit of 5 a minute per address and path.
func TestEnvoyExampleDescriptorsAreDecidedBySluice(t *testing.T) {
	requireBash(t, "curl")
	runBlock(t, readmeBlock(t, "envoy limits"))
	b, err := loadBootstrap([]byte(strings.ReplaceAll(string(repoFile(t, "examples/envoy/envoy.yaml")), placeholder, secretKey)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := inspect(b)
	if err != nil {
		t.Fatal(err)
	}
	// Envoy's masked_remote_address value: the address and the mask's length.
	values := map[string]string{"masked_remote_address": "192.0.2.7/32", "path": "/hello"}
	req := &rls.RateLimitRequest{Domain: s.filter.GetDomain()}
	for _, keys := range s.descriptors {
		d := &rlcommon.RateLimitDescriptor{}
		for _, k := range keys {
			v, ok := values[k]
			if !ok {
				t.Fatalf("no value for the descriptor key %s", k)
			}
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	md := s.filter.GetRateLimitService().GetGrpcService().GetInitialMetadata()[0]
	ctx := metadata.AppendToOutgoingContext(testCtx(t), md.GetKey(), md.GetValue())
	for i := 1; i <= 6; i++ {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := rls.RateLimitResponse_OK
		if i == 6 {
			want = rls.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want || len(resp.GetStatuses()) != 2 {
			t.Fatalf("request %d: %v, want %v with a status per descriptor", i, resp, want)
		}
		if i == 6 && (resp.GetStatuses()[0].GetCode() != rls.RateLimitResponse_OK || resp.GetStatuses()[1].GetCode() != rls.RateLimitResponse_OVER_LIMIT ||
			resp.GetStatuses()[1].GetCurrentLimit().GetRequestsPerUnit() != 5 || resp.GetStatuses()[1].GetCurrentLimit().GetUnit() != rls.RateLimitResponse_RateLimit_MINUTE) {
			t.Fatalf("request 6: %v, want the per-path limit (5 a minute) over and the per-address one not", resp)
		}
	}
}
