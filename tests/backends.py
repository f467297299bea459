"""The lock-store backends the Elasticsearch tests run against.

One interface over two kinds of server:

* ``emulator``: tests/esemu in a subprocess, one flavour each (es7, es8,
  opensearch2, opensearch3). Its own admin API counts requests and injects
  every fault the tests know, including the ones only it can give (cut one
  owner by X-Opaque-Id, a failure rate, a restart with --data, TLS, users).
* ``engine``: a real OpenSearch 2.19.1, OpenSearch 3.3.0 or Elasticsearch
  7.10.2 node started by tests/engines/start (under run-tests.sh the run's
  node of that engine, tests/engines/pool.py, started once for every tier
  that uses it), with tests/engines/proxy.py in front of it. Clients
  talk to the proxy, which counts and records requests and injects pauses,
  503/429 answers, connection resets and latency.

Both give: ``name``, ``kind``, ``flavor``, ``version``, ``url`` (what a mount
or treelockctl is given), ``reset()`` (no lock index, no counters, no
faults), ``docs(index)`` (every document, searchable or not yet),
``stats()``/``reset_stats()`` (store requests by name, as the emulator
counts them), ``fail(kind, count)``, ``pause()``/``resume()``,
``latency(ms)``, ``faults`` (the set of fault names it can inject) and
``stop()``. Only the standard library is used, so both pytest suites and
scripts can import it.

Which backends the tests use is chosen by TREELOCKFS_BACKENDS, a comma list
of ``emulator`` (every emulator flavour the tests use), ``emulator-FLAVOR``,
``opensearch``, ``opensearch3``, ``elasticsearch`` and ``engines`` (all
three). By default: the emulator, and the real engines where java and mvn
are installed (OpenSearch 3 where a Java 21 or later is found beside them,
tests/engines/find-java).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(TESTS, "esemu"))
sys.path.insert(0, os.path.join(TESTS, "engines"))

from emuproc import Emulator  # noqa: E402

INDEX = "treelockfs-locks"
EMULATOR_FLAVORS = ["es7", "es8", "opensearch2"]
ENGINES = {"opensearch": "OpenSearch 2.19.1", "opensearch3": "OpenSearch 3.3.0",
           "elasticsearch": "Elasticsearch 7.10.2"}
# the oldest Java each engine runs on
ENGINE_JAVA = {"opensearch": 17, "opensearch3": 21, "elasticsearch": 17}
# engines that, unless TREELOCKFS_BACKENDS names them, run only the tests
# that name them in their backends mark (the difftest replays its whole
# corpus on them): OpenSearch 3 answers the store's every request as
# OpenSearch 2 does (tests/difftest), so the default run does not repeat
# every es test on it (backend_fixtures.parametrize_backends)
OPT_IN_ENGINES = {"opensearch3"}
ENGINE_START = os.path.join(TESTS, "engines", "start")
FIND_JAVA = os.path.join(TESTS, "engines", "find-java")

# faults every backend injects; the emulator has more (see EMULATOR_FAULTS)
COMMON_FAULTS = {"503", "429", "reset", "pause", "latency"}
EMULATOR_FAULTS = COMMON_FAULTS | {"block", "fail_rate", "restart", "tls", "auth"}


def _http(base, method, path, body=None, timeout=60):
    """(status, decoded JSON body) of one request; never raises on a status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw


def _bulk(base, lines, timeout=60):
    """(status, decoded body) of one _bulk of LINES (dicts), never raising on
    a status; an item that failed makes the status 500."""
    data = ("\n".join(json.dumps(l) for l in lines) + "\n").encode()
    req = urllib.request.Request(base + "/_bulk", data=data, method="POST")
    req.add_header("Content-Type", "application/x-ndjson")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read())
            return (500 if body.get("errors") else r.status), body
    except urllib.error.HTTPError as e:
        return e.code, None


def recreate_without_replica(base, index=INDEX):
    """Replaces the lock index at BASE (a node's URL) by one with the same
    mapping and no replica, none to come (auto_expand_replicas off): an
    index an operator made or changed by hand."""
    st, m = _http(base, "GET", "/%s/_mapping" % index)
    assert st == 200, m
    st, r = _http(base, "DELETE", "/" + index)
    assert st == 200, r
    st, r = _http(base, "PUT", "/" + index, {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0,
                     "auto_expand_replicas": "false"},
        "mappings": m[index]["mappings"]})
    assert st == 200, r


def request_name(method, path):
    """The name under which the emulator's /_esemu/stats counts a request
    (the REST spec's API name), for requests recorded by the proxy."""
    parts = [p for p in urllib.parse.urlsplit(path).path.split("/") if p]
    if not parts:
        return "info"
    if parts[-1] == "_bulk":
        return "bulk"
    if parts[-1] in ("_search", "_count", "_mget", "_refresh"):
        return {"_refresh": "refresh"}.get(parts[-1], parts[-1][1:])
    if len(parts) >= 3 and parts[1] in ("_create", "_update"):
        return parts[1][1:]
    if len(parts) >= 3 and parts[1] == "_doc":
        return {"GET": "get", "HEAD": "exists", "DELETE": "delete"}.get(method, "index")
    if parts[0].startswith("_"):
        return parts[0][1:]
    return {"HEAD": "indices.exists", "PUT": "indices.create", "GET": "indices.get",
            "DELETE": "indices.delete"}.get(method, method.lower())


class EmulatorBackend(Emulator):
    """The emulator of one flavour, with the backend interface on top of its
    admin API (everything of emuproc.Emulator stays available)."""

    kind = "emulator"
    faults = EMULATOR_FAULTS

    def __init__(self, flavor="es8", workdir=None, data=None):
        Emulator.__init__(self, flavor=flavor, workdir=workdir, data=data)
        self.name = "emulator-" + flavor
        self.version = flavor

    def reset(self):
        self.admin("POST", "/_esemu/reset")
        return self

    def docs(self, index=INDEX):
        r = self.admin("GET", "/_esemu/docs/" + index)
        return r.get("docs", {}) if isinstance(r, dict) else {}

    def reset_stats(self):
        self.admin("POST", "/_esemu/reset_stats")

    def fail(self, kind="503", count=1):
        self.admin("POST", "/_esemu/fail", {"count": count, "kind": str(kind)})

    def pause(self):
        self.admin("POST", "/_esemu/pause")

    def resume(self):
        self.admin("POST", "/_esemu/resume")

    def latency(self, ms):
        self.admin("POST", "/_esemu/latency", {"ms": int(ms)})

    def refresh(self, index=INDEX):
        """The emulator makes every write searchable at once."""


class EngineBackend(object):
    """A real node (tests/engines/start) behind the recording proxy."""

    kind = "engine"
    faults = COMMON_FAULTS

    def __init__(self, engine, workdir=None, start_timeout=600):
        self.engine = engine
        self.name = engine
        self.flavor = engine
        self.version = ENGINES[engine]
        self.workdir = workdir or tempfile.mkdtemp(prefix="engine-")
        self.start_timeout = start_timeout
        self.proc = None
        self.proxy = None
        self.node_port = None
        self.pooled = False
        self._rec = os.path.join(self.workdir, "exchanges.jsonl")
        self._rec_from = 0

    # --- life ------------------------------------------------------------------
    def start(self):
        from proxy import Proxy
        import pool
        # the run's node of this engine (tests/engines/pool.py), started
        # once per run, found as fresh: or one of our own
        self.node_port = pool.node(self.engine, self.start_timeout)
        if self.node_port is not None:
            self.pooled = True
            pool.scrub(self.node_port)
            self._warm_up()
            self.proxy = Proxy(self.node_port, record=self._rec).start()
            return self
        port_file = os.path.join(self.workdir, "port")
        log = open(os.path.join(self.workdir, "start.log"), "wb")
        self.proc = subprocess.Popen([ENGINE_START, self.engine, "--port-file", port_file,
                                      "--data", os.path.join(self.workdir, "data")],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, ENGINE_START_TIMEOUT=str(self.start_timeout)))
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError("%s did not start:\n%s" % (self.version, self.start_log()))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("%s not ready after %ds" % (self.version, self.start_timeout))
            time.sleep(0.2)
        with open(port_file) as f:
            self.node_port = int(f.read().split()[0])
        self._warm_up()
        self.proxy = Proxy(self.node_port, record=self._rec).start()
        return self

    def _warm_up(self, timeout=120, prompt=0.5):
        """Waits (TIMEOUT at most) until the node has answered a write, a
        scripted update in a _bulk (as the store sends them: Painless
        compiled and run) and a search of a scratch index within PROMPT
        seconds three times running: a node just started, its code not
        compiled yet, answers its first requests in seconds on a busy
        machine, longer than the mounts' es_timeout_ms. Then the tests judge
        it as it is."""
        deadline = time.monotonic() + timeout
        index = "/treelockfs-warmup"
        running = n = 0
        while running < 3 and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                st1, _ = _http(self.node_url, "PUT", index + "/_doc/%d?refresh=true" % n, {"n": n})
                st2, _ = _http(self.node_url, "POST", index + "/_search", {"size": 1})
                st3, _ = _bulk(self.node_url, [
                    {"update": {"_index": index[1:], "_id": "s%d" % (n % 2)}},
                    {"script": {"source": "ctx._source.n += params.d", "lang": "painless",
                                "params": {"d": n}}, "upsert": {"n": 0}}])
            except OSError:
                st1 = st2 = st3 = None
            n += 1
            quick = st1 in (200, 201) and st2 == 200 and st3 == 200 and \
                time.monotonic() - t0 < prompt
            running = running + 1 if quick else 0
        try:
            _http(self.node_url, "DELETE", index)
        except OSError:
            pass

    def start_log(self):
        try:
            with open(os.path.join(self.workdir, "start.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        """Stops the proxy, and the node unless it is the run's (pooled:
        left for the next tier, cleaned of this session's indices and
        scripts)."""
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if self.pooled and self.node_port is not None:
            import pool
            try:
                pool.scrub(self.node_port)
            except AssertionError:
                pass  # the next user scrubs it again, and fails if it cannot
            self.node_port = None
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
            self.proc = None

    @property
    def url(self):
        return self.proxy.url

    @property
    def node_url(self):
        """The node itself, past the proxy: not counted, no faults."""
        return "http://127.0.0.1:%d" % self.node_port

    # --- the backend interface ---------------------------------------------------
    def reset(self):
        self.proxy.clear_faults()
        for name in (INDEX, INDEX + "*"):
            _http(self.node_url, "DELETE", "/%s?ignore_unavailable=true" % urllib.parse.quote(name))
        self.reset_stats()
        return self

    def refresh(self, index=INDEX):
        _http(self.node_url, "POST", "/%s/_refresh?ignore_unavailable=true" % index)

    def docs(self, index=INDEX):
        """Every document of INDEX, as the emulator's /_esemu/docs gives them:
        {id: {"_source", "_seq_no", "_primary_term", "_version"}}. Refreshes
        first (past the proxy) so that writes not yet searchable are seen."""
        self.refresh(index)
        st, body = _http(self.node_url, "POST", "/%s/_search?seq_no_primary_term=true&version=true"
                         % index, {"size": 10000, "query": {"match_all": {}}})
        if st != 200:
            return {}
        return {h["_id"]: {"_source": h["_source"], "_seq_no": h.get("_seq_no"),
                           "_primary_term": h.get("_primary_term"), "_version": h.get("_version")}
                for h in body["hits"]["hits"]}

    def stats(self):
        """{"requests": {name: n}, "total": n} since the last reset_stats()."""
        counts = {}
        total = 0
        with open(self._rec, encoding="utf-8") as f:
            f.seek(self._rec_from)
            for line in f:
                if not line.endswith("\n"):
                    break
                r = json.loads(line)
                name = request_name(r["method"], r["path"])
                counts[name] = counts.get(name, 0) + 1
                total += 1
        return {"requests": counts, "total": total}

    def reset_stats(self):
        self.proxy.reset_stats()
        self._rec_from = os.path.getsize(self._rec) if os.path.exists(self._rec) else 0

    def fail(self, kind="503", count=1):
        if str(kind) == "reset":
            self.proxy.reset_next(count)
        else:
            self.proxy.fail_next(count, int(kind))

    def pause(self):
        self.proxy.pause()

    def resume(self):
        self.proxy.resume()

    def latency(self, ms):
        self.proxy.set_latency(ms / 1000.0)


# --- selection ---------------------------------------------------------------------


_AVAILABLE = {}


def engines_available(engine="opensearch"):
    """None when real ENGINE nodes can be started here, else why not.
    Asked once per engine and process: each asking runs java -version on
    every candidate JDK, and pytest asks for every test it collects."""
    if engine not in _AVAILABLE:
        _AVAILABLE[engine] = _engines_available(engine)
    return _AVAILABLE[engine]


def _engines_available(engine):
    missing = [c for c in ("java", "javac", "mvn") if shutil.which(c) is None]
    if missing:
        return "no %s on PATH (Debian packages default-jdk-headless, maven)" % " or ".join(missing)
    r = subprocess.run([FIND_JAVA, str(ENGINE_JAVA.get(engine, 17))], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return "%s needs Java %d or later: %s" % (ENGINES.get(engine, engine),
                                                   ENGINE_JAVA.get(engine, 17), r.stderr.strip())
    return None


def selected():
    """(names of the backends to test, {name: why it is skipped}) from
    TREELOCKFS_BACKENDS or the defaults."""
    env = os.environ.get("TREELOCKFS_BACKENDS", "").strip()
    skipped = {}
    if env:
        names = []
        for w in [w.strip() for w in env.split(",") if w.strip()]:
            if w == "emulator":
                names += ["emulator-" + f for f in EMULATOR_FLAVORS]
            elif w == "engines":
                names += list(ENGINES)
            elif w in ENGINES or (w.startswith("emulator-") and len(w) > 9):
                names.append(w)
            else:
                raise ValueError("TREELOCKFS_BACKENDS: unknown backend %r" % w)
        names = list(dict.fromkeys(names))
        for e in [n for n in names if n in ENGINES]:
            why = engines_available(e)
            if why:
                skipped[e] = why
        return names, skipped
    names = ["emulator-" + f for f in EMULATOR_FLAVORS]
    for e in ENGINES:
        why = engines_available(e)
        if why:
            skipped[e] = why
        else:
            names.append(e)
    return names, skipped


def make(name, workdir):
    """An unstarted backend called NAME."""
    if name.startswith("emulator-"):
        return EmulatorBackend(name[len("emulator-"):], workdir=workdir)
    return EngineBackend(name, workdir=workdir)
