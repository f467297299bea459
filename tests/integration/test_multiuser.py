"""A user who is not root works in an allow_other mount exactly as natively.

The same tree is prepared by root in a plain directory and in the mount;
then a process with an arbitrary uid (no passwd entry needed), its own
group and a supplementary group runs the same steps in both, and every
result (value or errno) must agree: ownership of what it creates,
set-group-ID directories, permission errors, the sticky bit, the
set-user-ID/set-group-ID bits a write by a non-owner clears.
"""
import errno
import os
import stat
import time

import pytest

from conftest import outcome, read_file, run_as, write_file

USER, GROUP, SUPP, OTHER_GROUP, OTHER_USER = 4242, 4242, 4300, 4301, 4243

# depends on the libfuse (run again on the system's by run-tests.sh):
# allow_other and each request acting as its user: libfuse's mount options and
# request context
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")]


def stat_form(res):
    return ("stat", stat.filemode(res.st_mode), res.st_nlink if not stat.S_ISDIR(
        res.st_mode) else None, res.st_uid, res.st_gid,
        None if stat.S_ISDIR(res.st_mode) else res.st_size)


def run_steps(root, steps):
    return [(name, outcome(lambda f=f: f(root), stat_form)) for name, f in steps]


def j(root, *parts):
    return os.path.join(root, *parts)


def prepare(r):
    """Root builds the same tree natively and on the mount."""
    os.mkdir(j(r, "pub"), 0o777)
    os.chmod(j(r, "pub"), 0o777)
    os.mkdir(j(r, "tmp"))
    os.chmod(j(r, "tmp"), 0o1777)
    os.mkdir(j(r, "sg"))
    os.chown(j(r, "sg"), 0, SUPP)
    os.chmod(j(r, "sg"), 0o2777)
    os.mkdir(j(r, "ro"))
    os.chmod(j(r, "ro"), 0o755)
    os.mkdir(j(r, "noexec"))
    os.chmod(j(r, "noexec"), 0o766)
    write_file(j(r, "noexec", "f"), b"x")
    write_file(j(r, "ro", "secret"), b"s", mode=0o600)
    os.chmod(j(r, "ro", "secret"), 0o600)
    write_file(j(r, "ro", "readable"), b"r")
    os.chmod(j(r, "ro", "readable"), 0o644)
    for name in ("theirs", "theirs2", "shared", "suid", "suid2", "suid3", "suid4", "suid5",
                 "lnk"):
        write_file(j(r, "tmp", name), b"other user's")
        os.chown(j(r, "tmp", name), OTHER_USER, OTHER_USER)
    os.chmod(j(r, "tmp", "theirs"), 0o644)
    os.chmod(j(r, "tmp", "theirs2"), 0o600)
    os.chmod(j(r, "tmp", "shared"), 0o666)
    os.chmod(j(r, "tmp", "lnk"), 0o600)
    for name in ("suid", "suid2", "suid3", "suid4", "suid5"):
        os.chown(j(r, "tmp", name), OTHER_USER, SUPP)
        os.chmod(j(r, "tmp", name), 0o6777)
    os.mkdir(j(r, "tmp", "theirdir"))
    os.chown(j(r, "tmp", "theirdir"), OTHER_USER, OTHER_USER)
    write_file(j(r, "pub", "mine_by_root"), b"")
    os.chown(j(r, "pub", "mine_by_root"), USER, OTHER_GROUP)
    os.chmod(j(r, "pub", "mine_by_root"), 0o644)


def user_steps():
    def utime_now(path):
        os.utime(path)
        return "done"

    return [
        ("create", lambda r: write_file(j(r, "pub", "f"), b"mine")),
        ("stat created", lambda r: os.stat(j(r, "pub", "f"))),
        ("mkdir", lambda r: os.mkdir(j(r, "pub", "d"), 0o755)),
        ("stat mkdir", lambda r: os.stat(j(r, "pub", "d"))),
        ("mkfifo", lambda r: os.mkfifo(j(r, "pub", "p"), 0o640)),
        ("stat fifo", lambda r: os.lstat(j(r, "pub", "p"))),
        ("symlink", lambda r: os.symlink("f", j(r, "pub", "l"))),
        ("lstat symlink", lambda r: os.lstat(j(r, "pub", "l"))[4:6]),
        ("create in setgid dir", lambda r: write_file(j(r, "sg", "f"), b"")),
        ("setgid group inherited", lambda r: os.stat(j(r, "sg", "f"))),
        ("mkdir in setgid dir", lambda r: os.mkdir(j(r, "sg", "d"), 0o755)),
        ("setgid dir inherited", lambda r: os.stat(j(r, "sg", "d"))),
        ("chown to supplementary", lambda r: os.chown(j(r, "pub", "f"), -1, SUPP)),
        ("stat chowned", lambda r: os.stat(j(r, "pub", "f"))),
        ("chown to foreign group", lambda r: os.chown(j(r, "pub", "f"), -1, OTHER_GROUP)),
        ("chown to other user", lambda r: os.chown(j(r, "pub", "f"), OTHER_USER, -1)),
        ("chown to self", lambda r: os.chown(j(r, "pub", "f"), USER, -1)),
        ("chmod setgid foreign group", lambda r: os.chmod(j(r, "pub", "mine_by_root"),
                                                          0o2755)),
        ("setgid silently dropped", lambda r: os.stat(j(r, "pub", "mine_by_root"))),
        ("chmod setgid own group", lambda r: os.chmod(j(r, "pub", "f"), 0o2755)),
        ("setgid kept", lambda r: os.stat(j(r, "pub", "f"))),
        ("chmod sticky on file", lambda r: os.chmod(j(r, "pub", "f"), 0o1644)),
        ("sticky on file", lambda r: os.stat(j(r, "pub", "f"))),
        ("chmod theirs", lambda r: os.chmod(j(r, "tmp", "theirs"), 0o777)),
        ("chown theirs", lambda r: os.chown(j(r, "tmp", "theirs"), USER, USER)),
        ("create in ro", lambda r: write_file(j(r, "ro", "new"), b"")),
        ("mkdir in ro", lambda r: os.mkdir(j(r, "ro", "new"))),
        ("unlink in ro", lambda r: os.unlink(j(r, "ro", "readable"))),
        ("rename in ro", lambda r: os.rename(j(r, "ro", "readable"), j(r, "ro", "x"))),
        ("rename out of ro", lambda r: os.rename(j(r, "ro", "readable"), j(r, "pub", "x"))),
        ("read secret", lambda r: read_file(j(r, "ro", "secret"))),
        ("stat secret", lambda r: os.stat(j(r, "ro", "secret"))),
        ("read readable", lambda r: read_file(j(r, "ro", "readable"))),
        ("write readable", lambda r: write_file(j(r, "ro", "readable"), b"no", os.O_WRONLY)),
        ("truncate readable", lambda r: os.truncate(j(r, "ro", "readable"), 0)),
        ("search without x", lambda r: os.stat(j(r, "noexec", "f"))),
        ("list without x", lambda r: sorted(os.listdir(j(r, "noexec")))),
        ("access secret", lambda r: os.access(j(r, "ro", "secret"), os.R_OK)),
        ("access readable w", lambda r: os.access(j(r, "ro", "readable"), os.W_OK)),
        ("access own", lambda r: os.access(j(r, "pub", "f"), os.R_OK | os.W_OK)),
        ("access x", lambda r: os.access(j(r, "pub", "f"), os.X_OK)),
        ("sticky unlink theirs", lambda r: os.unlink(j(r, "tmp", "theirs"))),
        ("sticky rename theirs", lambda r: os.rename(j(r, "tmp", "theirs"), j(r, "tmp", "x"))),
        ("sticky rename over theirs", lambda r: os.rename(j(r, "pub", "f"),
                                                          j(r, "tmp", "theirs"))),
        ("sticky rmdir theirs", lambda r: os.rmdir(j(r, "tmp", "theirdir"))),
        ("sticky own file", lambda r: write_file(j(r, "tmp", "mine"), b"m")),
        ("sticky rename own", lambda r: os.rename(j(r, "tmp", "mine"), j(r, "tmp", "mine2"))),
        ("sticky unlink own", lambda r: os.unlink(j(r, "tmp", "mine2"))),
        ("excl existing", lambda r: os.open(j(r, "tmp", "shared"),
                                            os.O_WRONLY | os.O_CREAT | os.O_EXCL)),
        ("utime now on writable", lambda r: utime_now(j(r, "tmp", "shared"))),
        ("utime set on writable", lambda r: os.utime(j(r, "tmp", "shared"), (1, 1))),
        ("utime now not writable", lambda r: utime_now(j(r, "tmp", "theirs"))),
        ("utime set not writable", lambda r: os.utime(j(r, "tmp", "theirs"), (1, 1))),
        ("utime own", lambda r: os.utime(j(r, "pub", "f"), (5, 6))),
        ("times own", lambda r: (os.stat(j(r, "pub", "f")).st_atime,
                                 os.stat(j(r, "pub", "f")).st_mtime)),
        ("write suid file", lambda r: write_file(j(r, "tmp", "suid"), b"w", os.O_WRONLY)),
        ("write cleared bits", lambda r: os.stat(j(r, "tmp", "suid"))),
        ("truncate suid file", lambda r: os.truncate(j(r, "tmp", "suid2"), 1)),
        ("truncate cleared bits", lambda r: os.stat(j(r, "tmp", "suid2"))),
        ("open trunc suid file", lambda r: os.close(os.open(j(r, "tmp", "suid3"),
                                                            os.O_WRONLY | os.O_TRUNC))),
        ("open trunc cleared bits", lambda r: os.stat(j(r, "tmp", "suid3"))),
        ("ftruncate suid file", lambda r: _ftruncate(j(r, "tmp", "suid4"), 2)),
        ("ftruncate cleared bits", lambda r: os.stat(j(r, "tmp", "suid4"))),
        ("fallocate suid file", lambda r: _fallocate(j(r, "tmp", "suid5"), 8192)),
        ("fallocate bits", lambda r: os.stat(j(r, "tmp", "suid5"))),
        ("own suid file", lambda r: (write_file(j(r, "pub", "su"), b"x"),
                                     os.chmod(j(r, "pub", "su"), 0o6755),
                                     os.stat(j(r, "pub", "su")))[2]),
        ("chown own suid to supplementary", lambda r: os.chown(j(r, "pub", "su"), -1, SUPP)),
        ("own suid bits after chown", lambda r: os.stat(j(r, "pub", "su"))),
        ("write own suid", lambda r: write_file(j(r, "pub", "su"), b"y", os.O_WRONLY)),
        ("own suid bits after write", lambda r: os.stat(j(r, "pub", "su"))),
        ("create with setgid mode", lambda r: (os.close(os.open(j(r, "tmp", "sgc"),
                                                                os.O_CREAT | os.O_WRONLY,
                                                                0o2755)),
                                               os.stat(j(r, "tmp", "sgc")))[1]),
        ("open trunc readable", lambda r: os.open(j(r, "ro", "readable"),
                                                  os.O_RDONLY | os.O_TRUNC)),
        ("rename own over theirs (not sticky)", lambda r: (
            write_file(j(r, "pub", "a"), b"a"), write_file(j(r, "pub", "b"), b"b"),
            os.rename(j(r, "pub", "a"), j(r, "pub", "b")), read_file(j(r, "pub", "b")))[3]),
        ("hard link theirs", lambda r: os.link(j(r, "tmp", "lnk"), j(r, "tmp", "lnk2"))),
        ("hard link readable", lambda r: os.link(j(r, "ro", "readable"), j(r, "pub", "rl"))),
        ("rename own dir", lambda r: os.rename(j(r, "pub", "d"), j(r, "tmp", "d"))),
        ("mkdir in own dir", lambda r: os.mkdir(j(r, "tmp", "d", "sub"))),
        ("chmod own dir 0", lambda r: os.chmod(j(r, "tmp", "d"), 0)),
        ("stat in closed dir", lambda r: os.stat(j(r, "tmp", "d", "sub"))),
        ("chmod own dir back", lambda r: os.chmod(j(r, "tmp", "d"), 0o755)),
        ("xattr set own", lambda r: os.setxattr(j(r, "pub", "mine_by_root"), "user.a", b"1")),
        ("xattr set theirs", lambda r: os.setxattr(j(r, "tmp", "theirs"), "user.a", b"1")),
        ("xattr get theirs", lambda r: os.getxattr(j(r, "tmp", "theirs"), "user.a")),
        ("ftruncate own", lambda r: _ftruncate(j(r, "pub", "mine_by_root"), 3)),
        ("tree", lambda r: sorted(
            (os.path.relpath(os.path.join(p, n), r), os.lstat(os.path.join(p, n)).st_uid,
             os.lstat(os.path.join(p, n)).st_gid)
            for p, ds, fs in os.walk(r) for n in ds + fs)),
    ]


def _fallocate(path, size):
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, size)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _ftruncate(path, size):
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def test_multiuser__user_actions_match_native(shared_mount):
    m, native = shared_mount
    prepare(native)
    prepare(m.mnt)
    steps = user_steps()
    want = run_as(USER, GROUP, lambda: run_steps(native, steps), groups=[GROUP, SUPP])
    got = run_as(USER, GROUP, lambda: run_steps(m.mnt, steps), groups=[GROUP, SUPP])
    for w, g in zip(want, got):
        assert g == w, "step %r: native %r, mount %r" % (w[0], w[1], g[1])
    assert got == want
    # sanity: the comparison saw the interesting cases
    res = dict(got)
    assert res["stat created"][3:5] == (USER, GROUP)
    assert res["setgid group inherited"][4] == SUPP
    assert res["sticky unlink theirs"] == ("err", "EPERM")
    assert res["chown to foreign group"] == ("err", "EPERM")
    assert res["read secret"] == ("err", "EACCES")
    assert res["write cleared bits"][1] == "-rwxrwxrwx"
    # and the backing tree holds the same owners
    assert os.stat(m.bpath("pub", "f")).st_uid == USER
    assert os.stat(m.bpath("sg", "d")).st_gid == SUPP


def test_multiuser__two_users_and_root_interleaved(shared_mount):
    """Credentials are per request: alternating users on the same mount
    (and so on the same daemon threads) never act with each other's."""
    m, _ = shared_mount
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o1777)
    for i in range(6):
        uid = USER if i % 2 == 0 else OTHER_USER
        name = m.path("pub", "f%d" % i)
        run_as(uid, uid, lambda: write_file(name, b"x"))
        assert os.stat(name).st_uid == uid
        other = m.path("pub", "f%d" % (i - 1)) if i else None
        if other:
            with pytest.raises(PermissionError):
                run_as(uid, uid, lambda: os.unlink(other))
        write_file(m.path("pub", "root%d" % i), b"r")
        assert os.stat(m.path("pub", "root%d" % i)).st_uid == 0


def test_multiuser__root_write_keeps_setuid_bits_after_users(shared_mount):
    """Root (CAP_FSETID) keeps a file's set-user-ID bits when it writes,
    although the daemon threads just served other users."""
    m, _ = shared_mount
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o777)
    for i in range(8):
        run_as(USER, GROUP, lambda: write_file(m.path("pub", "u%d" % i), b"u"))
        p = m.path("pub", "s%d" % i)
        write_file(p, b"x")
        os.chown(p, OTHER_USER, OTHER_USER)
        os.chmod(p, 0o6755)
        run_as(USER, GROUP, lambda: os.stat(p))
        write_file(p, b"root was here", os.O_WRONLY)
        fd = os.open(p, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 8192)
        finally:
            os.close(fd)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o6755
        assert stat.S_IMODE(os.stat(m.bpath("pub", "s%d" % i)).st_mode) == 0o6755


def test_multiuser__posix_locks_between_users(shared_mount):
    """A lock one user takes through the mount stops another user's."""
    import fcntl
    m, _ = shared_mount
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o777)
    write_file(m.path("pub", "f"), b"0123456789")
    os.chmod(m.path("pub", "f"), 0o666)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the holder, as USER
        try:
            os.setgroups([])
            os.setgid(GROUP)
            os.setuid(USER)
            fd = os.open(m.path("pub", "f"), os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 4, 0)
            os.write(ready_w, b"1")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"

        def probe(start):
            fd = os.open(m.path("pub", "f"), os.O_RDWR)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, start)
                return 0
            except OSError as e:
                return e.errno
            finally:
                os.close(fd)
        assert run_as(OTHER_USER, OTHER_USER, lambda: probe(0)) in (errno.EAGAIN, errno.EACCES)
        assert run_as(OTHER_USER, OTHER_USER, lambda: probe(6)) == 0
    finally:
        os.write(done_w, b"1")
        os.waitpid(pid, 0)
    assert run_as(OTHER_USER, OTHER_USER, lambda: probe(0)) == 0


def test_multiuser__control_files_readable_by_users(shared_mount):
    m, _ = shared_mount
    out = run_as(USER, GROUP, lambda: read_file(m.path(".treelockfs", "stats")))
    assert b"renames" in out
    with pytest.raises(OSError) as e:
        run_as(USER, GROUP, lambda: write_file(m.path(".treelockfs", "stats"), b"",
                                               os.O_WRONLY))
    assert e.value.errno in (errno.EACCES, errno.EPERM)


def test_multiuser__rename_by_user_is_locked_and_checked(shared_mount):
    m, _ = shared_mount
    os.makedirs(m.path("pub", "a", "b"))
    os.chmod(m.path("pub"), 0o777)
    os.chown(m.path("pub", "a"), USER, GROUP)
    os.chown(m.path("pub", "a", "b"), USER, GROUP)
    write_file(m.path("pub", "a", "b", "f"), b"data")
    run_as(USER, GROUP, lambda: os.rename(m.path("pub", "a"), m.path("pub", "z")))
    assert read_file(m.path("pub", "z", "b", "f")) == b"data"
    with pytest.raises(PermissionError):
        run_as(USER, GROUP, lambda: os.rename(m.path("pub", "z"), m.mnt + "/z"))
    st = m.stats()
    assert st["renames"] >= 1
    assert m.locks() == []
    time.sleep(0)
