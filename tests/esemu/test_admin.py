"""The /_esemu/ admin API: counters, reset, pause, failures, blocks, latency."""

import http.client
import json
import select
import socket
import threading
import time
import urllib.parse

import pytest

from conftest import Client


def test_stats_count_per_api_and_admin_is_not_counted(emu8, es):
    emu8.admin("POST", "/_esemu/reset_stats")
    es.put("/i", {"mappings": {"properties": {"k": {"type": "keyword"}}}})
    es.put("/i/_doc/1", {"k": "v"})
    es.put("/i/_create/2", {"k": "v"})
    es.get("/i/_doc/1")
    es.post("/i/_update/1", {"script": {"source": "ctx._source.k = 'w'"}})
    es.post("/_bulk", '{"delete":{"_index":"i","_id":"2"}}\n', ctype="application/x-ndjson")
    es.post("/i/_refresh")
    es.post("/i/_search", {})
    es.post("/i/_mget", {"ids": ["1"]})
    es.delete("/i/_doc/1")
    es.head("/i")  # no such route: counted as unknown
    es.get("/i/_mapping")
    es.get("/")
    es.delete("/i")
    s = emu8.admin("GET", "/_esemu/stats")
    assert s["requests"] == {"indices.create": 1, "index": 1, "create": 1, "get": 1, "update": 1, "bulk": 1,
                             "refresh": 1, "search": 1, "mget": 1, "delete": 1,
                             "unknown": 1, "indices.get_mapping": 1, "info": 1,
                             "indices.delete": 1}
    assert s["total"] == 14
    emu8.admin("POST", "/_esemu/reset_stats")
    assert emu8.admin("GET", "/_esemu/stats") == {"requests": {}, "total": 0}


def test_reset_drops_data(emu8, es):
    es.put("/i/_doc/1", {"a": 1})
    emu8.admin("POST", "/_esemu/reset")
    assert es.get("/i/_mapping")[0] == 404


def test_reset_drops_requests_that_came_before_it(emu8, es):
    """A write that arrived before a reset (here held by a pause) never
    lands after it: it would re-create the index, without its mapping, under
    the next test's feet."""
    emu8.admin("POST", "/_esemu/pause")
    result = {}

    def write():
        try:
            result["r"] = Client(emu8.url).put("/i/_doc/1", {"a": 1})
        except (OSError, http.client.HTTPException) as e:
            result["r"] = e

    t = threading.Thread(target=write)
    t.start()
    deadline = time.monotonic() + 30
    while emu8.admin("GET", "/_esemu/held")["held"] == 0:
        assert time.monotonic() < deadline, "the write never reached the emulator"
        time.sleep(0.05)
    emu8.admin("POST", "/_esemu/reset")  # also ends the pause
    t.join(30)
    assert not t.is_alive()
    assert isinstance(result["r"], Exception), result
    assert es.get("/i/_mapping")[0] == 404


def test_docs_dump_is_realtime(emu8, es):
    es.put("/i/_doc/1", {"a": 1})
    d = emu8.admin("GET", "/_esemu/docs/i")
    assert d["docs"]["1"]["_source"] == {"a": 1} and d["docs"]["1"]["_seq_no"] == 0


def test_inject_503_429_and_reset(emu8, es):
    emu8.admin("POST", "/_esemu/fail", {"count": 2, "kind": "503"})
    for _ in range(2):
        st, h, b = es.get("/")
        assert st == 503 and b["status"] == 503 and b["error"]["type"] == "cluster_block_exception"
        assert h["x-elastic-product"] == "Elasticsearch"
    assert es.get("/")[0] == 200
    emu8.admin("POST", "/_esemu/fail", {"count": 1, "kind": "429"})
    st, _, b = es.put("/i/_doc/1", {"a": 1})
    assert st == 429 and b["error"]["type"] == "es_rejected_execution_exception"
    assert es.get("/i/_doc/1")[0] == 404  # the rejected request was not executed
    emu8.admin("POST", "/_esemu/fail", {"count": 1, "kind": "reset"})
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        es.get("/")
    assert es.get("/")[0] == 200


def test_pause_and_resume(emu8, es):
    emu8.admin("POST", "/_esemu/pause")
    result = {}

    def call():
        result["r"] = es.get("/")
    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.4)
    assert t.is_alive() and "r" not in result
    assert emu8.admin("GET", "/_esemu/stats")["total"] >= 0  # admin still answers while paused
    emu8.admin("POST", "/_esemu/resume")
    t.join(5)
    assert result["r"][0] == 200


def test_block_by_opaque_id(emu8, es):
    emu8.admin("POST", "/_esemu/block", {"opaque_id": "mount-a", "mode": "reset"})
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        es.get("/", headers={"X-Opaque-Id": "mount-a"})
    assert es.get("/", headers={"X-Opaque-Id": "mount-b"})[0] == 200
    emu8.admin("POST", "/_esemu/block", {"opaque_id": "mount-a", "mode": "hang"})
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", es.get("/", headers={"X-Opaque-Id": "mount-a"})))
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    emu8.admin("POST", "/_esemu/block", {"opaque_id": "mount-a", "mode": "none"})
    t.join(5)
    assert result["r"][0] == 200


def test_latency(emu8, es):
    """A request waits the latency; the admin API does not: it answers
    while a delayed request, sent before it, is still waiting."""
    u = urllib.parse.urlsplit(emu8.url)
    emu8.admin("POST", "/_esemu/latency", {"ms": 3000})
    sock = socket.create_connection((u.hostname, u.port), timeout=60)
    try:
        t0 = time.monotonic()
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        emu8.admin("GET", "/_esemu/stats")
        answered_first = not select.select([sock], [], [], 0)[0]
        raw = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
        took = time.monotonic() - t0
    finally:
        sock.close()
        emu8.admin("POST", "/_esemu/latency", {"ms": 0})
    assert answered_first, "the admin call waited for the delayed request"
    assert raw.startswith(b"HTTP/1.") and b" 200 " in raw.split(b"\r\n", 1)[0], raw[:200]
    assert took >= 2.9, took


def test_nodes_claimed_in_cluster_health_and_index_settings(emu8, es):
    # one node serves; /_esemu/nodes sets what _cluster/health says
    assert es.get("/_cluster/health")[2]["number_of_data_nodes"] == 1
    emu8.admin("POST", "/_esemu/nodes", {"data_nodes": 3})
    st, _, b = es.get("/_cluster/health?filter_path=number_of_data_nodes")
    assert st == 200 and b == {"number_of_data_nodes": 3}
    es.put("/i", {"settings": {"number_of_shards": 1, "auto_expand_replicas": "false",
                               "number_of_replicas": 0, "translog": {"durability": "async"}}})
    st, _, b = es.get("/i/_settings?filter_path=*.settings.index.number_of_replicas,"
                      "*.settings.index.auto_expand_replicas,*.settings.index.translog.durability")
    assert st == 200 and b == {"i": {"settings": {"index": {
        "number_of_replicas": "0", "auto_expand_replicas": "false",
        "translog": {"durability": "async"}}}}}, b
    assert "data_nodes" in emu8.admin("POST", "/_esemu/nodes", {"data_nodes": 0})["error"]
    assert es.get("/_cluster/health")[2]["number_of_data_nodes"] == 3
    emu8.admin("POST", "/_esemu/reset")
    assert es.get("/_cluster/health")[2]["number_of_data_nodes"] == 1
