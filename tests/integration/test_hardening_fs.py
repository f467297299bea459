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

from conftest import errno_of, open_tree, write_file

# depends on the libfuse (run again on the system's by run-tests.sh):
# descriptors and disk space on the data path, which FUSE passthrough moves
# into the kernel
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]


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
    assert sorted(os.listdir(ctl)) == ["backing", "locks", "metrics", "options", "stats"]


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


# ---- the blocks ext4 reserves for root ------------------------------------------------

USER, GROUP = 4242, 4242


def loop_ext4(tmp_path, resuid=None):
    """For a fixture: yields a 32 MiB ext4 with half its blocks reserved
    (-m 50) for root, or for user RESUID (tune2fs -u), loop-mounted at
    tmp_path/disk; unmounted after the test (after the treelockfs mounts on
    it, which are set up later)."""
    import shutil
    import subprocess
    tools = ["mkfs.ext4"] + (["tune2fs"] if resuid is not None else [])
    if any(shutil.which(t) is None for t in tools) or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs %s and loop devices" % " and ".join(tools))
    img = tmp_path / "ext4.img"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "50", str(img)], check=True)
    if resuid is not None:
        subprocess.run(["tune2fs", "-u", str(resuid), str(img)], check=True,
                       stdout=subprocess.DEVNULL)
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-o", "loop", str(img), str(disk)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot loop-mount an ext4 image: %s" % r.stderr.decode().strip())
    try:
        yield str(disk)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.fixture
def small_ext4(tmp_path):
    """loop_ext4(): half its blocks reserved for root."""
    yield from loop_ext4(tmp_path)


def fill(path):
    """Child body: writes 64 KiB blocks to PATH until ENOSPC; returns bytes
    written, fsync included."""
    block = b"\xa5" * 65536
    total = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                total += os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    finally:
        os.close(fd)
    return total


def fallocate_until_full(path):
    """Child body: posix_fallocate()s 1 MiB more until ENOSPC; returns the
    bytes reserved."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        while True:
            try:
                os.posix_fallocate(fd, total, 1 << 20)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            total += 1 << 20
    finally:
        os.close(fd)
    return total


def copy_until_full(path):
    """Child body: copy_file_range()s a 1 MiB file onto the end of PATH
    until ENOSPC; returns the bytes copied."""
    src = os.open(path + ".src", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    dst = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        os.write(src, b"\x5a" * (1 << 20))
        os.fsync(src)
        while True:
            try:
                n = os.copy_file_range(src, dst, 1 << 20, 0, total)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            if n == 0:
                break
            total += n
        try:
            os.fsync(dst)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    finally:
        os.close(src)
        os.close(dst)
    return total


def native_then_mount(tmp_path, disk, mount_factory, how):
    """How many bytes USER gets onto DISK natively with HOW (the file then
    removed), and an allow_other mount of DISK/backing with a directory
    "pub" of USER's."""
    from conftest import run_as
    open_tree(tmp_path)
    native = os.path.join(disk, "native")
    os.mkdir(native)
    os.chown(native, USER, GROUP)
    open_tree(tmp_path)
    want = run_as(USER, GROUP, lambda: how(os.path.join(native, "big")))
    os.unlink(os.path.join(native, "big"))
    os.sync()
    backing = os.path.join(disk, "backing")
    os.mkdir(backing)
    os.chmod(backing, 0o755)
    m = mount_factory(opts=["allow_other"], backing=backing)
    os.chmod(m.mnt, 0o755)
    os.mkdir(m.path("pub"))
    os.chown(m.path("pub"), USER, GROUP)
    open_tree(tmp_path)
    return want, m


@pytest.mark.parametrize("how", [fill, fallocate_until_full, copy_until_full],
                         ids=["write", "fallocate", "copy_file_range"])
def test_hardening__user_cannot_use_root_reserve(tmp_path, small_ext4, mount_factory, how):
    """A user stops where ext4 stops it natively (the -m reserve is root's);
    through an allow_other mount it must not get further."""
    from conftest import run_as
    want, m = native_then_mount(tmp_path, small_ext4, mount_factory, how)
    got = run_as(USER, GROUP, lambda: how(m.path("pub", "big")))
    assert want > 0
    slack = 1 << 20
    assert got <= want + slack, "native stops the user at %d bytes, the mount at %d" % (
        want, got)
    # root still has its reserve through the mount
    os.unlink(m.path("pub", "big"))
    os.sync()
    assert how(m.path("root_big")) > want + slack


# ---- .treelockfs/locks shows a user only what the user may look up -----------------------

OTHER_USER = 4243


def test_hardening__locks_file_hides_keys_in_private_dirs(tmp_path, mount_factory):
    """A rename inside a 0700 directory holds locks whose keys name its
    entries; another user reading .treelockfs/locks must not learn them,
    while the owner and root do."""
    import threading
    import time
    from conftest import run_as
    open_tree(tmp_path)
    m = mount_factory(opts=["allow_other", "rename_delay_ms=1500"])
    os.chmod(m.mnt, 0o755)
    os.mkdir(m.path("priv"))
    os.chmod(m.path("priv"), 0o700)
    os.mkdir(m.path("priv", "inner"))
    write_file(m.path("priv", "inner", "secret-name"), b"x")
    os.chown(m.path("priv"), USER, GROUP)
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o755)
    write_file(m.path("pub", "open-name"), b"x")

    def rename(a, b):
        os.rename(m.path(*a), m.path(*b))

    ts = [threading.Thread(target=rename, args=(("priv", "inner", "secret-name"),
                                                ("priv", "inner", "secret-new"))),
          threading.Thread(target=rename, args=(("pub", "open-name"), ("pub", "open-new")))]
    for t in ts:
        t.start()
    try:
        # both renames hold their locks (one rename alone holds 4 or more
        # keys, so a count cannot tell)
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            held = m.ctl("locks")
            if "/priv/inner/secret-name" in held and "/pub/open-name" in held:
                break
            time.sleep(0.02)
        as_root = m.ctl("locks")
        open_tree(tmp_path)
        as_owner = run_as(USER, GROUP, lambda: m.ctl("locks"))
        as_other = run_as(OTHER_USER, OTHER_USER, lambda: m.ctl("locks"))
    finally:
        for t in ts:
            t.join()
    assert "/priv/inner/secret-name" in as_root and "/pub/open-name" in as_root
    assert "/priv/inner/secret-name" in as_owner and "/priv/inner/secret-new" in as_owner
    assert "secret" not in as_other and "/priv/inner" not in as_other, as_other
    # keys the other user may look up stay visible to it
    assert "/pub/open-name" in as_other and "/pub/open-new" in as_other, as_other
    assert as_other.startswith("# mode")


# ---- file descriptors: forgotten inodes give theirs back; running out is an error ------


def daemon_fds(m):
    """The daemon's descriptors on files below BACKING (its inodes and open
    files; not libfuse's splice pipes, one pair per worker thread)."""
    n = 0
    for f in os.listdir("/proc/%d/fd" % m.proc.pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (m.proc.pid, f))
        except OSError:
            continue
        n += target.startswith(m.backing + "/")
    return n


def forget_all():
    """Makes the kernel forget the inodes it holds unused (FORGET requests)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def test_hardening__forgotten_inodes_close_their_fds(mnt):
    os.mkdir(mnt.bpath("many"))
    for i in range(300):
        write_file(mnt.bpath("many", "f%d" % i))
    forget_all()
    before = daemon_fds(mnt)
    for i in range(300):
        os.stat(mnt.path("many", "f%d" % i))
    assert daemon_fds(mnt) >= before + 300
    import time
    deadline = time.monotonic() + 10
    while True:
        forget_all()  # FORGETs are queued: they reach the daemon later
        now = daemon_fds(mnt)
        if now <= before + 5 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert now <= before + 5, "%d fds before the lookups, %d after the forgets" % (before, now)


def test_hardening__out_of_fds_is_an_orderly_error(mnt):
    """With its descriptor limit reached the daemon fails what needs a new
    descriptor with ENFILE (the system's table, as far as the caller can
    tell; EMFILE would blame the caller's own table), keeps serving what
    does not, and recovers once the kernel forgets inodes."""
    import subprocess
    os.mkdir(mnt.bpath("many"))
    for i in range(200):
        write_file(mnt.bpath("many", "f%d" % i), b"data")
    write_file(mnt.path("held"), b"held")
    forget_all()
    held = os.open(mnt.path("held"), os.O_RDONLY)
    limit = len(os.listdir("/proc/%d/fd" % mnt.proc.pid)) + 40
    subprocess.run(["prlimit", "--pid", str(mnt.proc.pid), "--nofile=%d:%d" % (limit, limit)],
                   check=True)
    errs = {}
    ok = 0
    try:
        for i in range(200):
            p = mnt.path("many", "f%d" % i)
            for fn in (os.stat, lambda p: open(p, "rb").close()):
                try:
                    fn(p)
                    ok += 1
                except OSError as e:
                    errs[e.errno] = errs.get(e.errno, 0) + 1
        assert ok > 0 and errs, "the limit was never reached (%d ok)" % ok
        assert set(errs) == {errno.ENFILE}, {errno.errorcode[k]: v for k, v in errs.items()}
        # what needs no new descriptor still works, close included
        assert os.read(held, 10) == b"held"
        os.close(held)
        held = -1
        assert sorted(os.listdir(mnt.path(".treelockfs"))) == ["backing", "locks", "metrics", "options", "stats"]
        forget_all()
        with open(mnt.path("many", "f199"), "rb") as f:
            assert f.read() == b"data"
        assert mnt.proc.poll() is None
    finally:
        if held >= 0:
            os.close(held)
        subprocess.run(["prlimit", "--pid", str(mnt.proc.pid), "--nofile=4096:4096"],
                       check=False)
