package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// quietZone is a zone whose local time is far from midnight now, so that a daily quota does not
// turn over while a test that runs in real time counts against it.
func quietZone(t *testing.T) string {
	t.Helper()
	for _, z := range []string{"UTC", "Etc/GMT-12", "Etc/GMT+6", "Etc/GMT-6"} {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		if h := time.Now().In(loc).Hour(); h >= 3 && h < 21 {
			return z
		}
	}
	t.Fatal("no zone far from midnight")
	return ""
}

// TestNestedBudgetsHoldUnderTwoInstances hammers eight users under three teams under one org from
// two engines (each with its own connection pool, as two app processes) on one database: no
// budget is ever exceeded (user 50; team 80 each, with five, two and one users; org 200; the
// goroutines exhaust each level in turn, so every level refuses some, then hammer them all), and
// every stored value equals its budget minus what clients saw admitted, so no decision was
// half-applied. The budgets cannot refill during the test (a day's quota, fixed windows of an
// hour), so the admitted totals are the bounds.
func TestNestedBudgetsHoldUnderTwoInstances(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		dbs := instancePools(t, url, 8)
		engines := []*limiter.Engine{newEngine(t, dbs[0], limiter.Options{}), newEngine(t, dbs[1], limiter.Options{})}
		e := engines[0]
		zone := quietZone(t)
		start := time.Now().UnixMilli() - 1000
		mustPut(t, e, "org", quota(200, "day", zone, 0))
		mustPut(t, e, "team", limiter.Definition{Kind: limiter.Quota, Rate: 80, Calendar: "day", TimeZone: zone,
			Parents: []limiter.Parent{{Name: "org", Key: "org:{org}"}}})
		mustPut(t, e, "user", limiter.Definition{Kind: limiter.FixedWindow, Rate: 50, Period: 3_600_000, Start: &start,
			Parents: []limiter.Parent{{Name: "team", Key: "team:{team}"}}})

		const users = 8
		teamOf := func(u int) int { return min(u/5+u/7, 2) } // u0-u4: t0, u5-u6: t1, u7: t2
		var perUser [users]atomic.Int64
		var decided, refused, byUser, byTeam, byOrg atomic.Int64
		var errs sync.Map
		// hammer decides with 16 goroutines over both engines, each on a user of pick, until done
		// reports true (or, when it never does, until a minute has passed: the phase failed).
		hammer := func(what string, pick func(r *rand.Rand) int, done func() bool) {
			t.Helper()
			giveUp := time.Now().Add(time.Minute)
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					eng := engines[g%2]
					r := rand.New(rand.NewPCG(uint64(g), 7))
					for !done() && time.Now().Before(giveUp) {
						u := pick(r)
						d, err := eng.Limit(ctx, tenant, limiter.Request{Name: "user", Key: fmt.Sprintf("u%d", u), Count: 1,
							Attributes: map[string]string{"org": "acme", "team": fmt.Sprintf("t%d", teamOf(u))}})
						decided.Add(1)
						switch {
						case err != nil:
							errs.Store(err.Error(), true)
						case d.OK:
							perUser[u].Add(1)
						default:
							refused.Add(1)
							switch {
							case !d.Parents[1].OK:
								byOrg.Add(1)
							case !d.Parents[0].OK:
								byTeam.Add(1)
							default:
								byUser.Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			if !done() {
				t.Fatalf("%s: not reached within a minute (%d decisions)", what, decided.Load())
			}
		}
		// Every level refuses in turn, whatever the machine's pace: the lone user u7 its own
		// 50, then team t0 (five users) its 80, then the org the 70 it has left to team t1 (two
		// users, 80 of their own); then every user at once until the time is up.
		hammer("u7 refused by its own budget", func(*rand.Rand) int { return users - 1 }, func() bool { return byUser.Load() > 0 })
		hammer("team t0 refused by its budget", func(r *rand.Rand) int { return r.IntN(5) }, func() bool { return byTeam.Load() > 0 })
		hammer("the org refused by its budget", func(r *rand.Rand) int { return 5 + r.IntN(2) }, func() bool { return byOrg.Load() > 0 })
		deadline := time.Now().Add(hammerDuration())
		hammer("every user at once", func(r *rand.Rand) int { return r.IntN(users) }, func() bool { return !time.Now().Before(deadline) })
		errs.Range(func(k, _ any) bool { t.Errorf("decision error leaked: %v", k); return true })

		var org int64
		var team [3]int64
		for u := range users {
			n := perUser[u].Load()
			org += n
			team[teamOf(u)] += n
			if n > 50 {
				t.Errorf("user u%d admitted %d > its budget 50", u, n)
			}
			if v := value(t, e, "user", fmt.Sprintf("u%d", u)); v != float64(50-n) {
				t.Errorf("user u%d: stored %v, clients saw %d admitted (want %d left)", u, v, n, 50-n)
			}
		}
		for i, n := range team {
			if n > 80 {
				t.Errorf("team t%d admitted %d > its budget 80", i, n)
			}
			if v := value(t, e, "team", fmt.Sprintf("team:t%d", i)); v != float64(80-n) {
				t.Errorf("team t%d: stored %v, clients saw %d admitted", i, v, n)
			}
		}
		if org > 200 {
			t.Errorf("org admitted %d > its budget 200", org)
		}
		if v := value(t, e, "org", "org:acme"); v != float64(200-org) {
			t.Errorf("org: stored %v, clients saw %d admitted", v, org)
		}
		retries := dbs[0].Retries() + dbs[1].Retries()
		t.Logf("%d decisions: org admitted %d, teams %v, %d refused (by a user %d, a team %d, the org %d); serialization retries %d",
			decided.Load(), org, team, refused.Load(), byUser.Load(), byTeam.Load(), byOrg.Load(), retries)
		if org != 200 || team[0] != 80 || perUser[7].Load() != 50 {
			t.Errorf("org %d of 200, team t0 %d of 80, user u7 %d of 50: the test did not exhaust every level", org, team[0], perUser[7].Load())
		}
	})
}
