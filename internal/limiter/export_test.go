package limiter

import "testing"

// Queued is how many decisions wait in the engine's lanes, with the one a lane's worker holds
// while it waits for its turn (tests fill one group with it) and those an away group holds back.
func (e *Engine) Queued() int {
	n := 0
	for _, l := range e.lanes {
		n += len(l.queue)
		if l.waiting.Load() {
			n++
		}
		l.mu.Lock()
		n += len(l.held) + len(l.ready)
		l.mu.Unlock()
	}
	return n
}

// SetAfterDecide makes every group of e call f after its decisions, inside its transaction,
// before anything is written (tests hold two instances' transactions open together with it).
// A group decided in one round trip (plain token bucket decisions) calls it after its commit.
func SetAfterDecide(e *Engine, f func()) { e.afterDecide = f }

// SetAfterStateBatch makes e call f after each batch of a state drop (a reset of every key, a
// deletion's state, a creation's over an inline config's) that more batches follow.
func SetAfterStateBatch(e *Engine, f func()) { e.afterStateBatch = f }

// SetStateBatch makes state drops delete n rows a transaction until the test ends.
func SetStateBatch(t testing.TB, n int64) {
	old := stateBatch.Swap(n)
	t.Cleanup(func() { stateBatch.Store(old) })
}

// SetTakeOne makes e decide one-trip groups of one request with sql instead of pgTakeOne (tests
// sabotage the statement to see the replay catch it).
func SetTakeOne(e *Engine, sql string) { e.takeOne = sql }

// TakeOne is the statement that decides a one-trip group of one request.
var TakeOne = pgTakeOne

// TakeTokens is the statement that calls the function for a one-trip group of several.
var TakeTokens = pgTakeTokens

// ErrOneTripDiffers fails a one-trip group whose database decisions differ from the Go math's.
var ErrOneTripDiffers = errOneTripDiffers

// Stopping reports whether e's Run has begun to stop (its context ended).
func Stopping(e *Engine) bool { return e.stopping.Load() }
