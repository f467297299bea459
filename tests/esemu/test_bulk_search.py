"""_bulk, _mget and _search."""

import json

NDJSON = "application/x-ndjson"


def bulk(es, lines, path="/_bulk", qs=""):
    body = "".join(json.dumps(l) + "\n" for l in lines)
    return es.post(path + qs, body, ctype=NDJSON)


def test_bulk_mixed(es):
    st, _, b = bulk(es, [
        {"create": {"_index": "locks", "_id": "a"}}, {"lock_type": "exclusive"},
        {"create": {"_index": "locks", "_id": "a"}}, {"lock_type": "exclusive"},
        {"index": {"_index": "locks", "_id": "b"}}, {"x": 1},
        {"update": {"_index": "locks", "_id": "c"}},
        {"script": {"source": "ctx._source.lock_count++"}, "upsert": {"lock_type": "shared", "lock_count": 1}},
        {"update": {"_index": "locks", "_id": "c", "retry_on_conflict": 3}},
        {"script": {"source": "ctx._source.lock_count++"}, "upsert": {"lock_type": "shared", "lock_count": 1}},
        {"update": {"_index": "locks", "_id": "a"}},
        {"script": "if (ctx._source.lock_type == 'exclusive') { throw new IllegalStateException('x'); }"},
        {"delete": {"_index": "locks", "_id": "b"}},
        {"delete": {"_index": "locks", "_id": "zz"}},
        {"update": {"_index": "locks", "_id": "missing"}}, {"doc": {"a": 1}},
    ])
    assert st == 200 and b["errors"] is True and isinstance(b["took"], int)
    items = b["items"]
    assert [list(i)[0] for i in items] == ["create", "create", "index", "update", "update", "update", "delete",
                                           "delete", "update"]
    assert [list(i.values())[0]["status"] for i in items] == [201, 409, 201, 201, 200, 400, 200, 404, 404]
    conflict = items[1]["create"]
    assert conflict["error"]["type"] == "version_conflict_engine_exception" and "root_cause" not in conflict["error"]
    assert conflict["_index"] == "locks" and conflict["_id"] == "a"
    script_err = items[5]["update"]["error"]
    assert script_err["type"] == "illegal_argument_exception"
    assert script_err["caused_by"]["type"] == "script_exception"
    assert items[7]["delete"]["result"] == "not_found" and "error" not in items[7]["delete"]
    assert items[8]["update"]["error"]["type"] == "document_missing_exception"
    assert es.get("/locks/_doc/c")[2]["_source"]["lock_count"] == 2


def test_bulk_delete_404_is_not_an_error(es):
    es.put("/locks")
    st, _, b = bulk(es, [{"delete": {"_index": "locks", "_id": "nope"}}])
    assert st == 200 and b["errors"] is False and b["items"][0]["delete"]["status"] == 404


def test_bulk_default_index_and_refresh(es):
    st, _, b = bulk(es, [{"index": {"_id": "1"}}, {"a": 1}], path="/dflt/_bulk", qs="?refresh=true")
    assert b["items"][0]["index"]["_index"] == "dflt" and b["items"][0]["index"]["forced_refresh"] is True
    assert es.post("/dflt/_search")[2]["hits"]["total"]["value"] == 1


def test_bulk_requires_final_newline(es):
    st, _, b = es.post("/_bulk", '{"index":{"_index":"a","_id":"1"}}\n{"a":1}', ctype=NDJSON)
    assert st == 400 and b["error"]["type"] == "illegal_argument_exception"
    assert b["error"]["reason"] == "The bulk request must be terminated by a newline [\\n]"


def test_bulk_crlf_and_json_content_type(es):
    st, _, b = es.post("/_bulk", '{"index":{"_index":"a","_id":"1"}}\r\n{"a":1}\r\n', ctype="application/json")
    assert st == 200 and b["errors"] is False


def test_bulk_malformed(es):
    st, _, b = es.post("/_bulk", '{"bogus":{"_index":"a"}}\n{}\n', ctype=NDJSON)
    assert st == 400 and "Malformed action/metadata line [1]" in b["error"]["reason"]
    st, _, b = es.post("/_bulk", '{"index":{"_index":"a","nope":1}}\n{}\n', ctype=NDJSON)
    assert st == 400 and b["error"]["reason"] == "Action/metadata line [1] contains an unknown parameter [nope]"
    st, _, b = es.post("/_bulk", '{"index":{"_id":"1"}}\n{}\n', ctype=NDJSON)
    assert st == 400 and b["error"]["type"] == "action_request_validation_exception"
    st, _, b = es.post("/_bulk", "", ctype=NDJSON)
    assert st == 400 and b["error"]["type"] == "parse_exception" and b["error"]["reason"] == "request body is required"
    st, _, b = es.post("/_bulk", '{"index":{"_index":"a"}}\n', ctype=NDJSON)  # the action without source is dropped
    assert st == 400 and b["error"]["reason"] == "Validation Failed: 1: no requests added;"
    st, _, b = es.post("/_bulk", '{"index":{"_index":"a"}}\n', ctype="text/plain")
    assert st == 406


def test_bulk_cas_and_id_length(es):
    b = es.put("/locks/_doc/a", {"x": 1})[2]
    st, _, r = bulk(es, [
        {"index": {"_index": "locks", "_id": "a", "if_seq_no": b["_seq_no"] + 5, "if_primary_term": 1}}, {"x": 2},
        {"delete": {"_index": "locks", "_id": "a", "if_seq_no": b["_seq_no"], "if_primary_term": 1}},
        {"index": {"_index": "locks", "_id": ""}}, {"x": 1},
    ])
    assert [list(i.values())[0]["status"] for i in r["items"]] == [409, 200, 400]
    assert r["items"][2]["index"]["error"] == {"type": "illegal_argument_exception",
                                               "reason": "if _id is specified it must not be empty"}
    # BulkRequest.validate() checks every item first: one invalid item fails the whole request
    st, _, r = bulk(es, [{"index": {"_index": "locks", "_id": "ok"}}, {"x": 1},
                         {"index": {"_index": "locks", "_id": "x" * 513}}, {"x": 1},
                         {"update": {"_index": "locks", "_id": "u"}}, {"doc": {"a": 1}, "script": "ctx.op='none'"}])
    assert st == 400 and r["error"]["type"] == "action_request_validation_exception"
    assert r["error"]["reason"] == ("Validation Failed: 1: id [%s] is too long, must be no longer than 512 bytes but "
                                    "was: 513;2: can't provide both script and doc;" % ("x" * 513))
    assert es.get("/locks/_doc/ok")[0] == 404


def test_mget(es):
    es.put("/locks/_doc/a", {"x": 1})
    st, _, b = es.post("/_mget", {"docs": [{"_index": "locks", "_id": "a"}, {"_index": "locks", "_id": "b"},
                                           {"_index": "nope", "_id": "c"}]})
    assert st == 200
    d = b["docs"]
    assert d[0]["found"] is True and d[0]["_source"] == {"x": 1} and d[0]["_seq_no"] == 0
    assert d[1] == {"_index": "locks", "_id": "b", "found": False}
    assert d[2]["error"]["type"] == "index_not_found_exception"
    st, _, b = es.post("/locks/_mget", {"ids": ["a", "b"]})
    assert [x["found"] for x in b["docs"]] == [True, False]
    st, _, b = es.post("/_mget", {"docs": [{"_id": "a"}]})
    assert st == 400 and b["error"]["type"] == "action_request_validation_exception"


def setup_docs(es):
    es.put("/locks", {"mappings": {"properties": {"owner": {"type": "keyword"}, "path": {"type": "keyword"},
                                                  "n": {"type": "long"}}}})
    docs = [("/a", "o1", 1), ("/a/b", "o1", 2), ("/c", "o2", 3), ("/c/d", "o2", 4), ("/e", "o3", 5)]
    for p, o, n in docs:
        es.put("/locks/_doc/%s" % p.replace("/", "%2F"), {"path": p, "owner": o, "n": n, "text": "Hello " + o})
    es.post("/locks/_refresh")


def hits(b):
    return sorted(h["_id"] for h in b["hits"]["hits"])


def test_search_queries(es):
    setup_docs(es)
    q = lambda query, **kw: es.post("/locks/_search", dict(query=query, **kw))[2]
    assert hits(q({"term": {"owner": "o1"}})) == ["/a", "/a/b"]
    assert hits(q({"term": {"owner": {"value": "o2"}}})) == ["/c", "/c/d"]
    assert hits(q({"terms": {"owner": ["o1", "o3"]}})) == ["/a", "/a/b", "/e"]
    assert hits(q({"prefix": {"path": "/c"}})) == ["/c", "/c/d"]
    assert hits(q({"match_all": {}})) == ["/a", "/a/b", "/c", "/c/d", "/e"]
    assert hits(q({"bool": {"filter": [{"term": {"owner": "o2"}}, {"prefix": {"path": "/c/"}}]}})) == ["/c/d"]
    assert hits(q({"bool": {"must_not": [{"term": {"owner": "o2"}}]}})) == ["/a", "/a/b", "/e"]
    assert hits(q({"bool": {"should": [{"term": {"owner": "o1"}}, {"term": {"owner": "o3"}}]}})) == \
        ["/a", "/a/b", "/e"]
    assert hits(q({"range": {"n": {"gte": 2, "lt": 4}}})) == ["/a/b", "/c"]
    assert hits(q({"term": {"text": "o1"}})) == ["/a", "/a/b"]  # text fields match analysed tokens
    assert hits(q({"term": {"text": "Hello o1"}})) == []
    assert hits(q({"ids": {"values": ["/e"]}})) == ["/e"]
    assert hits(q({"exists": {"field": "owner"}})) == ["/a", "/a/b", "/c", "/c/d", "/e"]
    b = q({"bool": {"filter": {"term": {"owner": "o1"}}}})
    assert b["hits"]["max_score"] == 0.0 and b["hits"]["hits"][0]["_score"] == 0.0


def test_search_shape_size_and_seq_no(es):
    setup_docs(es)
    st, _, b = es.post("/locks/_search?seq_no_primary_term=true&size=2", {"query": {"match_all": {}}})
    assert st == 200 and b["timed_out"] is False
    assert b["_shards"] == {"total": 1, "successful": 1, "skipped": 0, "failed": 0}
    assert b["hits"]["total"] == {"value": 5, "relation": "eq"} and len(b["hits"]["hits"]) == 2
    h = b["hits"]["hits"][0]
    assert set(h) == {"_index", "_id", "_seq_no", "_primary_term", "_score", "_source"}
    st, _, b = es.post("/locks/_search", {"size": 1, "from": 4, "seq_no_primary_term": True,
                                          "sort": [{"n": "desc"}]})
    assert b["hits"]["hits"][0]["_id"] == "/a" and b["hits"]["hits"][0]["sort"] == [1]


def test_search_errors(es):
    setup_docs(es)
    st, _, b = es.post("/locks/_search", {"query": {"nosuch": {}}})
    assert st == 400 and b["error"]["type"] == "parsing_exception" and b["error"]["reason"] == "unknown query [nosuch]"
    st, _, b = es.post("/locks/_search", {"bogus": 1})
    assert st == 400 and b["error"]["type"] == "parsing_exception"
    st, _, b = es.post("/nope/_search", {})
    assert st == 404


def test_search_shard_failures(es):
    setup_docs(es)
    st, _, b = es.post("/locks/_search", {"from": 10000, "size": 1})
    assert st == 400 and b["error"]["type"] == "search_phase_execution_exception"
    assert b["error"]["root_cause"][0]["type"] == "illegal_argument_exception"
    assert "Result window is too large, from + size must be less than or equal to: [10000] but was [10001]" in \
        b["error"]["root_cause"][0]["reason"]
    st, _, b = es.post("/locks/_search", {"query": {"term": {"n": "abc"}}})
    assert st == 400 and b["error"]["root_cause"][0]["type"] == "query_shard_exception"
    st, _, b = es.post("/locks/_search", {"sort": ["text"]})
    assert st == 400 and "Text fields are not optimised" in b["error"]["root_cause"][0]["reason"]
    st, _, b = es.post("/locks/_search", {"sort": ["nosuch"]})
    assert st == 400 and b["error"]["root_cause"][0]["reason"] == "No mapping found for [nosuch] in order to sort on"


def test_filter_path_on_bulk(es):
    st, _, b = bulk(es, [{"create": {"_index": "f", "_id": "1"}}, {"a": 1},
                         {"create": {"_index": "f", "_id": "1"}}, {"a": 1}],
                    qs="?filter_path=errors,items.*.status,items.*.error.type")
    assert b == {"errors": True, "items": [{"create": {"status": 201}},
                                           {"create": {"status": 409,
                                                       "error": {"type": "version_conflict_engine_exception"}}}]}
    st, _, b = es.get("/f/_doc/1?filter_path=-_source,-_shards")
    assert "_source" not in b and b["_id"] == "1"
    st, _, b = es.get("/f/_doc/1?filter_path=**.a")
    assert b == {"_source": {"a": 1}}


def test_metadata_fields_in_queries(es):
    setup_docs(es)
    b = es.post("/locks/_search", {"query": {"term": {"_id": "/a"}}})[2]
    assert hits(b) == ["/a"]
    b = es.post("/locks/_search", {"query": {"terms": {"_id": ["/a", "/e"]}}})[2]
    assert hits(b) == ["/a", "/e"]
    b = es.post("/locks/_search", {"query": {"bool": {"filter": [{"term": {"_index": "locks"}},
                                                                  {"prefix": {"_id": "/c"}}]}}})[2]
    assert hits(b) == ["/c", "/c/d"]


def test_scheduled_refresh_every_second_by_default(es):
    import time
    t0 = time.monotonic()
    es.put("/auto1/_doc/1", {"a": 1})
    n = es.post("/auto1/_search")[2]["hits"]["total"]["value"]
    if time.monotonic() - t0 < 0.9:  # else a scheduled refresh may have come first
        assert n == 0
    deadline = time.monotonic() + 30
    while es.post("/auto1/_search")[2]["hits"]["total"]["value"] != 1:
        assert time.monotonic() < deadline, "no scheduled refresh in 30 s"
        time.sleep(0.1)
    es.put("/manual", {"settings": {"refresh_interval": "-1"}})
    es.put("/manual/_doc/1", {"a": 1})
    time.sleep(1.3)
    assert es.post("/manual/_search")[2]["hits"]["total"]["value"] == 0
