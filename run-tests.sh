#!/bin/sh
# Builds treelockfs if needed and runs every test:
#   make check: unit tests (check, TAP), the same unit tests built with
#   -fsanitize=address,undefined, the Elasticsearch emulator's tests and the
#   integration tests (pytest, mounting for real) and, where java and mvn
#   are installed, the tests against a real OpenSearch cluster.
# The last line is the sum over all of them: "N passed, N failed[, N skipped]".
# Exit status 0 only when nothing failed. Needs the packages that
# quickstart.sh installs; integration tests need root and /dev/fuse (they
# are skipped otherwise).
set -u
cd "$(dirname "$0")" || exit 1
top=$(pwd)
PYTHON=${PYTHON:-}
status=0

log() { printf '==> %s\n' "$*"; }

if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
	log "autoreconf"
	autoreconf -fi || exit 1
fi
if [ ! -f Makefile ] || [ configure -nt Makefile ]; then
	log "configure"
	./configure --enable-tests ${PYTHON:+PYTHON=$PYTHON} || exit 1
fi
log "build"
make -j"$(nproc 2>/dev/null || echo 2)" || { echo "0 passed, 1 failed"; exit 1; }

log "make check"
make check || status=1

# Count every test: TAP results of the unit binaries (.trs files), and the
# pytest summary lines of the Python suites.
summary=$(
	for trs in tests/unit/unit.trs tests/unit/unit-asan.trs; do
		[ -f "$trs" ] && sed -n 's/^:test-result: //p' "$trs"
	done | awk '
		/^PASS|^XFAIL/ { p++ } /^FAIL|^XPASS|^ERROR/ { f++ } /^SKIP/ { s++ }
		END { printf "%d %d %d\n", p, f, s }'
)
set -- $summary
passed=$1 failed=$2 skipped=$3
for suite in tests/esemu/run.sh tests/integration/run.sh tests/engines/run.sh; do
	logf=${suite%.sh}.log
	trs=${suite%.sh}.trs
	if [ -f "$trs" ] && grep -q '^:test-result: SKIP' "$trs"; then
		skipped=$((skipped + 1))
		continue
	fi
	[ -f "$logf" ] || { failed=$((failed + 1)); continue; }
	line=$(grep -E '[0-9]+ (passed|failed|error)' "$logf" | tail -n 1)
	p=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p')
	f=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) failed.*/\1/p')
	e=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) errors\{0,1\}\b.*/\1/p')
	s=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) skipped.*/\1/p')
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0}))
	skipped=$((skipped + ${s:-0}))
	if [ -z "$line" ] && [ -f "$trs" ] && ! grep -q '^:test-result: PASS' "$trs"; then
		failed=$((failed + 1)) # crashed before pytest's summary
	fi
done
# Scripts that are one test each (the benchmark harness's smoke run).
for trs in tests/bench-smoke.trs; do
	[ -f "$trs" ] || { failed=$((failed + 1)); continue; }
	case $(sed -n 's/^:test-result: //p' "$trs") in
	PASS*) passed=$((passed + 1)) ;;
	SKIP*) skipped=$((skipped + 1)) ;;
	*) failed=$((failed + 1)) ;;
	esac
done
[ "$failed" -eq 0 ] || status=1
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
exit $status
