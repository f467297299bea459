"""What the Python test tiers share about mount points."""
import os


def is_mounted(path):
    """True when PATH (resolved) is a mount point of this mount namespace."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.split()[4].encode().decode("unicode_escape") == path:
                return True
    return False
