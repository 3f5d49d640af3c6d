// Package captcha implements Sluice's self-hosted proof-of-work captcha: signed challenges,
// verification of solved payloads, a replay store, authorizations of anonymous sessions and the
// Ed25519 tokens that prove them.
//
// # Protocol
//
// The server speaks ALTCHA proof of work version 2 ("PoW v2") exactly as the vendored widget
// (npm altcha@3.2.2, web/static/altcha) expects it, in deterministic mode with the iterated
// SHA algorithm at cost 1 — written with the standard library only, because altcha-lib-go is
// not a dependency.
//
// A challenge, as served by GET /v1/captcha/challenge and fetched by the widget, is
//
//	{"parameters":{"algorithm":"SHA-256","cost":1,
//	  "data":{"maxNumber":"50000","session":"<sha256 hex of the session ID>","tenant":"42"},
//	  "expiresAt":1767225600,"keyLength":32,"keyPrefix":"<32 hex>","nonce":"<32 hex>",
//	  "salt":"<32 hex>"},
//	 "signature":"<64 hex>"}
//
// where signature = hex(HMAC-SHA256(key, canonical JSON of parameters)) and the canonical JSON is
// ALTCHA's: keys sorted at every level, no whitespace (what JSON.stringify produces after
// sortKeys). The server picks a secret counter uniformly in [0, maxNumber] and publishes
// keyPrefix = the first 16 bytes of
//
//	derivedKey = SHA-256(bytes(salt) || bytes(nonce) || uint32_big_endian(counter))
//
// so the client has to try counters from 0 upwards until the derived key starts with keyPrefix:
// maxNumber/2 hashes on average. The widget (3.x) recognises this format by the "parameters"
// object; it would also accept the classic ALTCHA v1 format ({"algorithm","challenge","salt",
// "signature","maxnumber"}), which Sluice neither issues nor accepts.
//
// The widget submits, in its hidden "altcha" form field, standard base64 (btoa) of
//
//	{"challenge":{"parameters":{...as received...},"signature":"..."},
//	 "solution":{"counter":12345,"derivedKey":"<64 hex>","time":210.4}}
//
// and, when configured with test: true, base64 of {"challenge":null,"solution":null,"test":true},
// which is always refused (ErrTestMode).
//
// The data object binds the challenge to one tenant and to the SHA-256 of one session ID (the
// challenge carries only the hash; the raw ID reaches Sluice in the challenge request's query and
// the authorization's body, and is stored nowhere) and records the difficulty it was
// issued at, so that a payload cannot be moved to another tenant or session and a stale
// low-difficulty challenge can be refused after the tenant raised the difficulty.
package captcha
