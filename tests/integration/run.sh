#!/bin/sh
# Integration tests: pytest mounting treelockfs for real. Exit 77 (automake
# SKIP) only where no python3 with pytest is found: without /dev/fuse or
# fusermount3 the tests that mount are skipped one by one (conftest.py) and
# the others (man pages, --help, option checks) still run and can fail.
# Results also go to run.xml (JUnit XML), which run-tests.sh counts.
#
# Two pytest sessions run at once (TREELOCKFS_SHARD, tests/backend_fixtures.py):
# the tests on real engines, and the others. Most of either's time is
# waiting (leases running out, a store's answers, a daemon's stop), so
# together they take little more than the longer one. Each writes its
# own JUnit XML and log; run.xml is their union, and the logs follow one
# another. TREELOCKFS_INTEGRATION_SHARDS=1 runs one session, as does the
# second build's run (run-tests.sh), which has no real engine.
TIER=integration WHAT="integration tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
have_fuse || echo "no /dev/fuse or fusermount3 (Debian package fuse3): the tests that mount are skipped"
if [ "${TREELOCKFS_INTEGRATION_SHARDS:-2}" = 1 ] || [ -n "${TREELOCKFS_SECOND_BUILD:-}" ]; then
	run_pytest
	exit
fi

work=$(mktemp -d -t tlfs-integration.XXXXXX) || exit 99
trap 'rm -rf "$work"' EXIT
final_xml=$xml
for shard in engines others; do
	(
		xml=$work/$shard.xml
		TREELOCKFS_SHARD=$shard run_pytest >"$work/$shard.log" 2>&1
		echo $? >"$work/$shard.rc"
	) &
done
wait
rc=0
for shard in engines others; do
	case $shard in engines) echo "=== the tests on real engines ===" ;; *) echo "=== the other tests (emulators, no store) ===" ;; esac
	cat "$work/$shard.log"
	src=$(cat "$work/$shard.rc" 2>/dev/null || echo 99)
	# 5: every test of the session was left to the other shard
	case $src in
	0 | 5) ;;
	*) rc=$src ;;
	esac
done
"$PYTHON" - "$final_xml" "$work/engines.xml" "$work/others.xml" <<'PY' || rc=99
import sys
import xml.etree.ElementTree as ET
out = ET.Element("testsuites")
for path in sys.argv[2:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue  # a session that left no XML failed: its exit status says so
    out.extend(root.iter("testsuite") if root.tag == "testsuites" else [root])
ET.ElementTree(out).write(sys.argv[1], encoding="utf-8", xml_declaration=True)
PY
exit $rc
