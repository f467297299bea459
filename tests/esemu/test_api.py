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
    st, _, b = es.post("/locks/_search", {"query": {"wildcard": {"owner": "A*"}}})
    assert st == 400 and "[esemu] query [wildcard]" in b["error"]["reason"]


def test_api__search_sees_the_last_refresh(es):
    es.put("/r", {"settings": {"refresh_interval": "-1"}, "mappings": MAPPING["mappings"]})
    es.put("/r/_doc/1", {"owner": "A"})
    assert es.post("/r/_search", {})[2]["hits"]["hits"] == []
    assert es.get("/r/_doc/1")[0] == 200  # realtime
    es.post("/r/_refresh")
    assert len(es.post("/r/_search", {})[2]["hits"]["hits"]) == 1


def _search_ids(es, index, query):
    st, _, b = es.post("/%s/_search" % index, {"query": query})
    assert st == 200, b
    return sorted(h["_id"] for h in b["hits"]["hits"])


def _refused(es, index, query, what):
    """QUERY is refused as the emulator refuses what it does not do: a 400
    in the engine's error shape whose reason names WHAT."""
    st, _, b = es.post("/%s/_search" % index, {"query": query})
    assert st == 400, b
    e = b["error"]
    assert e["type"] == "illegal_argument_exception" and b["status"] == 400
    assert e["root_cause"] == [{"type": e["type"], "reason": e["reason"]}]
    assert e["reason"].startswith("[esemu] ") and what in e["reason"], e["reason"]


def test_api__term_on_a_field_the_engine_would_map_dynamically_is_refused(es):
    # created by its first write: the engine maps "x" (text + x.keyword)
    # and finds the document; the emulator maps nothing, so it must not say
    # "no hits"
    assert es.put("/auto/_doc/1?refresh=true", {"owner": "A", "x": "v"})[0] == 201
    _refused(es, "auto", {"term": {"x": "v"}}, "[x], which has no explicit mapping")
    _refused(es, "auto", {"term": {"x.keyword": {"value": "v"}}}, "[x.keyword]")
    # the same with a mapping that leaves "dynamic" at its default
    es.put("/dyn", {"mappings": {"properties": {"owner": {"type": "keyword"}}}})
    es.put("/dyn/_doc/1?refresh=true", {"owner": "A", "x": "v"})
    _refused(es, "dyn", {"term": {"x": "v"}}, "[x], which has no explicit mapping")
    for dynamic in (True, "true", "runtime"):
        es.request("DELETE", "/dyn2")
        es.put("/dyn2", {"mappings": {"dynamic": dynamic}})
        _refused(es, "dyn2", {"term": {"x": "v"}}, "[x]")
    assert _search_ids(es, "dyn", {"term": {"owner": "A"}}) == ["1"]


def test_api__term_on_a_field_no_mapping_allows_finds_nothing(es):
    # "dynamic": false (as the store creates its index): the engine maps no
    # field by itself, so a term on an unmapped one matches nothing
    es.put("/locks", MAPPING)
    es.put("/locks/_doc/1?refresh=true", {"owner": "A", "x": "v", "n": 5})
    assert _search_ids(es, "locks", {"term": {"x": "v"}}) == []
    assert _search_ids(es, "locks", {"term": {"x.y": "v"}}) == []
    assert _search_ids(es, "locks", {"term": {"owner": "A"}}) == ["1"]
    assert _search_ids(es, "locks", {"term": {"owner": {"value": "A", "boost": 2.0}}}) == ["1"]
    assert _search_ids(es, "locks", {"term": {"n": 5}}) == ["1"]
    assert _search_ids(es, "locks", {"term": {"_id": "1"}}) == ["1"]


@pytest.mark.parametrize("mappings,query,what", [
    ({"properties": {"t": {"type": "text"}}}, {"term": {"t": "v"}}, "[t] of type [text]"),
    ({"properties": {"b": {"type": "boolean"}}}, {"term": {"b": True}}, "[b] of type [boolean]"),
    ({"properties": {"h": {"enabled": False}}}, {"term": {"h": "v"}}, "[h] of type [object]"),
    ({"properties": {"o": {"properties": {"k": {"type": "keyword"}}}}}, {"term": {"o.k": "v"}},
     "[o.k]"),
    ({"properties": {"k": {"type": "keyword", "fields": {"r": {"type": "keyword"}}}}},
     {"term": {"k.r": "v"}}, "[k.r]"),
    ({"properties": {"k": {"type": "keyword", "normalizer": "lowercase"}}},
     {"term": {"k": "V"}}, "mapped with [normalizer]"),
    ({"properties": {"k": {"type": "keyword", "ignore_above": 2}}},
     {"term": {"k": "vvv"}}, "mapped with [ignore_above]"),
    ({"properties": {"k": {"type": "keyword"}}},
     {"term": {"k": {"value": "V", "case_insensitive": True}}}, "[case_insensitive]"),
    ({"properties": {"n": {"type": "long"}}}, {"term": {"n": "5"}}, "[n] with a value"),
    ({"properties": {"n": {"type": "integer"}}}, {"term": {"n": 1 << 40}}, "[n] with a value"),
    ({"properties": {}}, {"term": {"_index": "q"}}, "metadata field [_index]"),
], ids=["text", "boolean", "disabled-object", "object-field", "multi-field", "normalizer",
        "ignore_above", "case_insensitive", "string-on-long", "out-of-range", "metadata"])
def test_api__term_the_emulator_cannot_answer_is_refused(es, mappings, query, what):
    mappings = dict(mappings, dynamic=False)
    assert es.put("/q", {"mappings": mappings})[0] == 200
    es.put("/q/_doc/1?refresh=true", {"t": "v", "b": True, "k": "vvv", "n": 5})
    _refused(es, "q", query, what)


def test_api__term_over_a_value_the_emulator_cannot_index_is_refused(es):
    es.put("/q", {"mappings": {"dynamic": False, "properties": {
        "k": {"type": "keyword"}, "n": {"type": "long"}}}})
    es.put("/q/_doc/1?refresh=true", {"k": 1.5, "n": 2.5})
    _refused(es, "q", {"term": {"k": "1.5"}}, "keyword field [k] of a document")
    _refused(es, "q", {"term": {"n": 2}}, "long field [n] of a document")


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


def test_api__external_versions_prefix_and_search_after(es):
    """What the fs index needs: external versions (a tombstone keeps a
    delete's), strict mappings, prefix and bool queries, search_after."""
    st, _, _ = es.put("/fsi", {"settings": {"gc_deletes": "10m"},
                               "mappings": {"dynamic": "strict",
                                            "properties": {"path": {"type": "keyword"}}}})
    assert st == 200

    def bulk(*lines):
        return es.post("/_bulk", ndjson(*lines), ctype="application/x-ndjson")[2]
    b = bulk({"index": {"_index": "fsi", "_id": "/a", "version": 10, "version_type": "external"}},
             {"path": "/a"},
             {"index": {"_index": "fsi", "_id": "/a", "version": 9, "version_type": "external"}},
             {"path": "/a"},
             {"delete": {"_index": "fsi", "_id": "/b", "version": 7, "version_type": "external"}},
             {"index": {"_index": "fsi", "_id": "/b", "version": 6, "version_type": "external"}},
             {"path": "/b"},
             {"index": {"_index": "fsi", "_id": "/c", "version": 1, "version_type": "external"}},
             {"path": "/c", "x": 1})
    got = [(list(i)[0], list(i.values())[0]["status"]) for i in b["items"]]
    assert got == [("index", 201), ("index", 409), ("delete", 404), ("index", 409), ("index", 400)]
    assert b["items"][0]["index"]["_version"] == 10
    bulk(*[x for k in ("/d/x", "/d/y", "/d/z", "/dz", "bytes:/d/\\xff") for x in
           ({"index": {"_index": "fsi", "_id": k, "version": 1, "version_type": "external"}},
            {"path": k})])
    es.post("/fsi/_refresh")
    q = {"bool": {"should": [{"prefix": {"path": "/d/"}}, {"prefix": {"path": "bytes:/d/"}}],
                  "minimum_should_match": 1}}
    st, _, b = es.post("/fsi/_search", {"size": 2, "query": q, "sort": [{"path": {"order": "asc"}}],
                                        "_source": ["path"], "track_total_hits": False})
    assert st == 200 and [h["sort"][0] for h in b["hits"]["hits"]] == ["/d/x", "/d/y"]
    st, _, b = es.post("/fsi/_search", {"size": 2, "query": q, "sort": [{"path": {"order": "asc"}}],
                                        "search_after": ["/d/y"]})
    assert [h["_id"] for h in b["hits"]["hits"]] == ["/d/z", "bytes:/d/\\xff"]
