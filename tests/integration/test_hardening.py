"""Hardening: what a hostile config file, name or environment must not do.

Each case states what a careless daemon would let through: libfuse options
smuggled in a config value, a mount point inside its own backing directory,
the open-file limit, names that forge log lines, config files that are not
files, passwords where others can read them, silent long waits, leaks.
"""
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import BIN, Mount, detach, is_mounted, open_tree, run_as, wait_for, write

NOBODY = 65534


def run_refused(args, mnt, timeout=10, env=None):
    """Runs treelockfs ARGS (with -f) that must refuse to start: returns the
    CompletedProcess; a daemon that mounted MNT instead is stopped (by its
    pid, its mount detached) and the test fails."""
    e = dict(os.environ, LC_ALL="C")
    e.update(env or {})
    proc = subprocess.Popen([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
        pytest.fail("treelockfs mounted %s instead of refusing:\n%s" % (mnt, err))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def mount_options(path):
    """(per-mount options, super options) of the mount at PATH."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode("unicode_escape") == path:
                sep = fields.index("-")
                return set(fields[5].split(",")), set(fields[sep + 3].split(","))
    raise AssertionError("%s is not mounted" % path)


def read_as_nobody(path):
    def rd():
        with open(path, "rb") as f:
            return f.read()
    return run_as(NOBODY, NOBODY, rd)


# D1 ------------------------------------------------------------------------

@pytest.mark.libfuse  # libfuse's mount options
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
@pytest.mark.parametrize("line", ["fsname=evil,allow_other", "fsname = evil\\,allow_other",
                                  "subtype=x,allow_other,allow_other"])
def test_hardening__config_value_cannot_smuggle_allow_other(mount_factory, tmp_path, line):
    open_tree(tmp_path)
    conf = tmp_path / "c.conf"
    conf.write_text(line + "\n")
    m = mount_factory(args=["--config=" + str(conf)])
    secret = m.bpath("secret")
    with open(secret, "w") as f:
        f.write("root only")
    os.chmod(secret, 0o600)
    _, sopts = mount_options(m.mnt)
    assert "allow_other" not in sopts or "default_permissions" in sopts, sopts
    with pytest.raises(PermissionError):
        read_as_nobody(m.path("secret"))


@pytest.mark.libfuse  # libfuse's mount options
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
@pytest.mark.parametrize("how", ["file", "argv", "argv-o-list"])
def test_hardening__allow_other_always_brings_permissions(mount_factory, tmp_path, how):
    open_tree(tmp_path)
    args, opts = [], []
    if how == "file":
        conf = tmp_path / "c.conf"
        conf.write_text("allow_other\n")
        args = ["--config=" + str(conf)]
    elif how == "argv":
        args = ["-o", "allow_other"]
    else:
        opts = ["fsname=x", "allow_other"]
    m = mount_factory(opts=opts, args=args)
    for name, mode in (("secret", 0o600), ("public", 0o644)):
        with open(m.bpath(name), "w") as f:
            f.write(name)
        os.chmod(m.bpath(name), mode)
    _, sopts = mount_options(m.mnt)
    assert {"allow_other", "default_permissions"} <= sopts, sopts
    with pytest.raises(PermissionError):
        read_as_nobody(m.path("secret"))
    assert read_as_nobody(m.path("public")) == b"public"

    # and a file nobody creates belongs to nobody (per-request credentials)
    os.chmod(m.bpath(), 0o777)

    def create():
        with open(m.path("mine"), "w") as f:
            f.write("x")
    run_as(NOBODY, NOBODY, create)
    assert os.stat(m.bpath("mine")).st_uid == NOBODY


# D5 ------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["direct", "symlink", "bind"])
def test_hardening__mountpoint_inside_backing_is_refused(tmp_path, how):
    b = tmp_path / "b"
    (b / "mnt").mkdir(parents=True)
    (b / "data").mkdir()
    mnt = b / "mnt"
    bind = None
    if how == "symlink":
        (tmp_path / "link").symlink_to(b)
        mnt = tmp_path / "link" / "mnt"
    elif how == "bind":
        bind = tmp_path / "alias"
        bind.mkdir()
        subprocess.run(["mount", "--bind", str(b), str(bind)], check=True)
        mnt = bind / "mnt"
    try:
        r = run_refused([str(b), str(mnt), "-f"], str(mnt))
        assert r.returncode == 1, r.stderr
        assert "inside BACKING" in r.stderr, r.stderr
    finally:
        if bind is not None:
            subprocess.run(["umount", str(bind)], check=False)


@pytest.mark.libfuse  # mounting
def test_hardening__mount_over_backing_or_its_parent_still_works(mount_factory, tmp_path):
    """MOUNTPOINT == BACKING, and BACKING inside MOUNTPOINT, cannot loop:
    the daemon reaches BACKING by an fd opened before the mount."""
    top = tmp_path / "top"
    (top / "b" / "d").mkdir(parents=True)
    m = Mount(top / "b", top / "b").start()
    try:
        os.rename(m.path("d"), m.path("d2"))
        assert os.listdir(m.mnt) == ["d2"]
    finally:
        m.stop()
    m = Mount(top / "b", top).start()
    try:
        os.rename(m.path("d2"), m.path("d3"))
        assert os.listdir(m.mnt) == ["d3"]
    finally:
        m.stop()


# D6 ------------------------------------------------------------------------

def _limit_nofile(soft, hard):
    def fn():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return fn


def _start_limited(b, m, soft, hard, opts=()):
    log = m + ".log"
    cmd = [BIN, b, m, "-f"] + (["-o", ",".join(opts)] if opts else [])
    logf = open(log, "ab")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                            preexec_fn=_limit_nofile(soft, hard), start_new_session=True)
    deadline = time.monotonic() + 10
    while not is_mounted(m):
        assert proc.poll() is None, open(log).read()
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail("treelockfs did not mount within 10 s:\n" + open(log).read())
        time.sleep(0.02)
    return proc, logf, log


def _stop(proc, logf, m):
    subprocess.run(["fusermount3", "-u", "-z", m], check=False)
    rc = proc.wait(timeout=120)
    logf.close()
    return rc


def _hold_names(m, n, held):
    """Opens names f00000.. of mount M (O_PATH: a lookup, no open) into
    HELD, up to N; returns the error that stopped it, or None."""
    for i in range(n):
        try:
            held.append(os.open(os.path.join(m, "f%05d" % i), os.O_PATH | os.O_NOFOLLOW))
        except OSError as e:
            return e
    return None


def _fill(b, n):
    for i in range(n):
        with open(os.path.join(b, "f%05d" % i), "w"):
            pass


def test_hardening__raises_open_file_limit(dirs):
    b, m = dirs
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("hard open-file limit %d is below what 3,000 files need" % hard)
    _fill(b, 3000)
    proc, logf, log = _start_limited(b, m, 1024, hard, opts=["log_level=debug"])
    try:
        r = subprocess.run(["ls", "-l", m], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[:500]
        assert len([l for l in r.stdout.splitlines() if " f0" in l]) == 3000
    finally:
        assert _stop(proc, logf, m) == 0
    assert "open-file limit" in open(log).read()


@pytest.mark.libfuse  # descriptors of the data path
def test_hardening__out_of_fds_is_enfile_and_warned_once(dirs):
    """Names held open through the mount (O_PATH: a lookup, no open) are
    inodes the kernel keeps and so descriptors the daemon keeps, until its
    1,024 run out. (Names that `ls -l` only looked up may be forgotten by
    the kernel at any time, so how many the daemon holds then is not ours
    to say.)"""
    b, m = dirs
    n = 1500
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n + 100:
        pytest.skip("hard open-file limit %d is below the %d this test holds" % (hard, n + 100))
    _fill(b, n)
    proc, logf, log = _start_limited(b, m, 1024, 1024)
    held, err = [], None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, hard))
        err = _hold_names(m, n, held)
        # ENFILE, never EMFILE: the caller's own table is not the one full
        assert err is not None and err.errno == errno.ENFILE, (len(held), err)
        assert len(held) > 900, len(held)
        # the mount still answers
        assert os.stat(m).st_ino
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert _stop(proc, logf, m) == 0
    text = open(log).read()
    assert text.count("open-file limit") == 1, text[-2000:]


_FLOOD = """
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
errs = {}
for i in range(n):
    p = os.path.join(d, "n%05d" % i)
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        os.stat(p)
    except OSError as e:
        errs[e.strerror] = errs.get(e.strerror, 0) + 1
for i in range(0, n, 7):
    try:
        os.stat(os.path.join(d, "n%05d" % i))
    except OSError as e:
        errs[e.strerror] = errs.get(e.strerror, 0) + 1
print(json.dumps(errs))
"""

_READ = """
import json, os, sys
d, stop = sys.argv[1], sys.argv[2]
rounds, errs = 0, {}
while True:
    done = os.path.exists(stop)
    try:
        assert "readme" in os.listdir(d)
        with open(os.path.join(d, "readme")) as f:
            assert f.read() == "still here\\n"
        rounds += 1
    except OSError as e:
        errs[e.strerror] = errs.get(e.strerror, 0) + 1
    if done:
        break
print(json.dumps({"rounds": rounds, "errs": errs}))
"""


# what ordinary users can run: Debian's interpreter, not one in root's home
USER_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _as_user(uid):
    def fn():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return fn


@pytest.mark.libfuse  # descriptors of the data path
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
@pytest.mark.parametrize("prune", ["auto", "names"])
def test_hardening__one_user_cannot_take_every_descriptor(tmp_path, prune):
    """Every inode the kernel knows holds a descriptor of the daemon, and
    the kernel forgets inodes only under memory pressure: one user who
    creates and stats names used to take them all, and every user's ls
    and cat got ENFILE. With a limit of 1,500 descriptors, one user
    touches and stats 20,000 names while another lists a directory and
    reads a file all along: neither sees an error. By inode (this kernel),
    and by the names of files, as on kernels before 6.18."""
    flooder, reader = 4242, 4243
    open_tree(tmp_path)
    b, m = tmp_path / "backing", tmp_path / "mnt"
    for d in (b, m):
        d.mkdir()
        d.chmod(0o755)
    (b / "flood").mkdir()
    os.chown(b / "flood", flooder, flooder)
    (b / "other").mkdir()
    (b / "other" / "readme").write_text("still here\n")
    stop = tmp_path / "stop"
    proc, logf, log = _start_limited(str(b), str(m), 1500, 1500,
                                     opts=["allow_other", "inode_prune=" + prune])
    try:
        rd = subprocess.Popen([USER_PYTHON, "-c", _READ, str(m / "other"), str(stop)],
                              stdout=subprocess.PIPE, text=True, preexec_fn=_as_user(reader))
        fl = subprocess.run([USER_PYTHON, "-c", _FLOOD, str(m / "flood"), "20000"],
                            capture_output=True, text=True, preexec_fn=_as_user(flooder),
                            timeout=600)
        stop.touch()
        out, _ = rd.communicate(timeout=120)
        assert fl.returncode == 0, fl.stderr[-2000:]
        assert json.loads(fl.stdout) == {}, fl.stdout
        seen = json.loads(out)
        assert seen["errs"] == {} and seen["rounds"] > 0, seen
        assert len(os.listdir(b / "flood")) == 20000
        stats = dict(l.split(" ", 1) for l in (m / ".treelockfs" / "stats").read_text().splitlines())
        assert int(stats["inode_prunes"]) > 0, stats
        assert int(stats["inode_fds"]) <= 1500, stats
    finally:
        assert _stop(proc, logf, str(m)) == 0
    assert "asked to forget" in open(log).read()


@pytest.mark.libfuse  # libfuse's session end
def test_hardening__out_of_fds_at_exit_still_exits_cleanly(dirs):
    """A daemon stopped while every descriptor it may have is taken: its
    session's worker threads are cancelled on the way out, and a C
    library that loads its unwinder only then (glibc: libgcc_s, at the
    first pthread_cancel) cannot open it and aborts the process."""
    b, m = dirs
    n = 1500
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n + 100:
        pytest.skip("hard open-file limit %d is below the %d this test holds" % (hard, n + 100))
    _fill(b, n)
    proc, logf, log = _start_limited(b, m, 1024, 1024)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, hard))
        err = _hold_names(m, n, held)
        assert err is not None and err.errno == errno.ENFILE, (len(held), err)
        assert len(held) > 900, len(held)
        # stopped while the descriptors are still taken
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        logf.close()
        detach(m)
    text = open(log).read()
    assert rc == 0, text[-2000:]
    assert "libgcc_s" not in text, text[-2000:]


# D10 -----------------------------------------------------------------------

def test_hardening__names_cannot_forge_log_lines(mount_factory):
    m = mount_factory(opts=["log_level=debug"])
    forged = "treelockfs: err: FORGED"
    for name in ("a\n" + forged, "b\r" + forged, "c\\x0a" + forged):
        with open(m.path(name), "w"):
            pass
        os.rename(m.path(name), m.path(name + "\x1b[2J\x7f\udcff"))
    m.stop()
    lines = m.log().splitlines()
    for line in lines:
        if "FORGED" in line:
            assert "rename" in line, line
            assert "\r" not in line and "\x1b" not in line and "\x7f" not in line, repr(line)
    assert any("\\x0a" + forged in l for l in lines)
    # a backslash is escaped, so the literal text "\x0a" differs from a newline
    assert any("c\\\\x0a" + forged in l for l in lines)
    assert any("\\xff" in l for l in lines)
    with open(m.log_path, "rb") as f:
        f.read().decode("utf-8")  # the log is valid UTF-8


# D11 -----------------------------------------------------------------------

@pytest.mark.parametrize("what", ["dir", "devzero", "long_line", "big", "fifo"])
def test_hardening__bad_config_files_are_refused(dirs, tmp_path, what):
    b, m = dirs
    if what == "dir":
        conf = str(tmp_path)
    elif what == "devzero":
        conf = "/dev/zero"
    elif what == "fifo":
        conf = str(tmp_path / "fifo")
        os.mkfifo(conf)
    else:
        conf = str(tmp_path / "c.conf")
        with open(conf, "w") as f:
            if what == "long_line":
                f.write("owner = " + "x" * 5000 + "\n")
            else:
                for i in range(20000):
                    f.write("# a comment to make the file large, line %d\n" % i)
    r = run_refused([b, m, "-f", "--config=" + conf], m)
    assert r.returncode == 1, r.stderr
    assert conf in r.stderr, r.stderr


# D12 -----------------------------------------------------------------------

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize("how", ["argv", "argv-long", "file", "url", "url-file"])
def test_hardening__passwords_in_options_are_refused(dirs, tmp_path, how):
    b, m = dirs
    args = [b, m, "-f", "-o", "lock_store=es"]
    conf = tmp_path / "c.conf"
    if how == "argv":
        args += ["-o", "es_url=http://127.0.0.1:9,es_user=u,es_password=" + SECRET]
    elif how == "argv-long":
        args += ["-o", "es_url=http://127.0.0.1:9", "--es_user=u", "--es_password=" + SECRET]
    elif how == "file":
        conf.write_text("es_url = http://127.0.0.1:9\nes_user = u\nes_password = %s\n" % SECRET)
        args += ["--config=" + str(conf)]
    elif how == "url":
        args += ["-o", "es_url=http://u:%s@127.0.0.1:9" % SECRET]
    else:
        conf.write_text("es_url = http://u:%s@127.0.0.1:9/\n" % SECRET)
        args += ["--config=" + str(conf)]
    # a password from the environment, so that nothing else is missing
    r = run_refused(args, m, env={"TREELOCKFS_ES_PASSWORD": "from-env"})
    assert r.returncode == 1, r.stderr
    assert SECRET not in r.stderr and SECRET not in r.stdout, r.stderr
    assert "es_password_file" in r.stderr and "TREELOCKFS_ES_PASSWORD" in r.stderr, r.stderr
    assert ("es_password" if how.startswith(("argv", "file")) else "es_url") in r.stderr


# smaller -------------------------------------------------------------------

def test_hardening__long_mem_wait_is_logged_when_it_ends(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=1500"])
    os.mkdir(m.path("d"))
    for n in ("x", "y"):
        with open(m.path("d", n), "w"):
            pass
    before = m.stats()["acquired"]
    t = threading.Thread(target=os.rename, args=(m.path("d", "x"), m.path("d", "x2")))
    t.start()
    # the first rename holds its locks (for 1.5 s) before the second starts
    wait_for(lambda: m.stats()["acquired"] > before, what="the first rename to hold its locks")
    os.rename(m.path("d"), m.path("e"))  # waits for the shared lock on /d
    t.join()
    m.stop()
    assert "got its locks after" in m.log(), m.log()


@pytest.mark.libfuse  # libfuse's signal handlers
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_hardening__signal_stops_cleanly(mount_factory, sig):
    """A stop asked for by a signal is no error: exit 0, unmounted, the
    renamed file where it was put, and a notice that names the signal
    (libfuse hands the signal's number back like an error code)."""
    m = mount_factory()
    os.mkdir(m.path("d"))
    write(m, "d/f", "kept")
    os.rename(m.path("d"), m.path("e"))
    os.kill(m.proc.pid, sig)
    rc = m.proc.wait(timeout=15)
    log = m.log()
    assert rc == 0, log
    assert not is_mounted(m.mnt), log
    assert "stopping on %s" % sig.name in log, log
    assert " err: " not in log, log
    with open(m.bpath("e", "f")) as f:
        assert f.read() == "kept"
    m.stop()


@pytest.mark.libfuse  # what libfuse allocates
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_hardening__no_leak_at_exit(dirs):
    b, m = dirs
    log = m + ".vg"
    proc = subprocess.Popen(["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite",
                             "--error-exitcode=42", "--log-file=" + log, BIN, "-f", b, m],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not is_mounted(m):
        assert proc.poll() is None, open(log).read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.mkdir(os.path.join(m, "d"))
    os.rename(os.path.join(m, "d"), os.path.join(m, "e"))
    subprocess.run(["fusermount3", "-u", m], check=True)
    assert proc.wait(timeout=60) == 0, open(log).read()
