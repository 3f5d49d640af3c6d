-- PostgreSQL's limit_state keeps room for heap-only updates (see its 00013); SQLite has no such
-- setting. This file keeps the two dialects' migration numbers in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
