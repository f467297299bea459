"""The run's real engine nodes, shared by the tiers.

Starting a real OpenSearch or Elasticsearch node costs a JVM start (half a
minute on a quiet 2-core machine, minutes on a busy one) and its warm-up.
Without a pool every tier that wants a node starts its own (the
differential test, the integration tests, the object-store tier): the
same engine started three or four times per run. run-tests.sh makes a pool
(TREELOCKFS_ENGINE_POOL, a directory of its own) and each single-node
engine is then started once, at the first tier that asks for it, and kept
until run-tests.sh stops the pool (or ``release``s an engine no later tier
uses).

A node of the pool is a plain single node (tests/engines/start ENGINE) in
POOL/ENGINE/, started in a session of its own so that it outlives the
pytest session that asked for it, and told (--owner) to stop when the
process that made the pool (TREELOCKFS_ENGINE_POOL_OWNER, run-tests.sh) is
gone, so that no node outlives the run even when run-tests.sh is killed
hard. A tier that takes a pooled node finds it as a fresh node as far as
the tests can tell (``scrub``: no index but the engine's own, no stored
script), and never stops it. Clusters (tests/engines' failover) and nodes
in network namespaces (tests/multihost) are not pooled: their tests kill
nodes.

Without TREELOCKFS_ENGINE_POOL (a tier run alone) nothing is pooled and
each tier starts and stops its own nodes, as before.

Also a command, for run-tests.sh:
    pool.py start DIR ENGINE...     starts those engines' nodes, one at a
                                    time (in the background while the unit
                                    tests run: they mostly wait); a tier
                                    asking for one meanwhile waits for its
                                    start, and one that failed to start is
                                    tried again by the tier that asks
    pool.py release DIR ENGINE...   stops those engines' nodes
    pool.py stop DIR                stops every node of DIR and removes DIR
Standard library only.
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
START = os.path.join(HERE, "start")
ENV = "TREELOCKFS_ENGINE_POOL"
OWNER_ENV = "TREELOCKFS_ENGINE_POOL_OWNER"


def directory():
    """The run's pool directory, or None (no pool: each tier starts its own)."""
    d = os.environ.get(ENV, "").strip()
    return d or None


def _get(url, timeout=30):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return None, None


def _request(url, method, timeout=60):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid):
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not reaped yet) is gone for our purposes
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class _Locked:
    """flock of POOL/ENGINE.lock: one tier at a time starts or checks a node."""

    def __init__(self, pool, engine):
        self.path = os.path.join(pool, engine + ".lock")

    def __enter__(self):
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _port(d):
    """The running node's HTTP port in D, or None: its launcher alive, the
    port file written, and the node answering GET /."""
    pf = os.path.join(d, "port")
    if not _alive(_pid(os.path.join(d, "start.pid"))) or not os.path.exists(pf):
        return None
    try:
        with open(pf) as f:
            port = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    # an idle node answers at once; a busy machine may take seconds
    st, _ = _get("http://127.0.0.1:%d/" % port, timeout=60)
    return port if st == 200 else None


def _stop(d, timeout=90):
    """Stops the node of D (its launcher: SIGTERM, which closes the node
    cleanly; SIGKILL after TIMEOUT, whereupon the JVM exits within a
    second by itself). Only the launcher this pool started is signalled."""
    pid = _pid(os.path.join(d, "start.pid"))
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # the JVMs the launcher started (their pids in DATA/node-K.pid) go with it
    for name in ("data",):
        nd = os.path.join(d, name)
        if not os.path.isdir(nd):
            continue
        for f in os.listdir(nd):
            if f.startswith("node-") and f.endswith(".pid"):
                p = _pid(os.path.join(nd, f))
                deadline = time.monotonic() + 30
                while _alive(p) and time.monotonic() < deadline:
                    time.sleep(0.1)
    try:
        os.unlink(os.path.join(d, "start.pid"))
    except OSError:
        pass


def node(engine, timeout=600):
    """The HTTP port of the pool's running ENGINE node, started now when
    there is none (RuntimeError with its launcher's log when it cannot
    start); None when there is no pool."""
    pool = directory()
    if pool is None:
        return None
    d = os.path.join(pool, engine)
    with _Locked(pool, engine):
        port = _port(d)
        if port is not None:
            return port
        _stop(d)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        pf = os.path.join(d, "port")
        cmd = [START, engine, "--port-file", pf, "--data", os.path.join(d, "data")]
        owner = os.environ.get(OWNER_ENV, "").strip()
        if owner:
            cmd += ["--owner", owner]
        with open(os.path.join(d, "start.log"), "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, ENGINE_START_TIMEOUT=str(int(timeout))))
        with open(os.path.join(d, "start.pid"), "w") as f:
            f.write("%d\n" % proc.pid)
        deadline = time.monotonic() + timeout + 30
        while not os.path.exists(pf):
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(d)
                proc.poll()
                raise RuntimeError("the pooled %s node did not start:\n%s" % (engine, log_tail(d)))
            time.sleep(0.2)
        # the launcher outlives this process: not ours to wait for
        proc.returncode = 0
        port = _port(d)
        if port is None:
            _stop(d)
            raise RuntimeError("the pooled %s node does not answer:\n%s" % (engine, log_tail(d)))
        return port


def log_tail(d, n=4000):
    try:
        with open(os.path.join(d, "start.log"), errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def scrub(port, timeout=120):
    """Makes the node at PORT as fresh as the tests can tell: every index
    but the engine's own hidden ones deleted, every stored script deleted.
    Raises AssertionError when it cannot."""
    base = "http://127.0.0.1:%d" % port
    st, idx = _get(base + "/_cat/indices?format=json&h=index", timeout=timeout)
    assert st == 200, "cannot list the indices of %s: %s" % (base, st)
    for i in idx or []:
        name = i.get("index", "")
        if name and not name.startswith("."):
            st = _request(base + "/" + urllib.parse.quote(name, safe=""), "DELETE", timeout)
            assert st in (200, 404), "cannot delete index %s of %s: %s" % (name, base, st)
    st, state = _get(base + "/_cluster/state/metadata?filter_path=metadata.stored_scripts",
                     timeout=timeout)
    assert st == 200, "cannot read the stored scripts of %s: %s" % (base, st)
    scripts = ((state or {}).get("metadata") or {}).get("stored_scripts") or {}
    for sid in scripts:
        st = _request(base + "/_scripts/" + urllib.parse.quote(sid, safe=""), "DELETE", timeout)
        assert st in (200, 404), "cannot delete stored script %s of %s: %s" % (sid, base, st)


def release(pool, engines):
    for e in engines:
        d = os.path.join(pool, e)
        if os.path.isdir(d):
            with _Locked(pool, e):
                _stop(d)


def stop(pool):
    if not os.path.isdir(pool):
        return
    release(pool, [e for e in sorted(os.listdir(pool))
                   if os.path.isdir(os.path.join(pool, e))])
    shutil.rmtree(pool, ignore_errors=True)


def start(pool, engines):
    """Starts ENGINES' nodes in POOL one after the other; says which did
    not start, and why, and carries on."""
    os.environ[ENV] = pool
    ok = True
    for e in engines:
        try:
            node(e)
        except RuntimeError as err:
            sys.stderr.write("pool.py: %s\n" % err)
            ok = False
    return ok


def main(argv):
    if len(argv) >= 2 and argv[0] == "start":
        return 0 if start(argv[1], argv[2:]) else 1
    if len(argv) >= 2 and argv[0] == "release":
        release(argv[1], argv[2:])
    elif len(argv) == 2 and argv[0] == "stop":
        stop(argv[1])
    else:
        sys.stderr.write("usage: pool.py start|release DIR ENGINE... | stop DIR\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
