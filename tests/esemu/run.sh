#!/bin/sh
# The Elasticsearch emulator's own tests (pytest). Exit 77 (automake SKIP)
# where no python3 with pytest is available. Results also go to run.xml
# (JUnit XML), which run-tests.sh counts.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "emulator tests skipped: no python3 with pytest (Debian package python3-pytest)"
	exit 77
fi
xml=$(pwd)/tests/esemu/run.xml
cd "$srcdir" || exit 99
exec "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$xml" ${PYTEST_ARGS:-} tests/esemu
