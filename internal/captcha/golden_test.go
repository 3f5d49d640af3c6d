package captcha

// Golden vector for TestAcceptsPayloadBuiltByWidgetCode. The challenge was issued by this
// package with testKey for session sid of tenant 42 at goldenIssuedAt (maxNumber 5000, ttl
// 10 min); the payload was produced in Node by altcha@3.2.2's dist/lib solveChallenge (SHA
// deriveKey, uint32 counter mode, the widget's worker code) followed by the widget's own payload
// expression btoa(JSON.stringify({challenge:{parameters,signature},solution})). altcha-lib's
// verifySolution accepted the same challenge's signature with testKey, which confirms that
// CanonicalJSON matches ALTCHA's canonical form.
const (
	goldenIssuedAt      = 1772366400 // 2026-03-01T12:00:00Z
	goldenNonce         = "96e0e87bba1fde56836e7ea24af4d0ac"
	goldenWidgetPayload = "eyJjaGFsbGVuZ2UiOnsicGFyYW1ldGVycyI6eyJhbGdvcml0aG0iOiJTSEEtMjU2IiwiY29zdCI6MSwiZGF0YSI6eyJtYXhOdW1iZXIiOiI1MDAwIiwic2Vzc2lvbiI6IjY2Nzk1ZjgwYTAyNjRlNDc5MDhjNWRhYjc1OTM3YjJlZTllYzc2NGE4NzhhOTc2YWFkNGJhMjYwOGU4M2I4NGEiLCJ0ZW5hbnQiOiI0MiJ9LCJleHBpcmVzQXQiOjE3NzIzNjcwMDAsImtleUxlbmd0aCI6MzIsImtleVByZWZpeCI6Ijk1YWY3NGRiNDEyNzJjMmU5ZTk3ZWYxNzVjYmQ4ZWViIiwibm9uY2UiOiI5NmUwZTg3YmJhMWZkZTU2ODM2ZTdlYTI0YWY0ZDBhYyIsInNhbHQiOiI5NGE2ZGNiYzJlZTgyMGRjNTM1NTk5MTZiZGFkNzU0ZCJ9LCJzaWduYXR1cmUiOiJmMjhkYzg5ZTg4ZmM3NjRiMDQwY2VjYmNkNDMwNGVmZTU3YmM2NzUwNzIyODE2ODQyYTY2YzNlYTZlM2Q5ZjE2In0sInNvbHV0aW9uIjp7ImNvdW50ZXIiOjQxNzEsImRlcml2ZWRLZXkiOiI5NWFmNzRkYjQxMjcyYzJlOWU5N2VmMTc1Y2JkOGVlYjNkNmFiZTcxMWFhYTNjYzc4OTA2OTQ3MjkzYTRjYTY2IiwidGltZSI6MTM1LjJ9fQ=="
)
