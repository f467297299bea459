"""treelockfs as the system mounts it: mount(8), fstab, config files, logs.

`mount -t fuse.treelockfs BACKING MNT -o ...` and an fstab line run
/sbin/mount.fuse3, which runs `treelockfs BACKING MNT -o OPTIONS` through
/bin/sh. mount(8) drops PATH from the helper's environment, so the shell
searches its default path, which starts with /usr/local/sbin and
/usr/local/bin: the built binary is installed for the duration of these
tests as a symlink /usr/local/bin/treelockfs (never over an existing file;
an exclusive lock keeps concurrent runs apart), and removed afterwards.
TREELOCKFS_TEST_NO_SYSTEM_CHANGES=1 (set by debian/rules: a package build
must not touch the system) skips the tests that need that symlink.

Without -f, treelockfs detaches once mounted and logs to syslog; these
mounts are found by their process (argv names our mount point) and ended
with umount. Tests that need no FUSE (option errors, secret files) run
everywhere.
"""
import fcntl
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, Mount, is_mounted, run_as
from mounts import daemons_of, wait_gone

# depends on the libfuse (run again on the system's by run-tests.sh):
# mount(8), fstab and the mount helper's options, parsed by libfuse
pytestmark = pytest.mark.libfuse

MOUNT_FUSE = next((p for p in ("/sbin/mount.fuse3", "/usr/sbin/mount.fuse3") if os.path.exists(p)),
                  None)
HELPER_DIR = "/usr/local/bin"
HELPER = os.path.join(HELPER_DIR, "treelockfs")
LOCK = os.path.join(tempfile.gettempdir(), "treelockfs-test-mount-helper.lock")
NOBODY = 65534


def need_root():
    if os.geteuid() != 0:
        pytest.skip("mount(8) of a FUSE type needs root")


@pytest.fixture(scope="module")
def helper():
    """Makes `treelockfs` resolvable by mount.fuse3's shell; yields its path."""
    need_root()
    if os.environ.get("TREELOCKFS_TEST_NO_SYSTEM_CHANGES") == "1":
        pytest.skip("TREELOCKFS_TEST_NO_SYSTEM_CHANGES=1: not installing %s" % HELPER)
    if MOUNT_FUSE is None:
        pytest.skip("no mount.fuse3 (Debian package fuse3)")
    if not os.path.isdir(HELPER_DIR):
        pytest.skip("no %s" % HELPER_DIR)
    lockf = open(LOCK, "w")
    fcntl.flock(lockf, fcntl.LOCK_EX)
    try:
        if os.path.lexists(HELPER):
            pytest.skip("%s exists already; not replacing it" % HELPER)
        os.symlink(os.path.realpath(BIN), HELPER)
        try:
            yield HELPER
        finally:
            os.unlink(HELPER)
    finally:
        lockf.close()


@pytest.fixture
def tree():
    """BACKING, MNT (and a place for files) that every user can traverse:
    pytest's own tmp_path is private to root."""
    top = tempfile.mkdtemp(prefix="treelockfs-helper-")
    os.chmod(top, 0o755)
    dirs = {"top": top, "backing": os.path.join(top, "backing"), "mnt": os.path.join(top, "mnt")}
    os.mkdir(dirs["backing"], 0o755)
    os.mkdir(dirs["mnt"], 0o755)
    yield dirs
    if is_mounted(dirs["mnt"]):
        unmount(dirs["mnt"])
    if not is_mounted(dirs["mnt"]):
        shutil.rmtree(top, ignore_errors=True)


def unmount(mnt):
    """umount(8), then waits for the daemon to exit."""
    pids = daemons_of(mnt)
    res = subprocess.run(["umount", mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert res.returncode == 0, res.stdout.decode()
    assert not is_mounted(mnt)
    assert wait_gone(pids), "treelockfs did not exit after umount"


def mount(*args, check=True):
    res = subprocess.run(["mount"] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=60)
    if check:
        assert res.returncode == 0, res.stderr.decode()
    return res


def mountinfo(mnt):
    """(fstype, source, super options) of MNT."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                post = fields[fields.index("-") + 1:]
                return post[0], post[1], post[2]
    return None


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def timed_rename(a, b):
    t0 = time.monotonic()
    os.rename(a, b)
    return time.monotonic() - t0


# ---- mount(8) -------------------------------------------------------------

def test_mount_helper__mount_t_use_umount(helper, tree):
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"],
          "-o", "lock_store=mem,lock_timeout=5")
    assert is_mounted(tree["mnt"])
    fstype, source, _ = mountinfo(tree["mnt"])
    assert fstype.startswith("fuse") and source == tree["backing"]
    assert len(daemons_of(tree["mnt"])) == 1
    os.makedirs(os.path.join(tree["mnt"], "a", "b"))
    write(os.path.join(tree["mnt"], "a", "b", "f"), "hello")
    os.rename(os.path.join(tree["mnt"], "a", "b"), os.path.join(tree["mnt"], "c"))
    assert open(os.path.join(tree["backing"], "c", "f")).read() == "hello"
    with open(os.path.join(tree["mnt"], ".treelockfs", "stats")) as f:
        assert "renames 1\n" in f.read()
    unmount(tree["mnt"])
    assert os.listdir(tree["mnt"]) == []


def test_mount_helper__allow_other_nofail_netdev(helper, tree):
    os.mkdir(os.path.join(tree["backing"], "pub"), 0o777)
    os.chmod(os.path.join(tree["backing"], "pub"), 0o777)
    mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"],
          "-o", "allow_other,nofail,_netdev,lock_timeout=5")
    _, _, opts = mountinfo(tree["mnt"])
    assert "allow_other" in opts.split(",") and "default_permissions" in opts.split(",")
    pub = os.path.join(tree["mnt"], "pub")

    def as_nobody():
        write(os.path.join(pub, "mine"), "x")
        os.rename(os.path.join(pub, "mine"), os.path.join(pub, "moved"))
        try:
            write(os.path.join(tree["mnt"], "not-mine"), "x")
        except PermissionError:
            return "refused"
        return "allowed"

    assert run_as(NOBODY, NOBODY, as_nobody) == "refused"
    st = os.stat(os.path.join(tree["backing"], "pub", "moved"))
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)  # acted as the user
    assert not os.path.exists(os.path.join(tree["backing"], "not-mine"))
    unmount(tree["mnt"])


def test_mount_helper__fstab_line_with_config_file(helper, tree):
    conf = write(os.path.join(tree["top"], "m.conf"),
                 "# a comment\n\n; another\nlock_store = mem\n"
                 "rename_delay_ms = 400\nlock_timeout = 5\n", 0o644)
    fstab = write(os.path.join(tree["top"], "fstab"),
                  "# test fstab\n%s %s fuse.treelockfs config=%s,allow_other,nofail,_netdev 0 0\n"
                  % (tree["backing"], tree["mnt"], conf))
    mount("-T", fstab, tree["mnt"])
    assert is_mounted(tree["mnt"])
    _, source, opts = mountinfo(tree["mnt"])
    assert source == tree["backing"] and "allow_other" in opts.split(",")
    write(os.path.join(tree["mnt"], "f"), "x")
    # rename_delay_ms from the config file holds the locks before renaming
    assert timed_rename(os.path.join(tree["mnt"], "f"), os.path.join(tree["mnt"], "g")) >= 0.35
    assert os.path.exists(os.path.join(tree["backing"], "g"))
    unmount(tree["mnt"])
    # the same line mounts again by its mount point, and by its source
    mount("-T", fstab, tree["backing"])
    assert is_mounted(tree["mnt"])
    unmount(tree["mnt"])


def test_mount_helper__mount_reports_option_errors(helper, tree):
    res = mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"],
                "-o", "lock_timeout=soon,lock_strategy=bogus", check=False)
    assert res.returncode != 0
    err = res.stderr.decode()
    assert "invalid lock_timeout 'soon'" in err and "invalid lock_strategy 'bogus'" in err
    assert not is_mounted(tree["mnt"]) and daemons_of(tree["mnt"]) == []


def test_mount_helper__mount_refuses_open_password_file(helper, tree):
    pw = write(os.path.join(tree["top"], "es.password"), "s3cr3t-pw-xyzzy\n", 0o644)
    res = mount("-t", "fuse.treelockfs", tree["backing"], tree["mnt"], "-o",
                "lock_store=es,es_url=http://127.0.0.1:9,es_user=u,es_password_file=" + pw,
                check=False)
    assert res.returncode != 0
    err = res.stderr.decode()
    assert pw in err and "s3cr3t" not in err
    assert not is_mounted(tree["mnt"])


# ---- config file and secrets (no mount needed) -----------------------------

def run_fs(*args, env=None, timeout=30):
    e = dict(os.environ)
    e.pop("TREELOCKFS_ES_PASSWORD", None)
    e.update(env or {})
    res = subprocess.run([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e, timeout=timeout)
    return res.returncode, res.stdout.decode(), res.stderr.decode()


@pytest.fixture
def dirs(tmp_path):
    (tmp_path / "backing").mkdir()
    (tmp_path / "mnt").mkdir()
    return tmp_path


ES_UNREACHABLE = ("lock_store=es,es_url=http://127.0.0.1:9,es_user=u,es_allow_insecure=1,"
                  "es_timeout_ms=500,es_start_timeout=0")


@pytest.mark.nofuse
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_mount_helper__refuses_password_file_readable_by_others(dirs, mode):
    pw = write(str(dirs / "pw"), "s3cr3t-pw-xyzzy\n", mode)
    rc, out, err = run_fs(str(dirs / "backing"), str(dirs / "mnt"), "-f",
                          "-o", ES_UNREACHABLE + ",es_password_file=" + pw)
    assert rc == 1
    assert "es_password_file '%s' is accessible by group or others" % pw in err
    assert "s3cr3t" not in err + out
    assert not is_mounted(str(dirs / "mnt"))


@pytest.mark.nofuse
def test_mount_helper__refuses_open_secret_named_in_config_file(dirs):
    pw = write(str(dirs / "pw"), "s3cr3t-pw-xyzzy\n", 0o644)
    key = write(str(dirs / "key"), "id:s3cr3t-key\n", 0o644)
    conf = write(str(dirs / "c.conf"), "lock_store = es\nes_url = http://127.0.0.1:9\n"
                 "es_user = u\nes_password_file = %s\n" % pw)
    rc, out, err = run_fs("--config=" + conf, str(dirs / "backing"), str(dirs / "mnt"), "-f")
    assert rc == 1 and pw in err and "s3cr3t" not in err + out
    conf2 = write(str(dirs / "k.conf"), "lock_store = es\nes_url = http://127.0.0.1:9\n"
                  "es_api_key_file = %s\n" % key)
    rc, out, err = run_fs(str(dirs / "backing"), str(dirs / "mnt"), "-f", "-o", "config=" + conf2)
    assert rc == 1 and "es_api_key_file '%s' is accessible" % key in err
    assert "s3cr3t" not in err + out


@pytest.mark.nofuse
def test_mount_helper__private_password_file_passes_the_check(dirs):
    pw = write(str(dirs / "pw"), "s3cr3t-pw-xyzzy\n", 0o600)
    rc, out, err = run_fs(str(dirs / "backing"), str(dirs / "mnt"), "-f",
                          "-o", ES_UNREACHABLE + ",es_password_file=" + pw)
    assert rc == 1  # the store at port 9 is unreachable ...
    assert "accessible by group or others" not in err  # ... but the file was fine
    assert "s3cr3t" not in err + out
    assert not is_mounted(str(dirs / "mnt"))


@pytest.mark.nofuse
def test_mount_helper__config_file_errors_are_reported(dirs):
    b, m = str(dirs / "backing"), str(dirs / "mnt")
    rc, _, err = run_fs("--config=" + str(dirs / "missing.conf"), b, m, "-f")
    assert rc == 1 and "cannot read config file '%s'" % (dirs / "missing.conf") in err
    nested = write(str(dirs / "n.conf"), "config = /etc/other.conf\n")
    rc, _, err = run_fs("-o", "config=" + nested, b, m, "-f")
    assert rc == 1 and "cannot name another" in err
    bad = write(str(dirs / "b.conf"), "lock_timeout = never\nlock_store = redis\n")
    rc, _, err = run_fs("--config=" + bad, b, m, "-f")
    assert rc == 1
    assert "invalid lock_timeout 'never'" in err and "invalid lock_store 'redis'" in err


@pytest.mark.nofuse
@pytest.mark.parametrize("where", ["first", "last"])
def test_mount_helper__config_as_two_words(dirs, where):
    bad = write(str(dirs / "b.conf"), "lock_timeout = never\n")
    rest = [str(dirs / "backing"), str(dirs / "mnt"), "-f"]
    args = ["--config", bad] + rest if where == "first" else rest + ["--config", bad]
    rc, _, err = run_fs(*args)
    assert rc == 1 and "invalid lock_timeout 'never'" in err


@pytest.mark.nofuse
@pytest.mark.parametrize("last", ["-o", "--config"])
def test_mount_helper__option_without_its_argument_is_an_error(dirs, last):
    rc, _, err = run_fs(str(dirs / "backing"), str(dirs / "mnt"), "-f", last)
    assert rc == 1 and "missing argument after" in err


# ---- config file and logging on a foreground mount -------------------------

def test_mount_helper__command_line_overrides_config_file(mount_factory, tmp_path):
    conf = write(str(tmp_path / "c.conf"), "rename_delay_ms = 3000\nlock_timeout = 5\n")
    m = mount_factory(opts=["config=" + conf, "rename_delay_ms=0"])
    write(m.path("f"), "x")
    assert timed_rename(m.path("f"), m.path("g")) < 2
    m.stop()
    m2 = mount_factory(args=["--config=" + conf], name="mnt2")
    write(m2.path("h"), "x")
    assert timed_rename(m2.path("h"), m2.path("i")) >= 2.9


def test_mount_helper__config_file_passes_libfuse_options_on(mount_factory, tmp_path):
    conf = write(str(tmp_path / "c.conf"), "max_threads = 4\nsubtype = treelockfs\n")
    m = mount_factory(opts=["config=" + conf])
    assert mountinfo(m.mnt)[0] == "fuse.treelockfs"


def test_mount_helper__fsname_of_the_user_wins(mount_factory, tmp_path):
    conf = write(str(tmp_path / "c.conf"), "fsname = fromfile\n")
    m = mount_factory(opts=["config=" + conf], name="mnt1")
    assert mountinfo(m.mnt)[1] == "fromfile"
    m2 = mount_factory(opts=["fsname=fromcmdline"], name="mnt2")
    assert mountinfo(m2.mnt)[1] == "fromcmdline"


def test_mount_helper__foreground_logs_to_stderr(mount_factory):
    m = mount_factory(opts=["log_level=info"])
    m.stop()
    log = m.log()
    assert "treelockfs: notice: serving '%s' at '%s'" % (m.backing, m.mnt) in log
    assert "treelockfs: info: mounted with lock_store=mem" in log


def test_mount_helper__log_level_filters(mount_factory):
    m = mount_factory(opts=["log_level=warning"])
    m.stop()
    assert "serving" not in m.log()
    m = mount_factory(opts=["log_level=debug", "lock_timeout=5"], name="mnt2")
    write(m.path("f"), "x")
    os.rename(m.path("f"), m.path("g"))
    m.stop()
    assert "treelockfs: debug: rename '/f' -> '/g': " in m.log()


# ---- syslog when daemonised -----------------------------------------------

SYSLOG_SCRIPT = r"""
set -e
dev="$1"; sock="$2"; shift 2
mount --make-rprivate /
mount -t tmpfs -o mode=755 tmpfs "$dev"
for n in null zero full random urandom tty fuse; do
	[ -e "/dev/$n" ] || continue
	touch "$dev/$n"; mount --bind "/dev/$n" "$dev/$n"
done
ln -s /proc/self/fd "$dev/fd"
touch "$dev/log"; mount --bind "$sock" "$dev/log"
mount --rbind "$dev" /dev
exec "$@"
"""


def test_mount_helper__daemon_logs_to_syslog(tree):
    """Runs a daemonised mount in a private mount namespace whose /dev/log
    is a socket of ours, and reads what it sends to syslog."""
    need_root()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    devdir = os.path.join(tree["top"], "dev")
    os.mkdir(devdir)
    sockpath = os.path.join(tree["top"], "log.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sockpath)
    sock.settimeout(10)
    try:
        res = subprocess.run(["unshare", "-m", "sh", "-c", SYSLOG_SCRIPT, "sh", devdir, sockpath,
                              os.path.realpath(BIN), tree["backing"], tree["mnt"],
                              "-o", "log_level=info"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert res.returncode == 0, res.stdout.decode()
        assert res.stdout == b""  # nothing on stderr once daemonised
        msgs = []
        pid = None
        serving = "serving '%s' at '%s'" % (tree["backing"], tree["mnt"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (pid and any("mounted with" in m for m in msgs)):
            msg = sock.recv(4096).decode("utf-8", "replace")
            msgs.append(msg)
            if serving in msg:
                # "<29>Nov 20 03:51:00 treelockfs[1234]: serving ..."
                prefix = msg.split(": serving")[0]
                assert msg.startswith("<%d>" % (3 << 3 | 5)), msg  # daemon.notice
                assert "treelockfs[" in prefix, msg
                pid = int(prefix.rsplit("[", 1)[1].rstrip("]"))
        assert pid is not None, msgs
        # daemon.info, below notice: log_level=info let it through
        assert any("mounted with lock_store=mem" in m and m.startswith("<30>") for m in msgs), msgs
        # the mount lives in that namespace only: end it with SIGTERM
        os.kill(pid, signal.SIGTERM)
        assert wait_gone([pid])
    finally:
        sock.close()
