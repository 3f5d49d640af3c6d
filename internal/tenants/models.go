package tenants

import "time"

// GORM models: one per table of migrations/*/00001_initial.sql, with gorm tags only. They stay
// unexported so that storage details (hashes, joined strings) never reach JSON or templates.

type tenantRow struct {
	ID                int64      `gorm:"column:id;primaryKey;autoIncrement"`
	Name              string     `gorm:"column:name"`
	AllowedOrigins    string     `gorm:"column:allowed_origins"` // newline-separated
	CaptchaDifficulty int        `gorm:"column:captcha_difficulty"`
	CreatedAt         time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	SuspendedAt       *time.Time `gorm:"column:suspended_at"`
	DeletingAt        *time.Time `gorm:"column:deleting_at"` // DeleteTenant has begun
}

func (tenantRow) TableName() string { return "tenants" }

type apiKeyRow struct {
	ID         string     `gorm:"column:id;primaryKey"`
	TenantID   int64      `gorm:"column:tenant_id"`
	Kind       string     `gorm:"column:kind"`
	Label      string     `gorm:"column:label"`
	Hash       string     `gorm:"column:hash"`
	Hint       string     `gorm:"column:hint"`
	CreatedAt  time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	RevokedAt  *time.Time `gorm:"column:revoked_at"`
	LastUsedAt *time.Time `gorm:"column:last_used_at"`
}

func (apiKeyRow) TableName() string { return "api_keys" }

type userRow struct {
	ID           int64      `gorm:"column:id;primaryKey;autoIncrement"`
	Email        string     `gorm:"column:email"`
	PasswordHash string     `gorm:"column:password_hash"`
	TenantID     *int64     `gorm:"column:tenant_id"`
	IsOperator   bool       `gorm:"column:is_operator"`
	Role         string     `gorm:"column:role"` // a member's: "admin" or "viewer"
	CreatedAt    time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	DisabledAt   *time.Time `gorm:"column:disabled_at"`
}

func (userRow) TableName() string { return "users" }

// adminSessionRow is a dashboard session. The raw session ID lives only in the cookie; the row
// holds its SHA-256 (hashSessionID), so a copy of the database yields no usable session.
type adminSessionRow struct {
	IDHash    string     `gorm:"column:id_hash;primaryKey"`
	UserID    int64      `gorm:"column:user_id"`
	CreatedAt time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	ExpiresAt time.Time  `gorm:"column:expires_at"`
	RevokedAt *time.Time `gorm:"column:revoked_at"`
}

func (adminSessionRow) TableName() string { return "admin_sessions" }

// userTokenRow is a one-time link (an invite or a password reset), stored by SHA-256 only.
type userTokenRow struct {
	ID        int64  `gorm:"column:id;primaryKey;autoIncrement"`
	TenantID  *int64 `gorm:"column:tenant_id"`
	Kind      string `gorm:"column:kind"`
	TokenHash string `gorm:"column:token_hash"`
	Email     string `gorm:"column:email"`
	Role      string `gorm:"column:role"`
	UserID    *int64 `gorm:"column:user_id"`
	CreatedBy string `gorm:"column:created_by"`
	// CreatedByUserID is the user who made the link (nil: the command line, or a link older
	// than migration 00017 whose maker was gone): their removal, disabling or demotion deletes it.
	CreatedByUserID *int64     `gorm:"column:created_by_user_id"`
	CreatedAt       time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	ExpiresAt       time.Time  `gorm:"column:expires_at"`
	UsedAt          *time.Time `gorm:"column:used_at"`
}

func (userTokenRow) TableName() string { return "user_tokens" }

type settingRow struct {
	Key   string `gorm:"column:key;primaryKey"`
	Value string `gorm:"column:value"`
}

func (settingRow) TableName() string { return "settings" }

type auditRow struct {
	ID        int64     `gorm:"column:id;primaryKey;autoIncrement"`
	TenantID  *int64    `gorm:"column:tenant_id"`
	Actor     string    `gorm:"column:actor"`
	Action    string    `gorm:"column:action"`
	Target    string    `gorm:"column:target"`
	Detail    string    `gorm:"column:detail"`
	CreatedAt time.Time `gorm:"column:created_at;autoCreateTime:false"`
}

func (auditRow) TableName() string { return "audit_log" }

// utc normalises a time read back from either dialect (PostgreSQL returns the session's zone).
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// fromRows converts database rows to what the package returns, keeping an empty result a
// non-nil slice (it is rendered as [] rather than null).
func fromRows[R, T any](rows []R, convert func(R) T) []T {
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		out = append(out, convert(r))
	}
	return out
}
