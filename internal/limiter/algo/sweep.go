package algo

// ReadsAsMissing reports whether st, the stored state of one shard of def, reads exactly like no
// state at each of the clock readings at: the view every decision is computed from (available
// tokens, the ts a write would store, a sliding window's counters, sub-interval and elapsed
// fraction) is the same with st as without it. Every decision, check, value and retryAfter is a
// function of that view, so deleting such state changes nothing, now or later (each kind only
// gets fuller as time passes without writes). A ts ahead of a reading is never missing: it is
// what stops a fast clock's skew from minting tokens; a penalty still running at a reading is never
// missing either (no row means no penalty).
func ReadsAsMissing(def Definition, st State, origin int64, at ...int64) bool {
	p := def.shardParams()
	for _, t := range at {
		if st.TS > t || st.PenaltyUntil > t || !sameView(viewOf(p, st, t, origin), viewOf(p, State{}, t, origin)) {
			return false
		}
	}
	return true
}

// sameView compares every field a decision reads.
func sameView(a, b shardView) bool {
	if a.avail != b.avail || a.ts != b.ts || a.n != b.n || a.f != b.f || len(a.counters) != len(b.counters) {
		return false
	}
	for i := range a.counters {
		if a.counters[i] != b.counters[i] {
			return false
		}
	}
	return true
}
