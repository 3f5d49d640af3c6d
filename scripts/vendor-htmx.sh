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
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

(cd "$TMP" && npm pack --silent "htmx.org@$VERSION" >/dev/null)
tar -xzf "$TMP/htmx.org-$VERSION.tgz" -C "$TMP"
PKG="$TMP/package"

# Refuse a tarball that is not the version asked for (npm resolves ranges and tags too).
GOT="$(sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$PKG/package.json" | head -n 1)"
if [ "$GOT" != "$VERSION" ]; then
	echo "vendor-htmx: asked for $VERSION, npm gave $GOT" >&2
	exit 1
fi

rm -rf "$DEST.new"
mkdir -p "$DEST.new"
cp "$PKG/dist/htmx.min.js" "$DEST.new/htmx.min.js"
cp "$PKG/LICENSE" "$DEST.new/LICENSE"
echo "$VERSION" > "$DEST.new/VERSION"
INTEGRITY="$(cd "$TMP" && sha256sum "htmx.org-$VERSION.tgz" | cut -d' ' -f1)"
cat > "$DEST.new/README.md" <<README
# Vendored htmx

npm package \`htmx.org@$VERSION\` (0BSD, see LICENSE): \`dist/htmx.min.js\`, copied from the
published tarball by \`scripts/vendor-htmx.sh $VERSION\` (tarball sha256 \`$INTEGRITY\`). Do not
edit; rerun the script (\`make vendor-htmx\`) instead.
README

rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "vendored htmx.org@$VERSION into $DEST"
