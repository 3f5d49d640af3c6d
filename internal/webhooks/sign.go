package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Sign is the webhook-signature header of a delivery by the Standard Webhooks convention:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)), where key is the secret's
// bytes (the base64 after "whsec_") and timestamp the webhook-timestamp header (Unix seconds).
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Verify reports whether header (a webhook-signature value: space-separated "v1,..." entries)
// holds a valid signature of the delivery: what a receiver checks.
func Verify(secret, id string, timestamp int64, body []byte, header string) bool {
	want, err := Sign(secret, id, timestamp, body)
	if err != nil {
		return false
	}
	for _, sig := range strings.Fields(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

func secretKey(secret string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(b) == 0 {
		return nil, errors.New("webhooks: a secret is whsec_ followed by base64")
	}
	return b, nil
}
