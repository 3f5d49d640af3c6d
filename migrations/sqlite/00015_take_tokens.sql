-- PostgreSQL decides single-shard token buckets in a server-side function (see its 00015);
-- SQLite has none and decides in the process. This file keeps the two dialects' migration
-- numbers in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
