"""FUSE passthrough (passthrough=auto|on|off): open files whose reads,
writes and mmap the kernel does on the backing file.

Every test here mounts with passthrough=on unless it names another value,
and is skipped (with the reason printed) where this build's libfuse or the
kernel has no passthrough. The multi-user and root-reserve cases of
test_multiuser.py and test_hardening_fs.py run here once more, with
passthrough on: nothing a user writes through the mount may gain what the
user lacks.
"""
import errno
import mmap
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from conftest import BIN, run_as
import test_hardening_fs
import test_multiuser
from test_hardening_fs import small_ext4  # noqa: F401 - a fixture of the cases below

USER, GROUP = test_multiuser.USER, test_multiuser.GROUP

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (users, mounts)")


def _probe(tmp_path_factory):
    """None when a passthrough=on mount works here, else why not."""
    d = tmp_path_factory.mktemp("probe")
    (d / "b").mkdir()
    (d / "m").mkdir()
    p = subprocess.Popen([BIN, str(d / "b"), str(d / "m"), "-f", "-o", "passthrough=on"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    from conftest import is_mounted, FUSERMOUNT
    while time.monotonic() < deadline and p.poll() is None and not is_mounted(str(d / "m")):
        time.sleep(0.02)
    if p.poll() is None and is_mounted(str(d / "m")):
        try:
            with open(d / "m" / ".treelockfs" / "stats") as f:
                f.read()
        finally:
            subprocess.run([FUSERMOUNT, "-u", str(d / "m")], check=False)
    try:
        out = p.communicate(timeout=15)[0].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        p.kill()
        return "the probe mount did not end"
    if p.returncode == 0:
        return None
    m = re.search(r"(has no passthrough[^\n]*|does not offer FUSE passthrough[^\n]*)", out)
    if not m:
        pytest.fail("passthrough=on failed for no reason it names: " + out.strip()[-600:])
    return m.group(1)


@pytest.fixture(scope="module")
def passthrough_works(tmp_path_factory):
    why = _probe(tmp_path_factory)
    if why:
        pytest.skip("no FUSE passthrough here: " + why)


@pytest.fixture
def mount_factory(mount_factory, passthrough_works):
    """The conftest factory, with passthrough=on unless a test names it."""
    def make(opts=(), **kw):
        opts = list(opts)
        if not any(o.startswith("passthrough=") for o in opts):
            opts.append("passthrough=on")
        return mount_factory(opts=opts, **kw)
    return make


# ---- the multi-user and root-reserve cases, with passthrough on ----------------

test_backing__multiuser_user_actions_match_native = \
    test_multiuser.test_multiuser__user_actions_match_native
test_backing__multiuser_two_users_and_root_interleaved = \
    test_multiuser.test_multiuser__two_users_and_root_interleaved
test_backing__multiuser_root_write_keeps_setuid_bits = \
    test_multiuser.test_multiuser__root_write_keeps_setuid_bits_after_users
test_backing__multiuser_posix_locks_between_users = \
    test_multiuser.test_multiuser__posix_locks_between_users
test_backing__user_cannot_use_root_reserve = \
    test_hardening_fs.test_hardening__user_cannot_use_root_reserve


def test_backing__user_writes_pass_through_and_stop_at_root_reserve(tmp_path, small_ext4,  # noqa: F811
                                                                    mount_factory):
    """A user's plain writes do go through the kernel (counted) and still
    stop where ext4 stops the user natively, outside root's reserve."""
    want, m = test_hardening_fs.native_then_mount(tmp_path, small_ext4, mount_factory,
                                                  test_hardening_fs.fill)
    before = m.stats()
    got = run_as(USER, GROUP, lambda: test_hardening_fs.fill(m.path("pub", "big")))
    after = m.stats()
    assert after["passthrough_opens"] > before["passthrough_opens"]
    assert got <= want + (1 << 20), "native stops the user at %d bytes, the mount at %d" % (
        want, got)


@pytest.fixture
def resuid_ext4(tmp_path):
    """test_hardening_fs.loop_ext4(): its reserved half is USER's."""
    yield from test_hardening_fs.loop_ext4(tmp_path, resuid=USER)


def test_backing__later_writer_gets_nothing_of_first_opener(tmp_path, resuid_ext4,
                                                           mount_factory):
    """The kernel writes through one registration per file, made at its
    first open: the user who may use the reserved blocks (ext4's resuid)
    holds the file open, and another user's writes to it must
    still stop where that other user stops natively."""
    other = test_multiuser.OTHER_USER
    test_hardening_fs.open_tree(tmp_path)
    native = os.path.join(resuid_ext4, "native")
    os.mkdir(native)
    os.chmod(native, 0o777)
    want = run_as(other, other, lambda: test_hardening_fs.fill(os.path.join(native, "big")))
    os.unlink(os.path.join(native, "big"))
    os.sync()
    backing = os.path.join(resuid_ext4, "backing")
    os.mkdir(backing)
    os.chmod(backing, 0o755)
    m = mount_factory(opts=["allow_other"], backing=backing)
    os.chmod(m.mnt, 0o755)
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o777)
    big = m.path("pub", "big")
    test_multiuser.write_file(big, b"")
    os.chmod(big, 0o666)
    r, w = os.pipe()
    r2, w2 = os.pipe()
    test_hardening_fs.open_tree(tmp_path)
    pid = os.fork()
    if pid == 0:  # the first opener, the reserve's user
        try:
            os.close(r)
            os.close(w2)
            os.setgroups([])
            os.setgid(GROUP)
            os.setuid(USER)
            fd = os.open(big, os.O_WRONLY)
            os.write(w, b"1")
            os.read(r2, 1)
            os.close(fd)
        except OSError as e:
            os.write(w, str(e).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.close(r2)
    try:
        said = os.read(r, 200)
        assert said == b"1", said
        test_hardening_fs.open_tree(tmp_path)
        got = run_as(other, other, lambda: test_hardening_fs.fill(big))
    finally:
        os.write(w2, b"1")
        os.waitpid(pid, 0)
    assert m.stats()["passthrough_opens"] >= 2
    assert want > 0
    assert got <= want + (1 << 20), "natively the user stops at %d bytes, the mount at %d" % (
        want, got)


def test_backing__user_write_clears_setuid_bits(shared_mount):  # noqa: F811
    """A file that gets its set-user-ID bit while a user has it open through
    the kernel loses the bit at the user's next write, as natively."""
    m, native = shared_mount
    for root in (native, m.mnt):
        os.mkdir(os.path.join(root, "pub"))
        os.chmod(os.path.join(root, "pub"), 0o777)
    results = []
    for root in (native, m.mnt):
        p = os.path.join(root, "pub", "f")
        test_multiuser.write_file(p, b"x")
        os.chmod(p, 0o666)
        r, w = os.pipe()
        r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(GROUP)
                os.setuid(USER)
                fd = os.open(p, os.O_WRONLY)
                os.write(w, b"1")
                os.read(r2, 1)
                os.write(fd, b"user")
                os.close(fd)
            finally:
                os._exit(0)
        assert os.read(r, 1) == b"1"
        os.chmod(p, 0o6777)
        os.write(w2, b"1")
        os.waitpid(pid, 0)
        results.append(oct(os.stat(p).st_mode & 0o7777))
    assert results[1] == results[0], "native %s, mount %s" % tuple(results)
    assert m.stats()["passthrough_opens"] > 0


# ---- data ------------------------------------------------------------------------

def test_backing__reads_and_writes_pass_through(mount_factory):
    m = mount_factory()
    data = os.urandom(3 << 20)
    with open(m.path("f"), "wb") as f:
        f.write(data)
    with open(m.path("f"), "rb") as f:
        assert f.read() == data
    with open(m.bpath("f"), "rb") as f:
        assert f.read() == data
    s = m.stats()
    assert s["passthrough"] == "in_use"
    assert s["passthrough_opens"] >= 2
    assert s["passthrough_fallbacks"] == 0
    assert s["passthrough_backing_ids"] == 0


@pytest.mark.skipif(not shutil.which("fio"), reason="needs fio (Debian package fio)")
def test_backing__fio_jobs_verify(mount_factory):
    """fio's own crc32c verification over sequential 1 MiB, random 4 KiB
    and mmap writes, each read back through the same open; then every
    file read again by a fio of its own (verify_only: a fresh open), as
    the read rows of bench/run read: sequential 1 MiB, random 4 KiB and
    through mmap."""
    m = mount_factory()
    jobs = [
        ("seq", ["--rw=write", "--bs=1M", "--size=32M"]),
        ("seq", ["--rw=write", "--bs=1M", "--size=32M", "--verify_only"]),
        ("rand", ["--rw=randwrite", "--bs=4k", "--size=8M"]),
        ("rand", ["--rw=randwrite", "--bs=4k", "--size=8M", "--verify_only"]),
        ("rand", ["--rw=randwrite", "--bs=4k", "--size=8M", "--verify_only",
                  "--ioengine=mmap"]),
        ("mmap", ["--rw=randrw", "--bs=4k", "--size=8M", "--ioengine=mmap"]),
        ("two", ["--rw=write", "--bs=1M", "--size=16M", "--numjobs=2"]),
        ("two", ["--rw=write", "--bs=1M", "--size=16M", "--numjobs=2", "--verify_only"]),
    ]
    for name, job in jobs:
        r = subprocess.run(["fio", "--name=" + name, "--directory=" + m.mnt, "--verify=crc32c",
                            "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0",
                            "--direct=0", "--group_reporting"] + job,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, "fio %s: %s\n%s" % (job, r.stdout[-2000:], r.stderr[-2000:])
        assert "verify: bad" not in r.stdout + r.stderr
        if "--verify_only" in job:
            assert re.search(r"read: IOPS=", r.stdout), r.stdout[-2000:]
    s = m.stats()
    assert s["passthrough_opens"] > 0 and s["passthrough_fallbacks"] == 0


def test_backing__mmap_write_seen_by_another_open(mount_factory):
    m = mount_factory()
    with open(m.path("f"), "wb") as f:
        f.write(b"\0" * 65536)
    fd = os.open(m.path("f"), os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 65536, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        mm[4096:4096 + 11] = b"mmap wrote!"
        with open(m.path("f"), "rb") as g:
            g.seek(4096)
            assert g.read(11) == b"mmap wrote!"
        with open(m.bpath("f"), "rb") as g:
            g.seek(4096)
            assert g.read(11) == b"mmap wrote!"
        mm.close()
    finally:
        os.close(fd)


def test_backing__concurrent_writers_mount_and_backing(mount_factory):
    """Writers through the mount and directly in BACKING on the same file,
    disjoint blocks: both views end up with every block."""
    m = mount_factory()
    bs, n = 4096, 512
    with open(m.path("f"), "wb") as f:
        f.truncate(bs * n)
    errors = []

    def writer(path, parity):
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                for i in range(parity, n, 2):
                    os.pwrite(fd, bytes([i % 251]) * bs, i * bs)
            finally:
                os.close(fd)
        except OSError as e:
            errors.append(e)
    ts = [threading.Thread(target=writer, args=(m.path("f"), 0)),
          threading.Thread(target=writer, args=(m.bpath("f"), 1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    want = b"".join(bytes([i % 251]) * bs for i in range(n))
    for p in (m.path("f"), m.bpath("f")):
        with open(p, "rb") as f:
            assert f.read() == want, p


def coherency_window(m, limit=5.0):
    """After a write in BACKING, reads the file through an open of the
    mount (its pages cached by a first read) until it shows the write.
    Returns (seconds, reads it took); seconds is LIMIT when never."""
    with open(m.bpath("c"), "wb") as f:
        f.write(b"old!" * 1024)
    fd = os.open(m.path("c"), os.O_RDONLY)
    try:
        assert os.pread(fd, 4, 0) == b"old!"
        with open(m.bpath("c"), "r+b") as f:
            f.write(b"new!")
        t0 = time.monotonic()
        reads = 1
        while os.pread(fd, 4, 0) != b"new!":
            if time.monotonic() - t0 > limit:
                return limit, reads
            reads += 1
            time.sleep(0.001)
        return time.monotonic() - t0, reads
    finally:
        os.close(fd)


def test_backing__backing_write_seen_at_once(mount_factory):
    """The mount reads the backing file's own page cache: a write made in
    BACKING is seen by the very next read through an open file (through
    the daemon, the mount's page cache keeps the old data until the
    attributes time out)."""
    m = mount_factory(opts=["attr_timeout=30"])
    assert coherency_window(m)[1] == 1


# ---- fallbacks --------------------------------------------------------------------

def test_backing__stacked_backing_falls_back_logged_once(tmp_path, mount_factory):
    """A mount whose backing is another passthrough mount (the kernel's
    stacking depth) works through the daemon; the reason is logged once."""
    lower = mount_factory(name="lower")
    upper = mount_factory(opts=["passthrough=auto"], backing=lower.mnt, name="upper")
    for i in range(3):
        with open(upper.path("f%d" % i), "wb") as f:
            f.write(b"x" * 100000)
        with open(upper.path("f%d" % i), "rb") as f:
            assert f.read() == b"x" * 100000
    s = upper.stats()
    assert s["passthrough_opens"] == 0
    assert s["passthrough_fallbacks"] >= 6
    assert upper.log().count("stacking depth") == 1, upper.log()


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_backing__without_cap_sys_admin(tmp_path, passthrough_works):
    """A daemon without CAP_SYS_ADMIN: passthrough=on refuses to mount
    (exit 1, the reason said); auto serves every file through the daemon,
    counted, the reason logged once. The mount itself is made here and
    handed over as /dev/fd/N, since mounting needs the capability too."""
    import ctypes
    from conftest import Mount, is_mounted
    (tmp_path / "backing").mkdir()
    (tmp_path / "mnt").mkdir()
    drop = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--"]
    r = subprocess.run(drop + [BIN, str(tmp_path / "backing"), str(tmp_path / "mnt"), "-f",
                               "-o", "passthrough=on"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert "CAP_SYS_ADMIN" in r.stderr
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    opts = "fd=%d,rootmode=40000,user_id=0,group_id=0" % fd
    if libc.mount(b"treelockfs", str(tmp_path / "mnt").encode(), b"fuse.treelockfs", 0,
                  opts.encode()) != 0:
        os.close(fd)
        pytest.skip("cannot mount FUSE by hand: %s" % os.strerror(ctypes.get_errno()))
    m = Mount(tmp_path / "backing", "/dev/fd/%d" % fd, opts=["passthrough=auto"])
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen(drop + m.cmd(), stdout=log, stderr=subprocess.STDOUT, pass_fds=[fd])
    os.close(fd)
    m.mnt = str(tmp_path / "mnt")
    try:
        with open(m.path("f"), "wb") as f:
            f.write(b"data")
        for _ in range(2):
            with open(m.path("f"), "rb") as f:
                assert f.read() == b"data"
        s = m.stats()
        text = (tmp_path / "daemon.log").read_text()
        assert s["passthrough"] == "in_use"
        assert s["passthrough_opens"] == 0 and s["passthrough_fallbacks"] == 3
        assert text.count("lacks CAP_SYS_ADMIN") == 1, text
    finally:
        if is_mounted(str(tmp_path / "mnt")):
            subprocess.run(["umount", str(tmp_path / "mnt")], check=False)
        assert proc.wait(timeout=15) == 0
        log.close()


def test_backing__off_never_asks(mount_factory):
    m = mount_factory(opts=["passthrough=off"])
    with open(m.path("f"), "wb") as f:
        f.write(b"x")
    s = m.stats()
    assert s["passthrough"] == "off"
    assert s["passthrough_opens"] == 0 and s["passthrough_fallbacks"] == 0


def test_backing__root_and_setid_files_stay_on_daemon_path(shared_mount):  # noqa: F811
    """On a mount serving several users, root's opens for writing and
    set-ID files keep the daemon path (root's privileges on its writes stay
    root's only); root's reads pass through."""
    m, _ = shared_mount
    test_multiuser.write_file(m.path("r"), b"root")
    assert m.stats()["passthrough_opens"] == 0
    with open(m.path("r"), "rb") as f:
        assert f.read() == b"root"
    assert m.stats()["passthrough_opens"] == 1
    fallbacks = m.stats()["passthrough_fallbacks"]
    with open(m.path("r"), "rb+") as f:
        f.write(b"R")
    assert m.stats()["passthrough_opens"] == 1
    assert m.stats()["passthrough_fallbacks"] == fallbacks + 1
    test_multiuser.write_file(m.path("s"), b"x")
    os.chmod(m.path("s"), 0o4777)
    run_as(USER, GROUP, lambda: test_multiuser.write_file(m.path("s"), b"y", os.O_WRONLY))
    assert m.stats()["passthrough_opens"] == 1
    assert os.stat(m.path("s")).st_mode & 0o7777 == 0o777
    assert "set-user-ID or set-group-ID" in m.log() and "opened for writing by root" in m.log()


def test_backing__invalid_value_is_refused(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    r = subprocess.run([BIN, str(tmp_path / "b"), str(tmp_path / "m"), "-f",
                        "-o", "passthrough=maybe"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "invalid passthrough 'maybe': expected auto, on or off" in r.stderr


@pytest.fixture
def overlay_backing(tmp_path):
    """An overlayfs mounted at tmp_path/ovl (a stacked filesystem)."""
    for d in ("lower", "upper", "work", "ovl"):
        (tmp_path / d).mkdir()
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        "lowerdir=%s,upperdir=%s,workdir=%s" % (
                            tmp_path / "lower", tmp_path / "upper", tmp_path / "work"),
                        str(tmp_path / "ovl")], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount an overlayfs: " + r.stderr.strip())
    try:
        yield tmp_path / "ovl"
    finally:
        subprocess.run(["umount", str(tmp_path / "ovl")], check=False)


@pytest.mark.parametrize("case", ["noatime", "overlayfs"])
def test_backing__on_refuses_where_it_cannot_work(tmp_path, case, request):
    """passthrough=on does not start where passthrough cannot work: exit 1,
    the reason said, nothing mounted. (A build without passthrough says
    that first.)"""
    from conftest import is_mounted
    backing = tmp_path / "b"
    backing.mkdir()
    opts = "passthrough=on"
    if case == "noatime":
        opts += ",noatime"
        want = "passthrough=on cannot keep noatime"
    else:
        backing = request.getfixturevalue("overlay_backing")
        want = "not a stacked one (overlayfs"
    (tmp_path / "m").mkdir()
    try:
        r = subprocess.run([BIN, str(backing), str(tmp_path / "m"), "-f", "-o", opts],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        from conftest import FUSERMOUNT
        subprocess.run([FUSERMOUNT, "-u", "-z", str(tmp_path / "m")], check=False)
        pytest.fail("passthrough=on started (%s)" % case)
    assert r.returncode == 1, r.stderr
    assert not is_mounted(str(tmp_path / "m"))
    assert want in r.stderr or "has no passthrough" in r.stderr, r.stderr


# ---- no leaks -------------------------------------------------------------------------

def _daemon_fds(pid):
    """The daemon's descriptors but libfuse's splice pipes (one pair per
    worker thread, and the workers come and go with the load)."""
    n = 0
    for f in os.listdir("/proc/%d/fd" % pid):
        try:
            n += not os.readlink("/proc/%d/fd/%s" % (pid, f)).startswith("pipe:")
        except OSError:
            pass
    return n


def _settled(fn, want, timeout=30):
    """FN() once it is <= WANT (releases are answered after close()
    returns), or its last value after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v <= want or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def _daemon_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.fixture
def private_tmpfs(tmp_path):
    d = tmp_path / "backing"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs: " + r.stderr.strip())
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_backing__100000_opens_leak_nothing(private_tmpfs, mount_factory):
    """100,000 opens and closes (one file from 4 threads at once, so first
    opens race): the daemon's descriptors and memory return to where they
    were, no backing id stays registered, and once the file is removed its
    blocks come back (a backing id the kernel still held would pin them)."""
    m = mount_factory(backing=private_tmpfs)
    with open(m.path("f"), "wb") as f:
        f.write(os.urandom(16 << 20))
    pid = m.proc.pid

    def loop(n, path):
        for _ in range(n):
            fd = os.open(path, os.O_RDONLY)
            os.close(fd)
    def run(n):
        ts = [threading.Thread(target=loop, args=(n, m.path("f"))) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    run(500)  # warm: worker threads (each with its splice pipe), buffers
    fds0 = _settled(lambda: _daemon_fds(pid), 0, timeout=2)
    rss0 = _daemon_rss_kib(pid)
    run(25000)
    assert _settled(lambda: _daemon_fds(pid), fds0) <= fds0
    assert _settled(lambda: m.stats()["passthrough_backing_ids"], 0) == 0
    assert m.stats()["passthrough_opens"] >= 102000
    assert _daemon_rss_kib(pid) - rss0 < 4096, "RSS %d KiB -> %d KiB" % (
        rss0, _daemon_rss_kib(pid))
    st = os.statvfs(str(private_tmpfs))
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    assert used >= 16 << 20
    os.unlink(m.path("f"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = os.statvfs(str(private_tmpfs))
        if (st.f_blocks - st.f_bfree) * st.f_frsize < 1 << 20:
            break
        time.sleep(0.05)
    assert (st.f_blocks - st.f_bfree) * st.f_frsize < 1 << 20, "the removed file's blocks stay"


# ---- what still goes through the daemon ------------------------------------------------

def test_backing__flush_still_reaches_the_daemon(mount_factory):
    """Each close() of a passthrough file still sends FLUSH to the daemon
    (close-time semantics of the backing, POSIX lock owners), and reads and
    writes do not."""
    m = mount_factory(args=["-d"])
    with open(m.path("f"), "wb") as f:
        f.write(b"x" * 65536)
    with open(m.path("f"), "rb") as f:
        assert f.read() == b"x" * 65536
    log = m.log()
    assert m.stats()["passthrough_opens"] == 2
    assert len(re.findall(r"opcode: FLUSH", log)) >= 2, log[-3000:]
    assert not re.search(r"opcode: (READ|WRITE)\b", log), log[-3000:]


def test_backing__closing_another_fd_drops_posix_locks(mount_factory):
    """POSIX semantics through the daemon as before: a process's lock goes
    when it closes any descriptor of the file."""
    import fcntl
    m = mount_factory()
    with open(m.path("f"), "wb") as f:
        f.write(b"0123456789")

    def other_can_lock():
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(m.path("f"), os.O_RDWR)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 4, 0)
                code = 0
            except OSError:
                code = 1
            finally:
                os._exit(code)
        return os.waitpid(pid, 0)[1] == 0
    fd1 = os.open(m.path("f"), os.O_RDWR)
    try:
        fcntl.lockf(fd1, fcntl.LOCK_EX | fcntl.LOCK_NB, 4, 0)
        assert not other_can_lock()
        os.close(os.open(m.path("f"), os.O_RDONLY))
        assert other_can_lock()
    finally:
        os.close(fd1)
    assert m.stats()["passthrough_opens"] >= 3
