#!/bin/sh
# The benchmark harness in its smoke mode: checks that bench/run mounts,
# measures and cleans up, in seconds. It never judges the figures (the
# machines are noisy); exit 77 (SKIP) where FUSE or fio is missing.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
exec "$PYTHON" "$srcdir/bench/run" --smoke --treelockfs "${TREELOCKFS_BIN:-$srcdir/src/treelockfs}"
