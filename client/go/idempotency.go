package sluice

import (
	"context"
	"fmt"
)

// idempotencyKey is the context key of WithIdempotencyKey.
type idempotencyKey struct{}

// WithIdempotencyKey returns a context under which Limit, Batch, Bulk and Refund (and the calls
// on holds and leases: Hold, SettleHold, ReleaseHold, ReleaseLease, ExtendLease) send key as the
// Idempotency-Key header (1 to 255 printable ASCII characters; use a new one for each logical
// request, such as the ID of the order being charged). Sluice stores the first answer in the
// decision's own transaction and answers a retry with the same key and the same request, within
// 24 hours, with that answer (Result.Replayed), consuming nothing more. Because a retry is then
// safe, these calls are retried like idempotent ones (WithRetries) instead of never; Limit
// bypasses WithBatching. The same key with a different request is a *Error with Code
// "idempotency_key_reused" (422).
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, key)
}

// idempotencyKeyOf is ctx's Idempotency-Key, "" when none, or an error when it is malformed
// (checked here so that a bad key fails before any request, like a bad decision).
func idempotencyKeyOf(ctx context.Context) (string, error) {
	k, ok := ctx.Value(idempotencyKey{}).(string)
	if !ok {
		return "", nil
	}
	if len(k) == 0 || len(k) > 255 {
		return "", fmt.Errorf("%w: an Idempotency-Key is 1 to 255 printable ASCII characters, got %d bytes", ErrInvalidArgument, len(k))
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", fmt.Errorf("%w: an Idempotency-Key is 1 to 255 printable ASCII characters, got byte %#x", ErrInvalidArgument, k[i])
		}
	}
	return k, nil
}
