-- PostgreSQL's server-side function gains an argument (see its 00016); SQLite has none. This
-- file keeps the two dialects' migration numbers in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
