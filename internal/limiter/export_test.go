package limiter

// Queued is how many decisions wait in the engine's lanes (tests fill one group with it).
func (e *Engine) Queued() int {
	n := 0
	for _, l := range e.lanes {
		n += len(l.queue)
	}
	return n
}

// SetAfterDecide makes every group of e call f after its decisions, inside its transaction,
// before anything is written (tests hold two instances' transactions open together with it).
func SetAfterDecide(e *Engine, f func()) { e.afterDecide = f }
