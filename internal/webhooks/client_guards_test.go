package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// proxyChildEnv marks the child process of TestDeliveriesIgnoreTheProxyEnvironment.
const proxyChildEnv = "SLUICE_TEST_WEBHOOK_PROXY_CHILD"

// proxiedReceiverURL is the endpoint of the proxy test: a name that does not resolve (RFC 6761
// reserves .invalid), so only a proxy could deliver to it, and not a loopback name or address,
// which Go's proxy environment never proxies.
const proxiedReceiverURL = "http://receiver.invalid/hooks"

// TestDeliveriesIgnoreTheProxyEnvironment: a proxy connects to the receiver on Sluice's behalf,
// past the dialer's address check, so deliveries use none, whatever HTTP_PROXY and HTTPS_PROXY
// say. net/http reads those variables once per process, so a child process of this test runs a
// delivery with them naming a local proxy, which records every request it gets: it must get
// none (the delivery goes direct, and fails to resolve the name).
func TestDeliveriesIgnoreTheProxyEnvironment(t *testing.T) {
	if os.Getenv(proxyChildEnv) != "" {
		deliverThroughTheProxyEnvironment(t)
		return
	}
	var mu sync.Mutex
	var proxied []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		proxied = append(proxied, req.Method+" "+req.URL.String())
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(proxy.Close)
	for _, name := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		t.Setenv(name, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	t.Setenv(proxyChildEnv, "1")
	out, err := exec.Command(os.Args[0], "-test.run=^TestDeliveriesIgnoreTheProxyEnvironment$", "-test.count=1", "-test.v").CombinedOutput()
	mu.Lock()
	defer mu.Unlock()
	if len(proxied) != 0 {
		t.Fatalf("the delivery went through the proxy of the environment: %q\nchild:\n%s", proxied, out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "delivery: not delivered") {
		t.Fatalf("the child did not report an undelivered delivery:\n%s", out)
	}
}

// deliverThroughTheProxyEnvironment is the child's part: one delivery to proxiedReceiverURL,
// with the proxy variables its parent set.
func deliverThroughTheProxyEnvironment(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, proxiedReceiverURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := http.ProxyFromEnvironment(req); err != nil || u == nil {
		t.Fatalf("the environment names no proxy for %s (%v, %v): the test would prove nothing", proxiedReceiverURL, u, err)
	}
	d := testkit.Open(t, db.SQLite)
	c := newClock()
	s := newService(t, d, c, true)
	tenant := newTenant(t, d, "acme")
	ep, _, err := s.CreateEndpoint(context.Background(), tenant, proxiedReceiverURL, []string{EventKeyCreated})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k"})
	if n := deliverDue(t, s); n != 0 {
		t.Fatalf("delivered %d to a name that does not resolve: only a proxy could have", n)
	}
	log, err := s.Deliveries(context.Background(), tenant, ep.ID, 1)
	if err != nil || len(log) != 1 || log[0].LastStatus != nil || log[0].LastError == "" {
		t.Fatalf("delivery log %+v (%v): want a connection error and no receiver's status", log, err)
	}
	fmt.Printf("delivery: not delivered: %s\n", log[0].LastError)
}

// TestARedirectIsTheReceiversAnswerNotANewTarget: a receiver that answers 302 pointing elsewhere
// has answered, with a status that is not a success. The delivery records 302 and is retried
// later as any failure is; the redirect's target gets nothing (following it would let a public
// receiver send Sluice's requests anywhere, the address check aside, and would report the
// target's 200 as the receiver's).
func TestARedirectIsTheReceiversAnswerNotANewTarget(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, true)
		tenant := newTenant(t, d, "acme")
		target := newReceiver(t)
		var mu sync.Mutex
		redirected := 0
		redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			redirected++
			mu.Unlock()
			http.Redirect(w, req, target.URL+"/elsewhere", http.StatusFound)
		}))
		t.Cleanup(redirecting.Close)
		ep, _, err := s.CreateEndpoint(context.Background(), tenant, redirecting.URL+"/hooks", []string{EventKeyCreated})
		if err != nil {
			t.Fatal(err)
		}
		emit(t, s, tenant, EventKeyCreated, map[string]string{"keyId": "k"})
		if n := deliverDue(t, s); n != 0 {
			t.Fatalf("delivered %d: a redirect is not a success", n)
		}
		mu.Lock()
		if redirected != 1 {
			t.Errorf("the receiver got %d requests, want 1", redirected)
		}
		mu.Unlock()
		if got := target.requests(); len(got) != 0 {
			t.Fatalf("the redirect's target got %d requests, want none", len(got))
		}
		log, err := s.Deliveries(context.Background(), tenant, ep.ID, 1)
		if err != nil || len(log) != 1 {
			t.Fatalf("delivery log %+v (%v)", log, err)
		}
		if l := log[0]; l.DeliveredAt != nil || l.LastStatus == nil || *l.LastStatus != http.StatusFound || l.LastError != "HTTP 302" || l.NextAttempt == nil {
			t.Fatalf("delivery %+v, want status 302 recorded as the receiver's answer, not delivered, retried later", l)
		}
		c.advance(retryWait(1))
		if deliverDue(t, s); len(target.requests()) != 0 {
			t.Fatal("the retry went to the redirect's target")
		}
	})
}
