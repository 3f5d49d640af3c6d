-- PostgreSQL's server-side function gets a new body (see its 00024); SQLite has none. This file
-- keeps the two dialects' migration numbers in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
