-- Dashboard sessions are stored by hash only. Until now admin_sessions.id held the raw session
-- ID that the dashboard cookie carries (as the JWT's jti), so a copy of the database could be
-- turned into working cookies by anyone who also had the signing key. From this version the
-- column is id_hash: the SHA-256 (hex) of the session ID, and the raw ID exists only in the
-- cookie.
--
-- Existing rows hold raw IDs and cannot be converted into anything the new code accepts, so
-- they are deleted: every dashboard user is logged out by this migration and logs in again.

-- +goose Up
DELETE FROM admin_sessions;
ALTER TABLE admin_sessions RENAME COLUMN id TO id_hash;

-- +goose Down
-- Hashes cannot be turned back into IDs: going down logs everyone out again.
DELETE FROM admin_sessions;
ALTER TABLE admin_sessions RENAME COLUMN id_hash TO id;
