"""What the Python test tiers share: the programs under test, mount
points, waiting for a condition."""
import os
import time

SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
_PROGRAM_ENV = {"treelockfs": "TREELOCKFS_BIN", "treelockctl": "TREELOCKCTL_BIN"}


def program(name):
    """The path of the program NAME ("treelockfs" or "treelockctl") that the
    tests run: the one $TREELOCKFS_BIN or $TREELOCKCTL_BIN names (make check
    sets them to the build tree's), else src/NAME of the source tree."""
    return os.environ.get(_PROGRAM_ENV[name]) or os.path.join(SRCDIR, "src", name)


def unbuilt(*paths):
    """Why one of the programs PATHS cannot run (missing, not a file, not
    executable), or None. That is a broken build, not a missing
    environment: the tests that need the program fail, never skip."""
    for p in paths:
        if not os.path.isfile(p):
            return "%s is missing: build it (make) or set TREELOCKFS_BIN and TREELOCKCTL_BIN" % p
        if not os.access(p, os.X_OK):
            return "%s is not executable" % p
    return None


def require_built(*paths):
    """Fails the calling test (pytest) when one of PATHS cannot run; for a
    session fixture of each tier that runs the programs."""
    why = unbuilt(*paths)
    if why:
        import pytest
        pytest.fail("broken build: " + why, pytrace=False)


def is_mounted(path):
    """True when PATH (resolved) is a mount point of this mount namespace."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.split()[4].encode().decode("unicode_escape") == path:
                return True
    return False


def wait_for(pred, timeout=30, step=0.02, what="condition"):
    """Calls PRED until it returns a true value, which is returned; raises
    AssertionError naming WHAT after TIMEOUT seconds. For a condition a test
    does not control the time of (a busy machine only makes it later), so
    the timeout is generous."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(step)
