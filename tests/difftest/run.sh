#!/bin/sh
# The differential test (pytest): the emulator against the recorded answers
# of real engines, and, where Java and Maven are installed, against fresh
# real nodes; then the official Python clients (PyPI, pinned, in a virtual
# environment made here) against the emulator and a real node.
# Exit 77 (automake SKIP) where no python3 with pytest is available. Results
# also go to run.xml (JUnit XML), which run-tests.sh counts.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "differential tests skipped: no python3 with pytest (Debian package python3-pytest)"
	exit 77
fi
xml=$(pwd)/tests/difftest/run.xml
cd "$srcdir" || exit 99
exec "$PYTHON" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$xml" ${PYTEST_ARGS:-} tests/difftest
