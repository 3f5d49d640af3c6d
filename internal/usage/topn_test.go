package usage

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTopNIsBoundedAndExactForHeavyHitters checks the space-saving sketch's guarantees on many
// random skewed streams: never more than TopN keys; every key seen more than n/TopN times is
// followed; a followed key's hits bound its true count from above and hits−overcount from below;
// overcount 0 means exact; with no more than TopN distinct keys every count is exact.
func TestTopNIsBoundedAndExactForHeavyHitters(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 17))
		distinct := 1 + r.IntN(400)
		n := 1 + r.IntN(5000)
		zipf := rand.NewZipf(r, 1.1+r.Float64()*2, 1, uint64(distinct-1))
		sk := newTopN()
		truth := map[string]int64{}
		for range n {
			k := fmt.Sprintf("k%d", zipf.Uint64())
			truth[k]++
			sk.add(k, 1)
		}
		if len(sk.m) > TopN {
			t.Fatalf("seed %d: %d keys followed, more than %d", seed, len(sk.m), TopN)
		}
		for k, c := range truth {
			e := sk.m[k]
			if c*TopN > int64(n) && e == nil {
				t.Fatalf("seed %d: heavy hitter %s (%d of %d) not followed", seed, k, c, n)
			}
			if e == nil {
				continue
			}
			if e.hits < c || e.hits-e.overcount > c {
				t.Fatalf("seed %d: %s counted %d (overcount %d), true %d", seed, k, e.hits, e.overcount, c)
			}
			if e.overcount == 0 && e.hits != c {
				t.Fatalf("seed %d: %s claims to be exact at %d, true %d", seed, k, e.hits, c)
			}
			if len(truth) <= TopN && (e.hits != c || e.overcount != 0) {
				t.Fatalf("seed %d: %d distinct keys fit the sketch, yet %s counted %d±%d, true %d", seed, len(truth), k, e.hits, e.overcount, c)
			}
		}
		var sum int64
		for _, e := range sk.m {
			sum += e.hits
		}
		if sum != int64(n) {
			t.Fatalf("seed %d: the counters sum to %d, want the stream's length %d", seed, sum, n)
		}
	}
}

// BenchmarkTopNAdd is the per-decision cost of following a key: a followed key, and a flood of
// distinct keys (each evicting the least counted).
func BenchmarkTopNAdd(b *testing.B) {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	b.Run("followed", func(b *testing.B) {
		sk := newTopN()
		for i := 0; b.Loop(); i++ {
			sk.add(keys[i%8], 1)
		}
	})
	b.Run("distinct", func(b *testing.B) {
		sk := newTopN()
		for i := 0; b.Loop(); i++ {
			sk.add(keys[i%len(keys)], 1)
		}
	})
}
