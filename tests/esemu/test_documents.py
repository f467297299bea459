"""Single-document APIs: index, create, get, delete, CAS, versions, refresh."""

import pytest


def test_index_create_get(es):
    st, h, b = es.put("/idx/_doc/1", {"a": 1})
    assert st == 201 and h["location"] == "/idx/_doc/1"
    assert b == {"_index": "idx", "_id": "1", "_version": 1, "result": "created",
                 "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1}
    st, _, b = es.put("/idx/_doc/1", {"a": 2})
    assert st == 200 and b["result"] == "updated" and b["_version"] == 2 and b["_seq_no"] == 1
    st, _, b = es.get("/idx/_doc/1")
    assert st == 200 and b == {"_index": "idx", "_id": "1", "_version": 2, "_seq_no": 1, "_primary_term": 1,
                               "found": True, "_source": {"a": 2}}
    st, _, b = es.get("/idx/_doc/2")
    assert st == 404 and b == {"_index": "idx", "_id": "2", "found": False}


def test_auto_create_with_dynamic_mapping(es):
    es.put("/auto/_doc/1", {"s": "Hello World", "n": 1, "f": 1.5, "b": True, "o": {"x": "y"}, "d": "2024-01-02"})
    st, _, b = es.get("/auto/_mapping")
    props = b["auto"]["mappings"]["properties"]
    assert props["s"] == {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    assert props["n"] == {"type": "long"} and props["f"] == {"type": "float"} and props["b"] == {"type": "boolean"}
    assert props["o"]["properties"]["x"]["type"] == "text" and props["d"] == {"type": "date"}


def test_strict_mapping_and_type_errors(es):
    es.put("/s", {"mappings": {"dynamic": "strict", "properties": {"n": {"type": "long"}}}})
    st, _, b = es.put("/s/_doc/1", {"other": 1})
    assert st == 400 and b["error"]["type"] == "strict_dynamic_mapping_exception"
    st, _, b = es.put("/s/_doc/1", {"n": "abc"})
    assert st == 400 and b["error"]["type"] == "mapper_parsing_exception"
    assert b["error"]["caused_by"]["type"] == "illegal_argument_exception"
    assert es.put("/s/_doc/1", {"n": "12"})[0] == 201


def test_op_type_create_and_create_endpoint(es):
    assert es.put("/idx/_doc/1?op_type=create", {"a": 1})[0] == 201
    st, _, b = es.put("/idx/_doc/1?op_type=create", {"a": 1})
    assert st == 409 and b["error"]["type"] == "version_conflict_engine_exception"
    assert b["error"]["reason"] == "[1]: version conflict, document already exists (current version [1])"
    root = b["error"]["root_cause"][0]
    assert root["shard"] == "0" and root["index"] == "idx" and "index_uuid" in root
    st, _, b = es.post("/idx/_create/1", {"a": 1})
    assert st == 409
    st, _, b = es.put("/idx/_create/2", {"a": 1})
    assert st == 201 and b["result"] == "created"
    st, _, b = es.put("/idx/_doc/3?op_type=bogus", {"a": 1})
    assert st == 400


def test_post_doc_autogenerates_id(es):
    st, _, b = es.post("/idx/_doc", {"a": 1})
    assert st == 201 and len(b["_id"]) >= 20
    assert es.get("/idx/_doc/" + b["_id"])[2]["found"]


def test_cas_index_and_delete(es):
    b = es.put("/idx/_doc/1", {"a": 1})[2]
    s, t = b["_seq_no"], b["_primary_term"]
    st, _, b2 = es.put("/idx/_doc/1?if_seq_no=%d&if_primary_term=%d" % (s, t), {"a": 2})
    assert st == 200 and b2["result"] == "updated"
    st, _, b3 = es.put("/idx/_doc/1?if_seq_no=%d&if_primary_term=%d" % (s, t), {"a": 3})
    assert st == 409
    assert b3["error"]["reason"] == ("[1]: version conflict, required seqNo [%d], primary term [%d]. current "
                                     "document has seqNo [%d] and primary term [1]" % (s, t, b2["_seq_no"]))
    st, _, b4 = es.delete("/idx/_doc/1?if_seq_no=%d&if_primary_term=1" % s)
    assert st == 409
    st, _, b5 = es.delete("/idx/_doc/1?if_seq_no=%d&if_primary_term=1" % b2["_seq_no"])
    assert st == 200 and b5["result"] == "deleted"


def test_cas_on_missing_document_is_409(es):
    es.put("/idx")
    st, _, b = es.put("/idx/_doc/9?if_seq_no=0&if_primary_term=1", {"a": 1})
    assert st == 409 and b["error"]["reason"] == ("[9]: version conflict, required seqNo [0], primary term [1]. "
                                                  "but no document was found")
    st, _, b = es.delete("/idx/_doc/9?if_seq_no=0&if_primary_term=1")
    assert st == 409 and b["error"]["type"] == "version_conflict_engine_exception"


def test_cas_parameter_validation(es):
    es.put("/idx")
    st, _, b = es.put("/idx/_doc/1?if_seq_no=1", {"a": 1})
    assert st == 400 and b["error"]["type"] == "action_request_validation_exception"
    st, _, b = es.put("/idx/_doc/1?if_seq_no=abc&if_primary_term=1", {"a": 1})
    assert st == 400 and b["error"]["type"] == "illegal_argument_exception"
    st, _, b = es.put("/idx/_doc/1?version=1", {"a": 1})
    assert st == 400 and "internal versioning can not be used for optimistic concurrency control" in \
        b["error"]["reason"]
    st, _, b = es.put("/idx/_create/1?version=1&version_type=external", {"a": 1})
    assert st == 400 and "create operations only support internal versioning. use index instead" in \
        b["error"]["reason"]


def test_delete_missing_and_versions_across_recreate(es):
    es.put("/idx")
    st, _, b = es.delete("/idx/_doc/1")
    assert st == 404 and b["result"] == "not_found" and "_shards" in b and "_seq_no" in b
    es.put("/idx/_doc/2", {"a": 1})
    st, _, b = es.delete("/idx/_doc/2")
    assert st == 200 and b["result"] == "deleted" and b["_version"] == 2
    st, _, b = es.put("/idx/_create/2", {"a": 1})
    assert st == 201 and b["_version"] == 3  # the tombstone keeps the version going


def test_external_versioning(es):
    assert es.put("/idx/_doc/1?version=5&version_type=external", {"a": 1})[2]["_version"] == 5
    assert es.put("/idx/_doc/1?version=5&version_type=external", {"a": 1})[0] == 409
    assert es.put("/idx/_doc/1?version=5&version_type=external_gte", {"a": 1})[0] == 200


def test_get_is_realtime_search_is_not(es):
    es.put("/idx", {"settings": {"refresh_interval": "-1"}})
    es.put("/idx/_doc/1", {"k": "v"})
    assert es.get("/idx/_doc/1")[2]["found"]
    assert es.post("/idx/_search", {"query": {"match_all": {}}})[2]["hits"]["total"]["value"] == 0
    assert es.get("/idx/_doc/1?realtime=false")[0] == 404
    es.post("/idx/_refresh")
    assert es.post("/idx/_search", {"query": {"match_all": {}}})[2]["hits"]["total"]["value"] == 1


def test_refresh_parameter(es):
    st, _, b = es.put("/idx/_doc/1?refresh=true", {"k": "v"})
    assert b["forced_refresh"] is True
    st, _, b = es.put("/idx/_doc/2?refresh=wait_for", {"k": "v"})
    assert "forced_refresh" not in b
    st, _, b = es.put("/idx/_doc/3?refresh", {"k": "v"})
    assert b["forced_refresh"] is True
    assert es.post("/idx/_search")[2]["hits"]["total"]["value"] == 3
    st, _, b = es.put("/idx/_doc/4?refresh=yes", {"k": "v"})
    assert st == 400 and b["error"]["reason"] == "Unknown value for refresh: [yes]."


def test_refresh_endpoint(es):
    es.put("/idx/_doc/1", {"a": 1})
    st, _, b = es.post("/idx/_refresh")
    assert st == 200 and b == {"_shards": {"total": 2, "successful": 1, "failed": 0}}
    st, _, b = es.post("/_refresh")
    assert st == 200 and b["_shards"]["successful"] == 1


def test_bad_json_body(es):
    st, _, b = es.put("/idx/_doc/1", b"{not json")
    assert st == 400 and b["error"]["type"] == "mapper_parsing_exception"
    assert b["error"]["caused_by"]["type"] == "json_parse_exception"


def test_multiple_shards_have_their_own_seq_no(es):
    es.put("/ms", {"settings": {"number_of_shards": 3, "number_of_replicas": 0}})
    seqs = [es.put("/ms/_doc/d%d" % i, {"i": i})[2]["_seq_no"] for i in range(30)]
    assert max(seqs) < 29 and seqs.count(0) == 3  # three shards, three counters
    st, _, b = es.post("/ms/_refresh")
    assert b["_shards"] == {"total": 3, "successful": 3, "failed": 0}
    st, _, b = es.post("/ms/_search", {"size": 0})
    assert b["_shards"]["total"] == 3 and b["hits"]["total"]["value"] == 30
