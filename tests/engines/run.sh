#!/bin/sh
# Tests against real OpenSearch nodes (tests/engines/start): pytest, mounting
# for real. Exit 77 (automake SKIP) with the reason where java, mvn, FUSE or
# a python3 with pytest is missing.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
skip() {
	echo "engine tests skipped: $*"
	exit 77
}
command -v "${JAVA:-java}" >/dev/null 2>&1 || skip "no java (Debian package openjdk-17-jdk-headless)"
command -v javac >/dev/null 2>&1 || skip "no javac (Debian package openjdk-17-jdk-headless)"
command -v "${MVN:-mvn}" >/dev/null 2>&1 || skip "no mvn (Debian package maven)"
"$PYTHON" -c 'import pytest' 2>/dev/null || skip "no python3 with pytest (Debian package python3-pytest)"
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1; then
	skip "no /dev/fuse or fusermount3 (Debian package fuse3)"
fi
[ "$(id -u)" -eq 0 ] || skip "not root (the tests mount and act as root)"
xml=$(pwd)/tests/engines/run.xml
cd "$srcdir" || exit 99
# a private base directory: the cluster's data and the mounts live there
base=$(mktemp -d "${TMPDIR:-/tmp}/tlfs-engines.XXXXXX") || exit 99
# the launcher's class path and class: beside it, or in BASE where the
# source tree is read-only (make distcheck)
if [ -z "${ENGINE_BUILD_DIR:-}" ] && ! { mkdir -p tests/engines/target && [ -w tests/engines/target ]; } 2>/dev/null; then
	ENGINE_BUILD_DIR=$base/target
	export ENGINE_BUILD_DIR
fi
# -s: the failover test prints its figures
"$PYTHON" -m pytest -q -s -rfEs -p no:cacheprovider --basetemp="$base/t" --junitxml="$xml" ${PYTEST_ARGS:-} \
	tests/engines
rc=$?
rm -rf --one-file-system "$base"
exit $rc
