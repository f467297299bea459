"""Command line, persistence across restarts, auth, TLS and flavours."""

import base64
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading

import pytest

from conftest import Client
from emuproc import ESEMU, Emulator


@pytest.fixture
def make_emu(tmp_path):
    started = []

    def make(flavor="es8", args=(), data=None):
        emu = Emulator(flavor=flavor, data=data, workdir=str(tmp_path))
        emu.start(list(args))
        started.append(emu)
        return emu
    yield make
    for e in started:
        e.stop()


def test_help_says_test_double():
    out = subprocess.run([sys.executable, ESEMU, "--help"], capture_output=True, text=True, check=True).stdout
    assert "TEST DOUBLE" in out and "--port-file" in out and "--fail-rate" in out


def test_data_survives_restart(make_emu, tmp_path):
    data = str(tmp_path / "state.json")
    emu = make_emu(data=data)
    c = Client(emu.url)
    c.put("/locks", {"mappings": {"properties": {"owner": {"type": "keyword"}}, "_meta": {"s": "tree"}}})
    acked = []
    lock = threading.Lock()

    def writer(n):
        cc = Client(emu.url)
        for i in range(10):
            st, _, b = cc.put("/locks/_doc/%d-%d" % (n, i), {"owner": "o%d" % n, "i": i})
            assert st == 201
            with lock:
                acked.append((b["_id"], b["_seq_no"], b["_version"]))
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    c.post("/locks/_update/0-0", {"script": {"source": "ctx._source.i += 100"}})
    c.delete("/locks/_doc/1-1")
    emu.restart(kill=True)  # SIGKILL: only what was synced before answering survives
    c = Client(emu.url)
    assert c.get("/locks/_mapping")[2]["locks"]["mappings"]["_meta"] == {"s": "tree"}
    for doc_id, seq, ver in acked:
        if doc_id == "1-1":
            continue
        st, _, b = c.get("/locks/_doc/" + doc_id)
        assert st == 200, doc_id
        if doc_id != "0-0":
            assert b["_seq_no"] == seq and b["_version"] == ver
    assert c.get("/locks/_doc/0-0")[2]["_source"]["i"] == 100
    assert c.get("/locks/_doc/1-1")[0] == 404
    # restored documents count as refreshed; seq_no continues
    assert c.post("/locks/_search", {"query": {"term": {"owner": "o3"}}})[2]["hits"]["total"]["value"] == 10
    st, _, b = c.put("/locks/_doc/new", {"owner": "z"})
    assert b["_seq_no"] == 82
    # the tombstone survives too: re-creating continues the version
    assert c.put("/locks/_create/1-1", {"owner": "z"})[2]["_version"] == 3


def test_port_file_and_bind_address(make_emu, tmp_path):
    emu = make_emu()
    with open(os.path.join(str(tmp_path), "port")) as f:
        assert int(f.read()) == emu.port
    assert Client(emu.url).get("/")[0] == 200


def test_basic_auth(make_emu, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    emu = make_emu(args=["--user", "elastic", "--password-file", str(pw)])
    c = Client(emu.url)
    st, h, b = c.get("/")
    assert st == 401 and "www-authenticate" in h
    reason = "missing authentication credentials for REST request [/]"
    assert b["error"]["type"] == "security_exception" and b["error"]["reason"] == reason
    assert b["error"]["root_cause"][0]["reason"] == reason
    assert b["error"]["header"]["WWW-Authenticate"][0] == 'Basic realm="security" charset="UTF-8"'
    bad = base64.b64encode(b"elastic:nope").decode()
    st, _, b = c.get("/", headers={"Authorization": "Basic " + bad})
    assert st == 401 and b["error"]["reason"] == "unable to authenticate user [elastic] for REST request [/]"
    good = base64.b64encode(b"elastic:s3cret").decode()
    assert c.get("/", headers={"Authorization": "Basic " + good})[0] == 200
    # the admin namespace needs no credentials
    assert emu.admin("GET", "/_esemu/stats")["total"] >= 2
    # the official client with credentials
    es_mod = pytest.importorskip("elasticsearch")
    es = es_mod.Elasticsearch([emu.url], http_auth=("elastic", "s3cret"))
    assert es.info()["version"]["number"].startswith("8.")


def test_raw_401_has_www_authenticate_headers(make_emu, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("x")
    emu = make_emu(args=["--user", "u", "--password-file", str(pw)])
    conn = http.client.HTTPConnection("127.0.0.1", emu.port)
    conn.request("GET", "/idx/_doc/1")
    r = conn.getresponse()
    r.read()
    values = r.headers.get_all("WWW-Authenticate")
    assert r.status == 401 and 'Basic realm="security" charset="UTF-8"' in values and "ApiKey" in values


def test_api_key_auth(make_emu, tmp_path):
    kf = tmp_path / "key"
    kf.write_text("myid:mykey\n")
    emu = make_emu(args=["--api-key-file", str(kf)])
    c = Client(emu.url)
    assert c.get("/")[0] == 401
    enc = base64.b64encode(b"myid:mykey").decode()
    assert c.get("/", headers={"Authorization": "ApiKey " + enc})[0] == 200
    bad = base64.b64encode(b"myid:other").decode()
    st, _, b = c.get("/", headers={"Authorization": "ApiKey " + bad})
    assert st == 401 and b["error"]["type"] == "security_exception"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl command not installed")
def test_tls(make_emu, tmp_path):
    d = str(tmp_path)

    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=d)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=esemu test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "srv.crt", "-days", "2", "-extfile", "ext.cnf")
    emu = make_emu(args=["--tls-cert", os.path.join(d, "srv.crt"), "--tls-key", os.path.join(d, "srv.key")])
    assert emu.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", emu.port, context=ctx)
    conn.request("GET", "/")
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["tagline"] == "You Know, for Search"
    conn.request("PUT", "/i/_doc/1", body=b'{"a":1}', headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 201 and json.loads(r.read())["result"] == "created"  # keep-alive over TLS
    assert emu.admin("GET", "/_esemu/stats")["total"] == 2


def test_opensearch_flavor(make_emu):
    emu = make_emu(flavor="opensearch2")
    c = Client(emu.url)
    st, h, b = c.get("/")
    assert st == 200 and "x-elastic-product" not in h
    assert b["version"]["distribution"] == "opensearch" and b["version"]["number"].startswith("2.")
    st, h, b = c.put("/i/_doc/1", {"a": 1})
    assert "_type" not in b and "x-elastic-product" not in h


def test_es8_refuses_typed_requests(make_emu):
    c = Client(make_emu(flavor="es8").url)
    st, _, b = c.put("/fs/lock/global/_create", {})
    assert st == 400 and b["error"].startswith("no handler found for uri")


def test_fail_rate_is_deterministic(make_emu):
    def statuses():
        emu = make_emu(args=["--fail-rate", "0.5", "--seed", "7"])
        c = Client(emu.url)
        out = []
        for _ in range(20):
            try:
                out.append(c.get("/")[0])
            except (ConnectionError, http.client.HTTPException, OSError):
                out.append("reset")
        emu.stop()
        return out
    a, b = statuses(), statuses()
    assert a == b and 200 in a and len(set(a)) > 1
