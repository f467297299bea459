#!/bin/sh
# Tests against real OpenSearch nodes (tests/engines/start): pytest, mounting
# for real. Exit 77 (automake SKIP) with the reason where java, mvn, FUSE or
# a python3 with pytest is missing.
TIER=engines WHAT="engine tests"
. "$(dirname "$0")/../lib.sh"
command -v "${JAVA:-java}" >/dev/null 2>&1 || skip "no java (Debian package openjdk-17-jdk-headless)"
command -v javac >/dev/null 2>&1 || skip "no javac (Debian package openjdk-17-jdk-headless)"
command -v "${MVN:-mvn}" >/dev/null 2>&1 || skip "no mvn (Debian package maven)"
need_pytest
have_fuse || skip "no /dev/fuse or fusermount3 (Debian package fuse3)"
[ "$(id -u)" -eq 0 ] || skip "not root (the tests mount and act as root)"
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
run_pytest -s --basetemp="$base/t"
rc=$?
rm -rf --one-file-system "$base"
exit $rc
