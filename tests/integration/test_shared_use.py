"""What shared trees use beyond the basics, through an allow_other mount and
on a plain directory of the same filesystem side by side: O_DIRECT, default
ACLs, execute-only programs, extended attributes on symlinks, attributes the
backing filesystem changed by itself. The plain directory's answer (value
or errno) is the expected one.
"""
import ctypes
import errno
import fcntl
import mmap
import os
import random
import shutil
import stat
import struct
import time

import pytest

from conftest import open_tree, run_as

USER, GROUP, SUPP, OTHER_USER = 4252, 4252, 4310, 4253

# depends on the libfuse (run again on the system's by run-tests.sh):
# O_DIRECT, mappings and users' files on the data path, which FUSE passthrough
# moves into the kernel
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")]


class Data(bytes):
    """Bytes compared whole but shown short in a failure."""

    def __repr__(self):
        runs, i = [], 0
        while i < len(self) and len(runs) < 8:
            j = i
            while j < len(self) and self[j] == self[i]:
                j += 1
            runs.append("%d*%02x" % (j - i, self[i]))
            i = j
        return "Data(%d: %s%s)" % (len(self), " ".join(runs), " ..." if i < len(self) else "")


def short(v):
    if isinstance(v, bytes) and len(v) > 64:
        return Data(v)
    if isinstance(v, tuple):
        return tuple(short(x) for x in v)
    return v


def outcome(fn):
    try:
        return ("ok", short(fn()))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def compare(native, mount, steps, user=None):
    """Runs STEPS [(name, f(root))] under NATIVE and under MOUNT (as USER:
    (uid, gid, groups) when given) and asserts every outcome agrees.
    Returns the outcomes by name."""
    def run(root):
        return [(name, outcome(lambda f=f: f(root))) for name, f in steps]

    if user:
        uid, gid, groups = user
        want = run_as(uid, gid, lambda: run(native), groups=groups)
        got = run_as(uid, gid, lambda: run(mount), groups=groups)
    else:
        want, got = run(native), run(mount)
    for w, g in zip(want, got):
        assert g == w, "step %r: native %r, mount %r" % (w[0], w[1], g[1])
    assert got == want
    return dict(got)


# ---- O_DIRECT ------------------------------------------------------------------------------


def _direct_steps():
    def dio_write(path, off, size, fill):
        buf = mmap.mmap(-1, max(size, 1))  # page aligned, as O_DIRECT users allocate
        buf.write(bytes([fill]) * size)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            return os.pwritev(fd, [memoryview(buf)[:size]], off)
        finally:
            os.close(fd)
            buf.close()

    def dio_read(path, off, size):
        buf = mmap.mmap(-1, max(size, 1))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            n = os.preadv(fd, [memoryview(buf)[:size]], off)
            return n, bytes(buf[:n])
        finally:
            os.close(fd)
            buf.close()

    def dio_later(path, off, size):
        """O_DIRECT turned on after the open (fcntl F_SETFL)."""
        buf = mmap.mmap(-1, max(size, 1))
        buf.write(b"L" * size)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
            n = os.pwritev(fd, [memoryview(buf)[:size]], off)
            return n, os.preadv(fd, [memoryview(buf)[:size]], off)
        finally:
            os.close(fd)
            buf.close()

    def whole(path):
        with open(path, "rb") as f:
            return f.read()

    steps = []
    fill = 1
    for size in (512, 1024, 2048, 4096, 8192, 65536, 131072, 1 << 20):
        for off in (0, 4096, 512 * 3):
            steps.append(("write %d at %d" % (size, off),
                          lambda r, o=off, s=size, c=fill: dio_write(os.path.join(r, "d"),
                                                                      o, s, c)))
            fill += 1
            steps.append(("read %d at %d" % (size, off),
                          lambda r, o=off, s=size: dio_read(os.path.join(r, "d"), o, s)))
    steps.append(("content", lambda r: whole(os.path.join(r, "d"))))
    # each into a file of its own: what a refused write leaves behind on
    # the disk depends on how the file's extents lie
    for i, (size, off) in enumerate(((100, 0), (4097, 0), (4096, 100), (512, 1))):
        steps.append(("unaligned write %d at %d" % (size, off),
                      lambda r, o=off, s=size, i=i: dio_write(os.path.join(r, "u%d" % i),
                                                              o, s, 0xee)))
        steps.append(("unaligned read %d at %d" % (size, off),
                      lambda r, o=off, s=size: dio_read(os.path.join(r, "d"), o, s)))
        steps.append(("O_DIRECT by fcntl %d at %d" % (size, off),
                      lambda r, o=off, s=size, i=i: dio_later(os.path.join(r, "v%d" % i),
                                                              o, s)))
    steps.append(("O_DIRECT by fcntl aligned",
                  lambda r: dio_later(os.path.join(r, "w"), 4096, 8192)))
    return steps


def test_shared_use__o_direct_matches_backing(shared_mount):
    """O_DIRECT reads and writes of every size, aligned and not, answer
    what they answer on the backing filesystem, with the same bytes."""
    m, native = shared_mount
    probe = os.path.join(native, "probe")
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError as e:
        pytest.skip("the backing filesystem has no O_DIRECT: %s" % e)
    os.unlink(probe)
    res = compare(native, m.mnt, _direct_steps())
    assert res["write 1048576 at 4096"] == ("ok", 1 << 20)
    n, data = res["read 8192 at 1536"][1]
    assert n == 8192 and data == bytes([data[0]]) * 8192 and data[0] != 0
    assert len(res["content"][1]) == 4096 + (1 << 20)


def test_shared_use__o_direct_as_other_user(shared_mount):
    """The same through the mount as a user who is not root."""
    m, native = shared_mount
    for root in (native, m.mnt):
        os.mkdir(os.path.join(root, "pub"))
        os.chmod(os.path.join(root, "pub"), 0o777)
    # With FUSE passthrough a user's file is read and written by the
    # kernel on a backing file opened with the flags of the open: O_DIRECT
    # turned on later by fcntl does not reach it, so an unaligned write
    # then succeeds (buffered) where the disk refuses it. That difference
    # is documented (treelockfs(1), BUGS) and asserted below instead.
    passthrough = m.stats().get("passthrough") == "in_use"
    steps = [(n, lambda r, f=f: f(os.path.join(r, "pub"))) for n, f in _direct_steps()
             if "1048576" not in n and not (passthrough and n.startswith("O_DIRECT by fcntl"))]
    res = compare(native, m.mnt, steps, user=(USER, GROUP, [GROUP]))
    assert res["write 65536 at 0"] == ("ok", 65536)
    if passthrough:
        later = dict((n, f) for n, f in _direct_steps())["O_DIRECT by fcntl 100 at 0"]
        got = run_as(USER, GROUP, lambda: outcome(lambda: later(os.path.join(m.mnt, "pub"))),
                     groups=[GROUP])
        assert got == ("ok", (100, 100)), got
        with open(os.path.join(m.bpath("pub"), "v0"), "rb") as f:
            assert f.read() == b"L" * 100


# ---- write-back of a mapping of an O_DIRECT or O_APPEND open ------------------------------

PAGE = mmap.PAGESIZE
WB_USER = 4242  # an ordinary user, no passwd entry needed


@pytest.fixture(params=["auto", "off"], ids=["passthrough", "passthrough_off"])
def wb_mount(request, tmp_path, mount_factory):
    """(mount, native directory, sector), the two with a directory pub
    anyone may write to, on an allow_other mount with passthrough=PARAM
    (root's writes go through the daemon either way; a user's with
    passthrough through the kernel on the backing file). SECTOR is the
    smallest alignment the backing filesystem takes for O_DIRECT: 512
    where its logical blocks are that small, else the page."""
    open_tree(tmp_path)
    m = mount_factory(opts=["allow_other", "passthrough=" + request.param])
    os.chmod(m.mnt, 0o755)
    native = str(tmp_path / "native")
    os.mkdir(native, 0o755)
    for r in (native, m.mnt):
        os.mkdir(os.path.join(r, "pub"))
        os.chmod(os.path.join(r, "pub"), 0o777)
    probe = os.path.join(native, "probe")
    try:
        f = _DirectFile(probe)
    except OSError as e:
        pytest.skip("the backing filesystem has no O_DIRECT: %s" % e)
    try:
        f.dio_write(512, b"s" * 512)
        sector = 512
    except OSError as e:
        assert e.errno == errno.EINVAL
        sector = PAGE
    finally:
        f.close()
        os.unlink(probe)
    return m, native, sector


def _as(user, fn):
    """FN() as root (USER False) or as WB_USER."""
    return run_as(WB_USER, WB_USER, fn) if user else fn()


def _msync_last_page(path, flags):
    """The reported sequence: a file of 105 pages and 1,168 bytes opened
    with FLAGS, its last, partial page changed through a shared mapping
    and written back by msync(MS_SYNC) (the page goes back as a write of
    1,168 bytes at 430,080). Returns what each step returned."""
    size = 105 * PAGE + 1168
    out = []
    fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    try:
        os.ftruncate(fd, size)
        out.append(("size", os.fstat(fd).st_size))
        m = mmap.mmap(fd, size)
        try:
            m[size - 1168:size] = b"w" * 1168
            m[0:4] = b"head"
            out.append(("msync", outcome(m.flush)))
        finally:
            m.close()
        out.append(("fsync", outcome(lambda: os.fsync(fd))))
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        data = f.read()
    out.append(("content", len(data), data[:4], data[size - 1169:] == b"\0" + b"w" * 1168,
                data.count(0) == size - 1172))
    return out


@pytest.mark.parametrize("user", [False, True], ids=["root", "user"])
@pytest.mark.parametrize("flags", [os.O_DIRECT, os.O_APPEND], ids=["O_DIRECT", "O_APPEND"])
def test_shared_use__mapping_write_back_through_o_direct_or_append_open(wb_mount, user,
                                                                        flags):
    """A shared mapping's last, partial page written back by msync() of a
    file open with O_DIRECT (or O_APPEND) lands where the mapping says, as
    on the backing filesystem: through the daemon it went to the open's
    own descriptor, which refused the unaligned write (EINVAL from
    msync()), or appended it to the file's end."""
    m, native, _ = wb_mount
    got = {}
    for root in (native, m.mnt):
        path = os.path.join(root, "pub", "f")
        got[root] = _as(user, lambda path=path: _msync_last_page(path, flags))
    size = 105 * PAGE + 1168
    want = [("size", size), ("msync", ("ok", None)), ("fsync", ("ok", None)),
            ("content", size, b"head", True, True)]
    assert got[native] == want
    assert got[m.mnt] == want
    with open(m.bpath("pub", "f"), "rb") as f:
        data = f.read()
    with open(os.path.join(native, "pub", "f"), "rb") as f:
        assert data == f.read()
    # the daemon closes what it opened for the file (its inode's O_PATH
    # descriptor aside) once the kernel sent the release, which it does
    # after close() returned
    deadline = time.monotonic() + 10
    while _daemon_opens(m, m.bpath("pub", "f")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _daemon_opens(m, m.bpath("pub", "f")) == 0


def _daemon_opens(m, path):
    """The descriptors the daemon of M has open on PATH, not O_PATH ones."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % m.proc.pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (m.proc.pid, fd)) != path:
                continue
            with open("/proc/%d/fdinfo/%s" % (m.proc.pid, fd)) as f:
                flags = int(f.read().split("flags:")[1].split()[0], 8)
        except OSError:
            continue  # closed meanwhile
        n += not flags & 0o10000000  # O_PATH
    return n


class _DirectFile:
    """One file open with O_RDWR | O_DIRECT, and its ops: each returns a
    value to compare with the backing filesystem's, or raises OSError."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        self.buf = mmap.mmap(-1, 64 * PAGE)  # page aligned, as O_DIRECT users allocate

    def close(self):
        os.close(self.fd)
        self.buf.close()

    def dio_write(self, off, data):
        self.buf[:len(data)] = data
        return os.pwritev(self.fd, [memoryview(self.buf)[:len(data)]], off)

    def dio_read(self, off, size):
        n = os.preadv(self.fd, [memoryview(self.buf)[:size]], off)
        return bytes(self.buf[:n])

    def _map(self, off):
        """A shared mapping from OFF's page to the file's end, and where
        OFF lies in it."""
        start = off // PAGE * PAGE
        return mmap.mmap(self.fd, os.fstat(self.fd).st_size - start, offset=start), off - start

    def map_write(self, off, data, sync):
        mp, at = self._map(off)
        try:
            mp[at:at + len(data)] = data
            if sync == "all":
                mp.flush()
            elif sync == "range":
                mp.flush(at // PAGE * PAGE, len(mp) - at // PAGE * PAGE)
        finally:
            mp.close()
        return len(data)

    def map_read(self, off, size):
        mp, at = self._map(off)
        try:
            return mp[at:at + size]
        finally:
            mp.close()

    def truncate(self, size):
        os.ftruncate(self.fd, size)
        return os.fstat(self.fd).st_size

    def fsync(self):
        os.fsync(self.fd)

    def size(self):
        return os.fstat(self.fd).st_size


MIX_MAX = 48 * PAGE     # offsets and sizes stay below this
MIX_OPS = 2500          # operations per run at most
MIX_SECONDS = 6.0       # and at most this long


def _dio_range(rnd, kind, size, sector):
    """(offset, length) of an O_DIRECT read or write of KIND: "page"
    (multiples of the page), "sector" (of SECTOR, which the backing
    takes) or "odd": refused for their alignment whatever the file's
    extents (an offset off 512, or a length below 512 at a 512 boundary:
    within one block; a longer unaligned length may be written in part,
    depending on how the file's extents lie)."""
    top = max(size, PAGE) + 2 * PAGE
    if kind == "page":
        return rnd.randrange(0, min(top, MIX_MAX) // PAGE) * PAGE, rnd.randint(1, 8) * PAGE
    if kind == "sector":
        return (rnd.randrange(0, min(top, MIX_MAX) // sector) * sector,
                rnd.randint(1, 12 * PAGE // sector) * sector)
    if rnd.random() < 0.5:
        return rnd.randrange(0, min(top, MIX_MAX)) | 1, rnd.randint(1, 3 * PAGE)
    return rnd.randrange(0, min(top, MIX_MAX) // 512) * 512, rnd.randint(1, 511)


def _mix(native, mount, seed, sector):
    """A seeded random mix of O_DIRECT reads and writes (aligned and not),
    reads and writes through shared mappings (written back by msync() of
    the whole mapping, of a range, or later), truncates and fsyncs, on
    NATIVE (a file of the backing filesystem) and MOUNT (one through the
    mount), both open with O_DIRECT. Every op must answer on MOUNT what it
    answers on NATIVE (value or errno), and what is read must be the
    model's bytes (a bytearray of the file, changed by every op that
    succeeded). Returns the number of ops done by kind."""
    rnd = random.Random(seed)
    files = {"native": _DirectFile(native), "mount": _DirectFile(mount)}
    model = bytearray()
    done = {}
    deadline = time.monotonic() + MIX_SECONDS

    def both(what, fn):
        res = {}
        for name, f in files.items():
            try:
                res[name] = ("ok", fn(f))
            except OSError as e:
                res[name] = ("err", errno.errorcode.get(e.errno, e.errno))
        assert res["mount"] == res["native"], "seed %d, op %d, %s: backing %r, mount %r" % (
            seed, n, what, short(res["native"]), short(res["mount"]))
        return res["native"]

    def check(what, got, off):
        want = bytes(model[off:off + len(got)])
        assert got == want, "seed %d, op %d, %s: read %r, model %r" % (
            seed, n, what, short(got), short(want))

    try:
        for n in range(MIX_OPS):
            if time.monotonic() > deadline:
                break
            size = len(model)
            op = rnd.choices(["dio_write", "dio_read", "map_write", "map_read", "truncate",
                              "fsync"], [30, 25, 25, 10, 8, 2])[0]
            if op.startswith("map") and size == 0:
                op = "truncate"
            if op in ("dio_write", "dio_read"):
                kind = rnd.choices(["page", "sector", "odd"], [5, 3, 2])[0]
                off, length = _dio_range(rnd, kind, size, sector)
                op += " " + kind
                what = "%s %d at %d" % (op, length, off)
                if op.startswith("dio_write"):
                    data = rnd.randbytes(length)
                    res = both(what, lambda f: f.dio_write(off, data))
                    if res[0] == "ok":
                        written = res[1]
                        assert 0 < written <= length, what
                        if off > len(model):
                            model.extend(bytes(off - len(model)))
                        model[off:off + written] = data[:written]
                else:
                    res = both(what, lambda f: f.dio_read(off, length))
                    if res[0] == "ok":
                        check(what, res[1], off)
                        assert len(res[1]) == max(0, min(length, size - off)), what
            elif op == "map_write":
                off = rnd.randrange(size)
                # the last page more often than its share: its write-back
                # is cut at the file's size
                if rnd.random() < 0.4:
                    off = max(size - rnd.randint(1, PAGE), 0)
                length = rnd.randint(1, min(size - off, 3 * PAGE))
                sync = rnd.choice(["all", "range", "later"])
                data = rnd.randbytes(length)
                what = "map_write %d at %d, msync %s" % (length, off, sync)
                op += " " + sync
                if both(what, lambda f: f.map_write(off, data, sync))[0] == "ok":
                    model[off:off + length] = data
            elif op == "map_read":
                off = rnd.randrange(size)
                length = rnd.randint(1, min(size - off, 3 * PAGE))
                what = "map_read %d at %d" % (length, off)
                res = both(what, lambda f: f.map_read(off, length))
                if res[0] == "ok":
                    check(what, res[1], off)
            elif op == "truncate":
                new = rnd.choice([rnd.randrange(MIX_MAX), rnd.randrange(MIX_MAX // PAGE) * PAGE,
                                  max(size - rnd.randint(1, PAGE), 0), size + rnd.randint(1, 100)])
                what = "truncate to %d" % new
                if both(what, lambda f: f.truncate(new))[0] == "ok":
                    del model[new:]
                    model.extend(bytes(new - len(model)))
            else:
                what = "fsync"
                both(what, lambda f: f.fsync())
            done[op] = done.get(op, 0) + 1
            if n % 200 == 199:
                assert both("size", lambda f: f.size()) == ("ok", len(model))
        what = "final fsync"
        both(what, lambda f: f.fsync())
    finally:
        for f in files.values():
            f.close()
    for path in (native, mount):
        with open(path, "rb") as fh:
            data = fh.read()
        assert data == bytes(model), "seed %d: %s differs from the model: %r, model %r" % (
            seed, path, short(data), short(bytes(model)))
    return done


@pytest.mark.parametrize("user", [False, True], ids=["root", "user"])
def test_shared_use__o_direct_and_mappings_random_mix(wb_mount, user):
    """Thousands of O_DIRECT reads and writes, mapped reads and writes,
    msyncs, truncates and fsyncs of one file, in a seeded random order,
    answer through the mount what they answer on the backing filesystem
    and keep the file's bytes as a model of it says, as root and as a
    user, with passthrough and without."""
    m, native, sector = wb_mount
    seed = 7001 + 2 * int(user) + (m.opts[-1] == "passthrough=off")
    done = _as(user, lambda: _mix(os.path.join(native, "pub", "f"),
                                  os.path.join(m.mnt, "pub", "f"), seed, sector))
    # the mix reached what matters
    for op in ("dio_write page", "dio_write sector", "dio_write odd", "dio_read odd",
               "map_write all", "map_write range", "map_write later", "truncate"):
        assert done.get(op, 0) >= 10, done
    assert sum(done.values()) >= 500, done
    with open(m.bpath("pub", "f"), "rb") as f, \
            open(os.path.join(native, "pub", "f"), "rb") as g:
        assert f.read() == g.read()


# ---- default ACLs --------------------------------------------------------------------------

ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20)
NO_ID = 0xFFFFFFFF


def acl_bytes(entries):
    """The system.posix_acl_* value of ENTRIES [(tag, perm, id)]."""
    out = struct.pack("<I", 2)
    for tag, perm, qid in sorted(entries):
        out += struct.pack("<HHI", tag, perm, NO_ID if qid is None else qid)
    return out


def acl_text(value):
    """ENTRIES of a system.posix_acl_* value, for readable failures."""
    ents = []
    for i in range(4, len(value), 8):
        tag, perm, qid = struct.unpack("<HHI", value[i:i + 8])
        ents.append((tag, oct(perm), None if qid == NO_ID else qid))
    return ents


SHARED_ACL = [(ACL_USER_OBJ, 7, None), (ACL_GROUP_OBJ, 7, None), (ACL_GROUP, 7, SUPP),
              (ACL_USER, 5, OTHER_USER), (ACL_MASK, 7, None), (ACL_OTHER, 5, None)]
NARROW_ACL = [(ACL_USER_OBJ, 7, None), (ACL_GROUP_OBJ, 5, None), (ACL_GROUP, 6, SUPP),
              (ACL_MASK, 6, None), (ACL_OTHER, 0, None)]


def _acl_prepare(r):
    for name, acl, mode, gid in (("plain", None, 0o777, 0), ("acl", SHARED_ACL, 0o777, 0),
                                 ("narrow", NARROW_ACL, 0o777, 0),
                                 ("sgacl", SHARED_ACL, 0o2775, SUPP),
                                 ("sg", None, 0o2777, SUPP)):
        d = os.path.join(r, name)
        os.mkdir(d)
        os.chown(d, 0, gid)
        os.chmod(d, mode)
        if acl:
            os.setxattr(d, "system.posix_acl_default", acl_bytes(acl))
            os.setxattr(d, "system.posix_acl_access", acl_bytes(acl))


def _describe(path):
    """Mode, owner and both ACLs of PATH (not following a symlink)."""
    st = os.lstat(path)
    acls = []
    for name in ("system.posix_acl_access", "system.posix_acl_default"):
        try:
            acls.append(acl_text(os.getxattr(path, name, follow_symlinks=False)))
        except OSError as e:
            acls.append(errno.errorcode.get(e.errno, e.errno))
    return (stat.filemode(st.st_mode), st.st_uid, st.st_gid, acls)


def _acl_steps():
    steps = []
    for um in (0o022, 0o077, 0o007):
        for d in ("plain", "acl", "narrow", "sgacl", "sg"):
            def create(r, d=d, um=um):
                p = os.path.join(r, d, "f%o" % um)
                os.umask(um)
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o666))
                return _describe(p)

            def create_x(r, d=d, um=um):
                p = os.path.join(r, d, "x%o" % um)
                os.umask(um)
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o2775))
                return _describe(p)

            def mkdir(r, d=d, um=um):
                p = os.path.join(r, d, "d%o" % um)
                os.umask(um)
                os.mkdir(p, 0o777)
                return _describe(p)

            def mknod(r, d=d, um=um):
                p = os.path.join(r, d, "p%o" % um)
                os.umask(um)
                os.mkfifo(p, 0o666)
                return _describe(p)

            def symlink(r, d=d, um=um):
                p = os.path.join(r, d, "l%o" % um)
                os.umask(um)
                os.symlink("f%o" % um, p)
                return _describe(p)

            def subdir_create(r, d=d, um=um):
                p = os.path.join(r, d, "d%o" % um, "f")
                os.umask(um)
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o640))
                return _describe(p)

            for what, f in (("create", create), ("create 2775", create_x), ("mkdir", mkdir),
                            ("mkfifo", mknod), ("symlink", symlink),
                            ("create below new dir", subdir_create)):
                steps.append(("%s in %s umask %03o" % (what, d, um), f))
    return steps


def test_shared_use__default_acl_new_entries_match_backing(shared_mount):
    """In directories with and without a default ACL, set-group-ID or not,
    under several umasks, what a user creates gets the same mode, group and
    ACLs through the mount as on the disk."""
    m, native = shared_mount
    try:
        os.setxattr(native, "system.posix_acl_access", acl_bytes(SHARED_ACL))
    except OSError as e:
        pytest.skip("the backing filesystem has no POSIX ACLs: %s" % e)
    os.removexattr(native, "system.posix_acl_access")
    os.chmod(native, 0o755)
    _acl_prepare(native)
    _acl_prepare(m.backing)
    res = compare(native, m.mnt, _acl_steps(), user=(USER, GROUP, [GROUP, SUPP]))
    # the comparison saw the interesting cases
    assert res["create in acl umask 077"][1][0] == "-rw-rw-r--"
    assert res["create in plain umask 077"][1][0] == "-rw-------"
    assert res["mkdir in sgacl umask 077"][1][0].startswith("drwxrwsr-x")
    assert res["mkdir in sgacl umask 077"][1][2] == SUPP


# ---- execute-only programs -----------------------------------------------------------------


def _exec_prepare(r):
    prog = shutil.which("true")
    for name, mode in (("x711", 0o711), ("x111", 0o111), ("x700", 0o700), ("x644", 0o644),
                       ("x755", 0o755), ("x701", 0o701), ("x710", 0o710)):
        p = os.path.join(r, name)
        shutil.copyfile(prog, p)
        os.chmod(p, mode)
    os.chown(os.path.join(r, "x710"), 0, SUPP)


def _exec_steps():
    def run(path):
        pid = os.fork()
        if pid == 0:
            try:
                os.execv(path, [path])
            except OSError as e:
                os._exit(100 + e.errno)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return errno.errorcode[code - 100] if code >= 100 else code

    steps = []
    for name in ("x711", "x111", "x700", "x644", "x755", "x701", "x710"):
        steps.append(("exec %s" % name, lambda r, n=name: run(os.path.join(r, n))))
        steps.append(("read %s" % name,
                      lambda r, n=name: len(open(os.path.join(r, n), "rb").read(16))))
        steps.append(("open rw %s" % name,
                      lambda r, n=name: os.close(os.open(os.path.join(r, n), os.O_RDWR))))
    return steps


def test_shared_use__execute_only_programs_match_backing(shared_mount):
    """Other users run programs they may execute but not read (0711, 0111)
    through the mount as on the disk, and still cannot read them."""
    m, native = shared_mount
    _exec_prepare(native)
    _exec_prepare(m.backing)
    res = compare(native, m.mnt, _exec_steps(), user=(USER, GROUP, [GROUP, SUPP]))
    assert res["exec x711"] == ("ok", 0)
    assert res["exec x111"] == ("ok", 0)
    assert res["read x711"] == ("err", "EACCES")
    assert res["exec x700"] == ("ok", "EACCES")
    res = compare(native, m.mnt, _exec_steps(), user=(OTHER_USER, OTHER_USER, [OTHER_USER]))
    assert res["exec x710"] == ("ok", "EACCES")


# ---- extended attributes on symlinks and special files -------------------------------------


def _xattr_prepare(r):
    with open(os.path.join(r, "f"), "w") as f:
        f.write("x")
    os.symlink("f", os.path.join(r, "l"))
    os.symlink("nowhere", os.path.join(r, "dangling"))
    os.mkfifo(os.path.join(r, "p"))


def _xattr_steps():
    steps = []
    for target in ("l", "dangling", "p"):
        for ns in ("trusted", "security", "user"):
            name = "%s.tl" % ns

            def lset(r, t=target, n=name):
                os.setxattr(os.path.join(r, t), n, b"v-" + t.encode(), follow_symlinks=False)

            def lget(r, t=target, n=name):
                return os.getxattr(os.path.join(r, t), n, follow_symlinks=False)

            def llist(r, t=target):
                return sorted(os.listxattr(os.path.join(r, t), follow_symlinks=False))

            def lremove(r, t=target, n=name):
                os.removexattr(os.path.join(r, t), n, follow_symlinks=False)

            def lget_size(r, t=target, n=name):
                # getxattr(2) with size 0 asks for the size only
                libc = ctypes.CDLL(None, use_errno=True)
                libc.lgetxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                           ctypes.c_size_t]
                n_ = libc.lgetxattr(os.path.join(r, t).encode(), n.encode(), None, 0)
                if n_ < 0:
                    e = ctypes.get_errno()
                    raise OSError(e, os.strerror(e))
                return n_

            steps += [("lset %s %s" % (target, name), lset),
                      ("lget %s %s" % (target, name), lget),
                      ("lget size %s %s" % (target, name), lget_size),
                      ("llist %s after %s" % (target, name), llist),
                      ("lset create again %s %s" % (target, name),
                       lambda r, t=target, n=name: os.setxattr(
                           os.path.join(r, t), n, b"x", os.XATTR_CREATE,
                           follow_symlinks=False)),
                      ("lremove %s %s" % (target, name), lremove),
                      ("lget removed %s %s" % (target, name), lget)]
        steps.append(("target untouched %s" % target,
                      lambda r: sorted(os.listxattr(os.path.join(r, "f")))))
    return steps


def test_shared_use__xattrs_on_symlinks_match_backing(shared_mount):
    """lsetxattr, lgetxattr, llistxattr and lremovexattr on symlinks (also
    dangling ones) and FIFOs, as root and as a user, answer as on the
    disk and act on the link, not on its target."""
    m, native = shared_mount
    _xattr_prepare(native)
    _xattr_prepare(m.backing)
    res = compare(native, m.mnt, _xattr_steps())
    assert res["lget l trusted.tl"] == ("ok", b"v-l")
    assert res["llist l after trusted.tl"] == ("ok", ["trusted.tl"])
    assert res["llist dangling after security.tl"] == ("ok", ["security.tl"])
    for ns in ("trusted", "security", "user"):
        assert res["lset p %s.tl" % ns][0] == ("ok" if ns != "user" else "err")
    # the link itself carries it on the disk, not its target
    os.setxattr(m.path("l"), "trusted.z", b"z", follow_symlinks=False)
    assert os.getxattr(m.bpath("l"), "trusted.z", follow_symlinks=False) == b"z"
    assert "trusted.z" not in os.listxattr(m.bpath("f"))
    os.removexattr(m.path("l"), "trusted.z", follow_symlinks=False)
    # a user sees no trusted. names, as on the disk
    for root in (native, m.mnt):
        for name in ("f", "l"):
            os.setxattr(os.path.join(root, name), "trusted.keep", b"k", follow_symlinks=False)
            os.setxattr(os.path.join(root, name), "security.keep", b"k", follow_symlinks=False)
    os.chmod(m.mnt, 0o777)
    os.chmod(native, 0o777)
    res = compare(native, m.mnt, _xattr_steps()[:14] + [
        ("list %s as user" % n, lambda r, n=n: sorted(os.listxattr(os.path.join(r, n),
                                                                   follow_symlinks=False)))
        for n in ("f", "l")], user=(USER, GROUP, [GROUP]))
    assert res["list l as user"] == ("ok", ["security.keep"])


# ---- attributes the backing changed itself -------------------------------------------------

FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
STATX_MODE = 0x0002


def _fallocate(fd, mode, off, length):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _statx_mode(path):
    """st_mode by statx() asking for the mode only, as `stat -c %A` and
    `ls` ask: a cache whose size and times were invalidated may still
    answer it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint,
                           ctypes.c_void_p]
    buf = ctypes.create_string_buffer(256)
    if libc.statx(-100, path.encode(), 0, STATX_MODE, buf) != 0:  # AT_FDCWD
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return struct.unpack_from("<H", buf.raw, 28)[0]  # stx_mode


# (name, mode, owner): set-group-ID without group execute, of a group the
# writer is not in, is what the kernel leaves to the filesystem to clear
ALLOC_FILES = [("sugid", 0o6777, OTHER_USER), ("sgid", 0o2666, OTHER_USER),
               ("sgidx", 0o2767, OTHER_USER), ("own", 0o2745, USER)]
ALLOC_OPS = [("punch", FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 8192),
             ("zero", FALLOC_FL_ZERO_RANGE, 0, 4096),
             ("keep", FALLOC_FL_KEEP_SIZE, 65536, 65536), ("grow", 0, 0, 131072),
             ("write", None, 0, 1), ("copy", None, 0, 100)]


def _alloc_prepare(r):
    os.mkdir(os.path.join(r, "pub"))
    os.chmod(os.path.join(r, "pub"), 0o777)
    for op, _, _, _ in ALLOC_OPS:
        for name, mode, owner in ALLOC_FILES:
            p = os.path.join(r, "pub", "%s-%s" % (op, name))
            with open(p, "wb") as f:
                f.write(b"x" * 65536)
            os.chown(p, owner, SUPP)
            os.chmod(p, mode)


def _alloc_steps():
    def alloc(path, how, off, length):
        before = stat.filemode(os.stat(path).st_mode)  # the mount caches it
        fd = os.open(path, os.O_RDWR)
        try:
            if how == "write":
                os.pwrite(fd, b"y", off)
            elif how == "copy":
                src = os.open(path, os.O_RDONLY)
                try:
                    os.copy_file_range(src, fd, length, 0, off + 1000)
                finally:
                    os.close(src)
            else:
                _fallocate(fd, how, off, length)
            # at once: the mode alone, then all, by path and by descriptor
            return (before, stat.filemode(_statx_mode(path)),
                    stat.filemode(os.stat(path).st_mode), stat.filemode(os.fstat(fd).st_mode))
        finally:
            os.close(fd)

    return [("%s %s" % (op, name),
             lambda r, op=op, how=how, off=off, n=n, name=name: alloc(
                 os.path.join(r, "pub", "%s-%s" % (op, name)), how if how is not None else op,
                 off, n))
            for op, how, off, n in ALLOC_OPS for name, _, _ in ALLOC_FILES]


def test_shared_use__cleared_set_id_bits_seen_at_once(mount_factory, tmp_path):
    """After a user's fallocate (also punch-hole, zero-range), write or
    copy_file_range made the backing filesystem clear set-user-ID /
    set-group-ID bits, stat through the mount shows the new mode at once,
    even with a long attribute timeout and when asking for the mode only."""
    open_tree(tmp_path)
    m = mount_factory(opts=["allow_other", "attr_timeout=60", "entry_timeout=60"])
    os.chmod(m.mnt, 0o755)
    native = str(tmp_path / "native")
    os.mkdir(native, 0o755)
    _alloc_prepare(native)
    _alloc_prepare(m.mnt)
    res = compare(native, m.mnt, _alloc_steps(), user=(USER, GROUP, [GROUP]))
    # the comparison saw the interesting cases
    assert res["punch sgid"] == ("ok", ("-rw-rwSrw-",) + ("-rw-rw-rw-",) * 3)
    assert res["write sugid"][1][:2] == ("-rwsrwsrwx", "-rwxrwxrwx")
