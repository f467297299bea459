"""treelockctl index build / verify / repair and treelockctl find.

The fs index of a mount (es_fsdoc.h) held against its tree: a crawl
builds it, verify lists what differs (a change made in the backing
directory behind the mount's back) and --repair fixes it, repair from the
store reconciles the paths of a dead owner's intents; find answers find's
questions from it, as find on the backing directory would, and shows a
user only what that user could reach by walking the tree.
"""
import json
import os
import subprocess
import time

import pytest

from conftest import CTL, open_tree
from es_helpers import INDEX, emu, emu_module, es_mounts, es_request, wait_for  # noqa: F401

FSIDX = "fsidx"
USER = 4242


def ctl(*args, user=None, timeout=120):
    kw = {}
    if user is not None:
        def drop():
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
        kw["preexec_fn"] = drop
    return subprocess.run([CTL] + list(args), capture_output=True, text=True, timeout=timeout,
                          **kw)


def index_cmd(m, *args):
    """treelockctl index ARGS on mount M: its fs index found from its options."""
    return ctl("index", args[0], str(m.mnt), *args[1:])


def settled(m):
    """Waits until the index agrees with the tree (a build and what the
    mount indexes of its own)."""
    wait_for(lambda: index_cmd(m, "verify").returncode == 0, timeout=120,
             what="the index to agree with the tree")


def find(m, *args, user=None):
    r = ctl("find", str(m.mnt), *args, "--index", FSIDX, user=user)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.splitlines())


def native_find(m, sub, *args):
    """What find(1) prints on the backing directory, as paths under the mount."""
    start = os.path.join(str(m.backing), sub) if sub else str(m.backing)
    r = subprocess.run(["find", start] + list(args), capture_output=True, text=True, check=True)
    return {str(m.mnt) + line[len(str(m.backing)):] for line in r.stdout.splitlines()}


@pytest.fixture
def fsmount(emu, es_mounts):  # noqa: F811
    (m,) = es_mounts(emu, "A", lease_ttl=60, opts={"A": ["fs_index=" + FSIDX]})
    return m


def make_tree(root):
    j = lambda *p: os.path.join(root, *p)  # noqa: E731
    os.makedirs(j("a", "b"))
    os.makedirs(j("c"))
    for rel, size in (("a/f1.txt", 0), ("a/f2.txt", 3), ("a/b/big.bin", 5000),
                      ("c/notes.md", 1024), ("c/f10.txt", 1025), ("top", 600)):
        with open(j(rel), "wb") as f:
            f.write(b"x" * size)
    os.symlink("a/f1.txt", j("link"))
    old = time.time() - 3 * 86400 - 600
    os.utime(j("c/notes.md"), (old, old))
    os.chown(j("a/f2.txt"), USER, USER)


def test_build_verify_repair(fsmount):
    m = fsmount
    # made in the backing directory: the mount has no notes of it that
    # could arrive late and repair what the test changes behind its back
    make_tree(str(m.backing))
    r = index_cmd(m, "build")
    assert r.returncode == 0, r.stderr
    assert "indexed 11 entries" in r.stdout and "through the backing directory" in r.stdout
    settled(m)
    # behind the mount's back
    b = str(m.backing)
    with open(os.path.join(b, "c", "new"), "w") as f:
        f.write("n")
    os.unlink(os.path.join(b, "a", "f1.txt"))
    os.chmod(os.path.join(b, "top"), 0o600)
    r = index_cmd(m, "verify")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    mnt = str(m.mnt)
    assert "missing  %s/c/new" % mnt in lines
    assert "extra    %s/a/f1.txt" % mnt in lines
    assert any(line.startswith("differs  %s/top  mode 0600 (index 0644)" % mnt) for line in lines)
    r = index_cmd(m, "verify", "--json")
    assert r.returncode == 1
    got = {(d["difference"], d["path"]) for d in json.loads(r.stdout)}
    assert {("missing", mnt + "/c/new"), ("extra", mnt + "/a/f1.txt"),
            ("differs", mnt + "/top")} <= got
    r = index_cmd(m, "verify", "--repair")
    assert r.returncode == 0, r.stderr
    r = index_cmd(m, "verify")
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr
    # a build again deletes what it did not see
    os.unlink(os.path.join(b, "c", "new"))
    r = index_cmd(m, "build", "c", "--quiet")
    assert r.returncode == 0 and "1 stale documents deleted" in r.stdout, r.stdout + r.stderr
    assert index_cmd(m, "verify").returncode == 0


def test_find_as_find(fsmount):
    m = fsmount
    make_tree(str(m.mnt))
    assert index_cmd(m, "build", "--quiet").returncode == 0
    mnt, b = str(m.mnt), str(m.backing)
    cases = [
        [],
        ["-name", "*.txt"],
        ["-name", "f[12]*"],
        ["-name", "top"],
        ["-path", mnt + "/a/*"],
        ["-path", "*/b/*"],
        ["-path", "*/[ab]"],
        ["-type", "d"],
        ["-type", "f,l"],
        ["-size", "+1k"],
        ["-size", "-1k"],
        ["-size", "3c"],
        ["-size", "2k"],
        ["-size", "10"],
        ["-mtime", "+2"],
        ["-mtime", "-1"],
        ["-mtime", "3"],
        ["-user", str(USER)],
        ["-type", "f", "-size", "+0", "-name", "f*"],
    ]
    for args in cases:
        nat = [a.replace(mnt, b) for a in args]
        assert find(m, *args) == native_find(m, "", *nat), args
    assert find(m, "a", "-type", "f") == native_find(m, "a", "-type", "f")
    r = ctl("find", mnt, "-name", "*.txt", "--json", "--index", FSIDX)
    assert r.returncode == 0, r.stderr
    docs = json.loads(r.stdout)
    assert {d["path"] for d in docs} == native_find(m, "", "-name", "*.txt")
    f2 = [d for d in docs if d["path"].endswith("/a/f2.txt")][0]
    assert (f2["type"], f2["size"], f2["uid"], f2["mode"]) == ("f", 3, USER, 0o644)
    r = ctl("find", mnt, "-size", "x", "--index", FSIDX)
    assert r.returncode == 1 and "invalid argument" in r.stderr


@pytest.fixture
def shared_fsmount(emu, es_mounts, tmp_path):  # noqa: F811
    open_tree(tmp_path)
    (m,) = es_mounts(emu, "A", lease_ttl=60, opts={"A": ["allow_other", "fs_index=" + FSIDX]})
    os.chmod(m.mnt, 0o755)
    return m


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_find_shows_only_what_a_user_can_walk(shared_fsmount):
    m = shared_fsmount
    mnt = str(m.mnt)
    for d, mode in (("pub", 0o755), ("secret", 0o711), ("closed", 0o700)):
        os.mkdir(os.path.join(mnt, d))
        os.chmod(os.path.join(mnt, d), mode)
        with open(os.path.join(mnt, d, "x"), "w") as f:
            f.write("x")
    assert index_cmd(m, "build", "--quiet").returncode == 0
    root = find(m, "-name", "x")
    assert root == {mnt + "/pub/x", mnt + "/secret/x", mnt + "/closed/x"}
    # search without read (0711) is no walk: find cannot list it either
    assert find(m, "-name", "x", user=USER) == {mnt + "/pub/x"}
    assert mnt + "/closed" in find(m, user=USER)


def test_repair_from_a_dead_owners_intent(fsmount, emu):  # noqa: F811
    m = fsmount
    mnt, b = str(m.mnt), str(m.backing)
    os.makedirs(os.path.join(b, "d1", "sub"))
    for n in ("p", "sub/q"):
        with open(os.path.join(b, "d1", n), "w") as f:
            f.write("z")
    assert index_cmd(m, "build", "--quiet").returncode == 0
    settled(m)
    # a rename whose mount died before its index followed: the tree moved,
    # its intent is left in the lock index, as the store writes one, of an
    # owner that has no lease document (dead)
    os.rename(os.path.join(b, "d1"), os.path.join(b, "d2"))
    owner = "gone:4242:abcd"
    st, _ = es_request(emu, "PUT", "/%s/_doc/intent:%s%%231?refresh=true" % (INDEX, owner),
                       {"type": "intent", "owner": owner, "name": "gone", "from": "/d1",
                        "to": "/d2", "start": int(time.time() * 1000), "pid": 4242})
    assert st in (200, 201)
    assert index_cmd(m, "verify").returncode == 1
    r = index_cmd(m, "repair", "--no-wait")
    assert r.returncode == 0, r.stderr
    assert "reconciled %s/d1: 0 entries indexed, 4 stale documents deleted" % mnt in r.stdout
    assert "reconciled %s/d2: 4 entries indexed" % mnt in r.stdout
    assert "1 intents of dead owners reconciled" in r.stdout
    r = index_cmd(m, "verify")
    assert (r.returncode, r.stdout) == (0, ""), r.stdout
    assert find(m, "-name", "q") == {mnt + "/d2/sub/q"}


def test_the_mount_names_its_index(emu, es_mounts, tmp_path):  # noqa: F811
    (m, n) = es_mounts(emu, "A", "B", lease_ttl=60, opts={"B": ["fsname=elsewhere"]})
    r = index_cmd(m, "build")
    assert r.returncode == 1 and "has no fs index (fs_index=NAME)" in r.stderr, r.stderr
    r = ctl("index", "build", str(m.mnt), "--index", FSIDX, "--quiet")
    assert r.returncode == 0, r.stderr
    r = ctl("find", str(tmp_path), "--index", FSIDX)
    assert r.returncode == 1 and "is not a treelockfs mount" in r.stderr, r.stderr
    r = ctl("find", str(m.mnt), "nowhere", "--index", FSIDX)
    assert r.returncode == 1 and "not in fs index" in r.stderr, r.stderr
    # a mount whose source names no directory: its tree is read through it
    os.makedirs(os.path.join(str(n.mnt), "x", "y"))
    r = ctl("index", "build", str(n.mnt), "--index", FSIDX)
    assert r.returncode == 0 and "indexed 3 entries" in r.stdout, r.stdout + r.stderr
    assert "through the mount" in r.stdout and "through the mount" in r.stderr
    r = ctl("index", "verify", str(n.mnt), "--index", FSIDX)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout


def test_names_any_bytes(fsmount):
    """A name with a newline, one that is not UTF-8: indexed (bytes: form),
    found by globs, printed escaped, one line each."""
    m = fsmount
    b = os.fsencode(str(m.backing))
    os.mkdir(b + b"/odd")
    for name in (b"new\nline.txt", b"caf\xe9.txt", b"plain.txt"):
        with open(b + b"/odd/" + name, "wb") as f:
            f.write(b"x")
    r = index_cmd(m, "build", "--quiet")
    assert r.returncode == 0, r.stderr
    assert index_cmd(m, "verify").returncode == 0
    mnt = str(m.mnt)
    assert find(m, "odd", "-name", "*.txt") == {mnt + "/odd/new\\x0aline.txt",
                                                mnt + "/odd/caf\\xe9.txt", mnt + "/odd/plain.txt"}
    assert find(m, "-name", "caf?.txt") == {mnt + "/odd/caf\\xe9.txt"}
    assert find(m, "-path", mnt + "/odd/new*") == {mnt + "/odd/new\\x0aline.txt"}
    os.unlink(b + b"/odd/caf\xe9.txt")
    r = index_cmd(m, "verify")
    assert r.returncode == 1
    assert "extra    %s/odd/caf\\xe9.txt" % mnt in r.stdout.splitlines(), r.stdout
