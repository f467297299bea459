"""Stored scripts: PUT/GET/DELETE _scripts/<id>, updates by id (single and
bulk), the errors for a missing id, the 403 fault, persistence."""

SRC = "if (ctx._source.x == 1) { throw new IllegalStateException('boom'); } ctx._source.n = params.n"


def put_script(es, sid, src=SRC):
    return es.put("/_scripts/" + sid, {"script": {"lang": "painless", "source": src}})


def test_put_get_delete(es):
    st, _, b = es.get("/_scripts/s1")
    assert st == 404 and b == {"_id": "s1", "found": False}
    st, _, b = put_script(es, "s1")
    assert st == 200 and b == {"acknowledged": True}
    st, _, b = put_script(es, "s1")  # again: the same answer
    assert st == 200 and b == {"acknowledged": True}
    st, _, b = es.get("/_scripts/s1")
    assert st == 200 and b == {"_id": "s1", "found": True, "script": {"lang": "painless", "source": SRC}}
    st, _, b = es.delete("/_scripts/s1")
    assert st == 200 and b == {"acknowledged": True}
    st, _, b = es.delete("/_scripts/s1")
    assert st == 404
    assert b["error"]["type"] == "resource_not_found_exception"
    assert b["error"]["reason"] == "stored script [s1] does not exist and cannot be deleted"


def test_put_refusals(es):
    st, _, b = es.put("/_scripts/s1", {"script": {"source": SRC}})
    assert st == 400 and b["error"]["reason"] == "must specify lang for stored script"
    st, _, b = es.put("/_scripts/s1", {"script": {"lang": "painless"}})
    assert st == 400 and b["error"]["reason"] == "must specify source for stored script"
    st, _, b = es.put("/_scripts/s1", {})
    assert st == 400 and b["error"]["reason"] == "unable to put stored script with unsupported lang [mustache]"
    st, _, b = es.put("/_scripts/s1")
    assert st == 400 and b["error"] == {"root_cause": [{"type": "parse_exception",
                                                        "reason": "request body is required"}],
                                        "type": "parse_exception", "reason": "request body is required"}
    assert es.get("/_scripts/s1")[0] == 404


def test_update_by_id(es):
    put_script(es, "s1")
    es.put("/locks/_doc/a", {"x": 0})
    st, _, b = es.post("/locks/_update/a", {"script": {"id": "s1", "params": {"n": 5}}})
    assert st == 200 and b["result"] == "updated"
    assert es.get("/locks/_doc/a")[2]["_source"] == {"x": 0, "n": 5}
    # a scripted upsert by id builds the document
    st, _, b = es.post("/locks/_update/b", {"script": {"id": "s1", "params": {"n": 2}},
                                            "scripted_upsert": True, "upsert": {}})
    assert st == 201 and b["result"] == "created"
    assert es.get("/locks/_doc/b")[2]["_source"] == {"n": 2}
    # a refusal quotes the stored script by its id, the stack from its source
    es.put("/locks/_doc/c", {"x": 1})
    st, _, b = es.post("/locks/_update/c", {"script": {"id": "s1", "params": {"n": 1}}})
    assert st == 400
    se = b["error"]["caused_by"]
    assert se["type"] == "script_exception" and se["script"] == "s1" and se["lang"] == "painless"
    assert se["caused_by"] == {"type": "illegal_state_exception", "reason": "boom"}
    assert "^---- HERE" in se["script_stack"][-1]
    # lang with an id is refused while parsing
    st, _, b = es.post("/locks/_update/a", {"script": {"id": "s1", "lang": "painless"}})
    assert st == 400 and b["error"]["caused_by"]["reason"] == "illegally specified <lang> for a stored script"


def test_missing_id(es):
    es.put("/locks/_doc/a", {"x": 0})
    st, _, b = es.post("/locks/_update/a", {"script": {"id": "nope"}})
    assert st == 400
    assert b["error"]["type"] == "illegal_argument_exception"
    assert b["error"]["caused_by"] == {"type": "resource_not_found_exception",
                                       "reason": "unable to find script [nope] in cluster state"}
    # a plain upsert never runs the script: the missing id goes unnoticed
    st, _, b = es.post("/locks/_update/u", {"script": {"id": "nope"}, "upsert": {"k": 1}})
    assert st == 201 and b["result"] == "created"


def test_bulk_by_id(es):
    put_script(es, "s1")
    es.put("/locks/_doc/a", {"x": 0})
    body = "".join(l + "\n" for l in [
        '{"update":{"_id":"a","retry_on_conflict":5}}',
        '{"script":{"id":"s1","params":{"n":7}}}',
        '{"update":{"_id":"a"}}',
        '{"script":{"id":"nope","params":{"n":7}}}',
        '{"update":{"_id":"q"}}',
        '{"script":{"id":"nope"},"scripted_upsert":true,"upsert":{}}'])
    st, _, b = es.post("/locks/_bulk", body.encode(), ctype="application/x-ndjson")
    assert st == 200 and b["errors"] is True
    items = [i["update"] for i in b["items"]]
    assert items[0]["status"] == 200 and items[0]["result"] == "updated"
    for it in items[1:]:
        assert it["status"] == 400
        assert it["error"]["caused_by"]["type"] == "resource_not_found_exception"
    assert es.get("/locks/_doc/q")[0] == 404


def test_forbid_fault(emu8, es):
    emu8.admin("POST", "/_esemu/forbid", {"apis": ["put_script"]})
    st, _, b = put_script(es, "s1")
    assert st == 403 and b["error"]["type"] == "security_exception"
    assert b["error"]["reason"] == "action [cluster:admin/script/put] is unauthorized for user [anonymous]"
    assert es.get("/_scripts/s1")[0] == 404  # reading is still allowed
    emu8.admin("POST", "/_esemu/reset")
    assert put_script(es, "s1")[0] == 200


def test_stats_names(emu8, es):
    emu8.admin("POST", "/_esemu/reset_stats")
    put_script(es, "s1")
    es.get("/_scripts/s1")
    es.delete("/_scripts/s1")
    st = emu8.admin("GET", "/_esemu/stats")
    assert st["requests"] == {"put_script": 1, "get_script": 1, "delete_script": 1}
