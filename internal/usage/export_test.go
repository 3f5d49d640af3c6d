package usage

// PrunedPerFlush is the most rows one flush prunes.
const PrunedPerFlush = pruneRows * pruneBatches
