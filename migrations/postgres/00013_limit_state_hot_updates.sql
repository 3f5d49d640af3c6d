-- Decisions update limit_state rows in place; only the primary key is indexed and no decision
-- changes it, so an update can be heap-only (HOT: no new index entry) whenever the row's page has
-- room for the new version. A page filled to 100% has none, and then every update also inserts
-- into the primary key's B-tree, whose leaf pages carry the serializable transactions' predicate
-- locks: two groups in flight at once (lanes, another instance) conflict on those pages and
-- retry. Leaving a quarter of each page free keeps updates HOT, and vacuuming the table sooner
-- than the default (a fifth of its rows dead) returns that room quickly under a steady load.
-- (SQLite has neither.)

-- +goose Up
ALTER TABLE limit_state SET (fillfactor = 75, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05);

-- +goose Down
ALTER TABLE limit_state RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
