-- Calendar quotas and nested budgets (limit definitions only; a quota's state is the fixed
-- window's: the count left and the start of the window it counts in).
--   calendar, time_zone, anchor_day: a quota's window ("day" | "week" | "month"), its IANA zone,
--     and a monthly quota's billing day; NULL for the other kinds.
--   parents: the parent budgets a decision also spends, as JSON [{"name": …, "key": …}]; '' for
--     none (the decision path reads it with the definition, in the same query).

-- +goose Up
ALTER TABLE limit_definitions ADD COLUMN calendar TEXT;
ALTER TABLE limit_definitions ADD COLUMN time_zone TEXT;
ALTER TABLE limit_definitions ADD COLUMN anchor_day INTEGER;
ALTER TABLE limit_definitions ADD COLUMN parents TEXT NOT NULL DEFAULT '';

-- +goose Down
-- Quotas and definitions with parents cannot be read by the older code: they are removed with
-- their state.
DELETE FROM limit_state WHERE EXISTS (SELECT 1 FROM limit_definitions d
    WHERE d.tenant_id = limit_state.tenant_id AND d.name = limit_state.name AND (d.kind = 'quota' OR d.parents <> ''));
DELETE FROM limit_definitions WHERE kind = 'quota' OR parents <> '';
ALTER TABLE limit_definitions DROP COLUMN calendar;
ALTER TABLE limit_definitions DROP COLUMN time_zone;
ALTER TABLE limit_definitions DROP COLUMN anchor_day;
ALTER TABLE limit_definitions DROP COLUMN parents;
