-- Shadow mode and penalties (limit definitions), the penalty end of a key (limit state), and
-- would-be refusals of shadow limits in the usage charts.
--
-- mode: 'enforce' or 'shadow'. penalty: ms a refused key stays refused (0: none).
-- penalty_until: ms since the epoch when the penalty of the key's last refusal ends (0: none).
-- Every existing definition keeps enforcing without a penalty, every existing state row has no
-- penalty running, and no past decision was a shadow refusal: the defaults say exactly that.

-- +goose Up
ALTER TABLE limit_definitions ADD COLUMN mode TEXT NOT NULL DEFAULT 'enforce';
ALTER TABLE limit_definitions ADD COLUMN penalty BIGINT NOT NULL DEFAULT 0;
ALTER TABLE limit_state ADD COLUMN penalty_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_stats ADD COLUMN shadow_refused BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE usage_stats DROP COLUMN shadow_refused;
ALTER TABLE limit_state DROP COLUMN penalty_until;
ALTER TABLE limit_definitions DROP COLUMN penalty;
ALTER TABLE limit_definitions DROP COLUMN mode;
