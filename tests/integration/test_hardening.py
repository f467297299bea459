"""Red-team findings, each with the behaviour that closes it.

The backing filesystem used directly is the reference: a caller must not be
able to do through the mount what it could not do natively (create through
a symlink it refused to follow, use the blocks reserved for root, read the
names of another user's private directories), and a daemon out of file
descriptors must fail requests in order, not crash.
"""
import errno
import os

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def write_file(path, data=b"", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def test_hardening__new_name_in_control_dir_is_eperm(mnt):
    """The man page: creating another name inside .treelockfs is EPERM;
    creating one of its existing names is EEXIST."""
    ctl = mnt.path(".treelockfs")
    assert errno_of(lambda: write_file(os.path.join(ctl, "new"))) == errno.EPERM
    assert errno_of(lambda: write_file(os.path.join(ctl, "new2"),
                                       flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL)) == errno.EPERM
    assert errno_of(lambda: os.mkdir(os.path.join(ctl, "d"))) == errno.EPERM
    assert errno_of(lambda: os.mkfifo(os.path.join(ctl, "p"))) == errno.EPERM
    assert errno_of(lambda: os.symlink("x", os.path.join(ctl, "l"))) == errno.EPERM
    write_file(mnt.path("f"))
    assert errno_of(lambda: os.link(mnt.path("f"), os.path.join(ctl, "h"))) == errno.EPERM
    assert errno_of(lambda: os.mkdir(os.path.join(ctl, "stats"))) == errno.EEXIST
    assert errno_of(lambda: os.mkdir(ctl)) == errno.EEXIST
    assert sorted(os.listdir(ctl)) == ["locks", "stats"]
