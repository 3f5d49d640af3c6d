package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/algo"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// overridePhase is the overrides in effect after one change: the change was made between start
// and end (its commit lies somewhere in between).
type overridePhase struct {
	start, end time.Time
	state      map[string]limiter.Override
}

// winner is the override that applies to key under state, read from the rule itself (exact
// match, then the longest prefix), independently of the engine's index.
func winner(state map[string]limiter.Override, key string) (limiter.Override, bool) {
	if o, ok := state[key]; ok {
		return o, true
	}
	best, found := limiter.Override{}, false
	for m, o := range state {
		if p, isPrefix := strings.CutSuffix(m, "*"); isPrefix && strings.HasPrefix(key, p) && (!found || len(m) > len(best.Match)) {
			best, found = o, true
		}
	}
	return best, found
}

type overrideObservation struct {
	key            string
	sent, answered time.Time
	d              limiter.Decision
}

// TestOverridesChangedMidLoadNeverOverAdmit runs two engines with their own pools on one
// database (PostgreSQL, as two app instances would; SQLite, two engines on one file), 24 goroutines deciding five keys of a token bucket (rate 10/s, capacity
// 4) while a changer puts and deletes overrides on "org:a:*", "org:*" and "user:1" through
// alternate engines (capacities 1–8, rates 0.5–2/s, allow, deny): 16 changes, each made once 150
// decisions were sent after the one before. It checks:
//
//   - the bound: for each key, over every interval [sent_i, answered_j] of its admissions, the
//     counted admissions (all but those an allow override admitted) number at most
//     C + R·(answered_j − sent_i) + 1, where C and R are the largest capacity and rate per second
//     that the definition or any override matching the key had during the run (a token bucket
//     under changing numbers never holds more than the largest capacity, and refills at most at
//     the largest rate); every allow admission overlaps a phase in which its match was "allow";
//   - freshness on both instances: every decision sent after a change returned and answered
//     before the next began names the override the rule picks from the overrides then in effect,
//     and obeys it (deny refuses with the maximum retryAfter, allow admits, numbers cap remaining
//     at capacity − 1 when admitted).
func TestOverridesChangedMidLoadNeverOverAdmit(t *testing.T) {
	testkit.EachURL(t, overridesChangedMidLoad)
}

func overridesChangedMidLoad(t *testing.T, url string) {
	ctx := context.Background()
	var engines []*limiter.Engine
	var dbs []*db.DB
	for range 2 {
		d, err := db.Open(ctx, url, db.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		dbs = append(dbs, d)
		engines = append(engines, newEngine(t, d, limiter.Options{}))
	}
	if err := dbs[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const defRate, defCap = 1.0, 4.0
	mustPut(t, engines[0], "ov", limiter.Definition{Kind: limiter.TokenBucket, Rate: defRate, Period: 1000, Capacity: ptr(defCap)})
	keys := []string{"org:a:1", "org:a:2", "org:b:1", "user:1", "user:2"}
	matches := []string{"org:a:*", "org:*", "user:1"}

	phases := []overridePhase{{start: time.Now(), end: time.Now(), state: map[string]limiter.Override{}}}
	var phaseEnd, fresh atomic.Int64
	phaseEnd.Store(phases[0].end.UnixNano())
	ready := make(chan struct{}, 1)
	const perPhase = 150

	var mu sync.Mutex
	var seen []overrideObservation
	var errs sync.Map
	var unavailable atomic.Int64 // decisions that failed closed
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			var local []overrideObservation
			for !stopped.Load() {
				key := keys[r.IntN(len(keys))]
				sent := time.Now()
				d, err := engines[g%2].Limit(ctx, tenant, limiter.Request{Name: "ov", Key: key, Count: 1})
				answered := time.Now()
				if errors.Is(err, limiter.ErrUnavailable) {
					// Failing closed under the load of two writers on one SQLite file admits
					// nothing, which no bound forbids; it is counted, not an error.
					unavailable.Add(1)
					continue
				}
				if err != nil {
					errs.Store(err.Error(), true)
					continue
				}
				local = append(local, overrideObservation{key, sent, answered, d})
				if sent.UnixNano() > phaseEnd.Load() && fresh.Add(1) == perPhase {
					select {
					case ready <- struct{}{}:
					default:
					}
				}
			}
			mu.Lock()
			seen = append(seen, local...)
			mu.Unlock()
		}()
	}

	// The changer: one change at a time, through alternate instances, each after perPhase
	// decisions were made wholly after the one before; then one more quiet phase, and stop.
	r := rand.New(rand.NewPCG(99, 1))
	const changes = 16
	waitFor := func(what string) {
		t.Helper()
		select {
		case <-ready:
		case <-time.After(2 * time.Minute):
			stopped.Store(true)
			wg.Wait()
			t.Fatalf("waited 2 minutes for %d decisions after %s", perPhase, what)
		}
	}
	for step := range changes + 1 {
		waitFor(fmt.Sprintf("change %d", step))
		if step == changes {
			break
		}
		prev := phases[len(phases)-1].state
		state := make(map[string]limiter.Override, len(prev)+1)
		for k, v := range prev {
			state[k] = v
		}
		m := matches[r.IntN(len(matches))]
		o := limiter.Override{Match: m}
		deleting := false
		switch k := r.IntN(6); {
		case k == 0 && prev[m].Match != "":
			deleting = true
			delete(state, m)
		case k == 1:
			o.Action = limiter.ActionDeny
		case k == 2:
			o.Action = limiter.ActionAllow
		default:
			o.Capacity = ptr(float64(1 + r.IntN(8)))
			o.Rate = ptr([]float64{0.5, 1, 2}[r.IntN(3)])
		}
		e := engines[step%2]
		start := time.Now()
		var err error
		if !deleting {
			state[m] = o
		}
		for attempt := 0; attempt == 0 || (errors.Is(err, limiter.ErrUnavailable) && attempt < 5); attempt++ {
			if deleting {
				err = e.DeleteOverride(ctx, tenant, "ov", m, nil)
			} else {
				_, _, err = e.PutOverride(ctx, tenant, "ov", o, nil)
			}
		}
		end := time.Now()
		if err != nil {
			stopped.Store(true)
			wg.Wait()
			t.Fatalf("change %d: %v", step, err)
		}
		phases = append(phases, overridePhase{start: start, end: end, state: state})
		phaseEnd.Store(end.UnixNano())
		fresh.Store(0)
		select { // a signal about the previous phase
		case <-ready:
		default:
		}
	}
	stopped.Store(true)
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Errorf("decision error: %v", k); return true })

	// Freshness: decisions wholly inside a quiet window obey the overrides of that window.
	checked := 0
	for _, ob := range seen {
		i := 0
		for i+1 < len(phases) && !phases[i+1].start.After(ob.sent) {
			i++
		}
		if !ob.sent.After(phases[i].end) || (i+1 < len(phases) && !ob.answered.Before(phases[i+1].start)) {
			continue // overlaps a change: either side may have decided it
		}
		checked++
		w, has := winner(phases[i].state, ob.key)
		d := ob.d
		want := ""
		if has {
			want = w.Match
		}
		capacity := defCap
		if has && w.Capacity != nil {
			capacity = *w.Capacity
		}
		switch {
		case d.Override != want:
			t.Fatalf("%s in phase %d (%v): override %q, want %q", ob.key, i, phases[i].state, d.Override, want)
		case has && w.Action == limiter.ActionDeny && (d.OK || d.RetryAfter == nil || *d.RetryAfter != algo.MaxRetryAfter):
			t.Fatalf("%s admitted or misdated under deny %s: %+v", ob.key, w.Match, d)
		case has && w.Action == limiter.ActionAllow && !d.OK:
			t.Fatalf("%s refused under allow %s: %+v", ob.key, w.Match, d)
		case (!has || w.Action == "") && d.OK && d.Remaining > capacity-1+1e-9:
			t.Fatalf("%s admitted with remaining %v under capacity %v (phase %d)", ob.key, d.Remaining, capacity, i)
		}
	}

	// The bound, key by key.
	admitted := 0
	for _, key := range keys {
		maxCap, maxRate := defCap, defRate
		for _, p := range phases {
			for m, o := range p.state {
				if p, isPrefix := strings.CutSuffix(m, "*"); (isPrefix && strings.HasPrefix(key, p)) || m == key {
					if o.Capacity != nil {
						maxCap = max(maxCap, *o.Capacity)
					}
					if o.Rate != nil {
						maxRate = max(maxRate, *o.Rate)
					}
				}
			}
		}
		var spans []testkit.Span
		for _, ob := range seen {
			if ob.key != key || !ob.d.OK {
				continue
			}
			if ob.d.Override != "" && allowIn(phases, ob) {
				continue // admitted without counting
			}
			spans = append(spans, testkit.Span{Sent: ob.sent, Answered: ob.answered})
		}
		admitted += len(spans)
		if err := testkit.TokenBucket(spans, maxCap, maxRate); err != nil {
			t.Errorf("key %s (capacity ≤ %v, rate ≤ %v/s): %v", key, maxCap, maxRate, err)
		}
	}
	t.Logf("%d decisions, %d changes, %d decisions checked inside quiet windows, %d counted admissions; serialization retries %d; %d failed closed",
		len(seen), len(phases)-1, checked, admitted, dbs[0].Retries()+dbs[1].Retries(), unavailable.Load())
	if checked < changes*perPhase/2 || admitted < 10 {
		t.Fatalf("too little happened for the test to mean anything: %d checked, %d admitted", checked, admitted)
	}
}

// allowIn reports whether the decision's override was an allow override at some time its request
// could have been decided, and fails the test's bound otherwise (by returning false, so that the
// admission is counted).
func allowIn(phases []overridePhase, ob overrideObservation) bool {
	for i, p := range phases {
		until := time.Now()
		if i+1 < len(phases) {
			until = phases[i+1].end
		}
		if p.start.After(ob.answered) || until.Before(ob.sent) {
			continue
		}
		if o, ok := p.state[ob.d.Override]; ok && o.Action == limiter.ActionAllow {
			return true
		}
	}
	return false
}
