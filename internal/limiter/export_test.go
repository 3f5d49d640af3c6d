package limiter

// Queued is how many decisions wait for the group-commit worker (tests fill one group with it).
func (e *Engine) Queued() int { return len(e.queue) }

// SetAfterDecide makes every group of e call f after its decisions, inside its transaction,
// before anything is written (tests hold two instances' transactions open together with it).
func SetAfterDecide(e *Engine, f func()) { e.afterDecide = f }
