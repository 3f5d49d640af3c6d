package app

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// Secrets are the server keys, all derived from SECRET_KEY (or from one generated on first start
// and kept in the database), so that every instance agrees on them.
type Secrets struct {
	root   []byte
	Pepper []byte // HMAC key for stored API key hashes
}

// Derive returns the key for one purpose.
func (s Secrets) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.root)
	m.Write([]byte("sluice/" + purpose))
	return m.Sum(nil)
}

// LoadSecrets reads SECRET_KEY, or the generated one stored in the database (stored on the
// first start).
func LoadSecrets(ctx context.Context, cfg config.Config, d *db.DB) (Secrets, error) {
	root := cfg.SecretKey
	if root == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return Secrets{}, err
		}
		boot := tenants.NewService(d, nil, nil)
		defer boot.Close()
		stored, err := boot.SetSettingIfAbsent(ctx, "secret_key", base64.RawURLEncoding.EncodeToString(b[:]))
		if err != nil {
			return Secrets{}, fmt.Errorf("secret key: %w", err)
		}
		root = stored
	}
	return NewSecrets(root), nil
}

// NewSecrets derives the server keys from a root secret.
func NewSecrets(root string) Secrets {
	s := Secrets{root: []byte(root)}
	s.Pepper = s.Derive("api-key-pepper")
	return s
}
