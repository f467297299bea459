# tests/lib.sh - what the tiers' run.sh scripts (tests/<tier>/run.sh) share;
# each sets TIER (its directory under tests/) and WHAT (its name in the
# skip message), then sources this file. make check runs the scripts from
# the build tree; the tests run from the source tree.
srcdir=${TREELOCKFS_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
# JUnit XML beside the script in the build tree; run-tests.sh counts it
xml=$(pwd)/tests/$TIER/run.xml

# skip REASON: say why the tier is skipped, exit 77 (automake SKIP)
skip() {
	echo "$WHAT skipped: $*"
	exit 77
}

need_pytest() {
	"$PYTHON" -c 'import pytest' 2>/dev/null ||
		skip "no python3 with pytest (Debian package python3-pytest)"
}

have_fuse() {
	[ -e /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1
}

# run_pytest [OPTION...]: the tier's tests from the source tree; the exit
# status is pytest's
run_pytest() {
	cd "$srcdir" || exit 99
	"$PYTHON" -m pytest -q -rfEs -p no:cacheprovider --junitxml="$xml" "$@" ${PYTEST_ARGS:-} \
		"tests/$TIER"
}
