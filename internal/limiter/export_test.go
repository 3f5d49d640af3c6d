package limiter

// Queued is how many decisions wait for the group-commit worker (tests fill one group with it).
func (e *Engine) Queued() int { return len(e.queue) }
