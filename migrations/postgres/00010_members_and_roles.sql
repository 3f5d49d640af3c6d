-- Members and roles (issue 17): a tenant member is an admin (changes the tenant) or a viewer
-- (reads everything, changes nothing); operators stay users.is_operator. A disabled user cannot
-- log in and has no live session. user_tokens holds one-time links (invites and password
-- resets) by SHA-256 only: the raw token is shown once, to the person who made the link.

-- +goose Up
ALTER TABLE users ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE users ADD COLUMN disabled_at TIMESTAMPTZ;

CREATE TABLE user_tokens (
    id         BIGSERIAL PRIMARY KEY,
    tenant_id  BIGINT REFERENCES tenants(id) ON DELETE CASCADE, -- NULL: an operator's link
    kind       TEXT NOT NULL,                                    -- 'invite' or 'reset'
    token_hash TEXT NOT NULL UNIQUE,
    email      TEXT NOT NULL,
    role       TEXT NOT NULL,
    user_id    BIGINT REFERENCES users(id) ON DELETE CASCADE,    -- a reset's user
    created_by TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    used_at    TIMESTAMPTZ
);
CREATE INDEX user_tokens_tenant ON user_tokens (tenant_id, created_at);

-- +goose Down
DROP TABLE user_tokens;
ALTER TABLE users DROP COLUMN disabled_at;
ALTER TABLE users DROP COLUMN role;
