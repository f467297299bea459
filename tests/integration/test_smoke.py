"""The smallest end-to-end check: mount, write, rename, read, unmount."""
import os

import pytest

# depends on the libfuse (run again on the system's by run-tests.sh): the
# smallest mount, write, rename, read and unmount
pytestmark = pytest.mark.libfuse


def test_smoke__write_rename_read(mnt):
    os.makedirs(mnt.path("a", "b"))
    with open(mnt.path("a", "b", "f"), "w") as f:
        f.write("hello")
    os.rename(mnt.path("a", "b", "f"), mnt.path("a", "g"))
    with open(mnt.path("a", "g")) as f:
        assert f.read() == "hello"
    assert os.path.exists(mnt.bpath("a", "g"))
    assert not os.path.exists(mnt.bpath("a", "b", "f"))
    assert mnt.stats()["renames"] == 1
    assert mnt.locks() == []
