"""A real 3-node OpenSearch cluster (2.19 and 3.x) loses the node holding the
lock index's primary shard (kill -9 of its JVM) in the middle of a two-mount rename storm.

Two treelockfs mounts of one backing directory use lock_store=es with the
three nodes' URLs: mount A lists the victim first (its own requests die
with the node), mount B lists it last (its node forwards to the primary). Threads on both mounts move files and directories between
directories; every rename is logged with its start, end and errno. Entities
keep their (unique) names for their whole life and each is moved by one
thread only, so the parent directory an entity's last successful rename put
it in is where it must be at the end, whatever happened to the directories
around it.

Afterwards: the multiset of file contents is unchanged (nothing lost or
duplicated), every entity sits in the directory its last successful rename
put it in, both mounts unmount cleanly (exit 0), and no lock, waiter mark or
intent document is left in the index.

The failover window is measured and printed (one line starting with
"failover:"). A probe thread on mount B renames one file back and forth
in a directory no storm thread touches (uncontended: the store's own
latency). The window runs from the kill until the first probe rename that
started after the kill has succeeded (an upper bound: it includes that
rename's own latency). Printed: the window, the probe rename in flight
across the kill, the probe's latency before the kill and its first renames
after it, storm renames ended in the window and errors by errno, and the
longest time without any storm rename completing before and after the kill.
TREELOCKFS_FAILOVER_REPORT=FILE also writes them as JSON.

Environment: ENGINE_HEAP (default here 384m), TREELOCKFS_FAILOVER_SECONDS
(storm length, default 30; the kill comes after a third of it),
TREELOCKFS_BACKENDS (where set, only the engines it names run).
"""
import collections
import errno
import importlib.util
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "tlfs_integration_conftest", os.path.join(SRCDIR, "tests", "integration", "conftest.py"))
_itest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_itest)
Mount = _itest.Mount
from mounts import stop_process  # noqa: E402 (tests/, on the path since the conftest)
import backends  # noqa: E402

INDEX = "treelockfs-locks"
STORM_SECONDS = float(os.environ.get("TREELOCKFS_FAILOVER_SECONDS", "30"))
THREADS_PER_MOUNT = 3
NDIRS, NFILES = 10, 40
# errors a rename storm over two mounts produces with or without a failover:
# moves into one's own subtree (EINVAL), names the other mount moved away
# (ENOENT; ESTALE, ELOOP from this kernel's cached view of them)
STORM_ERRORS = {errno.ENOENT, errno.EINVAL, errno.ESTALE, errno.ELOOP, errno.ENOTEMPTY,
                errno.EEXIST}
# errors the store itself returns while it cannot reach a primary
STORE_ERRORS = {errno.ENOLCK, errno.EBUSY}


def http(port, method, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def failover_engines():
    """The engines whose clusters the test kills a node of: those of
    TREELOCKFS_BACKENDS among OpenSearch 2 and 3; by default the current
    major alone (each cluster costs minutes), or OpenSearch 2 where no
    Java 21 is found."""
    both = ["opensearch", "opensearch3"]
    if os.environ.get("TREELOCKFS_BACKENDS", "").strip():
        return [e for e in backends.selected()[0] if e in both]
    return ["opensearch" if backends.engines_available("opensearch3") else "opensearch3"]


class Cluster:
    """tests/engines/start ENGINE --nodes N in DATA; only its own JVMs
    (DATA/node-K.pid) are ever killed."""

    def __init__(self, data, nodes=3, engine="opensearch"):
        self.engine = engine
        self.data = str(data)
        self.nodes = nodes
        self.port_file = os.path.join(self.data, "http-ports")
        self.dead = set()

    def start(self, timeout=420):
        # generous: three JVMs starting at once on a busy two-core machine
        env = dict(os.environ)
        env.setdefault("ENGINE_HEAP", "384m")
        env.setdefault("ENGINE_START_TIMEOUT", str(timeout - 20))
        self.log = open(self.data + ".start.log", "ab")
        self.proc = subprocess.Popen(
            [os.path.join(HERE, "start"), self.engine, "--nodes", str(self.nodes),
             "--port-file", self.port_file, "--data", self.data],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None:
                pytest.fail("the cluster did not start:\n" + open(self.data + ".start.log").read())
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail("the cluster did not start within %ds" % timeout)
            time.sleep(0.2)
        with open(self.port_file) as f:
            self.ports = [int(l) for l in f.read().split()]
        assert len(self.ports) == self.nodes
        return self

    def live_port(self):
        return next(p for k, p in enumerate(self.ports, 1) if k not in self.dead)

    def urls(self):
        return ";".join("http://127.0.0.1:%d" % p for p in self.ports)

    def get(self, path, **kw):
        return http(self.live_port(), "GET", path, **kw)

    def primary_node(self, index):
        shards = self.get("/_cat/shards/%s?format=json" % index)
        prim = [s for s in shards if s["prirep"] == "p" and s["state"] == "STARTED"]
        assert len(prim) == 1, shards
        return int(prim[0]["node"].rsplit("-", 1)[1])

    def kill9(self, k):
        with open(os.path.join(self.data, "node-%d.pid" % k)) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGKILL)
        self.dead.add(k)

    def stop(self):
        stop_process(self.proc, timeout=60)
        self.log.close()


@pytest.fixture(scope="module", params=failover_engines())
def cluster(request, tmp_path_factory):
    """One cluster per engine for the module: the settings test first, then
    the failover test kills one of its nodes."""
    why = backends.engines_available(request.param)
    if why:
        print("\nfailover on %s skipped: %s" % (request.param, why))
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("cluster-" + request.param), engine=request.param).start()
    yield c
    c.stop()


NO_REPLICA = "no replica on a cluster of 3 data nodes"


def ctl_check(cluster):
    r = subprocess.run([_itest.CTL, "--es_url=" + cluster.urls(), "check"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_failover__start_warns_where_the_index_has_no_replica(cluster, tmp_path):
    """On a real three-node cluster: the index a mount creates gets a
    replica (nothing to say); made again by hand without one, every start
    warns and treelockctl check says so."""
    backing = tmp_path / "backing"
    backing.mkdir()
    opts = ["lock_store=es", "es_url=" + cluster.urls(), "lease_ttl=10", "lock_timeout=30",
            "es_timeout_ms=5000"]

    def mount_log(owner):
        mnt = tmp_path / ("mnt" + owner)
        mnt.mkdir()
        m = Mount(backing, mnt, opts + ["owner=" + owner]).start(timeout=60)
        m.stop()
        return m.log()
    try:
        log = mount_log("Z")
        assert NO_REPLICA not in log, log
        health = cluster.get("/_cluster/health/%s?wait_for_status=green&timeout=60s" % INDEX,
                             timeout=70)
        assert health["status"] == "green", health
        settings = cluster.get("/%s/_settings" % INDEX)[INDEX]["settings"]["index"]
        assert settings["number_of_replicas"] == "1", settings
        assert "warning:" not in ctl_check(cluster)
        backends.recreate_without_replica("http://127.0.0.1:%d" % cluster.live_port())
        log = mount_log("Y")
        assert "lock index '%s': %s" % (INDEX, NO_REPLICA) in log, log
        assert "warning:  " + NO_REPLICA in ctl_check(cluster)
    finally:
        # the failover test starts without the index
        http(cluster.live_port(), "DELETE", "/%s?ignore_unavailable=true" % INDEX)


def build(root):
    """d0..d{NDIRS-1} at the top, f* spread over them; returns {name: parent}."""
    rnd = random.Random(7)
    where = {}
    for i in range(NDIRS):
        os.mkdir(os.path.join(root, "d%d" % i))
        where["d%d" % i] = "/"
    for i in range(NFILES):
        parent = "d%d" % rnd.randrange(NDIRS)
        with open(os.path.join(root, parent, "f%d" % i), "w") as f:
            f.write("content of f%d\n" % i)
        where["f%d" % i] = parent
    return where


def locate(root):
    """{name: parent name ('/' at the top)} and the multiset of file contents."""
    where, contents = {}, collections.Counter()
    for p, ds, fs in os.walk(root):
        rel = os.path.relpath(p, root)
        parent = "/" if rel == "." else os.path.basename(p)
        for n in ds + fs:
            if n == ".treelockfs":
                continue
            assert n not in where, "%s twice: in %s and %s" % (n, where[n], parent)
            where[n] = parent
        for n in fs:
            with open(os.path.join(p, n)) as f:
                contents[f.read()] += 1
    return where, contents


def mover(mnt, k, w, nthreads, deadline, log):
    """Moves the entities it owns (index % NTHREADS == W) into random
    directories of the tree seen through MNT, logging every rename."""
    rnd = random.Random(1000 * k + w)
    mine = [n for n in ["d%d" % i for i in range(NDIRS)] + ["f%d" % i for i in range(NFILES)]
            if int(n[1:]) % nthreads == w]
    while time.time() < deadline:
        paths = {}
        try:
            for p, ds, fs in os.walk(mnt):
                for n in ds + fs:
                    paths[n] = os.path.join(p, n)
        except OSError:
            continue
        ds = sorted(n for n in paths if n.startswith("d"))
        name = rnd.choice(mine)
        if name not in paths:
            continue
        dest = rnd.choice(ds + ["/"])
        dpath = mnt if dest == "/" else paths.get(dest)
        if dpath is None or dest == name:
            continue
        t0 = time.time()
        try:
            os.rename(paths[name], os.path.join(dpath, name))
            e = 0
        except OSError as ex:
            e = ex.errno
        log.append((t0, time.time(), k, name, dest, e))


def probe(mnt, deadline, log):
    """Uncontended renames (x <-> y in a directory no storm thread touches):
    the store's own latency, before, during and after the kill. Within one
    directory: the kernel serialises renames across directories of one
    mount (the superblock's rename mutex), so a cross-directory probe would
    queue behind the storm's renames on that mount."""
    a, b = os.path.join(mnt, "p0", "x"), os.path.join(mnt, "p0", "y")
    while time.time() < deadline:
        t0 = time.time()
        try:
            os.rename(a, b)
            e = 0
            a, b = b, a
        except OSError as ex:
            e = ex.errno
        log.append((t0, time.time(), e))
        time.sleep(0.01)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def analyse(log, plog, t_kill):
    """The failover window and what happened in it (see the docstring)."""
    before = [t1 - t0 for t0, t1, e in plog if t1 < t_kill]
    back = [t1 for t0, t1, e in plog if t0 >= t_kill and e == 0]
    assert back, "no probe rename succeeded after the kill"
    t_end = min(back)
    inwin = [r for r in log if t_kill <= r[1] <= t_end]
    pwin = [r for r in plog if t_kill <= r[1] <= t_end]

    def byname(rows):
        return dict(collections.Counter(errno.errorcode.get(e, str(e)) for e in rows if e))

    ends = sorted(r[1] for r in log)

    def longest_gap(lo, hi):
        xs = [t for t in ends if lo <= t <= hi]
        return max((b - a for a, b in zip(xs, xs[1:])), default=0.0)

    return {
        "window_s": round(t_end - t_kill, 2),
        "probe_p50_before_ms": round(1000 * pct(before, 0.5), 1),
        "probe_p99_before_ms": round(1000 * pct(before, 0.99), 1),
        "probe_across_kill_s": round(max((t1 - t0 for t0, t1, e in plog
                                          if t0 <= t_kill <= t1), default=0), 2),
        "probe_longest_after_s": round(max((t1 - t0 for t0, t1, e in plog if t1 >= t_kill),
                                           default=0), 2),
        "probe_errors": byname(r[2] for r in plog),
        "probe_renames_in_window": len(pwin),
        "probe_after_kill": [(round(t0 - t_kill, 2), round(t1 - t0, 2), e)
                             for t0, t1, e in plog if t1 >= t_kill][:8],
        "renames_in_window": len(inwin),
        "ok_in_window": sum(1 for r in inwin if r[5] == 0),
        "errors_in_window": byname(r[5] for r in inwin),
        "longest_gap_before_s": round(longest_gap(t_kill - STORM_SECONDS, t_kill), 2),
        "longest_gap_after_s": round(longest_gap(t_kill, t_kill + STORM_SECONDS), 2),
        "renames": len(log),
        "ok": sum(1 for r in log if r[5] == 0),
        "errors_all": byname(r[5] for r in log),
        "ok_after_window": sum(1 for r in log if r[0] > t_end and r[5] == 0),
    }


def index_docs(cluster):
    http(cluster.live_port(), "POST", "/%s/_refresh" % INDEX)
    res = http(cluster.live_port(), "POST", "/%s/_search" % INDEX,
               {"size": 1000, "query": {"match_all": {}}})
    return {h["_id"]: h["_source"] for h in res["hits"]["hits"]}


def test_failover__primary_killed_mid_storm(cluster, tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    opts = ["lease_ttl=10", "lock_timeout=30", "es_timeout_ms=5000"]
    # a first mount creates the index; where did its primary land?
    first = tmp_path / "mnt0"
    first.mkdir()
    Mount(backing, first, opts + ["lock_store=es", "es_url=" + cluster.urls(), "owner=Z"]
          ).start(timeout=30).stop()
    # the replica must be in sync before the primary goes
    health = cluster.get("/_cluster/health/%s?wait_for_status=green&timeout=60s" % INDEX,
                         timeout=70)
    assert health["status"] == "green", health
    victim = cluster.primary_node(INDEX)
    # A talks to the victim first (its requests die with the node), B to
    # another node (which forwards to the primary and must retry)
    urls = ["http://127.0.0.1:%d" % p for p in cluster.ports]
    order = {"A": [urls[victim - 1]] + [u for k, u in enumerate(urls, 1) if k != victim],
             "B": [u for k, u in enumerate(urls, 1) if k != victim] + [urls[victim - 1]]}
    mounts = []
    for owner in ("A", "B"):
        mnt = tmp_path / ("mnt" + owner)
        mnt.mkdir()
        mounts.append(Mount(backing, mnt, opts + [
            "lock_store=es", "es_url=" + ";".join(order[owner]), "owner=" + owner]
        ).start(timeout=30))
    try:
        expect = build(mounts[0].mnt)
        os.mkdir(mounts[0].path("p0"))
        with open(mounts[0].path("p0", "x"), "w") as f:
            f.write("the probe\n")
        _, contents0 = locate(str(backing))

        log = []
        nthreads = THREADS_PER_MOUNT * 2
        deadline = time.time() + STORM_SECONDS
        threads = [threading.Thread(target=mover, args=(m.mnt, k, k * THREADS_PER_MOUNT + i,
                                                        nthreads, deadline, log))
                   for k, m in enumerate(mounts) for i in range(THREADS_PER_MOUNT)]
        plog = []
        threads.append(threading.Thread(target=probe, args=(mounts[1].mnt, deadline, plog)))
        for t in threads:
            t.start()
        time.sleep(STORM_SECONDS / 3)
        t_kill = time.time()
        cluster.kill9(victim)
        for t in threads:
            t.join(timeout=STORM_SECONDS + 120)
            assert not t.is_alive(), "a rename hung"
        new_primary = cluster.primary_node(INDEX)
        fig = analyse(log, plog, t_kill)
        fig.update(engine=cluster.engine, killed_node=victim, new_primary=new_primary)
        print("\nfailover: " + json.dumps(fig, sort_keys=True))
        if os.environ.get("TREELOCKFS_FAILOVER_REPORT"):
            with open(os.environ["TREELOCKFS_FAILOVER_REPORT"], "w") as f:
                json.dump(fig, f, indent=1, sort_keys=True)

        unexpected = collections.Counter(
            errno.errorcode.get(r[5], str(r[5])) for r in log
            if r[5] and r[5] not in STORM_ERRORS | STORE_ERRORS)
        assert not unexpected, unexpected
        assert new_primary != victim
        assert fig["ok_after_window"] > 0, fig
        assert not [r for r in plog if r[2] not in STORE_ERRORS | {0}], plog
        assert plog[-1][2] == 0, "the probe still fails at the end: %s" % plog[-5:]

        # every successful rename is in the final tree
        for t0, t1, k, name, dest, e in sorted(log, key=lambda r: r[1]):
            if e == 0:
                expect[name] = dest
        expect["p0"] = "/"
        expect["x" if sum(1 for r in plog if r[2] == 0) % 2 == 0 else "y"] = "p0"
        where, contents = locate(str(backing))
        assert contents == contents0, "files lost or duplicated"
        moved = {n: (expect[n], where.get(n)) for n in expect if expect[n] != where.get(n)}
        assert not moved, "entities not where their last successful rename put them: %s" % moved
    finally:
        rcs = [m.stop(check=False) for m in mounts]
    assert rcs == [0, 0], "a mount did not exit cleanly:\n" + "\n".join(m.log() for m in mounts)
    left = index_docs(cluster)
    assert not left, "documents left in the index: %s" % left
