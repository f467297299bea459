"""Hand-written requests where an engine is stricter than a lenient
emulator: each one is in the corpus with the engine's answer."""
import json

IDX = "/difftest-probes"
# the settings a mount judges, as it asks for them (es_index.c)
SETTINGS = ("*.settings.index.number_of_replicas,*.settings.index.auto_expand_replicas,"
            "*.settings.index.translog.durability,*.settings.index.write.wait_for_active_shards")


def _x(method, path, body=None, note=None):
    x = {"method": method, "path": path, "content_type": None, "request_body": ""}
    if body is not None:
        x["content_type"] = "application/json"
        x["request_body"] = body if isinstance(body, str) else json.dumps(body)
    if note:
        x["note"] = note
    return x


def _upd(doc, source, note):
    return _x("POST", IDX + "/_update/" + doc,
              {"script": {"source": source, "lang": "painless"}}, note)


def sequence(engine):
    mapping = {"settings": {"number_of_shards": 1, "number_of_replicas": 0},
               "mappings": {"dynamic": False, "properties": {
                   "owner": {"type": "keyword"}, "n": {"type": "long"}}}}
    return [
        _x("PUT", IDX, mapping, "create the probes' index"),
        _x("PUT", IDX, mapping, "create it again: resource_already_exists"),
        _x("PUT", IDX + "/_doc/a?op_type=create&refresh=true", {"owner": "o1", "n": 1}),
        _x("PUT", IDX + "/_doc/a?op_type=create", {"owner": "o2"}, "create conflict 409"),
        _x("PUT", IDX + "/_doc/b?op_type=create", {"_id": "b", "owner": "o1"},
           "_id inside the body"),
        _x("PUT", IDX + "/_doc/c?timeout=abc", {"owner": "o1"}, "invalid timeout"),
        _x("PUT", IDX + "/_doc/c?timeout=-5s", {"owner": "o1"}, "negative timeout"),
        _x("PUT", IDX + "/_doc/c?wait_for_active_shards=x", {"owner": "o1"},
           "invalid wait_for_active_shards"),
        _x("PUT", IDX + "/_doc/c?wait_for_active_shards=-2", {"owner": "o1"},
           "negative wait_for_active_shards"),
        _x("PUT", IDX + "/_doc/c?refresh=maybe", {"owner": "o1"}, "invalid refresh"),
        _x("PUT", IDX + "/_doc/c?if_seq_no=0", {"owner": "o1"},
           "if_seq_no without if_primary_term"),
        _x("PUT", IDX + "/_doc/a?if_seq_no=7&if_primary_term=1", {"owner": "o1"},
           "stale if_seq_no"),
        _x("PUT", IDX + "/_doc/a?if_seq_no=0&if_primary_term=1&refresh=true",
           {"owner": "o3", "n": 2}, "conditional overwrite"),
        _upd("a", "ctx._source.e = new IllegalArgumentException('x')",
             "script stores an exception object"),
        _upd("a", "ctx._source.n = 0.0 / 0.0", "script stores NaN"),
        _upd("a", "ctx._source.n = 1.0 / 0.0", "script stores Infinity"),
        _upd("a", "ctx._source.x = 0.0 / 0.0", "script stores NaN in an unmapped field"),
        _upd("a", "ctx._source.x = -1.0 / 0.0", "script stores -Infinity in an unmapped field"),
        _upd("a", "ctx._source.x = [1.0 / 0.0]", "Infinity inside a list"),
        _x("GET", IDX + "/_doc/a", None, "how NaN and infinities come back"),
        _upd("a", "Map m = new HashMap(); m.put('self', m); ctx._source.m = m",
             "script stores a map that contains itself"),
        _upd("a", "ctx.op = 'noop'", "noop"),
        _upd("a", "ctx._source.n += 1", "plain update"),
        _upd("a", "ctx.op = 'delete'", "delete by script"),
        _upd("zz", "ctx._source.n = 1", "update of a missing document"),
        _x("POST", IDX + "/_update/zz", {"script": {"source": "ctx._source.n = 1"},
                                          "upsert": {"owner": "u", "n": 0}}, "upsert"),
        _x("POST", IDX + "/_refresh"),
        _x("POST", IDX + "/_search", {"query": {"term": {"_id": "zz"}}},
           "term on _id scores 1.0"),
        _x("POST", IDX + "/_search", {"query": {"ids": {"values": ["zz", "a"]}}}),
        _x("POST", IDX + "/_search?seq_no_primary_term=true&version=true",
           {"query": {"term": {"owner": "u"}}, "size": 10}),
        _x("GET", IDX + "/_doc/zz"),
        _x("GET", IDX + "/_doc/nope"),
        _x("DELETE", IDX + "/_doc/nope", None, "delete a missing document"),
        _x("DELETE", IDX + "/_doc/zz?if_seq_no=0&if_primary_term=1", None,
           "conditional delete, stale"),
        _x("GET", "/difftest-none/_doc/x", None, "missing index"),
        _x("POST", "/_bulk", "\n".join([
            json.dumps({"create": {"_index": IDX[1:], "_id": "k1"}}),
            json.dumps({"owner": "b", "n": 1}),
            json.dumps({"create": {"_index": IDX[1:], "_id": "k1"}}),
            json.dumps({"owner": "b", "n": 2}),
            json.dumps({"delete": {"_index": IDX[1:], "_id": "k9"}})]) + "\n", "bulk"),
        # stored scripts, as the store uses them (PUT at mount, update by id)
        _x("GET", "/_scripts/difftest-s1", None, "a stored script that is missing"),
        _x("DELETE", "/_scripts/difftest-s1", None, "delete a missing stored script"),
        _x("PUT", "/_scripts/difftest-s1", {"script": {"source": "ctx._source.n = params.n"}},
           "stored script without lang"),
        _x("PUT", "/_scripts/difftest-s1", {}, "stored script without script"),
        _x("PUT", "/_scripts/difftest-s1",
           {"script": {"lang": "painless", "source": "if (ctx._source.owner == null) "
                       "{ ctx._source.owner = params.o; } ctx._source.n = params.n"}},
           "store a script"),
        _x("PUT", "/_scripts/difftest-s1",
           {"script": {"lang": "painless", "source": "if (ctx._source.owner == null) "
                       "{ ctx._source.owner = params.o; } ctx._source.n = params.n"}},
           "store it again"),
        _x("GET", "/_scripts/difftest-s1"),
        _x("POST", IDX + "/_update/a", {"script": {"id": "difftest-s1", "params": {"n": 5}}},
           "update by stored id"),
        _x("POST", IDX + "/_update/a", {"script": {"id": "difftest-s1", "lang": "painless"}},
           "lang with a stored id"),
        _x("POST", IDX + "/_update/a", {"script": {"id": "difftest-none"}},
           "update by a missing stored id"),
        _x("POST", IDX + "/_update/s2", {"script": {"id": "difftest-none"}, "upsert": {"n": 1}},
           "upsert: a missing stored id is never looked up"),
        _x("POST", IDX + "/_update/s3", {"script": {"id": "difftest-s1", "params": {"n": 2, "o": "s"}},
                                          "scripted_upsert": True, "upsert": {}},
           "scripted upsert by stored id"),
        _x("POST", "/_bulk", "\n".join([
            json.dumps({"update": {"_index": IDX[1:], "_id": "a", "retry_on_conflict": 5}}),
            json.dumps({"script": {"id": "difftest-s1", "params": {"n": 7}}}),
            json.dumps({"update": {"_index": IDX[1:], "_id": "a"}}),
            json.dumps({"script": {"id": "difftest-none", "params": {"n": 7}}}),
            json.dumps({"update": {"_index": IDX[1:], "_id": "s4"}}),
            json.dumps({"script": {"id": "difftest-none"}, "scripted_upsert": True,
                        "upsert": {}})]) + "\n", "bulk updates by stored id, one missing"),
        _x("GET", IDX + "/_doc/s3"),
        _x("DELETE", "/_scripts/difftest-s1", None, "delete a stored script"),
        _x("POST", IDX + "/_update/a", {"script": {"id": "difftest-s1", "params": {"n": 8}}},
           "update by a deleted stored id"),
        # what a mount reads at start to judge the lock index
        # (es_index_settings_findings): the cluster's data nodes, settings
        # set by hand, auto-expanded on one node, durability, write waits
        _x("GET", "/_cluster/health?filter_path=number_of_data_nodes", None,
           "the cluster's number of data nodes"),
        _x("GET", IDX + "/_settings?filter_path=" + SETTINGS, None, "no replica, set by hand"),
        _x("PUT", IDX + "-s", {"settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1",
                                            "translog": {"durability": "async"},
                                            "write": {"wait_for_active_shards": "all"}}}),
        _x("GET", IDX + "-s/_settings?filter_path=" + SETTINGS, None,
           "auto-expanded on one node, async durability, writes wait for all"),
        _x("DELETE", IDX + "-s"),
        _x("GET", IDX + "/_mapping"),
        _x("DELETE", IDX),
    ]
