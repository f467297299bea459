"""Every passthrough operation behaves as on a native directory.

Each case runs the same scenario twice, once in a plain directory of the
local filesystem and once in a fresh mount, and compares what every step
returned (value or errno name). Inode numbers, devices and times are not
compared across the two trees; where they matter they are checked within
the mount.
"""
import ctypes
import errno
import fcntl
import os
import stat
import struct
import time

import pytest

from conftest import read_file, write_file
from conftest import run_steps as shared_run_steps

# depends on the libfuse (run again on the system's by run-tests.sh): every
# operation against native, the data path of open files included: in the
# kernel with FUSE passthrough, through the daemon without
pytestmark = pytest.mark.libfuse

AT_FDCWD = -100
RENAME_NOREPLACE = 1 << 0
RENAME_EXCHANGE = 1 << 1
RENAME_WHITEOUT = 1 << 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]


def renameat2(src, dst, flags):
    """rename(2) with FLAGS through libc's renameat2; raises OSError."""
    res = _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags)
    if res != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


def norm_stat(st):
    """The parts of a stat that must agree between native and the mount."""
    return ("stat", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink, st.st_uid,
            st.st_gid, st.st_size if not stat.S_ISDIR(st.st_mode) else None)


def run_steps(root, steps):
    return shared_run_steps(root, steps, norm_stat)


def compare(tmp_path, mnt, steps):
    native = tmp_path / "native"
    native.mkdir(exist_ok=True)
    want = run_steps(str(native), steps)
    got = run_steps(mnt.mnt, steps)
    for w, g in zip(want, got):
        assert g == w, "step %r: native %r, mount %r" % (w[0], w[1], g[1])
    assert got == want
    return got


def j(root, *parts):
    return os.path.join(root, *parts)


def test_passthrough__namespace_ops_match_native(tmp_path, mnt):
    steps = [
        ("mkdir", lambda r: os.mkdir(j(r, "d"), 0o755)),
        ("mkdir exists", lambda r: os.mkdir(j(r, "d"))),
        ("mkdir no parent", lambda r: os.mkdir(j(r, "nope", "x"))),
        ("create excl", lambda r: write_file(j(r, "d", "f"), b"hello",
                                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)),
        ("create excl again", lambda r: os.open(j(r, "d", "f"),
                                                os.O_WRONLY | os.O_CREAT | os.O_EXCL)),
        ("stat file", lambda r: os.stat(j(r, "d", "f"))),
        ("stat dir", lambda r: os.stat(j(r, "d"))),
        ("stat missing", lambda r: os.stat(j(r, "d", "missing"))),
        ("open missing", lambda r: os.open(j(r, "d", "missing"), os.O_RDONLY)),
        ("file as dir", lambda r: os.stat(j(r, "d", "f", "x"))),
        ("open dir for writing", lambda r: os.open(j(r, "d"), os.O_WRONLY)),
        ("mkfifo", lambda r: os.mkfifo(j(r, "d", "fifo"), 0o600)),
        ("stat fifo", lambda r: os.lstat(j(r, "d", "fifo"))),
        ("mknod reg", lambda r: os.mknod(j(r, "d", "nod"), stat.S_IFREG | 0o600)),
        ("stat nod", lambda r: os.lstat(j(r, "d", "nod"))),
        ("symlink", lambda r: os.symlink("f", j(r, "d", "sl"))),
        ("symlink exists", lambda r: os.symlink("g", j(r, "d", "sl"))),
        ("readlink", lambda r: os.readlink(j(r, "d", "sl"))),
        ("readlink not link", lambda r: os.readlink(j(r, "d", "f"))),
        ("lstat link", lambda r: os.lstat(j(r, "d", "sl"))),
        ("stat through link", lambda r: os.stat(j(r, "d", "sl"))),
        ("dangling", lambda r: os.symlink("nowhere", j(r, "d", "dangle"))),
        ("stat dangling", lambda r: os.stat(j(r, "d", "dangle"))),
        ("loop a", lambda r: os.symlink("loopb", j(r, "d", "loopa"))),
        ("loop b", lambda r: os.symlink("loopa", j(r, "d", "loopb"))),
        ("stat loop", lambda r: os.stat(j(r, "d", "loopa"))),
        ("link", lambda r: os.link(j(r, "d", "f"), j(r, "d", "hard"))),
        ("link exists", lambda r: os.link(j(r, "d", "f"), j(r, "d", "hard"))),
        ("link dir", lambda r: os.link(j(r, "d"), j(r, "dlink"))),
        ("link missing", lambda r: os.link(j(r, "d", "missing"), j(r, "d", "x"))),
        ("nlink", lambda r: os.stat(j(r, "d", "f")).st_nlink),
        ("readdir", lambda r: sorted(os.listdir(j(r, "d")))),
        ("readdir root", lambda r: sorted(os.listdir(r))),
        ("access rw", lambda r: os.access(j(r, "d", "f"), os.R_OK | os.W_OK)),
        ("access x", lambda r: os.access(j(r, "d", "f"), os.X_OK)),
        ("access missing", lambda r: os.access(j(r, "d", "missing"), os.F_OK)),
        ("unlink dir", lambda r: os.unlink(j(r, "d"))),
        ("rmdir file", lambda r: os.rmdir(j(r, "d", "f"))),
        ("rmdir not empty", lambda r: os.rmdir(j(r, "d"))),
        ("unlink missing", lambda r: os.unlink(j(r, "d", "missing"))),
        ("unlink hard", lambda r: os.unlink(j(r, "d", "hard"))),
        ("nlink after", lambda r: os.stat(j(r, "d", "f")).st_nlink),
        ("mkdir e", lambda r: os.mkdir(j(r, "e"))),
        ("mkdir e/sub", lambda r: os.mkdir(j(r, "e", "sub"))),
        ("rmdir e/sub", lambda r: os.rmdir(j(r, "e", "sub"))),
        ("rmdir e/sub again", lambda r: os.rmdir(j(r, "e", "sub"))),
        ("readdir e", lambda r: os.listdir(j(r, "e"))),
        ("unlink fifo", lambda r: os.unlink(j(r, "d", "fifo"))),
        ("unlink symlink", lambda r: os.unlink(j(r, "d", "sl"))),
        ("target kept", lambda r: read_file(j(r, "d", "f"))),
    ]
    compare(tmp_path, mnt, steps)


def test_passthrough__rename_matches_native(tmp_path, mnt):
    def setup(r):
        for d in ("a", "a/sub", "b", "full", "empty"):
            os.mkdir(j(r, d))
        for f, data in (("a/x", b"x"), ("a/y", b"y"), ("b/z", b"z"), ("full/k", b"k")):
            write_file(j(r, f), data)

    steps = [
        ("setup", setup),
        ("across dirs", lambda r: os.rename(j(r, "a", "x"), j(r, "b", "x"))),
        ("moved", lambda r: read_file(j(r, "b", "x"))),
        ("source gone", lambda r: os.stat(j(r, "a", "x"))),
        ("missing source", lambda r: os.rename(j(r, "a", "x"), j(r, "b", "q"))),
        ("missing dest dir", lambda r: os.rename(j(r, "a", "y"), j(r, "nope", "y"))),
        ("over file", lambda r: os.rename(j(r, "b", "x"), j(r, "b", "z"))),
        ("replaced", lambda r: read_file(j(r, "b", "z"))),
        ("file over dir", lambda r: os.rename(j(r, "b", "z"), j(r, "empty"))),
        ("dir over file", lambda r: os.rename(j(r, "empty"), j(r, "b", "z"))),
        ("dir over non-empty dir", lambda r: os.rename(j(r, "empty"), j(r, "full"))),
        ("dir into itself", lambda r: os.rename(j(r, "a"), j(r, "a", "sub", "a"))),
        ("dir onto own child", lambda r: os.rename(j(r, "a"), j(r, "a", "sub"))),
        ("child onto ancestor", lambda r: os.rename(j(r, "a", "sub"), j(r, "a"))),
        ("dir over empty dir", lambda r: os.rename(j(r, "full"), j(r, "empty"))),
        ("dir moved", lambda r: sorted(os.listdir(j(r, "empty")))),
        ("same name", lambda r: os.rename(j(r, "a", "y"), j(r, "a", "y"))),
        ("noreplace exists", lambda r: renameat2(j(r, "a", "y"), j(r, "b", "z"),
                                                 RENAME_NOREPLACE)),
        ("noreplace free", lambda r: renameat2(j(r, "a", "y"), j(r, "b", "y"),
                                               RENAME_NOREPLACE)),
        ("exchange", lambda r: renameat2(j(r, "b", "y"), j(r, "b", "z"), RENAME_EXCHANGE)),
        ("exchanged y", lambda r: read_file(j(r, "b", "y"))),
        ("exchanged z", lambda r: read_file(j(r, "b", "z"))),
        ("exchange file and dir", lambda r: renameat2(j(r, "b", "y"), j(r, "empty"),
                                                      RENAME_EXCHANGE)),
        ("after exchange", lambda r: sorted(os.listdir(j(r, "empty")))),
        ("exchange missing", lambda r: renameat2(j(r, "b", "z"), j(r, "b", "nope"),
                                                 RENAME_EXCHANGE)),
        ("both flags", lambda r: renameat2(j(r, "b", "z"), j(r, "b", "w"),
                                           RENAME_EXCHANGE | RENAME_NOREPLACE)),
        ("unknown flag", lambda r: renameat2(j(r, "b", "z"), j(r, "b", "w"), 1 << 5)),
        ("tree", lambda r: sorted(os.path.relpath(os.path.join(p, n), r)
                                  for p, ds, fs in os.walk(r) for n in ds + fs)),
    ]
    compare(tmp_path, mnt, steps)


def test_passthrough__rename_never_exdev_and_whiteout_is_einval(mnt):
    os.makedirs(mnt.path("p", "q", "r"))
    os.makedirs(mnt.path("s"))
    write_file(mnt.path("p", "q", "r", "f"), b"1")
    os.rename(mnt.path("p", "q", "r", "f"), mnt.path("s", "f"))
    os.rename(mnt.path("p", "q"), mnt.path("s", "q"))
    os.rename(mnt.path("s"), mnt.path("p", "s"))
    assert sorted(os.listdir(mnt.bpath("p", "s"))) == ["f", "q"]
    with pytest.raises(OSError) as e:
        renameat2(mnt.path("p", "s", "f"), mnt.path("p", "g"), RENAME_WHITEOUT)
    assert e.value.errno == errno.EINVAL
    assert os.path.exists(mnt.bpath("p", "s", "f"))


def test_passthrough__attributes_match_native(tmp_path, mnt):
    t1 = (1_000_000_000, 123_456_789)
    t2 = (1_200_000_000, 987_654_321)

    def times(r, name):
        st = os.stat(j(r, name))
        return (st.st_atime_ns, st.st_mtime_ns)

    steps = [
        ("create", lambda r: write_file(j(r, "f"), b"0123456789")),
        ("chmod", lambda r: os.chmod(j(r, "f"), 0o4751)),
        ("stat", lambda r: os.stat(j(r, "f"))),
        ("chown", lambda r: os.chown(j(r, "f"), 1234, 5678)),
        ("stat chowned", lambda r: os.stat(j(r, "f"))),
        ("chown uid only", lambda r: os.chown(j(r, "f"), 42, -1)),
        ("stat uid only", lambda r: os.stat(j(r, "f"))),
        ("chown none", lambda r: os.chown(j(r, "f"), -1, -1)),
        ("truncate shorter", lambda r: os.truncate(j(r, "f"), 4)),
        ("content", lambda r: read_file(j(r, "f"))),
        ("truncate longer", lambda r: os.truncate(j(r, "f"), 8)),
        ("content 2", lambda r: read_file(j(r, "f"))),
        ("truncate negative", lambda r: os.truncate(j(r, "f"), -1)),
        ("truncate dir", lambda r: os.truncate(r, 0)),
        ("utimens", lambda r: os.utime(j(r, "f"), ns=(t1[0] * 10**9 + t1[1],
                                                        t2[0] * 10**9 + t2[1]))),
        ("times", lambda r: times(r, "f")),
        ("mkdir", lambda r: os.mkdir(j(r, "d"))),
        ("utimens dir", lambda r: os.utime(j(r, "d"), ns=(5 * 10**9, 6 * 10**9))),
        ("times dir", lambda r: times(r, "d")),
        ("symlink", lambda r: os.symlink("f", j(r, "l"))),
        ("lutimes", lambda r: os.utime(j(r, "l"), ns=(7 * 10**9, 8 * 10**9),
                                       follow_symlinks=False)),
        ("times link", lambda r: (os.lstat(j(r, "l")).st_mtime_ns)),
        ("chmod missing", lambda r: os.chmod(j(r, "nope"), 0o600)),
        ("chown missing", lambda r: os.chown(j(r, "nope"), 1, 1)),
        ("ftruncate", lambda r: _ftruncate(j(r, "f"), 3)),
        ("content 3", lambda r: read_file(j(r, "f"))),
        ("ftruncate rdonly", lambda r: _ftruncate(j(r, "f"), 1, os.O_RDONLY)),
    ]
    compare(tmp_path, mnt, steps)


def _falloc(path, size):
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def _ftruncate(path, size, flags=os.O_RDWR):
    fd = os.open(path, flags)
    try:
        os.ftruncate(fd, size)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def test_passthrough__utimens_now_and_omit(mnt):
    p = mnt.path("f")
    write_file(p, b"x")
    os.utime(p, ns=(10**9, 2 * 10**9))
    # UTIME_OMIT for atime, UTIME_NOW for mtime through ctypes utimensat
    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
    UTIME_NOW = (1 << 30) - 1
    UTIME_OMIT = (1 << 30) - 2
    ts = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(0, UTIME_NOW))
    before = time.time_ns()
    assert _libc.utimensat(AT_FDCWD, os.fsencode(p), ts, 0) == 0
    st = os.stat(p)
    assert st.st_atime_ns == 10**9
    assert st.st_mtime_ns >= before - 10**7
    ts = (Timespec * 2)(Timespec(0, UTIME_NOW), Timespec(0, UTIME_OMIT))
    mtime = st.st_mtime_ns
    assert _libc.utimensat(AT_FDCWD, os.fsencode(p), ts, 0) == 0
    st = os.stat(p)
    assert st.st_mtime_ns == mtime
    assert st.st_atime_ns >= before - 10**7
    bst = os.stat(mnt.bpath("f"))
    assert (bst.st_atime_ns, bst.st_mtime_ns) == (st.st_atime_ns, st.st_mtime_ns)


@pytest.mark.parametrize("op", ["rename", "link", "chmod", "chown", "truncate", "write",
                                "utime", "setxattr"])
def test_passthrough__ctime_moves(mnt, op):
    """The change time moves on every change, seen at once through the mount
    (pjdfstest checks this right after each call)."""
    p = mnt.path("f")
    write_file(p, b"abc")
    os.mkdir(mnt.path("d"))
    old = os.stat(p)
    dold = os.stat(mnt.path("d"))
    time.sleep(0.02)
    if op == "rename":
        os.rename(p, mnt.path("d", "g"))
        p = mnt.path("d", "g")
    elif op == "link":
        os.link(p, mnt.path("d", "h"))
    elif op == "chmod":
        os.chmod(p, 0o600)
    elif op == "chown":
        os.chown(p, 77, 77)
    elif op == "truncate":
        os.truncate(p, 1)
    elif op == "write":
        write_file(p, b"zz", os.O_WRONLY)
    elif op == "utime":
        os.utime(p, ns=(10**9, 10**9))
    elif op == "setxattr":
        os.setxattr(p, "user.k", b"v")
    new = os.stat(p)
    assert new.st_ctime_ns > old.st_ctime_ns
    assert new.st_ctime_ns == os.stat(mnt.bpath(os.path.relpath(p, mnt.mnt))).st_ctime_ns
    if op in ("rename", "link"):
        dnew = os.stat(mnt.path("d"))
        assert dnew.st_mtime_ns > dold.st_mtime_ns
        assert dnew.st_ctime_ns > dold.st_ctime_ns


def test_passthrough__file_io_matches_native(tmp_path, mnt):
    def rw(r):
        fd = os.open(j(r, "f"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            out = [os.write(fd, b"hello world"), os.pread(fd, 5, 6), os.lseek(fd, 0, os.SEEK_END)]
            os.pwrite(fd, b"HELLO", 0)
            os.fsync(fd)
            os.fdatasync(fd)
            out.append(os.pread(fd, 100, 0))
            out.append(os.pread(fd, 10, 1000))
            return out
        finally:
            os.close(fd)

    def append(r):
        fd = os.open(j(r, "f"), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"!")
            os.pwrite(fd, b"?", 0)  # Linux appends even with pwrite
        finally:
            os.close(fd)
        return read_file(j(r, "f"))

    def trunc_open(r):
        write_file(j(r, "t"), b"long content")
        fd = os.open(j(r, "t"), os.O_WRONLY | os.O_TRUNC)
        os.close(fd)
        return os.stat(j(r, "t")).st_size

    def sparse(r):
        fd = os.open(j(r, "s"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b"a" * 4096, 0)
            os.pwrite(fd, b"b" * 4096, 1 << 20)
            return [os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE),
                    os.lseek(fd, 8192, os.SEEK_DATA), os.lseek(fd, (1 << 20) + 4096, os.SEEK_HOLE),
                    os.fstat(fd).st_size]
        finally:
            os.close(fd)

    def seek_past(r):
        fd = os.open(j(r, "s"), os.O_RDONLY)
        try:
            return os.lseek(fd, 10 << 20, os.SEEK_DATA)
        finally:
            os.close(fd)

    def falloc(r):
        fd = os.open(j(r, "fa"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, 65536)
            st = os.fstat(fd)
            return (st.st_size, st.st_blocks >= 128)
        finally:
            os.close(fd)

    def falloc_keep(r):
        fd = os.open(j(r, "fa"), os.O_RDWR)
        try:
            FALLOC_FL_KEEP_SIZE = 1
            res = _libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0),
                                  ctypes.c_long(1 << 20))
            return (res, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def falloc_rdonly(r):
        fd = os.open(j(r, "fa"), os.O_RDONLY)
        try:
            return os.posix_fallocate(fd, 0, 10)
        finally:
            os.close(fd)

    def cfr(r):
        write_file(j(r, "src"), b"0123456789" * 1000)
        fi = os.open(j(r, "src"), os.O_RDONLY)
        fo = os.open(j(r, "dst"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            n = 0
            while n < 10000:
                c = os.copy_file_range(fi, fo, 10000 - n, n, n)
                if c == 0:
                    break
                n += c
        finally:
            os.close(fi)
            os.close(fo)
        return (n, read_file(j(r, "dst")) == read_file(j(r, "src")))

    def statfs(r):
        s = os.statvfs(r)
        return (s.f_bsize, s.f_blocks, s.f_files, s.f_namemax)

    def fsyncdir(r):
        fd = os.open(r, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
            return "synced"
        finally:
            os.close(fd)

    def write_rdonly(r):
        fd = os.open(j(r, "f"), os.O_RDONLY)
        try:
            return os.write(fd, b"x")
        finally:
            os.close(fd)

    steps = [("rw", rw), ("append", append), ("trunc open", trunc_open), ("sparse", sparse),
             ("seek past end", seek_past), ("fallocate", falloc), ("fallocate keep", falloc_keep),
             ("fallocate rdonly", falloc_rdonly), ("copy_file_range", cfr), ("statfs", statfs),
             ("fsyncdir", fsyncdir), ("write rdonly", write_rdonly),
             ("big write", lambda r: write_file(j(r, "big"), os.urandom(1) * (3 << 20))),
             ("big size", lambda r: os.stat(j(r, "big")).st_size)]
    compare(tmp_path, mnt, steps)


def test_passthrough__xattrs_match_native(tmp_path, mnt):
    steps = [
        ("create", lambda r: write_file(j(r, "f"), b"")),
        ("set", lambda r: os.setxattr(j(r, "f"), "user.one", b"1")),
        ("set 2", lambda r: os.setxattr(j(r, "f"), "user.two", b"22" * 100)),
        ("get", lambda r: os.getxattr(j(r, "f"), "user.one")),
        ("get 2", lambda r: os.getxattr(j(r, "f"), "user.two")),
        ("list", lambda r: sorted(n for n in os.listxattr(j(r, "f")) if n.startswith("user."))),
        ("create existing", lambda r: os.setxattr(j(r, "f"), "user.one", b"x",
                                                  os.XATTR_CREATE)),
        ("replace missing", lambda r: os.setxattr(j(r, "f"), "user.three", b"x",
                                                  os.XATTR_REPLACE)),
        ("get missing", lambda r: os.getxattr(j(r, "f"), "user.nope")),
        ("remove", lambda r: os.removexattr(j(r, "f"), "user.one")),
        ("remove again", lambda r: os.removexattr(j(r, "f"), "user.one")),
        ("list after", lambda r: sorted(n for n in os.listxattr(j(r, "f")) if n.startswith("user."))),
        ("bad namespace", lambda r: os.setxattr(j(r, "f"), "bogus.x", b"1")),
        ("on dir", lambda r: os.setxattr(r, "user.d", b"dir")),
        ("get dir", lambda r: os.getxattr(r, "user.d")),
        ("missing file", lambda r: os.getxattr(j(r, "nope"), "user.one")),
        ("symlink", lambda r: os.symlink("f", j(r, "l"))),
        ("through link", lambda r: os.getxattr(j(r, "l"), "user.two")),
        ("on link itself", lambda r: os.setxattr(j(r, "l"), "user.x", b"1",
                                                 follow_symlinks=False)),
    ]
    compare(tmp_path, mnt, steps)
    assert os.getxattr(mnt.bpath("f"), "user.two") == b"22" * 100


def test_passthrough__flock_forwarded_both_ways(mnt):
    write_file(mnt.path("f"), b"x")
    via_mnt = os.open(mnt.path("f"), os.O_RDWR)
    via_back = os.open(mnt.bpath("f"), os.O_RDWR)
    try:
        fcntl.flock(via_mnt, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            fcntl.flock(via_back, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(via_mnt, fcntl.LOCK_UN)
        fcntl.flock(via_back, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            fcntl.flock(via_mnt, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(via_mnt, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(via_back, fcntl.LOCK_UN)
        fcntl.flock(via_mnt, fcntl.LOCK_UN)
        fcntl.flock(via_back, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(via_mnt)
        os.close(via_back)


def _getlk(fd, ltype, start=0, length=0):
    """F_GETLK: the conflicting lock's type, or F_UNLCK."""
    arg = struct.pack("hhqqi", ltype, os.SEEK_SET, start, length, 0)
    res = fcntl.fcntl(fd, fcntl.F_GETLK, arg)
    return struct.unpack("hhqqi", res)[0]


def _in_child(func):
    """Runs FUNC in a forked child (another lock owner); returns its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            res = func()
        except BaseException as e:  # noqa: B902
            res = "error %r" % (e,)
        os.write(w, repr(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        c = os.read(r, 4096)
        if not c:
            break
        data += c
    os.close(r)
    os.waitpid(pid, 0)
    return data.decode()


def test_passthrough__posix_locks_forwarded_both_ways(mnt):
    write_file(mnt.path("f"), b"0123456789")

    def try_lock(path, ltype, start, length):
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.lockf(fd, ltype | fcntl.LOCK_NB, length, start)
            return "locked"
        except OSError as e:
            return errno.errorcode[e.errno]
        finally:
            os.close(fd)

    fd = os.open(mnt.path("f"), os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 5, 0)
        # another process sees it on the backing file and through the mount
        assert _in_child(lambda: try_lock(mnt.bpath("f"), fcntl.LOCK_EX, 0, 1)) in (
            "'EAGAIN'", "'EACCES'")
        assert _in_child(lambda: try_lock(mnt.path("f"), fcntl.LOCK_EX, 0, 1)) in (
            "'EAGAIN'", "'EACCES'")
        # a range that does not overlap is free
        assert _in_child(lambda: try_lock(mnt.bpath("f"), fcntl.LOCK_EX, 6, 2)) == "'locked'"
        assert _in_child(lambda: try_lock(mnt.path("f"), fcntl.LOCK_EX, 6, 2)) == "'locked'"
        fcntl.lockf(fd, fcntl.LOCK_UN, 5, 0)
        assert _in_child(lambda: try_lock(mnt.bpath("f"), fcntl.LOCK_EX, 0, 1)) == "'locked'"
    finally:
        os.close(fd)

    # the other way: a lock on the backing file is seen through the mount
    bfd = os.open(mnt.bpath("f"), os.O_RDWR)
    try:
        fcntl.lockf(bfd, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0)
        assert _in_child(lambda: try_lock(mnt.path("f"), fcntl.LOCK_EX, 3, 1)) in (
            "'EAGAIN'", "'EACCES'")
        assert _in_child(lambda: try_lock(mnt.path("f"), fcntl.LOCK_SH, 3, 1)) == "'locked'"

        def getlk():
            fd2 = os.open(mnt.path("f"), os.O_RDWR)
            try:
                return _getlk(fd2, fcntl.F_WRLCK)
            finally:
                os.close(fd2)
        assert _in_child(getlk) == repr(fcntl.F_RDLCK)
        fcntl.lockf(bfd, fcntl.LOCK_UN, 0, 0)
        assert _in_child(getlk) == repr(fcntl.F_UNLCK)
        assert _in_child(lambda: try_lock(mnt.path("f"), fcntl.LOCK_EX, 0, 0)) == "'locked'"
    finally:
        os.close(bfd)


def test_passthrough__unlinked_open_file_still_usable(mnt):
    os.mkdir(mnt.path("d"))
    p = mnt.path("d", "f")
    write_file(p, b"still here")
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.exists(p)
        assert not os.path.exists(mnt.bpath("d", "f"))
        assert os.listdir(mnt.path("d")) == []
        assert os.listdir(mnt.bpath("d")) == []
        st = os.fstat(fd)
        assert st.st_nlink == 0
        assert st.st_size == 10
        assert os.pread(fd, 100, 0) == b"still here"
        os.pwrite(fd, b"STILL", 0)
        os.ftruncate(fd, 7)
        assert os.pread(fd, 100, 0) == b"STILL h"
        assert os.fstat(fd).st_size == 7
        os.fsync(fd)
        # opened again through /proc, and its attributes changed by name
        proc = "/proc/self/fd/%d" % fd
        with open(proc, "rb") as f:
            assert f.read() == b"STILL h"
        os.chmod(proc, 0o600)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        # another file takes the old name meanwhile
        write_file(p, b"new")
        assert read_file(p) == b"new"
        assert os.pread(fd, 100, 0) == b"STILL h"
        # the directory that held it can be removed while it is open
        os.unlink(p)
        os.rmdir(mnt.path("d"))
        assert os.pread(fd, 100, 0) == b"STILL h"
    finally:
        os.close(fd)
    # its name is gone everywhere, and the directory can be removed
    assert os.listdir(mnt.bpath()) == []


def test_passthrough__unlinked_open_file_survives_parent_rename(mnt):
    os.makedirs(mnt.path("a", "b"))
    p = mnt.path("a", "b", "f")
    write_file(p, b"kept")
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        os.rename(mnt.path("a"), mnt.path("z"))
        time.sleep(1.1)  # past attr_timeout: fstat asks the filesystem
        assert os.fstat(fd).st_size == 4
        os.ftruncate(fd, 2)
        assert os.fstat(fd).st_size == 2
        assert os.pread(fd, 10, 0) == b"ke"
    finally:
        os.close(fd)
    assert os.listdir(mnt.bpath("z", "b")) == []
    os.rmdir(mnt.path("z", "b"))


def test_passthrough__hard_links_share_inode(mnt):
    write_file(mnt.path("a"), b"data")
    os.link(mnt.path("a"), mnt.path("b"))
    sa, sb = os.stat(mnt.path("a")), os.stat(mnt.path("b"))
    assert sa.st_ino == sb.st_ino == os.stat(mnt.bpath("a")).st_ino
    assert sa.st_nlink == sb.st_nlink == 2
    entries = {e.name: e.inode() for e in os.scandir(mnt.mnt)}
    assert entries["a"] == entries["b"] == sa.st_ino
    write_file(mnt.path("b"), b"DATA", os.O_WRONLY)
    assert read_file(mnt.path("a")) == b"DATA"
    os.unlink(mnt.path("a"))
    assert os.stat(mnt.path("b")).st_nlink == 1


def test_passthrough__hard_link_attributes_agree_at_once(mnt):
    """As pjdfstest link/00.t: a change through one name shows through the
    others at once, although each name has its own node in libfuse."""
    n0, n1, n2 = mnt.path("n0"), mnt.path("n1"), mnt.path("n2")
    write_file(n0, b"")
    os.chmod(n0, 0o644)
    os.link(n0, n1)
    os.link(n1, n2)
    for n in (n0, n1, n2):
        st = os.lstat(n)
        assert (stat.S_IMODE(st.st_mode), st.st_nlink) == (0o644, 3)
    ctime = os.lstat(n0).st_ctime_ns
    time.sleep(0.02)
    os.chmod(n1, 0o201)
    os.chown(n1, 65534, 65533)
    for n in (n0, n1, n2):
        st = os.lstat(n)
        assert (stat.S_IMODE(st.st_mode), st.st_nlink, st.st_uid, st.st_gid) == (
            0o201, 3, 65534, 65533)
        assert st.st_ctime_ns > ctime
    os.unlink(n0)
    assert not os.path.exists(n0)
    for n in (n1, n2):
        assert os.lstat(n).st_nlink == 2
    os.utime(n2, ns=(10**9, 3 * 10**9))
    assert os.lstat(n1).st_mtime_ns == 3 * 10**9
    os.rename(n2, mnt.path("n3"))
    assert os.lstat(n1).st_nlink == 2
    os.unlink(mnt.path("n3"))
    assert os.lstat(n1).st_nlink == 1


def test_passthrough__mount_over_backing_itself(tmp_path, mount_factory):
    d = tmp_path / "same"
    d.mkdir()
    (d / "before").write_bytes(b"old")
    m = mount_factory(backing=d, name="same")
    assert os.path.realpath(m.mnt) == os.path.realpath(m.backing)
    assert read_file(m.path("before")) == b"old"
    os.makedirs(m.path("x", "y"))
    write_file(m.path("x", "y", "f"), b"new")
    os.rename(m.path("x"), m.path("z"))
    assert read_file(m.path("z", "y", "f")) == b"new"
    assert sorted(os.listdir(m.mnt)) == ["before", "z"]
    assert m.stats()["renames"] == 1
    m.stop()
    assert (d / "z" / "y" / "f").read_bytes() == b"new"


def test_passthrough__control_entry_is_hidden_and_protected(mnt):
    root = mnt.mnt
    assert ".treelockfs" not in os.listdir(root)
    os.mkdir(mnt.path("d"))
    write_file(mnt.path("f"), b"")
    assert os.path.isdir(mnt.path(".treelockfs"))
    assert sorted(os.listdir(mnt.path(".treelockfs"))) == ["backing", "locks", "metrics", "options", "stats"]
    for fn, err in [
        (lambda: os.mkdir(mnt.path(".treelockfs")), errno.EEXIST),
        (lambda: os.rmdir(mnt.path(".treelockfs")), None),
        (lambda: os.unlink(mnt.path(".treelockfs", "stats")), None),
        (lambda: os.rename(mnt.path(".treelockfs"), mnt.path("x")), None),
        (lambda: os.rename(mnt.path("d"), mnt.path(".treelockfs")), None),
        (lambda: os.rename(mnt.path("f"), mnt.path(".treelockfs", "stats")), None),
        (lambda: os.rename(mnt.path(".treelockfs", "locks"), mnt.path("l")), None),
        (lambda: write_file(mnt.path(".treelockfs", "new"), b""), None),
        (lambda: write_file(mnt.path(".treelockfs", "stats"), b"", os.O_WRONLY), None),
        (lambda: os.symlink("x", mnt.path(".treelockfs")), errno.EEXIST),
        (lambda: os.link(mnt.path("f"), mnt.path(".treelockfs", "locks")), None),
        (lambda: os.chmod(mnt.path(".treelockfs", "stats"), 0o666), None),
    ]:
        with pytest.raises(OSError) as e:
            fn()
        if err:
            assert e.value.errno == err
    assert not os.path.exists(mnt.bpath(".treelockfs"))
    assert sorted(os.listdir(root)) == ["d", "f"]
    os.rename(mnt.path("d"), mnt.path("d2"))
    st = mnt.stats()
    for k in ("renames", "conflicts", "waits", "wait_p50_us", "wait_p99_us", "timeouts",
              "errors"):
        assert isinstance(st[k], int), k
    assert st["renames"] == 1
    assert mnt.locks() == []


def test_passthrough__pjdfstest_corner_cases_match_native(tmp_path, mnt):
    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
    UTIME_OMIT = (1 << 30) - 2

    def ctime_moves(r, name, fn):
        before = os.lstat(j(r, name)).st_ctime_ns
        time.sleep(0.02)
        fn()
        return os.lstat(j(r, name)).st_ctime_ns != before

    def omit_both(r):
        ts = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(0, UTIME_OMIT))
        res = _libc.utimensat(AT_FDCWD, os.fsencode(j(r, "f")), ts, 0)
        assert res == 0

    def mknod_dev(r, kind, name):
        os.mknod(j(r, name), kind | 0o600, os.makedev(1, 3))
        st = os.lstat(j(r, name))
        return (stat.S_IFMT(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev))

    steps = [
        ("create", lambda r: write_file(j(r, "f"), b"abc")),
        ("utimensat omit omit", lambda r: ctime_moves(r, "f", lambda: omit_both(r))),
        # chown(-1, -1) moves ctime natively on Linux but never reaches a
        # FUSE filesystem (POSIX allows either: pjdfstest marks it todo)
        ("chown same", lambda r: ctime_moves(r, "f", lambda: os.chown(j(r, "f"), 0, 0))),
        ("chmod same", lambda r: ctime_moves(r, "f", lambda: os.chmod(j(r, "f"), 0o644))),
        ("truncate same size", lambda r: ctime_moves(r, "f", lambda: os.truncate(j(r, "f"), 3))),
        ("fallocate moves ctime", lambda r: ctime_moves(r, "f", lambda: _falloc(j(r, "f"), 8192))),
        ("size after fallocate", lambda r: os.stat(j(r, "f")).st_size),
        ("chmod suid", lambda r: os.chmod(j(r, "f"), 0o6755)),
        ("chown clears suid", lambda r: os.chown(j(r, "f"), 65534, 65533)),
        ("mode after chown", lambda r: stat.filemode(os.stat(j(r, "f")).st_mode)),
        ("char dev", lambda r: mknod_dev(r, stat.S_IFCHR, "c")),
        ("block dev", lambda r: mknod_dev(r, stat.S_IFBLK, "b")),
        ("socket", lambda r: stat.S_IFMT(os.lstat(j(r, "s")).st_mode)
         if os.mknod(j(r, "s"), stat.S_IFSOCK | 0o600) is None else None),
        ("symlink target 4095", lambda r: os.symlink("t" * 4095, j(r, "long"))),
        ("readlink 4095", lambda r: len(os.readlink(j(r, "long")))),
        ("symlink target 4096", lambda r: os.symlink("t" * 4096, j(r, "long2"))),
        ("mkdir dot", lambda r: os.mkdir(j(r, "."))),
        ("rmdir dot", lambda r: os.rmdir(j(r, "d", ".") if os.path.isdir(j(r, "d"))
                                         else os.mkdir(j(r, "d")) or os.rmdir(j(r, "d", ".")))),
        ("rmdir dotdot", lambda r: os.rmdir(j(r, "d", ".."))),
        ("open dir O_RDWR", lambda r: os.open(j(r, "d"), os.O_RDWR)),
        ("open file O_DIRECTORY", lambda r: os.open(j(r, "f"), os.O_RDONLY | os.O_DIRECTORY)),
        ("open symlink O_NOFOLLOW", lambda r: os.open(j(r, "long"), os.O_RDONLY | os.O_NOFOLLOW)),
        ("fifo nonblock no reader", lambda r: (os.mkfifo(j(r, "p")), os.open(
            j(r, "p"), os.O_WRONLY | os.O_NONBLOCK))),
        ("open excl symlink", lambda r: os.open(j(r, "long"), os.O_CREAT | os.O_EXCL | os.O_RDWR)),
        ("dir nlink", lambda r: (os.mkdir(j(r, "d", "s1")), os.mkdir(j(r, "d", "s2")),
                                 os.stat(j(r, "d")).st_nlink)[2]),
        ("dir nlink after move", lambda r: (os.rename(j(r, "d", "s1"), j(r, "s1")),
                                            os.stat(j(r, "d")).st_nlink,
                                            os.stat(r).st_nlink)[1:]),
        ("dir mtime moves", lambda r: ctime_moves(r, "d", lambda: os.mkdir(j(r, "d", "s3")))),
    ]
    compare(tmp_path, mnt, steps)
