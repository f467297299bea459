#!/bin/sh
# Builds treelockfs if needed and runs every test:
#   make check: unit tests (check, TAP), the same unit tests built with
#   -fsanitize=address,undefined, the layout check (the layers' maps
#   against the objects, TAP), the Elasticsearch emulator's tests, the
#   differential test (emulator vs real engines), the integration tests
#   (pytest, mounting for real) and, where java and mvn are installed, the
#   tests against a real OpenSearch cluster, where go and s3fs are
#   installed, the object-store tests (two s3fs mounts of one bucket), the
#   multi-host run (hosts in network namespaces under a nemesis, judged
#   by a checker), and the GlusterFS tests (two FUSE clients of a
#   distributed volume; glusterfs-server installed with apt-get where it
#   can be). When the build links the bundled libfuse (deps/libfuse,
#   with FUSE passthrough), the integration tests whose outcome depends on
#   the libfuse run once more on a second build against the system's
#   libfuse.
# What is tested is what ./quickstart.sh builds: where the system's libfuse
# has no FUSE passthrough (Debian 12) and deps/libfuse is not built, it is
# built first (contrib/build-libfuse.sh), or the run stops naming the
# command that installs what that needs.
# Each single-node real engine (OpenSearch 2, OpenSearch 3, Elasticsearch
# 7) is started once per run, in the background while the unit tests run
# (or by the first tier that needs it), and shared by the tiers
# (tests/engines/pool.py); it is stopped once no later tier needs it. The
# unit tests and the same under the sanitizers run at once: they mostly
# wait. Every other tier runs alone.
# At the end: the time each tier took, then, last, the sum over all of
# them: "N passed, N failed[, N skipped]".
# Exit status 0 only when nothing failed. Needs the packages that
# quickstart.sh installs; integration tests need root and /dev/fuse (they
# are skipped otherwise).
set -u
run_t0=$(date +%s)
cd "$(dirname "$0")" || exit 1
top=$(pwd)
PYTHON=${PYTHON:-}
status=0
jobs=$(nproc 2>/dev/null || echo 2)

log() { printf '==> %s\n' "$*"; }
# refuse WHY...: the run cannot test the product; the last line as always
refuse() {
	printf 'run-tests.sh: %s\n' "$@" >&2
	echo "0 passed, 1 failed"
	exit 1
}

# --- the product: the libfuse that quickstart.sh builds ------------------------
# FUSE passthrough, the default data path, needs libfuse 3.16 or later;
# quickstart.sh (contrib/install-deps.sh) builds Debian 13's libfuse into
# deps/libfuse where the system's is older. A run that tested the system's
# build there would skip every passthrough test and still look green.
system_pt=no
pkg-config --atleast-version=3.16 fuse3 2>/dev/null && system_pt=yes
if [ ! -f deps/libfuse/.built-from ] && [ $system_pt = no ]; then
	log "the system's libfuse $(pkg-config --modversion fuse3 2>/dev/null || echo '(none)') has no FUSE passthrough: building the bundled one (contrib/build-libfuse.sh)"
	sh contrib/build-libfuse.sh ||
		refuse "the libfuse that ./quickstart.sh builds (deps/libfuse, with FUSE passthrough) could not" \
			"be built here (see above), and the tests will not run on a build without passthrough:" \
			"the default data path would go untested. Run ./quickstart.sh (or contrib/install-deps.sh)," \
			"then ./run-tests.sh again."
fi

if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
	log "autoreconf"
	autoreconf -fi || exit 1
fi
# a libfuse built into deps/libfuse since the last configure is taken up,
# and a tree configured otherwise (--with-libfuse=system) is configured
# again as quickstart.sh does: what is tested is the default product
reconfigure=no
if [ ! -f Makefile ] || [ configure -nt Makefile ] || [ deps/libfuse/.built-from -nt Makefile ]; then
	reconfigure=yes
elif ! grep -q '^#define HAVE_FUSE_PASSTHROUGH 1' config.h 2>/dev/null &&
	{ [ -f deps/libfuse/.built-from ] || [ $system_pt = yes ]; }; then
	log "this tree is configured without FUSE passthrough; the default build has it"
	reconfigure=yes
fi
if [ $reconfigure = yes ]; then
	log "configure"
	./configure --enable-tests ${PYTHON:+PYTHON=$PYTHON} || exit 1
fi
log "build"
make -j"$jobs" || { echo "0 passed, 1 failed"; exit 1; }
src/treelockfs --version

# make's lists of the tiers and of the programs they need
make_var() {
	printf 'tl-print:\n\t@echo $(%s)\n' "$1" | make -s -f Makefile -f - tl-print
}
tiers=$(make_var TESTS)
check_programs=$(make_var check_PROGRAMS)
if [ -n "$check_programs" ]; then
	log "build the unit tests"
	# shellcheck disable=SC2086
	make -j"$jobs" $check_programs || { echo "0 passed, 1 failed"; exit 1; }
fi

rm -f tests/esemu/run.xml tests/difftest/run.xml tests/integration/run.xml tests/engines/run.xml \
	tests/objstore/run.xml tests/multihost/run.xml tests/gluster/run.xml

# --- the run's real engines (tests/engines/pool.py) ------------------------------
pool=$(mktemp -d -t tlfs-engines-pool.XXXXXX) || exit 1
TREELOCKFS_ENGINE_POOL=$pool
TREELOCKFS_ENGINE_POOL_OWNER=$$
export TREELOCKFS_ENGINE_POOL TREELOCKFS_ENGINE_POOL_OWNER
warming=
pool_stop() {
	[ -d "$pool" ] || return 0
	if [ -n "$warming" ]; then
		kill "$warming" 2>/dev/null
		wait "$warming" 2>/dev/null
		warming=
	fi
	python3 "$top/tests/engines/pool.py" stop "$pool"
	rm -rf "$pool"
}
trap 'pool_stop' EXIT
trap 'pool_stop; trap - EXIT; exit 130' INT
trap 'pool_stop; trap - EXIT; exit 143' TERM HUP
# pool_keep NAME...: stops the pool's nodes of every engine but NAME...
pool_keep() {
	for d in "$pool"/*/; do
		[ -d "$d" ] || continue
		e=$(basename "$d")
		case " $* " in
		*" $e "*) ;;
		*) python3 "$top/tests/engines/pool.py" release "$pool" "$e" ;;
		esac
	done
}
# The engines the differential test and the integration tests will ask
# for start now, one at a time, in the background: the unit tests, which
# come first, mostly wait (a few seconds of CPU in a minute), and a tier
# that asks for an engine still starting waits for its start.
warm=$(cd tests && python3 -c '
import os, backends
real = os.environ.get("DIFFTEST_REAL", "1") != "0"
names = backends.selected()[0]
print(" ".join(e for e in ("opensearch", "opensearch3", "elasticsearch")
               if (real or e in names) and backends.engines_available(e) is None))' 2>/dev/null)
if [ -n "$warm" ]; then
	log "starting the real engines in the background: $warm"
	# shellcheck disable=SC2086
	python3 "$top/tests/engines/pool.py" start "$pool" $warm >"$pool/start.log" 2>&1 &
	warming=$!
fi
# the engines a tier after the integration tests may use
later_engines=$(printf '%s\n' "${TREELOCKFS_OBJSTORE_ES:-emulator-es8,opensearch},${TREELOCKFS_GLUSTER_ES:-}" | tr ',' ' ')

# --- the tiers -----------------------------------------------------------------
times=
steps=0
# timed NAME COMMAND...: runs COMMAND, adds NAME's seconds to the table
timed() {
	timed_name=$1
	shift
	timed_t0=$(date +%s)
	"$@"
	timed_rc=$?
	timed_s=$(($(date +%s) - timed_t0))
	times="$times$timed_name $timed_s
"
	steps=$((steps + timed_s))
	return $timed_rc
}

# When the main build links the bundled libfuse (contrib/build-libfuse.sh),
# the integration tier runs once more on a second build against the
# system's libfuse (no FUSE passthrough on Debian 12): a copy of the
# distributed sources in build-system-libfuse/, configured with
# --with-libfuse=system.
sysbuild=$top/build-system-libfuse
rm -f "$sysbuild/tests/integration/run.xml" "$sysbuild/tests/integration/run.trs"
syssuite=
integration_on_system_libfuse() {
	log "integration tests on a build against the system's libfuse"
	syssuite=$sysbuild/tests/integration/run.sh
	rm -rf "$sysbuild"
	if make -s distdir distdir="$sysbuild" >/dev/null &&
		(cd "$sysbuild" && ./configure --enable-tests --with-libfuse=system \
			${PYTHON:+PYTHON=$PYTHON} && make -j"$jobs") \
			>"$sysbuild/build.log" 2>&1; then
		"$sysbuild/src/treelockfs" --version
		# Only the tests marked libfuse run here: those whose outcome
		# depends on the libfuse the daemon links (tests/integration/
		# conftest.py says which and why). The es ones among them run on
		# the es8 emulator only, unless TREELOCKFS_BACKENDS says otherwise.
		echo "lock store backends: ${TREELOCKFS_BACKENDS:-emulator-es8}; only the tests marked libfuse"
		(cd "$sysbuild" && env TREELOCKFS_BIN="$sysbuild/src/treelockfs" \
			TREELOCKCTL_BIN="$sysbuild/src/treelockctl" TREELOCKFS_SRCDIR="$sysbuild" \
			TREELOCKFS_SECOND_BUILD=1 \
			TREELOCKFS_BACKENDS="${TREELOCKFS_BACKENDS:-emulator-es8}" sh tests/integration/run.sh)
		# the result as make check's driver would write it, for the count below
		case $? in
		0) result=PASS ;;
		77) result=SKIP ;;
		*) result=FAIL status=1 ;;
		esac
		echo ":test-result: $result" >"$sysbuild/tests/integration/run.trs"
	else
		[ -f "$sysbuild/build.log" ] && tail -n 30 "$sysbuild/build.log"
		echo "the build against the system's libfuse failed"
		status=1
	fi
}

# The unit tests (check, and the same under the sanitizers) run at once:
# they wait far more than they compute (2 and 15 s of CPU in 43 and 56 s)
# and share nothing. Each one's time is that of its result (.trs).
units=
for t in $tiers; do
	case $t in
	tests/unit/*) units="$units $t" ;;
	esac
done
if [ -n "$units" ]; then
	log "make check TESTS='${units# }' (at once)"
	units_t0=$(date +%s)
	# shellcheck disable=SC2086
	make -s -j2 check TESTS="$units" || status=1
	units_s=$(($(date +%s) - units_t0))
	steps=$((steps + units_s))
	for t in $units; do
		case $t in
		*/skip-no-check.sh) name=unit ;;
		*) name=${t#tests/unit/} ;;
		esac
		trs=${t%.sh}.trs
		unit_s=$units_s
		[ -f "$trs" ] && unit_s=$(($(stat -c %Y "$trs") - units_t0))
		times="$times$name $unit_s at-once
"
	done
fi

for t in $tiers; do
	case $t in
	tests/unit/*) continue ;;
	tests/*/*) name=${t#tests/}; name=${name%%/*} ;;
	*) name=$(basename "$t" .sh) ;;
	esac
	log "make check TESTS=$t"
	timed "$name" make -s check TESTS="$t" || status=1
	case $name in
	integration)
		# shellcheck disable=SC2086
		pool_keep $later_engines
		if grep -q '^#define TL_LIBFUSE_BUNDLED 1' config.h 2>/dev/null; then
			timed "integration-system-libfuse" integration_on_system_libfuse
		fi
		;;
	objstore)
		# shellcheck disable=SC2086
		pool_keep ${TREELOCKFS_GLUSTER_ES:-}
		;;
	esac
done
pool_stop

# Count every test: TAP results of the unit binaries and of the layout
# check (.trs files), and the JUnit XML of the Python suites.
summary=$(
	for trs in tests/unit/unit.trs tests/unit/unit-asan.trs tests/layout/check.trs; do
		[ -f "$trs" ] && sed -n 's/^:test-result: //p' "$trs"
	done | awk '
		/^PASS|^XFAIL/ { p++ } /^FAIL|^XPASS|^ERROR/ { f++ } /^SKIP/ { s++ }
		END { printf "%d %d %d\n", p, f, s }'
)
set -- $summary
passed=$1 failed=$2 skipped=$3
# the failed tests, named once more just before the last line
failures=$(mktemp -t tlfs-failures.XXXXXX) || exit 1
for trs in tests/unit/unit.trs tests/unit/unit-asan.trs tests/layout/check.trs; do
	[ -f "$trs" ] && sed -n "s#^:test-result: \\(FAIL\\|XPASS\\|ERROR\\) *#  ${trs%.trs}: #p" "$trs" >>"$failures"
done
# The pytest suites write JUnit XML (run.xml beside run.sh); a suite that
# left none either was skipped as a whole (exit 77: no pytest) or crashed.
for suite in tests/esemu/run.sh tests/difftest/run.sh tests/integration/run.sh tests/engines/run.sh \
	tests/objstore/run.sh tests/multihost/run.sh tests/gluster/run.sh $syssuite; do
	xml=${suite%.sh}.xml
	trs=${suite%.sh}.trs
	if [ -f "$trs" ] && grep -q '^:test-result: SKIP' "$trs"; then
		skipped=$((skipped + 1))
		continue
	fi
	counts=$(python3 - "$xml" <<-'EOF'
		import sys
		import xml.etree.ElementTree as ET
		try:
		    root = ET.parse(sys.argv[1]).getroot()
		except (OSError, ET.ParseError):
		    sys.exit(1)
		p = f = s = 0
		for case in root.iter("testcase"):
		    kids = {c.tag for c in case}
		    if kids & {"failure", "error"}:
		        f += 1
		        bad = next(c for c in case if c.tag in ("failure", "error"))
		        why = (bad.get("message") or "").splitlines()
		        print("  %s::%s  %s" % (case.get("classname", ""), case.get("name", ""),
		                                (why[0] if why else "")[:200]), file=sys.stderr)
		    elif "skipped" in kids:
		        s += 1
		    else:
		        p += 1
		# errors outside any test case (collection, session fixtures)
		for suite in root.iter("testsuite"):
		    n = int(suite.get("errors", 0)) - sum(
		        1 for c in suite.iter("testcase") for k in c if k.tag == "error")
		    f += max(n, 0)
		print(p, f, s)
	EOF
	) 2>>"$failures" || { failed=$((failed + 1)); echo "  $suite: no results (it crashed)" >>"$failures"; continue; }
	set -- $counts
	passed=$((passed + $1))
	failed=$((failed + $2))
	skipped=$((skipped + $3))
	if [ -f "$trs" ] && ! grep -q '^:test-result: PASS' "$trs" && [ "$2" -eq 0 ]; then
		failed=$((failed + 1)) # pytest itself failed after its last test
		echo "  $suite: pytest failed after its last test" >>"$failures"
	fi
done
# Scripts that are one test each (the benchmark harness's smoke run).
for trs in tests/bench-smoke.trs; do
	[ -f "$trs" ] || { failed=$((failed + 1)); continue; }
	case $(sed -n 's/^:test-result: //p' "$trs") in
	PASS*) passed=$((passed + 1)) ;;
	SKIP*) skipped=$((skipped + 1)) ;;
	*) failed=$((failed + 1)); echo "  $trs: failed" >>"$failures" ;;
	esac
done
[ "$failed" -eq 0 ] || status=1

# The time each tier took; the whole run also counts the build and the
# engines' stop.
log "time per tier"
printf '%s' "$times" | awk -v steps=$steps -v whole=$(($(date +%s) - run_t0)) '
	function row(name, s, note) {
		printf "  %-28s %5d s  %3d:%02d%s\n", name, s, s / 60, s % 60, note
	}
	{ row($1, $2, $3 == "at-once" ? "  (the unit tests at once)" : "") }
	END { row("all tiers", steps, ""); row("whole run", whole, "  (with the builds)") }'
if [ -s "$failures" ]; then
	log "failed"
	cat "$failures"
fi
rm -f "$failures"
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
exit $status
