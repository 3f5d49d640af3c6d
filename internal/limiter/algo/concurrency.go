package algo

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Concurrency limits. A key's state is the list of the expiry times (ms since the epoch) of its
// leases, kept in State.Counters: a lease occupies a slot until it is released or until its
// expiry, whichever comes first. Counting only the entries after now is the whole rule, so a
// client that stops without releasing frees its slot at its lease's expiry by the deciding clock,
// whatever any sweeper does. A decision admits when fewer than Rate entries are unexpired and
// then adds now + LeaseTTL; a refusal's retryAfter is the expiry that leaves fewer than Rate
// unexpired (the earliest, unless Rate was lowered below what is in flight). Leases are not told
// apart by the state: an entry is a slot, and a release removes one entry equal to the lease's
// expiry (two leases with one expiry are interchangeable slots).

// MaxLeaseTTL bounds a concurrency limit's leaseTtl (ms): one day.
const MaxLeaseTTL = 86_400_000

// concurrencyProblems checks the fields of a concurrency limit.
func (d Definition) concurrencyProblems() []FieldError {
	var fe []FieldError
	add := func(field, msg string) { fe = append(fe, FieldError{field, msg}) }
	if d.LeaseTTL < 1 || d.LeaseTTL > MaxLeaseTTL {
		add("leaseTtl", fmt.Sprintf("is required for concurrency limits: a whole number of milliseconds from 1 to %d", MaxLeaseTTL))
	}
	if d.Rate != math.Trunc(d.Rate) || d.Rate > MaxInFlight {
		add("rate", fmt.Sprintf("is the most leases in flight for a concurrency limit: a whole number from 1 to %d", MaxInFlight))
	}
	if d.Period != 0 {
		add("period", "does not apply to concurrency limits: leaseTtl says how long a lease lasts")
	}
	if d.Capacity != nil {
		add("capacity", "does not apply to concurrency limits: rate is the most leases in flight")
	}
	if d.MaxReserved != nil {
		add("maxReserved", "does not apply to concurrency limits (they cannot reserve)")
	}
	if d.Shards > 1 {
		add("shards", "concurrency limits have one shard (every lease of a key is counted in its one state row)")
	}
	if d.Mode == Shadow {
		add("mode", "concurrency limits cannot run in shadow mode (a lease is a slot taken or not)")
	}
	if d.Penalty != 0 {
		add("penalty", "does not apply to concurrency limits")
	}
	if len(d.Parents) > 0 {
		add("parents", "concurrency limits cannot have parents: put the concurrency limit and the budget in one batch instead")
	}
	return fe
}

// MaxInFlight bounds a concurrency limit's rate: the state row lists every lease in flight.
const MaxInFlight = 10_000

// viewConcurrency is a concurrency shard at now: its unexpired leases, sorted, and the free slots.
func viewConcurrency(p shardParams, st State, now int64) shardView {
	var live []float64
	for _, x := range st.Counters {
		if x > float64(now) {
			live = append(live, x)
		}
	}
	slices.Sort(live)
	return shardView{avail: p.rate - float64(len(live)), ts: max(st.TS, now), counters: live}
}

// decideConcurrency admits one lease when a slot is free (count is 1, CheckCount): the new state
// holds the unexpired leases and the new one's expiry, now + LeaseTTL. A refusal writes nothing
// and says when a slot frees (slotFreesAt).
func decideConcurrency(def Definition, st State, now int64) Outcome {
	p := def.shardParams()
	v := viewConcurrency(p, st, now)
	out := Outcome{RetryAfter: math.NaN(), Writes: make([]State, 1)}
	if v.avail < 1 {
		out.Remaining = math.Max(v.avail, 0)
		out.RetryAfter = slotFreesAt(p.rate, v.counters) - float64(now)
		return out
	}
	c := append(v.counters, float64(now+def.LeaseTTL))
	out.OK, out.Remaining = true, v.avail-1
	out.Writes[0] = State{Value: v.avail - 1, TS: v.ts, Counters: c, Exists: true}
	return out
}

// slotFreesAt is when a full concurrency shard frees a slot, given its unexpired expiries in
// ascending order (viewConcurrency): when fewer than rate remain, at the expiry that leaves
// rate - 1. That is the earliest only while no more than rate are in flight; after rate was
// lowered (a definition or an override; the leases are kept), 5 in flight under a rate of 2
// free a slot at the fourth expiry, not the first. +Inf when none does: a rate below 1 cannot
// be stored (validation), and a damaged list reads as leases that never expire (parseLeases).
func slotFreesAt(rate float64, expiries []float64) float64 {
	i := len(expiries) - int(rate) // expiries i+1 .. are the rate - 1 left in flight
	if rate < 1 || i < 0 || i >= len(expiries) {
		return math.Inf(1)
	}
	return expiries[i]
}

// LeaseExpiry is the expiry a lease acquired (or extended) at now gets.
func LeaseExpiry(def Definition, now int64) int64 { return now + def.LeaseTTL }

// ReleaseLease ends the lease that expires at expiresAt: its entry leaves the state, with every
// expired one. found is false when no unexpired entry has that expiry (the lease already ended).
func ReleaseLease(def Definition, st State, expiresAt, now int64) (out State, found bool) {
	return ExtendLease(def, st, expiresAt, 0, now)
}

// ExtendLease moves the lease that expires at expiresAt to newExpiry (0 removes it). found is
// false when no unexpired entry has that expiry; the state is then returned without it changing
// what is in flight.
func ExtendLease(def Definition, st State, expiresAt, newExpiry, now int64) (out State, found bool) {
	v := viewConcurrency(def.shardParams(), st, now)
	c := v.counters
	if i := slices.Index(c, float64(expiresAt)); i >= 0 && expiresAt > now {
		found = true
		c = slices.Delete(slices.Clone(c), i, i+1)
		if newExpiry > now {
			c = append(c, float64(newExpiry))
			slices.Sort(c)
		}
	}
	return State{Value: def.Rate - float64(len(c)), TS: v.ts, Counters: c, PenaltyUntil: st.PenaltyUntil, Exists: true}, found
}

// InFlight is how many leases of a concurrency shard are unexpired at now.
func InFlight(st State, now int64) int {
	n := 0
	for _, x := range st.Counters {
		if x > float64(now) {
			n++
		}
	}
	return n
}

// parseLeases reads the stored expiry list of a concurrency shard. A damaged list reads as
// every slot taken until a reset, which refuses rather than admits.
func parseLeases(def Definition, s string) []float64 {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]float64, 0, len(parts))
	for _, part := range parts {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || math.IsNaN(v) {
			full := make([]float64, int(math.Min(def.Rate, MaxInFlight)))
			for i := range full {
				full[i] = math.Inf(1)
			}
			return full
		}
		out = append(out, v)
	}
	return out
}
