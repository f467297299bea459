#!/bin/sh
# Integration tests: pytest mounting treelockfs for real. Exit 77 (automake
# SKIP) where FUSE or a python3 with pytest is missing.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "integration tests skipped: no python3 with pytest (Debian package python3-pytest)"
	exit 77
fi
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1; then
	echo "integration tests skipped: no /dev/fuse or fusermount3 (Debian package fuse3)"
	exit 77
fi
cd "$srcdir" || exit 99
exec "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider ${PYTEST_ARGS:-} tests/integration
