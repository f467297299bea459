"""File locks through the mount: flock(), POSIX record locks and open file
description locks.

A lock that has to wait must not take a thread that serves the mount: a
user with many waiters must not stop anyone else, a signal ends a wait at
once and the waiter holds nothing afterwards, and a lock ends as on the
disk under the mount. Where the disk has an answer, the same steps run on
the backing directory and on the mount and must agree.
"""
import errno
import fcntl
import os
import signal
import struct
import threading
import time

import pytest

from conftest import run_as

# depends on the libfuse (run again on the system's by run-tests.sh): POSIX
# and flock locks, which libfuse hands to the daemon
pytestmark = pytest.mark.libfuse

NOBODY = 65534
OTHER = 4242

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")


# ---- helpers ----------------------------------------------------------------------------------

def ofd(fd, cmd, ltype, start=0, length=0):
    """fcntl() with an open file description lock request."""
    fcntl.fcntl(fd, cmd, struct.pack("hhqqi", ltype, os.SEEK_SET, start, length, 0))


def take(kind, fd, blocking=True):
    """Takes an exclusive lock of KIND ("flock", "posix", "ofd") on FD."""
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    elif kind == "posix":
        fcntl.lockf(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    else:
        ofd(fd, fcntl.F_OFD_SETLKW if blocking else fcntl.F_OFD_SETLK, fcntl.F_WRLCK)


def try_take(kind, path):
    """In a new process (another lock owner): takes KIND on PATH without
    waiting. Returns "locked" or the errno's name."""
    def attempt():
        fd = os.open(path, os.O_RDWR)
        try:
            take(kind, fd, blocking=False)
            return "locked"
        except OSError as e:
            return errno.errorcode[e.errno]
        finally:
            os.close(fd)
    return in_child(attempt)


def in_child(func):
    """Runs FUNC() in a forked child; returns what it returns (a string)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, func().encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def spawn(func, uid=None, gid=None):
    """Runs FUNC() in a child process (as UID/GID when given); returns its
    pid. The child exits 0 when FUNC returns, 1 when it raises."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            func()
            code = 0
        except BaseException:  # noqa: B902 - shown in the test's captured stderr
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def proc_state(pid):
    """PID's state and wait channel, for messages."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/wchan" % pid) as f:
            return "%d:%s:%s" % (pid, state, f.read())
    except OSError as e:
        return "%d:%s" % (pid, e.strerror)


def blocked(pid):
    """Whether PID sleeps in a wait of the kernel (a lock or a FUSE answer)."""
    try:
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read()
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state in ("S", "D") and any(w in wchan for w in ("wait", "lock", "setlk"))


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    pytest.fail("timed out after %ss waiting for %s" % (timeout, what))


def reaped(pid, timeout):
    """Waits up to TIMEOUT for child PID to end; returns its status or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    return None


def timed(func, timeout):
    """Runs FUNC on a thread; returns (seconds, result) or (None, None) when
    it did not end within TIMEOUT (the thread is left to end when it can)."""
    out = {}

    def run():
        t0 = time.monotonic()
        try:
            out["res"] = func()
        except BaseException as e:  # noqa: B902 - reported to the caller
            out["res"] = e
        out["s"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return None, None
    if isinstance(out["res"], BaseException):
        raise out["res"]
    return out["s"], out["res"]


def abort_connection(m):
    """Aborts the FUSE connection of mount M (only ours), so that a test
    that found it hung can end. The device comes from mountinfo: a stat of
    a hung mount would hang too."""
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == m.mnt:
                dev = fields[2]
    if dev is None:
        return
    try:
        with open("/sys/fs/fuse/connections/%s/abort" % dev.split(":")[1], "w") as f:
            f.write("1")
    except OSError:
        pass


@pytest.fixture
def shared(tmp_path, mount_factory):
    """An allow_other mount with a directory everyone may write, and an fd
    on that directory: other users reach their files through it (openat),
    so the modes of the directories above the mount do not matter (another
    pytest run may make its base directory 0700 at any moment)."""
    fds = []

    def make(opts=()):
        m = mount_factory(opts=["allow_other"] + list(opts))
        os.chmod(m.mnt, 0o755)
        os.mkdir(m.path("pub"))
        os.chmod(m.path("pub"), 0o777)
        fds.append(os.open(m.path("pub"), os.O_RDONLY | os.O_DIRECTORY))
        return m, fds[-1]
    yield make
    for fd in fds:
        os.close(fd)


# ---- waits do not take the mount's threads ----------------------------------------------------

@needs_root
def test_plock__200_waiters_of_one_user_leave_the_mount_usable(shared):
    """uid 65534 holds a shared flock and a POSIX read lock on its own file
    and starts 200 blocked waiters (flock -x and F_SETLKW write locks):
    root's ls, a rename and the holder's unlock still answer."""
    m, pub = shared()
    n = 200
    f = m.path("pub", "f")
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()

    def holder():
        os.close(cmd_w)
        fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=pub)
        fcntl.flock(fd, fcntl.LOCK_SH)
        fcntl.lockf(fd, fcntl.LOCK_SH)
        os.write(res_w, b"ready\n")
        os.read(cmd_r, 1)  # "unlock"
        t0 = time.monotonic()
        fcntl.lockf(fd, fcntl.LOCK_UN)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.write(res_w, b"%f\n" % (time.monotonic() - t0))
        os.read(cmd_r, 1)  # "exit"

    def waiter(i):
        def run():
            if i % 2:
                fd = os.open("f", os.O_RDONLY, dir_fd=pub)
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                fd = os.open("f", os.O_RDWR, dir_fd=pub)
                fcntl.lockf(fd, fcntl.LOCK_EX)
        return run

    os.mkdir(m.path("d"))
    with open(m.path("d", "a"), "w") as fh:
        fh.write("a")
    pids = []
    hpid = spawn(holder, NOBODY, NOBODY)
    os.close(cmd_r)
    os.close(res_w)
    results = os.fdopen(res_r)
    hung = True
    try:
        assert results.readline() == "ready\n"
        for i in range(n):
            pids.append(spawn(waiter(i), NOBODY, NOBODY))
        # every waiter sleeps in its lock call; the mount counts them
        deadline = time.monotonic() + 120
        while not all(blocked(p) for p in pids):
            assert time.monotonic() < deadline, "waiters not blocked after 120 s: %s\n%s" % (
                [proc_state(p) for p in pids if not blocked(p)], m.log())
            time.sleep(0.05)

        def waits():
            return m.stats().get("file_lock_waits")
        deadline = time.monotonic() + 120
        while True:
            secs, count = timed(waits, 30)
            assert secs is not None, "the mount stopped answering: reading its stats " \
                "took more than 30 s with %d waiters" % n
            if count == n or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert count == n, "file_lock_waits %s, not %d; %s\n%s" % (
            count, n, [proc_state(p) for p in pids if not blocked(p)], m.log())

        # root, meanwhile
        ls_s, names = timed(lambda: sorted(os.listdir(m.mnt)), 30)
        assert ls_s is not None, "root's ls did not answer within 30 s"
        assert names == ["d", "pub"]
        mv_s, _ = timed(lambda: os.rename(m.path("d", "a"), m.path("d", "b")), 30)
        assert mv_s is not None, "root's rename did not answer within 30 s"
        assert os.listdir(m.bpath("d")) == ["b"]
        # the holder's unlock, then every waiter gets its turn and ends
        os.write(cmd_w, b"u")
        un_s, line = timed(results.readline, 30)
        assert un_s is not None, "the holder's unlock did not answer within 30 s"
        unlock_s = float(line)
        print("\nwith %d waiters: ls %.4f s, rename %.4f s, unlock %.4f s"
              % (n, ls_s, mv_s, unlock_s))
        for p in pids:
            assert reaped(p, 120) == 0, "waiter %s did not get its lock; %s\n%s" % (
                proc_state(p), m.stats(), m.log())
        pids = []
        hung = False
        # generous: a liveness bound, not a speed target
        assert max(ls_s, mv_s, unlock_s) < 10
    finally:
        if hung:
            abort_connection(m)
        for p in pids + [hpid]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.close(cmd_w)
        results.close()
        for p in pids + [hpid]:
            os.waitpid(p, 0)


@needs_root
def test_plock__waiters_per_user_are_bounded_with_enolck(shared):
    """Past lock_waiters_per_user, a lock call that would wait fails with
    ENOLCK at once; one that need not wait, and another user's, go on."""
    m, pub = shared(["lock_waiters_per_user=3"])
    f = m.path("pub", "f")
    with open(f, "w") as fh:
        fh.write("x")
    os.chmod(f, 0o666)
    holder = os.open(f, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    pids = []
    try:
        def wait_flock():
            fd = os.open("f", os.O_RDWR, dir_fd=pub)
            fcntl.flock(fd, fcntl.LOCK_EX)
        for _ in range(3):
            pids.append(spawn(wait_flock, NOBODY, NOBODY))
        wait_for(lambda: m.stats().get("file_lock_waits") == 3, 60, "3 waits")

        def fourth():
            fd = os.open("f", os.O_RDWR, dir_fd=pub)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                return "locked"
            except OSError as e:
                return errno.errorcode[e.errno]
        assert run_as(NOBODY, NOBODY, fourth) == "ENOLCK"

        def no_wait():
            fd = os.open("g", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=pub)
            fcntl.flock(fd, fcntl.LOCK_EX)
            return "locked"
        assert run_as(NOBODY, NOBODY, no_wait) == "locked"
        pids.append(spawn(wait_flock, OTHER, OTHER))
        wait_for(lambda: m.stats().get("file_lock_waits") == 4, 60, "another user's wait")
        assert "lock_waiters_per_user" in m.log()
        fcntl.flock(holder, fcntl.LOCK_UN)
        for p in pids:
            assert reaped(p, 60) == 0
        pids = []
    finally:
        for p in pids:
            os.kill(p, signal.SIGKILL)
            os.waitpid(p, 0)
        os.close(holder)


# ---- a signal ends a wait ---------------------------------------------------------------------

KINDS = ["flock", "posix", "ofd"]


@pytest.mark.parametrize("kind", KINDS)
def test_plock__killed_waiter_leaves_at_once_and_holds_nothing(mnt, kind):
    f = mnt.path("f")
    with open(f, "w") as fh:
        fh.write("x")
    holder = os.open(f, os.O_RDWR)
    take(kind, holder)
    hung = True
    try:
        def waiter():
            os.close(holder)  # inherited: its open file holds flock and OFD locks
            take(kind, os.open(f, os.O_RDWR))
        pid = spawn(waiter)
        wait_for(lambda: blocked(pid), 60, "the waiter to block")
        os.kill(pid, signal.SIGKILL)
        status = reaped(pid, 20)
        assert status is not None, "a killed waiter did not end while the lock was held"
        assert os.WIFSIGNALED(status)
        hung = False
        # the holder lets go: nobody holds it, the dead waiter neither
        os.close(holder)
        holder = None
        # (the holder's close reaches the daemon a little later: wait for it)
        wait_for(lambda: try_take(kind, f) == "locked", 30, "the lock to be free")
    finally:
        if hung:
            abort_connection(mnt)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if holder is not None:
            os.close(holder)


@pytest.mark.parametrize("kind", KINDS)
def test_plock__interrupted_waiter_gets_eintr_and_holds_nothing(mnt, kind):
    """A handled signal ends a wait (EINTR after the handler); the waiter,
    still alive with its file open, holds nothing."""
    f = mnt.path("f")
    with open(f, "w") as fh:
        fh.write("x")
    holder = os.open(f, os.O_RDWR)
    take(kind, holder)
    res_r, res_w = os.pipe()
    go_r, go_w = os.pipe()

    class Interrupted(Exception):
        pass

    def waiter():
        def handler(sig, frame):
            raise Interrupted()
        signal.signal(signal.SIGUSR1, handler)
        os.close(holder)  # inherited: its open file holds flock and OFD locks
        fd = os.open(f, os.O_RDWR)
        try:
            take(kind, fd)
            os.write(res_w, b"locked\n")
        except Interrupted:
            os.write(res_w, b"interrupted\n")
        os.read(go_r, 1)  # stays alive, its file open
        os.close(fd)

    pid = spawn(waiter)
    os.close(res_w)
    hung = True
    try:
        wait_for(lambda: blocked(pid), 60, "the waiter to block")
        os.kill(pid, signal.SIGUSR1)
        secs, line = timed(lambda: os.read(res_r, 64), 20)
        assert secs is not None, "an interrupted waiter did not return while the lock was held"
        assert line == b"interrupted\n"
        hung = False
        os.close(holder)
        holder = None
        # (the holder's close reaches the daemon a little later: wait for it)
        wait_for(lambda: try_take(kind, f) == "locked", 30, "the lock to be free")
    finally:
        if hung:
            abort_connection(mnt)
        if holder is not None:
            os.close(holder)
        os.write(go_w, b"x")
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(res_r)
        os.close(go_w)
        os.close(go_r)


# ---- open file description locks end with their open file, as on the disk ---------------------

def ofd_steps(root):
    """The OFD scenarios in directory ROOT; returns what each step saw."""
    f = os.path.join(root, "f")
    with open(f, "w") as fh:
        fh.write("0123456789")
    seen = []

    # a process takes an OFD lock, closes the file and exits
    def lock_and_exit():
        fd = os.open(f, os.O_RDWR)
        ofd(fd, fcntl.F_OFD_SETLK, fcntl.F_WRLCK)
        os.close(fd)
    pid = spawn(lock_and_exit)
    seen.append(("exited holder", os.waitpid(pid, 0)[1]))
    seen.append(("OFD after it", try_take("ofd", f)))
    seen.append(("POSIX after it", try_take("posix", f)))
    seen.append(("flock after it", try_take("flock", f)))

    # the lock lives as long as its open file: a dup keeps it
    fd = os.open(f, os.O_RDWR)
    ofd(fd, fcntl.F_OFD_SETLK, fcntl.F_WRLCK)
    dup = os.dup(fd)
    os.close(fd)
    seen.append(("OFD with a dup open", try_take("ofd", f)))
    seen.append(("POSIX with a dup open", try_take("posix", f)))
    os.close(dup)
    seen.append(("OFD after the last close", try_take("ofd", f)))

    # an F_OFD_SETLKW waiter gets the lock when its holder exits
    r, w = os.pipe()

    def hold():
        # the probes before closed their files just now: through FUSE the
        # kernel sends those releases in the background, so their locks
        # may still be there for a moment; the holder takes it once free
        fd = os.open(f, os.O_RDWR)
        deadline = time.monotonic() + 30
        while True:
            try:
                ofd(fd, fcntl.F_OFD_SETLK, fcntl.F_WRLCK)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        os.read(r, 1)
    hpid = spawn(hold)
    wait_for(lambda: try_take("ofd", f) != "locked", 30, "the holder's lock")

    def wait_lock():
        fd = os.open(f, os.O_RDWR)
        ofd(fd, fcntl.F_OFD_SETLKW, fcntl.F_WRLCK)
        os.close(fd)
    wpid = spawn(wait_lock)
    wait_for(lambda: blocked(wpid), 30, "the OFD waiter to block")
    os.write(w, b"x")
    seen.append(("holder exits", os.waitpid(hpid, 0)[1]))
    status = reaped(wpid, 30)
    if status is None:
        os.kill(wpid, signal.SIGKILL)
        os.waitpid(wpid, 0)
    seen.append(("waiter granted", status))
    seen.append(("POSIX after both", try_take("posix", f)))
    os.close(r)
    os.close(w)
    return seen


def test_plock__ofd_locks_end_with_their_open_file_as_on_disk(tmp_path, mnt):
    want = ofd_steps(mnt.backing)
    hung = True
    try:
        secs, got = timed(lambda: ofd_steps(mnt.mnt), 120)
        assert secs is not None, "the OFD steps hung on the mount"
        hung = False
    finally:
        if hung:
            abort_connection(mnt)
    assert got == want
    assert want[1] == ("OFD after it", "locked")
