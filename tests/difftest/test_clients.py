"""The official Python clients run a small lock workload (client_workload.py)
against the emulator and, for OpenSearch, a real node: each must see the
same answers.  elasticsearch 8.x and opensearch-py 2.x come from PyPI,
pinned, into a virtual environment made here (.venv-test, skipped with the
reason where PyPI cannot be reached); Debian's python3-elasticsearch 7.17
runs on /usr/bin/python3.

A real Elasticsearch 7.10.2 node is left out on purpose: the 8.x client
refuses any server without the X-Elastic-Product header, and the 7.17
client one whose build_flavor is not "default" (the 7.10.2 jars answer
"unknown")."""
import json
import os
import subprocess
import sys
import venv

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("DIFFTEST_VENV", os.path.join(TOP, ".venv-test"))
PINNED = ["elasticsearch==8.15.1", "elastic-transport==8.19.0", "opensearch-py==2.8.0"]
WORKLOAD = os.path.join(HERE, "client_workload.py")
DEBIAN_PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")

EXPECTED = {"create": "created", "create_again": [409, "version_conflict_engine_exception"],
            "take_over": "updated", "seq_no_grew": True, "stale_take_over": "conflict",
            "search": [["/a", "o2", True]], "search_total": 1, "get": [True, "o2", True],
            "stale_delete": "conflict", "delete": "deleted", "get_deleted": "not found"}


@pytest.fixture(scope="session")
def venv_python():
    py = os.path.join(VENV, "bin", "python")
    stamp = os.path.join(VENV, "pinned.txt")
    want = "\n".join(PINNED) + "\n"
    if not (os.path.exists(stamp) and open(stamp).read() == want):
        if not os.path.exists(py):
            venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
                           + PINNED, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            reason = "the pinned clients could not be installed from PyPI: %s" % (
                r.stderr.strip().splitlines() or ["?"])[-1]
            print("\n" + reason)
            pytest.skip(reason)
        with open(stamp, "w") as f:
            f.write(want)
    return py


def run(python, kind, url):
    r = subprocess.run([python, "-W", "ignore", WORKLOAD, kind, url, "difftest-clients"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    print("\n%s against %s: %s" % (out.pop("client"), url, json.dumps(out, sort_keys=True)))
    return out


def test_debian_client_7_17_against_emulator(emulators):
    try:
        subprocess.run([DEBIAN_PYTHON, "-c", "import elasticsearch"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no python3-elasticsearch (Debian) for %s" % DEBIAN_PYTHON)
    assert run(DEBIAN_PYTHON, "elasticsearch", emulators("es7").url) == EXPECTED


def test_elasticsearch_8_against_emulator(venv_python, emulators):
    assert run(venv_python, "elasticsearch", emulators("es8").url) == EXPECTED


def test_opensearch_py_against_emulator(venv_python, emulators):
    assert run(venv_python, "opensearch", emulators("opensearch2").url) == EXPECTED


def test_opensearch_py_against_real_node(venv_python, real_nodes):
    assert run(venv_python, "opensearch", real_nodes("opensearch").url) == EXPECTED
