package usage

// PrunedPerFlush is the most rows one flush prunes.
const PrunedPerFlush = pruneRows * pruneBatches

// SetAfterChunk makes every chunk of a's flushes call f once its transaction committed; f's
// error is taken for the transaction's, as a COMMIT whose answer was lost would be.
func SetAfterChunk(a *Aggregator, f func() error) { a.afterChunk = f }
