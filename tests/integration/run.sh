#!/bin/sh
# Integration tests: pytest mounting treelockfs for real. Exit 77 (automake
# SKIP) only where no python3 with pytest is found: without /dev/fuse or
# fusermount3 the tests that mount are skipped one by one (conftest.py) and
# the others (man pages, --help, option checks) still run and can fail.
# Results also go to run.xml (JUnit XML), which run-tests.sh counts.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "integration tests skipped: no python3 with pytest (Debian package python3-pytest)"
	exit 77
fi
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1; then
	echo "no /dev/fuse or fusermount3 (Debian package fuse3): the tests that mount are skipped"
fi
xml=$(pwd)/tests/integration/run.xml
cd "$srcdir" || exit 99
exec "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$xml" ${PYTEST_ARGS:-} tests/integration
