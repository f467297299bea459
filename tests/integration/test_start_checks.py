"""What the mount checks before it starts: files it writes, mounts it would
loop through, config files that are not what they claim.

Each case is an attack or a slip that a careless daemon lets through: a
hold log planted as a symbolic link or left readable in a shared
directory, two mounts that serve each other, a misspelt or garbage config
line that is silently ignored or echoed raw to the terminal.
"""
import os
import stat
import subprocess

import pytest

from conftest import BIN, Mount
from test_hardening import run_refused

NOBODY = 65534


# ---- hold_log=FILE -----------------------------------------------------------------------------

def _shared_dir(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def _prepare_hold_log(tmp_path, what):
    """A hold log path in a 1777 directory as a user (or a slip) left it;
    returns (path, victim path or None)."""
    d = _shared_dir(tmp_path)
    log = d / "hold.log"
    victim = tmp_path / "victim"
    victim.write_text("victim\n")
    os.chmod(victim, 0o600)
    if what == "symlink":
        log.symlink_to(victim)
        if os.geteuid() == 0:
            os.lchown(log, NOBODY, NOBODY)
    elif what == "dangling-symlink":
        log.symlink_to(tmp_path / "created-by-follow")
    elif what == "world-readable":
        log.write_text("")
        os.chmod(log, 0o644)
    elif what == "world-writable":
        log.write_text("")
        os.chmod(log, 0o666)
    elif what == "group-readable":
        log.write_text("")
        os.chmod(log, 0o640)
    elif what == "other-owner":
        log.write_text("")
        os.chmod(log, 0o600)
        os.chown(log, NOBODY, NOBODY)
    elif what == "hard-link":
        os.link(victim, log)
    elif what == "fifo":
        os.mkfifo(log, 0o600)
    elif what == "dir":
        log.mkdir(mode=0o700)
    return str(log), str(victim)


@pytest.mark.parametrize("what", ["symlink", "dangling-symlink", "world-readable",
                                  "world-writable", "group-readable", "other-owner",
                                  "hard-link", "fifo", "dir"])
def test_start_checks__hold_log_refuses_what_others_could_plant_or_read(dirs, tmp_path, what):
    if what == "other-owner" and os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    b, m = dirs
    log, victim = _prepare_hold_log(tmp_path, what)
    before = os.lstat(log)
    r = run_refused([b, m, "-f", "-o", "hold_log=" + log], m)
    assert r.returncode == 1, r.stderr
    assert "hold_log '%s'" % log in r.stderr, r.stderr
    # nothing was written, created or changed by the attempt
    with open(victim) as f:
        assert f.read() == "victim\n"
    assert not (tmp_path / "created-by-follow").exists()
    after = os.lstat(log)
    assert (after.st_mode, after.st_uid, after.st_size) == \
        (before.st_mode, before.st_uid, before.st_size)


def test_start_checks__hold_log_is_created_private_and_reused(dirs, tmp_path):
    b, m = dirs
    d = _shared_dir(tmp_path)
    log = str(d / "hold.log")
    old = os.umask(0)
    try:
        mnt = Mount(b, m, opts=["hold_log=" + log]).start()
    finally:
        os.umask(old)
    try:
        os.mkdir(mnt.path("a"))
        os.rename(mnt.path("a"), mnt.path("b"))
    finally:
        mnt.stop()
    st = os.stat(log)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    size = st.st_size
    assert size > 0
    # the daemon's own private file is used again, appended to
    mnt = Mount(b, m, opts=["hold_log=" + log]).start()
    try:
        os.rename(mnt.path("b"), mnt.path("c"))
    finally:
        mnt.stop()
    with open(log) as f:
        text = f.read()
    assert os.stat(log).st_size > size and "/b\t/c" in text, text


# ---- config files: the same rules for treelockctl, nothing raw on stderr -----------------------

def _bytes_ok(err):
    """Whether stderr ERR (bytes) is text that cannot garble a terminal."""
    try:
        text = err.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(c in text for c in "\x1b\x07\r\x7f\x9b")


BAD_CONFIGS = {
    # what: (file content, line named, words of the problem)
    "misspelt-key": (b"lock_store = es\nes_idnex = other-index\n", 2, "unknown option 'es_idnex'"),
    "garbage-line": (b"lock_store = es\n\nthis is no option\n", 3, "unknown option"),
    "random-bytes": (b"lock_store = es\n\x1b[2J\xff\xfe\x07\x00\x9b=\x01\n", 2, "unknown option"),
    "bad-value": (b"lock_store = es\nlock_timeout = soon\n", 2, "invalid lock_timeout 'soon'"),
    "flag-with-value": (b"es_insecure = 0\n", 1, "'es_insecure' takes no value"),
}


@pytest.mark.nofuse
@pytest.mark.parametrize("what", sorted(BAD_CONFIGS) + ["directory", "fifo"])
def test_start_checks__treelockctl_refuses_bad_config_file(tmp_path, what):
    from conftest import CTL
    if not os.access(CTL, os.X_OK):
        pytest.skip("treelockctl is not built")
    conf = tmp_path / "c.conf"
    if what == "directory":
        conf.mkdir()
        line, words = None, "not a regular file"
    elif what == "fifo":
        os.mkfifo(conf)
        line, words = None, "not a regular file"
    else:
        content, line, words = BAD_CONFIGS[what]
        conf.write_bytes(content)
    # the store's address is unreachable: a tool that went on to use it
    # would fail with a store error (exit 2) instead of the config's (1)
    r = subprocess.run(["timeout", "60", CTL, "--config=" + str(conf),
                        "--es_url=http://127.0.0.1:9", "--es_timeout_ms=200",
                        "--es_start_timeout=0", "--force", "break", "/x"],
                       capture_output=True, env=dict(os.environ, LC_ALL="C"))
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, (r.returncode, err)
    assert "config file '%s'" % conf in err, err
    if line is not None:
        assert "line %d: " % line in err, err
    assert words in err, err
    assert _bytes_ok(r.stderr), r.stderr
    assert "broke" not in r.stdout.decode()


@pytest.mark.nofuse
@pytest.mark.parametrize("what", sorted(BAD_CONFIGS))
def test_start_checks__mount_names_the_bad_config_line(dirs, tmp_path, what):
    b, m = dirs
    content, line, words = BAD_CONFIGS[what]
    conf = tmp_path / "c.conf"
    conf.write_bytes(content.replace(b"lock_store = es\n", b"log_level = info\n"))
    r = subprocess.run(["timeout", "60", BIN, b, m, "-f", "--config=" + str(conf)],
                       capture_output=True, env=dict(os.environ, LC_ALL="C"))
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, (r.returncode, err)
    assert "config file '%s' line %d: " % (conf, line) in err, err
    assert words in err, err
    assert _bytes_ok(r.stderr), r.stderr


@pytest.mark.libfuse  # libfuse's messages
@pytest.mark.nofuse
def test_start_checks__command_line_bytes_are_escaped_in_libfuse_messages(dirs):
    b, m = dirs
    r = subprocess.run(["timeout", "60", BIN, b, m, "-f", "-o", "\x1b[2Jred\x07,x\udcff",
                        "-o", "fsname=\x1b]0;title\x07"],
                       capture_output=True, env=dict(os.environ, LC_ALL="C"))
    assert r.returncode == 1, r.stderr
    assert b"unknown option" in r.stderr, r.stderr
    assert b"\\x1b[2Jred\\x07" in r.stderr, r.stderr
    assert _bytes_ok(r.stderr), r.stderr


# ---- files others could write: config=, es_password_file, es_api_key_file ---------------------

def _planted(tmp_path, name, text, how):
    """File NAME in a 1777 directory, as another user or a slip left it."""
    if not (tmp_path / "shared").exists():
        _shared_dir(tmp_path)
    path = tmp_path / "shared" / name
    path.write_text(text)
    os.chmod(path, {"nobody": 0o600, "group-writable": 0o620, "world-writable": 0o602,
                    "root": 0o600}[how])
    if how == "nobody":
        os.chown(path, NOBODY, NOBODY)
    return str(path)


WHY = {"nobody": "owned by uid %d, not root" % NOBODY,
       "group-writable": "writable by group or others",
       "world-writable": "writable by group or others"}


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule of a root daemon; files of nobody")
@pytest.mark.parametrize("how", sorted(WHY))
def test_start_checks__config_file_others_could_write_is_refused(dirs, tmp_path, how):
    """Another user's config file (or one others may write) could turn
    on allow_other or point the store elsewhere: a root daemon refuses it,
    naming the file and why; its own mounts."""
    b, m = dirs
    conf = _planted(tmp_path, "c.conf", "allow_other\nlock_timeout = 5\n", how)
    r = run_refused([b, m, "-f", "--config=" + conf], m)
    assert r.returncode == 1, r.stderr
    assert "cannot use config file '%s': %s" % (conf, WHY[how]) in r.stderr, r.stderr
    good = _planted(tmp_path, "good.conf", "lock_timeout = 5\n", "root")
    mnt = Mount(b, m, args=["--config=" + good]).start()
    mnt.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule of a root daemon; files of nobody")
@pytest.mark.parametrize("option", ["es_password_file", "es_api_key_file"])
def test_start_checks__secret_file_of_another_user_is_refused(dirs, tmp_path, option):
    b, m = dirs
    secret = _planted(tmp_path, "secret", "id:s3cr3t-xyzzy\n", "nobody")
    opts = "lock_store=es,es_url=http://127.0.0.1:9,es_allow_insecure=1,es_start_timeout=0," \
        + ("es_user=u," if option == "es_password_file" else "") + option + "=" + secret
    r = run_refused([b, m, "-f", "-o", opts], m)
    assert r.returncode == 1, r.stderr
    assert "cannot use %s '%s': owned by uid %d, not root" % (option, secret, NOBODY) \
        in r.stderr, r.stderr
    assert "s3cr3t" not in r.stdout + r.stderr


@pytest.mark.nofuse
@pytest.mark.skipif(os.geteuid() != 0, reason="the rule of a root process; files of nobody")
def test_start_checks__treelockctl_refuses_config_file_of_another_user(tmp_path):
    from conftest import CTL
    conf = _planted(tmp_path, "c.conf", "es_url = http://127.0.0.1:9\n", "nobody")
    r = subprocess.run(["timeout", "60", CTL, "--config=" + conf, "--es_timeout_ms=200",
                        "--es_start_timeout=0", "check"],
                       capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot use config file '%s': owned by uid %d, not root" % (conf, NOBODY) \
        in r.stderr, r.stderr


# ---- mounts that would serve each other -------------------------------------------------------

@pytest.mark.libfuse  # mounting
@pytest.mark.parametrize("depth", [2, 3])
def test_start_checks__mounts_serving_each_other_are_refused(tmp_path, depth):
    """treelockfs bA mA; [treelockfs mA mB;] treelockfs mA|mB bA/sub: the
    last mount's BACKING is reached through the first, whose backing
    contains its MOUNTPOINT."""
    bA, mA, mB = tmp_path / "bA", tmp_path / "mA", tmp_path / "mB"
    for d in (bA / "sub", mA, mB):
        d.mkdir(parents=True)
    mounts = [Mount(bA, mA)]
    if depth == 3:
        mounts.append(Mount(mA, mB))
    try:
        for m in mounts:
            m.start()
        with open(mounts[0].path("ee"), "w") as f:
            f.write("x")
        top = str(mounts[-1].mnt)
        # run_refused waits at most 10 s and unmounts (by path) a mount it
        # should not have made
        r = run_refused([top, str(bA / "sub"), "-f"], str(bA / "sub"))
        assert r.returncode == 1, r.stderr
        assert "cannot mount '%s'" % (bA / "sub") in r.stderr, r.stderr
        assert "serve each other" in r.stderr, r.stderr
        # the mounts that were there still work
        os.rename(mounts[0].path("ee"), mounts[0].path("ff"))
        assert "ff" in os.listdir(mounts[-1].mnt)
    finally:
        for m in reversed(mounts):
            m.stop()


def _abort_connection(dev):
    """Aborts the FUSE connection of a mount of ours (by its device DEV):
    a daemon stuck waiting on its own mount cannot even be killed."""
    conn = "/sys/fs/fuse/connections"
    if not os.path.exists(os.path.join(conn, str(os.minor(dev)))):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", conn], check=False)
    try:
        with open(os.path.join(conn, str(os.minor(dev)), "abort"), "w") as f:
            f.write("1")
    except OSError:
        pass


def _child_rename(src, dst):
    """Starts a child that looks up DST's directory and renames SRC to DST;
    it prints the errno names it met."""
    code = ("import os, sys\n"
            "out = []\n"
            "for fn in (lambda: os.stat(sys.argv[2]), lambda: os.rename(sys.argv[1], sys.argv[3])):\n"
            "    try:\n"
            "        fn()\n"
            "        out.append('ok')\n"
            "    except OSError as e:\n"
            "        out.append(__import__('errno').errorcode.get(e.errno, str(e.errno)))\n"
            "print(' '.join(out))\n")
    return subprocess.Popen(["python3", "-c", code, src, os.path.dirname(dst), dst],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.libfuse  # lookups through libfuse
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for bind mounts")
@pytest.mark.parametrize("how", ["itself", "through-another-mount"])
def test_start_checks__lookup_back_into_the_mount_is_eloop(tmp_path, how):
    """A cycle made after the start, by a bind mount the start check could
    not see: the lookup that would re-enter the mount fails with ELOOP
    instead of hanging both mounts."""
    bA, mA, mX = tmp_path / "bA", tmp_path / "mA", tmp_path / "mX"
    for d in (bA / "sub", mA, mX):
        d.mkdir(parents=True)
    m1 = Mount(bA, mA)
    m2 = Mount(mA, mX) if how == "through-another-mount" else None
    bound = False
    child = None
    hung = False
    devs = []
    try:
        m1.start()
        devs.append(os.stat(m1.mnt).st_dev)
        if m2:
            m2.start()
            devs.append(os.stat(m2.mnt).st_dev)
        with open(m1.path("ee"), "w") as f:
            f.write("x")
        source = str(mX if m2 else mA)
        subprocess.run(["mount", "--bind", source, str(bA / "sub")], check=True)
        bound = True
        child = _child_rename(m1.path("ee"), m1.path("sub", "ff"))
        try:
            out, err = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            hung = True
        assert not hung, "the lookup through the mount into itself hung"
        assert out.split() == ["ELOOP", "ELOOP"], (out, err)
        with open(m1.bpath("ee")) as f:
            assert f.read() == "x"
        assert "leads back into this mount" in m1.log()
    finally:
        if hung:
            for dev in devs:
                _abort_connection(dev)
        if bound:
            subprocess.run(["umount", "-l", str(bA / "sub")], check=False)
        for m in (m2, m1):
            if m is None:
                continue
            if hung:
                m.kill()
            else:
                m.stop()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(timeout=30)
