"""A random rename storm loses nothing and leaves no locks.

Eight processes rename random files and directories (RENAME_NOREPLACE and
RENAME_EXCHANGE, which never drop a file) within a small tree for a few
seconds, and on until they have done enough renames to tell (a busy machine
makes the storm longer, never the test fail). Every file holds a unique
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
# how much longer than asked a storm may run to reach its count of renames
OVERTIME = 240
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


def worker(root, seed, deadline, q, ok_errors=_OK_ERRORS, min_done=0):
    """Renames at random below ROOT until DEADLINE (time.monotonic()) has
    passed and it has done MIN_DONE renames (at most OVERTIME seconds more);
    puts ("ok", renames, refusals) on Q, or what was unexpected."""
    libc = ctypes.CDLL(None, use_errno=True)
    rnd = random.Random(seed)
    done = errs = 0
    names = ["n%d" % i for i in range(12)]
    while True:
        now = time.monotonic()
        if now >= deadline + OVERTIME or (now >= deadline and done >= min_done):
            break
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


def storm(roots, per_root, seconds, min_renames=0, ok_errors=_OK_ERRORS, during=None):
    """PER_ROOT worker processes on each of ROOTS renaming for SECONDS and
    on until together they have done MIN_RENAMES (each its share; at most
    OVERTIME seconds more); DURING() runs in this process meanwhile.
    Returns the workers' results, all of them ("ok", renames, refusals)."""
    deadline = time.monotonic() + seconds
    n = per_root * len(roots)
    share = -(-min_renames // n)
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker, args=(root, 100 * k + i, deadline, q,
                                                          ok_errors, share))
             for k, root in enumerate(roots) for i in range(per_root)]
    for p in procs:
        p.start()
    if during:
        during()
    results = [q.get(timeout=seconds + OVERTIME + 120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    bad = [r for r in results if r[0] != "ok"]
    assert not bad, bad
    return results


@pytest.mark.parametrize("strategy", ["tree"])
def test_storm__random_renames_lose_nothing(mount_factory, strategy):
    m = mount_factory(opts=["lock_strategy=" + strategy])
    tokens = build_tree(m.mnt)
    results = storm([m.mnt], WORKERS, DURATION, min_renames=101)
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
