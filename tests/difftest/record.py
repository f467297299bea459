#!/usr/bin/python3
"""Records the differential test's corpus against a real node.

    tests/difftest/record.py opensearch|opensearch3|elasticsearch [--port P] [--out DIR]

Without --port it starts a node with tests/engines/start (and stops it).
Needs root and /dev/fuse (it mounts treelockfs for real) and a built tree.

Two corpus files per engine:
  store-ENGINE.jsonl   what the es lock store sends: mounts with
                       lock_store=es (index bootstrap, the scripts stored,
                       then lost under a mount), renames at several
                       depths, contended renames between two mounts,
                       treelockctl (check, locks, owners, intents, break,
                       reap), a lease take-over after kill -9 and a fenced
                       mount cut off from the store;
  probes-ENGINE.jsonl  hand-written requests where an engine is stricter
                       than a lenient emulator would be (probes.py).
The live workload goes through the recording proxy; its requests (faults the
proxy made up left out) are then replayed one by one against the node with
the sequence's indices dropped first, and those answers are stored: the
stored answers are what the engine says to that exact sequence.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "engines"))

import probes  # noqa: E402
import replay  # noqa: E402
from mounts import detach, is_mounted  # noqa: E402
from proxy import Proxy  # noqa: E402

BIN = os.environ.get("TREELOCKFS_BIN", os.path.join(TOP, "src", "treelockfs"))
CTL = os.environ.get("TREELOCKCTL_BIN", os.path.join(TOP, "src", "treelockctl"))
FLAVOR = {"opensearch": "opensearch2", "opensearch3": "opensearch3", "elasticsearch": "es7"}
SCRIPT_IDS = ["treelockfs-%s-v1" % n for n in ("acqs", "acqx", "rel", "mark", "unmark", "evict")]


class Mount:
    def __init__(self, work, backing, name, url, *extra):
        self.mnt = os.path.join(work, "mnt" + name)
        os.makedirs(self.mnt, exist_ok=True)
        opts = ["lock_store=es", "es_url=" + url, "owner=" + name, "lease_ttl=2",
                "lock_timeout=15", "es_timeout_ms=1000"] + list(extra)
        self.log = open(self.mnt + ".log", "ab")
        self.proc = subprocess.Popen([BIN, backing, self.mnt, "-f", "-o", ",".join(opts)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.close()
                with open(self.mnt + ".log", "rb") as f:
                    raise RuntimeError("mount %s failed:\n%s" % (name, f.read().decode()))
            time.sleep(0.02)

    def path(self, p):
        return os.path.join(self.mnt, p.lstrip("/"))

    def stop(self, kill=False):
        if kill:
            os.kill(self.proc.pid, signal.SIGKILL)
        else:
            detach(self.mnt)
        self.proc.wait(timeout=20)
        detach(self.mnt)


def rename(a, b):
    try:
        os.rename(a, b)
        return 0
    except OSError as e:
        return e.errno


def in_thread(func, *args):
    t = threading.Thread(target=func, args=args, daemon=True)
    t.start()
    return t


def held(port, key, timeout=10):
    """Waits until the lock document of KEY exists (read straight from the
    node, not through the recording proxy)."""
    deadline = time.monotonic() + timeout
    url = "http://127.0.0.1:%d/treelockfs-locks/_doc/%s" % (
        port, urllib.request.quote(key, safe=""))
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if json.loads(r.read()).get("found"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no lock on %s" % key)


def ctl(url, *args):
    r = subprocess.run([CTL, "--es_url=" + url] + list(args), capture_output=True,
                       text=True, timeout=120)
    print("treelockctl %s -> %d" % (" ".join(args), r.returncode), file=sys.stderr)
    return r


def workload(port, raw):
    """The store's real traffic, through recording proxies, into RAW."""
    # the mounts must bootstrap the index and store the scripts themselves
    direct = replay.Client(port)
    direct.request("DELETE", "/treelockfs-locks")
    for sid in SCRIPT_IDS:
        direct.request("DELETE", "/_scripts/" + sid)
    work = tempfile.mkdtemp(prefix="difftest-")
    backing = os.path.join(work, "backing")
    os.makedirs(backing)
    pa = Proxy(port, record=raw).start()
    pe = Proxy(port).start()
    pe._rec, pe._lock = pa._rec, pa._lock  # one file, one order
    mounts = []
    try:
        a = Mount(work, backing, "A", pa.url)           # bootstraps the index
        mounts.append(a)
        for d in ("d1", "p/d2", "p/q/d3", "p/q/r/d4"):
            os.makedirs(a.path(d))
            assert rename(a.path(d), a.path(d + "x")) == 0
        b = Mount(work, backing, "B", pa.url)
        mounts.append(b)
        # contended renames between two mounts: same source, and a directory
        # move against a rename inside it
        os.makedirs(a.path("c/x/y"))
        res = {}
        ts = [in_thread(lambda: res.setdefault("a", rename(a.path("c/x"), a.path("c/a")))),
              in_thread(lambda: res.setdefault("b", rename(b.path("c/x"), b.path("c/b"))))]
        for t in ts:
            t.join(30)
        os.makedirs(a.path("m/n/o"))
        ts = [in_thread(rename, a.path("m/n"), a.path("m2")),
              in_thread(rename, b.path("m/n/o"), b.path("m/n/o2"))]
        for t in ts:
            t.join(30)
        ctl(pa.url, "check")
        # the stored scripts vanish under a mount (deleted through the
        # recording proxy: the replays delete them too): the next rename
        # meets the missing ids and goes on inline
        through = replay.Client(pa.port)
        for sid in SCRIPT_IDS:
            through.request("DELETE", "/_scripts/" + sid)
        through.close()
        os.makedirs(b.path("s/t"))
        assert rename(b.path("s/t"), b.path("s/u")) == 0
        ctl(pa.url, "check")
        # a holder that is slow: locks, break
        c = Mount(work, backing, "C", pa.url, "rename_delay_ms=3000")
        mounts.append(c)
        os.makedirs(a.path("h/src"))
        t = in_thread(rename, c.path("h/src"), c.path("h/dst"))
        held(port, "/h/src")
        ctl(pa.url, "locks")
        ctl(pa.url, "locks", "/h")
        ctl(pa.url, "owners", "--no-wait")
        ctl(pa.url, "break", "--force", "/h/dst")
        t.join(30)
        c.stop()
        mounts.remove(c)
        # kill -9 of a holder, take-over by B, then intents and reap
        d = Mount(work, backing, "D", pa.url, "rename_delay_ms=60000")
        mounts.append(d)
        os.makedirs(a.path("k/src"))
        in_thread(rename, d.path("k/src"), d.path("k/dst"))
        held(port, "/k/src")
        d.stop(kill=True)
        mounts.remove(d)
        assert rename(b.path("k/src"), b.path("k/other")) == 0
        ctl(pa.url, "intents", "--no-wait")
        ctl(pa.url, "reap", "--dead", "--force")
        # fencing: E is cut off from the store while it holds locks
        e = Mount(work, backing, "E", pe.url, "rename_delay_ms=6000", "es_timeout_ms=500")
        mounts.append(e)
        os.makedirs(a.path("f/src"))
        res = {}
        t = in_thread(lambda: res.setdefault("e", rename(e.path("f/src"), e.path("f/dst"))))
        held(port, "/f/src")
        pe.reset_next(100000)
        assert rename(b.path("f/src"), b.path("f/taken")) == 0
        t.join(30)
        print("fenced rename: errno %s" % res.get("e"), file=sys.stderr)
        with pe._lock:
            pe._fail = []
        deadline = time.monotonic() + 10
        os.makedirs(a.path("f/again"))
        while rename(e.path("f/again"), e.path("f/again2")) != 0 and \
                time.monotonic() < deadline:
            time.sleep(0.3)
        ctl(pa.url, "owners", "--no-wait")
        ctl(pa.url, "intents", "--all", "--no-wait")
        ctl(pa.url, "reap", "--dead", "--force", "--no-wait")
    finally:
        for m in mounts:
            m.stop()
        direct.close()
        pa.stop()
        pe._rec = None
        pe.stop()
        shutil.rmtree(work, ignore_errors=True)


def canonical(port, exchanges):
    """The node's answers to EXCHANGES replayed in order."""
    client = replay.Client(port)
    answers = replay.replay(client, exchanges)
    client.close()
    out = []
    for x, (status, body) in zip(exchanges, answers):
        x = dict(x, status=status, response_body=body)
        out.append(x)
    return out


def node_version(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as r:
        return json.loads(r.read())["version"]["number"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=sorted(FLAVOR))
    ap.add_argument("--port", type=int)
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    ap.add_argument("--only", choices=["store", "probes"])
    args = ap.parse_args()
    node = None
    if args.port is None:
        data = tempfile.mkdtemp(prefix="difftest-node-")
        pf = os.path.join(data, "port")
        node = subprocess.Popen([os.path.join(TOP, "tests", "engines", "start"), args.engine,
                                 "--port-file", pf, "--data", os.path.join(data, "d")])
        deadline = time.monotonic() + 300
        while not os.path.exists(pf):
            if node.poll() is not None or time.monotonic() > deadline:
                sys.exit("the node did not start")
            time.sleep(0.5)
        args.port = int(open(pf).read().split()[0])
    try:
        header = {"engine": args.engine, "version": node_version(args.port),
                  "flavor": FLAVOR[args.engine]}
        os.makedirs(args.out, exist_ok=True)
        if args.only in (None, "store"):
            raw = tempfile.mktemp(prefix="difftest-raw-")
            workload(args.port, raw)
            ex, _ = [], None
            with open(raw) as f:
                ex = [json.loads(l) for l in f if l.strip()]
            os.unlink(raw)
            ex = [x for x in ex if not x.get("fault")]
            out = os.path.join(args.out, "store-%s.jsonl" % args.engine)
            replay.save(out, header, canonical(args.port, ex))
            print("%s: %d exchanges" % (out, len(ex)))
        if args.only in (None, "probes"):
            ex = probes.sequence(args.engine)
            out = os.path.join(args.out, "probes-%s.jsonl" % args.engine)
            replay.save(out, header, canonical(args.port, ex))
            print("%s: %d exchanges" % (out, len(ex)))
    finally:
        if node is not None:
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=120)


if __name__ == "__main__":
    main()
