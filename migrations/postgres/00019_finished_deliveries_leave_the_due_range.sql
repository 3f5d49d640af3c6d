-- Delivered and given-up webhook deliveries get the largest next_attempt_at (what the dispatcher
-- now writes when it finishes one, internal/webhooks/dispatch.go finishedNextAttempt), so that the
-- look for due deliveries reads waiting ones only; rows finished before kept their last attempt's.

-- +goose Up
UPDATE webhook_deliveries SET next_attempt_at = 9223372036854775807
WHERE delivered_at IS NOT NULL OR given_up_at IS NOT NULL;

-- +goose Down
SELECT 1; -- the largest next_attempt_at is as good as the last one for a finished delivery
