"""Mount options people expect: `mount -o remount,...` and atime.

A remount through mount(8) runs `treelockfs BACKING MNT -o remount,...`
(mount.fuse3). What the kernel keeps for the mount (ro/rw, nosuid, nodev,
noexec, ...) changes; what the daemon was started with cannot, and the
remount names it and changes nothing. Each flag is checked beside a bind
mount of the backing directory with the same flag: its answer is the
expected one. atime: reads through the mount are the daemon's reads of the
backing, so `noatime` must keep them from updating the backing's atime as
a noatime bind mount does.
"""
import errno
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import BIN, Mount, errno_of, is_mounted, run_as
from test_mount_helper import (daemons_of, helper, mount, mountinfo, tree,  # noqa: F401
                               unmount, write)

# depends on the libfuse (run again on the system's by run-tests.sh):
# remounts, which libfuse and the kernel carry out
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="mount(8) and bind mounts need root")]

NOBODY = 65534
OLD = 978307200  # 2001-01-01: relatime updates an atime this old on any read


@pytest.fixture
def bind(tree):
    """A bind mount of BACKING at TOP/bind (our own: undone at the end)."""
    path = os.path.join(tree["top"], "bind")
    os.mkdir(path)
    subprocess.run(["mount", "--bind", tree["backing"], path], check=True)
    yield path
    subprocess.run(["umount", path], check=False)


def remount_bind(path, opts):
    subprocess.run(["mount", "-o", "remount,bind," + opts, path], check=True)


def try_write(path):
    return errno_of(lambda: write(path, "x"))


def try_exec(path):
    def run():
        subprocess.run([path], check=True, stdout=subprocess.DEVNULL)
    try:
        run()
    except subprocess.CalledProcessError as e:
        return "exit %d" % e.returncode
    except OSError as e:
        return e.errno
    return 0


def test_remount__ro_noexec_and_back_beside_a_bind_mount(helper, tree, bind):
    write(os.path.join(tree["backing"], "prog"), "#!/bin/sh\nexit 0\n", 0o755)
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"], "-o", "lock_timeout=5")
    pids = daemons_of(tree["mnt"])
    sides = {"bind": bind, "mount": tree["mnt"]}
    got = {}
    for opts in ("ro", "rw,noexec", "rw,exec"):
        remount_bind(bind, opts)
        res = mount("-o", "remount," + opts, tree["mnt"], check=False)
        assert res.returncode == 0, res.stderr.decode()
        got[opts] = {side: (try_write(os.path.join(top, "w")), try_exec(os.path.join(top, "prog")))
                     for side, top in sides.items()}
        assert got[opts]["mount"] == got[opts]["bind"], (opts, got)
    assert got["ro"]["bind"] == (errno.EROFS, 0)
    assert got["rw,noexec"]["bind"] == (0, errno.EACCES)
    assert got["rw,exec"]["bind"] == (0, 0)
    assert daemons_of(tree["mnt"]) == pids  # the same daemon, no second one
    unmount(tree["mnt"])


def test_remount__fstab_line_remounts_read_only(helper, tree):
    """mount(8) merges the fstab line's options (lock_timeout=5 here) into a
    remount: unchanged, they do not stand in the way."""
    fstab = write(os.path.join(tree["top"], "fstab"),
                  "%s %s fuse.treelockfs lock_timeout=5,allow_other,nofail,_netdev 0 0\n"
                  % (tree["backing"], tree["mnt"]))
    mount("-T", fstab, tree["mnt"])
    mount("-T", fstab, "-o", "remount,ro", tree["mnt"])
    assert mountinfo(tree["mnt"])[2].split(",")[0] == "ro"
    assert try_write(os.path.join(tree["mnt"], "f")) == errno.EROFS
    mount("-T", fstab, "-o", "remount,rw", tree["mnt"])
    assert try_write(os.path.join(tree["mnt"], "f")) == 0
    unmount(tree["mnt"])


def test_remount__fixed_options_are_refused_by_name(helper, tree):
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"], "-o", "lock_timeout=5")
    pids = daemons_of(tree["mnt"])
    before = mountinfo(tree["mnt"])
    res = mount("-o", "remount,ro,lock_timeout=9,attr_timeout=3,lock_scope=namespace,noatime",
                tree["mnt"], check=False)
    err = res.stderr.decode()
    assert res.returncode != 0
    assert "cannot change 'attr_timeout=3' in a remount of '%s'" % tree["mnt"] in err
    assert "cannot change 'lock_scope=namespace'" in err
    assert "cannot turn on 'noatime'" in err
    assert "lock_timeout" not in err.split("\n")[0]  # that one could change
    assert "unknown option" not in err
    assert mountinfo(tree["mnt"]) == before  # all or nothing: still rw
    assert try_write(os.path.join(tree["mnt"], "f")) == 0
    assert daemons_of(tree["mnt"]) == pids
    with open(os.path.join(tree["mnt"], ".treelockfs", "options")) as f:
        assert "lock_timeout=5\n" in f.read()  # nor was lock_timeout changed
    unmount(tree["mnt"])


def test_remount__lock_timeout_and_log_level_change_while_mounted(helper, tree):
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"], "-o",
          "lock_timeout=5,log_level=notice")
    res = mount("-o", "remount,ro,lock_timeout=0.5,log_level=debug", tree["mnt"], check=False)
    assert res.returncode == 0, res.stderr.decode()
    with open(os.path.join(tree["mnt"], ".treelockfs", "options")) as f:
        opts = f.read().splitlines()
    assert "lock_timeout=0.5" in opts and "log_level=debug" in opts
    assert "lock_timeout=5" not in opts and "log_level=notice" not in opts
    assert mountinfo(tree["mnt"])[2].split(",")[0] == "ro"
    # a bad value changes nothing, not even the flags
    for flags in ("ro", "rw"):
        res = mount("-o", "remount,%s,lock_timeout=never" % flags, tree["mnt"], check=False)
        assert res.returncode != 0
        assert "cannot change 'lock_timeout=never' in a remount of '%s': " % tree["mnt"] \
            in res.stderr.decode()
        assert mountinfo(tree["mnt"])[2].split(",")[0] == "ro"
        with open(os.path.join(tree["mnt"], ".treelockfs", "options")) as f:
            assert f.read().splitlines() == opts
    # made writable, a read-only mount takes changes again
    mount("-o", "remount,rw,lock_timeout=2", tree["mnt"])
    assert mountinfo(tree["mnt"])[2].split(",")[0] == "rw"
    with open(os.path.join(tree["mnt"], ".treelockfs", "options")) as f:
        assert "lock_timeout=2" in f.read().splitlines()
    unmount(tree["mnt"])


def test_remount__new_lock_timeout_applies_to_the_next_wait(mount_factory):
    """A rename holds its locks 4 s (rename_delay_ms); one that conflicts
    waits for them under lock_timeout=30, and gives up with EBUSY at once
    under the lock_timeout=0.3 written to .treelockfs/options meanwhile."""
    m = mount_factory(opts=["lock_timeout=30", "rename_delay_ms=4000"])
    os.mkdir(m.path("a"))
    write(m.path("a", "x"), "x")
    opts = m.path(".treelockfs", "options")
    fd = os.open(opts, os.O_WRONLY)
    try:
        assert os.write(fd, b"lock_timeout=0.3\nlog_level=debug\n") == 33
        assert errno_of(lambda: os.write(fd, b"lock_scope=namespace\n")) == errno.EINVAL
        assert errno_of(lambda: os.write(fd, b"lock_timeout=-1\n")) == errno.EINVAL
    finally:
        os.close(fd)
    first = threading.Thread(target=os.rename, args=(m.path("a", "x"), m.path("a", "y")))
    first.start()
    try:
        # the second wants an exclusive lock on /a: held by the first
        deadline = time.monotonic() + 20
        while "exclusive" not in m.ctl("locks") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert errno_of(lambda: os.rename(m.path("a"), m.path("b"))) == errno.EBUSY
    finally:
        first.join(30)
    assert os.path.exists(m.bpath("a", "y"))
    m.stop()
    assert "changed while mounted: lock_timeout=0.3 log_level=debug" in m.log()
    assert "cannot change 'lock_scope=namespace' while mounted" in m.log()
    assert "debug: rename '/a/x' -> '/a/y'" in m.log()


def test_remount__options_file_lists_what_the_mount_was_given(mount_factory):
    m = mount_factory(opts=["lock_timeout=5", "attr_timeout=0.5"])
    assert m.ctl("options").splitlines() == ["lock_timeout=5", "attr_timeout=0.5"]


def test_remount__value_with_a_control_character_is_refused_whole(helper, tree):
    """A newline in a value would make two lines of .treelockfs/options,
    two options; any control character refuses the remount, changing
    nothing, and the message shows it escaped."""
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"], "-o",
          "lock_timeout=5,log_level=notice")
    opts_path = os.path.join(tree["mnt"], ".treelockfs", "options")
    with open(opts_path) as f:
        before = f.read()
    for opt, shown in (("lock_timeout=7\nlog_level=debug", "lock_timeout=7\\x0alog_level=debug"),
                       ("log_level=debug\x1b[2J", "log_level=debug\\x1b[2J"),
                       ("fsname=a\rlock_timeout=9", "fsname=a\\x0dlock_timeout=9")):
        res = mount("-o", "remount,ro," + opt, tree["mnt"], check=False)
        err = res.stderr.decode("utf-8", "replace")
        assert res.returncode != 0, err
        assert "cannot change '%s' in a remount of '%s': a control character in the option" \
            % (shown, tree["mnt"]) in err, err
        assert "\x1b" not in err and "\r" not in err, err
        assert all(line.startswith(("treelockfs:", "mount")) for line in err.splitlines()), err
        assert mountinfo(tree["mnt"])[2].split(",")[0] == "rw"  # nor the flags
        with open(opts_path) as f:
            assert f.read() == before
    assert try_write(os.path.join(tree["mnt"], "f")) == 0
    unmount(tree["mnt"])


def test_remount__options_file_refuses_nul_and_garbage(mount_factory):
    """What is not "name=value" lines is refused whole with EINVAL, and the
    log says why; the options stay as they were."""
    m = mount_factory(opts=["lock_timeout=5", "log_level=notice"])
    opts = m.path(".treelockfs", "options")
    before = m.ctl("options")
    bad = {
        b"\0": "a NUL byte at byte 0 of the write",
        b"lock_timeout=2\0junk\n": "a NUL byte at byte 14 of the write",
        b"log_level=debug\n\0": "a NUL byte at byte 16 of the write",
        b"\n": "cannot change options while mounted: expected name=value lines",
        b"lock_timeout=2\r\n": "cannot change 'lock_timeout=2\\x0d' while mounted: "
                                "a control character in the line",
        b"log_level=debug\x1b[2J\n": "cannot change 'log_level=debug\\x1b[2J' while mounted: "
                                     "a control character in the line",
        b"garbage\n": "cannot change 'garbage' while mounted: expected name=value",
        b"=5\n": "cannot change '=5' while mounted: expected name=value",
        b"lock_timeout=0x10\n": "cannot change 'lock_timeout=0x10' while mounted: expected "
                                "decimal seconds from 0.001 to 86400",
        b"lock_timeout=1e1\n": "cannot change 'lock_timeout=1e1' while mounted",
        b"log_level=loud\n": "cannot change 'log_level=loud' while mounted: expected err, "
                             "warning, notice, info or debug",
        b"lock_scope=namespace\n": "cannot change 'lock_scope=namespace' while mounted: only "
                                   "lock_timeout and log_level change while mounted",
        b"log_level=debug\nlock_timeout=x\n": "cannot change 'lock_timeout=x' while mounted",
    }
    for data in bad:
        fd = os.open(opts, os.O_WRONLY)
        try:
            assert errno_of(lambda: os.write(fd, data)) == errno.EINVAL, data
        finally:
            os.close(fd)
        assert m.ctl("options") == before, data
    fd = os.open(opts, os.O_WRONLY)
    try:
        assert os.write(fd, b"log_level=info\n") == 15
    finally:
        os.close(fd)
    assert "log_level=info" in m.ctl("options").splitlines()
    m.stop()
    log = m.log()
    for data, why in bad.items():
        assert why in log, (data, why, log)
    assert "\x1b" not in log and "\r" not in log


# ---- atime ------------------------------------------------------------------------------------


def read_and_atime(backing, top, name):
    """Reads NAME through TOP; returns its atime on BACKING afterwards."""
    with open(os.path.join(top, name), "rb") as f:
        f.read()
    return os.stat(os.path.join(backing, name)).st_atime


def old_file(backing, name):
    path = os.path.join(backing, name)
    write(path, "data\n")
    os.utime(path, (OLD, OLD + 10))
    return name


@pytest.mark.parametrize("atime", ["noatime", "relatime"])
def test_remount__atime_beside_a_bind_mount(mount_factory, tmp_path, atime):
    m = mount_factory(opts=[atime])
    bind_path = str(tmp_path / "bind")
    os.mkdir(bind_path)
    subprocess.run(["mount", "--bind", m.backing, bind_path], check=True)
    try:
        remount_bind(bind_path, atime)
        got_bind = read_and_atime(m.backing, bind_path, old_file(m.backing, "b"))
        got_mnt = read_and_atime(m.backing, m.mnt, old_file(m.backing, "m"))
    finally:
        subprocess.run(["umount", bind_path], check=False)
    assert (got_bind == OLD) == (atime == "noatime")
    assert (got_mnt == OLD) == (got_bind == OLD), (atime, got_mnt, got_bind)


def test_remount__noatime_also_for_other_users(tree):
    """O_NOATIME needs the owner: a file and a directory of root read by
    nobody through an allow_other mount keep their atime too."""
    m = Mount(tree["backing"], tree["mnt"], opts=["noatime", "allow_other"],
              log=os.path.join(tree["top"], "log")).start()
    try:
        name = old_file(m.backing, "f")
        os.mkdir(m.bpath("d"), 0o755)
        os.utime(m.bpath("d"), (OLD, OLD + 10))
        run_as(NOBODY, NOBODY, lambda: (open(m.path(name)).read(), os.listdir(m.path("d"))))
        assert os.stat(m.bpath(name)).st_atime == OLD
        assert os.stat(m.bpath("d")).st_atime == OLD
    finally:
        m.stop()


@pytest.mark.nofuse
@pytest.mark.parametrize("opt", ["strictatime", "nodiratime"])
def test_remount__atime_options_that_cannot_be_honoured(tmp_path, opt):
    if not os.access(BIN, os.X_OK):
        pytest.skip("treelockfs is not built")
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    res = subprocess.run([BIN, str(tmp_path / "b"), str(tmp_path / "m"), "-f", "-o", opt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert res.returncode == 1
    assert "cannot honour '%s'" % opt in res.stderr.decode()
    assert not is_mounted(str(tmp_path / "m"))


def test_remount__remount_of_what_is_not_treelockfs_is_refused(tmp_path):
    if not os.access(BIN, os.X_OK):
        pytest.skip("treelockfs is not built")
    (tmp_path / "b").mkdir()
    res = subprocess.run([BIN, str(tmp_path / "b"), str(tmp_path / "b"), "-o", "remount,ro"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert res.returncode == 1
    assert "cannot remount '%s': not a treelockfs mount" % (tmp_path / "b") in \
        res.stderr.decode()
    shutil.rmtree(str(tmp_path / "b"))
