"""A random rename storm loses nothing and leaves no locks.

Eight processes rename random files and directories (RENAME_NOREPLACE and
RENAME_EXCHANGE, which never drop a file) within a small tree for a few seconds. Every file holds a unique
token; afterwards the multiset of contents is the same, the mount and the
backing tree agree, and no lock is left.
"""
import collections
import ctypes
import errno
import multiprocessing
import os
import random
import time

import pytest

DURATION = 6.0
WORKERS = 8
_OK_ERRORS = {errno.ENOENT, errno.EINVAL, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR,
              errno.EISDIR, errno.EBUSY}


def build_tree(root):
    tokens = []
    n = 0
    for top in ("a", "b", "c"):
        for sub in ("", "x", "x/y", "z"):
            d = os.path.join(root, top, sub)
            os.makedirs(d, exist_ok=True)
            for _ in range(3):
                tok = "token-%04d\n" % n
                with open(os.path.join(d, "f%d" % n), "w") as f:
                    f.write(tok)
                tokens.append(tok)
                n += 1
    return tokens


def contents(root):
    found = collections.Counter()
    dirs = set()
    for p, ds, fs in os.walk(root):
        for d in ds:
            dirs.add(os.path.relpath(os.path.join(p, d), root))
        for n in fs:
            with open(os.path.join(p, n)) as f:
                found[(os.path.relpath(os.path.join(p, n), root), f.read())] += 1
    return found, dirs


def worker(root, seed, deadline, q, ok_errors=_OK_ERRORS):
    libc = ctypes.CDLL(None, use_errno=True)
    rnd = random.Random(seed)
    done = errs = 0
    names = ["n%d" % i for i in range(12)]
    while time.time() < deadline:
        entries = []
        dirs = [root]
        for p, ds, fs in os.walk(root):
            dirs += [os.path.join(p, d) for d in ds]
            entries += [os.path.join(p, n) for n in ds + fs]
        if not entries:
            continue
        src = rnd.choice(entries)
        dst = os.path.join(rnd.choice(dirs), rnd.choice(names + [os.path.basename(src)]))
        # a plain rename over a file would drop it, by design: NOREPLACE
        # and EXCHANGE keep every file
        flags = rnd.choice([1, 1, 2])
        res = libc.renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), flags)
        if res == 0:
            done += 1
        else:
            e = ctypes.get_errno()
            if e not in ok_errors:
                q.put(("unexpected", src, dst, flags, errno.errorcode.get(e, e)))
                return
            errs += 1
    q.put(("ok", done, errs))


@pytest.mark.parametrize("strategy", ["tree"])
def test_storm__random_renames_lose_nothing(mount_factory, strategy):
    m = mount_factory(opts=["lock_strategy=" + strategy])
    tokens = build_tree(m.mnt)
    deadline = time.time() + DURATION
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker, args=(m.mnt, i, deadline, q))
             for i in range(WORKERS)]
    for p in procs:
        p.start()
    results = [q.get(timeout=DURATION + 60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    bad = [r for r in results if r[0] != "ok"]
    assert not bad, bad
    renamed = sum(r[1] for r in results)
    assert renamed > 100, results
    via_mount, mdirs = contents(m.mnt)
    via_backing, bdirs = contents(m.bpath())
    assert via_mount == via_backing
    assert mdirs == bdirs
    assert sorted(tok for (_, tok), n in via_mount.items() for _ in range(n)) == sorted(tokens)
    assert m.locks() == []
    st = m.stats()
    # a rename of a name onto itself never reaches the filesystem
    assert renamed * 0.9 <= st["renames"] <= renamed + sum(r[2] for r in results)
    assert st["timeouts"] == 0 and st["errors"] == 0
