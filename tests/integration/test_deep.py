"""Entries deeper than PATH_MAX behave as on the backing filesystem.

PATH_MAX bounds one syscall's path, not how deep an entry sits: rm -rf,
find and rsync reach far below 4 KiB through directory fds. Each case
builds a chain of directories about 5 KB deep through directory fds
(os.open(name, O_DIRECTORY, dir_fd=...)) and runs create, rename, unlink,
mkdir, rmdir and a rename into a 4,095-byte relative path at sampled
levels, including every level past 4 KiB, through the mount and, as the
reference, on a plain directory. Both lock scopes, the mem store and the es
store (through the emulator). Then a directory really named "x (deleted)",
which a key from readlink() mistook for a removed one.
"""
import os
import shutil

import pytest

from conftest import outcome
from es_helpers import emu, emu_module, es_opts  # noqa: F401

# depends on the libfuse (run again on the system's by run-tests.sh): paths
# longer than a page handed through libfuse's lookups
pytestmark = pytest.mark.libfuse

COMP = 199                 # bytes of each chain component
LEVELS = 26                # 26 * 200 bytes: about 5.2 KB below the root
SAMPLED = {0, 1, 10, 19, 20, 21, 22, 23, 24, 25}  # 19 onwards is past 4 KiB


def comp(i):
    return ("%03d" % i) + "c" * (COMP - 3)


def long_rel(total):
    """A relative path of TOTAL bytes: directories of 250 bytes, then a name."""
    parts = []
    used = 0
    while total - used > 255 + 1:
        parts.append(("L%02d" % len(parts)) + "l" * 247)
        used += 251
    parts.append("n" * (total - used))
    return parts


def level_ops(d):
    """The operations at one level, by the directory fd D; their outcomes."""
    out = []
    mk = lambda name: os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d))
    out.append(outcome(lambda: mk("f")))
    out.append(outcome(lambda: os.rename("f", "g", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.mkdir("sub", dir_fd=d)))
    out.append(outcome(lambda: os.rename("g", "sub/g", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.rename("sub", "sub2", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.rename("sub2/g", "h", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: mk("sub2/k")))
    out.append(outcome(lambda: os.rename("h", "sub2/k", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.unlink("sub2/k", dir_fd=d)))
    out.append(outcome(lambda: os.rmdir("sub2", dir_fd=d)))
    out.append(outcome(lambda: sorted(os.listdir(d))))
    return out


def long_rename_ops(d):
    """A rename into a legal 4,095-byte relative path and back, and one
    into 4,096 bytes (the kernel's ENAMETOOLONG); their outcomes."""
    out = []
    parts = long_rel(4095)
    rel = "/".join(parts)
    assert len(rel) == 4095
    for i in range(1, len(parts)):
        out.append(outcome(lambda: os.mkdir("/".join(parts[:i]), dir_fd=d)))
    out.append(outcome(lambda: os.close(os.open("m", os.O_CREAT | os.O_WRONLY, 0o644,
                                                dir_fd=d))))
    out.append(outcome(lambda: os.rename("m", rel, src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.rename(rel, rel + "x", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.rename(rel, "m", src_dir_fd=d, dst_dir_fd=d)))
    out.append(outcome(lambda: os.unlink("m", dir_fd=d)))
    for i in range(len(parts) - 1, 0, -1):
        out.append(outcome(lambda: os.rmdir("/".join(parts[:i]), dir_fd=d)))
    return out


def run_chain(root):
    """Builds the chain below ROOT through dir fds, runs the operations at
    the sampled levels, removes the chain; returns every outcome."""
    out = []
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for i in range(LEVELS):
            out.append(outcome(lambda: os.mkdir(comp(i), dir_fd=fds[-1])))
            fds.append(os.open(comp(i), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            if i in SAMPLED:
                out.append((i, level_ops(fds[-1])))
            if i in (0, 20, LEVELS - 1):
                out.append((i, long_rename_ops(fds[-1])))
        # a rename of a whole directory deep down, and back
        out.append(outcome(lambda: os.rename(comp(LEVELS - 1), "moved", src_dir_fd=fds[-2],
                                             dst_dir_fd=fds[-2])))
        out.append(outcome(lambda: os.rename("moved", comp(LEVELS - 1), src_dir_fd=fds[-2],
                                             dst_dir_fd=fds[-2])))
        for i in range(LEVELS - 1, -1, -1):
            os.close(fds.pop())
            out.append(outcome(lambda: os.rmdir(comp(i), dir_fd=fds[-1])))
    finally:
        for fd in fds:
            os.close(fd)
    return out


def native(tmp_path):
    ref = tmp_path / "native"
    ref.mkdir()
    return run_chain(str(ref))


def check_chain(m, tmp_path):
    want = native(tmp_path)
    got = run_chain(m.mnt)
    assert got == want
    assert os.listdir(m.backing) == []
    # every level's ops succeeded natively: the reference is a real one
    assert all(o[0] == "ok" for lvl in want if isinstance(lvl[0], int)
               for o in lvl[1][:-1] if o[1] != "ENAMETOOLONG")


def placed_deep_then_removed(m):
    """A chain put in place through the backing directory, removed through
    the mount by fds (shutil.rmtree walks with dir_fd, as rm -rf does)."""
    fd = os.open(m.backing, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(LEVELS):
            os.mkdir(comp(i), dir_fd=fd)
            nfd = os.open(comp(i), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(os.open("file", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=nfd))
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    shutil.rmtree(m.path(comp(0)))
    assert os.listdir(m.backing) == []


@pytest.mark.parametrize("scope", ["rename", "namespace"])
def test_deep__mem_store_as_native(mount_factory, tmp_path, scope):
    m = mount_factory(opts=["lock_scope=" + scope])
    check_chain(m, tmp_path)
    placed_deep_then_removed(m)
    assert m.locks() == []


@pytest.mark.parametrize("scope", ["rename", "namespace"])
def test_deep__es_store_as_native(mount_factory, tmp_path, emu, scope):  # noqa: F811
    m = mount_factory(opts=es_opts(emu, "A", "lock_scope=" + scope, lease_ttl=10))
    check_chain(m, tmp_path)
    placed_deep_then_removed(m)
    assert m.locks() == []


@pytest.mark.parametrize("strategy", ["document", "global"])
def test_deep__other_strategies_as_native(mount_factory, tmp_path, strategy):
    m = mount_factory(opts=["lock_strategy=" + strategy, "lock_scope=namespace"])
    check_chain(m, tmp_path)


def deleted_name_ops(root):
    out = []
    d = os.path.join(root, "x (deleted)")
    out.append(outcome(lambda: os.mkdir(d)))
    out.append(outcome(lambda: os.mkdir(os.path.join(d, "y (deleted)"))))
    out.append(outcome(lambda: open(os.path.join(d, "a"), "w").close()))
    out.append(outcome(lambda: os.rename(os.path.join(d, "a"), os.path.join(d, "b"))))
    out.append(outcome(lambda: os.rename(os.path.join(d, "b"),
                                         os.path.join(d, "y (deleted)", "c"))))
    out.append(outcome(lambda: os.rename(os.path.join(d, "y (deleted)", "c"),
                                         os.path.join(root, "c"))))
    out.append(outcome(lambda: os.rename(os.path.join(d, "y (deleted)"), os.path.join(d, "z"))))
    out.append(outcome(lambda: os.unlink(os.path.join(root, "c"))))
    out.append(outcome(lambda: sorted(os.listdir(d))))
    # a directory that really is removed, by an fd kept open on it
    gone = os.path.join(root, "gone")
    os.mkdir(gone)
    fd = os.open(gone, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(gone)
        out.append(outcome(lambda: os.rename("p", "q", src_dir_fd=fd, dst_dir_fd=fd)))
        out.append(outcome(lambda: os.mkdir("p", dir_fd=fd)))
        out.append(outcome(lambda: os.close(os.open("p", os.O_CREAT | os.O_WRONLY, 0o644,
                                                    dir_fd=fd))))
    finally:
        os.close(fd)
    out.append(outcome(lambda: shutil.rmtree(d)))
    return out


@pytest.mark.parametrize("scope", ["rename", "namespace"])
def test_deep__dir_named_deleted_as_native(mount_factory, tmp_path, scope):
    m = mount_factory(opts=["lock_scope=" + scope])
    ref = tmp_path / "native"
    ref.mkdir()
    want = deleted_name_ops(str(ref))
    assert want[3] == ("ok", None) and want[9][0] == "err"
    assert deleted_name_ops(m.mnt) == want
