package tenants

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Setting returns a server-wide setting, or ErrNotFound. Values may be secrets (SECRET_KEY):
// callers must not log them.
func (s *Service) Setting(ctx context.Context, key string) (string, error) {
	var row settingRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "key = ?", key) })
	if err != nil {
		return "", wrap("setting", err)
	}
	return row.Value, nil
}

// SetSettingIfAbsent stores value under key unless the key already has a value, and returns the
// value that is stored afterwards. When several instances start at once and each generates a
// SECRET_KEY, exactly one wins and all of them get the winner's.
func (s *Service) SetSettingIfAbsent(ctx context.Context, key, value string) (string, error) {
	if key == "" {
		return "", wrap("set setting", invalid("key", "empty key"))
	}
	var row settingRow
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		// ON CONFLICT DO NOTHING is portable (PostgreSQL, SQLite, CockroachDB). On PostgreSQL a
		// conflict with a row our snapshot cannot see is a serialization failure, which db retries;
		// the retry then reads the winner.
		err := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "key"}}, DoNothing: true}).
			Create(&settingRow{Key: key, Value: value}).Error
		if err != nil {
			return err
		}
		return first(tx, &row, "key = ?", key)
	})
	if err != nil {
		return "", wrap("set setting", err)
	}
	return row.Value, nil
}

// PutSetting stores value under key, replacing any value it had.
func (s *Service) PutSetting(ctx context.Context, key, value string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "key"}}, DoUpdates: clause.AssignmentColumns([]string{"value"})}).
			Create(&settingRow{Key: key, Value: value}).Error
	})
	return wrap("put setting", err)
}

// DeleteSetting removes a server-wide setting; deleting one that is absent is not an error.
func (s *Service) DeleteSetting(ctx context.Context, key string) error {
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		return tx.Where("key = ?", key).Delete(&settingRow{}).Error
	})
	return wrap("delete setting", err)
}
