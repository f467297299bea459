"""Fixtures that mount treelockfs for real.

Every test gets fresh directories under pytest's tmp_path. A mount is a
`treelockfs BACKING MNT -f ...` child process; it is waited for with a
deadline while checking that the daemon is alive, unmounted with
`fusermount3 -u MNT` at teardown, and the daemon must then exit 0. Only
mounts and processes started here are ever unmounted or killed.

Tests that mount are skipped (not failed) where /dev/fuse or fusermount3
is missing, as in a package build chroot. A missing or non-executable
treelockfs or treelockctl is a broken build: every test fails.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
FUSERMOUNT = shutil.which("fusermount3")

sys.path.insert(0, os.path.join(SRCDIR, "tests"))
import backend_fixtures  # noqa: E402
from mounts import (detach, errno_of, holders_of, is_mounted, mount_id, mounted_elsewhere, mounts_below,  # noqa: E402,F401,E501
                    outcome, program, read_file, threads_of, require_built, run_steps, stop_mounts, unbuilt, wait_for, write_file)
from backend_fixtures import backend, backend_session  # noqa: E402,F401

BIN = program("treelockfs")
CTL = program("treelockctl")


def fuse_available():
    """Whether this machine can mount (the environment, not the build)."""
    return os.path.exists("/dev/fuse") and FUSERMOUNT is not None


@pytest.fixture(autouse=True, scope="session")
def built_programs():
    """Every test fails, none skips, when the programs are not built."""
    require_built(BIN, CTL)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TREELOCKFS_SECOND_BUILD"):
        # run-tests.sh runs this tier once more on a build against another
        # libfuse (the system's, without FUSE passthrough on Debian 12): only
        # the tests whose outcome depends on the libfuse (marked libfuse, each
        # mark saying why) run there; the others run the same code on any
        # libfuse and ran on the main build: left out, not skipped
        gone = [i for i in items if i.get_closest_marker("libfuse") is None]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = [i for i in items if i.get_closest_marker("libfuse") is not None]
    backend_fixtures.keep_shard(config, items)
    backend_fixtures.skip_unselected(items)
    backend_fixtures.order_by_backend(items)
    if fuse_available() or unbuilt(BIN, CTL):
        return
    skip = pytest.mark.skip(reason="no /dev/fuse or fusermount3 (Debian package fuse3)")
    for item in items:
        if "nofuse" not in item.keywords:
            item.add_marker(skip)


# this session's own base directory for tmp_path (see pytest_configure)
_BASE = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Unless --basetemp names one, tmp_path lives in a base directory of
    # this session's own: pytest's shared /tmp/pytest-of-USER is made 0700
    # again by every pytest session that starts on the machine, which would
    # shut the users that tests act as out of their mounts (open_tree) at
    # any moment.
    if config.option.basetemp is None:
        _BASE.append(tempfile.mkdtemp(prefix="treelockfs-tests-"))
        config.option.basetemp = os.path.join(_BASE[0], "t")
    config.addinivalue_line("markers", "nofuse: test needs no FUSE mount")
    config.addinivalue_line("markers", "root: test needs root")
    config.addinivalue_line("markers", "lock_store: the subject is the lock store's protocol, "
                            "not the FUSE layer (the same code on every libfuse)")
    # What decides a libfuse mark: the test's outcome rests on what the
    # libfuse does (mounting, unmounting, remounts, daemonising, signals,
    # the options it parses, the mount helper, handing the daemon requests
    # at once from its threads, names and paths through its lookups) or on
    # what our code does differently by the libfuse's features (FUSE
    # passthrough: the data path of open files, the descriptors the daemon
    # holds, what a read sees after a change in BACKING; killpriv_v2: set-ID
    # bits). Not marked: the lock manager's and the lock store's decisions,
    # treelockctl, metrics, man pages, tools; and test_backing, which is
    # FUSE passthrough itself and can only skip on a libfuse without it
    # (test_setid's probe checks that such a build refuses passthrough=on
    # naming why).
    config.addinivalue_line("markers", "libfuse: the outcome depends on the libfuse the daemon "
                            "links (run-tests.sh runs these again on a build against the "
                            "system's libfuse)")
    backend_fixtures.register(config)


def pytest_generate_tests(metafunc):
    backend_fixtures.parametrize_backends(metafunc)


def pytest_unconfigure(config):
    # removed after a session that passed; kept, and named, for inspection
    # after one that failed, or while something below it is still mounted
    for base in _BASE:
        left = mounts_below(base)
        if left:
            print("\n%s left in place, still mounted: %s" % (base, ", ".join(left)))
        elif getattr(config, "_tlfs_failed", False):
            print("\nthe failed tests' files are kept in %s" % base)
        else:
            shutil.rmtree(base, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    session.config._tlfs_failed = session.testsfailed > 0 or exitstatus not in (0, 5)
    backend_fixtures.stop_all()


def pytest_terminal_summary(terminalreporter):
    backend_fixtures.summary(terminalreporter)


# ---- files, for every test -----------------------------------------------------------------


def makedirs(m, *parts):
    """mkdir -p of PARTS below mount (or Mount-like) M."""
    os.makedirs(m.path(*parts), exist_ok=True)


def write(m, rel, text="x"):
    """Writes TEXT to the file REL ("a/b/c") below M."""
    with open(m.path(*rel.strip("/").split("/")), "w") as f:
        f.write(text)


def read(m, rel):
    with open(m.path(*rel.strip("/").split("/"))) as f:
        return f.read()


# A suite started in the background ignores SIGINT, one under nohup SIGHUP,
# and a daemon inherits that (libfuse leaves an ignored signal ignored):
# then the mounts start through a shim that gives them the dispositions a
# shell or systemd would (the same pid: it execs).
STOP_SIGNALS_SHIM = [] if all(
    signal.getsignal(s) != signal.SIG_IGN for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
) else [sys.executable, "-c", "import os, signal, sys\n"
        "for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):\n"
        "    signal.signal(s, signal.SIG_DFL)\n"
        "os.execv(sys.argv[1], sys.argv[1:])"]


class Mount:
    """One treelockfs process. `opts` are -o options, e.g. ["lock_timeout=2"]."""

    def __init__(self, backing, mnt, opts=(), args=(), env=None, log=None):
        self.backing = str(backing)
        self.mnt = str(mnt)
        self.opts = list(opts)
        self.args = list(args)
        self.env = env
        self.log_path = log or (self.mnt.rstrip("/") + ".log")
        self.proc = None

    def cmd(self):
        cmd = [BIN, self.backing, self.mnt, "-f"]
        if self.opts:
            cmd += ["-o", ",".join(self.opts)]
        return STOP_SIGNALS_SHIM + cmd + self.args

    def start(self, timeout=10):
        require_built(BIN)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd(), stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("treelockfs exited with %d before mounting:\n%s"
                                   % (self.proc.returncode, self.log()))
            if is_mounted(self.mnt):
                return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("treelockfs did not mount within %ss:\n%s" % (timeout, self.log()))

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def bpath(self, *parts):
        return os.path.join(self.backing, *parts)

    def ctl(self, name):
        with open(os.path.join(self.mnt, ".treelockfs", name), encoding="utf-8") as f:
            return f.read()

    def set_option(self, line):
        """Changes an option of the running mount ("lock_timeout=N" or
        "log_level=L") through .treelockfs/options."""
        fd = os.open(os.path.join(self.mnt, ".treelockfs", "options"), os.O_WRONLY)
        try:
            os.write(fd, line.encode() + b"\n")
        finally:
            os.close(fd)

    def stats(self):
        out = {}
        for line in self.ctl("stats").splitlines():
            k, _, v = line.partition(" ")
            out[k] = int(v) if v.isdigit() else v
        return out

    def locks(self):
        return [l for l in self.ctl("locks").splitlines() if l and not l.startswith("#")]

    def stop(self, check=True, timeout=120):
        """Unmounts and waits for the daemon (up to TIMEOUT: with an es
        store its last requests may take up to lock_timeout, longer on a
        busy machine); with CHECK it must exit 0."""
        if self.proc is None:
            return
        mid = mount_id(self.mnt)
        detach(self.mnt)
        deadline = time.monotonic() + timeout
        termed = False
        while True:
            try:
                rc = self.proc.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                # what kept it: for the failure's message
                why = ["threads: " + "; ".join(threads_of(self.proc.pid)),
                       "holding the mount: " + ("; ".join(holders_of(self.mnt, mid)) or "nothing seen")]
                self.kill()
                rc = None
                break
            if not termed and mounted_elsewhere(self.mnt):
                # a copy of the mount in another mount namespace keeps the
                # connection open: stopped as an init system would
                self.proc.send_signal(signal.SIGTERM)
                termed = True
        self.logf.close()
        proc, self.proc = self.proc, None
        if check:
            assert rc == 0, "treelockfs exited with %r:\n%s%s" % (
                rc, self.log(), "" if rc is not None else
                "still running %d s after the unmount; %s" % (timeout, "\n".join(why)))
        return proc.returncode

    def kill(self, sig=signal.SIGKILL):
        """Kills this mount's daemon (by its pid) and detaches the mount."""
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=15)
        detach(self.mnt)


@pytest.fixture
def mount_factory(tmp_path):
    """mount_factory(opts=[...], backing=None, name="mnt") -> started Mount."""
    mounts = []

    def make(opts=(), backing=None, name="mnt", args=(), env=None, start=True):
        if backing is None:
            backing = tmp_path / "backing"
            backing.mkdir(exist_ok=True)
        mnt = tmp_path / name
        mnt.mkdir(exist_ok=True)
        m = Mount(backing, mnt, opts=opts, args=args, env=env)
        mounts.append(m)
        if start:
            m.start()
        return m

    yield make
    stop_mounts(mounts)


@pytest.fixture
def dirs(tmp_path):
    """(backing, mnt): two empty directories, as strings."""
    b, m = tmp_path / "backing", tmp_path / "mnt"
    b.mkdir()
    m.mkdir()
    return str(b), str(m)


@pytest.fixture
def mnt(mount_factory):
    """A mount with the defaults (mem store, tree strategy)."""
    return mount_factory()


def open_tree(tmp_path):
    """Lets other users reach tmp_path (pytest makes it and its parents
    0700; the base directory is this session's own, see pytest_configure)."""
    p = tmp_path
    for _ in range(3):
        os.chmod(p, os.stat(p).st_mode | 0o755)
        p = p.parent


@pytest.fixture
def shared_mount(tmp_path, mount_factory):
    """(mount, native directory) with allow_other, reachable by anyone."""
    open_tree(tmp_path)
    m = mount_factory(opts=["allow_other"])
    os.chmod(m.mnt, 0o755)
    native = tmp_path / "native"
    native.mkdir()
    native.chmod(0o755)
    return m, str(native)


def run_as(uid, gid, func, groups=()):
    """Runs FUNC() in a child process with UID, GID and GROUPS; returns what
    it returns (pickled back) or re-raises its OSError. Needs root."""
    import pickle
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o022)
            res = ("ok", func())
        except BaseException as e:  # noqa: B902 - report everything to the parent
            res = ("err", e if isinstance(e, OSError) else RuntimeError(repr(e)))
        with os.fdopen(w, "wb") as f:
            pickle.dump(res, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, val = pickle.loads(data)
    if kind == "err":
        raise val
    return val
