"""Hostile names and long paths work as natively.

Names are bytes: spaces, newlines, '%', '%2F', backslashes, UTF-8, bytes
that are not UTF-8, 255 bytes (the limit) and 256 (ENAMETOOLONG); paths
through the mount just under PATH_MAX. The lock listing escapes such keys
so that each lock stays one line of valid UTF-8.
"""
import errno
import os
import subprocess
import time

import pytest

from conftest import outcome, wait_for

NAMES = [
    b"with space",
    b" leading and trailing ",
    b"new\nline",
    b"tab\there",
    b"100%",
    b"a%2Fb",
    b"%2e%2e",
    b"back\\slash",
    b"\\",
    "caf\u00e9-\u65e5\u672c-\U0001f600".encode(),
    b"bad\xff\xfeutf8",
    b"\xc3(",
    b"\x80",
    b"-dash",
    b"..dots",
    b"x" * 255,
    "\u00e9".encode() * 127 + b"x",
]


def name_steps(root, name):
    root = os.fsencode(root)
    p = os.path.join(root, name)
    q = os.path.join(root, b"d", name + b".2" if len(name) < 253 else name[:-2] + b".2")
    out = []
    out.append(outcome(lambda: os.mkdir(os.path.join(root, b"d"))))
    out.append(outcome(lambda: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))))
    out.append(outcome(lambda: os.path.basename(p) in os.listdir(root)))
    out.append(outcome(lambda: os.stat(p).st_size))
    out.append(outcome(lambda: os.rename(p, q)))
    out.append(outcome(lambda: sorted(os.listdir(os.path.join(root, b"d")))))
    out.append(outcome(lambda: os.rename(q, p)))
    out.append(outcome(lambda: os.mkdir(p + b"dir" if len(name) < 253 else p[:-3] + b"dir")))
    out.append(outcome(lambda: os.symlink(name, os.path.join(root, b"d", b"link"))))
    out.append(outcome(lambda: os.readlink(os.path.join(root, b"d", b"link")) == name))
    out.append(outcome(lambda: os.unlink(os.path.join(root, b"d", b"link"))))
    out.append(outcome(lambda: os.setxattr(p, "user.n", name[:200])))
    out.append(outcome(lambda: os.unlink(p)))
    out.append(outcome(lambda: sorted(os.listdir(root))))
    return out


@pytest.mark.libfuse  # names through libfuse
@pytest.mark.parametrize("name", NAMES, ids=lambda n: n[:20].hex())
def test_names__hostile_names_work(tmp_path, mnt, name):
    native = tmp_path / "native"
    native.mkdir()
    want = name_steps(str(native), name)
    got = name_steps(mnt.mnt, name)
    assert got == want
    assert all(r[0] == "ok" for r in got[:13]), got
    assert os.listdir(os.fsencode(mnt.bpath("d"))) == []


@pytest.mark.libfuse  # names through libfuse
def test_names__256_bytes_is_enametoolong_like_native(tmp_path, mnt):
    native = tmp_path / "native"
    native.mkdir()
    long = b"y" * 256
    for root in (os.fsencode(str(native)), os.fsencode(mnt.mnt)):
        ok = os.path.join(root, b"y" * 255)
        os.close(os.open(ok, os.O_CREAT | os.O_WRONLY, 0o644))
        for fn in (lambda: os.open(os.path.join(root, long), os.O_CREAT | os.O_WRONLY, 0o644),
                   lambda: os.mkdir(os.path.join(root, long)),
                   lambda: os.stat(os.path.join(root, long)),
                   lambda: os.rename(ok, os.path.join(root, long)),
                   lambda: os.symlink(b"t", os.path.join(root, long)),
                   lambda: os.link(ok, os.path.join(root, long)),
                   lambda: os.mkfifo(os.path.join(root, long))):
            with pytest.raises(OSError) as e:
                fn()
            assert e.value.errno == errno.ENAMETOOLONG
        # a target longer than NAME_MAX is fine for a symlink
        os.symlink(b"z" * 1000, os.path.join(root, b"s"))
        assert os.readlink(os.path.join(root, b"s")) == b"z" * 1000
    assert os.listdir(mnt.bpath()) == os.listdir(str(native))


def deep_steps(root, depth, comp):
    """A deep tree whose full path from ROOT is just under PATH_MAX."""
    out = []
    d = root
    for i in range(depth):
        d = os.path.join(d, comp(i))
        os.mkdir(d)
    f = os.path.join(d, "file")
    out.append(("full path length", len(os.fsencode(f))))
    out.append(outcome(lambda: os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o644))))
    out.append(outcome(lambda: os.stat(f).st_size))
    g = os.path.join(d, "renamed")
    out.append(outcome(lambda: os.rename(f, g)))
    out.append(outcome(lambda: os.listdir(d)))
    out.append(outcome(lambda: os.rename(g, os.path.join(root, "up"))))
    out.append(outcome(lambda: os.rename(os.path.join(root, "up"), g)))
    # one byte more than PATH_MAX allows
    too_long = os.path.join(d, "x" * (4096 - len(os.fsencode(d)) - 1))
    out.append(("too long", len(os.fsencode(too_long))))
    out.append(outcome(lambda: os.stat(too_long)))
    out.append(outcome(lambda: os.rename(os.path.join(root, comp(0)), os.path.join(root, "top"))))
    out.append(outcome(lambda: os.listdir(os.path.join(root, "top"))))
    out.append(outcome(lambda: os.unlink(g.replace(os.path.join(root, comp(0)),
                                                   os.path.join(root, "top"), 1))))
    return out


@pytest.mark.libfuse  # paths through libfuse
def test_names__paths_just_under_path_max(tmp_path, mount_factory):
    m = mount_factory(name="mnt")
    native = tmp_path / "nat"  # as long as "mnt": same full lengths
    native.mkdir()
    prefix = len(os.fsencode(m.mnt))
    comp_len = 200
    depth = (4000 - prefix) // (comp_len + 1)
    last = 4000 - prefix - depth * (comp_len + 1) - len("/file")
    lengths = [comp_len] * depth + ([last - 1] if last > 4 else [])
    depth = len(lengths)

    def comp(i):
        return ("%03d" % i) + "c" * (lengths[i] - 3)

    want = deep_steps(str(native), depth, comp)
    got = deep_steps(m.mnt, depth, comp)
    assert got == want
    assert 3950 <= got[0][1] < 4096
    assert got[1] == ("ok", None) and got[3] == ("ok", None)
    assert m.locks() == []
    assert m.stats()["renames"] == 4


def _read_locks_bytes(m):
    with open(os.path.join(m.mnt, ".treelockfs", "locks"), "rb") as f:
        return f.read()


def _with_locks(m, n):
    """The lock listing (bytes) when it shows N locks, else None."""
    data = _read_locks_bytes(m)
    lines = [l for l in data.split(b"\n") if l and not l.startswith(b"#")]
    return data if len(lines) == n else None


def test_names__lock_listing_escapes_keys(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=800"])
    src_name = b"a\nb\\c\xff%2F d"
    dst_name = "\u00e9t\u00e9\t2\u009b".encode()  # U+009B: CSI, a C1 control
    os.mkdir(m.bpath("dir"))
    with open(os.path.join(os.fsencode(m.bpath("dir")), src_name), "wb") as f:
        f.write(b"content")
    src = os.path.join(os.fsencode(m.mnt), b"dir", src_name)
    dst = os.path.join(os.fsencode(m.mnt), b"dir", dst_name)
    p = subprocess.Popen([b"mv", src, dst])
    deadline = time.monotonic() + 5
    lines = []
    while time.monotonic() < deadline:
        data = _read_locks_bytes(m)
        lines = [l for l in data.split(b"\n") if l and not l.startswith(b"#")]
        if len(lines) == 3:
            break
        time.sleep(0.05)
    assert p.wait(timeout=10) == 0
    assert len(lines) == 3, lines
    text = [l.decode("utf-8") for l in lines]  # valid UTF-8: invalid bytes escaped
    for key in ("/dir", "/dir/a\\x0ab\\\\c\\xff%2F d", "/dir/\u00e9t\u00e9\\x092\\xc2\\x9b"):
        assert len([t for t in text if t.endswith(" " + key)]) == 1, (key, text)
    modes = sorted(t.split(" ", 1)[0] for t in text)
    assert modes == ["exclusive", "exclusive", "shared"]
    assert m.locks() == []
    with open(os.path.join(os.fsencode(m.bpath("dir")), dst_name), "rb") as f:
        assert f.read() == b"content"


# U+202E RIGHT-TO-LEFT OVERRIDE shows "evil\u202etxt.exe" as "evilexe.txt",
# and ESC [2J clears a terminal: a name that could pass for another
HOSTILE = "evil\u202etxt.exe\x1b[2J".encode()
HOSTILE_SHOWN = b"evil\\xe2\\x80\\xaetxt.exe\\x1b[2J"


def test_names__bidi_and_control_escaped_in_log_and_lock_listing(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=2000", "log_level=debug"])
    os.mkdir(m.bpath("dir"))
    with open(os.path.join(os.fsencode(m.bpath("dir")), HOSTILE), "wb") as f:
        f.write(b"content")
    src = os.path.join(os.fsencode(m.mnt), b"dir", HOSTILE)
    dst = os.path.join(os.fsencode(m.mnt), b"dir", HOSTILE + b".2")
    p = subprocess.Popen([b"mv", src, dst])
    try:
        # /dir shared, both names exclusive
        data = wait_for(lambda: _with_locks(m, 3), what="the rename's three locks in the listing")
    finally:
        assert p.wait(timeout=60) == 0
    for raw in (b"\xe2\x80\xae", b"\x1b"):
        assert raw not in data, data
    assert b" /dir/" + HOSTILE_SHOWN + b"\n" in data, data
    assert b" /dir/" + HOSTILE_SHOWN + b".2\n" in data, data
    # the debug line of the rename, in the log, is escaped alike
    line = "rename '/dir/%s' -> '/dir/%s.2': " % (HOSTILE_SHOWN.decode(), HOSTILE_SHOWN.decode())
    log = wait_for(lambda: line in m.log() and m.log(), what="the rename's line in the log")
    assert "\u202e" not in log and "\x1b" not in log, log
