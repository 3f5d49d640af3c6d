-- Calendar quotas and nested budgets (limit definitions only; a quota's state is the fixed
-- window's: the count left and the start of the window it counts in).
--   calendar, time_zone, anchor_day: a quota's window ("day" | "week" | "month"), its IANA zone,
--     and a monthly quota's billing day; NULL for the other kinds.
--   parents: the parent budgets a decision also spends, as JSON [{"name": …, "key": …}]; '' for
--     none (the decision path reads it with the definition, in the same query).

-- +goose Up
ALTER TABLE limit_definitions
    ADD COLUMN calendar   TEXT,
    ADD COLUMN time_zone  TEXT,
    ADD COLUMN anchor_day INTEGER,
    ADD COLUMN parents    TEXT NOT NULL DEFAULT '';

-- +goose Down
-- Quotas and definitions with parents cannot be read by the older code: they are removed with
-- their state.
DELETE FROM limit_state s USING limit_definitions d
    WHERE s.tenant_id = d.tenant_id AND s.name = d.name AND (d.kind = 'quota' OR d.parents <> '');
DELETE FROM limit_definitions WHERE kind = 'quota' OR parents <> '';
ALTER TABLE limit_definitions
    DROP COLUMN calendar,
    DROP COLUMN time_zone,
    DROP COLUMN anchor_day,
    DROP COLUMN parents;
