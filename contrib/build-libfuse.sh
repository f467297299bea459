#!/bin/sh
# Builds libfuse from Debian 13 "trixie"'s fuse3 source package (3.17.2)
# into deps/libfuse, a static library that configure then links treelockfs
# against (configure --with-libfuse=auto, the default). FUSE passthrough
# (the kernel reading and writing the backing file itself) needs libfuse
# 3.16 or later; Debian 12 ships 3.14.
#
# - The source comes from Debian's archive with apt-get source, through a
#   private apt state in deps/apt (its own sources list with one deb-src
#   line for trixie, its own lists, cache and status): the system's apt
#   configuration and its package lists are not touched. apt checks the
#   Release file's signature with Debian's archive keyring, and the .dsc and
#   tarballs against the checksums of that signed index; dpkg-source checks
#   the tarballs against the .dsc again when it unpacks them.
# - The mirror is the one the system's apt uses for Debian (override with
#   TREELOCKFS_DEBIAN_MIRROR=URI).
# - Static (as Debian's libfuse3-dev also ships it): treelockfs carries it,
#   no rpath or LD_LIBRARY_PATH, and the system's libfuse3 stays what it is.
#   No fusermount3 of its own: the library runs the system's
#   /usr/bin/fusermount3 (Debian package fuse3) for mounts by non-root users.
#
# Does nothing when deps/libfuse holds a build already, or when the
# system's libfuse has passthrough (Debian 13 and later); --force rebuilds.
# Needs meson, ninja-build, dpkg-dev and debian-archive-keyring (installed
# by contrib/install-deps.sh). Runs as any user; deps/ is the only place it
# writes.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
suite=trixie
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
deps=$top/deps
prefix=$deps/libfuse
stamp=$prefix/.built-from

log() { printf 'build-libfuse: %s\n' "$*"; }
die() {
	printf 'build-libfuse: %s\n' "$*" >&2
	exit 1
}

force=no
[ "${1:-}" = --force ] && force=yes
# a build made before the checkout moved names the old prefix: rebuilt
if [ $force = no ] && [ -f "$stamp" ] &&
	grep -qxF "prefix=$prefix" "$prefix/lib/pkgconfig/fuse3.pc" 2>/dev/null; then
	log "libfuse $(cat "$stamp") is built already in deps/libfuse"
	exit 0
fi
if [ $force = no ] && pkg-config --atleast-version=3.16 fuse3 2>/dev/null; then
	log "the system's libfuse $(pkg-config --modversion fuse3) has passthrough: nothing to build"
	exit 0
fi
for tool in apt-get dpkg-source meson ninja; do
	command -v $tool >/dev/null 2>&1 ||
		die "$tool is missing: run contrib/install-deps.sh (Debian packages meson, ninja-build, dpkg-dev)"
done
[ -r "$keyring" ] || die "$keyring is missing (Debian package debian-archive-keyring)"

# The Debian mirror of the system's apt sources: the URI of the entry for
# this release's own suite (not -updates or -security), deb822 or one-line.
system_mirror() {
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || return 0
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v want="$codename" '
			function flush() {
				if (enabled && uri != "" && (" " suites " ") ~ (" " want " ")) { print uri; found = 1; exit }
				uri = ""; suites = ""; enabled = 1
			}
			BEGIN { enabled = 1 }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "suites:" { $1 = ""; suites = $0 }
			tolower($1) == "enabled:" && tolower($2) == "no" { enabled = 0 }
			END { if (!found) flush() }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v want="$codename" '
			$1 != "deb" && $1 != "deb-src" { next }
			{ i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } }
			$(i + 1) == want { print $i }' "$f"
	done
}
mirror=${TREELOCKFS_DEBIAN_MIRROR:-$(system_mirror | head -n 1)}
[ -n "$mirror" ] ||
	die "no Debian mirror found in the system's apt sources: set TREELOCKFS_DEBIAN_MIRROR=URI"

apt=$deps/apt
rm -rf "$apt" "$deps/src" "$deps/build" "$prefix"
mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/lists/partial" \
	"$apt/cache/archives/partial" "$deps/src"
: >"$apt/status"
echo "deb-src [signed-by=$keyring] $mirror $suite main" >"$apt/etc/sources.list"
set -- -o Dir::Etc::sourcelist="$apt/etc/sources.list" \
	-o Dir::Etc::sourceparts="$apt/etc/sources.list.d" \
	-o Dir::Etc::preferencesparts="$apt/etc/preferences.d" \
	-o Dir::State="$apt" -o Dir::State::lists="$apt/lists" \
	-o Dir::State::status="$apt/status" -o Dir::Cache="$apt/cache" \
	-o Debug::NoLocking=true -o APT::Get::Only-Source=true
# apt drops root to its _apt user for downloads, which may not reach deps/
[ "$(id -u)" -ne 0 ] || set -- "$@" -o APT::Sandbox::User=root
log "fetching $suite's fuse3 source package from $mirror"
apt-get -q "$@" update >"$deps/apt.log" 2>&1 || {
	cat "$deps/apt.log" >&2
	die "apt-get update of the private sources list failed"
}
(cd "$deps/src" && apt-get -q "$@" source fuse3) >>"$deps/apt.log" 2>&1 || {
	cat "$deps/apt.log" >&2
	die "apt-get source fuse3 failed"
}
dsc=$(ls "$deps"/src/fuse3_*.dsc)
version=$(sed -n 's/^Version: //p' "$dsc")
srcdir=$(find "$deps/src" -mindepth 1 -maxdepth 1 -type d -name 'fuse3-*')
[ -f "$srcdir/meson.build" ] || die "no libfuse source tree unpacked from $dsc"

log "building libfuse $version (static) into deps/libfuse"
# bindir only names where the library looks for fusermount3 first
meson setup "$deps/build" "$srcdir" --prefix="$prefix" --libdir=lib --bindir=/usr/bin \
	-Ddefault_library=static -Dutils=false -Dexamples=false -Dtests=false \
	>"$deps/build.log" 2>&1 &&
	ninja -C "$deps/build" >>"$deps/build.log" 2>&1 &&
	meson install -C "$deps/build" >>"$deps/build.log" 2>&1 || {
	cat "$deps/build.log" >&2
	die "the libfuse build failed (log above)"
}
echo "$version" >"$stamp"
log "libfuse $version is in deps/libfuse: configure uses it"
