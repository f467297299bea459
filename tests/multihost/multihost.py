#!/usr/bin/python3
"""Many hosts for real: hosts in network namespaces, a nemesis, a checker.

Each host is a network namespace with a veth pair to a bridge this script
creates (and removes). The lock store (the emulator, tests/esemu, or a
real OpenSearch node, tests/engines/start, through a forwarder) listens on
the bridge's address. A host has

* its own client cache of the shared storage: a treelockfs mount of the
  one shared directory with lock_strategy=none and 1 s kernel entry and
  attribute timeouts (as an NFS client caches lookups), and
* its own treelockfs with lock_store=es over that cache, logging its lock
  holds (hold_log=FILE),

both run inside the namespace (nsenter --net: unlike `ip netns exec`,
which gives the command a mount namespace of its own, the mounts stay
visible to the workload and to fusermount3). A workload process per host
moves files and directories around through its mount and logs every
rename and its result; a nemesis meanwhile, at random times:

  cut     the host's link goes down, then up again
  pause   SIGSTOP of the host's treelockfs for longer than its lease
  kill    kill -9 of the host's treelockfs, fusermount3 -u, mount again
  engine  the lock store is killed and started again (same port, data)
  skew    the host's treelockfs is mounted again with its wall clock
          minutes off (libfaketime; skipped with the reason without it)

and, on a cluster of engine nodes (--nodes 3 or more; each node in a
namespace of its own, the mounts given every node's URL, tried in turn,
and by default lease_ttl=30, lock_timeout=60, es_timeout_ms=10000),
faults of the cluster, each lasting --cluster-fault-s seconds (by default
35-50, past the engines' fault detection of about 30 s: follower and
leader checks every 1 s, 10 s timeout, 3 tries):

  node-cut         a node's link goes down (cut from the other nodes and
                   from every mount; the majority keeps going), then up
  primary-cut      the node holding the lock index's primary shard (asked
                   at fault time, _cat/shards) is cut from the other nodes
                   and from some mounts, while at least one mount still
                   reaches it: blackhole routes in the namespaces (a
                   partial partition, no link down, no firewall needed)
  minority-mount   a node is cut from the other two, and a host's mount
                   from those two but not from it: the mount's requests
                   can reach the minority node alone
  node-pause       SIGSTOP of a node's JVM (the primary's half of the
                   time) for the fault's length, then SIGCONT
  cluster-restart  every node is killed (kill -9) and started again on
                   its data and on the ports the mounts know
                   (tests/engines/start --same-ports)
  slow-disk        the primary's node's disk (each node's home is an ext4
                   file system on a loop device of its own) is throttled
                   to 20 writes and 1 MB a second (cgroup v1 blkio of the
                   root cgroup, that device only; an fsync of 4 KB goes
                   from ~4 ms to ~300 ms); skipped with the reason
                   without loop devices or blkio throttling

With --delegations on every mount runs with delegations=on
(treelockfs(1)): each host also has directories of its own (o<host>_<k>)
where its workload moves files in bursts, which get it delegations of
them, and now and then it moves a file into or out of another host's one,
which recalls that host's delegation; and before each fault the nemesis
makes a host A take a delegation of a directory of the nemesis's own
(n<k>: two renames in it within a second) and another host B start a
rename in it, and strikes (A or B, for a fault of a host) 50 ms later,
while B waits for A's recall. The checker counts, per fault kind, the
faults that struck while a recall was under way (faults_in_recall: a
delegation held and a rename of another host needing it in its call and
without its locks yet), and the nemesis's arrangements that failed, with
why (recall_setups).

Afterwards every mount is stopped, dead owners are reaped
(treelockctl reap --dead), and checker.py judges the logs, the final tree
and what is left in the lock index.

    multihost.py run [--hosts 3] [--duration 45] [--runs 1]
                     [--engine emulator|opensearch|opensearch3|elasticsearch]
                     [--delegations on [--delegation-recall S]]
                     [--nodes 3 [--rtt-ms R] [--kinds K,K...] [--es-timeout-ms MS]]
    multihost.py limit [--pause 6]     the known limit (a rename stuck in a
                                       hung backing call), measured

Needs root, ip netns, nsenter, /dev/fuse and fusermount3; exits 77 with the
reason otherwise. Exit status 0 when the checker found no violation.
"""
import argparse
import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
ESEMU = os.path.join(SRCDIR, "tests", "esemu", "esemu.py")
ENGINE_START = os.path.join(SRCDIR, "tests", "engines", "start")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import checker  # noqa: E402
from mounts import detach, is_mounted, mounted_elsewhere, program  # noqa: E402
from mounts import unbuilt as _unbuilt  # noqa: E402

BIN = program("treelockfs")
CTL = program("treelockctl")

INDEX = "treelockfs-locks"
KINDS = ("cut", "pause", "kill", "engine", "skew")
# with --delegations on: directories of each host's own, and of the nemesis
OWN_DIRS = 6
NEMESIS_DIRS = 24
FILE_PREFIXES = "fem"
# faults of an engine cluster (--nodes 3 or more)
CLUSTER_KINDS = ("node-cut", "primary-cut", "minority-mount", "node-pause",
                 "cluster-restart", "slow-disk")
ALL_KINDS = KINDS + CLUSTER_KINDS
BLKIO = "/sys/fs/cgroup/blkio"
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1")


def mono_ns():
    return time.monotonic_ns()


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r


def unbuilt():
    """Why treelockfs or treelockctl cannot run (a broken build: the run
    fails), or None."""
    return _unbuilt(BIN, CTL)


def missing():
    """Why this machine cannot run the test (the environment), or None."""
    if os.geteuid() != 0:
        return "not root (network namespaces and mounts need it)"
    for tool, pkg in (("ip", "iproute2"), ("nsenter", "util-linux"), ("fusermount3", "fuse3")):
        if not shutil.which(tool):
            return "no %s (Debian package %s)" % (tool, pkg)
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    probe = "tlmhp%d" % (os.getpid() % 100000)
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns does not work here: %s" % r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def cannot_run():
    """The exit status of a command that cannot run here, having said why:
    1 for a broken build, 77 (skipped) for a missing environment; None
    when it can run."""
    why = unbuilt()
    if why:
        print("multihost failed: broken build: " + why)
        return 1
    why = missing()
    if why:
        print("multihost skipped: " + why)
        return 77
    return None


def faketime_lib():
    for p in FAKETIME_LIBS:
        if os.path.exists(p):
            return p
    return None


def unmount(path):
    """fusermount3 -u of PATH (ours), lazily when busy."""
    detach(path)


class Net(object):
    """A bridge, and a namespace per host with a veth pair to it."""

    def __init__(self, nhosts):
        tag = "%04x" % (os.getpid() & 0xffff)
        self.bridge = "tlmh%sb" % tag
        self.ns = ["tlmh%s-%d" % (tag, i) for i in range(nhosts)]
        self.veth = ["tlmh%sv%d" % (tag, i) for i in range(nhosts)]
        self.subnet = self._free_subnet()
        self.addr = self.subnet + ".1"
        self.made = []
        self.dropped = []     # (namespace index, address) blackholed now

    @staticmethod
    def _free_subnet():
        used = sh("ip", "-4", "-o", "addr").stdout + sh("ip", "-4", "route").stdout
        rnd = random.Random(os.getpid())
        for _ in range(200):
            s = "10.%d.%d" % (rnd.randrange(64, 250), rnd.randrange(1, 250))
            if s + "." not in used:
                return s
        raise RuntimeError("no free 10.x.y.0/24 subnet")

    def host_addr(self, i):
        return "%s.%d" % (self.subnet, 10 + i)

    def up(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        sh("ip", "addr", "add", self.addr + "/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, (ns, veth) in enumerate(zip(self.ns, self.veth)):
            sh("ip", "netns", "add", ns)
            self.made.append(("netns", ns))
            peer = veth + "p"
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
            self.made.append(("link", veth))
            sh("ip", "link", "set", peer, "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge)
            sh("ip", "link", "set", veth, "up")
            sh("ip", "-n", ns, "link", "set", peer, "name", "eth0")
            sh("ip", "-n", ns, "addr", "add", self.host_addr(i) + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def link(self, i, up):
        sh("ip", "-n", self.ns[i], "link", "set", "eth0", "up" if up else "down")

    def drop(self, i, addr, on=True):
        """Namespace I sends nothing more to ADDR (a blackhole route: the
        packets vanish, as in a partition; no firewall needed), or again
        (ON false). Dropping both ways, or either way for TCP, cuts the
        two apart while each keeps its other links."""
        sh("ip", "-n", self.ns[i], "route", "add" if on else "del", "blackhole",
           addr + "/32", check=on)

    def cut(self, i, j):
        """Namespaces I and J no longer reach each other (each keeps its
        other links): a drop both ways, undone by heal()."""
        for a, b in ((i, j), (j, i)):
            self.drop(a, self.host_addr(b))
            self.dropped.append((a, self.host_addr(b)))

    def heal(self):
        """Every cut undone."""
        while self.dropped:
            i, addr = self.dropped.pop()
            self.drop(i, addr, False)

    def down(self):
        self.dropped = []
        for kind, name in reversed(self.made):
            if kind == "netns":
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        self.made = []

    def nsenter(self, i):
        return ["nsenter", "--net=/run/netns/" + self.ns[i], "--"]

    def set_delay(self, i, ms):
        """netem delay of MS ms on what namespace I sends (0: none). With
        every namespace at RTT/2, a round trip between two of them is RTT."""
        if ms > 0:
            sh("tc", "-n", self.ns[i], "qdisc", "replace", "dev", "eth0", "root", "netem",
               "delay", "%.3fms" % ms)
        else:
            sh("tc", "-n", self.ns[i], "qdisc", "del", "dev", "eth0", "root", check=False)

    def rtt_ms(self, i, addr, port, n=20):
        """The median time of a TCP connect from namespace I to ADDR:PORT
        (one round trip), in ms."""
        code = ("import socket,time,statistics\nts=[]\nfor _ in range(%d):\n"
                " t=time.perf_counter();s=socket.create_connection((%r,%d),5)\n"
                " ts.append(time.perf_counter()-t);s.close()\n"
                "print(1000*statistics.median(ts))" % (n, addr, port))
        return float(sh(*(self.nsenter(i) + [sys.executable, "-c", code])).stdout)


def netem_missing():
    """Why links cannot be given a delay here (tc with the netem qdisc,
    Linux's sch_netem), or None."""
    if not shutil.which("tc"):
        return "no tc (Debian package iproute2)"
    probe = "tlnp%d" % (os.getpid() % 100000)
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns does not work here: %s" % r.stderr.strip()
    try:
        r = subprocess.run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem",
                            "delay", "1ms"], capture_output=True, text=True)
        if r.returncode != 0:
            return ("tc cannot add a netem qdisc (%s): this kernel lacks sch_netem "
                    "(CONFIG_NET_SCH_NETEM) or cannot load it" % r.stderr.strip())
        return None
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def http(url, method="GET", body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Server(object):
    """A store server run as a child process, self.proc."""

    stop_grace = 10    # seconds from SIGTERM to SIGKILL

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class Emulator(Server):
    """tests/esemu on the bridge's address; restart keeps port and data."""

    name = "emulator"

    def __init__(self, addr, work):
        self.addr, self.work = addr, work
        self.data = os.path.join(work, "esemu.json")
        self.port = 0
        self.proc = None

    @property
    def url(self):
        return "http://%s:%d" % (self.addr, self.port)

    def start(self):
        pf = os.path.join(self.work, "esemu.port")
        if os.path.exists(pf):
            os.unlink(pf)
        log = open(os.path.join(self.work, "esemu.log"), "ab")
        deadline = time.monotonic() + 15
        while True:
            self.proc = subprocess.Popen(
                [sys.executable, ESEMU, "--bind", self.addr, "--port", str(self.port),
                 "--port-file", pf, "--data", self.data, "--flavor", "es8"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            while time.monotonic() < deadline and self.proc.poll() is None:
                if os.path.exists(pf):
                    with open(pf) as f:
                        text = f.read().strip()
                    if text:
                        self.port = int(text)
                        log.close()
                        return
                time.sleep(0.02)
            if time.monotonic() >= deadline:
                self.stop()
                log.close()
                raise RuntimeError("the emulator did not start")
            time.sleep(0.2)    # the port may still be in TIME_WAIT use: again

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class Forwarder(object):
    """TCP from ADDR:PORT (fixed) to 127.0.0.1:target (may change)."""

    def __init__(self, addr):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.target = None
        self.conns = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                u.settimeout(None)
            except (OSError, TypeError):
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop_all(self):
        with self.lock:
            for s in self.conns:
                try:
                    s.close()
                except OSError:
                    pass
            self.conns = []

    def close(self):
        self.sock.close()
        self.drop_all()


class OpenSearch(Server):
    """A real OpenSearch node (tests/engines/start; ENGINE opensearch for
    2.19, opensearch3 for 3.x) on loopback, reached
    from the namespaces through a forwarder on the bridge's address; a
    restart kills the node's JVM (kill -9) and starts it again on the same
    data directory."""

    name = "opensearch"
    stop_grace = 60

    def __init__(self, addr, work, engine="opensearch"):
        self.addr, self.work = addr, work
        self.name = engine
        self.data = os.path.join(work, "engine")
        self.fwd = Forwarder(addr)
        self.proc = None

    @property
    def url(self):
        return "http://%s:%d" % (self.addr, self.fwd.port)

    def start(self):
        pf = os.path.join(self.work, "engine.port")
        if os.path.exists(pf):
            os.unlink(pf)
        log = open(os.path.join(self.work, "engine.log"), "ab")
        self.proc = subprocess.Popen([ENGINE_START, self.name, "--port-file", pf,
                                      "--data", self.data], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(pf):
                with open(pf) as f:
                    self.fwd.target = int(f.read().split()[0])
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("OpenSearch did not start (see %s/engine.log)" % self.work)

    def kill(self):
        """kill -9 of the node's JVM (the pid tests/engines/start wrote),
        then the start script is stopped as usual."""
        try:
            with open(os.path.join(self.data, "node-1.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        self.stop()

    def stop(self):
        super().stop()
        self.fwd.drop_all()


class Cluster(Server):
    """A cluster of real engine nodes (tests/engines/start --nodes N), node
    K in network namespace FIRST+K of NET with that namespace's address:
    each node as on a host of its own, linked to the others and to the
    mounts through the bridge. The engine is any that tests/engines/start
    runs. Mounts get every node's URL (es_url=A;B;C)."""

    stop_grace = 90

    def __init__(self, net, first, nodes, work, engine="opensearch", heap="256m"):
        self.net, self.first, self.nodes = net, first, nodes
        self.work, self.name, self.heap = work, engine, heap
        self.data = os.path.join(work, "cluster")
        self.addrs = [net.host_addr(first + k) for k in range(nodes)]
        self.ports = []
        self.proc = None

    @property
    def urls(self):
        return ["http://%s:%d" % (a, p) for a, p in zip(self.addrs, self.ports)]

    @property
    def url(self):
        return self.urls[0]

    @property
    def mount_url(self):
        return ";".join(self.urls)

    def start(self, timeout=420, same_ports=False):
        pf = os.path.join(self.work, "cluster.ports")
        if os.path.exists(pf):
            os.unlink(pf)
        env = dict(os.environ)
        env.setdefault("ENGINE_HEAP", self.heap)
        env.setdefault("ENGINE_START_TIMEOUT", str(timeout))
        log = open(os.path.join(self.work, "cluster.log"), "ab")
        self.proc = subprocess.Popen(
            [ENGINE_START, self.name, "--nodes", str(self.nodes), "--port-file", pf,
             "--data", self.data, "--netns", ",".join(self.net.ns[self.first:self.first
                                                                  + self.nodes]),
             "--addrs", ",".join(self.addrs)] + (["--same-ports"] if same_ports else []),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(pf):
                with open(pf) as f:
                    self.ports = [int(x) for x in f.read().split()]
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("the %s cluster did not start (see %s/cluster.log)"
                           % (self.name, self.work))

    def node_pids(self):
        out = []
        for k in range(self.nodes):
            try:
                with open(os.path.join(self.data, "node-%d.pid" % (k + 1))) as f:
                    out.append(int(f.read()))
            except (OSError, ValueError):
                pass
        return out

    def kill(self):
        for pid in self.node_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.stop()

    def ns_index(self, k):
        """NET's index of node K's namespace (K from 0)."""
        return self.first + k

    def node_pid(self, k):
        with open(os.path.join(self.data, "node-%d.pid" % (k + 1))) as f:
            return int(f.read())

    def restart(self, pause):
        """kill -9 of every node, PAUSE seconds, then every node started
        again on its data and on the ports the mounts know."""
        for pid in self.node_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc:
            try:
                self.proc.wait(60)    # the start script exits once its nodes are gone
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
        time.sleep(pause)
        self.start(same_ports=True)

    def primary(self, index):
        """The node (from 0) holding INDEX's primary shard, asked of any node
        that answers; None when none knows one."""
        for url in self.urls:
            try:
                st, body = http(url + "/_cat/shards/" + index + "?format=json", timeout=10)
            except (OSError, ValueError):
                continue
            if st != 200:
                continue
            for c in body:
                if c.get("prirep") == "p" and c.get("state") == "STARTED":
                    name = c.get("node") or ""
                    if name.startswith("node-"):
                        return int(name[5:]) - 1
        return None

    def make_disks(self):
        """Node K's home (DIR/node-K) on a Disk of its own: self.disks[K]."""
        self.disks = []
        for k in range(self.nodes):
            d = Disk(os.path.join(self.work, "disk%d.img" % k),
                     os.path.join(self.data, "node-%d" % (k + 1)))
            self.disks.append(d)
            d.make()

    def drop_disks(self):
        for d in reversed(getattr(self, "disks", [])):
            d.drop()
        self.disks = []

    def replicate(self, index, replicas, timeout=120):
        """Gives INDEX REPLICAS replicas (no auto-expansion) and waits for
        every copy to be allocated and started (green)."""
        st, body = http(self.url + "/" + index + "/_settings", "PUT",
                        {"index": {"auto_expand_replicas": False,
                                   "number_of_replicas": replicas}})
        if st != 200:
            raise RuntimeError("replicas of %s: %s %s" % (index, st, body))
        st, body = http(self.url + "/_cluster/health/" + index
                        + "?wait_for_status=green&timeout=%ds" % timeout, timeout=timeout + 10)
        if st != 200 or body.get("status") != "green":
            raise RuntimeError("%s not green: %s %s" % (index, st, body))

    def shards(self, index):
        """INDEX's shard copies: [{"prirep": "p"|"r", "state": ..., "node": ...}]."""
        st, body = http(self.url + "/_cat/shards/" + index + "?format=json")
        if st != 200:
            raise RuntimeError("shards of %s: %s %s" % (index, st, body))
        return [{"prirep": c["prirep"], "state": c["state"], "node": c["node"]} for c in body]


class Disk(object):
    """An ext4 file system on a loop device (a file IMG), mounted on MNT,
    whose writes can be made slow: blkio throttling of the root cgroup
    (cgroup v1) for that device alone, so every write to it, the
    kernel's writeback and journal included, is held to the limits."""

    def __init__(self, img, mnt, size=2 << 30):
        self.img, self.mnt, self.size = img, mnt, size
        self.dev = self.majmin = None
        self.mounted = False

    @staticmethod
    def missing():
        """Why a disk cannot be made slow here, or None."""
        for tool, pkg in (("losetup", "mount"), ("mkfs.ext4", "e2fsprogs"),
                          ("lsblk", "util-linux")):
            if not shutil.which(tool):
                return "no %s (Debian package %s)" % (tool, pkg)
        if not os.path.exists("/dev/loop-control"):
            return "no loop devices (/dev/loop-control)"
        if not os.path.exists(BLKIO + "/blkio.throttle.write_iops_device"):
            return "no cgroup v1 blkio throttling (%s)" % BLKIO
        return None

    def make(self):
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.img, "wb") as f:
            f.truncate(self.size)
        sh("mkfs.ext4", "-q", "-F", self.img)
        self.dev = sh("losetup", "--find", "--show", self.img).stdout.strip()
        self.majmin = sh("lsblk", "-ndo", "MAJ:MIN", self.dev).stdout.strip()
        sh("mount", self.dev, self.mnt)
        self.mounted = True

    def slow(self, on, iops=20, bps=1 << 20):
        """Writes held to IOPS a second and BPS bytes a second, or free."""
        for f, v in (("write_iops_device", iops), ("write_bps_device", bps)):
            with open(BLKIO + "/blkio.throttle." + f, "w") as fh:
                fh.write("%s %d\n" % (self.majmin, v if on else 0))

    def drop(self):
        """Unthrottled, unmounted, the loop device detached (by path)."""
        if self.majmin:
            try:
                self.slow(False)
            except OSError:
                pass
        if self.mounted:
            sh("umount", self.mnt, check=False)
            self.mounted = False
        if self.dev:
            sh("losetup", "-d", self.dev, check=False)
            self.dev = self.majmin = None


class Host(object):
    def __init__(self, run, i):
        self.run, self.i = run, i
        self.name = "h%d" % i
        w = run.work
        self.cache_mnt = os.path.join(w, "cache%d" % i)
        self.mnt = os.path.join(w, "mnt%d" % i)
        self.hold_log = os.path.join(w, "holds%d.log" % i)
        self.log = os.path.join(w, "treelockfs%d.log" % i)
        for d in (self.cache_mnt, self.mnt):
            os.makedirs(d, exist_ok=True)
        self.cache = self.proc = None
        self.skew = None

    def _spawn(self, backing, mnt, opts, env=None):
        e = dict(os.environ)
        e.update(env or {})
        logf = open(self.log, "ab")
        p = subprocess.Popen(self.run.net.nsenter(self.i) + [BIN, backing, mnt, "-f", "-o",
                                                             ",".join(opts)],
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=e,
                             start_new_session=True)
        logf.close()
        deadline = time.monotonic() + self.run.mount_timeout
        while not is_mounted(mnt):
            if p.poll() is not None or time.monotonic() > deadline:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                raise RuntimeError("treelockfs did not mount %s (see %s)" % (mnt, self.log))
            time.sleep(0.02)
        return p

    def mount_cache(self):
        self.cache = self._spawn(self.run.shared, self.cache_mnt,
                                 ["lock_strategy=none", "entry_timeout=1", "attr_timeout=1"])

    def opts(self):
        a = self.run.args
        url = getattr(self.run.engine, "mount_url", self.run.engine.url)
        return ["lock_store=es", "es_url=" + url, "owner=" + self.name,
                "lease_ttl=%d" % a.lease_ttl, "lock_timeout=%d" % a.lock_timeout,
                "es_timeout_ms=1000", "hold_log=" + self.hold_log] + list(self.run.extra_opts)

    def hold_log_lines(self, since=0):
        """The lines of this host's hold log from byte SINCE on, and the
        offset after them."""
        try:
            with open(self.hold_log, "rb") as f:
                f.seek(since)
                data = f.read()
        except OSError:
            return [], since
        end = data.rfind(b"\n") + 1
        return data[:end].decode("utf-8", "replace").splitlines(), since + end

    def log_size(self):
        try:
            return os.path.getsize(self.hold_log)
        except OSError:
            return 0

    def mount(self, skew=None):
        env = {}
        if skew:
            env = {"LD_PRELOAD": faketime_lib(), "FAKETIME": skew,
                   "DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}
        self.proc = self._spawn(self.cache_mnt, self.mnt, self.opts(), env)
        self.skew = skew

    def holding(self, timeout):
        """Waits up to TIMEOUT seconds for this host to hold locks (the last
        line of its hold log an acquire); True if it does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(self.hold_log, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 4096))
                    tail = f.read().decode("utf-8", "replace").splitlines()
                if tail and "\tacquire\t" in tail[-1]:
                    return True
            except OSError:
                pass
            time.sleep(0.001)
        return False

    def stop(self, proc_attr="proc", mnt=None):
        """Unmounts by path and waits for the daemon; returns its status."""
        p = getattr(self, proc_attr)
        mnt = mnt or self.mnt
        if p is None:
            return None
        try:
            os.kill(p.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        unmount(mnt)
        # a daemon ends its session within lock_timeout, and a slow store
        # on a busy machine makes it take all of it: a daemon killed here
        # would count as a crash
        deadline = time.monotonic() + self.run.args.lock_timeout + 120
        termed = False
        while True:
            try:
                rc = p.wait(1)
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                p.kill()
                rc = p.wait(10)
                break
            if not termed and mounted_elsewhere(mnt):
                # a copy of the mount in another mount namespace (made
                # by a program beside this run) keeps the connection
                # open after the unmount: stopped as an init system would
                p.send_signal(signal.SIGTERM)
                termed = True
        setattr(self, proc_attr, None)
        return rc

    def stop_all(self):
        rc = self.stop()
        self.stop("cache", self.cache_mnt)
        return rc


def workload(mnt, host, until_ns, seed, out, names, stop=None, deleg=False):
    """Moves files among directories and directories among the top ones,
    logging each rename and its result (one JSON object a line), until
    UNTIL_NS or, with STOP, until the file STOP exists (UNTIL_NS is then
    only a bound). With DELEG, most of the time it moves files between
    two directories of this host's own in bursts (two renames within a
    second in a directory: a delegation of it; the next ones covered), and
    now and then a file into or out of another host's directory (a
    recall)."""
    rnd = random.Random(seed)
    tops = [n for n in names if n.startswith("d")]
    subs = [n for n in names if n.startswith("s")]
    files = [n for n in names if n.startswith("f")]
    me = "o%s_" % host.lstrip("h")
    own = [n for n in names if n.startswith(me)]
    others = [n for n in names if n.startswith("o") and not n.startswith(me)]
    where = {}
    n = 0
    burst, pair, mine = 0, None, None
    with open(out, "a") as f:
        while mono_ns() < until_ns and not (stop and n % 8 == 0 and os.path.exists(stop)):
            if n % 4 == 0 or not where:
                try:
                    where = {}
                    for dirpath, dirnames, filenames in os.walk(mnt):
                        rel = "/" + os.path.relpath(dirpath, mnt).strip(".")
                        for e in dirnames + filenames:
                            where[e] = (rel.rstrip("/") + "/" + e)
                except OSError:
                    time.sleep(0.1)
                    continue
                if not where:       # the mount is away (a remount): wait
                    time.sleep(0.05)
                    continue
            n += 1
            x = t = None
            if deleg and own and not burst:
                r = rnd.random()
                if r < 0.55:
                    # mostly the same pair again: its delegations stay held
                    # (a new pair gives one of the old back)
                    if not mine or rnd.random() < 0.3:
                        mine = rnd.sample(own, 2)
                    pair, burst = mine, rnd.randint(3, 10)
                elif r < 0.8:
                    pair = [rnd.choice(own), rnd.choice(others)]
                    rnd.shuffle(pair)
                    burst = 1
            if burst:
                # a file of one of the pair's directories into the other
                burst -= 1
                inside = [e for e, p in where.items() if e[0] in FILE_PREFIXES and
                          os.path.dirname(p) in ("/" + pair[0], "/" + pair[1])]
                if not inside:
                    burst = 0
                    continue
                x = rnd.choice(inside)
                t = pair[1] if os.path.dirname(where[x]) == "/" + pair[0] else pair[0]
            elif rnd.random() < 0.3:
                x, targets = rnd.choice(subs), tops
            else:
                x, targets = rnd.choice(files), ["/"] + tops + subs
            if t is None:
                t = rnd.choice(targets)
            if x not in where or (t != "/" and t not in where):
                where = {}
                continue
            src = where[x]
            dst = (where[t] if t != "/" else "") + "/" + x
            if os.path.dirname(src) == os.path.dirname(dst):
                continue
            t0 = mono_ns()
            try:
                os.rename(mnt + src, mnt + dst)
                res = 0
            except OSError as e:
                res = e.errno
            t1 = mono_ns()
            f.write(json.dumps({"host": host, "t0": t0, "t1": t1, "src": src, "dst": dst,
                                "res": res}) + "\n")
            f.flush()
            if res == 0:
                where[x] = dst
                if x in subs:
                    where = {}
            elif res in (errno.ENOTCONN, errno.ECONNABORTED, errno.ENOLCK):
                time.sleep(0.1)


class Run(object):
    def __init__(self, args, work, seed):
        self.args, self.work, self.seed = args, work, seed
        self.rnd = random.Random(seed)
        self.shared = os.path.join(work, "shared")
        self.nemesis_log = os.path.join(work, "nemesis.jsonl")
        # a cluster's nodes live in namespaces after the hosts' ones
        self.nodes = getattr(args, "nodes", 1)
        self.net = Net(args.hosts + (self.nodes if self.nodes > 1 else 0))
        self.engine = None
        self.hosts = []
        self.workers = []
        self.faults = {k: 0 for k in ALL_KINDS}
        self.skipped = {}
        # a pause aimed at a host holding locks lands, most of the time,
        # in these 20 ms between the grant and the lease check: the case
        # fencing is for (a pause after the check is the known limit,
        # `limit` below)
        self.extra_opts = ["rename_delay_ms=%d" % getattr(args, "delay_ms", 20)]
        self.delegations = getattr(args, "delegations", "off") == "on"
        if self.delegations:
            self.extra_opts.append("delegations=on")
            if getattr(args, "delegation_recall", None):
                self.extra_opts.append("delegation_recall=%g" % args.delegation_recall)
        self.nemesis_work = os.path.join(work, "nemesis-work.jsonl")
        self.recall_threads = []
        self.recall_setups = {}     # kind: {"under way": n, reason: n}
        self.fault_secs = {}        # kind: seconds its faults lasted
        self.next_ndir = 0
        # a cluster's first mount creates the lock index and waits for its
        # shard to be allocated: on a busy machine, a minute or more
        self.mount_timeout = 15
        if self.nodes > 1:
            self.mount_timeout = 150
            # a write waits for two replicas too: more than the second a
            # single node gets (the later option wins)
            self.extra_opts += ["es_start_timeout=120", "es_timeout_ms=%d"
                                % (getattr(args, "es_timeout_ms", None) or 5000)]

    def note(self, kind, host=None, **kw):
        ev = dict(kw, t=mono_ns(), kind=kind)
        if host is not None:
            ev["host"] = host
        with open(self.nemesis_log, "a") as f:
            f.write(json.dumps(ev) + "\n")

    def make_tree(self):
        names = {}
        os.makedirs(self.shared)
        nd = 4
        for i in range(nd):
            names["d%d" % i] = "/"
            names["s%d" % i] = "d%d" % i
        dirs = ["/"] + ["d%d" % i for i in range(nd)] + ["s%d" % i for i in range(nd)]
        for i in range(24):
            names["f%02d" % i] = dirs[i % len(dirs)]
        if self.delegations:
            # each host's own directories (o<host>_<k>, files e...), where it
            # renames in bursts (delegations), and the nemesis's (n<k>, files
            # m...), where it makes one host take a delegation and another
            # recall it just before a fault
            for i in range(self.args.hosts):
                for k in range(OWN_DIRS):
                    names["o%d_%d" % (i, k)] = "/"
                    for j in range(3):
                        names["e%d_%d_%d" % (i, k, j)] = "o%d_%d" % (i, k)
            for k in range(NEMESIS_DIRS):
                names["n%02d" % k] = "/"
                for j in range(2):
                    names["m%02d_%d" % (k, j)] = "n%02d" % k

        def path(n):
            return "" if n == "/" else path(names[n]) + "/" + n
        for n in sorted(names, key=lambda n: path(n).count("/")):
            p = self.shared + path(n)
            if n[0] in FILE_PREFIXES:
                with open(p, "w") as f:
                    f.write(n)
            else:
                os.mkdir(p)
        self.initial = names
        self.contents = {n: n for n in names if n[0] in FILE_PREFIXES}

    def final_tree(self):
        entries, contents = [], {}
        for dirpath, dirnames, filenames in os.walk(self.shared):
            parent = "/" if dirpath == self.shared else os.path.basename(dirpath)
            for e in dirnames + filenames:
                entries.append([e, parent])
            for e in filenames:
                with open(os.path.join(dirpath, e)) as f:
                    contents[e] = f.read()
        return entries, contents

    # ---- the nemesis ------------------------------------------------------------------------

    def nemesis_rename(self, h, src, dst):
        """A rename of the nemesis's through H's mount, logged as the
        workload logs its own."""
        t = Timed(h.name, h.mnt, src, dst)
        t.run()
        with open(self.nemesis_work, "a") as f:
            f.write(json.dumps(t.rec) + "\n")
        return t.rec["res"]

    def arrange_recall(self, kind):
        """Makes a host A take a delegation of a directory of the nemesis's
        (two renames in it within a second) and another host B start a
        rename in it, which waits while A's delegation is recalled, so that
        the fault of KIND strikes while the recall is under way. Returns the
        host the fault strikes (A or B) and None, or why no recall is under
        way."""
        a, b = self.rnd.sample(self.hosts, 2)
        target = a if self.rnd.random() < 0.5 else b
        why = "no delegation granted"
        for _ in range(4):
            k = self.next_ndir % NEMESIS_DIRS
            self.next_ndir += 1
            d = "/n%02d" % k
            at = {}
            for j in range(2):
                m = "m%02d_%d" % (k, j)
                at[m] = (d if os.path.exists(self.shared + d + "/" + m) else
                         "" if os.path.exists(self.shared + "/" + m) else None)
            if None in at.values() or a.proc is None or b.proc is None:
                why = "the nemesis's files of %s are not where they were" % d
                continue
            x, y = sorted(at)
            since = a.log_size()
            for _ in range(2):      # x out of d and back, or in and out
                src = at[x] + "/" + x
                dst = ("" if at[x] == d else d) + "/" + x
                if self.nemesis_rename(a, src, dst) == 0:
                    at[x] = os.path.dirname(dst)
            # a store on a busy machine takes seconds for the two renames'
            # releases and the delegation's try
            holder, deadline = None, time.monotonic() + 5
            while holder is None and time.monotonic() < deadline:
                for line in a.hold_log_lines(since)[0]:
                    f = line.split("\t")
                    if len(f) > 4 and f[1] == "delegate" and f[4] == d:
                        holder = f[3]
                if holder is None:
                    time.sleep(0.01)
            if holder is None:
                why = "no delegation granted"
                continue
            src = at[y] + "/" + y
            dst = ("" if at[y] == d else d) + "/" + y
            t = Timed(b.name, b.mnt, src, dst)
            t.start()
            self.recall_threads.append(t)
            # B's request refused and its waiter mark written (a round trip
            # or two); A's poller sees it within delegation_recall/2
            time.sleep(0.05)
            returned = any(l.split("\t")[1:2] == ["return"] and l.split("\t")[3] == holder
                           for l in a.hold_log_lines(since)[0])
            if not t.is_alive():
                return target, "the rename that recalls ended within 50 ms"
            if returned:
                return target, "the delegation was given back within 50 ms"
            return target, None
        return target, why

    def fault(self, kind, h=None, arranged=False):
        a = self.args
        h = h or self.rnd.choice(self.hosts)
        if kind == "cut":
            secs = self.rnd.uniform(1.5, 2.5) * a.lease_ttl
            self.note("cut", h.name, phase="start")
            self.net.link(h.i, False)
            time.sleep(secs)
            self.net.link(h.i, True)
            self.note("cut", h.name, phase="end")
        elif kind == "pause":
            secs = 2 * a.lease_ttl + self.rnd.uniform(1, 2)
            if not arranged:
                h.holding(1.0)     # preferably while it holds locks
            pid = h.proc.pid
            self.note("pause", h.name, pid=pid, phase="start")
            os.kill(pid, signal.SIGSTOP)
            time.sleep(secs)
            os.kill(pid, signal.SIGCONT)
            self.note("pause", h.name, pid=pid, phase="end")
        elif kind == "kill":
            if not arranged:
                h.holding(1.0)
            pid = h.proc.pid
            self.note("kill", h.name, pid=pid, phase="start")
            os.kill(pid, signal.SIGKILL)
            h.proc.wait(15)
            h.proc = None
            unmount(h.mnt)
            time.sleep(self.rnd.uniform(0, 1))
            h.mount(h.skew)
            self.note("kill", h.name, pid=h.proc.pid, phase="end")
        elif kind == "engine":
            self.note("engine", phase="start")
            self.engine.kill()
            time.sleep(self.rnd.uniform(0.2, 1.5))
            self.engine.start()
            self.note("engine", phase="end")
        elif kind in CLUSTER_KINDS:
            self.cluster_fault(kind, h)
        elif kind == "skew":
            minutes = self.rnd.choice([-1, 1]) * self.rnd.randint(3, 30)
            skew = "%+dm" % minutes
            old = h.proc.pid
            self.note("skew", h.name, pid=old, skew=skew, phase="start")
            rc = h.stop()
            if rc not in (0, None):
                # a daemon stopped while requests were pending: note it as a kill
                self.note("kill", h.name, pid=old, phase="start")
            h.mount(skew)
            self.note("skew", h.name, pid=h.proc.pid, skew=skew, phase="end")
        self.faults[kind] += 1

    def cluster_fault(self, kind, h):
        """The faults of an engine cluster; H is a host picked at random."""
        a, c = self.args, self.engine
        secs = self.rnd.uniform(*getattr(a, "cluster_fault_s", (35.0, 50.0)))
        others = lambda k: [j for j in range(c.nodes) if j != k]  # noqa: E731
        if kind == "node-cut":
            # the node's link down: cut from the other nodes and every mount
            k = self.rnd.randrange(c.nodes)
            self.note(kind, node=k + 1, secs=secs, phase="start")
            self.net.link(c.ns_index(k), False)
            time.sleep(secs)
            self.net.link(c.ns_index(k), True)
            self.note(kind, node=k + 1, phase="end")
        elif kind == "primary-cut":
            k = c.primary(INDEX)
            if k is None:
                raise RuntimeError("no node knows the primary of %s" % INDEX)
            # some mounts (at least one) still reach it, the rest do not
            reach = sorted(self.rnd.sample(range(len(self.hosts)),
                                           self.rnd.randint(1, len(self.hosts))))
            self.note(kind, node=k + 1, reached_by=["h%d" % i for i in reach], secs=secs,
                      phase="start")
            for j in others(k):
                self.net.cut(c.ns_index(k), c.ns_index(j))
            for i in range(len(self.hosts)):
                if i not in reach:
                    self.net.cut(i, c.ns_index(k))
            time.sleep(secs)
            self.net.heal()
            self.note(kind, node=k + 1, phase="end")
        elif kind == "minority-mount":
            # node K cut from the other nodes; host H cut from those others
            # but not from K: its mount's requests can go to K alone (a
            # mount has every node's URL and tries them in turn)
            k = self.rnd.randrange(c.nodes)
            self.note(kind, h.name, node=k + 1, secs=secs, phase="start")
            for j in others(k):
                self.net.cut(c.ns_index(k), c.ns_index(j))
                self.net.cut(h.i, c.ns_index(j))
            time.sleep(secs)
            self.net.heal()
            self.note(kind, h.name, node=k + 1, phase="end")
        elif kind == "node-pause":
            # the primary's node half of the time, any node otherwise
            k = c.primary(INDEX) if self.rnd.random() < 0.5 else None
            if k is None:
                k = self.rnd.randrange(c.nodes)
            pid = c.node_pid(k)
            self.note(kind, node=k + 1, jvm=pid, secs=secs, phase="start")
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(secs)
            finally:
                os.kill(pid, signal.SIGCONT)
            self.note(kind, node=k + 1, jvm=pid, phase="end")
        elif kind == "cluster-restart":
            self.note(kind, phase="start")
            c.restart(self.rnd.uniform(0.5, 3))
            self.note(kind, phase="end")
        elif kind == "slow-disk":
            k = c.primary(INDEX)
            if k is None:
                raise RuntimeError("no node knows the primary of %s" % INDEX)
            self.note(kind, node=k + 1, secs=secs, phase="start")
            c.disks[k].slow(True)
            try:
                time.sleep(secs)
            finally:
                c.disks[k].slow(False)
            self.note(kind, node=k + 1, phase="end")

    def nemesis(self, until_ns, bound_ns=None):
        """Injects faults until UNTIL_NS and, with BOUND_NS, on past it until
        every kind has been injected once (a busy machine makes each fault
        take longer), but not past BOUND_NS."""
        kinds = [k for k in ALL_KINDS if k not in self.skipped]
        order = kinds[:]
        self.rnd.shuffle(order)
        time.sleep(self.args.settle)
        while mono_ns() < until_ns or (order and bound_ns and mono_ns() < bound_ns):
            kind = order.pop(0) if order else self.rnd.choice(kinds)
            try:
                h, why = None, "delegations off"
                if self.delegations and len(self.hosts) > 1:
                    h, why = self.arrange_recall(kind)
                n = self.recall_setups.setdefault(kind, {})
                n[why or "under way"] = n.get(why or "under way", 0) + 1
                t0 = time.monotonic()
                self.fault(kind, h, why is None)
                self.fault_secs[kind] = self.fault_secs.get(kind, 0) + time.monotonic() - t0
            except Exception as e:  # a fault that cannot be injected fails the run
                self.nemesis_error = "%s: %s" % (kind, e)
                return
            time.sleep(self.rnd.uniform(*self.args.gap))

    def join_recalls(self):
        """Waits for the nemesis's renames that recalled and logs them; one
        still stuck is logged as ended now with EIO (its outcome unknown)."""
        for t in self.recall_threads:
            t.join(self.args.lock_timeout + 60)
            rec = dict(t.rec)
            if "t1" not in rec:
                rec.update(res=errno.EIO, t1=mono_ns())
            with open(self.nemesis_work, "a") as f:
                f.write(json.dumps(rec) + "\n")
        self.recall_threads = []

    # ---- one run ----------------------------------------------------------------------------

    def ok_renames(self):
        """Renames that returned 0 so far, over every host's log."""
        n = 0
        for _, out in self.workers:
            try:
                with open(out) as f:
                    n += sum(1 for line in f if line.endswith('"res": 0}\n'))
            except OSError:
                pass
        return n

    def leftovers(self):
        url = self.engine.url
        http(url + "/" + INDEX + "/_refresh", "POST")
        st, body = http(url + "/" + INDEX + "/_search", "POST",
                        {"size": 10000, "query": {"match_all": {}}})
        if st != 200:
            raise RuntimeError("search of the lock index: %s %s" % (st, body))
        return [{"id": h["_id"], "source": h["_source"]} for h in body["hits"]["hits"]]

    def go(self):
        a = self.args
        self.nemesis_error = None
        if "skew" in a.kinds and not faketime_lib():
            self.skipped["skew"] = ("no libfaketime (Debian package faketime): clock skew "
                                    "not injected")
        if self.nodes > 1 and "engine" in a.kinds:
            self.skipped["engine"] = ("on a cluster, a restart of every node is the fault "
                                      "cluster-restart")
        for k in CLUSTER_KINDS:
            if k in a.kinds and self.nodes < 3:
                self.skipped[k] = "a fault of an engine cluster: needs --nodes 3 or more"
        if "slow-disk" in a.kinds and self.nodes >= 3:
            why = Disk.missing()
            if why:
                self.skipped["slow-disk"] = why + ": no slow disk injected"
        for k in ALL_KINDS:
            if k not in a.kinds:
                self.skipped.setdefault(k, "not selected")
        self.make_tree()
        self.net.up()
        topo = {}
        if self.nodes > 1:
            self.engine = Cluster(self.net, a.hosts, self.nodes, self.work, a.engine,
                                  getattr(a, "heap", "256m"))
        else:
            self.engine = (OpenSearch(self.net.addr, self.work, a.engine)
                           if a.engine != "emulator" else Emulator(self.net.addr, self.work))
        try:
            rtt = getattr(a, "rtt_ms", 0)
            if rtt > 0:
                why = netem_missing()
                if why:
                    topo["delay_skipped"] = why
                else:
                    for i in range(len(self.net.ns)):
                        self.net.set_delay(i, rtt / 2.0)
            if self.nodes > 1 and "slow-disk" not in self.skipped:
                self.engine.make_disks()
            self.engine.start()
            for i in range(a.hosts):
                h = Host(self, i)
                self.hosts.append(h)
                h.mount_cache()
                h.mount()
            if self.nodes > 1:
                # the first mount created the lock index: one primary and
                # a replica on every other node, as a cluster should keep it
                self.engine.replicate(INDEX, self.nodes - 1)
                topo["shards"] = self.engine.shards(INDEX)
                topo["rtt_ms"] = self.net.rtt_ms(0, self.engine.addrs[0],
                                                 self.engine.ports[0])
            # The run lasts a.duration, and on (up to a.max_duration) until
            # every fault kind was injected once and the workload has done
            # a.min_ok renames that returned 0: conditions, not a time, so
            # a busy machine makes the run longer, never weaker.
            t0 = mono_ns()
            t_end = t0 + int(a.duration * 1e9)
            max_s = max(a.duration, getattr(a, "max_duration", 0) or a.duration)
            t_bound = t0 + int(max_s * 1e9)
            stop = os.path.join(self.work, "workload.stop")
            for h in self.hosts:
                out = os.path.join(self.work, "work%d.jsonl" % h.i)
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "workload",
                                      h.mnt, h.name, str(t_bound + int(a.quiet * 1e9)),
                                      str(self.rnd.randrange(1 << 30)), out,
                                      ",".join(sorted(self.initial)), stop]
                                     + (["deleg"] if self.delegations else []))
                self.workers.append((p, out))
            nem = threading.Thread(target=self.nemesis, args=(t_end - int(a.quiet * 1e9),
                                                              t_bound - int(a.quiet * 1e9)))
            nem.start()
            nem.join()
            if self.nemesis_error:
                with open(stop, "w"):
                    pass
                raise RuntimeError("the nemesis failed: " + self.nemesis_error)
            self.join_recalls()
            # the quiet end: no new faults for a.quiet seconds, and on until
            # the renames counted are in
            quiet_end = mono_ns() + int(a.quiet * 1e9)
            while mono_ns() < quiet_end or (self.ok_renames() < getattr(a, "min_ok", 0)
                                            and mono_ns() < t_bound + int(a.quiet * 1e9)):
                time.sleep(0.5)
            with open(stop, "w"):
                pass
            for p, _ in self.workers:
                p.wait(max_s + 120)
                if p.returncode != 0:
                    raise RuntimeError("a workload exited with %d" % p.returncode)
            statuses = {}
            for h in self.hosts:
                statuses[h.name] = h.stop_all()
            t_stop = mono_ns()
            r = sh(CTL, "--es_url=" + self.engine.url, "reap", "--dead", check=False)
            self.reap_output = (r.stdout + r.stderr).strip()
            if r.returncode != 0:
                raise RuntimeError("treelockctl reap --dead: exit %d: %s"
                                   % (r.returncode, self.reap_output))
            left = self.leftovers()
        finally:
            self.cleanup()
        final, final_contents = self.final_tree()
        logs = {}
        for h in self.hosts:
            try:
                with open(h.hold_log, encoding="utf-8", errors="surrogateescape") as f:
                    logs[h.name] = f.read().splitlines()
            except FileNotFoundError:
                logs[h.name] = []
        renames = [r for _, out in self.workers for r in checker.read_jsonl(out)]
        if os.path.exists(self.nemesis_work):
            renames += checker.read_jsonl(self.nemesis_work)
        nemesis = checker.read_jsonl(self.nemesis_log) if os.path.exists(self.nemesis_log) else []
        rep = checker.check(logs, renames, nemesis, self.initial, final, self.contents,
                            final_contents, left, end_of_run=t_stop,
                            fenced_ns=getattr(self.args, "delay_ms", 20) * 1000000)
        rep["faults"] = dict(self.faults)
        rep["delegations"] = "on" if self.delegations else "off"
        rep["recall_setups"] = self.recall_setups
        rep["fault_secs"] = {k: round(v, 1) for k, v in self.fault_secs.items()}
        rep["skipped_faults"] = {k: v for k, v in self.skipped.items() if v != "not selected"}
        rep["daemon_exit"] = statuses
        rep["engine"] = self.engine.name
        rep["seed"] = self.seed
        rep["topology"] = topo
        return rep

    def cleanup(self):
        for p, _ in self.workers:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for h in self.hosts:
            for p in (h.proc, h.cache):
                if p is not None:
                    try:
                        os.kill(p.pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            try:
                h.stop_all()
            except Exception:
                for p in (h.proc, h.cache):
                    if p is not None and p.poll() is None:
                        p.kill()
                unmount(h.mnt)
                unmount(h.cache_mnt)
        try:
            self.net.heal()
        except RuntimeError:
            pass            # the namespaces go below anyway
        if self.engine:
            if isinstance(self.engine, Cluster):
                for pid in self.engine.node_pids():
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            self.engine.stop()
            if isinstance(self.engine, OpenSearch):
                self.engine.fwd.close()
            if isinstance(self.engine, Cluster):
                self.engine.drop_disks()
        self.net.down()


def cmd_run(a):
    rc = cannot_run()
    if rc is not None:
        return rc
    total = {k: 0 for k in ALL_KINDS}
    nviol = 0
    for n in range(a.runs):
        seed = a.seed if a.seed is not None else random.randrange(1 << 30)
        work = tempfile.mkdtemp(prefix="tlfs-multihost.")
        run = Run(a, work, seed + n)
        try:
            rep = run.go()
        except Exception as e:
            print("run %d (seed %d): ERROR %s; files in %s" % (n + 1, seed + n, e, work))
            return 1
        for k, v in rep["faults"].items():
            total[k] += v
        nviol += len(rep["violations"])
        print("run %d (seed %d, %s, %d hosts, %ds): %d renames %s (%d unseen), %d holds "
              "(%d killed, %d fenced), overlaps tolerated %d, ambiguous %d, at the known "
              "limit %d; faults %s; violations %d"
              % (n + 1, rep["seed"], rep["engine"], a.hosts, a.duration, rep["renames"],
                 json.dumps(rep["results"], sort_keys=True), rep["renames_unseen"],
                 rep["holds"], rep["holds_killed"], rep["holds_fenced"],
                 rep["overlaps_tolerated"], rep["overlaps_ambiguous"], rep["overlaps_limit"],
                 json.dumps(rep["faults"]), len(rep["violations"])))
        for k, why in rep["skipped_faults"].items():
            print("  %s skipped: %s" % (k, why))
        print("  seconds the faults lasted, by kind: %s" % json.dumps(rep["fault_secs"],
                                                                   sort_keys=True))
        if rep["delegations"] == "on":
            print("  delegations: %d granted, %d recalled (ended by %s), %d covered renames; "
                  "faults with a recall under way %s; the nemesis's arrangements %s"
                  % (rep["delegations_granted"], rep["delegations_recalled"],
                     json.dumps(rep["delegations_ended"], sort_keys=True), rep["holds_covered"],
                     json.dumps(rep["faults_in_recall"], sort_keys=True),
                     json.dumps(rep["recall_setups"], sort_keys=True)))
        if rep["topology"]:
            print("  topology: %s" % json.dumps(rep["topology"], sort_keys=True))
        for v in rep["violations"][:20]:
            print("  VIOLATION %s: %s" % (v["rule"], v["what"]))
        if rep["violations"]:
            print("  files kept in %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
        if a.report:
            with open(a.report, "a") as f:
                f.write(json.dumps(rep) + "\n")
    print("total: %d runs, faults %s, violations %d" % (a.runs, json.dumps(total), nviol))
    return 1 if nviol else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "workload":
        mnt, host, until, seed, out, names = argv[1:7]
        workload(mnt, host, int(until), int(seed), out, names.split(","),
                 argv[7] if len(argv) > 7 else None, len(argv) > 8 and argv[8] == "deleg")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="hosts, workload, nemesis, checker")
    r.add_argument("--hosts", type=int, default=3)
    r.add_argument("--duration", type=float, default=45, help="seconds of workload per run")
    r.add_argument("--max-duration", type=float, default=0,
                   help="go on past --duration, up to this many seconds, until every fault "
                   "kind was injected once and --min-ok renames returned 0")
    r.add_argument("--min-ok", type=int, default=0,
                   help="renames that must have returned 0 before the run ends")
    r.add_argument("--runs", type=int, default=1)
    r.add_argument("--seed", type=int)
    r.add_argument("--engine", default="emulator",
                   help="emulator, or an engine tests/engines/start runs (opensearch, "
                   "opensearch3, elasticsearch)")
    r.add_argument("--nodes", type=int, default=1,
                   help="engine nodes: more than 1 runs a cluster (a real engine), each "
                   "node in a namespace of its own")
    r.add_argument("--rtt-ms", type=float, default=0,
                   help="netem delay making every round trip between namespaces this long")
    r.add_argument("--heap", default="256m", help="heap per cluster node")
    r.add_argument("--kinds", help="faults to inject (comma-separated; default: %s, and "
                   "with --nodes 3 or more also %s)" % (",".join(KINDS), ",".join(CLUSTER_KINDS)))
    r.add_argument("--es-timeout-ms", type=int,
                   help="es_timeout_ms of every mount on a cluster (default 5000; with --nodes 3 or more 10000)")
    r.add_argument("--cluster-fault-s", type=float, nargs=2, default=(35.0, 50.0),
                   help="seconds a fault of the cluster lasts: a uniform range (by default "
                   "past the engines' fault detection, about 30 s)")
    r.add_argument("--lease-ttl", type=int,
                   help="lease_ttl of every mount (default 2; with --nodes 3 or more 30)")
    r.add_argument("--lock-timeout", type=int,
                   help="lock_timeout of every mount (default 5; with --nodes 3 or more 60)")
    r.add_argument("--settle", type=float, default=2, help="seconds before the first fault")
    r.add_argument("--quiet", type=float, default=6, help="seconds without new faults at the end")
    r.add_argument("--gap", type=float, nargs=2, default=(0.5, 2.5),
                   help="seconds between faults: a uniform range")
    r.add_argument("--report", help="append each run's report (JSON) to this file")
    r.add_argument("--delay-ms", type=int, default=20,
                   help="rename_delay_ms of every host (a window for the pauses)")
    r.add_argument("--delegations", choices=("on", "off"), default="off",
                   help="delegations= of every mount; on: the workload renames in bursts in "
                   "directories of each host's own (delegations) and now and then in "
                   "another's (recalls), and the nemesis strikes while a recall is under way")
    r.add_argument("--delegation-recall", type=float,
                   help="delegation_recall= of every mount (default: the mount's, 1 s)")
    lim = sub.add_parser("limit", help="measure a rename stuck in a hung backing call")
    lim.add_argument("--pause", type=float, nargs="+", default=[6.0])
    lim.add_argument("--lease-ttl", type=int, default=2)
    lim.add_argument("--lock-timeout", type=int, default=10)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        # timings: short ones for the emulator's quick runs; on a cluster,
        # what a user would choose against fault detection of ~30 s (a
        # failover takes 30-40 s): requests given up after 10 s so the next
        # node is tried well within a lease, a lease that outlives most
        # failovers, and renames that wait through one instead of failing
        cl = a.nodes >= 3
        if a.lease_ttl is None:
            a.lease_ttl = 30 if cl else 2
        if a.lock_timeout is None:
            a.lock_timeout = 60 if cl else 5
        if a.es_timeout_ms is None and cl:
            a.es_timeout_ms = 10000
        if a.kinds is None:
            a.kinds = ",".join(ALL_KINDS if a.nodes >= 3 else KINDS)
        a.kinds = [k for k in a.kinds.split(",") if k]
        bad = set(a.kinds) - set(ALL_KINDS)
        if bad:
            ap.error("unknown fault kinds: %s" % ", ".join(sorted(bad)))
        return cmd_run(a)
    return cmd_limit(a)


class Timed(threading.Thread):
    """os.rename in a thread, recorded as the workload records it."""

    def __init__(self, host, mnt, src, dst):
        threading.Thread.__init__(self, daemon=True)
        self.rec = {"host": host, "src": src, "dst": dst}
        self.mnt = mnt

    def run(self):
        self.rec["t0"] = mono_ns()
        try:
            os.rename(self.mnt + self.rec["src"], self.mnt + self.rec["dst"])
            self.rec["res"] = 0
        except OSError as e:
            self.rec["res"] = e.errno
        self.rec["t1"] = mono_ns()


def wait_line(path, word, n, timeout):
    """Waits until PATH has N lines containing WORD; returns the last one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                lines = [l for l in f.read().splitlines() if ("\t%s\t" % word) in l]
        except FileNotFoundError:
            lines = []
        if len(lines) >= n:
            return lines[n - 1]
        time.sleep(0.01)
    raise RuntimeError("no %s line %d in %s" % (word, n, path))


def limit_once(a, pause, partition):
    """Host A's rename has its locks and passed its lease check when its
    cache layer stops answering (SIGSTOP) for PAUSE seconds; with
    PARTITION, A is also cut off from the lock store meanwhile. Host B
    then renames another file onto A's target. Returns the checker's
    report and the measured times."""
    a.hosts, a.extra_opts = 2, []
    work = tempfile.mkdtemp(prefix="tlfs-multihost-limit.")
    run = Run(a, work, 0)
    rep = {}
    try:
        os.makedirs(run.shared)
        names = {"d0": "/", "d1": "/", "d2": "/", "f": "d0", "y": "d1", "g": "d2"}
        for n, p in names.items():
            path = os.path.join(run.shared, p.strip("/"), n)
            if n in ("f", "y", "g"):
                with open(path, "w") as f:
                    f.write(n)
            else:
                os.makedirs(path)
        run.net.up()
        run.engine = Emulator(run.net.addr, work)
        run.engine.start()
        for i in range(2):
            h = Host(run, i)
            run.hosts.append(h)
            h.mount_cache()
            if i == 0:
                run.extra_opts = ["rename_delay_ms=300"]
            h.mount()
            run.extra_opts = []
        A, B = run.hosts
        os.stat(A.mnt + "/d0/f")
        os.stat(A.mnt + "/d1/y")
        ra = Timed("h0", A.mnt, "/d0/f", "/d1/y")
        ra.start()
        wait_line(A.hold_log, "acquire", 1, 10)
        t_stop = mono_ns()
        run.note("pause-cache", "h0", pid=A.cache.pid, phase="start")
        os.kill(A.cache.pid, signal.SIGSTOP)
        if partition:
            run.net.link(0, False)
            run.note("cut", "h0", phase="start")
        time.sleep(0.5)
        rb = Timed("h1", B.mnt, "/d2/g", "/d1/y")
        rb.start()
        rest = pause - (mono_ns() - t_stop) / 1e9
        time.sleep(max(rest, 0))
        if partition:
            run.net.link(0, True)
            run.note("cut", "h0", phase="end")
        os.kill(A.cache.pid, signal.SIGCONT)
        run.note("pause-cache", "h0", pid=A.cache.pid, phase="end")
        ra.join(a.lock_timeout + 30)
        rb.join(a.lock_timeout + 30)
        for h in run.hosts:
            h.stop_all()
        sh(CTL, "--es_url=" + run.engine.url, "reap", "--dead", check=False)
        left = run.leftovers()
    finally:
        run.cleanup()
    final, contents = run.final_tree()
    logs = {}
    for h in run.hosts:
        with open(h.hold_log) as f:
            logs[h.name] = f.read().splitlines()
    nem = checker.read_jsonl(run.nemesis_log)
    rep = checker.check(logs, [ra.rec, rb.rec], nem, names, final,
                        {"f": "f", "y": "y", "g": "g"}, contents, left)
    # both renames replace d1/y: only the overlap rule and the tree tell
    rep["violations"] = [v for v in rep["violations"] if v["rule"] in ("overlap", "leftover")]
    holds = {}
    for host, lines in logs.items():
        for l in lines:
            f = l.split("\t")
            holds.setdefault(f[3], {})[f[1]] = int(f[0])
    ha = holds.get("h0#1", {})
    hb = holds.get("h1#1", {})
    m = {"pause": pause, "partition": partition,
         "a_res": errno.errorcode.get(ra.rec["res"], ra.rec["res"]),
         "b_res": errno.errorcode.get(rb.rec["res"], rb.rec["res"]),
         "a_held_s": (ha.get("release", 0) - ha.get("acquire", 0)) / 1e9,
         "b_waited_s": ((hb.get("acquire") or rb.rec["t1"]) - rb.rec["t0"]) / 1e9,
         "violations": [v["rule"] for v in rep["violations"]]}
    if "acquire" in hb and "release" in ha:
        m["overlap_s"] = max(0, ha["release"] - hb["acquire"]) / 1e9
        m["a_renamed_after_b_took_over_s"] = (ha["release"] - hb["acquire"]) / 1e9
    m["final"] = {"/".join(p for p in (parent, name) if p != "/"): contents.get(name)
                  for name, parent in final}
    if rep["violations"]:
        m["what"] = [v["what"] for v in rep["violations"]]
    shutil.rmtree(work, ignore_errors=True)
    return rep, m


def cmd_limit(a):
    rc = cannot_run()
    if rc is not None:
        return rc
    for pause in a.pause:
        for partition in (False, True):
            _, m = limit_once(a, pause, partition)
            print(json.dumps(m, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
