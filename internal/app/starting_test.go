package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/app/apptest"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAStartWaitingForTheMigrationLockIsLiveButNotReady: an instance started beside another that
// is migrating the database waits for the migration lock (minutes, for a long migration). All
// that time its port answers: /healthz 200 (the process is alive: a health check must not kill
// it), /readyz 503, and every other route 503 with Retry-After; once the lock is released it
// migrates, serves, and is ready. Its listener used to accept connections and answer nothing
// until the wait ended, so the container's health check (3 s) failed throughout.
func TestAStartWaitingForTheMigrationLockIsLiveButNotReady(t *testing.T) {
	dbURL := testkit.NewDatabase(t)
	_, release := testkit.HoldMigrationLock(t, dbURL) // as another instance's migration holds it
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := apptest.Config(dbURL)
	cfg.ListenAddr = "127.0.0.1:" + strconv.Itoa(port)
	cfg.MetricsAddr = "127.0.0.1:" + strconv.Itoa(metricsPort)
	base := "http://" + cfg.ListenAddr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type started struct {
		a   *app.App
		err error
	}
	newDone := make(chan started, 1)
	go func() {
		a, err := app.New(ctx, cfg, app.Options{Stdout: io.Discard})
		newDone <- started{a, err}
	}()
	ran := false
	t.Cleanup(func() { // a test that fails before Run: New's wait ends (ctx), and what it built is closed
		cancel()
		if s := <-newDone; s.err == nil && !ran {
			_ = s.a.Close()
		}
	})

	getAt := func(base, path string) (*http.Response, map[string]any) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			res, err := c.Get(base + path)
			if err == nil {
				defer res.Body.Close()
				var body map[string]any
				_ = json.NewDecoder(res.Body).Decode(&body)
				return res, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s%s: no answer within 60 s while the start waits for the migration lock: %v", base, path, err)
			}
		}
	}
	get := func(path string) (*http.Response, map[string]any) { t.Helper(); return getAt(base, path) }
	res, body := get("/healthz")
	if res.StatusCode != http.StatusOK || body["status"] != "starting" {
		t.Errorf("GET /healthz while waiting for the migration lock: %d %v; want 200 starting", res.StatusCode, body)
	}
	res, body = get("/readyz")
	if res.StatusCode != http.StatusServiceUnavailable || body["status"] != "starting" {
		t.Errorf("GET /readyz while waiting for the migration lock: %d %v; want 503 starting", res.StatusCode, body)
	}
	res, body = get("/v1/limits")
	if res.StatusCode != http.StatusServiceUnavailable || body["code"] != "unavailable" || res.Header.Get("Retry-After") == "" ||
		res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /v1/limits while waiting for the migration lock: %d %v %v; want a 503 unavailable problem with Retry-After",
			res.StatusCode, res.Header, body)
	}
	if res, _ := getAt("http://"+cfg.MetricsAddr, "/metrics"); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /metrics on the metrics port while waiting for the migration lock: %d; want 503", res.StatusCode)
	}
	select {
	case s := <-newDone:
		newDone <- s
		t.Fatalf("app.New returned while the migration lock was held: %v", s.err)
	default:
	}

	release()
	s := testkit.Await(t, newDone, "app.New to migrate once the migration lock is released")
	newDone <- s // for the cleanup
	if s.err != nil {
		t.Fatal(s.err)
	}
	ran = true
	runDone := make(chan error, 1)
	go func() { runDone <- s.a.Run(ctx) }()
	defer func() {
		cancel()
		if err := testkit.Await(t, runDone, "Run to stop"); err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, body := get("/readyz")
		if res.StatusCode == http.StatusOK && body["status"] == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz after the migration: %d %v; want 200 ready within 60 s", res.StatusCode, body)
		}
	}
	if res, body := get("/healthz"); res.StatusCode != http.StatusOK || body["status"] != "ok" {
		t.Errorf("GET /healthz once serving: %d %v; want 200 ok", res.StatusCode, body)
	}
}
