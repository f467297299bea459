"""Options: both spellings, config files, and every problem reported at once."""
import errno
import os
import re
import subprocess
import time

import pytest

from conftest import BIN, detach, is_mounted

# depends on the libfuse (run again on the system's by run-tests.sh): options
# libfuse parses, and --version naming the libfuse and its passthrough
pytestmark = pytest.mark.libfuse


def run(args, timeout=20):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, LC_ALL="C"))


def test_options__bad_options_all_reported_at_once(dirs):
    b, m = dirs
    r = run([b, m, "-f", "-o", "lock_store=nope,lock_timeout=-1,lock_strategy=x"])
    assert r.returncode == 1
    for what in ("lock_store 'nope'", "lock_timeout '-1'", "lock_strategy 'x'"):
        assert what in r.stderr, r.stderr
    assert not is_mounted(m)


def test_options__bad_options_in_both_spellings_and_file(dirs, tmp_path):
    b, m = dirs
    cfg = tmp_path / "bad.conf"
    cfg.write_text("lock_scope = sideways\n")
    r = run([b, m, "-f", "--config=" + str(cfg), "--rename_delay_ms=soon",
             "-o", "attr_timeout=-3"])
    assert r.returncode == 1
    for what in ("lock_scope 'sideways'", "rename_delay_ms 'soon'", "attr_timeout '-3'"):
        assert what in r.stderr, r.stderr
    assert not is_mounted(m)


def test_options__help_and_version(dirs):
    r = run(["--help"])
    assert r.returncode == 0
    assert "lock_strategy" in r.stdout and "BACKING" in r.stdout
    r = run(["-h"])
    assert r.returncode == 0
    r = run(["--version"])
    assert r.returncode == 0
    assert "treelockfs" in r.stdout
    r = run(["-V"])
    assert r.returncode == 0


def test_options__version_names_libfuse_and_passthrough():
    """--version says which libfuse runs, where the build took it from and
    whether it has FUSE passthrough (libfuse 3.16 and later); the bundled
    build carries its libfuse (static), the system build loads the
    system's shared libfuse3."""
    r = run(["--version"])
    assert r.returncode == 0
    m = re.search(r"\(libfuse (\d+)\.(\d+)\.\d+, (bundled|system|prefix); "
                  r"FUSE passthrough: (yes|no)\)", r.stdout)
    assert m, r.stdout
    major, minor, origin, passthrough = int(m[1]), int(m[2]), m[3], m[4]
    assert passthrough == ("yes" if (major, minor) >= (3, 16) else "no"), r.stdout
    linked = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if origin == "bundled":
        assert "libfuse3.so" not in linked, linked
    elif origin == "system":
        assert "libfuse3.so" in linked, linked


def test_options__missing_or_bad_backing(dirs, tmp_path):
    b, m = dirs
    r = run([str(tmp_path / "nope"), m, "-f"])
    assert r.returncode == 1
    assert "nope" in r.stderr and "No such file or directory" in r.stderr, r.stderr
    f = tmp_path / "file"
    f.write_text("")
    r = run([str(f), m, "-f"])
    assert r.returncode == 1
    assert "not a directory" in r.stderr, r.stderr
    r = run([])
    assert r.returncode == 1
    assert "missing BACKING" in r.stderr, r.stderr
    r = run([b])
    assert r.returncode == 1
    assert "missing MOUNTPOINT" in r.stderr, r.stderr
    assert not is_mounted(m)


@pytest.mark.parametrize("spelling", ["long", "o"])
def test_options__both_spellings_work(mount_factory, spelling):
    if spelling == "long":
        m = mount_factory(args=["--lock_strategy=global", "--lock_timeout=2"])
    else:
        m = mount_factory(opts=["lock_strategy=global", "lock_timeout=2"])
    st = m.stats()
    assert st["lock_strategy"] == "global"
    os.mkdir(m.path("a"))
    os.rename(m.path("a"), m.path("b"))
    assert m.stats()["renames"] == 1


@pytest.mark.parametrize("how", ["--config", "-o"])
def test_options__config_file_and_override(mount_factory, tmp_path, how):
    cfg = tmp_path / "treelockfs.conf"
    cfg.write_text("# comment\nlock_strategy = global\n\nlock_timeout = 5\n")
    args = ["--config=" + str(cfg)] if how == "--config" else ["-o", "config=" + str(cfg)]
    m = mount_factory(args=args)
    assert m.stats()["lock_strategy"] == "global"
    m.stop()
    m2 = mount_factory(args=args + ["--lock_strategy=document"], name="mnt2")
    assert m2.stats()["lock_strategy"] == "document"
    m2.stop()
    m3 = mount_factory(opts=["lock_strategy=none"], args=args, name="mnt3")
    assert m3.stats()["lock_strategy"] == "none"


def test_options__missing_config_file(dirs, tmp_path):
    b, m = dirs
    r = run([b, m, "-f", "--config=" + str(tmp_path / "nope.conf")])
    assert r.returncode == 1
    assert "nope.conf" in r.stderr, r.stderr
    assert not is_mounted(m)


def test_options__cache_timeouts_are_used(mount_factory):
    m = mount_factory(opts=["entry_timeout=0", "attr_timeout=0"])
    with open(m.path("f"), "w") as f:
        f.write("1")
    os.stat(m.path("f"))
    with open(m.bpath("f"), "w") as f:
        f.write("12345")
    assert os.stat(m.path("f")).st_size == 5


def test_options__hold_log_records_each_rename_on_the_monotonic_clock(mount_factory, tmp_path):
    log = tmp_path / "holds"
    m = mount_factory(opts=["hold_log=" + str(log)])
    os.makedirs(m.path("a b", "c"))
    t0 = time.monotonic_ns()
    os.rename(m.path("a b", "c"), m.path("d"))
    os.makedirs(m.path("e", "f"))
    with pytest.raises(OSError) as e:    # onto a non-empty directory: the backing refuses it
        os.rename(m.path("d"), m.path("e"))
    assert e.value.errno == errno.ENOTEMPTY
    t1 = time.monotonic_ns()
    lines = [l.split("\t") for l in log.read_text().splitlines()]
    assert [l[1] for l in lines] == ["acquire", "release", "acquire", "release"], lines
    pid = str(m.proc.pid)
    assert all(l[2] == pid for l in lines)
    assert lines[0][3] == lines[1][3] != lines[2][3] == lines[3][3]
    assert lines[0][4:6] == ["/a b/c", "/d"]
    assert sorted(lines[0][6:]) == ["S:/a b", "X:/a b/c", "X:/d"]
    assert lines[1][4:] == ["0"]
    assert lines[2][4:6] == ["/d", "/e"] and sorted(lines[2][6:]) == ["X:/d", "X:/e"]
    assert lines[3][4:] == [str(errno.ENOTEMPTY)]
    times = [int(l[0]) for l in lines]
    assert t0 <= times[0] <= times[1] <= times[2] <= times[3] <= t1
    # a file that cannot be opened stops the mount at start
    r = run(["--hold_log=" + str(tmp_path / "no" / "such"), str(tmp_path), m.mnt + "x", "-f"])
    assert r.returncode != 0


LAX = {
    "hex": ("lock_timeout=0x10", "invalid lock_timeout '0x10': expected decimal seconds"),
    "exponent": ("entry_timeout=1e-1", "invalid entry_timeout '1e-1'"),
    "sign": ("rename_delay_ms=+5", "invalid rename_delay_ms '+5'"),
    "no_config": ("config=", "invalid config '': expected a file name"),
    "threads_0": ("max_threads=0",
                  "invalid max_threads '0': expected a whole number from 1 to 100000"),
    "threads_-1": ("max_threads=-1", "invalid max_threads '-1'"),
    "threads_1e8": ("max_threads=100000000", "invalid max_threads '100000000'"),
    "long_owner": ("owner=" + "o" * 70000,
                   "invalid owner '%s...': longer than 63 bytes" % ("o" * 32)),
    "owner_hash": ("owner=a#1", "invalid owner 'a#1'"),
}


@pytest.mark.parametrize("case", sorted(LAX))
def test_options__lax_values_are_refused_by_name(dirs, case):
    """Refused before mounting; started without -f, so that a build that
    accepts the value mounts in the background and is unmounted here."""
    opt, want = LAX[case]
    b, m = dirs
    try:
        r = run([b, m, "-o", opt])
        assert r.returncode == 1
        assert want in r.stderr, r.stderr[:2000]
        assert len(r.stderr) < 2000  # a long value is not echoed whole
        assert not is_mounted(m)
    finally:
        detach(m)


def test_options__plain_values_at_their_bounds_mount(mount_factory):
    m = mount_factory(opts=["lock_timeout=0.5", "max_threads=100000", "max_idle_threads=0",
                            "owner=" + "o" * 63])
    assert m.ctl("options").splitlines()[0] == "lock_timeout=0.5"
    os.mkdir(m.path("a"))
    os.rename(m.path("a"), m.path("b"))
    assert m.stats()["renames"] == 1
