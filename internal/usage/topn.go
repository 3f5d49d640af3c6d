package usage

import (
	"cmp"
	"slices"
)

// TopN is the number of keys a top-keys sketch follows (per limit, minute and kind).
const TopN = 32

// topN is a space-saving sketch (Metwally, Agrawal and El Abbadi, 2005) of the most frequent keys
// of one stream, in at most TopN counters: a key already followed is counted exactly; a new key
// takes the place of the least counted one and inherits its count as overcount. Its guarantees,
// which the property tests check: every key seen more than n/TopN times of n is followed; a
// followed key's hits are at least its true count and hits−overcount at most; a key followed
// since its first occurrence (overcount 0) is counted exactly. Adding is O(1), but O(TopN) when
// a new key evicts one, so a flood of distinct keys costs a scan of 32 counters per decision.
type topN struct {
	m map[string]*topEntry
}

type topEntry struct{ hits, overcount int64 }

func newTopN() *topN { return &topN{m: make(map[string]*topEntry, 4)} }

func (t *topN) add(key string, n int64) {
	if e, ok := t.m[key]; ok {
		e.hits += n
		return
	}
	if len(t.m) < TopN {
		t.m[key] = &topEntry{hits: n}
		return
	}
	var minKey string
	var minE *topEntry
	for k, e := range t.m {
		if minE == nil || e.hits < minE.hits || (e.hits == minE.hits && k < minKey) {
			minKey, minE = k, e
		}
	}
	delete(t.m, minKey)
	// The evicted entry is reused for the newcomer: no allocation on the eviction path.
	minE.overcount = minE.hits
	minE.hits += n
	t.m[key] = minE
}

// merge adds o's keys to t, as if t had seen o's stream after its own: each key's hits, and its
// overcount with them.
func (t *topN) merge(o *topN) {
	for key, e := range o.m {
		t.add(key, e.hits)
		if te := t.m[key]; te != nil {
			te.overcount += e.overcount
		}
	}
}

// hits is how many decisions t has seen: a space-saving sketch's counters always add up to its
// stream's length, since an evicted key's hits pass to its successor.
func (t *topN) hits() int64 {
	var n int64
	for _, e := range t.m {
		n += e.hits
	}
	return n
}

// KeyCount is one key of a top-keys list.
type KeyCount struct {
	Name string // the limit
	Key  string
	// Hits is how many decisions of the kind the key had; at most Overcount of them may belong
	// to keys the sketch stopped following (0 when the count is exact).
	Hits      int64
	Overcount int64
}

// entries lists the sketch's keys, most hits first (ties by key).
func (t *topN) entries(name string) []KeyCount {
	out := make([]KeyCount, 0, len(t.m))
	for k, e := range t.m {
		out = append(out, KeyCount{Name: name, Key: k, Hits: e.hits, Overcount: e.overcount})
	}
	sortKeyCounts(out)
	return out
}

func sortKeyCounts(s []KeyCount) {
	slices.SortFunc(s, func(a, b KeyCount) int {
		if c := cmp.Compare(b.Hits, a.Hits); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}
