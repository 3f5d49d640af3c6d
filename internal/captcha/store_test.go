package captcha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// solvedFor issues and solves a challenge for session id of tenant tid and verifies it.
func solvedFor(t *testing.T, is *Issuer, tid int64, id string) Solved {
	t.Helper()
	ch, err := is.Create(tid, id, 200, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Solve(ch)
	if err != nil {
		t.Fatal(err)
	}
	s, err := is.Verify(p, tid, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuthorizeThenSession(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is, st := newIssuer(t, c.Now), NewStore(d, c.Now)

		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || ok {
			t.Fatalf("before authorization: IsAuthorized = %v, %v", ok, err)
		}
		if _, err := st.Session(ctx, tenant, sid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before authorization: Session err = %v, want ErrNotFound", err)
		}
		exp, err := st.Authorize(ctx, tenant, sid, solvedFor(t, is, tenant, sid), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.Now().Add(time.Hour); !exp.Equal(want) {
			t.Fatalf("expiresAt = %s, want %s", exp, want)
		}
		info, err := st.Session(ctx, tenant, sid)
		if err != nil {
			t.Fatal(err)
		}
		want := SessionInfo{TenantID: tenant, SessionHash: HashSessionID(sid), AuthorizedAt: c.Now(), ExpiresAt: exp}
		if info != want {
			t.Fatalf("Session = %+v, want %+v", info, want)
		}
		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || !ok {
			t.Fatalf("IsAuthorized = %v, %v", ok, err)
		}
		// Another tenant never sees it.
		if ok, _ := st.IsAuthorized(ctx, tenant+1, sid); ok {
			t.Fatal("session visible to another tenant")
		}
		if err := st.Revoke(ctx, tenant+1, sid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Revoke by another tenant: err = %v, want ErrNotFound", err)
		}
		// The raw session ID is never stored.
		var n int64
		if err := d.Gorm.Raw(`SELECT COUNT(*) FROM captcha_sessions WHERE session_hash = ?`, sid).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("raw session ID stored: %d rows, %v", n, err)
		}

		c.Advance(time.Hour)
		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || ok {
			t.Fatalf("at expiry: IsAuthorized = %v, %v", ok, err)
		}
		if _, err := st.Session(ctx, tenant, sid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("at expiry: Session err = %v, want ErrNotFound", err)
		}
	})
}

func TestRevoke(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is, st := newIssuer(t, c.Now), NewStore(d, c.Now)
		if _, err := st.Authorize(ctx, tenant, sid, solvedFor(t, is, tenant, sid), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := st.Revoke(ctx, tenant, sid); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || ok {
			t.Fatalf("after revoke: IsAuthorized = %v, %v", ok, err)
		}
		if err := st.Revoke(ctx, tenant, sid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second revoke: err = %v, want ErrNotFound", err)
		}
		if err := st.Revoke(ctx, tenant, otherSID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("revoke of unknown: err = %v, want ErrNotFound", err)
		}
		// A new proof of work authorizes the session again.
		c.Advance(time.Second)
		if _, err := st.Authorize(ctx, tenant, sid, solvedFor(t, is, tenant, sid), time.Hour); err != nil {
			t.Fatal(err)
		}
		info, err := st.Session(ctx, tenant, sid)
		if err != nil {
			t.Fatalf("after re-authorization: %v", err)
		}
		if !info.AuthorizedAt.Equal(c.Now()) {
			t.Fatalf("AuthorizedAt = %s, want %s", info.AuthorizedAt, c.Now())
		}
	})
}

func TestRevokeHash(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is, st := newIssuer(t, c.Now), NewStore(d, c.Now)
		for _, id := range []string{sid, otherSID} {
			if _, err := st.Authorize(ctx, tenant, id, solvedFor(t, is, tenant, id), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		hash := HashSessionID(sid)
		// Another tenant cannot revoke it, and strings that are not hashes match nothing.
		for _, bad := range []struct {
			tenant int64
			hash   string
		}{
			{tenant + 1, hash},
			{tenant, sid},
			{tenant, strings.ToUpper(hash)},
			{tenant, hash[:63]},
			{tenant, "' OR 1=1 --"},
			{tenant, ""},
		} {
			if err := st.RevokeHash(ctx, bad.tenant, bad.hash); !errors.Is(err, ErrNotFound) {
				t.Fatalf("RevokeHash(%d, %q): err = %v, want ErrNotFound", bad.tenant, bad.hash, err)
			}
		}
		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || !ok {
			t.Fatalf("refused revocations revoked the session: IsAuthorized = %v, %v", ok, err)
		}
		if err := st.RevokeHash(ctx, tenant, hash); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.IsAuthorized(ctx, tenant, sid); err != nil || ok {
			t.Fatalf("after RevokeHash: IsAuthorized = %v, %v", ok, err)
		}
		// Only that session: the other one stays authorized.
		if ok, err := st.IsAuthorized(ctx, tenant, otherSID); err != nil || !ok {
			t.Fatalf("other session: IsAuthorized = %v, %v", ok, err)
		}
		if err := st.RevokeHash(ctx, tenant, hash); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second RevokeHash: err = %v, want ErrNotFound", err)
		}
		// An expired session has nothing left to revoke.
		c.Advance(time.Hour)
		if err := st.RevokeHash(ctx, tenant, HashSessionID(otherSID)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("RevokeHash of expired: err = %v, want ErrNotFound", err)
		}
	})
}

func TestAuthorizeRefuses(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is, st := newIssuer(t, c.Now), NewStore(d, c.Now)
		s := solvedFor(t, is, tenant, sid)
		if _, err := st.Authorize(ctx, tenant+1, sid, s, time.Hour); !errors.Is(err, ErrWrongTenant) {
			t.Fatalf("other tenant: err = %v", err)
		}
		if _, err := st.Authorize(ctx, tenant, otherSID, s, time.Hour); !errors.Is(err, ErrWrongSession) {
			t.Fatalf("other session: err = %v", err)
		}
		if _, err := st.Authorize(ctx, tenant, "bad id", s, time.Hour); !errors.Is(err, ErrInvalidSessionID) {
			t.Fatalf("invalid ID: err = %v", err)
		}
		if _, err := st.Authorize(ctx, tenant, sid, s, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Authorize(ctx, tenant, sid, s, time.Hour); !errors.Is(err, ErrReplay) {
			t.Fatalf("second use: err = %v, want ErrReplay", err)
		}
		late := solvedFor(t, is, tenant, sid)
		c.Advance(5 * time.Minute)
		if _, err := st.Authorize(ctx, tenant, sid, late, time.Hour); !errors.Is(err, ErrExpired) {
			t.Fatalf("expired challenge: err = %v, want ErrExpired", err)
		}
	})
}

func TestConcurrentReplayHasOneWinner(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		is, st := newIssuer(t, nil), NewStore(d, nil)
		s := solvedFor(t, is, tenant, sid)
		const n = 24
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			errs    = make([]error, n)
			wins    int
			replays int
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = st.Authorize(ctx, tenant, sid, s, time.Hour)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrReplay):
				replays++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}
		if wins != 1 || replays != n-1 {
			t.Fatalf("%d successes and %d replays, want 1 and %d", wins, replays, n-1)
		}
		var used int64
		if err := d.Gorm.Raw(`SELECT COUNT(*) FROM captcha_used WHERE tenant_id = ? AND challenge = ?`, tenant, s.ID).Scan(&used).Error; err != nil || used != 1 {
			t.Fatalf("captcha_used rows = %d, %v", used, err)
		}
	})
}

func TestConcurrentDistinctChallengesAllSucceed(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		is, st := newIssuer(t, nil), NewStore(d, nil)
		const n = 20
		solved := make([]Solved, n)
		ids := make([]string, n)
		for i := range n {
			ids[i] = fmt.Sprintf("session-%016d", i)
			solved[i] = solvedFor(t, is, tenant, ids[i])
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = st.Authorize(ctx, tenant, ids[i], solved[i], time.Hour)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("session %d: %v", i, err)
			}
		}
		list, err := st.ListSessions(ctx, tenant, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != n {
			t.Fatalf("ListSessions returned %d, want %d", len(list), n)
		}
	})
}

func TestListSessionsAndSweep(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is, st := newIssuer(t, c.Now), NewStore(d, c.Now)
		ids := []string{"aaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaa2", "aaaaaaaaaaaaaaaa3", "aaaaaaaaaaaaaaaa4"}
		for i, id := range ids {
			ttl := time.Hour
			if i == 0 {
				ttl = time.Minute // expires first
			}
			if _, err := st.Authorize(ctx, tenant, id, solvedFor(t, is, tenant, id), ttl); err != nil {
				t.Fatal(err)
			}
			c.Advance(time.Second)
		}
		if _, err := st.Authorize(ctx, tenant+1, otherSID, solvedFor(t, is, tenant+1, otherSID), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := st.Revoke(ctx, tenant, ids[1]); err != nil {
			t.Fatal(err)
		}
		list, err := st.ListSessions(ctx, tenant, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range list {
			got = append(got, s.SessionHash)
		}
		want := []string{HashSessionID(ids[3]), HashSessionID(ids[2]), HashSessionID(ids[0])}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ListSessions = %v, want newest first, revoked left out: %v", got, want)
		}
		if list, _ := st.ListSessions(ctx, tenant, 1); len(list) != 1 {
			t.Fatalf("limit 1 returned %d", len(list))
		}

		count := func(table string) int64 {
			var n int64
			if err := d.Gorm.Raw(`SELECT COUNT(*) FROM ` + table).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Nothing has expired yet.
		if n, err := st.SweepExpired(ctx, c.Now(), 2); err != nil || n != 0 {
			t.Fatalf("early sweep = %d, %v", n, err)
		}
		// After 2 minutes the first session has expired; challenges are kept usedGrace longer.
		c.Advance(2 * time.Minute)
		if n, err := st.SweepExpired(ctx, c.Now(), 2); err != nil || n != 1 {
			t.Fatalf("sweep of one session = %d, %v", n, err)
		}
		if count("captcha_used") != 5 || count("captcha_sessions") != 4 {
			t.Fatalf("after first sweep: %d used, %d sessions", count("captcha_used"), count("captcha_sessions"))
		}
		// Past every expiry, everything goes, in batches of 2.
		c.Advance(2 * time.Hour)
		if n, err := st.SweepExpired(ctx, c.Now(), 2); err != nil || n != 9 {
			t.Fatalf("full sweep = %d, %v, want 9", n, err)
		}
		if count("captcha_used") != 0 || count("captcha_sessions") != 0 {
			t.Fatalf("after full sweep: %d used, %d sessions", count("captcha_used"), count("captcha_sessions"))
		}
	})
}

// Run owns the sweep: on its interval it deletes what has expired, at the Store's clock, and
// returns once its context ends.
func TestRunSweepsExpiredRowsOnTheInterval(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		ctx := context.Background()
		c := newClock()
		is := newIssuer(t, c.Now)
		type sweep struct {
			n   int
			err error
		}
		swept := make(chan sweep, 1)
		st := NewStore(d, c.Now, WithSweepInterval(time.Millisecond))
		st.swept = func(n int, err error) {
			select {
			case swept <- sweep{n, err}:
			default:
			}
		}
		if _, err := st.Authorize(ctx, tenant, sid, solvedFor(t, is, tenant, sid), time.Minute); err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Hour) // past the session's and the challenge's expiry
		stop := testkit.Run(t, st.Run)
		deleted := 0
		for deleted < 2 {
			select {
			case s := <-swept:
				if s.err != nil {
					t.Fatal(s.err)
				}
				deleted += s.n
			case <-time.After(30 * time.Second):
				t.Fatalf("waited 30 s for background sweeps to delete 2 rows; %d so far", deleted)
			}
		}
		if err := stop(); err != nil {
			t.Fatalf("Run returned %v", err)
		}
		var n int64
		if err := d.Gorm.Raw(`SELECT (SELECT COUNT(*) FROM captcha_used) + (SELECT COUNT(*) FROM captcha_sessions)`).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d rows left after the sweep", n)
		}
	})
}
