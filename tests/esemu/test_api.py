"""The APIs the es lock store uses, through HTTP: documents, CAS, updates
by script, bulk, mget, search, mappings, and the refusals of what the
emulator does not do (the differential test checks the answers against
real engines; these tests check the emulator's own rules)."""

import json

import pytest

MAPPING = {"settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
           "mappings": {"dynamic": False, "_meta": {"treelockfs": {"strategy": "tree"}},
                        "properties": {"owner": {"type": "keyword"}, "n": {"type": "long"},
                                       "holders": {"enabled": False}}}}


def ndjson(*lines):
    return "".join(json.dumps(x) + "\n" for x in lines)


def test_api__index_mapping_and_conflicts(es):
    assert es.put("/locks", MAPPING)[0] == 200
    st, _, b = es.put("/locks", MAPPING)
    assert st == 400 and b["error"]["type"] == "resource_already_exists_exception"
    st, _, b = es.get("/locks/_mapping")
    assert b["locks"]["mappings"]["dynamic"] == "false"
    assert b["locks"]["mappings"]["properties"]["holders"] == {"type": "object", "enabled": False}
    st, _, b = es.put("/locks/_doc/%2Fa?op_type=create&refresh=true", {"owner": "o1"})
    assert st == 201 and b["_shards"] == {"total": 1, "successful": 1, "failed": 0}
    assert b["forced_refresh"] is True and (b["_seq_no"], b["_version"]) == (0, 1)
    st, _, b = es.put("/locks/_create/%2Fa", {"owner": "o2"})
    assert st == 409 and b["error"]["reason"] == \
        "[/a]: version conflict, document already exists (current version [1])"
    st, _, b = es.put("/locks/_doc/%2Fa?if_seq_no=5&if_primary_term=1", {"owner": "o2"})
    assert st == 409 and "required seqNo [5]" in b["error"]["reason"]
    st, _, b = es.put("/locks/_doc/%2Fa?if_seq_no=0&if_primary_term=1", {"owner": "o2"})
    assert st == 200 and b["result"] == "updated" and b["_version"] == 2
    st, _, b = es.put("/locks/_doc/b", {"n": "x", "_id": "b"})
    assert st == 400 and b["error"]["type"] == "mapper_parsing_exception"
    st, _, b = es.get("/locks/_doc/%2Fa")
    assert st == 200 and b["_source"] == {"owner": "o2"} and b["_seq_no"] == 1
    st, _, b = es.delete("/locks/_doc/%2Fa?if_seq_no=0&if_primary_term=1")
    assert st == 409
    st, _, b = es.delete("/locks/_doc/%2Fa")
    assert st == 200 and b["result"] == "deleted"
    # the tombstone: a re-created document continues the version
    assert es.put("/locks/_create/%2Fa", {"owner": "o3"})[2]["_version"] == 4
    assert es.get("/nope/_doc/x")[2]["error"]["type"] == "index_not_found_exception"


def test_api__update_by_script_and_upsert(es):
    es.put("/locks", MAPPING)
    acq = "if (ctx._source.owner == null) { ctx._source.owner = params.o } else { ctx.op = 'noop' }"
    body = {"script": {"source": acq, "params": {"o": "A"}}, "scripted_upsert": True, "upsert": {}}
    st, _, b = es.post("/locks/_update/x", body)
    assert st == 201 and b["result"] == "created"
    st, _, b = es.post("/locks/_update/x", body)
    assert st == 200 and b["result"] == "noop" and b["_shards"]["total"] == 0
    st, _, b = es.post("/locks/_update/x", {"script": {"source": "throw new IllegalStateException('held')"}})
    assert st == 400 and b["error"]["reason"] == "failed to execute script"
    assert b["error"]["caused_by"]["caused_by"] == {"type": "illegal_state_exception", "reason": "held"}
    st, _, b = es.post("/locks/_update/x", {"script": {"source": "ctx.op = 'delete'"}})
    assert st == 200 and b["result"] == "deleted"
    st, _, b = es.post("/locks/_update/x", {"script": {"source": "ctx.op = 'delete'"}})
    assert st == 404 and b["error"]["reason"] == "[x]: document missing"
    st, _, b = es.post("/locks/_update/x", {"script": {"source": "ctx._source.n = 0.0 / 0.0"},
                                            "upsert": {"n": 1}})
    assert st == 201  # a plain upsert does not run the script
    st, _, b = es.post("/locks/_update/x", {"script": {"source": "ctx._source.n = 0.0 / 0.0"}})
    assert st == 400 and b["error"]["caused_by"]["reason"] == 'For input string: "NaN"'
    st, _, b = es.post("/locks/_update/x", {"doc": {"n": 2}})
    assert st == 400 and b["error"]["reason"].startswith("[esemu]")
    st, _, b = es.post("/locks/_update/x?if_seq_no=1&if_primary_term=1&retry_on_conflict=2",
                       {"script": {"source": "ctx.op = 'noop'"}})
    assert st == 400 and "compare and write operations can not be retried" in b["error"]["reason"]


def test_api__bulk_mget_and_search(es):
    es.put("/locks", MAPPING)
    st, _, b = es.post("/locks/_bulk?refresh=true", ndjson(
        {"create": {"_id": "/a"}}, {"owner": "A", "n": 1},
        {"create": {"_id": "/a"}}, {"owner": "B"},
        {"index": {"_id": "/b"}}, {"owner": "B", "n": 2},
        {"update": {"_id": "/b", "retry_on_conflict": 5}},
        {"script": {"source": "ctx._source.n += params.k", "params": {"k": 10}}},
        {"update": {"_id": "/c"}}, {"script": {"source": "ctx._source.n = 1"}},
        {"delete": {"_id": "/z"}}), ctype="application/x-ndjson")
    assert st == 200 and b["errors"] is True
    got = [(list(i)[0], list(i.values())[0]["status"]) for i in b["items"]]
    assert got == [("create", 201), ("create", 409), ("index", 201), ("update", 200),
                   ("update", 404), ("delete", 404)]
    assert b["items"][0]["create"]["forced_refresh"] is True
    st, _, b = es.post("/locks/_mget", {"ids": ["/a", "/nope"]})
    assert [d["found"] for d in b["docs"]] == [True, False]
    assert b["docs"][0]["_source"] == {"owner": "A", "n": 1}
    st, _, b = es.post("/locks/_search", {"size": 10000, "seq_no_primary_term": True,
                                          "query": {"term": {"owner": "B"}}})
    hits = b["hits"]["hits"]
    assert b["hits"]["total"] == {"value": 1, "relation": "eq"}
    assert [(h["_id"], h["_source"]["n"], h["_seq_no"]) for h in hits] == [("/b", 12, 2)]
    st, _, b = es.post("/locks/_search", {"query": {"ids": {"values": ["/a", "/b", "/q"]}}})
    assert sorted(h["_id"] for h in b["hits"]["hits"]) == ["/a", "/b"]
    st, _, b = es.post("/locks/_search", {"query": {"match_all": {}}, "aggs": {}})
    assert st == 400 and "[esemu] search option [aggs]" in b["error"]["reason"]
    st, _, b = es.post("/locks/_search", {"query": {"prefix": {"owner": "A"}}})
    assert st == 400 and "[esemu] query [prefix]" in b["error"]["reason"]


def test_api__search_sees_the_last_refresh(es):
    es.put("/r", {"settings": {"refresh_interval": "-1"}, "mappings": MAPPING["mappings"]})
    es.put("/r/_doc/1", {"owner": "A"})
    assert es.post("/r/_search", {})[2]["hits"]["hits"] == []
    assert es.get("/r/_doc/1")[0] == 200  # realtime
    es.post("/r/_refresh")
    assert len(es.post("/r/_search", {})[2]["hits"]["hits"]) == 1


@pytest.mark.parametrize("method,path,body,status,reason", [
    ("GET", "/locks/_count", None, 400, "no handler found for uri [/locks/_count] and method [GET]"),
    ("GET", "/_cat/indices", None, 400, "no handler found for uri [/_cat/indices] and method [GET]"),
    ("DELETE", "/locks/_search", None, 405,
     "Incorrect HTTP method for uri [/locks/_search] and method [DELETE], allowed: [GET, POST]"),
    ("PUT", "/locks/_doc/1?foo=external", {"a": 1}, 400,
     "request [/locks/_doc/1] contains unrecognized parameter: [foo]"),
    ("PUT", "/locks/_doc/1?refresh=maybe", {"a": 1}, 400, "Unknown value for refresh: [maybe]."),
    ("PUT", "/locks/_doc/1?timeout=-5s", {"a": 1}, 400,
     "failed to parse setting [timeout] with value [-5s] as a time value: negative durations "
     "are not supported"),
])
def test_api__refusals(es, method, path, body, status, reason):
    st, _, b = es.request(method, path, body)
    assert st == status
    assert (b["error"] if isinstance(b["error"], str) else b["error"]["reason"]) == reason


def test_api__content_type_and_product_header(es, es7):
    st, h, b = es.request("PUT", "/locks/_doc/1", b'{"a":1}', ctype="text/plain")
    assert st == 406 and b["error"] == "Content-Type header [text/plain] is not supported"
    assert h["x-elastic-product"] == "Elasticsearch"
    st, h, b = es.request("PUT", "/locks/_doc/1", b'{"a":1}',
                          headers={"Content-Type": "application/vnd.elasticsearch+json; "
                                                   "compatible-with=8",
                                   "Accept": "application/vnd.elasticsearch+json; compatible-with=8"})
    assert st == 201 and h["content-type"] == "application/vnd.elasticsearch+json;compatible-with=8"
    st, _, b = es7.put("/locks/_doc/1", {"a": 1})
    assert b["_type"] == "_doc"
    st, _, b = es7.post("/locks/_update/2", {"script": {"source": "ctx.op = 'noop'"}})
    assert b["error"]["reason"] == "[_doc][2]: document missing"


def test_api__missing_index(es):
    st, _, b = es.post("/gone/_mget", {"ids": ["/a"]})
    assert st == 200 and b["docs"][0]["error"]["type"] == "index_not_found_exception"
    st, _, b = es.post("/_bulk", ndjson({"delete": {"_index": "gone", "_id": "/a"}}),
                       ctype="application/x-ndjson")
    assert st == 200 and b["errors"] is True
    assert b["items"][0]["delete"]["error"]["type"] == "index_not_found_exception"
    for path in ("/gone/_search", "/gone/_refresh", "/gone/_mapping"):
        assert es.request("POST" if "_mapping" not in path else "GET", path)[0] == 404
