package sluice_test

import (
	"net/http"
	"testing"
	"time"

	sluice "github.com/sluice-dev/sluice/client/go"
)

func TestOverridesArePutListedAppliedAndDeleted(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	name := limitName(t, "ov")
	putLimit(t, c, name, 2)
	capacity := 5.0
	put, err := c.PutOverride(ctx, name, sluice.Override{Match: "org:acme:*", Capacity: &capacity})
	if err != nil {
		t.Fatal(err)
	}
	if put.Match != "org:acme:*" || put.Capacity == nil || *put.Capacity != 5 || put.ExpiresAt != nil || put.CreatedAt.IsZero() {
		t.Fatalf("put answered %+v", put)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := c.PutOverride(ctx, name, sluice.Override{Match: "bad", Action: sluice.Deny, ExpiresAt: &until}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutOverride(ctx, name, sluice.Override{Match: "vip", Action: sluice.Allow}); err != nil {
		t.Fatal(err)
	}

	r, err := c.Limit(ctx, name, sluice.Decision{Key: "org:acme:1"})
	if err != nil || !r.OK || r.Override != "org:acme:*" || r.Remaining != 4 {
		t.Fatalf("a key under the prefix: %+v %v", r, err)
	}
	r, err = c.Limit(ctx, name, sluice.Decision{Key: "bad"})
	if err != nil || r.OK || r.Override != "bad" || r.RetryAfter > time.Hour || r.RetryAfter < time.Hour-time.Minute {
		t.Fatalf("a denied key: %+v %v", r, err)
	}
	v, err := c.Value(ctx, name, "org:acme:1")
	if err != nil || v.Override != "org:acme:*" || v.Config.Capacity == nil || *v.Config.Capacity != 5 {
		t.Fatalf("the value of a key under the prefix: %+v %v (want the override's match and numbers)", v, err)
	}
	if v, err = c.Value(ctx, name, "org:other:1"); err != nil || v.Override != "" {
		t.Fatalf("the value of a key under no override: %+v %v", v, err)
	}
	b, err := c.Bulk(ctx, []sluice.Item{{Name: name, Decision: sluice.Decision{Key: "vip"}}})
	if err != nil || !b[0].OK || b[0].Override != "vip" {
		t.Fatalf("bulk under allow: %+v %v", b, err)
	}

	first, err := c.ListOverrides(ctx, name, sluice.ListOverridesOptions{Limit: 2})
	if err != nil || len(first.Overrides) != 2 || first.Overrides[0].Match != "bad" || first.Next != "org:acme:*" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	if got := first.Overrides[0].ExpiresAt; got == nil || !got.Equal(until) {
		t.Fatalf("expiresAt read back as %v, want %v", got, until)
	}
	last, err := c.ListOverrides(ctx, name, sluice.ListOverridesOptions{Limit: 2, After: first.Next})
	if err != nil || len(last.Overrides) != 1 || last.Overrides[0].Match != "vip" || last.Overrides[0].Action != sluice.Allow || last.Next != "" {
		t.Fatalf("last page: %+v %v", last, err)
	}

	if err := c.DeleteOverride(ctx, name, "bad"); err != nil {
		t.Fatal(err)
	}
	if r, err = c.Limit(ctx, name, sluice.Decision{Key: "bad"}); err != nil || !r.OK || r.Override != "" {
		t.Fatalf("after the delete: %+v %v", r, err)
	}
	if e := asError(t, c.DeleteOverride(ctx, name, "bad")); e.Status != http.StatusNotFound || e.Code != sluice.CodeNotFound {
		t.Fatalf("second delete: %+v", e)
	}
	_, err = c.PutOverride(ctx, name, sluice.Override{Match: "a*b", Capacity: &capacity})
	if e := asError(t, err); e.Code != sluice.CodeInvalidRequest || e.Field != "match" {
		t.Fatalf("a star inside the match: %+v", e)
	}
	_, err = c.PutOverride(ctx, "no-such-limit", sluice.Override{Match: "k", Action: sluice.Allow})
	if e := asError(t, err); e.Code != sluice.CodeLimitNotFound {
		t.Fatalf("override of a missing limit: %+v", e)
	}
}
