"""What the Python test tiers share about mount points."""
import os
import time


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
