package limiter

// Queued is how many decisions wait in the engine's lanes, with the one a lane's worker holds
// while it waits for its turn (tests fill one group with it).
func (e *Engine) Queued() int {
	n := 0
	for _, l := range e.lanes {
		n += len(l.queue)
		if l.waiting.Load() {
			n++
		}
	}
	return n
}

// SetAfterDecide makes every group of e call f after its decisions, inside its transaction,
// before anything is written (tests hold two instances' transactions open together with it).
// A group decided in one round trip (plain token bucket decisions) calls it after its commit.
func SetAfterDecide(e *Engine, f func()) { e.afterDecide = f }

// ErrOneTripDiffers fails a one-trip group whose database decisions differ from the Go math's.
var ErrOneTripDiffers = errOneTripDiffers
