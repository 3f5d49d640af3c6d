#!/bin/sh
# vendor-altcha.sh refreshes the ALTCHA widget vendored into web/static/altcha from the npm
# registry. The version is pinned (pass another one as the first argument to upgrade on purpose)
# because the Go verifier in internal/captcha must match the widget's challenge and payload
# formats byte for byte; after an upgrade, re-read the widget's fetchChallenge/verify code and
# run the captcha and browser tests.
#
# Usage: scripts/vendor-altcha.sh [VERSION]      (run from anywhere; needs npm and tar)
set -eu

VERSION="${1:-3.2.2}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/web/static/altcha"
. "$ROOT/scripts/npm-tarball.sh"
fetch_tarball altcha "$VERSION"

rm -rf "$DEST.new"
mkdir -p "$DEST.new/external" "$DEST.new/workers"
# Self-contained bundle (widget + inline CSS + SHA/PBKDF2 workers started from blob: URLs):
# an ES module with no exports, for <script type="module">.
cp "$PKG/dist/main/altcha.min.js" "$DEST.new/altcha.min.js"
# The same as a classic script for <script defer>; renamed from .umd.min.cjs so that it is
# served as text/javascript (.cjs has no MIME type in Go's table).
cp "$PKG/dist/main/altcha.umd.min.cjs" "$DEST.new/altcha.umd.min.js"
# For a strict Content-Security-Policy (no inline styles, no blob: workers): the external build,
# its stylesheet and the SHA worker, registered by the page with
# $altcha.algorithms.set('SHA-256', () => new Worker('/static/altcha/workers/sha.js')).
cp "$PKG/dist/external/altcha.min.js" "$DEST.new/external/altcha.min.js"
cp "$PKG/dist/external/altcha.css" "$DEST.new/external/altcha.css"
cp "$PKG/dist/workers/sha.js" "$DEST.new/workers/sha.js"
cp "$PKG/LICENSE.txt" "$DEST.new/LICENSE.txt"
echo "$VERSION" > "$DEST.new/VERSION"

cat > "$DEST.new/README.md" <<README
# Vendored ALTCHA widget

npm package \`altcha@$VERSION\` (MIT, see LICENSE.txt), copied from the published tarball by
\`scripts/vendor-altcha.sh $VERSION\` (tarball sha256 \`$INTEGRITY\`). Do not edit these files;
rerun the script instead.

| file | from the package | use |
|---|---|---|
| altcha.min.js | dist/main/altcha.min.js | \`<script type="module" src="/static/altcha/altcha.min.js">\`; self-contained (inline CSS, workers from blob: URLs, so CSP needs \`worker-src blob:\` and inline styles) |
| altcha.umd.min.js | dist/main/altcha.umd.min.cjs | the same as a classic \`<script defer>\` |
| external/altcha.min.js, external/altcha.css | dist/external/ | strict-CSP build: load the CSS with \`<link>\` and register the worker below |
| workers/sha.js | dist/workers/sha.js | SHA-256 worker for the external build: \`\$altcha.algorithms.set('SHA-256', () => new Worker('/static/altcha/workers/sha.js'))\` |

Sluice's server (internal/captcha) speaks the widget's native ALTCHA v2 proof-of-work format
(\`{"parameters": {...}, "signature": "..."}\` challenges, base64 JSON
\`{"challenge": {...}, "solution": {"counter", "derivedKey", "time"}}\` payloads), algorithm
SHA-256, deterministic mode. Render the widget with
\`<altcha-widget challenge="/v1/captcha/challenge?pk=...&sid=..."></altcha-widget>\`; the
payload lands in the hidden form field \`altcha\`.
README

rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "vendored altcha@$VERSION into $DEST"
