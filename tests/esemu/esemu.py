#!/usr/bin/env python3
"""esemu: an Elasticsearch/OpenSearch emulator (a test double).

This is NOT Elasticsearch.  It is a small HTTP/1.1 server (Python standard
library only) that answers the requests treelockfs' es lock store, its
control tool and the project's tests send, as Elasticsearch 7 / 8 or
OpenSearch 2 answers them: same status codes, error envelopes, reason
texts and headers.  The differential test (tests/difftest) holds the list:
what it replays must get the real engines' answers.  Everything else gets
the engine's "no handler found", or a 400 whose reason starts with
"[esemu]" where the route exists but the emulator does not do that part.

This file: flavours, HTTP, routing, parameter checks, handlers,
authentication, fault injection (the /_esemu/ admin API) and the command
line.  store.py: indices, documents, persistence.  painless.py: the
Painless subset of the store's scripts.
"""

import argparse
import base64
import binascii
import fnmatch
import json
import os
import random
import re
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import painless  # noqa: E402
import store as st  # noqa: E402
from store import EsError  # noqa: E402

# One row per flavour: what GET / says, and each difference in behaviour.
#   types: "_type": "_doc" in document answers (7.x)
#   product: X-Elastic-Product header; opensearch: OpenSearch's own answers
#   typed_missing: "[_doc][id]: document missing" (7.x) or "[id]: ..."
#   upsert_ctx_ids: a scripted upsert's ctx has _index and _id (8.x)
#   ctx_type: an update script's ctx has _type (7.x, 8.x)
#   compat: the compatible-with versions the media types may carry
FLAVORS = {
    "es7": {"number": "7.17.18", "lucene": "8.11.1", "wire": "6.8.0", "index_compat": "6.0.0-beta1",
            "types": True, "product": True, "opensearch": False, "typed_missing": True,
            "upsert_ctx_ids": False, "ctx_type": True, "compat": (7,)},
    "es8": {"number": "8.15.0", "lucene": "9.11.1", "wire": "7.17.0", "index_compat": "7.0.0",
            "types": False, "product": True, "opensearch": False, "typed_missing": False,
            "upsert_ctx_ids": True, "ctx_type": True, "compat": (7, 8)},
    "opensearch2": {"number": "2.19.1", "lucene": "9.12.1", "wire": "7.10.0", "index_compat": "7.0.0",
                    "types": False, "product": False, "opensearch": True, "typed_missing": False,
                    "upsert_ctx_ids": False, "ctx_type": False, "compat": ()},
    # answers as opensearch2 does but for GET / (the differential test's corpus)
    "opensearch3": {"number": "3.3.0", "lucene": "10.3.1", "wire": "2.19.0", "index_compat": "2.0.0",
                    "types": False, "product": False, "opensearch": True, "typed_missing": False,
                    "upsert_ctx_ids": False, "ctx_type": False, "compat": ()},
}

# routes: (segments, {method: api}); "{x}" is a path parameter
ROUTES = [
    ([], {"GET": "info", "HEAD": "ping"}),
    (["_cluster", "health"], {"GET": "cluster.health"}),
    (["_bulk"], {"POST": "bulk", "PUT": "bulk"}),
    (["_scripts", "{id}"], {"PUT": "put_script", "POST": "put_script", "GET": "get_script",
                            "DELETE": "delete_script"}),
    (["{index}"], {"PUT": "indices.create", "DELETE": "indices.delete"}),
    (["{index}", "_mapping"], {"GET": "indices.get_mapping"}),
    (["{index}", "_settings"], {"GET": "indices.get_settings"}),
    (["{index}", "_refresh"], {"POST": "refresh", "GET": "refresh"}),
    (["{index}", "_doc", "{id}"], {"PUT": "index", "POST": "index", "GET": "get",
                                   "DELETE": "delete"}),
    (["{index}", "_create", "{id}"], {"PUT": "create", "POST": "create"}),
    (["{index}", "_update", "{id}"], {"POST": "update"}),
    (["{index}", "_bulk"], {"POST": "bulk", "PUT": "bulk"}),
    (["{index}", "_mget"], {"GET": "mget", "POST": "mget"}),
    (["{index}", "_search"], {"GET": "search", "POST": "search"}),
]
WRITE = {"wait_for_active_shards", "refresh", "routing", "timeout"}
# the parameters each API accepts (the REST spec's, of those the emulator has)
API_PARAMS = {
    "indices.create": {"wait_for_active_shards", "timeout", "master_timeout"},
    "indices.delete": {"timeout", "master_timeout", "ignore_unavailable"},
    "refresh": {"ignore_unavailable"},
    "index": WRITE | {"op_type", "if_seq_no", "if_primary_term"},
    "create": WRITE,
    "update": WRITE | {"retry_on_conflict", "if_seq_no", "if_primary_term"},
    "delete": WRITE | {"if_seq_no", "if_primary_term"},
    "get": {"realtime", "refresh", "routing"},
    "bulk": WRITE,
    "mget": {"realtime", "refresh", "routing"},
    "search": {"seq_no_primary_term", "version", "size", "from", "rest_total_hits_as_int"},
    "put_script": {"timeout", "master_timeout"},
    "get_script": {"master_timeout"},
    "delete_script": {"timeout", "master_timeout"},
    "cluster.health": {"level", "local", "master_timeout", "timeout", "wait_for_active_shards",
                       "wait_for_nodes", "wait_for_status", "filter_path"},
    "indices.get_settings": {"master_timeout", "flat_settings", "local", "include_defaults",
                             "filter_path"},
}
BODY_APIS = {"indices.create", "index", "create", "update", "bulk", "mget", "search", "put_script"}
SCRIPT_ACTIONS = {"put_script": "cluster:admin/script/put", "get_script": "cluster:admin/script/get",
                  "delete_script": "cluster:admin/script/delete"}
MEDIA = re.compile(r"^application/(json|x-ndjson|vnd\.elasticsearch\+(?:json|x-ndjson);\s*"
                   r"compatible-with=(\d+))\s*(;\s*charset=utf-8)?\s*$", re.I)


class Raw(object):
    """JSON text sent as it is (a document's source as it was indexed)."""

    def __init__(self, text):
        self.text = text


def render(v, out):
    """Compact JSON; NaN and infinities as strings, as the engine writes them."""
    out.append(_r(v))


# json.dumps(s, ensure_ascii=False) of a str, without a new encoder each time
_json_str = json.encoder.encode_basestring


def _r(v):
    # the types of nearly every value first, by exact type: a bulk answer
    # of a thousand items is rendered in a fraction of the time
    t = type(v)
    if t is str:
        return _json_str(v)
    if t is dict:
        return "{" + ",".join(_json_str(str(k)) + ":" + _r(x) for k, x in v.items()) + "}"
    if t is list:
        return "[" + ",".join(_r(x) for x in v) + "]"
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + _r(x)
                              for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_r(x) for x in v) + "]"
    if isinstance(v, float):
        text = painless.fmt_double(v)
        return text if v == v and abs(v) != float("inf") else json.dumps(text)
    return json.dumps(v, ensure_ascii=False)


class Plain(EsError):
    """An answer the engine renders as {"error": "<text>", "status": N}."""

    def body(self):
        return {"error": self.reason, "status": self.status}


def unavailable():
    return EsError(503, "cluster_block_exception",
                   "blocked by: [SERVICE_UNAVAILABLE/1/state not recovered / initialized];")


def rejected(fl):
    return EsError(429, "rejected_execution_exception" if fl["opensearch"] else
                   "es_rejected_execution_exception",
                   "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, "
                   "replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1, "
                   "max_coordinating_and_primary_bytes=0]")


def bad_param(reason, cause=None):
    return EsError(400, "illegal_argument_exception", reason, caused_by=cause)


def check_time(name, v):
    """TimeValue.parseTimeValue's refusals for the parameter NAME."""
    t = (v or "0").strip().lower()
    m = re.match(r"^(-?\d+)(nanos|micros|ms|s|m|h|d)$", t)
    if t not in ("0", "-1") and not m:
        raise bad_param("failed to parse setting [%s] with value [%s] as a time value: unit is "
                        "missing or unrecognized" % (name, v))
    if m and int(m.group(1)) < 0:
        raise bad_param("failed to parse setting [%s] with value [%s] as a time value: negative "
                        "durations are not supported" % (name, v))


def check_active_shards(v):
    """ActiveShardCount.parseString's refusals."""
    if v is None or v in ("all", "default"):
        return
    try:
        n = int(v)
    except ValueError:
        raise bad_param("cannot parse ActiveShardCount[%s]" % v,
                        {"type": "number_format_exception", "reason": 'For input string: "%s"' % v})
    if n < 0:
        raise bad_param("shard count cannot be a negative value")


def parse_json(data):
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (ValueError, UnicodeDecodeError) as e:
        raise EsError(400, "json_parse_exception", "Unexpected character: %s" % e)


class Control(object):
    """Counters and injected faults (the admin API)."""

    def __init__(self, args):
        self.lock = threading.Condition()
        self.stats, self.total = {}, 0
        self.paused = False
        self.fail_queue = []            # kinds of the next injected failures
        self.latency_ms = args.latency_ms or 0
        self.fail_rate = args.fail_rate or 0.0
        self.rng = random.Random(args.seed)
        self.blocks = {}                # X-Opaque-Id -> "reset" | "hang"
        self.path_blocks = {}           # a part of the request path -> "reset" | "hang"
        self.forbid, self.forbid_status = set(), 403
        self.data_nodes = 1             # what _cluster/health says (/_esemu/nodes)
        self.stopping = False
        # a reset waits for the requests being handled and drops those that
        # came before it and were not handled yet, so that no write of a
        # test that ended lands (re-creating the index) after the reset
        self.epoch, self.busy = 0, 0
        self.held = 0                   # requests held by a pause or a hang now

    def count(self, api):
        with self.lock:
            self.stats[api] = self.stats.get(api, 0) + 1
            self.total += 1

    def next_failure(self):
        with self.lock:
            if self.fail_queue:
                return self.fail_queue.pop(0)
            if self.fail_rate > 0 and self.rng.random() < self.fail_rate:
                return self.rng.choice(["503", "429", "reset"])
        return None

    def wait(self, opaque, path=""):
        """Holds a request while paused or hung by its opaque id or a part of
        its path; its block mode."""
        with self.lock:
            try:
                while not self.stopping:
                    mode = self.blocks.get(opaque) if opaque is not None else None
                    for part, m in self.path_blocks.items():
                        if part in path and mode != "hang":
                            mode = m
                    if not self.paused and mode != "hang":
                        return mode
                    self.held += 1
                    try:
                        self.lock.wait(0.2)
                    finally:
                        self.held -= 1
            finally:
                self.lock.notify_all()
        return None

    def reset(self):
        with self.lock:
            self.stats, self.total = {}, 0
            self.fail_queue, self.blocks, self.forbid = [], {}, set()
            self.path_blocks = {}
            self.paused, self.latency_ms, self.forbid_status = False, 0, 403
            self.data_nodes = 1
            self.lock.notify_all()


class Request(object):
    def __init__(self, method, raw_path, params, body, pp):
        self.method, self.raw_path, self.params, self.body, self.pp = method, raw_path, params, body, pp
        self.path = raw_path.partition("?")[0]

    def bool(self, name, default=False):
        v = self.params.get(name)
        if v is None:
            return default
        if v in ("", "true", "false"):
            return v != "false"
        raise bad_param("Failed to parse value [%s] as only [true] or [false] are allowed." % v)

    def long(self, name):
        v = self.params.get(name)
        if v is None:
            return None
        try:
            return int(v)
        except ValueError:
            raise bad_param("Failed to parse long parameter [%s] with value [%s]" % (name, v),
                            {"type": "number_format_exception", "reason": 'For input string: "%s"' % v})

    def refresh(self):
        v = self.params.get("refresh")
        if v not in (None, "", "true", "false", "wait_for"):
            raise bad_param("Unknown value for refresh: [%s]." % v)
        return None if v in (None, "false") else "wait_for" if v == "wait_for" else "true"

    def write_params(self):
        """Checks the parameters every write takes: (refresh policy)."""
        policy = self.refresh()
        check_active_shards(self.params.get("wait_for_active_shards"))
        check_time("timeout", self.params.get("timeout"))
        return policy

    def cas(self):
        if_seq_no, if_term = self.long("if_seq_no"), self.long("if_primary_term")
        msgs = cas_validation(if_seq_no, if_term)
        return if_seq_no, if_term, msgs

    def json(self, required=True):
        if not self.body:
            if required:
                raise EsError(400, "parse_exception", "request body is required")
            return None
        return parse_json(self.body)


def cas_validation(if_seq_no, if_term):
    msgs = []
    if if_seq_no is not None and if_seq_no < 0:
        raise bad_param("sequence numbers must be non negative. got [%d]." % if_seq_no)
    if if_term is not None and if_term < 0:
        raise bad_param("primary term must be non negative. got [%d]" % if_term)
    if if_seq_no is not None and not if_term:
        msgs.append("ifSeqNo is set, but primary term is [0]")
    if if_term and if_seq_no is None:
        msgs.append("ifPrimaryTerm is set to [%d], but ifSeqNo is unassigned" % if_term)
    return msgs


def id_validation(doc_id):
    n = len((doc_id or "").encode("utf-8"))
    if n > 512:
        return ["id [%s] is too long, must be no longer than 512 bytes but was: %d" % (doc_id, n)]
    return []


def script_error(src, reason, stack, pos, exc_type, message, name=None):
    """The engine's answer to a failing script: "failed to execute script"
    caused by the script_exception, which is also the root cause."""
    se = {"type": "script_exception", "reason": reason, "script_stack": stack,
          "script": name if name is not None else src if len(src) <= 256 else src[:256] + " ...",
          "lang": "painless"}
    if pos is not None:
        se["position"] = pos
    se["caused_by"] = {"type": exc_type, "reason": message}
    return EsError(400, "illegal_argument_exception", "failed to execute script", caused_by=se)


class Emulator(object):
    def __init__(self, args):
        self.args = args
        self.flavor = args.flavor
        self.fl = FLAVORS[args.flavor]
        self.store = st.Store(self.fl, args.data)
        self.control = Control(args)
        # a source compiled first as a stored script keeps that id as its
        # name in errors, also when it comes inline later (the node's cache)
        self.script_names = {}
        self.cluster_uuid = base64.urlsafe_b64encode(os.urandom(16)).decode()[:22]
        self.user, self.password, self.api_key = args.user, None, None
        if args.password_file:
            with open(args.password_file) as f:
                self.password = f.read().strip("\r\n")
        if args.api_key_file:
            with open(args.api_key_file) as f:
                self.api_key = f.read().strip()

    def meta(self, index, doc_id):
        d = {"_index": index}
        if self.fl["types"]:
            d["_type"] = "_doc"
        d["_id"] = doc_id
        return d

    def write_body(self, idx, doc_id, result, version, seq_no, forced=False, shards=None):
        d = self.meta(idx.name, doc_id)
        d.update(_version=version, result=result)
        if forced:
            d["forced_refresh"] = True
        d["_shards"] = shards or idx.shards()
        if seq_no is not None:
            d.update(_seq_no=seq_no, _primary_term=1)
        return d

    def refreshed(self, idx, policy):
        if policy:
            idx.refresh()
        return policy == "true"

    def source_of(self, text, doc_id):
        if not text or not text.strip():
            raise EsError(400, "mapper_parsing_exception", "failed to parse, document is empty")
        src = parse_json(text)
        if not isinstance(src, dict):
            raise EsError(400, "mapper_parsing_exception", "failed to parse",
                          caused_by={"type": "not_x_content_exception", "reason":
                                     "Compressor detection can only be called on some xcontent "
                                     "bytes or compressed xcontent bytes"})
        return src, text.strip("\r\n")

    # ---- scripts --------------------------------------------------------------------------
    def run_script(self, script, ctx):
        sid, src, params = script
        if sid is not None:
            stored = self.store.scripts.get(sid)
            if stored is None:
                raise EsError(400, "illegal_argument_exception", "failed to execute script",
                              caused_by={"type": "resource_not_found_exception",
                                         "reason": "unable to find script [%s] in cluster state" % sid})
            src = stored["source"]
        with self.store.lock:
            name = self.script_names.setdefault(src, sid)
        try:
            compiled = painless.compile_script(src)
        except painless.CompileError as e:
            stack, pos = painless.compile_error_stack(src, e)
            raise script_error(src, "compile error", stack, pos, e.exc_type, e.message, name)
        try:
            compiled.run(ctx, json.loads(json.dumps(params)))
        except painless.ScriptRuntimeError as e:
            stack, pos = compiled.stack(e.offset)
            raise script_error(src, "runtime error", stack, pos, e.exc_type, e.message, name)

    def parse_update(self, body, text):
        """An update body: {script (id, source, params, lang), upsert,
        scripted_upsert} as {"script": (id, source, params), ...}."""
        if not isinstance(body, dict):
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] Expected START_OBJECT")
        u = {}
        for k, v in body.items():
            if k not in ("script", "upsert", "scripted_upsert"):
                raise st.not_supported("update field [%s]" % k)
        s = body.get("script")
        if s is not None:
            if not isinstance(s, dict) or not isinstance(s.get("params", {}), dict):
                raise st.not_supported("a script that is not an object with source or id and params")
            if s.get("id") is not None:
                if "lang" in s:
                    col = text.find("}", text.find('"script"')) + 1 if text else 1
                    raise EsError(400, "x_content_parse_exception",
                                  "[1:%d] [UpdateRequest] failed to parse field [script]" % col,
                                  caused_by={"type": "illegal_argument_exception",
                                             "reason": "illegally specified <lang> for a stored script"})
                u["script"] = (str(s["id"]), None, s.get("params") or {})
            elif isinstance(s.get("source"), str):
                if s.get("lang", "painless") != "painless":
                    raise EsError(400, "illegal_argument_exception", "failed to execute script",
                                  caused_by={"type": "illegal_argument_exception",
                                             "reason": "script_lang not supported [%s]" % s["lang"]})
                u["script"] = (None, s["source"], s.get("params") or {})
            else:
                raise st.not_supported("a script without source or id")
        if body.get("upsert") is not None:
            if not isinstance(body["upsert"], dict):
                raise st.not_supported("an upsert that is not an object")
            u["upsert"] = body["upsert"]
        u["scripted_upsert"] = body.get("scripted_upsert") in (True, "true")
        return u

    def update_msgs(self, u, if_seq_no, retry):
        msgs = []
        if if_seq_no is not None:
            if retry > 0:
                msgs.append("compare and write operations can not be retried")
            if u.get("upsert") is not None:
                msgs.append("upsert requests don't support `if_seq_no` and `if_primary_term`")
        if u.get("script") is None:
            msgs.append("script or doc is missing")
        return msgs

    def do_update(self, idx, doc_id, u, if_seq_no=None, if_term=None):
        if if_seq_no is not None:
            cur = idx.docs.get(doc_id)
            err = idx.cas_conflict(doc_id, cur, if_seq_no, if_term) if cur is not None else None
            if err:
                raise err
        return self.store.update(idx, doc_id, u, self.run_script)

    def update_answer(self, idx, doc_id, result, doc, forced, in_bulk=False):
        if result == "noop":
            shards = None if in_bulk else {"total": 0, "successful": 0, "failed": 0}
            if doc is None:
                return 200, self.write_body(idx, doc_id, "noop", -1, None, False, shards)
            return 200, self.write_body(idx, doc_id, "noop", doc.version, doc.seq_no, False, shards)
        body = self.write_body(idx, doc_id, result, doc.version, doc.seq_no, forced)
        return (201 if result == "created" else 200), body

    # ---- handlers: cluster ---------------------------------------------------------------
    def h_info(self, req):
        fl = self.fl
        version = {"distribution": "opensearch"} if fl["opensearch"] else {}
        version["number"] = fl["number"]
        if not fl["opensearch"]:
            version["build_flavor"] = "default"
        version.update(build_type="deb", build_hash="0" * 40, build_date="2024-01-01T00:00:00.000Z",
                       build_snapshot=False, lucene_version=fl["lucene"],
                       minimum_wire_compatibility_version=fl["wire"],
                       minimum_index_compatibility_version=fl["index_compat"])
        return 200, {"name": "esemu-node", "cluster_name": "esemu", "cluster_uuid": self.cluster_uuid,
                     "version": version,
                     "tagline": "The OpenSearch Project: https://opensearch.org/" if fl["opensearch"]
                     else "You Know, for Search"}

    def h_ping(self, req):
        return 200, None

    def forbidden(self, api):
        if api in self.control.forbid:
            if self.control.forbid_status == 503:
                raise unavailable()
            user = self.user or "anonymous"
            raise EsError(403, "security_exception",
                          "no permissions for [%s] and User [name=%s, backend_roles=[], "
                          "requestedTenant=null]" % (SCRIPT_ACTIONS[api], user) if self.fl["opensearch"]
                          else "action [%s] is unauthorized for user [%s]" % (SCRIPT_ACTIONS[api], user))

    def h_put_script(self, req):
        self.forbidden("put_script")
        body = req.json()
        script = body.get("script") if isinstance(body, dict) else None
        if not isinstance(script, dict):  # the template form, whose language is mustache
            raise bad_param("unable to put stored script with unsupported lang [mustache]")
        if script.get("lang") is None:
            raise bad_param("must specify lang for stored script")
        if script.get("source") is None:
            raise bad_param("must specify source for stored script")
        self.store.put_script(req.pp["id"], {"lang": script["lang"], "source": script["source"]})
        self.store.persist()
        return 200, {"acknowledged": True}

    def h_get_script(self, req):
        self.forbidden("get_script")
        sid = req.pp["id"]
        s = self.store.scripts.get(sid)
        if s is None:
            return 404, {"_id": sid, "found": False}
        return 200, {"_id": sid, "found": True, "script": {"lang": s["lang"], "source": s["source"]}}

    def h_delete_script(self, req):
        self.forbidden("delete_script")
        sid = req.pp["id"]
        if not self.store.delete_script(sid):
            raise EsError(404, "resource_not_found_exception",
                          "stored script [%s] does not exist and cannot be deleted" % sid)
        self.store.persist()
        return 200, {"acknowledged": True}

    # ---- handlers: indices ---------------------------------------------------------------
    def h_indices_create(self, req):
        name = req.pp["index"]
        self.store.create_index(name, req.json(required=False) or {})
        self.store.persist()
        return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def h_indices_delete(self, req):
        try:
            self.store.delete_index(req.pp["index"])
        except EsError:
            if not req.bool("ignore_unavailable"):
                raise
        self.store.persist()
        return 200, {"acknowledged": True}

    def h_indices_get_mapping(self, req):
        idx = self.store.get_index(req.pp["index"], "index_or_alias")
        return 200, {idx.name: {"mappings": st.rendered_mapping(idx.mappings)}}

    @staticmethod
    def filtered(answer, spec):
        """filter_path=SPEC (the two reads that send it): comma-separated
        dotted paths whose segments may hold * wildcards; what no path
        reaches goes, and an answer nothing matched is {}."""
        if not spec:
            return answer

        def walk(o, pats):
            if any(not p for p in pats):
                return o, True
            if not isinstance(o, dict):
                return None, False
            out = {}
            for k, v in o.items():
                sub = [p[1:] for p in pats if fnmatch.fnmatchcase(k, p[0])]
                if sub:
                    r, ok = walk(v, sub)
                    if ok:
                        out[k] = r
            return out, bool(out)
        r, ok = walk(answer, [p.split(".") for p in spec.split(",") if p])
        return r if ok else {}

    def h_cluster_health(self, req):
        """One node that may claim more (/_esemu/nodes): the node count, and
        shards as on its one node."""
        n = self.control.data_nodes
        idxs = list(self.store.indices.values())
        prim = len(idxs)
        unassigned = sum(i.replicas for i in idxs)
        return 200, self.filtered({"cluster_name": "esemu", "status": "yellow" if unassigned else "green",
                     "timed_out": False, "number_of_nodes": n, "number_of_data_nodes": n,
                     "active_primary_shards": prim, "active_shards": prim, "relocating_shards": 0,
                     "initializing_shards": 0, "unassigned_shards": unassigned,
                     "delayed_unassigned_shards": 0, "number_of_pending_tasks": 0,
                     "number_of_in_flight_fetch": 0, "task_max_waiting_in_queue_millis": 0,
                     "active_shards_percent_as_number": 100.0 * prim / (prim + unassigned)
                     if prim + unassigned else 100.0}, req.params.get("filter_path"))

    def h_indices_get_settings(self, req):
        """The index's settings as created (nested, values as strings), with
        the shard count, the replica count as on one node, and the name and
        uuid the engine adds."""
        idx = self.store.get_index(req.pp["index"], "index_or_alias")
        flat = dict(idx.settings)
        flat["number_of_shards"] = 1
        flat["number_of_replicas"] = idx.replicas  # auto-expanded on its one node
        flat["provided_name"], flat["uuid"] = idx.name, idx.uuid
        nested = {}
        for k, v in flat.items():
            d = nested
            parts = k.split(".")
            for part in parts[:-1]:
                d = d.setdefault(part, {})
            d[parts[-1]] = v if isinstance(v, (list, dict)) else \
                ("true" if v is True else "false" if v is False else str(v))
        return 200, self.filtered({idx.name: {"settings": {"index": nested}}},
                                  req.params.get("filter_path"))

    def h_refresh(self, req):
        idx = self.store.indices.get(req.pp["index"])
        if idx is None:
            if req.bool("ignore_unavailable"):
                return 200, {"_shards": {"total": 0, "successful": 0, "failed": 0}}
            raise st.index_not_found(req.pp["index"])
        idx.refresh()
        return 200, {"_shards": {"total": 1 + idx.replicas, "successful": 1, "failed": 0}}

    # ---- handlers: documents -------------------------------------------------------------
    def h_index(self, req, create=False):
        doc_id = req.pp["id"]
        op_type = "create" if create else req.params.get("op_type", "index")
        if op_type not in ("index", "create"):
            raise bad_param("opType must be 'create' or 'index', found: [%s]" % op_type)
        if_seq_no, if_term, msgs = (None, None, []) if create else req.cas()
        policy = req.write_params()
        if not req.body:
            raise EsError(400, "parse_exception", "request body is required")
        if op_type == "create" and if_seq_no is not None:
            msgs.append("create operations do not support compare and set. use index instead")
        msgs += id_validation(doc_id)
        if msgs:
            raise st.validation_error(*msgs)
        source, raw = self.source_of(req.body.decode("utf-8", "replace"), doc_id)
        idx = self.store.auto_create(req.pp["index"])
        result, doc = self.store.write_index(idx, doc_id, source, op_type == "create", if_seq_no,
                                             if_term, raw)
        forced = self.refreshed(idx, policy)
        self.store.persist()
        return (201 if result == "created" else 200), \
            self.write_body(idx, doc_id, result, doc.version, doc.seq_no, forced)

    def h_create(self, req):
        return self.h_index(req, create=True)

    def h_get(self, req):
        realtime = req.bool("realtime", True)
        idx = self.store.get_index(req.pp["index"])
        if req.bool("refresh"):
            idx.refresh()
        doc = (idx.docs if realtime else idx.searchable).get(req.pp["id"])
        body = self.meta(idx.name, req.pp["id"])
        if doc is None:
            body["found"] = False
            return 404, body
        body.update(_version=doc.version, _seq_no=doc.seq_no, _primary_term=1, found=True,
                    _source=Raw(doc.raw) if doc.raw is not None else doc.source)
        return 200, body

    def h_delete(self, req):
        doc_id = req.pp["id"]
        if_seq_no, if_term, msgs = req.cas()
        policy = req.write_params()
        msgs += id_validation(doc_id)
        if msgs:
            raise st.validation_error(*msgs)
        idx = self.store.get_index(req.pp["index"])
        result, version, seq = self.store.write_delete(idx, doc_id, if_seq_no, if_term)
        forced = self.refreshed(idx, policy)
        self.store.persist()
        return (200 if result == "deleted" else 404), \
            self.write_body(idx, doc_id, result, version, seq, forced)

    def h_update(self, req):
        doc_id = req.pp["id"]
        if_seq_no, if_term, msgs = req.cas()
        retry = req.long("retry_on_conflict") or 0
        policy = req.write_params()
        text = req.body.decode("utf-8", "replace") if req.body else ""
        u = self.parse_update(req.json(), text)
        u["retry_on_conflict"] = retry
        msgs += self.update_msgs(u, if_seq_no, retry) + id_validation(doc_id)
        if msgs:
            raise st.validation_error(*msgs)
        idx = self.store.auto_create(req.pp["index"])
        result, doc = self.do_update(idx, doc_id, u, if_seq_no, if_term)
        forced = self.refreshed(idx, policy) if result != "noop" else False
        if result != "noop":
            self.store.persist()
        return self.update_answer(idx, doc_id, result, doc, forced)

    def h_bulk(self, req):
        started = time.monotonic()
        policy = req.write_params()
        data = req.body or b""
        if not data:
            raise EsError(400, "parse_exception", "request body is required")
        if not data.endswith(b"\n"):
            raise bad_param("The bulk request must be terminated by a newline [\\n]")
        lines = data.decode("utf-8", "replace").split("\n")[:-1]
        items, i = [], 0
        while i < len(lines):
            lineno = i + 1
            action = parse_json(lines[i])
            i += 1
            if not isinstance(action, dict) or len(action) != 1:
                raise bad_param("Malformed action/metadata line [%d], expected a single action" % lineno)
            (op, meta), = action.items()
            if op not in ("index", "create", "update", "delete") or not isinstance(meta, dict):
                raise bad_param("Malformed action/metadata line [%d], expected one of [create, delete, "
                                "index, update] but found [%s]" % (lineno, op))
            for k in meta:
                if k not in ("_index", "_id", "if_seq_no", "if_primary_term", "retry_on_conflict",
                             "version", "version_type"):
                    raise bad_param("Action/metadata line [%d] contains an unknown parameter [%s]"
                                    % (lineno, k))
            src = None
            if op != "delete":
                if i >= len(lines):
                    break  # the engine drops an action whose source line is missing
                src = lines[i]
                i += 1
            items.append((op, meta, src))
        parsed, msgs = [], []
        for op, meta, src in items:
            doc_id = None if meta.get("_id") is None else str(meta["_id"])
            if not (meta.get("_index") or req.pp.get("index")):
                msgs.append("index is missing")
            if doc_id is None and op != "index" and op != "create":
                msgs.append("id is missing")
            if_seq_no, if_term = meta.get("if_seq_no"), meta.get("if_primary_term")
            msgs += cas_validation(if_seq_no, if_term)
            u = None
            if op == "update":
                u = self.parse_update(parse_json(src), src)
                u["retry_on_conflict"] = int(meta.get("retry_on_conflict") or 0)
                msgs += self.update_msgs(u, if_seq_no, u["retry_on_conflict"])
            msgs += id_validation(doc_id)
            parsed.append((op, meta, src, u, doc_id))
        if not parsed:
            msgs.append("no requests added")
        if msgs:
            raise st.validation_error(*msgs)
        out, errors, touched = [], False, {}
        for op, meta, src, u, doc_id in parsed:
            name = str(meta.get("_index") or req.pp["index"])
            try:
                item = self.bulk_item(name, op, meta, src, u, doc_id, touched)
            except EsError as e:
                item = self.meta(name, doc_id)
                item.update(status=e.status, error=e.inner())
                errors = errors or not (op == "delete" and e.status == 404 and
                                        e.etype != "index_not_found_exception")
            out.append({op: item})
        forced = False
        for idx in touched.values():
            forced = self.refreshed(idx, policy)
        if forced:
            for it in out:
                for v in it.values():
                    if v.get("result") not in (None, "noop"):
                        shards = v.pop("_shards")
                        rest = [(k, v.pop(k)) for k in list(v) if k not in ("_index", "_type", "_id",
                                                                           "_version", "result")]
                        v.update([("forced_refresh", True), ("_shards", shards)] + rest)
        self.store.persist()
        return 200, {"took": int((time.monotonic() - started) * 1000), "errors": errors, "items": out}

    def bulk_item(self, name, op, meta, src, u, doc_id, touched):
        if_seq_no, if_term = meta.get("if_seq_no"), meta.get("if_primary_term")
        ext = None
        if meta.get("version_type") is not None or meta.get("version") is not None:
            vt = meta.get("version_type", "internal")
            if vt not in ("external", "external_gte") or op not in ("index", "delete") or \
                    not isinstance(meta.get("version"), int):
                raise st.not_supported("version [%s] of type [%s] on [%s]"
                                       % (meta.get("version"), vt, op))
            ext = (meta["version"], vt == "external_gte")
        if op == "delete":
            idx = self.store.get_index(name)
            touched[name] = idx
            result, version, seq = self.store.write_delete(idx, doc_id, if_seq_no, if_term, ext)
            body = self.write_body(idx, doc_id, result, version, seq)
            body["status"] = 200 if result == "deleted" else 404
            return body
        idx = touched[name] = self.store.auto_create(name)
        if op == "update":
            result, doc = self.do_update(idx, doc_id, u, if_seq_no, if_term)
            status, body = self.update_answer(idx, doc_id, result, doc, False, in_bulk=True)
        else:
            if doc_id == "":
                raise bad_param("if _id is specified it must not be empty")
            if doc_id is None:
                raise st.not_supported("an index action without an _id")
            source, raw = self.source_of(src, doc_id)
            result, doc = self.store.write_index(idx, doc_id, source, op == "create", if_seq_no,
                                                 if_term, raw, ext)
            body = self.write_body(idx, doc_id, result, doc.version, doc.seq_no)
            status = 201 if result == "created" else 200
        body["status"] = status
        return body

    def h_mget(self, req):
        body = req.json()
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or set(body) != {"ids"}:
            raise st.not_supported("mget without a list of ids")
        if not ids:
            raise st.validation_error("no documents to get")
        name = req.pp["index"]
        idx = self.store.indices.get(name)
        if idx is not None and req.bool("refresh"):
            idx.refresh()
        view = {} if idx is None else idx.docs if req.bool("realtime", True) else idx.searchable
        docs = []
        for doc_id in map(str, ids):
            item = self.meta(name, doc_id)
            doc = view.get(doc_id)
            if idx is None:  # each document answers that the index is missing
                item["error"] = st.index_not_found(name).body()["error"]
            elif doc is None:
                item["found"] = False
            else:
                item.update(_version=doc.version, _seq_no=doc.seq_no, _primary_term=1, found=True,
                            _source=Raw(doc.raw) if doc.raw is not None else doc.source)
            docs.append(item)
        return 200, {"docs": docs}

    def h_search(self, req):
        started = time.monotonic()
        body = req.json(required=False) or {}
        for k in body:
            if k not in ("query", "size", "from", "seq_no_primary_term", "version", "sort",
                         "search_after", "_source", "track_total_hits"):
                raise st.not_supported("search option [%s]" % k)
        sort_field, after = None, body.get("search_after")
        if body.get("sort") is not None:
            sort = body["sort"]
            one = sort[0] if isinstance(sort, list) and len(sort) == 1 else None
            if isinstance(one, str):
                one = {one: "asc"}
            field, order = (list(one.items())[0] if isinstance(one, dict) and len(one) == 1
                            else (None, None))
            if isinstance(order, dict):
                order = order.get("order", "asc")
            known = self.store.indices.get(req.pp["index"])
            props = (known.mappings.get("properties") or {}) if known else {}
            if field is None or order != "asc" or (props.get(field) or {}).get("type") != "keyword":
                raise st.not_supported("sort [%s]" % json.dumps(sort))
            sort_field = field
        elif after is not None:
            raise EsError(400, "illegal_argument_exception", "Sort must contain at least one field.")
        source_filter = body.get("_source", True)
        size = int(body.get("size", req.params.get("size", 10)))
        from_ = int(body.get("from", req.params.get("from", 0)))
        if from_ + size > 10000:
            raise EsError(400, "illegal_argument_exception",
                          "Result window is too large, from + size must be less than or equal to: "
                          "[10000] but was [%d]." % (from_ + size))
        seq = body.get("seq_no_primary_term", req.bool("seq_no_primary_term"))
        version = body.get("version", req.bool("version"))
        idx = self.store.get_index(req.pp["index"])
        matched = self.store.search(idx, body.get("query"), sort_field)
        total = len(matched)
        if after is not None:
            if not isinstance(after, list) or len(after) != 1:
                raise EsError(400, "illegal_argument_exception",
                              "search_after has 1 value(s) but sort has 1.")
            matched = [d for d in matched if str(d.source.get(sort_field)) > str(after[0])]
        hits = []
        for d in matched[from_:from_ + size]:
            h = self.meta(idx.name, d.id)
            if version:
                h["_version"] = d.version
            if seq:
                h.update(_seq_no=d.seq_no, _primary_term=1)
            h["_score"] = None if sort_field else 1.0
            if source_filter is True:
                h["_source"] = Raw(d.raw) if d.raw is not None else d.source
            elif isinstance(source_filter, list):
                h["_source"] = {k: v for k, v in d.source.items() if k in source_filter}
            elif isinstance(source_filter, str):
                h["_source"] = {k: v for k, v in d.source.items() if k == source_filter}
            if sort_field:
                h["sort"] = [d.source.get(sort_field)]
            hits.append(h)
        return 200, {"took": int((time.monotonic() - started) * 1000), "timed_out": False,
                     "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                     "hits": {"total": total if req.bool("rest_total_hits_as_int")
                              else {"value": total, "relation": "eq"},
                              "max_score": 1.0 if hits else None, "hits": hits}}


# ---- HTTP ------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.server.emu.args.verbose:
            sys.stderr.write("esemu: %s - %s\n" % (self.address_string(), fmt % args))

    def send_header(self, keyword, value):
        if keyword.lower() not in ("server", "date"):
            BaseHTTPRequestHandler.send_header(self, keyword, value)

    def handle_one_request(self):
        try:
            BaseHTTPRequestHandler.handle_one_request(self)
        except (OSError, ValueError):
            self.close_connection = True

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_GET

    def send(self, status, body, headers=(), ctype=None):
        emu = self.server.emu
        if body is None:
            data = b""
        elif isinstance(body, bytes):
            data = body
        else:
            out = []
            render(body, out)
            data = "".join(out).encode("utf-8")
        self.send_response(status)
        if emu.fl["product"]:
            self.send_header("X-Elastic-Product", "Elasticsearch")
        if self.headers.get("X-Opaque-Id") is not None:
            self.send_header("X-Opaque-Id", self.headers["X-Opaque-Id"])
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", ctype or self.answer_type())
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def answer_type(self):
        """8.x answers application/json (or the compatible type asked for);
        7.x and OpenSearch add the charset."""
        if self.server.emu.flavor != "es8":
            return "application/json; charset=UTF-8"
        m = MEDIA.match((self.headers.get("Accept") or "").split(",")[0].strip())
        if m and m.group(2):
            return "application/vnd.elasticsearch+json;compatible-with=" + m.group(2)
        return "application/json"

    def send_error(self, e):
        if isinstance(e, Plain):
            return self.send(e.status, e.body(), list(e.headers.items()))
        if e.status == 401 and self.server.emu.fl["opensearch"]:
            return self.send(401, b"Unauthorized", list(e.headers.items()), "text/plain; charset=UTF-8")
        hdrs = []
        for k, v in e.headers.items():
            hdrs += [(k, x) for x in (v if isinstance(v, list) else [v])]
        self.send(e.status, e.body(), hdrs)

    def reset_connection(self):
        """Drops the connection without an answer (RST)."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def dispatch(self):
        emu, ctl = self.server.emu, self.server.emu.control
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        raw_path = self.path
        path, _, query = raw_path.partition("?")
        if path.startswith("/_esemu/"):
            return self.admin(path[len("/_esemu/"):], body)
        epoch = ctl.epoch
        mode = ctl.wait(self.headers.get("X-Opaque-Id"), path)
        if mode == "reset":
            return self.reset_connection()
        if ctl.latency_ms:
            time.sleep(ctl.latency_ms / 1000.0)
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        segs = [urllib.parse.unquote(s) for s in path.split("/")[1:] if s]
        api, pp, allowed = self.route(segs)
        ctl.count(api or "unknown")
        fail = ctl.next_failure()
        if fail == "reset":
            return self.reset_connection()
        try:
            if fail:
                raise unavailable() if fail == "503" else rejected(emu.fl)
            if api is None:
                if allowed:
                    ms = ", ".join(sorted(allowed))
                    raise Plain(405, "", "Incorrect HTTP method for uri [%s] and method [%s], allowed: "
                                "[%s]" % (raw_path, self.command, ms), headers={"Allow": ms.replace(" ", "")})
                raise Plain(400, "", "no handler found for uri [%s] and method [%s]"
                            % (raw_path, self.command))
            self.check_content_type(body)
            self.authenticate(raw_path)
            req = Request(self.command, raw_path, params, body, pp)
            unknown = sorted(set(params) - API_PARAMS.get(api, set()) - {"pretty", "error_trace"})
            if unknown:
                raise bad_param("request [%s] contains unrecognized parameter%s: [%s]"
                                % (req.path, "s" if len(unknown) > 1 else "", "], [".join(unknown)))
            if body and api not in BODY_APIS:
                raise bad_param("request [%s %s] does not support having a body" % (self.command,
                                                                                    req.path))
            with ctl.lock:
                if ctl.epoch != epoch:  # came before a reset: as a node restart
                    return self.reset_connection()
                ctl.busy += 1
            try:
                status, answer = getattr(emu, "h_" + api.replace(".", "_"))(req)
            finally:
                with ctl.lock:
                    ctl.busy -= 1
                    ctl.lock.notify_all()
            self.send(status, answer)
        except EsError as e:
            self.send_error(e)
        except OSError:
            self.close_connection = True
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            self.send_error(bad_param("[esemu] malformed request value: %s" % (e,)))

    def route(self, segs):
        """(api, path parameters, methods of the matching paths): literal
        segments win over parameters, as in the engine's path trie."""
        matches = []
        for pattern, methods in ROUTES:
            if len(pattern) == len(segs) and all(p.startswith("{") or p == s
                                                 for p, s in zip(pattern, segs)):
                pp = {p[1:-1]: s for p, s in zip(pattern, segs) if p.startswith("{")}
                matches.append((sum(not p.startswith("{") for p in pattern), methods, pp))
        matches.sort(key=lambda m: -m[0])
        for _, methods, pp in matches:
            if self.command in methods:
                return methods[self.command], pp, None
        return None, {}, set(m for _, ms, _ in matches for m in ms)

    def check_content_type(self, body):
        if not body:
            return
        ct = self.headers.get("Content-Type")
        if ct is None:
            raise Plain(406, "", "Content-Type header is missing")
        m = MEDIA.match(ct.strip())
        if m is None or (m.group(2) and int(m.group(2)) not in self.server.emu.fl["compat"]):
            raise Plain(406, "", "Content-Type header [%s] is not supported" % ct)

    def authenticate(self, uri):
        emu = self.server.emu
        if not emu.user and not emu.api_key:
            return
        scheme, _, cred = (self.headers.get("Authorization") or "").partition(" ")
        try:
            decoded = base64.b64decode(cred.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            decoded = None
        scheme = scheme.lower()
        if scheme == "basic" and emu.user and decoded == "%s:%s" % (emu.user, emu.password):
            return
        if scheme == "apikey" and emu.api_key and decoded == emu.api_key:
            return
        if emu.fl["opensearch"]:
            raise EsError(401, "", "", headers={"WWW-Authenticate": 'Basic realm="OpenSearch Security"'})
        www = ['Basic realm="security" charset="UTF-8"', "ApiKey"]
        if scheme == "basic" and decoded is not None:
            reason = "unable to authenticate user [%s] for REST request [%s]" % (
                decoded.partition(":")[0], uri)
        elif scheme == "apikey":
            reason = ("unable to authenticate with provided credentials and anonymous access is not "
                      "allowed for this request")
        else:
            reason = "missing authentication credentials for REST request [%s]" % uri
        raise EsError(401, "security_exception", reason, {"header": {"WWW-Authenticate": www}},
                      headers={"WWW-Authenticate": www})

    # ---- admin API ------------------------------------------------------------------------
    def admin(self, cmd, body):
        emu, ctl, m = self.server.emu, self.server.emu.control, self.command
        try:
            data = json.loads(body.decode("utf-8")) if body else {}
        except ValueError:
            return self.send_admin(400, {"error": "invalid JSON body"})
        ok = {"acknowledged": True}
        with ctl.lock:
            if (m, cmd) == ("GET", "held"):
                return self.send_admin(200, {"held": ctl.held})
            if (m, cmd) == ("GET", "stats"):
                return self.send_admin(200, {"requests": dict(ctl.stats), "total": ctl.total})
            if (m, cmd) == ("GET", "state"):
                return self.send_admin(200, {"paused": ctl.paused, "latency_ms": ctl.latency_ms,
                                             "pending_failures": list(ctl.fail_queue),
                                             "blocks": dict(ctl.blocks), "flavor": emu.flavor,
                                             "forbid": sorted(ctl.forbid)})
            if (m, cmd) == ("POST", "reset_stats"):
                ctl.stats, ctl.total = {}, 0
                return self.send_admin(200, ok)
            if (m, cmd) in (("POST", "pause"), ("POST", "resume")):
                ctl.paused = cmd == "pause"
                ctl.lock.notify_all()
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "fail"):
                kind = str(data.get("kind", "503"))
                if kind not in ("503", "429", "reset"):
                    return self.send_admin(400, {"error": "kind must be 503, 429 or reset"})
                ctl.fail_queue = [kind] * max(0, int(data.get("count", 1)))
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "forbid"):
                apis, status = data.get("apis", []), data.get("status", 403)
                if not isinstance(apis, list) or not set(apis) <= set(SCRIPT_ACTIONS) or \
                        status not in (403, 503):
                    return self.send_admin(400, {"error": "apis: a list of put_script, get_script, "
                                                          "delete_script; status: 403 or 503"})
                ctl.forbid, ctl.forbid_status = set(apis), status
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "nodes"):
                n = data.get("data_nodes")
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    return self.send_admin(400, {"error": "data_nodes: a count of 1 or more"})
                ctl.data_nodes = n
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "latency"):
                ctl.latency_ms = max(0, int(data.get("ms", 0)))
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "fail_rate"):
                ctl.fail_rate = float(data.get("rate", 0))
                if "seed" in data:
                    ctl.rng = random.Random(data["seed"])
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "block"):
                oid, mode = data.get("opaque_id"), data.get("mode", "none")
                if not isinstance(oid, str) or mode not in ("reset", "hang", "none"):
                    return self.send_admin(400, {"error": "need opaque_id and mode reset|hang|none"})
                if mode == "none":
                    ctl.blocks.pop(oid, None)
                else:
                    ctl.blocks[oid] = mode
                ctl.lock.notify_all()
                return self.send_admin(200, ok)
            if (m, cmd) == ("POST", "block_path"):
                part, mode = data.get("contains"), data.get("mode", "none")
                if not isinstance(part, str) or not part or mode not in ("reset", "hang", "none"):
                    return self.send_admin(400, {"error": "need contains and mode reset|hang|none"})
                if mode == "none":
                    ctl.path_blocks.pop(part, None)
                else:
                    ctl.path_blocks[part] = mode
                ctl.lock.notify_all()
                return self.send_admin(200, ok)
        if (m, cmd) == ("POST", "reset"):
            with ctl.lock:
                ctl.epoch += 1
                deadline = time.monotonic() + 60
                while ctl.busy and time.monotonic() < deadline:
                    ctl.lock.wait(0.1)
            emu.store.reset()
            ctl.reset()
            return self.send_admin(200, ok)
        if m == "GET" and cmd.startswith("docs/"):
            idx = emu.store.indices.get(urllib.parse.unquote(cmd[5:]))
            if idx is None:
                return self.send_admin(404, {"error": "no such index [%s]" % cmd[5:]})
            with idx.lock:
                docs = {d.id: {"_source": d.source, "_seq_no": d.seq_no, "_primary_term": 1,
                               "_version": d.version} for d in idx.docs.values()}
            return self.send_admin(200, {"index": idx.name, "count": len(docs), "docs": docs})
        return self.send_admin(404, {"error": "unknown admin endpoint [%s /_esemu/%s]" % (m, cmd)})

    def send_admin(self, status, obj):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, addr, emu, ssl_ctx=None):
        self.emu, self.ssl_ctx = emu, ssl_ctx
        ThreadingHTTPServer.__init__(self, addr, Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_ctx is not None:
            sock.settimeout(10)
            try:
                sock = self.ssl_ctx.wrap_socket(sock, server_side=True)
            except OSError:
                sock.close()
                raise OSError("TLS handshake failed")
            sock.settimeout(None)
        return sock, addr

    def handle_error(self, request, client_address):
        if self.emu.args.verbose:
            ThreadingHTTPServer.handle_error(self, request, client_address)


def build_parser():
    p = argparse.ArgumentParser(
        prog="esemu.py",
        description="esemu is a TEST DOUBLE: an emulator of what treelockfs' es lock store asks of "
                    "Elasticsearch/OpenSearch. It is not Elasticsearch and must never hold real data. "
                    "The admin API under /_esemu/ counts requests and injects faults.")
    p.add_argument("--port", type=int, default=9200, help="TCP port (0 = any free port)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port-file", help="write the bound port to this file once listening")
    p.add_argument("--data", help="persist state to this JSON file (synced before each write is "
                                  "answered) and restore it at start")
    p.add_argument("--flavor", choices=sorted(FLAVORS), default="es8", help="which server to imitate")
    p.add_argument("--user", help="require HTTP Basic authentication with this user")
    p.add_argument("--password-file", help="file holding the password for --user")
    p.add_argument("--api-key-file", help="file holding 'id:key'; accept 'Authorization: ApiKey "
                                          "base64(id:key)'")
    p.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    p.add_argument("--tls-key", help="PEM private key for --tls-cert")
    p.add_argument("--latency-ms", type=int, default=0, help="delay every non-admin request")
    p.add_argument("--fail-rate", type=float, default=0.0,
                   help="probability that a non-admin request fails (503, 429 or connection reset)")
    p.add_argument("--seed", type=int, default=None, help="random seed for --fail-rate")
    p.add_argument("--verbose", action="store_true", help="log requests to stderr")
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.user and not args.password_file:
        parser.error("--user needs --password-file")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    emu = Emulator(args)
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    server = Server((args.bind, args.port), emu, ctx)
    if args.port_file:
        tmp = "%s.tmp.%d" % (args.port_file, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d\n" % server.server_address[1])
        os.replace(tmp, args.port_file)

    def stop(signum, frame):
        emu.control.stopping = True
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
