#!/bin/sh
# The object-store tier: two hosts' s3fs mounts of one bucket on an S3
# server of our own (s3server/, built with go from the modules its go.mod
# pins), with and without treelockfs (lock_store=es) on top, under a storm
# of file and directory renames. pytest, mounting for real; results also go
# to run.xml (JUnit XML), which run-tests.sh counts. Exit 77 (automake SKIP)
# with the reason where go, s3fs, FUSE, root, a python3 with pytest or the
# Go modules are missing.
#   TREELOCKFS_OBJSTORE_SECONDS  length of each storm (default 8)
#   TREELOCKFS_OBJSTORE_ROUNDS   storms each way (default 1 with treelockfs;
#                                without, up to 3 until the damage shows)
TIER=objstore WHAT="object-store tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
have_fuse || skip "no /dev/fuse or fusermount3 (Debian package fuse3)"
[ "$(id -u)" -eq 0 ] || skip "not root (s3fs and treelockfs mount with allow_other)"
command -v s3fs >/dev/null 2>&1 || skip "no s3fs (Debian package s3fs)"
GO=${GO:-go}
command -v "$GO" >/dev/null 2>&1 || skip "no go (Go 1.24 or later)"
# never fetch a toolchain: build with the installed one or skip
GOTOOLCHAIN=local
export GOTOOLCHAIN
goversion=$("$GO" env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
set -- $goversion
if [ $# -ne 2 ] || [ "$1" -lt 1 ] || { [ "$1" -eq 1 ] && [ "$2" -lt 24 ]; }; then
	skip "go is $("$GO" env GOVERSION 2>/dev/null), the S3 server needs Go 1.24 or later"
fi

# The server's binary is kept in the build tree and rebuilt when a source
# is newer.
build=$(pwd)/tests/objstore/.build
bin=$build/s3server
src=$srcdir/tests/objstore/s3server
mkdir -p "$build" || exit 99
if [ ! -x "$bin" ] || [ -n "$(find "$src" -newer "$bin" -type f 2>/dev/null)" ]; then
	echo "building the S3 server (tests/objstore/s3server)"
	if ! (cd "$src" && "$GO" mod download) >"$build/download.log" 2>&1; then
		cat "$build/download.log"
		skip "go could not fetch the modules that tests/objstore/s3server/go.mod pins (no module proxy?)"
	fi
	(cd "$src" && "$GO" build -trimpath -mod=readonly -o "$bin.tmp" .) || exit 99
	mv "$bin.tmp" "$bin" || exit 99
fi
S3SERVER_BIN=$bin
export S3SERVER_BIN

base=$(mktemp -d "${TMPDIR:-/tmp}/tlfs-objstore.XXXXXX") || exit 99
# -s: the storms print their figures
run_pytest -s --basetemp="$base/t"
rc=$?
rm -rf --one-file-system "$base"
exit $rc
