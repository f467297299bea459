"""Differential test: the emulator (tests/esemu) answers every request the
es lock store sends exactly as the real engine does.

Each corpus file (corpus/*.jsonl, recorded by record.py) is one sequence of
requests with a real node's answers.  Always: the sequence is replayed
against a fresh emulator of the matching flavour and every answer must equal
the engine's recorded one (status and JSON body field by field, apart from
what replay.normalize() ignores).  Where Java and Maven are available
(DIFFTEST_REAL=0 turns it off), the sequence is also replayed against a
fresh real node, and its answers must equal both the recording and the
emulator's.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "esemu"))

import replay  # noqa: E402
from emuproc import Emulator  # noqa: E402

CORPUS = sorted(glob.glob(os.path.join(HERE, "corpus", "*.jsonl")))
ENGINES = sorted({replay.load(p)[0]["engine"] for p in CORPUS})


def _ids(paths):
    return [os.path.basename(p)[:-len(".jsonl")] for p in paths]


def report(diffs, what):
    if diffs:
        print("\n%s: %d differences" % (what, len(diffs)))
        for d in diffs[:40]:
            print("  " + d)
    return diffs


def test_corpus_is_there():
    # both engines, the store's traffic and the probes
    names = set(_ids(CORPUS))
    for engine in ("opensearch", "elasticsearch"):
        assert {"store-" + engine, "probes-" + engine} <= names, names
    total = sum(len(replay.load(p)[1]) for p in CORPUS)
    print("\ncorpus: %d files, %d requests" % (len(CORPUS), total))
    assert total > 100


@pytest.fixture(scope="module")
def emulators(tmp_path_factory):
    started = {}

    def get(flavor):
        if flavor not in started:
            started[flavor] = Emulator(
                flavor=flavor, workdir=str(tmp_path_factory.mktemp("emu-" + flavor))).start()
        return started[flavor]
    yield get
    for e in started.values():
        e.stop()


@pytest.mark.parametrize("path", CORPUS, ids=_ids(CORPUS))
def test_emulator_answers_as_recorded(path, emulators):
    header, exchanges = replay.load(path)
    emu = emulators(header["flavor"])
    emu.admin("POST", "/_esemu/reset")
    client = replay.Client(emu.url.rsplit(":", 1)[1])
    answers = replay.replay(client, exchanges)
    client.close()
    diffs = report(replay.compare(exchanges, answers, header["engine"], "emulator"),
                   os.path.basename(path))
    print("\n%s: %d requests replayed, %d differences"
          % (os.path.basename(path), len(exchanges), len(diffs)))
    assert diffs == []


def _real_reason():
    if os.environ.get("DIFFTEST_REAL", "1") == "0":
        return "DIFFTEST_REAL=0"
    for tool in (os.environ.get("JAVA", "java"), os.environ.get("MVN", "mvn")):
        if shutil.which(tool) is None:
            return "no %s on PATH: the real engines cannot run here" % tool
    return None


@pytest.fixture(scope="module", params=ENGINES)
def real_node(request, tmp_path_factory):
    reason = _real_reason()
    if reason:
        print("\nreal-engine replay skipped: " + reason)
        pytest.skip(reason)
    data = str(tmp_path_factory.mktemp("node-" + request.param))
    pf = os.path.join(data, "port")
    log = open(os.path.join(data, "start.log"), "wb")
    proc = subprocess.Popen([os.path.join(TOP, "tests", "engines", "start"), request.param,
                             "--port-file", pf, "--data", os.path.join(data, "d")],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 400
    try:
        while not os.path.exists(pf):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(data, "start.log"), "rb") as f:
                    tail = f.read()[-2000:].decode("utf-8", "replace")
                pytest.fail("the %s node did not start:\n%s" % (request.param, tail))
            time.sleep(0.5)
        yield request.param, int(open(pf).read().split()[0])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_real_engine_and_emulator_agree(real_node, emulators):
    engine, port = real_node
    total = 0
    all_diffs = []
    for path in CORPUS:
        header, exchanges = replay.load(path)
        if header["engine"] != engine:
            continue
        client = replay.Client(port)
        real = replay.replay(client, exchanges)
        client.close()
        emu = emulators(header["flavor"])
        emu.admin("POST", "/_esemu/reset")
        client = replay.Client(emu.url.rsplit(":", 1)[1])
        mine = replay.replay(client, exchanges)
        client.close()
        name = os.path.basename(path)
        # the engine answers the sequence as it did when it was recorded ...
        all_diffs += report(replay.compare(exchanges, real, "recorded", engine), name)
        # ... and the emulator answers as the engine does now
        now = [dict(x, status=s, response_body=b) for x, (s, b) in zip(exchanges, real)]
        all_diffs += report(replay.compare(now, mine, engine, "emulator"), name)
        total += len(exchanges)
    print("\n%s: %d requests replayed against the engine and the emulator, %d differences"
          % (engine, total, len(all_diffs)))
    assert total > 0
    assert all_diffs == []
