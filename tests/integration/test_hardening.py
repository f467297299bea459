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


def _plant_loop(link, target, stop_at):
    """Child: plants LINK -> TARGET and takes it away again until STOP_AT."""
    import time
    while time.monotonic() < stop_at:
        try:
            os.symlink(target, link)
        except OSError:
            pass
        try:
            os.unlink(link)
        except OSError:
            pass
    os._exit(0)


def race_creates(root, link_dir, outside, seconds):
    """Creates ROOT/race with O_NOFOLLOW or O_EXCL while two children plant
    a symlink LINK_DIR/race -> OUTSIDE/victim. Returns (files created
    outside, creates that met the symlink, creates that succeeded, other
    errors seen)."""
    import time
    victim = os.path.join(outside, "victim")
    stop_at = time.monotonic() + seconds
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            _plant_loop(os.path.join(link_dir, "race"), victim, stop_at)
        kids.append(pid)
    escaped = met = made = 0
    odd = set()
    flags = [os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW,
             os.O_WRONLY | os.O_CREAT | os.O_EXCL,
             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW]
    i = 0
    try:
        while time.monotonic() < stop_at:
            i += 1
            try:
                fd = os.open(os.path.join(root, "race"), flags[i % 3], 0o644)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.EEXIST):
                    met += 1
                else:
                    odd.add(errno.errorcode.get(e.errno, e.errno))
            else:
                made += 1
                os.close(fd)
                try:
                    os.unlink(os.path.join(link_dir, "race"))
                except OSError:
                    pass
            if os.path.lexists(victim):
                escaped += 1
                os.unlink(victim)
    finally:
        for pid in kids:
            os.waitpid(pid, 0)
    return escaped, met, made, odd


def test_hardening__create_does_not_follow_planted_symlink(tmp_path, mount_factory):
    """A symlink planted (by another host, or in BACKING) between the
    kernel's negative lookup and the create must not be followed when the
    caller gave O_NOFOLLOW or O_EXCL: nothing may appear outside the tree."""
    outside = tmp_path / "outside"
    outside.mkdir()
    m = mount_factory()
    escaped, met, made, odd = race_creates(m.mnt, m.backing, str(outside), 5)
    assert escaped == 0, "created outside the tree %d times (%d met the link, %d made)" % (
        escaped, met, made)
    assert not odd, "errors a native create does not give: %s" % sorted(odd)
    assert met > 0 and made > 0, "the race never happened (%d met, %d made)" % (met, made)
    # the plain create still works and still creates a regular file
    write_file(m.path("plain"), b"x")
    assert os.path.isfile(m.bpath("plain")) and not os.path.islink(m.bpath("plain"))
