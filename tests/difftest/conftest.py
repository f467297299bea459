"""Fixtures of the differential tests: emulators by flavour, and real nodes
(one JVM at a time) where Java and Maven are installed."""
import os
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "esemu"))
sys.path.insert(0, os.path.join(TOP, "tests"))

from emuproc import Emulator  # noqa: E402
sys.path.insert(0, os.path.join(TOP, "tests", "engines"))
import pool  # noqa: E402
from mounts import stop_process  # noqa: E402


@pytest.fixture(scope="session")
def emulators(tmp_path_factory):
    """emulators(flavor) -> a running emulator of FLAVOR (one per flavour)."""
    started = {}

    def get(flavor):
        if flavor not in started:
            started[flavor] = Emulator(
                flavor=flavor, workdir=str(tmp_path_factory.mktemp("emu-" + flavor))).start()
        return started[flavor]
    yield get
    for e in started.values():
        e.stop()


def real_engine_reason(engine="opensearch"):
    """Why real nodes of ENGINE cannot run here, or None."""
    if os.environ.get("DIFFTEST_REAL", "1") == "0":
        return "DIFFTEST_REAL=0"
    for tool in (os.environ.get("JAVA", "java"), os.environ.get("MVN", "mvn")):
        if shutil.which(tool) is None:
            return "no %s on PATH: the real engines cannot run here" % tool
    r = subprocess.run([os.path.join(TOP, "tests", "engines", "find-java"),
                        "21" if engine == "opensearch3" else "17"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return "%s: %s" % (engine, r.stderr.strip())
    return None


class _Node:
    def __init__(self, engine, data):
        self.engine = engine
        self.proc = None
        # a wait for a node that was not there (the run's pool, or ours)
        wait = float(os.environ.get("DIFFTEST_START_TIMEOUT", "600"))
        try:
            port = pool.node(engine, wait)
        except RuntimeError as e:
            pytest.fail(str(e))
        if port is not None:
            # the run's node (tests/engines/pool.py), as fresh as the
            # sequences can tell: no index, no stored script
            pool.scrub(port)
            self.port = port
            self.url = "http://127.0.0.1:%d" % self.port
            return
        pf = os.path.join(data, "port")
        self.log_path = os.path.join(data, "start.log")
        self.log = open(self.log_path, "wb")
        # a JVM on a busy 2-core machine takes minutes to start
        self.proc = subprocess.Popen(
            [os.path.join(TOP, "tests", "engines", "start"), engine, "--port-file", pf,
             "--data", os.path.join(data, "d")], stdout=self.log, stderr=subprocess.STDOUT,
            env=dict(os.environ, ENGINE_START_TIMEOUT=str(int(wait))))
        deadline = time.monotonic() + wait + 30
        while not os.path.exists(pf):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(self.log_path, "rb") as f:
                    tail = f.read()[-2000:].decode("utf-8", "replace")
                pytest.fail("the %s node did not start:\n%s" % (engine, tail))
            time.sleep(0.5)
        with open(pf) as f:
            self.port = int(f.read().split()[0])
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc is None:
            pool.scrub(self.port)  # the pool's: left for the next tier, clean
            return
        stop_process(self.proc, timeout=120)
        self.log.close()


@pytest.fixture(scope="session")
def real_nodes(tmp_path_factory):
    """real_nodes(engine) -> a running real node of ENGINE ("opensearch",
    "opensearch3" or "elasticsearch"); skips with the reason where none can run.  Under
    run-tests.sh the run's node of ENGINE (tests/engines/pool.py, kept for the
    later tiers); else at most one JVM at a time: asking for the other engine
    stops the running one."""
    current = {}

    def get(engine):
        reason = real_engine_reason(engine)
        if reason:
            print("\nreal-engine part skipped: " + reason)
            pytest.skip(reason)
        node = current.get("node")
        if node is not None and node.engine == engine:
            return node
        if node is not None:
            node.stop()
            current.pop("node")
        current["node"] = _Node(engine, str(tmp_path_factory.mktemp("node-" + engine)))
        return current["node"]
    yield get
    if current.get("node") is not None:
        current["node"].stop()
