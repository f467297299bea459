"""Wire-level behaviour: GET /, headers, strictness, indices, keep-alive."""

import json
import socket

import pytest


def test_info_es8(es):
    st, h, b = es.get("/")
    assert st == 200 and h["x-elastic-product"] == "Elasticsearch"
    assert b["tagline"] == "You Know, for Search"
    assert b["version"]["number"].startswith("8.") and b["version"]["build_flavor"] == "default"


def test_product_header_on_errors_too(es):
    st, h, b = es.get("/nope/_doc/1")
    assert st == 404 and h["x-elastic-product"] == "Elasticsearch"


def test_head_root_has_no_body(es):
    st, h, payload = es.request("HEAD", "/", raw=True)
    assert st == 200 and payload == b""


def test_create_index_and_conflict(es):
    body = {"mappings": {"properties": {"path": {"type": "keyword"}}, "_meta": {"strategy": "tree"}}}
    st, _, b = es.put("/locks", body)
    assert st == 200 and b == {"acknowledged": True, "shards_acknowledged": True, "index": "locks"}
    st, _, b = es.put("/locks", body)
    assert st == 400 and b["error"]["type"] == "resource_already_exists_exception"
    assert b["error"]["root_cause"][0]["type"] == "resource_already_exists_exception"
    assert b["error"]["reason"].startswith("index [locks/") and b["status"] == 400
    st, _, b = es.get("/locks/_mapping")
    assert b == {"locks": {"mappings": body["mappings"]}}


def test_index_exists_delete(es):
    assert es.head("/x")[0] == 404
    es.put("/x")
    st, _, b = es.request("HEAD", "/x", raw=True)
    assert st == 200 and b == b""
    st, _, b = es.delete("/x")
    assert st == 200 and b == {"acknowledged": True}
    st, _, b = es.delete("/x")
    assert st == 404 and b["error"]["type"] == "index_not_found_exception"
    assert b["error"]["reason"] == "no such index [x]" and b["error"]["index"] == "x"


def test_missing_index_errors(es):
    for method, path in [("GET", "/nope/_doc/1"), ("GET", "/nope/_mapping"), ("POST", "/nope/_search"),
                         ("DELETE", "/nope/_doc/1"), ("POST", "/nope/_refresh")]:
        st, _, b = es.request(method, path)
        assert st == 404, path
        assert b["error"]["type"] == "index_not_found_exception", path
        assert b["error"]["root_cause"][0]["resource.id"] == "nope"


def test_invalid_index_name(es):
    st, _, b = es.put("/UPPER")
    assert st == 400 and b["error"]["type"] == "invalid_index_name_exception"
    assert b["error"]["reason"] == "Invalid index name [UPPER], must be lowercase"
    st, _, b = es.put("/UPPER/_doc/1", {"a": 1})
    assert st == 400 and b["error"]["type"] == "invalid_index_name_exception"


def test_bad_mapping(es):
    st, _, b = es.put("/m", {"mappings": {"properties": {"f": {"type": "nosuch"}}}})
    assert st == 400 and b["error"]["type"] == "mapper_parsing_exception"
    st, _, b = es.put("/m", {"nosuch": {}})
    assert st == 400


def test_unknown_parameter(es):
    es.put("/idx")
    st, _, b = es.get("/idx/_doc/1?foo=bar")
    reason = "request [/idx/_doc/1] contains unrecognized parameter: [foo]"
    assert st == 400 and b == {"error": {"root_cause": [{"type": "illegal_argument_exception", "reason": reason}],
                                         "type": "illegal_argument_exception", "reason": reason}, "status": 400}
    st, _, b = es.put("/idx/_doc/1?refesh=true", {"a": 1})
    assert st == 400 and "did you mean [refresh]?" in b["error"]["reason"]
    # global parameters are always accepted
    assert es.get("/idx/_doc/1?pretty&human=true&error_trace=false&filter_path=found")[0] == 404
    # the typeless es8 API has no include_type_name
    assert es.get("/idx/_mapping?include_type_name=true")[0] == 400


def test_content_type_required(es):
    st, h, b = es.put("/idx/_doc/1", {"a": 1}, ctype="application/x-www-form-urlencoded")
    assert st == 406 and b == {"error": "Content-Type header [application/x-www-form-urlencoded] is not supported",
                               "status": 406}
    st, h, b = es.put("/idx/_doc/1", b'{"a":1}', ctype=None)
    assert st == 406 and b == {"error": "Content-Type header is missing", "status": 406}
    assert es.put("/idx/_doc/1", {"a": 1}, ctype="application/json; charset=UTF-8")[0] == 201
    assert es.put("/idx/_doc/2", {"a": 1}, ctype="application/vnd.elasticsearch+json;compatible-with=8",
                  headers={"Accept": "application/vnd.elasticsearch+json;compatible-with=8"})[0] == 201
    st, _, b = es.put("/idx/_doc/3", {"a": 1}, ctype="application/vnd.elasticsearch+json;compatible-with=8")
    assert st == 400 and b["error"]["type"] == "media_type_header_exception"


def test_bodyless_get_with_json_content_type_is_fine(es):
    assert es.get("/", ctype="application/json")[0] == 200


def test_body_not_allowed(es):
    es.put("/idx/_doc/1", {"a": 1})
    st, _, b = es.request("GET", "/idx/_doc/1", {"x": 1})
    assert st == 400 and b["error"]["reason"] == "request [GET /idx/_doc/1] does not support having a body"


def test_no_handler_and_wrong_method(es):
    st, _, b = es.get("/a/b/c/d/e")
    assert st == 400 and b == {"error": "no handler found for uri [/a/b/c/d/e] and method [GET]", "status": 400}
    st, h, b = es.request("DELETE", "/idx/_refresh?pretty")
    assert st == 405 and h["allow"] == "GET,POST"
    assert b == {"error": "Incorrect HTTP method for uri [/idx/_refresh?pretty] and method [DELETE], allowed: "
                          "[GET, POST]", "status": 405}
    # another pattern matching the path may take the method (here: delete index "_refresh")
    st, h, b = es.request("DELETE", "/_refresh")
    assert st == 404 and b["error"]["type"] == "index_not_found_exception"


def test_id_too_long_and_empty(es):
    long_id = "x" * 513
    st, _, b = es.put("/idx/_doc/" + long_id, {"a": 1})
    assert st == 400 and b["error"]["type"] == "action_request_validation_exception"
    assert b["error"]["reason"] == ("Validation Failed: 1: id [%s] is too long, must be no longer than 512 bytes "
                                    "but was: 513;" % long_id)
    assert es.put("/idx/_doc/" + "x" * 512, {"a": 1})[0] == 201
    # multibyte: 171 * 3 bytes = 513 bytes
    st, _, b = es.put("/idx/_create/" + "%E2%82%AC" * 171, {"a": 1})
    assert st == 400 and "but was: 513" in b["error"]["reason"]


def test_percent_encoded_ids(es):
    st, h, b = es.put("/idx/_create/%2Fa%2Fb%20c%2Bd", {"a": 1})
    assert st == 201 and b["_id"] == "/a/b c+d" and h["location"] == "/idx/_doc/%2Fa%2Fb+c%2Bd"
    assert es.get("/idx/_doc/%2Fa%2Fb%20c%2Bd")[2]["found"] is True
    assert es.get("/idx/_doc/%2Fa%2Fb%20c+d")[2]["found"] is True  # '+' in a path is a plus


def test_pretty_and_filter_path(es):
    es.put("/idx/_doc/1", {"a": 1})
    st, _, raw = es.request("GET", "/idx/_doc/1?pretty", raw=True)
    text = raw.decode()
    assert text.startswith('{\n  "_index" : "idx",') and text.endswith("}\n")
    st, _, b = es.get("/idx/_doc/1?filter_path=_id,_source.a")
    assert b == {"_id": "1", "_source": {"a": 1}}


def test_source_returned_verbatim(es):
    st, _, raw = es.request("PUT", "/idx/_doc/1", b'{ "a" : 1.50 }', raw=False)
    st, _, raw = es.request("GET", "/idx/_doc/1", raw=True)
    assert b'"_source":{ "a" : 1.50 }' in raw


def test_duplicate_keys_refused(es):
    st, _, b = es.put("/idx/_doc/1", b'{"a":1,"a":2}')
    assert st == 400


def _raw_request(port, data, read_until_close=False):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    return s


def _read_response(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        rest += s.recv(65536)
    return head, rest[:length], rest[length:]


def test_keep_alive_and_content_length(emu8, es):
    s = _raw_request(emu8.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body, extra = _read_response(s)
    assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["tagline"]
    s.sendall(b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body, extra = _read_response(s)
    assert head.startswith(b"HTTP/1.1 404") and body == b""
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body, extra = _read_response(s)
    assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["version"]["number"]
    s.close()


def test_expect_100_continue(emu8, es):
    body = b'{"a":1}'
    s = _raw_request(emu8.port, b"PUT /idx/_doc/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(body))
    first = s.recv(1024)
    assert first.startswith(b"HTTP/1.1 100")
    s.sendall(body)
    head, payload, _ = _read_response(s) if b"\r\n\r\n" not in first.split(b"\r\n\r\n", 1)[1] else (None, None, None)
    assert head.startswith(b"HTTP/1.1 201") and json.loads(payload)["result"] == "created"
    s.close()


def test_chunked_request_body(emu8, es):
    body = b'{"a":1}'
    s = _raw_request(emu8.port, b"PUT /idx/_doc/1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    head, payload, _ = _read_response(s)
    assert head.startswith(b"HTTP/1.1 201")
    s.close()


def test_many_concurrent_connections(es):
    import threading
    errors = []

    def worker(n):
        try:
            for i in range(5):
                st, _, b = es.put("/conc/_doc/%d-%d" % (n, i), {"n": n})
                assert st == 201, b
        except Exception as e:  # pragma: no cover
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(40)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    es.post("/conc/_refresh")
    st, _, b = es.post("/conc/_search", {"size": 0})
    assert b["hits"]["total"]["value"] == 200


def test_response_headers(es):
    st, h, b = es.get("/", headers={"X-Opaque-Id": "owner-1"})
    assert h["x-opaque-id"] == "owner-1" and h["content-type"] == "application/json"
    st, h, b = es.get("/", headers={"Accept": "application/vnd.elasticsearch+json;compatible-with=8"})
    assert h["content-type"] == "application/vnd.elasticsearch+json;compatible-with=8"


def test_es7_content_type_has_charset(es7):
    assert es7.get("/")[1]["content-type"] == "application/json; charset=UTF-8"


def test_es8_refuses_wildcard_index_delete(es):
    es.put("/a1")
    st, _, b = es.delete("/a*")
    assert st == 400 and b["error"]["reason"] == "Wildcard expressions or all indices are not allowed"
    assert es.head("/a1")[0] == 200


def test_parameter_check_comes_after_request_parsing(es):
    # Elasticsearch parses parameters and body first, then looks for unrecognized parameters,
    # and only then executes (validation, index lookups)
    st, _, b = es.put("/idx/_doc/1?refresh=yes&foo=1", {"a": 1})
    assert b["error"]["reason"] == "Unknown value for refresh: [yes]."
    st, _, b = es.post("/idx/_update/1?foo=1", {"dac": {}})
    assert b["error"]["type"] == "x_content_parse_exception"
    st, _, b = es.put("/idx/_doc/" + "x" * 600 + "?foo=1", {"a": 1})
    assert "unrecognized parameter" in b["error"]["reason"]
    st, _, b = es.get("/nope/_doc/1?foo=1")
    assert st == 400 and "unrecognized parameter" in b["error"]["reason"]
    st, _, b = es.put("/idx/_doc/1", b"")
    assert st == 400 and b["error"]["type"] == "parse_exception" and b["error"]["reason"] == "request body is required"


def test_http_compression(es):
    import gzip
    st, h, raw = es.request("GET", "/", headers={"Accept-Encoding": "gzip"}, raw=True)
    hd = dict((k.lower(), v) for k, v in h)
    assert st == 200 and hd["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(raw))["tagline"] == "You Know, for Search"
    st, _, b = es.put("/gz/_doc/1", gzip.compress(b'{"a":1}'), headers={"Content-Encoding": "gzip"})
    assert st == 201 and es.get("/gz/_doc/1")[2]["_source"] == {"a": 1}
