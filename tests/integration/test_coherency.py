"""Changes made directly in BACKING (as another host would) show through the
mount within the default cache timeouts: entry_timeout=1, attr_timeout=1,
negative_timeout=0.
"""
import errno
import os
import time

import pytest

from conftest import read_file

# depends on the libfuse (run again on the system's by run-tests.sh): what a
# read sees after a change made in BACKING: the backing file's page cache with
# FUSE passthrough, the kernel's cache of the mount without
pytestmark = pytest.mark.libfuse

SETTLE = 1.2  # the default timeouts and a margin


def test_coherency__new_file_visible_at_once_after_negative_lookup(mnt):
    with pytest.raises(FileNotFoundError):
        os.stat(mnt.path("late"))
    with open(mnt.bpath("late"), "w") as f:
        f.write("here")
    # negative_timeout=0: no waiting
    assert read_file(mnt.path("late")) == b"here"
    assert "late" in os.listdir(mnt.mnt)


def test_coherency__changed_content_and_size(mnt):
    with open(mnt.path("f"), "w") as f:
        f.write("short")
    assert read_file(mnt.path("f")) == b"short"
    assert os.stat(mnt.path("f")).st_size == 5
    with open(mnt.bpath("f"), "w") as f:
        f.write("a much longer content")
    time.sleep(SETTLE)
    assert os.stat(mnt.path("f")).st_size == 21
    assert read_file(mnt.path("f")) == b"a much longer content"
    # same size, new content: the page cache must not serve the old one
    time.sleep(0.01)
    with open(mnt.bpath("f"), "w") as f:
        f.write("A MUCH LONGER CONTENT")
    time.sleep(SETTLE)
    assert read_file(mnt.path("f")) == b"A MUCH LONGER CONTENT"
    os.chmod(mnt.bpath("f"), 0o600)
    time.sleep(SETTLE)
    assert os.stat(mnt.path("f")).st_mode & 0o777 == 0o600


def test_coherency__deleted_and_renamed(mnt):
    os.makedirs(mnt.path("d"))
    for n in ("gone", "moved"):
        with open(mnt.path("d", n), "w") as f:
            f.write(n)
    assert sorted(os.listdir(mnt.path("d"))) == ["gone", "moved"]
    os.stat(mnt.path("d", "gone"))
    os.stat(mnt.path("d", "moved"))
    os.unlink(mnt.bpath("d", "gone"))
    os.rename(mnt.bpath("d", "moved"), mnt.bpath("d", "there"))
    time.sleep(SETTLE)
    assert sorted(os.listdir(mnt.path("d"))) == ["there"]
    for n in ("gone", "moved"):
        with pytest.raises(OSError) as e:
            os.stat(mnt.path("d", n))
        assert e.value.errno == errno.ENOENT
    assert read_file(mnt.path("d", "there")) == b"moved"


def test_coherency__directory_renamed_and_replaced_behind_the_mount(mnt):
    os.makedirs(mnt.path("a", "b"))
    with open(mnt.path("a", "b", "f"), "w") as f:
        f.write("old")
    assert read_file(mnt.path("a", "b", "f")) == b"old"
    os.rename(mnt.bpath("a"), mnt.bpath("z"))
    os.makedirs(mnt.bpath("a", "b"))
    with open(mnt.bpath("a", "b", "f"), "w") as f:
        f.write("new")
    time.sleep(SETTLE)
    assert read_file(mnt.path("a", "b", "f")) == b"new"
    assert read_file(mnt.path("z", "b", "f")) == b"old"
    # and a rename through the mount works on what is there now
    os.rename(mnt.path("a", "b", "f"), mnt.path("a", "g"))
    assert read_file(mnt.bpath("a", "g")) == b"new"


def test_coherency__changes_through_mount_are_seen_at_once(mnt):
    """libfuse/the kernel invalidate what the mount itself changes."""
    with open(mnt.path("f"), "w") as f:
        f.write("1")
    os.stat(mnt.path("f"))
    with open(mnt.path("f"), "a") as f:
        f.write("23")
    assert os.stat(mnt.path("f")).st_size == 3
    os.truncate(mnt.path("f"), 1)
    assert os.stat(mnt.path("f")).st_size == 1
    os.chmod(mnt.path("f"), 0o640)
    assert os.stat(mnt.path("f")).st_mode & 0o777 == 0o640
    os.rename(mnt.path("f"), mnt.path("g"))
    assert not os.path.exists(mnt.path("f"))
    assert os.stat(mnt.path("g")).st_size == 1
