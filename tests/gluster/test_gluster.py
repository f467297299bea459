"""Two hosts over one GlusterFS volume: where tree locks save a distributed
namespace.

A distributed volume of four bricks; two FUSE clients of it are two hosts.
From each host at once: top-level directories renamed back and forth
(X <-> X_), directories moved into one another (a top-level directory
into another one, while the other host may be moving that one into this
one) and back out to the top, files renamed inside their directory or
into another one. Every file holds a unique token. Afterwards the volume
is audited through a fresh client (each file exactly once by content, no
directory met twice) and on every brick (no directory gfid at two paths,
every directory on every brick, no directory on a cycle, layouts covering
the hash range once, each file's data exactly once).

Bare GlusterFS is the control: measured and printed, not asserted (DHT
renames a directory brick by brick, so two crossing moves can land in
different orders on different bricks). Through treelockfs on each host
(lock_store=es, the clients' caches off) no run may show damage, also when
one host's treelockfs is killed -9 mid-storm and the lock store pauses.

TREELOCKFS_GLUSTER_SECONDS sets each storm's length (default 15),
TREELOCKFS_GLUSTER_ROUNDS the storms of each kind (default 1; 2 through
treelockfs).
"""
import os
import signal
import time

import pytest

import gluster
from mounts import detach, wait_for

SECONDS = float(os.environ.get("TREELOCKFS_GLUSTER_SECONDS", "15"))
ROUNDS = int(os.environ.get("TREELOCKFS_GLUSTER_ROUNDS", "0"))
_names = iter("v%d" % i for i in range(1, 10000))


# each kind of rename succeeds this often (over both hosts) before a storm
# ends: a busy machine makes the storm longer, not emptier
MIN_DONE = 5


def run(glusterd, tmp_path, mode, seconds=SECONDS, **kw):
    r = gluster.one_run(glusterd, tmp_path, next(_names), mode, seconds, min_done=MIN_DONE,
                        **kw)
    print("\n" + gluster.describe(r))
    for k, v in r["audit"]["bricks"]["examples"].items():
        if v:
            print("   e.g. %s: %r" % (k, v))
    return r


def storm_did_its_work(r):
    """Enough of each kind of rename succeeded for the audit to mean
    something (the storm goes on until they did, for minutes if need be)."""
    done = {k: v[0] for k, v in r["renames"].items()}
    assert all(done.get(k, 0) >= MIN_DONE for k in ("flipper", "nester", "files")), \
        "too few renames to tell: %r" % r["renames"]


# ---- the audit itself, on bricks made by hand ---------------------------------------

def _dir(brick, rel, gfid, layout):
    p = os.path.join(brick, rel)
    os.makedirs(p, exist_ok=True)
    os.setxattr(p, "trusted.gfid", gfid)
    if layout is not None:
        os.setxattr(p, "trusted.glusterfs.dht", (0).to_bytes(8, "big")
                    + layout[0].to_bytes(4, "big") + layout[1].to_bytes(4, "big"))


def _file(brick, rel, body, linkto=False):
    with open(os.path.join(brick, rel), "w") as f:
        f.write(body)
    if linkto:
        os.setxattr(os.path.join(brick, rel), "trusted.glusterfs.dht.linkto", b"v-client-0\0")


QUARTERS = [(0, 0x3fffffff), (0x40000000, 0x7fffffff), (0x80000000, 0xbfffffff),
            (0xc0000000, 0xffffffff)]
G = {n: bytes([i + 1]) * 16 for i, n in enumerate("rxyzw")}


def _clean_bricks(tmp_path):
    """Four bricks of one healthy tree: /x, /x/y, files a and b."""
    bricks = []
    for i in range(4):
        b = str(tmp_path / ("b%d" % i))
        _dir(b, "", G["r"], QUARTERS[i])
        _dir(b, "x", G["x"], QUARTERS[(i + 1) % 4])
        _dir(b, "x/y", G["y"], QUARTERS[(i + 2) % 4])
        bricks.append(b)
    _file(bricks[0], "x/a", "tok-a")
    _file(bricks[2], "x/y/b", "tok-b")
    _file(bricks[3], "x/y/b", "", linkto=True)      # a DHT link file, not data
    return bricks


def test_audit__a_healthy_tree_shows_no_damage(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not root (trusted.* extended attributes)")
    v = gluster.brick_view(_clean_bricks(tmp_path), {"tok-a", "tok-b"})
    assert {k: v[k] for k in gluster.DAMAGE_KEYS} == dict.fromkeys(gluster.DAMAGE_KEYS, 0), v
    assert (v["dirs"], v["files"], v["link_files"]) == (3, 2, 1)


def test_audit__each_kind_of_damage_is_counted(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not root (trusted.* extended attributes)")
    bricks = _clean_bricks(tmp_path)
    # /z on bricks 0 and 1 only; /x/y moved into /z on brick 0 (its gfid at
    # two paths); /w inside /x on bricks 0-1 and /x inside /w on 2-3 (a
    # cycle: crossing moves landed in different orders)
    _dir(bricks[0], "z", G["z"], QUARTERS[0])
    _dir(bricks[1], "z", G["z"], QUARTERS[1])
    os.rename(os.path.join(bricks[0], "x/y"), os.path.join(bricks[0], "z/y"))
    for i in range(4):
        if i < 2:
            _dir(bricks[i], "x/w", G["w"], QUARTERS[i])
        else:
            os.rename(os.path.join(bricks[i], "x"), os.path.join(bricks[i], "xw"))
            _dir(bricks[i], "w", G["w"], QUARTERS[i])
            os.rename(os.path.join(bricks[i], "xw"), os.path.join(bricks[i], "w/x"))
    # the root's layout with a hole on brick 3; a file's data twice; a token lost
    os.setxattr(bricks[3], "trusted.glusterfs.dht", bytes(8) + (0xd0000000).to_bytes(4, "big")
                + (0xffffffff).to_bytes(4, "big"))
    _file(bricks[1], "x/a2", "tok-a")
    v = gluster.brick_view(bricks, {"tok-a", "tok-b", "tok-c"})
    assert v["gfid_two_paths"] >= 3, v         # y, and x and w on both sides of the cycle
    assert v["partial_dirs"] >= 3, v           # /z, and the moved paths
    assert v["bad_layouts"] == 1, v            # the root
    assert v["cycles"] == 2, v                 # x and w
    assert (v["files_twice"], v["files_lost"]) == (1, 1), v


def test_audit__a_client_walk_counts_files_by_content(tmp_path):
    for d in ("a", "b/c"):
        os.makedirs(tmp_path / d)
    for rel, body in (("a/1", "t1"), ("b/2", "t2"), ("b/c/3", "t2"), ("b/4", "junk")):
        (tmp_path / rel).write_text(body)
    v = gluster.client_view(str(tmp_path), {"t1", "t2", "t3"})
    assert (v["unreachable"], v["duplicated"], v["foreign"], v["files"], v["dirs"]) == \
        (1, 1, 1, 4, 3), v


# ---- storms on a real volume --------------------------------------------------------

@pytest.mark.parametrize("mode", ["bare", "bare-nocache"])
def test_gluster__bare_the_control(glusterd, tmp_path, mode):
    """Bare GlusterFS, default client caches and caches off: the damage is
    printed, not asserted."""
    damaged = 0
    rounds = ROUNDS or 1
    for _ in range(rounds):
        r = run(glusterd, tmp_path, mode)
        storm_did_its_work(r)
        damaged += bool(r["damage"])
    print("%s: %d of %d storms damaged the volume" % (mode, damaged, rounds))


def test_gluster__through_treelockfs_no_damage(glusterd, tmp_path, make_tl):
    rounds = ROUNDS or 2
    for _ in range(rounds):
        tls = []

        def make(backing, owner):
            tls.append(make_tl(backing, owner))
            return tls[-1]
        r = run(glusterd, tmp_path, "treelockfs", make_tl=make)
        storm_did_its_work(r)
        assert r["damage"] == {}, r["audit"]
        assert r["audit"]["client"]["errors"] == {}, r["audit"]["client"]
        for m in tls:
            assert m.proc is None      # one_run stopped it, and it exited 0
    print("treelockfs: 0 of %d storms damaged the volume" % rounds)


def test_gluster__nemesis_a_host_killed_and_the_store_paused(glusterd, tmp_path, make_tl,
                                                             store):
    """Host A's treelockfs is killed -9 once it has renamed mid-storm and
    mounted again (same owner: its locks in the store are the old
    process's until its lease ends); then the lock store pauses for 3 s.
    The storm is 10 s longer than the others, for the renames after the
    faults. No damage."""
    events = []

    def during(tls):
        a = tls[0]
        # the storm goes on until this returns
        wait_for(lambda: a.stats()["renames"] >= 3, 300, step=0.05,
                 what="host A's first renames")
        backing = a.backing
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(timeout=30)
        a.proc = None
        detach(a.mnt)
        events.append(("killed", time.monotonic()))
        tls[0] = make_tl(backing, "hostA")
        events.append(("mounted again", time.monotonic()))
        store.pause()
        try:
            time.sleep(3)      # the length of the fault, not a wait for an event
        finally:
            store.resume()
        events.append(("store resumed", time.monotonic()))

    r = run(glusterd, tmp_path, "treelockfs", SECONDS + 10, make_tl=make_tl, during=during)
    t0 = events[0][1]
    print("nemesis: %s" % ", ".join("%s at +%.1f s" % (e, t - t0) for e, t in events))
    assert [e for e, _ in events] == ["killed", "mounted again", "store resumed"]
    storm_did_its_work(r)
    assert r["damage"] == {}, r["audit"]
    assert r["audit"]["client"]["errors"] == {}, r["audit"]["client"]
