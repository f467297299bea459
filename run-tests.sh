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
#   with FUSE passthrough), the integration tests run once more on a second
#   build against the system's libfuse.
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
# a libfuse built into deps/libfuse since the last configure is taken up
if [ ! -f Makefile ] || [ configure -nt Makefile ] || [ deps/libfuse/.built-from -nt Makefile ]; then
	log "configure"
	./configure --enable-tests ${PYTHON:+PYTHON=$PYTHON} || exit 1
fi
log "build"
make -j"$(nproc 2>/dev/null || echo 2)" || { echo "0 passed, 1 failed"; exit 1; }

log "make check"
rm -f tests/esemu/run.xml tests/difftest/run.xml tests/integration/run.xml tests/engines/run.xml \
	tests/objstore/run.xml tests/multihost/run.xml tests/gluster/run.xml
make check || status=1

# When the main build links the bundled libfuse (contrib/build-libfuse.sh),
# the integration tier runs once more on a second build against the
# system's libfuse (no FUSE passthrough on Debian 12): a copy of the
# distributed sources in build-system-libfuse/, configured with
# --with-libfuse=system.
sysbuild=$top/build-system-libfuse
rm -f "$sysbuild/tests/integration/run.xml"
syssuite=
if grep -q '^#define TL_LIBFUSE_BUNDLED 1' config.h 2>/dev/null; then
	log "integration tests on a build against the system's libfuse"
	syssuite=$sysbuild/tests/integration/run.sh
	rm -rf "$sysbuild"
	if make -s distdir distdir="$sysbuild" >/dev/null &&
		(cd "$sysbuild" && ./configure --enable-tests --with-libfuse=system \
			${PYTHON:+PYTHON=$PYTHON} && make -j"$(nproc 2>/dev/null || echo 2)") \
			>"$sysbuild/build.log" 2>&1; then
		"$sysbuild/src/treelockfs" --version
		# The tests whose subject is the lock store's protocol (marked
		# lock_store) run the same code whatever the libfuse and ran
		# above: here they are left out, and the other es tests (a mount
		# on the es store, its options, TLS, metrics) run on the es8
		# emulator only, unless TREELOCKFS_BACKENDS says otherwise.
		echo "lock store backends: ${TREELOCKFS_BACKENDS:-emulator-es8}; lock_store tests left out"
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
fi

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
	) || { failed=$((failed + 1)); continue; }
	set -- $counts
	passed=$((passed + $1))
	failed=$((failed + $2))
	skipped=$((skipped + $3))
	if [ -f "$trs" ] && ! grep -q '^:test-result: PASS' "$trs" && [ "$2" -eq 0 ]; then
		failed=$((failed + 1)) # pytest itself failed after its last test
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
