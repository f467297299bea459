"""One mv, one set of locks, over a backing that refuses rename flags.

coreutils mv first tries renameat2(RENAME_NOREPLACE) and falls back to a
plain rename() when the filesystem answers EINVAL. Over such a backing
treelockfs took and released every lock for the refused call. Once the
backing refused the flag (and the same rename without it succeeded, so
the EINVAL was the flag's), the flag is refused before any lock is taken:
each later mv acquires once. RENAME_EXCHANGE is remembered at its first
EINVAL (both names exist, so only the flag can be refused). Counted with
the `acquired` line of .treelockfs/stats.

The backing is a bindfs mount (it passes renames through rename(2) and
refuses both flags with EINVAL); the test is skipped when bindfs is not
installed (Debian package bindfs).
"""
import errno
import os
import shutil
import subprocess

import pytest

from conftest import FUSERMOUNT, is_mounted, read, write
from test_passthrough import RENAME_EXCHANGE, RENAME_NOREPLACE, renameat2

# depends on the libfuse (run again on the system's by run-tests.sh):
# renameat2 flags and mount flags, which go through libfuse's request handling
# and mount options
pytestmark = pytest.mark.libfuse

BINDFS = shutil.which("bindfs")


@pytest.fixture
def bindfs(tmp_path):
    """A bindfs mount of a fresh directory (unmounted at teardown)."""
    if BINDFS is None:
        pytest.skip("bindfs not installed (Debian package bindfs): no backing that "
                    "refuses rename flags")
    src, mnt = tmp_path / "bindsrc", tmp_path / "bind"
    src.mkdir()
    mnt.mkdir()
    subprocess.run([BINDFS, str(src), str(mnt)], check=True)
    yield str(mnt)
    if is_mounted(str(mnt)):
        subprocess.run([FUSERMOUNT, "-u", "-z", str(mnt)], check=False)


def err(fn):
    try:
        fn()
    except OSError as e:
        return errno.errorcode[e.errno]
    return None


def acquired(m):
    return m.stats()["acquired"]


def mv(m, a, b):
    subprocess.run(["mv", m.path(a), m.path(b)], check=True)


def test_flags__refused_noreplace_is_not_locked_again(mount_factory, bindfs):
    # the backing itself refuses the flag
    write_native = os.path.join(bindfs, "probe")
    open(write_native, "w").close()
    assert err(lambda: renameat2(write_native, write_native + "2", RENAME_NOREPLACE)) == "EINVAL"
    os.unlink(write_native)

    m = mount_factory(backing=bindfs)
    os.makedirs(m.path("d", "e"))
    write(m, "d/e/f", "one")
    n0 = acquired(m)
    mv(m, "d/e/f", "d/e/g")           # NOREPLACE refused (locked), rename() (locked)
    n1 = acquired(m)
    assert n1 - n0 == 2
    for i in range(3):                # from now on: one set of locks per mv
        mv(m, "d/e/g", "d/e/h")
        mv(m, "d/e/h", "d/e/g")
    assert acquired(m) - n1 == 6
    assert read(m, "d/e/g") == "one"
    assert sorted(os.listdir(m.path("d", "e"))) == ["g"]
    # still refused as the backing does, and plain renames still work
    assert err(lambda: renameat2(m.path("d/e/g"), m.path("d/e/x"), RENAME_NOREPLACE)) == "EINVAL"
    assert err(lambda: os.rename(m.path("d/e/g"), m.path("d/e/x"))) is None


def test_flags__refused_exchange_is_not_locked_again(mount_factory, bindfs):
    m = mount_factory(backing=bindfs)
    write(m, "a", "A")
    write(m, "b", "B")
    n0 = acquired(m)
    assert err(lambda: renameat2(m.path("a"), m.path("b"), RENAME_EXCHANGE)) == "EINVAL"
    assert acquired(m) - n0 == 1
    for _ in range(3):
        assert err(lambda: renameat2(m.path("a"), m.path("b"), RENAME_EXCHANGE)) == "EINVAL"
    assert acquired(m) - n0 == 1
    assert (read(m, "a"), read(m, "b")) == ("A", "B")


def test_flags__invalid_rename_teaches_nothing(mount_factory):
    """On a backing with both flags, an EINVAL of the rename itself (a
    directory into its own subtree) never makes the flags refused."""
    m = mount_factory()
    os.makedirs(m.path("d", "sub"))
    write(m, "x", "X")
    write(m, "y", "Y")
    assert err(lambda: renameat2(m.path("d"), m.path("d/sub/d"), RENAME_NOREPLACE)) == "EINVAL"
    assert err(lambda: os.rename(m.path("x"), m.path("z"))) is None
    assert err(lambda: renameat2(m.path("d"), m.path("d/sub"), RENAME_EXCHANGE)) == "EINVAL"
    n0 = acquired(m)
    assert err(lambda: renameat2(m.path("z"), m.path("y"), RENAME_NOREPLACE)) == "EEXIST"
    assert err(lambda: renameat2(m.path("z"), m.path("w"), RENAME_NOREPLACE)) is None
    assert err(lambda: renameat2(m.path("w"), m.path("y"), RENAME_EXCHANGE)) is None
    assert (read(m, "w"), read(m, "y")) == ("Y", "X")
    assert acquired(m) - n0 >= 2
    mv(m, "w", "v")
    assert read(m, "v") == "Y"
