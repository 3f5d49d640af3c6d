-- What a hold took from each limit and key it charged (the limit held and its ancestors), recorded
-- when the hold was made, so that closing it gives back no more than still counts against each
-- one (internal/limiter/holds.go). A JSON list; '' for holds made before this migration, which
-- give back as they always did.

-- +goose Up
ALTER TABLE hold_limits ADD COLUMN charges TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE hold_limits DROP COLUMN charges;
