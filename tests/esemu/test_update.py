"""The update API: doc, upsert, scripts, ctx.op, errors, retry_on_conflict."""

import threading

SHARED = ("if (ctx._source.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); } "
          "ctx._source.lock_count++;")
RELEASE = "if (--ctx._source.lock_count <= 0) { ctx.op = 'delete'; }"
DOCLOCK = ("if (ctx._source.process_id != params.process_id) { throw new IllegalStateException('locked'); } "
           "ctx.op = 'noop';")


def upd(es, doc_id, body, qs=""):
    return es.post("/locks/_update/%s%s" % (doc_id, qs), body)


def test_upsert_then_script(es):
    body = {"upsert": {"lock_type": "shared", "lock_count": 1}, "script": {"source": SHARED, "lang": "painless"}}
    st, h, b = upd(es, "%2Fa", body)
    assert st == 201 and b["result"] == "created" and b["_version"] == 1
    st, _, b = upd(es, "%2Fa", body)
    assert st == 200 and b["result"] == "updated" and b["_version"] == 2
    assert es.get("/locks/_doc/%2Fa")[2]["_source"] == {"lock_type": "shared", "lock_count": 2}


def test_script_refusal_is_400_script_exception(es):
    es.put("/locks/_create/x", {"lock_type": "exclusive"})
    st, _, b = upd(es, "x", {"upsert": {"lock_type": "shared", "lock_count": 1}, "script": {"source": SHARED}})
    assert st == 400
    err = b["error"]
    assert err["type"] == "illegal_argument_exception" and err["reason"] == "failed to execute script"
    assert err["caused_by"]["type"] == "script_exception" and err["caused_by"]["reason"] == "runtime error"
    assert err["caused_by"]["caused_by"] == {"type": "illegal_state_exception", "reason": "exclusive"}
    assert err["caused_by"]["lang"] == "painless" and err["caused_by"]["script"] == SHARED
    assert "^---- HERE" in err["caused_by"]["script_stack"][-1]
    assert err["root_cause"] == [{"type": "illegal_argument_exception", "reason": "failed to execute script"}]


def test_npe_is_runtime_error(es):
    es.put("/locks/_doc/x", {"a": 1})
    st, _, b = upd(es, "x", {"script": "ctx._source.missing.x = 1"})
    assert st == 400 and b["error"]["caused_by"]["caused_by"]["type"] == "null_pointer_exception"


def test_compile_errors(es):
    es.put("/locks/_doc/x", {"lock_count": 1})
    for src in ["if (ctx._source.lock_type == 'exclusive') { assert false }; ctx._source.lock_count++",
                "if ( ctx._source.process_id != process_id ) { assert false; } ctx.op = 'noop';",
                "ctx._source.x = new Foo()"]:
        st, _, b = upd(es, "x", {"script": src, "upsert": {"lock_count": 1}})
        assert st == 400, src
        assert b["error"]["type"] == "illegal_argument_exception"
        assert b["error"]["caused_by"]["type"] == "script_exception"
        assert b["error"]["caused_by"]["reason"] == "compile error"
    # the upsert path does not run the script, so the guide's Groovy script "works" on a missing doc
    st, _, b = upd(es, "y", {"script": "assert false", "upsert": {"lock_count": 1}})
    assert st == 201


def test_release_and_delete(es):
    upd(es, "a", {"upsert": {"lock_type": "shared", "lock_count": 1}, "script": SHARED})
    upd(es, "a", {"upsert": {"lock_type": "shared", "lock_count": 1}, "script": SHARED})
    st, _, b = upd(es, "a", {"script": RELEASE})
    assert st == 200 and b["result"] == "updated"
    st, _, b = upd(es, "a", {"script": RELEASE})
    assert st == 200 and b["result"] == "deleted"
    assert es.get("/locks/_doc/a")[0] == 404


def test_noop_and_none(es):
    es.put("/locks/_doc/a", {"process_id": 123})
    v = es.get("/locks/_doc/a")[2]
    for op in ("noop", "none", "bogus"):
        st, _, b = upd(es, "a", {"script": "ctx.op = '%s'" % op})
        assert st == 200 and b["result"] == "noop"
        assert b["_shards"] == {"total": 0, "successful": 0, "failed": 0}
        assert b["_version"] == v["_version"] and b["_seq_no"] == v["_seq_no"]
    st, _, b = upd(es, "a", {"script": {"source": DOCLOCK, "params": {"process_id": 123}},
                             "upsert": {"process_id": 123}})
    assert st == 200 and b["result"] == "noop"
    st, _, b = upd(es, "a", {"script": {"source": DOCLOCK, "params": {"process_id": 9}},
                             "upsert": {"process_id": 9}})
    assert st == 400 and b["error"]["caused_by"]["caused_by"]["reason"] == "locked"


def test_document_missing(es):
    es.put("/locks")
    st, _, b = upd(es, "nope", {"doc": {"a": 1}})
    assert st == 404 and b["error"]["type"] == "document_missing_exception"
    assert b["error"]["reason"] == "[nope]: document missing"
    st, _, b = upd(es, "nope", {"script": "ctx._source.a = 1"})
    assert st == 404


def test_update_autocreates_index(es):
    st, _, b = es.post("/fresh/_update/1", {"doc": {"a": 1}})
    assert st == 404 and b["error"]["type"] == "document_missing_exception"
    assert es.head("/fresh")[0] == 200


def test_partial_doc_and_detect_noop(es):
    es.put("/locks/_doc/a", {"a": 1, "o": {"x": 1, "y": 2}})
    st, _, b = upd(es, "a", {"doc": {"o": {"x": 5}}})
    assert b["result"] == "updated"
    assert es.get("/locks/_doc/a")[2]["_source"] == {"a": 1, "o": {"x": 5, "y": 2}}
    st, _, b = upd(es, "a", {"doc": {"a": 1}})
    assert b["result"] == "noop"
    st, _, b = upd(es, "a", {"doc": {"a": 1}, "detect_noop": False})
    assert b["result"] == "updated"


def test_doc_as_upsert_and_scripted_upsert(es):
    st, _, b = upd(es, "a", {"doc": {"a": 1}, "doc_as_upsert": True})
    assert st == 201 and b["result"] == "created"
    src = "if (ctx.op == 'create') { ctx._source.n = params.n; } else { ctx._source.n += params.n; }"
    st, _, b = upd(es, "b", {"script": {"source": src, "params": {"n": 5}}, "upsert": {}, "scripted_upsert": True})
    assert st == 201
    assert es.get("/locks/_doc/b")[2]["_source"] == {"n": 5}
    upd(es, "b", {"script": {"source": src, "params": {"n": 5}}, "upsert": {}, "scripted_upsert": True})
    assert es.get("/locks/_doc/b")[2]["_source"] == {"n": 10}
    st, _, b = upd(es, "c", {"script": "ctx.op = 'none'", "upsert": {}, "scripted_upsert": True})
    assert st == 200 and b["result"] == "noop" and b["_version"] == -1 and "_seq_no" not in b
    assert es.get("/locks/_doc/c")[0] == 404


def test_ctx_metadata(es):
    es.put("/locks/_doc/m1", {"a": 1})
    upd(es, "m1", {"script": "ctx._source.id = ctx._id; ctx._source.ix = ctx._index; "
                             "ctx._source.now = ctx._now; ctx._source.v = ctx._version"})
    s = es.get("/locks/_doc/m1")[2]["_source"]
    assert s["id"] == "m1" and s["ix"] == "locks" and s["now"] > 1600000000000 and s["v"] == 1


def test_illegal_combinations(es):
    es.put("/locks/_doc/a", {"a": 1})
    cases = [
        ({"doc": {"a": 1}, "script": "ctx.op='noop'"}, "", "can't provide both script and doc"),
        ({}, "", "script or doc is missing"),
        ({"doc": {"a": 2}}, "?if_seq_no=0&if_primary_term=1&retry_on_conflict=2",
         "compare and write operations can not be retried"),
        ({"doc": {"a": 2}, "upsert": {"a": 1}}, "?if_seq_no=0&if_primary_term=1",
         "upsert requests don't support `if_seq_no` and `if_primary_term`"),
        ({"doc": {"a": 2}, "doc_as_upsert": True}, "?if_seq_no=0&if_primary_term=1",
         "compare and write operations can not be used with upsert"),
    ]
    for body, qs, msg in cases:
        st, _, b = upd(es, "a", body, qs)
        assert st == 400, body
        assert b["error"]["type"] == "action_request_validation_exception"
        assert msg in b["error"]["reason"]
    st, _, b = upd(es, "a", {"dac": {}})
    assert st == 400 and "[UpdateRequest] unknown field [dac] did you mean [doc]?" in b["error"]["reason"]
    st, _, b = upd(es, "a", {"script": {"source": "ctx.op='noop'", "lang": "groovy"}})
    assert st == 400 and b["error"]["caused_by"]["reason"] == "script_lang not supported [groovy]"


def test_update_cas(es):
    b = es.put("/locks/_doc/a", {"a": 1})[2]
    st, _, r = upd(es, "a", {"doc": {"a": 2}}, "?if_seq_no=%d&if_primary_term=1" % b["_seq_no"])
    assert st == 200
    st, _, r = upd(es, "a", {"doc": {"a": 3}}, "?if_seq_no=%d&if_primary_term=1" % b["_seq_no"])
    assert st == 409 and r["error"]["type"] == "version_conflict_engine_exception"


def test_update_returns_source_when_asked(es):
    es.put("/locks/_doc/a", {"a": 1})
    st, _, b = upd(es, "a", {"doc": {"b": 2}}, "?_source=true")
    assert b["get"]["_source"] == {"a": 1, "b": 2} and b["get"]["found"] is True


def _hammer(es, n_threads, per_thread, retry):
    conflicts = [0]
    lock = threading.Lock()
    errors = []

    def worker():
        from conftest import Client
        c = Client(es.base)
        for _ in range(per_thread):
            while True:
                st, _, b = c.post("/locks/_update/counter?retry_on_conflict=%d" % retry,
                                  {"script": {"source": "ctx._source.n++"}, "upsert": {"n": 1}})
                if st in (200, 201):
                    break
                if st == 409:
                    with lock:
                        conflicts[0] += 1
                    continue
                errors.append((st, b))
                return
    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    return conflicts[0]


def test_50_threads_increment_exact_count(es):
    _hammer(es, 50, 4, retry=100)
    st, _, b = es.get("/locks/_doc/counter")
    assert b["_source"]["n"] == 200 and type(b["_source"]["n"]) is int
    assert b["_version"] == 200


def test_conflicts_visible_without_retry(es):
    es.put("/locks/_doc/counter", {"n": 0})
    es.admin = None
    conflicts = _hammer(es, 20, 10, retry=0)
    n = es.get("/locks/_doc/counter")[2]["_source"]["n"]
    assert n == 200
    assert conflicts > 0  # contention produces 409s when retry_on_conflict is 0


def test_compile_error_snippet_like_painless(es):
    es.put("/locks/_doc/x", {"lock_count": 1})
    src = "if (ctx._source.lock_type == 'exclusive') { assert false }; ctx._source.lock_count++"
    st, _, b = upd(es, "x", {"script": src})
    se = b["error"]["caused_by"]
    assert se["script_stack"] == ["... == 'exclusive') { assert false }; ctx._source.lock ...",
                                  "                             ^---- HERE"]
    assert se["position"] == {"offset": 51, "start": 26, "end": 76}
    assert se["caused_by"] == {"type": "illegal_argument_exception",
                               "reason": "invalid sequence of tokens near ['false']."}


def test_runtime_error_snippet_is_the_statement(es):
    es.put("/locks/_create/x", {"lock_type": "exclusive"})
    st, _, b = upd(es, "x", {"script": SHARED})
    se = b["error"]["caused_by"]
    # the position is the exception's 'new', as the real engines answer
    assert se["script_stack"] == ["throw new IllegalStateException('exclusive'); } ",
                                  "      ^---- HERE"]
    assert se["position"] == {"offset": 50, "start": 44, "end": 92}


def test_validation_messages_in_order(es):
    es.put("/locks")
    st, _, b = es.put("/locks/_doc/1?if_seq_no=1&version=2", {"a": 1})
    assert b["error"]["reason"] == (
        "Validation Failed: 1: internal versioning can not be used for optimistic concurrency control. Please use "
        "`if_seq_no` and `if_primary_term` instead;2: compare and write operations can not use versioning;"
        "3: ifSeqNo is set, but primary term is [0];")
    st, _, b = es.put("/locks/_doc/1?op_type=create&version=2", {"a": 1})
    assert b["error"]["reason"] == ("Validation Failed: 1: create operations do not support explicit versions. "
                                    "use index instead;")
    st, _, b = es.post("/locks/_update/1?if_seq_no=1&if_primary_term=1&retry_on_conflict=1",
                       {"doc": {"a": 1}, "doc_as_upsert": True})
    assert b["error"]["reason"] == ("Validation Failed: 1: compare and write operations can not be retried;"
                                    "2: compare and write operations can not be used with upsert;")
    st, _, b = es.post("/locks/_update/1", {"doc_as_upsert": True, "script": "ctx.op='none'"})
    assert b["error"]["reason"] == "Validation Failed: 1: doc must be specified if doc_as_upsert is enabled;"


def test_es8_ctx_metadata_is_read_only(es):
    es.put("/locks/_doc/a", {"x": 1})
    st, _, b = upd(es, "a", {"script": "ctx._id = 'other'"})
    assert st == 400 and b["error"]["caused_by"]["caused_by"] == {"type": "illegal_argument_exception",
                                                                  "reason": "_id cannot be updated"}
    st, _, b = upd(es, "a", {"script": "ctx.whatever = 1; ctx._source.y = ctx._type"})
    assert st == 200 and es.get("/locks/_doc/a")[2]["_source"] == {"x": 1, "y": "_doc"}


def test_es7_ctx_is_a_plain_map(es7):
    es7.put("/locks/_doc/a", {"x": 1})
    st, _, b = es7.post("/locks/_update/a", {"script": "ctx._id = 'other'; ctx._source.y = 2"})
    assert st == 200 and b["_id"] == "a" and b["_type"] == "_doc"
    st, _, b = es7.post("/locks/_update/nope", {"doc": {"a": 1}})
    assert st == 404 and b["error"]["reason"] == "[_doc][nope]: document missing"
