package ui

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluice-dev/sluice/internal/httpserver"
)

// A secret the dashboard shows once (a new API key's) survives the redirect after the form that
// created it (POST-redirect-GET, so that reloading the page cannot create a second key) in a
// cookie of its own: encrypted and authenticated with a key derived from the session key, bound
// to what it is for, to the dashboard session that made it (another user's session, or the
// same user's after a logout, cannot open it: a shared browser's next user sees nothing) and to
// a deadline a minute away, readable only by the next page of that path (HttpOnly,
// SameSite=Strict), and cleared by the page that shows it. Nothing of it is stored on the
// server. Each hand-over has a cookie of its own, named after its purpose (the key's ID), so a
// second key created in the same browser within the minute (another tab) does not replace the
// first one's secret before its page has shown it.

// oneTimeTTL is how long the page after the redirect has to show the secret.
const oneTimeTTL = time.Minute

// oneTimeCookie is the name of the hand-over cookie for purpose: a prefix and 64 bits of the
// purpose's SHA-256 (a cookie name cannot hold every character of an ID; the purpose is no
// secret, the page's URL names it). It is scoped to its page's path, which a __Host- cookie may
// not be (browsers refuse a __Host- cookie whose Path is not /), so in production it is a
// __Secure- cookie: Secure like the session's, and allowed a path.
func (u *UI) oneTimeCookie(purpose string) string {
	sum := sha256.Sum256([]byte(purpose))
	suffix := "_once_" + hex.EncodeToString(sum[:8])
	if u.insecure {
		return cookieInsecure + suffix
	}
	return "__Secure-sluice" + suffix
}

func (u *UI) oneTimeAEAD() cipher.AEAD {
	m := hmac.New(sha256.New, u.sessionKey)
	m.Write([]byte("sluice/dashboard/one-time-secret"))
	block, _ := aes.NewCipher(m.Sum(nil)) // 32 bytes: AES-256, cannot fail
	aead, _ := cipher.NewGCM(block)
	return aead
}

// oneTimeAAD binds a hand-over to its purpose and to the request's dashboard session.
func oneTimeAAD(c *gin.Context, purpose string) []byte {
	return []byte(purpose + "\n" + principalOf(c).sessionID)
}

// putOneTime hands secret, for purpose (e.g. "key:<id>"), to the next page under path.
func (u *UI) putOneTime(c *gin.Context, path, purpose, secret string) {
	aead := u.oneTimeAEAD()
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	deadline := strconv.FormatInt(u.now().Add(oneTimeTTL).Unix(), 10)
	sealed := aead.Seal(nonce, nonce, []byte(deadline+"\n"+secret), oneTimeAAD(c, purpose))
	http.SetCookie(c.Writer, &http.Cookie{Name: u.oneTimeCookie(purpose), Value: base64.RawURLEncoding.EncodeToString(sealed),
		Path: path, MaxAge: int(oneTimeTTL.Seconds()), Secure: !u.insecure, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// takeOneTime returns the secret handed over for purpose, if a live one is there, and clears it
// (not for HEAD, which shows no page to show it on).
func (u *UI) takeOneTime(c *gin.Context, path, purpose string) (string, bool) {
	ck, err := c.Request.Cookie(u.oneTimeCookie(purpose))
	if err != nil || httpserver.AskedHead(c.Request) { // HEAD shows nothing, so it takes nothing
		return "", false
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: u.oneTimeCookie(purpose), Value: "", Path: path, MaxAge: -1,
		Secure: !u.insecure, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	aead := u.oneTimeAEAD()
	if err != nil || len(raw) < aead.NonceSize() {
		return "", false
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], oneTimeAAD(c, purpose))
	if err != nil {
		return "", false
	}
	deadline, secret, ok := strings.Cut(string(plain), "\n")
	until, perr := strconv.ParseInt(deadline, 10, 64)
	if !ok || perr != nil || u.now().Unix() > until {
		return "", false
	}
	return secret, true
}
