#!/bin/sh
# The benchmark harness in its smoke mode: checks that bench/run mounts,
# measures and cleans up, in seconds. It never judges the figures (the
# machines are noisy); exit 77 (SKIP) where FUSE or fio is missing.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
bin=${TREELOCKFS_BIN:-$srcdir/src/treelockfs}

# --cpus: a list it cannot use is refused before anything is mounted
for bad in x 1-x 100000; do
	if "$PYTHON" "$srcdir/bench/run" --cpus "$bad" --list --treelockfs "$bin" >/dev/null 2>&1; then
		echo "bench/run accepted --cpus $bad" >&2
		exit 1
	fi
done
cpu=$("$PYTHON" -c 'import os; print(min(os.sched_getaffinity(0)))')
"$PYTHON" "$srcdir/bench/run" --cpus "$cpu" --list --treelockfs "$bin" >/dev/null || {
	echo "bench/run refused --cpus $cpu" >&2
	exit 1
}
exec "$PYTHON" "$srcdir/bench/run" --smoke --treelockfs "$bin"
