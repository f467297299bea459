#!/bin/sh
# Many hosts for real (tests/multihost): the checker's own tests, and the
# quick form of the multi-host run (hosts in network namespaces, a
# nemesis, the checker). Exit 77 (automake SKIP) only where no python3 with
# pytest is found; without root, ip netns, nsenter or /dev/fuse the run is
# skipped with the reason and the checker's tests still run. Results also
# go to run.xml (JUnit XML), which run-tests.sh counts. The long form:
# tests/multihost/multihost.py run --runs N --duration S [--engine opensearch].
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "multihost tests skipped: no python3 with pytest (Debian package python3-pytest)"
	exit 77
fi
xml=$(pwd)/tests/multihost/run.xml
cd "$srcdir" || exit 99
# -s: the run prints its figures
exec "$PYTHON" -m pytest -q -s -rfEs -p no:cacheprovider --junitxml="$xml" ${PYTEST_ARGS:-} tests/multihost
