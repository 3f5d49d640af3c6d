-- The user who made a one-time link (an invite, a password reset link), so that the unused links
-- a user made stop working when that user is removed, disabled or loses the role that let them
-- make the link (internal/tenants/members.go); created_by stays the audit log's name of the
-- maker. An unused link made before this migration gets the user its created_by names
-- ("user:<email>") when that user still exists, and follows the rule from that user's next
-- change; the others (made by the command line, or by a user since removed) keep no maker and
-- work until they expire, 7 days at most (an invite can be revoked on the Members or Users page).

-- +goose Up
ALTER TABLE user_tokens ADD COLUMN created_by_user_id BIGINT;
CREATE INDEX user_tokens_created_by_user ON user_tokens (created_by_user_id);
UPDATE user_tokens SET created_by_user_id = (SELECT u.id FROM users u WHERE 'user:' || u.email = user_tokens.created_by)
WHERE used_at IS NULL;

-- +goose Down
DROP INDEX user_tokens_created_by_user;
ALTER TABLE user_tokens DROP COLUMN created_by_user_id;
