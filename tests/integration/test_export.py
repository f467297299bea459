"""File handles through the mount (export_support), beside the backing.

name_to_handle_at(2) gives a handle of a file; open_by_handle_at(2) opens
it again later, also after the kernel dropped the inode from its caches,
which is what an NFS server re-exporting the mount does all day. Each test
does the same on the backing directory and on the mount, and the
backing's answer is the expected one. `echo 2 > /proc/sys/vm/drop_caches`
makes the kernel forget every inode nothing holds (on the mount too: the
daemon then gets its forgets). Needs root (open_by_handle_at needs
CAP_DAC_READ_SEARCH, drop_caches root).
"""
import ctypes
import errno
import os
import struct

import pytest

from mounts import wait_for

# depends on the libfuse (run again on the system's by run-tests.sh): NFS
# export support: libfuse's lookups of '.' and '..' and the handles the kernel
# forgets
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="open_by_handle_at and drop_caches need root")]

LIBC = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
MAX_HANDLE_SZ = 128


def handle_of(path):
    """The file handle of PATH (name_to_handle_at, not following a last symlink)."""
    buf = ctypes.create_string_buffer(8 + MAX_HANDLE_SZ)
    struct.pack_into("Ii", buf, 0, MAX_HANDLE_SZ, 0)
    mount_id = ctypes.c_int()
    if LIBC.name_to_handle_at(AT_FDCWD, os.fsencode(path), buf, ctypes.byref(mount_id), 0):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return buf.raw[:8 + struct.unpack_from("I", buf.raw, 0)[0]]


def open_handle(top, handle, flags=os.O_RDONLY):
    """open_by_handle_at() of HANDLE with TOP (a directory on its mount)."""
    mfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = ctypes.create_string_buffer(handle, len(handle))
        fd = LIBC.open_by_handle_at(mfd, buf, flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


def forget_inodes():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def read_by_handle(top, handle):
    """The bytes of the file HANDLE names, or the errno."""
    try:
        fd = open_handle(top, handle)
    except OSError as e:
        return e.errno
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def list_by_handle(top, handle):
    """The sorted names in the directory HANDLE names, or the errno."""
    try:
        fd = open_handle(top, handle, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return e.errno
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def make_tree(root):
    os.makedirs(os.path.join(root, "d", "e"))
    with open(os.path.join(root, "d", "e", "f"), "w") as f:
        f.write("deep")
    with open(os.path.join(root, "top"), "w") as f:
        f.write("top")


def both(m):
    """(name, directory) of the backing and the mount."""
    return [("backing", m.backing), ("mount", m.mnt)]


@pytest.fixture
def emnt(mount_factory):
    return mount_factory(opts=["export_support"])


def test_export__handles_survive_forgotten_inodes(emnt):
    make_tree(emnt.backing)
    got = {}
    for side, top in both(emnt):
        h = {rel: handle_of(os.path.join(top, rel)) for rel in ("top", "d", "d/e", "d/e/f")}
        forget_inodes()
        got[side] = {rel: (list_by_handle(top, h[rel]) if rel in ("d", "d/e")
                           else read_by_handle(top, h[rel])) for rel in h}
        forget_inodes()
        got[side]["again"] = read_by_handle(top, h["d/e/f"])
    assert got["backing"] == {"top": b"top", "d": ["e"], "d/e": ["f"], "d/e/f": b"deep",
                              "again": b"deep"}
    assert got["mount"] == got["backing"]


def test_export__handle_follows_a_rename_behind_the_mount(emnt):
    """A handle names the file, not its path: moved in BACKING meanwhile, it
    still opens, and a directory found by handle has its new parent."""
    make_tree(emnt.backing)
    os.mkdir(emnt.bpath("elsewhere"))
    hb = handle_of(emnt.bpath("d", "e"))
    hm = handle_of(emnt.path("d", "e"))
    os.rename(emnt.bpath("d", "e"), emnt.bpath("elsewhere", "moved"))
    forget_inodes()
    for top, h in ((emnt.backing, hb), (emnt.mnt, hm)):
        fd = open_handle(top, h, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert os.listdir(fd) == ["f"]
            assert os.readlink("/proc/self/fd/%d" % fd) == os.path.join(top, "elsewhere",
                                                                         "moved")
        finally:
            os.close(fd)


def test_export__deleted_file_is_stale(emnt):
    make_tree(emnt.backing)
    got = {}
    for side, top in both(emnt):
        h = handle_of(os.path.join(top, "top"))
        os.unlink(os.path.join(top, "top"))
        forget_inodes()
        got[side] = read_by_handle(top, h)
        with open(os.path.join(top, "top"), "w") as f:  # for the other side
            f.write("top")
    assert got == {"backing": errno.ESTALE, "mount": errno.ESTALE}


def test_export__forgotten_files_kept_as_many_as_export_remember(mount_factory):
    """export_remember=1: of three files the kernel forgot, the daemon still
    knows one; the handles of the others are stale (and harmless)."""
    m = mount_factory(opts=["export_support", "export_remember=1"])
    for n in "abc":
        with open(m.bpath(n), "w") as f:
            f.write(n)
    handles = {n: handle_of(m.path(n)) for n in "abc"}
    # The kernel's forgets reach the daemon on their own, after drop_caches
    # returns: a file whose forget is still on its way reads. A file read is
    # known again and forgotten again by the next drop; a stale one stays
    # stale. So drop until the forgets have arrived (2 stale), or a minute.
    def settled():
        forget_inodes()
        got = sorted(str(read_by_handle(m.mnt, handles[n])) for n in "abc")
        return got if got.count(str(errno.ESTALE)) >= 2 else None

    got = wait_for(settled, timeout=60, step=0.2,
                   what="the kernel's forgets to reach the daemon (2 of 3 handles stale)")
    assert len([g for g in got if g == str(errno.ESTALE)]) == 2, got
    assert len([g for g in got if g.startswith("b'")]) == 1, got
    assert sorted(os.listdir(m.mnt)) == ["a", "b", "c"]  # still serving


def test_export__without_export_support_handles_go_stale(mnt):
    """The default: handles work while the kernel has the inode only (no
    memory is spent on forgotten inodes)."""
    make_tree(mnt.backing)
    h = handle_of(mnt.path("top"))
    assert read_by_handle(mnt.mnt, h) == b"top"
    forget_inodes()
    assert read_by_handle(mnt.mnt, h) == errno.ESTALE


@pytest.mark.nofuse
def test_export__export_remember_is_checked(tmp_path):
    import subprocess
    from conftest import BIN
    if not os.access(BIN, os.X_OK):
        pytest.skip("treelockfs is not built")
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    res = subprocess.run([BIN, str(tmp_path / "b"), str(tmp_path / "m"), "-f", "-o",
                          "export_support,export_remember=many"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert res.returncode == 1
    assert b"invalid export_remember 'many'" in res.stderr


def test_export__handles_hold_while_files_move_and_the_kernel_forgets(emnt):
    """Files renamed between directories through the mount while the kernel
    keeps forgetting: every handle keeps opening its own file."""
    import random
    import threading
    import time
    dirs = ["d%d" % i for i in range(4)]
    for d in dirs:
        os.mkdir(emnt.path(d))
    where = {}
    for i in range(40):
        name = "f%02d" % i
        where[name] = dirs[i % 4]
        with open(emnt.path(where[name], name), "w") as f:
            f.write(name)
    handles = {n: handle_of(emnt.path(d, n)) for n, d in where.items()}
    stop = time.monotonic() + 2.0
    errors = []

    def mover():
        rnd = random.Random(7)
        last_drop = 0
        while time.monotonic() < stop:
            n = rnd.choice(sorted(where))
            to = rnd.choice(dirs)
            try:
                os.rename(emnt.path(where[n], n), emnt.path(to, n))
                where[n] = to
            except OSError as e:
                errors.append(("rename", n, e.errno))
            if time.monotonic() - last_drop > 0.2:
                forget_inodes()
                last_drop = time.monotonic()

    t = threading.Thread(target=mover)
    t.start()
    rounds = 0
    while time.monotonic() < stop:
        for n, h in handles.items():
            got = read_by_handle(emnt.mnt, h)
            if got != n.encode():
                errors.append(("open", n, got))
        rounds += 1
    t.join(30)
    assert not t.is_alive()
    assert errors == []
    assert rounds >= 1
    assert sorted(os.listdir(emnt.path("d0")) + os.listdir(emnt.path("d1")) +
                  os.listdir(emnt.path("d2")) + os.listdir(emnt.path("d3"))) == sorted(where)


def nodeid_of(path):
    """The nodeid a FUSE file handle of PATH carries (its first two words)."""
    h = handle_of(path)
    hi, lo = struct.unpack_from("II", h, 8)
    return hi << 32 | lo


def mapped_ranges(pid):
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            lo, hi = line.split()[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


def test_export__nodeids_are_not_addresses(mnt):
    """File handles need no privilege and show the nodeid: a nodeid that is
    the daemon's address of the inode (or of a static control entry) would
    tell anyone where its heap and its program lie. None of them falls in
    a mapping of the daemon."""
    os.makedirs(mnt.path("d/e"))
    paths = [mnt.path("d"), mnt.path("d/e")]
    for i in range(50):
        p = mnt.path("d/e/f%d" % i)
        open(p, "w").close()
        paths.append(p)
    paths += [mnt.path(".treelockfs"), mnt.path(".treelockfs/stats")]
    ids = [nodeid_of(p) for p in paths]
    assert len(set(ids)) == len(ids), ids
    maps = mapped_ranges(mnt.proc.pid)
    inside = [hex(i) for i in ids if any(lo <= i < hi for lo, hi in maps)]
    assert inside == [], inside
