"""Differential test: the emulator (tests/esemu) answers every request the
es lock store sends exactly as the real engine does.

Each corpus file (corpus/*.jsonl, recorded by record.py) is one sequence of
requests with a real node's answers.  Always: the sequence is replayed
against a fresh emulator of the matching flavour and every answer must equal
the engine's recorded one (status and JSON body field by field, apart from
what replay.normalize() ignores).  Where Java and Maven are available
(DIFFTEST_REAL=0 turns it off), the sequence is also replayed against a
real node without the sequence's indices and stored scripts (under
run-tests.sh the run's node of the engine, tests/engines/pool.py, cleaned
of every index and script first), and its answers must equal both the recording and the
emulator's.
"""
import glob
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import replay  # noqa: E402

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
    # every engine, the store's traffic and the probes
    names = set(_ids(CORPUS))
    for engine in ("opensearch", "opensearch3", "elasticsearch"):
        assert {"store-" + engine, "probes-" + engine} <= names, names
    total = sum(len(replay.load(p)[1]) for p in CORPUS)
    print("\ncorpus: %d files, %d requests" % (len(CORPUS), total))
    assert total > 100


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


# OpenSearch 2 first: test_clients.py's real node is one (a tier run alone
# then starts each engine once)
@pytest.mark.parametrize("engine", sorted(ENGINES, key=lambda e: (e != "opensearch", e)))
def test_real_engine_and_emulator_agree(engine, real_nodes, emulators):
    port = real_nodes(engine).port
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
