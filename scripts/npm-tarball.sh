# npm-tarball.sh is sourced by the vendoring scripts: fetch_tarball NAME VERSION downloads the
# published tarball of npm package NAME at exactly VERSION into a temporary directory (removed on
# exit) and sets PKG (the unpacked package directory) and INTEGRITY (the tarball's sha256).
# Needs npm, tar and sha256sum.

fetch_tarball() {
	TMP="$(mktemp -d)"
	trap 'rm -rf "$TMP"' EXIT
	(cd "$TMP" && npm pack --silent "$1@$2" >/dev/null)
	tar -xzf "$TMP/$1-$2.tgz" -C "$TMP"
	PKG="$TMP/package"
	# Refuse a tarball that is not the version asked for (npm resolves ranges and tags too).
	GOT="$(sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$PKG/package.json" | head -n 1)"
	if [ "$GOT" != "$2" ]; then
		echo "$1: asked for $2, npm gave $GOT" >&2
		exit 1
	fi
	INTEGRITY="$(cd "$TMP" && sha256sum "$1-$2.tgz" | cut -d' ' -f1)"
}
