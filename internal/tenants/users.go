package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
	"gorm.io/gorm"
)

// User is a dashboard user: an operator (all tenants, TenantID nil) or a member of one tenant.
type User struct {
	ID         int64
	Email      string
	TenantID   *int64
	IsOperator bool
	// Role is RoleOperator for operators, RoleAdmin or RoleViewer for a tenant's members.
	Role      Role
	CreatedAt time.Time
	// DisabledAt is when the user was disabled (nil: active): a disabled user cannot log in.
	DisabledAt *time.Time
	// credential is the SHA-256 of the password hash this value was read (or written) with: what
	// a login verified. CreateAdminSession starts a session only while it is still the user's, so
	// a login that checked a password a change or reset has replaced since starts none.
	credential string
	// loginClient is set on the value Login returns ("client ADDRESS"): the session
	// CreateAdminSession starts for it is a login, audited as "login" in the session's
	// transaction, so that a login that starts no session is never audited as one.
	loginClient string
}

// Password rules. The maximum only stops absurd inputs; argon2 itself accepts any length.
const (
	MinPasswordLen = 10 // characters
	maxPasswordLen = 1024
	maxEmailLen    = 254
)

// argon2id parameters: OWASP's recommended minimum (19 MiB, 2 passes, 1 lane). They are stored
// in every hash, so raising them later keeps old hashes verifiable.
const (
	argonMemory  = 19 * 1024
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// argonSlots bounds the argon2id computations running at once (hashing and verifying): each
// holds argonMemory (19 MiB) while it runs, and more of them than the server has cores would not
// finish sooner, so a burst of logins waits here instead of growing the heap.
var argonSlots = make(chan struct{}, 4)

// argonRuns counts argon2id computations, so that tests can see which paths do the work.
var argonRuns atomic.Int64

// argon2Key is argon2.IDKey within argonSlots.
func argon2Key(password, salt []byte, passes, memory uint32, threads uint8, keyLen uint32) []byte {
	argonSlots <- struct{}{}
	defer func() { <-argonSlots }()
	argonRuns.Add(1)
	return argon2.IDKey(password, salt, passes, memory, threads, keyLen)
}

func userFromRow(r userRow) User {
	role := Role(r.Role)
	if r.IsOperator {
		role = RoleOperator
	} else if role != RoleViewer {
		role = RoleAdmin
	}
	return User{ID: r.ID, Email: r.Email, TenantID: r.TenantID, IsOperator: r.IsOperator, Role: role,
		CreatedAt: utc(r.CreatedAt), DisabledAt: utcPtr(r.DisabledAt), credential: credentialOf(r.PasswordHash)}
}

// credentialOf is User.credential for a stored password hash: a digest, so that a User value
// printed by mistake shows nothing of the hash.
func credentialOf(passwordHash string) string {
	sum := sha256.Sum256([]byte(passwordHash))
	return hex.EncodeToString(sum[:])
}

// normalizeEmail lower-cases and checks an address. Lower-casing makes the UNIQUE column
// case-insensitive in practice: "Ann@x.io" and "ann@x.io" are one user.
func normalizeEmail(email string) (string, error) {
	if !utf8.ValidString(email) { // ToLower would turn the bad bytes into U+FFFD: another address
		return "", invalid("email", "email is not valid UTF-8")
	}
	e := strings.ToLower(strings.TrimSpace(email))
	if e == "" || len(e) > maxEmailLen {
		return "", invalid("email", "email must be 1 to %d characters", maxEmailLen)
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Name != "" || a.Address != e || !strings.Contains(e, "@") {
		return "", invalid("email", "email %q is not a plain address like name@example.com", e)
	}
	return e, nil
}

// newEmail is normalizeEmail for an address a user or an invitation is made with: one holding a
// character that makes it read as another on the dashboard (spoofing) is refused. Lookups
// (login, UserByEmail) read addresses as normalizeEmail alone does, so that a user made before
// the rule can still be found, logged in and removed.
func newEmail(email string) (string, error) {
	e, err := normalizeEmail(email)
	if err == nil && strings.ContainsFunc(e, spoofing) {
		return "", invalid("email", "email must not contain control characters or invisible bidirectional and zero-width marks")
	}
	return e, err
}

// hashPassword returns a PHC-style argon2id string: $argon2id$v=19$m=…,t=…,p=…$salt$hash.
func hashPassword(password string) string {
	salt := make([]byte, argonSaltLen)
	_, _ = rand.Read(salt)
	key := argon2Key([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// verifyPassword checks password against a hash made by hashPassword. The parameters are read
// from the hash but bounded, so a tampered row cannot make a login allocate gigabytes.
func verifyPassword(encoded, password string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return false
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return false
	}
	if m < 1024 || m > 1<<20 || t < 1 || t > 16 || p < 1 || p > 16 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(salt) < 8 || len(want) < 16 || len(want) > 64 {
		return false
	}
	got := argon2Key([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// CreateUser creates a dashboard user. Exactly one of operator and tenantID must be set
// (ErrInvalid otherwise); the tenant must exist (ErrNotFound). The email is lower-cased and must
// be a plain address; the password needs at least MinPasswordLen characters and is stored only
// as an argon2id hash. A taken email is ErrConflict. The creation is audited as actor
// ("user.create", with note, if any, after the user's email and role) in the server's security
// log and, for a tenant's member, the tenant's log, in the transaction that creates the user.
func (s *Service) CreateUser(ctx context.Context, email, password string, operator bool, tenantID *int64, actor, note string) (User, error) {
	return s.createUser(ctx, email, password, operator, tenantID, RoleAdmin, actor, note, false)
}

// CreateMember is CreateUser of a member of tenantID with role (admin or viewer; ErrInvalid
// otherwise), made with that role in one transaction.
func (s *Service) CreateMember(ctx context.Context, email, password string, tenantID int64, role Role, actor, note string) (User, error) {
	if err := checkRole(role, &tenantID); err != nil {
		return User{}, wrap("create user", err)
	}
	return s.createUser(ctx, email, password, false, &tenantID, role, actor, note, false)
}

// CreateFirstOperator is CreateUser of an operator that succeeds only while the database has no
// user at all: ErrConflict otherwise. The check is made in the creating serializable
// transaction, so the setup links of two instances on one database, used at once, make one
// operator, not two.
func (s *Service) CreateFirstOperator(ctx context.Context, email, password, actor, note string) (User, error) {
	return s.createUser(ctx, email, password, true, nil, RoleAdmin, actor, note, true)
}

func (s *Service) createUser(ctx context.Context, email, password string, operator bool, tenantID *int64, role Role, actor, note string, onlyFirst bool) (User, error) {
	email, err := newEmail(email)
	if err != nil {
		return User{}, wrap("create user", err)
	}
	if err := checkPassword("password", password); err != nil {
		return User{}, wrap("create user", err)
	}
	if operator == (tenantID != nil) {
		return User{}, wrap("create user", invalid("operator", "a user is either an operator or a member of one tenant"))
	}
	// Hashing is deliberately slow: do it once, outside the (retryable) transaction.
	row := userRow{Email: email, PasswordHash: hashPassword(password), TenantID: tenantID, IsOperator: operator, Role: string(role)}
	err = s.db.Serializable(ctx, func(tx *gorm.DB) error {
		row.ID, row.CreatedAt = 0, s.clock()
		if tenantID != nil {
			if _, err := changeableTenant(tx, *tenantID); err != nil {
				return err
			}
		}
		var n int64
		if onlyFirst {
			if err := tx.Model(&userRow{}).Count(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("a user exists already: %w", ErrConflict)
			}
		}
		if err := tx.Model(&userRow{}).Where("email = ?", email).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a user with this email exists: %w", ErrConflict)
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		detail := row.Email + " (" + string(roleName(row)) + ")"
		if note != "" {
			detail += "; " + note
		}
		return s.auditUserChange(tx, tenantID, actor, "user.create", userTarget(row.ID), detail)
	})
	if err != nil {
		return User{}, wrap("create user", err)
	}
	return userFromRow(row), nil
}

// Login checks an email and password for a client at clientAddr. Any mismatch is
// ErrUnauthorized, without saying which part was wrong; an unknown email still costs one
// argon2id verification so that response time does not reveal which emails exist. Failures
// ("login.failed") are audited here with the client address, in the user's tenant (none for
// operators and unknown emails); a failure for an unknown email records the address only if it
// looks like one, so a password typed into the email field never lands in the log. A success is
// not audited yet: it is a login once its session starts, and CreateAdminSession, given the user
// returned here, audits it as "login" (same actor, tenant, target and client address) in the
// transaction that inserts the session.
func (s *Service) Login(ctx context.Context, email, password, clientAddr string) (User, error) {
	client := "client " + clientAddr
	var row userRow
	normalized, err := normalizeEmail(email)
	if err == nil {
		err = s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "email = ?", normalized) })
		if err != nil && !errors.Is(err, ErrNotFound) {
			return User{}, wrap("login", err)
		}
	}
	if err != nil { // not an address, or no such user
		verifyPassword(s.dummyPasswordHash(), password)
		_ = s.Audit(ctx, nil, loginActor(email), "login.failed", "", client+"; unknown email")
		return User{}, wrap("login", ErrUnauthorized)
	}
	if !passwordMatches(row.PasswordHash, password) {
		_ = s.Audit(ctx, row.TenantID, row.Email, "login.failed", fmt.Sprintf("user:%d", row.ID), client+"; wrong password")
		return User{}, wrap("login", ErrUnauthorized)
	}
	if row.DisabledAt != nil { // checked after the password, so that it says nothing to a guesser
		_ = s.Audit(ctx, row.TenantID, row.Email, "login.failed", fmt.Sprintf("user:%d", row.ID), client+"; user disabled")
		return User{}, wrap("login", ErrUnauthorized)
	}
	u := userFromRow(row)
	u.loginClient = client
	return u, nil
}

// passwordMatches checks a password against a user's hash. A password longer than any we store
// never matches, but is verified all the same: skipping the argon2id work would answer a known
// email's overlong guess 50 times sooner than an unknown email's, which always costs one
// verification, and so reveal which emails have accounts.
func passwordMatches(hash, password string) bool {
	ok := verifyPassword(hash, password)
	return ok && len(password) <= maxPasswordLen
}

// AuditLockout records that a login limit now refuses attempts for email from clientAddr
// ("login.locked"), server-wide, for operators. A limit that counts this account's attempts
// (account) is recorded in the tenant's log too when email is a tenant member's, beside the
// failures that led to it, as Login records those: best effort, since the server's entry stands
// and a wrong password must stay a 401 on a slow database. A limit of the address alone is not:
// it names whichever account was typed last, not the one attacked. limit names the limit that
// ran out and reason says what it counts. The account is named as Login names it, so a password
// typed into the email field never lands in the log.
func (s *Service) AuditLockout(ctx context.Context, email, clientAddr, limit, reason string, account bool) error {
	detail := "client " + clientAddr + "; " + reason
	if err := s.Audit(ctx, nil, loginActor(email), "login.locked", limit, detail); err != nil {
		return err
	}
	if !account {
		return nil // the address's limit: nobody's account
	}
	if u, err := s.UserByEmail(ctx, email); err == nil && u.TenantID != nil {
		_ = s.Audit(ctx, u.TenantID, u.Email, "login.locked", limit, detail)
	}
	return nil
}

// loginActor is how the audit log names the account of a login attempt: the normalized address,
// or a placeholder when the text is not an address.
func loginActor(email string) string {
	if e, err := newEmail(email); err == nil { // what anyone may type is not written with spoofing marks
		return e
	}
	return "(not an email address)"
}

// dummyPasswordHash is a real hash of a random password, made on first need rather than in
// NewService so that services which never log anyone in do not pay for it.
func (s *Service) dummyPasswordHash() string {
	s.dummyOnce.Do(func() { s.dummyHash = hashPassword(rand.Text()) })
	return s.dummyHash
}

// User returns the user with the given ID, or ErrNotFound.
func (s *Service) User(ctx context.Context, id int64) (User, error) {
	var row userRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return first(tx, &row, "id = ?", id) })
	if err != nil {
		return User{}, wrap("user", err)
	}
	return userFromRow(row), nil
}

// CountUsers returns how many users exist; zero means first start, when setup is offered.
func (s *Service) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error { return tx.Model(&userRow{}).Count(&n).Error })
	if err != nil {
		return 0, wrap("count users", err)
	}
	return n, nil
}

// ListUsers returns the members of one tenant, or with tenantID nil every user (operators and
// all tenants' members: for operator pages only), ordered by email.
func (s *Service) ListUsers(ctx context.Context, tenantID *int64) ([]User, error) {
	var rows []userRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		q := tx.Order("email")
		if tenantID != nil {
			q = q.Where("tenant_id = ?", *tenantID)
		}
		return q.Find(&rows).Error
	})
	if err != nil {
		return nil, wrap("list users", err)
	}
	return fromRows(rows, userFromRow), nil
}

// adminSessionIDLen is the length of a session ID: 128 random bits in hex.
const adminSessionIDLen = 32

// CreateAdminSession starts a dashboard session for user, valid for ttl: the user as Login (or
// CreateUser, AcceptInvite, ResetPassword) returned it. The returned ID is 128 random bits in
// hex; the UI puts it in a signed cookie and checks it with AdminSession on every request, which
// is what makes logout and revocation immediate. Only its SHA-256 is stored: the ID itself is
// returned once and kept by nobody but the cookie.
//
// The serializable transaction that inserts the session first checks that the user's password
// is still the one user was read with and that the user is not disabled; otherwise it inserts
// nothing and answers ErrUnauthorized (ErrNotFound for a user who no longer exists). A login
// verifies the password in a transaction of its own, so without this a login that checked the
// old password just before a password change or reset committed (which end the sessions that
// exist then) would start its session just after, and keep it.
//
// For a user Login returned, the same transaction audits the login ("login", with the client
// address Login was given): the entry exists if and only if the session does, and a login that
// cannot be audited starts no session (the audit trail must not have holes).
func (s *Service) CreateAdminSession(ctx context.Context, user User, ttl time.Duration) (string, time.Time, error) {
	return s.createAdminSession(ctx, user, ttl, nil)
}

// ReplaceAdminSession is CreateAdminSession for a browser that holds session old, of oldUser (a
// login as anyone, an invitation or reset link used while logged in): in the new session's
// transaction, old is revoked and its logout audited as oldUser's, if it is still live then, so
// that a saved copy of its cookie does not outlive it, and two logins sent at once revoke and
// audit it once. The entry does not name the new session's user, who may be another tenant's.
func (s *Service) ReplaceAdminSession(ctx context.Context, old string, oldUser, user User, ttl time.Duration) (string, time.Time, error) {
	return s.createAdminSession(ctx, user, ttl, func(tx *gorm.DB) error {
		res := tx.Model(&adminSessionRow{}).Where("id_hash = ? AND revoked_at IS NULL", hashSessionID(old)).Update("revoked_at", s.clock())
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		return s.audit(tx, oldUser.TenantID, "user:"+oldUser.Email, "logout", fmt.Sprintf("user:%d", oldUser.ID),
			"replaced by a new session in the same browser")
	})
}

// createAdminSession is CreateAdminSession, running also, in its transaction, before (when not nil).
func (s *Service) createAdminSession(ctx context.Context, user User, ttl time.Duration, before func(tx *gorm.DB) error) (string, time.Time, error) {
	if ttl <= 0 {
		return "", time.Time{}, wrap("create admin session", invalid("ttl", "ttl must be positive"))
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	now := s.clock()
	id := hex.EncodeToString(b[:])
	row := adminSessionRow{IDHash: hashSessionID(id), UserID: user.ID, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var current userRow
		if err := first(tx, &current, "id = ?", user.ID); err != nil {
			return err
		}
		switch {
		case user.credential == "" || user.credential != credentialOf(current.PasswordHash):
			return fmt.Errorf("the password changed since it was checked: %w", ErrUnauthorized)
		case current.DisabledAt != nil:
			return fmt.Errorf("user disabled: %w", ErrUnauthorized)
		}
		if before != nil {
			if err := before(tx); err != nil {
				return err
			}
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		if user.loginClient == "" {
			return nil
		}
		return s.audit(tx, user.TenantID, user.Email, "login", fmt.Sprintf("user:%d", user.ID), user.loginClient)
	})
	if err != nil {
		return "", time.Time{}, wrap("create admin session", err)
	}
	return id, row.ExpiresAt, nil
}

// AdminSession returns the user of a live session. Unknown, revoked and expired sessions are all
// ErrUnauthorized; IDs of the wrong shape are refused without a query.
func (s *Service) AdminSession(ctx context.Context, id string) (User, error) {
	if !validSessionID(id) {
		return User{}, wrap("admin session", ErrUnauthorized)
	}
	var sess adminSessionRow
	var user userRow
	err := s.db.ReadOnly(ctx, func(tx *gorm.DB) error {
		if err := first(tx, &sess, "id_hash = ?", hashSessionID(id)); err != nil {
			return err
		}
		return first(tx, &user, "id = ?", sess.UserID)
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return User{}, wrap("admin session", ErrUnauthorized)
	case err != nil:
		return User{}, wrap("admin session", err)
	case sess.RevokedAt != nil:
		return User{}, wrap("admin session", fmt.Errorf("revoked: %w", ErrUnauthorized))
	case !s.clock().Before(sess.ExpiresAt):
		return User{}, wrap("admin session", fmt.Errorf("expired: %w", ErrUnauthorized))
	case user.DisabledAt != nil:
		return User{}, wrap("admin session", fmt.Errorf("user disabled: %w", ErrUnauthorized))
	}
	return userFromRow(user), nil
}

// RevokeAdminSession ends a session at once (logout). An unknown ID is ErrNotFound; revoking a
// revoked session is a no-op.
func (s *Service) RevokeAdminSession(ctx context.Context, id string) error {
	if !validSessionID(id) {
		return wrap("revoke admin session", ErrNotFound)
	}
	err := s.db.Serializable(ctx, func(tx *gorm.DB) error {
		var sess adminSessionRow
		if err := first(tx, &sess, "id_hash = ?", hashSessionID(id)); err != nil {
			return err
		}
		if sess.RevokedAt != nil {
			return nil
		}
		return tx.Model(&adminSessionRow{}).Where("id_hash = ?", sess.IDHash).Update("revoked_at", s.clock()).Error
	})
	return wrap("revoke admin session", err)
}

// hashSessionID is what admin_sessions stores for a session ID. A plain SHA-256 is enough (no
// salt, no stretching): the ID is 128 random bits, so there is nothing to guess offline.
func hashSessionID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func validSessionID(id string) bool {
	if len(id) != adminSessionIDLen {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}
