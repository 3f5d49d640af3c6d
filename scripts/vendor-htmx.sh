#!/bin/sh
# vendor-htmx.sh refreshes htmx, vendored into web/static/htmx from the npm registry. The version
# is pinned (pass another one as the first argument to upgrade on purpose): the dashboard serves
# it from our own origin under a strict Content-Security-Policy, never from a CDN.
#
# Usage: scripts/vendor-htmx.sh [VERSION]      (run from anywhere; needs npm and tar)
set -eu

VERSION="${1:-2.0.11}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/web/static/htmx"
. "$ROOT/scripts/npm-tarball.sh"
fetch_tarball htmx.org "$VERSION"

rm -rf "$DEST.new"
mkdir -p "$DEST.new"
cp "$PKG/dist/htmx.min.js" "$DEST.new/htmx.min.js"
cp "$PKG/LICENSE" "$DEST.new/LICENSE"
echo "$VERSION" > "$DEST.new/VERSION"
cat > "$DEST.new/README.md" <<README
# Vendored htmx

npm package \`htmx.org@$VERSION\` (0BSD, see LICENSE): \`dist/htmx.min.js\`, copied from the
published tarball by \`scripts/vendor-htmx.sh $VERSION\` (tarball sha256 \`$INTEGRITY\`). Do not
edit; rerun the script (\`make vendor-htmx\`) instead.
README

rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "vendored htmx.org@$VERSION into $DEST"
