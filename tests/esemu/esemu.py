#!/usr/bin/env python3
"""esemu: an Elasticsearch-compatible emulator (a test double).

This is NOT Elasticsearch.  It is a small HTTP/1.1 server (Python standard
library only) that answers the document, index and search requests a lock
client makes the way Elasticsearch 7.17 / 8.15 or OpenSearch 2.11 answers
them: same status codes, same error envelopes (``root_cause``, ``type``,
``reason``, ``caused_by``, ``status``), same reason texts for the errors a
client acts on, same headers (``X-Elastic-Product``), and the same refusals
(unknown parameters, wrong Content-Type, over-long ids, bad scripts).

Layout: this file holds the HTTP server, routing, parameter checks, response
rendering, authentication, fault injection and the command line;
``store.py`` holds indices, documents, queries and persistence;
``painless.py`` is the Painless tokenizer, parser and evaluator.

Fidelity choices made here
--------------------------
* Request pipeline order: admin namespace, pause/block/latency, routing
  (unknown path: 400 ``no handler found``; known path, wrong method: 405),
  authentication and Content-Type (406) in the flavour's order, then the
  handler reads its parameters and parses its body, then unrecognized
  parameters (400) are reported as ``BaseRestHandler`` does, then request
  validation in the order of the ``validate()`` methods, then the action.
* Script failures are ``illegal_argument_exception`` "failed to execute
  script" caused by the ``script_exception``; the root cause is the wrapper
  (``guessRootCauses`` stops at a non-Elasticsearch exception).
* ``_bulk`` validates every item before executing any (``BulkRequest.validate``).
* Documents keep the exact bytes they were indexed with, so ``_source`` in
  GET/search answers is returned verbatim (Elasticsearch embeds the stored
  bytes); sources rewritten by an update are re-serialised compactly.
* ``?pretty`` output imitates Jackson's pretty printer (``"key" : value``).
* The admin namespace ``/_esemu/`` is not part of Elasticsearch, needs no
  credentials and is never counted.
"""

import argparse
import base64
import binascii
import json
import os
import random
import re
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

FLAVORS = {
    "es7": {"number": "7.17.18", "lucene": "8.11.1", "wire": "6.8.0", "index": "6.0.0-beta1",
            "hash": "8682172c2130b9a411b1bd5ff37c9792367de6b0", "date": "2024-02-02T12:04:59.691750271Z",
            "types": True, "product": True},
    "es8": {"number": "8.15.0", "lucene": "9.11.1", "wire": "7.17.0", "index": "7.0.0",
            "hash": "1a77947f34deddb41af25e6f0ddb8e830159c179", "date": "2024-08-05T10:05:34.233336849Z",
            "types": False, "product": True},
    "opensearch2": {"number": "2.19.1", "lucene": "9.12.1", "wire": "7.10.0", "index": "7.0.0",
                    "hash": "4dcad6dd1fd45b6bd91f041a041829c8687278fa", "date": "2023-10-13T02:55:55.511945994Z",
                    "types": False, "product": False},
    # answers as opensearch2 does but for GET / (the difftest's corpus)
    "opensearch3": {"number": "3.3.0", "lucene": "10.3.1", "wire": "2.19.0", "index": "2.0.0",
                    "hash": "e972d15408320e6be84c64bb0fdc076ca7696ea2", "date": "2025-10-11T23:26:07.877318301Z",
                    "types": False, "product": False},
}

# consumed by every REST channel (AbstractRestChannel) or the request parser
GLOBAL_PARAMS = {"pretty", "human", "error_trace", "filter_path", "source", "source_content_type", "format"}

WRITE_COMMON = {"wait_for_active_shards", "refresh", "routing", "timeout"}
GET_PARAMS = {"stored_fields", "preference", "realtime", "refresh", "routing", "_source", "_source_excludes",
              "_source_includes", "version", "version_type"}
SEARCH_PARAMS = {
    "analyzer", "analyze_wildcard", "ccs_minimize_roundtrips", "default_operator", "df", "explain",
    "stored_fields", "docvalue_fields", "from", "ignore_unavailable", "ignore_throttled", "allow_no_indices",
    "expand_wildcards", "lenient", "preference", "q", "routing", "scroll", "search_type", "size", "sort",
    "_source", "_source_excludes", "_source_includes", "terminate_after", "stats", "suggest_field",
    "suggest_mode", "suggest_size", "suggest_text", "timeout", "track_scores", "track_total_hits",
    "allow_partial_search_results", "typed_keys", "version", "seq_no_primary_term", "request_cache",
    "batched_reduce_size", "max_concurrent_shard_requests", "pre_filter_shard_size", "rest_total_hits_as_int",
    "min_compatible_shard_node"}
API_PARAMS = {
    "info": set(),
    "ping": set(),
    "indices.create": {"wait_for_active_shards", "timeout", "master_timeout"},
    "indices.exists": {"local", "ignore_unavailable", "allow_no_indices", "expand_wildcards", "flat_settings",
                       "include_defaults"},
    "indices.delete": {"timeout", "master_timeout", "ignore_unavailable", "allow_no_indices", "expand_wildcards"},
    "indices.get_mapping": {"ignore_unavailable", "allow_no_indices", "expand_wildcards", "master_timeout", "local"},
    "indices.refresh": {"ignore_unavailable", "allow_no_indices", "expand_wildcards"},
    "index": WRITE_COMMON | {"op_type", "version", "version_type", "if_seq_no", "if_primary_term", "pipeline",
                             "require_alias"},
    "create": WRITE_COMMON | {"version", "version_type", "pipeline"},
    "update": WRITE_COMMON | {"_source", "_source_excludes", "_source_includes", "lang", "retry_on_conflict",
                              "if_seq_no", "if_primary_term", "require_alias"},
    "delete": WRITE_COMMON | {"if_seq_no", "if_primary_term", "version", "version_type"},
    "get": GET_PARAMS,
    "exists": GET_PARAMS,
    "bulk": WRITE_COMMON | {"_source", "_source_excludes", "_source_includes", "pipeline", "require_alias"},
    "mget": {"stored_fields", "preference", "realtime", "refresh", "routing", "_source", "_source_excludes",
             "_source_includes"},
    "search": SEARCH_PARAMS,
    "put_script": {"timeout", "master_timeout", "context"},
    "get_script": {"master_timeout"},
    "delete_script": {"timeout", "master_timeout"},
    "cluster.health": {"level", "local", "master_timeout", "timeout", "wait_for_active_shards",
                       "wait_for_nodes", "wait_for_events", "wait_for_no_relocating_shards",
                       "wait_for_no_initializing_shards", "wait_for_status", "expand_wildcards"},
    "indices.get_settings": {"master_timeout", "ignore_unavailable", "allow_no_indices",
                             "expand_wildcards", "flat_settings", "local", "include_defaults"},
}
# parameters that only Elasticsearch 8.x knows (rest-api-spec of 8.15)
ES8_EXTRA_PARAMS = {"index": {"require_data_stream"}, "bulk": {"require_data_stream", "list_executed_pipelines"},
                    "get": {"force_synthetic_source"}, "mget": {"force_synthetic_source"},
                    "search": {"force_synthetic_source", "include_named_queries_score"}}
ES7_EXTRA_PARAMS = {"indices.create": {"include_type_name"},
                    "indices.get_mapping": {"include_type_name"},
                    "bulk": {"type"}, "mget": set(), "search": set()}

# apis that take a body; others refuse one (400 "does not support having a body")
BODY_APIS = {"indices.create", "index", "create", "update", "bulk", "mget", "search", "put_script"}

# routes: (segments, {method: api}); "{x}" is a path parameter
ROUTES = [
    ([], {"GET": "info", "HEAD": "ping"}),
    (["_refresh"], {"POST": "indices.refresh", "GET": "indices.refresh"}),
    (["_bulk"], {"POST": "bulk", "PUT": "bulk"}),
    (["_mget"], {"GET": "mget", "POST": "mget"}),
    (["_search"], {"GET": "search", "POST": "search"}),
    (["_mapping"], {"GET": "indices.get_mapping"}),
    (["_cluster", "health"], {"GET": "cluster.health"}),
    (["_scripts", "{id}"], {"PUT": "put_script", "POST": "put_script", "GET": "get_script",
                            "DELETE": "delete_script"}),
    (["{index}"], {"PUT": "indices.create", "HEAD": "indices.exists", "DELETE": "indices.delete"}),
    (["{index}", "_mapping"], {"GET": "indices.get_mapping"}),
    (["{index}", "_settings"], {"GET": "indices.get_settings"}),
    (["{index}", "_refresh"], {"POST": "indices.refresh", "GET": "indices.refresh"}),
    (["{index}", "_doc"], {"POST": "index"}),
    (["{index}", "_doc", "{id}"], {"PUT": "index", "POST": "index", "GET": "get", "HEAD": "exists",
                                   "DELETE": "delete"}),
    (["{index}", "_create", "{id}"], {"PUT": "create", "POST": "create"}),
    (["{index}", "_update", "{id}"], {"POST": "update"}),
    (["{index}", "_bulk"], {"POST": "bulk", "PUT": "bulk"}),
    (["{index}", "_mget"], {"GET": "mget", "POST": "mget"}),
    (["{index}", "_search"], {"GET": "search", "POST": "search"}),
]
# typed (deprecated) endpoints of Elasticsearch 7 / OpenSearch 1, as used by the Definitive Guide
TYPED_ROUTES = [
    (["{index}", "{type}"], {"POST": "index"}),
    (["{index}", "{type}", "{id}"], {"PUT": "index", "POST": "index", "GET": "get", "HEAD": "exists",
                                     "DELETE": "delete"}),
    (["{index}", "{type}", "{id}", "_create"], {"PUT": "create", "POST": "create"}),
    (["{index}", "{type}", "{id}", "_update"], {"POST": "update"}),
    (["{index}", "{type}", "_bulk"], {"POST": "bulk", "PUT": "bulk"}),
    (["{index}", "{type}", "_search"], {"GET": "search", "POST": "search"}),
    (["{index}", "{type}", "_mget"], {"GET": "mget", "POST": "mget"}),
]
# names under which /_esemu/stats counts requests (the REST spec name otherwise)
STATS_NAMES = {"indices.refresh": "refresh"}


def levenshtein_similarity(a, b):
    """Lucene's LevenshteinDistance.getDistance (1 - d / max length)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 1.0 if n == m else 0.0
    prev = list(range(m + 1))
    for i in range(1, n + 1):
        cur = [i] + [0] * m
        for j in range(1, m + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        prev = cur
    return 1.0 - float(prev[m]) / max(n, m)


def did_you_mean(key, candidates):
    scored = [(levenshtein_similarity(key, c), c) for c in candidates]
    scored = [s for s in scored if s[0] > 0.5]
    scored.sort(key=lambda s: (-s[0], s[1]))
    keys = [c for _, c in scored]
    if not keys:
        return ""
    if len(keys) == 1:
        return " -> did you mean [%s]?" % keys[0]
    return " -> did you mean any of [%s]?" % ", ".join(keys)


# --------------------------------------------------------------------------
# JSON rendering (compact like Jackson, or Jackson's pretty printer)


class Raw(object):
    """Already-encoded JSON (a document's original source)."""
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


def _enc_str(s):
    return json.dumps(s, ensure_ascii=False)


def render_compact(v, out):
    if isinstance(v, Raw):
        out.append(v.text)
    elif isinstance(v, dict):
        out.append("{")
        first = True
        for k, x in v.items():
            if not first:
                out.append(",")
            first = False
            out.append(_enc_str(str(k)))
            out.append(":")
            render_compact(x, out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            render_compact(x, out)
        out.append("]")
    else:
        out.append(_scalar(v))


def _scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return _enc_str(painless.fmt_double(v))
        return painless.fmt_double(v)
    return _enc_str(str(v))


def render_pretty(v, out, indent=0):
    pad = "  " * (indent + 1)
    if isinstance(v, Raw):
        render_pretty(json.loads(v.text), out, indent)
    elif isinstance(v, dict):
        if not v:
            out.append("{ }")
            return
        out.append("{\n")
        first = True
        for k, x in v.items():
            if not first:
                out.append(",\n")
            first = False
            out.append(pad + _enc_str(str(k)) + " : ")
            render_pretty(x, out, indent + 1)
        out.append("\n" + "  " * indent + "}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[ ]")
            return
        out.append("[\n")
        for i, x in enumerate(v):
            if i:
                out.append(",\n")
            out.append(pad)
            render_pretty(x, out, indent + 1)
        out.append("\n" + "  " * indent + "]")
    else:
        out.append(_scalar(v))


def materialize(v):
    if isinstance(v, Raw):
        return json.loads(v.text)
    if isinstance(v, dict):
        return {k: materialize(x) for k, x in v.items()}
    if isinstance(v, list):
        return [materialize(x) for x in v]
    return v


def apply_filter_path(obj, filters):
    """filter_path with dotted paths, ``*``/``**`` wildcards and ``-`` exclusions."""
    incl = [f.split(".") for f in filters if f and not f.startswith("-")]
    excl = [f[1:].split(".") for f in filters if f.startswith("-")]
    obj = materialize(obj)

    def seg_match(pat, key):
        return pat == key or (("*" in pat) and re.fullmatch(re.escape(pat).replace(r"\*", ".*"), key))

    def include(v, pats):
        if any(not p for p in pats):
            return v, True
        if isinstance(v, list):
            items = []
            for x in v:
                r, ok = include(x, pats)
                if ok:
                    items.append(r)
            return items, bool(items)
        if not isinstance(v, dict):
            return None, False
        out = {}
        for k, x in v.items():
            sub = []
            for p in pats:
                if p[0] == "**":
                    sub.append(p)
                    sub.append(p[1:])
                    if len(p) > 1 and seg_match(p[1], k):
                        sub.append(p[2:])
                elif seg_match(p[0], k):
                    sub.append(p[1:])
            if sub:
                r, ok = include(x, sub)
                if ok:
                    out[k] = r
        return out, bool(out)

    def exclude(v, pats):
        if isinstance(v, list):
            return [exclude(x, pats) for x in v]
        if not isinstance(v, dict):
            return v
        out = {}
        for k, x in v.items():
            sub = [p[1:] for p in pats if seg_match(p[0], k)]
            if any(not p for p in sub):
                continue
            out[k] = exclude(x, sub) if sub else x
        return out

    if incl:
        obj, ok = include(obj, incl)
        if not ok:
            obj = {}
    if excl:
        obj = exclude(obj, excl)
    return obj


# --------------------------------------------------------------------------
# control state shared by the server


class Control(object):
    def __init__(self, args):
        self.lock = threading.Condition()
        self.stats = {}
        self.total = 0
        self.paused = False
        self.fail_queue = []  # kinds of the next injected failures
        self.latency_ms = args.latency_ms or 0
        self.fail_rate = args.fail_rate or 0.0
        self.rng = random.Random(args.seed)
        self.blocks = {}  # opaque id -> mode
        self.forbid = set()  # apis answered 403 (a user without the privilege)
        self.forbid_status = 403  # or 503: those apis fail for a while
        self.data_nodes = 1  # what _cluster/health says (/_esemu/nodes); one node serves
        self.stopping = False

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

    def wait_unpaused(self, opaque):
        with self.lock:
            while not self.stopping:
                if self.paused:
                    self.lock.wait(0.2)
                    continue
                mode = self.blocks.get(opaque) if opaque is not None else None
                if mode == "hang":
                    self.lock.wait(0.2)
                    continue
                return mode
        return None


def rejection(flavor):
    t = "rejected_execution_exception" if flavor.startswith("opensearch") else "es_rejected_execution_exception"
    return EsError(429, t, "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, "
                           "replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1, "
                           "max_coordinating_and_primary_bytes=0]")


def unavailable():
    return EsError(503, "cluster_block_exception",
                   "blocked by: [SERVICE_UNAVAILABLE/1/state not recovered / initialized];")


# --------------------------------------------------------------------------
# request object


class Request(object):
    def __init__(self, method, raw_path, path, segs, params, headers, body):
        self.method = method
        self.raw_path = raw_path  # path with query string, as sent
        self.path = path  # path without the query string
        self.segs = segs
        self.params = params
        self.headers = headers
        self.body = body
        self.consumed = set()
        self.api = None
        self.pp = {}
        self._check = None

    def prepared(self):
        """Called by a handler once it has read its parameters and parsed its
        body, before it acts: Elasticsearch checks for unrecognized
        parameters (and for bodies nobody consumed) at that point."""
        check, self._check = self._check, None
        if check is not None:
            check()

    def param(self, name, default=None):
        self.consumed.add(name)
        return self.params.get(name, default)

    def has(self, name):
        self.consumed.add(name)
        return name in self.params

    def bool_param(self, name, default=False):
        v = self.param(name)
        if v is None:
            return default
        if v in ("", "true"):
            return True
        if v == "false":
            return False
        raise EsError(400, "illegal_argument_exception",
                      "Failed to parse value [%s] as only [true] or [false] are allowed." % v)

    def long_param(self, name, default=None):
        v = self.param(name)
        if v is None:
            return default
        try:
            return int(v)
        except ValueError:
            raise EsError(400, "illegal_argument_exception",
                          "Failed to parse long parameter [%s] with value [%s]" % (name, v),
                          caused_by={"type": "number_format_exception", "reason": 'For input string: "%s"' % v})

    def int_param(self, name, default=None):
        v = self.param(name)
        if v is None:
            return default
        try:
            n = int(v)
            if not -(1 << 31) <= n < (1 << 31):
                raise ValueError
            return n
        except ValueError:
            raise EsError(400, "illegal_argument_exception",
                          "Failed to parse int parameter [%s] with value [%s]" % (name, v),
                          caused_by={"type": "number_format_exception", "reason": 'For input string: "%s"' % v})


def dup_check_hook(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("Duplicate field '%s'" % k)
        d[k] = v
    return d


def parse_json(text, what="body"):
    try:
        return json.loads(text, object_pairs_hook=dup_check_hook)
    except ValueError as e:
        msg = str(e)
        raise EsError(400, "x_content_parse_exception" if "Duplicate" not in msg else "json_parse_exception",
                      "[1:1] Unexpected token: %s" % msg if "Duplicate" not in msg else msg,
                      root=None)


# --------------------------------------------------------------------------
# the emulator


class Emulator(object):
    def __init__(self, args):
        self.args = args
        self.flavor = args.flavor
        self.fl = FLAVORS[args.flavor]
        self.store = st.Store(args.flavor, args.data, auto_refresh=True)
        self.control = Control(args)
        # the node's script cache: a source compiled first as a stored
        # script keeps that script's id as its name, which errors quote,
        # also when the same source later comes inline (never cleared, as
        # on a node that lives on)
        self.script_names = {}
        self.cluster_uuid = "esemu" + base64.urlsafe_b64encode(os.urandom(12)).decode()[:17]
        self.user = args.user
        self.password = None
        if args.password_file:
            with open(args.password_file) as f:
                self.password = f.read().strip("\r\n")
        self.api_key = None
        if args.api_key_file:
            with open(args.api_key_file) as f:
                self.api_key = f.read().strip()
        self.types = self.fl["types"]

    # ------------------------------------------------------------ helpers
    def meta(self, index, doc_id, type_name="_doc"):
        d = {"_index": index}
        if self.types:
            d["_type"] = type_name
        d["_id"] = doc_id
        return d

    def write_body(self, req, idx, doc_id, result, version, seq_no, forced=False, shards=None):
        d = self.meta(idx.name, doc_id, self.doc_type(idx, req.pp.get("type")))
        d["_version"] = version
        d["result"] = result
        if forced:
            d["forced_refresh"] = True
        d["_shards"] = shards if shards is not None else idx.shards()
        if seq_no is not None and seq_no >= 0:
            d["_seq_no"] = seq_no
            d["_primary_term"] = 1
        return d

    def doc_type(self, idx, requested):
        """The ``_type`` shown in 7.x answers: the type asked for, or the
        index's single mapping type (``_doc`` for typeless indices)."""
        if requested not in (None, "_doc"):
            return requested
        return (idx.type_name if idx is not None else None) or "_doc"

    def claim_type(self, idx, requested):
        """7.x indices hold one mapping type; a write with another is refused."""
        if not self.types:
            return
        want = requested or "_doc"
        with idx.lock:
            have = idx.type_name
            if have is None:
                idx.type_name = want
                return
        if want != have and want != "_doc":
            raise EsError(400, "illegal_argument_exception",
                          "Rejecting mapping update to [%s] as the final mapping would have more than 1 type: [%s, %s]"
                          % (idx.name, have, want))

    def source_value(self, doc, includes=None, excludes=None):
        if includes or excludes:
            return st.filter_source(doc.source, includes, excludes)
        if doc.raw is not None:
            return Raw(doc.raw)
        return doc.source

    def source_filter(self, req, body_source=None):
        """(fetch, includes, excludes) from _source params."""
        src = req.param("_source")
        inc = req.param("_source_includes")
        exc = req.param("_source_excludes")
        fetch = True
        includes, excludes = [], []
        if src is not None:
            if src in ("true", ""):
                fetch = True
            elif src == "false":
                fetch = False
            else:
                includes = src.split(",")
        if inc:
            includes = inc.split(",")
        if exc:
            excludes = exc.split(",")
        return fetch, includes, excludes

    def refresh_policy(self, req):
        v = req.param("refresh")
        if v is None or v == "false":
            return None
        if v in ("true", ""):
            return "true"
        if v == "wait_for":
            return "wait_for"
        raise EsError(400, "illegal_argument_exception", "Unknown value for refresh: [%s]." % v)

    def check_cas_params(self, req, api):
        if_seq_no = req.long_param("if_seq_no")
        if_term = req.long_param("if_primary_term")
        msgs = []
        if if_seq_no is not None and if_seq_no < 0:
            raise EsError(400, "illegal_argument_exception",
                          "sequence numbers must be non negative. got [%d]." % if_seq_no)
        if if_term is not None and if_term < 0:
            raise EsError(400, "illegal_argument_exception",
                          "primary term must be non negative. got [%d]" % if_term)
        return if_seq_no, if_term, msgs

    def version_params(self, req):
        version = req.long_param("version")
        vt = req.param("version_type")
        if vt is not None and vt not in ("internal", "external", "external_gte", "force"):
            raise EsError(400, "illegal_argument_exception", "No version type match [%s]" % vt)
        if vt == "force":
            raise EsError(400, "illegal_argument_exception", "version type [force] may no longer be used")
        return version, vt

    def get_index_for_write(self, name, req=None, create=True):
        if req is not None and req.bool_param("require_alias"):
            raise EsError(404, "index_not_found_exception",
                          "no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias"
                          % (name, name), {"index_uuid": "_na_", "index": name})
        st.check_index_name(name)
        idx, created = self.store.auto_create(name)
        return idx

    def pipeline_check(self, req):
        p = req.param("pipeline")
        if p not in (None, "_none"):
            raise EsError(400, "illegal_argument_exception", "pipeline with id [%s] does not exist" % p)

    def do_refresh(self, idx, policy):
        if policy:
            idx.refresh()
        return policy == "true"

    def json_body(self, req, required=False, what=None):
        if not req.body:
            if required:
                raise EsError(400, "parse_exception", "request body is required")
            return None
        text = req.body.decode("utf-8", errors="replace")
        try:
            return json.loads(text, object_pairs_hook=dup_check_hook)
        except ValueError as e:
            msg = str(e)
            if msg.startswith("Duplicate field"):
                raise EsError(400, "json_parse_exception", msg)
            raise EsError(400, "json_parse_exception", "Unexpected character: " + msg)

    def doc_source_body(self, req, doc_id):
        text = req.body.decode("utf-8", errors="replace") if req.body else ""
        return self.parse_source(text, doc_id)

    def parse_source(self, text, doc_id):
        if not text.strip():
            raise EsError(400, "mapper_parsing_exception", "failed to parse, document is empty")
        try:
            src = json.loads(text, object_pairs_hook=dup_check_hook)
        except ValueError as e:
            msg = str(e)
            cause = {"type": "json_parse_exception",
                     "reason": msg if msg.startswith("Duplicate") else "Unexpected character: " + msg}
            raise EsError(400, "mapper_parsing_exception", "failed to parse", caused_by=cause,
                          root=[{"type": "mapper_parsing_exception", "reason": "failed to parse"}])
        if not isinstance(src, dict):
            raise EsError(400, "mapper_parsing_exception", "failed to parse",
                          caused_by={"type": "not_x_content_exception",
                                     "reason": "Compressor detection can only be called on some xcontent bytes or "
                                               "compressed xcontent bytes"},
                          root=[{"type": "mapper_parsing_exception", "reason": "failed to parse"}])
        return src, text.strip("\r\n")

    # ------------------------------------------------------------ painless
    def run_script(self, script, ctx_fields, idx, doc_id):
        src, params, lang = script
        name = None  # how errors quote the script: its source, or a stored one's id
        if isinstance(src, StoredRef):
            # a stored script is looked up when it runs (an upsert that
            # does not run it never notices that it is missing)
            stored = self.store.scripts.get(src.id)
            if stored is None:
                reason = "unable to find script [%s] in cluster state" % src.id
                raise EsError(400, "illegal_argument_exception", "failed to execute script",
                              caused_by={"type": "resource_not_found_exception", "reason": reason})
            name, src = src.id, stored["source"]
        with self.store.lock:
            name = self.script_names.setdefault(src, name)
        try:
            compiled = painless.compile_script(src)
        except painless.CompileError as e:
            stack, pos = painless.compile_error_stack(src, e)
            raise script_error(src, "compile error", stack, pos, e.exc_type, e.message, name)
        ctx = painless.Ctx(ctx_fields, self.flavor == "es8")
        try:
            compiled.run({"ctx": ctx, "params": painless.from_json(params, painless.JHashMap)})
        except painless.ScriptRuntimeError as e:
            stack, pos = compiled.snippet(e.offset)
            raise script_error(src, "runtime error", stack, pos, e.exc_type, e.message, name)

    def parse_script(self, s, lang_param=None):
        if isinstance(s, str):
            return (s, {}, lang_param or "painless")
        if not isinstance(s, dict):
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] failed to parse field [script]",
                          caused_by={"type": "illegal_argument_exception", "reason": "expected a script"})
        source = None
        stored_id = None
        params = {}
        lang = None
        for k, v in s.items():
            if k in ("source", "inline"):
                source = v
            elif k == "params":
                if not isinstance(v, dict):
                    raise EsError(400, "x_content_parse_exception",
                                  "[1:1] [UpdateRequest] failed to parse field [script]",
                                  caused_by={"type": "parsing_exception",
                                             "reason": "Value must be of type object: [params]"})
                params = v
            elif k == "lang":
                lang = v
            elif k == "id":
                stored_id = v
            elif k == "options":
                pass
            else:
                raise EsError(400, "x_content_parse_exception",
                              "[1:1] [UpdateRequest] failed to parse field [script]",
                              caused_by={"type": "illegal_argument_exception",
                                         "reason": "[script] unknown field [%s]%s" % (
                                             k, did_you_mean(k, ["source", "id", "lang", "params", "options"])
                                             .replace(" -> did you mean", " did you mean"))})
        if stored_id is not None and source is None:
            if not isinstance(stored_id, str):
                raise EsError(400, "x_content_parse_exception",
                              "[1:1] [UpdateRequest] failed to parse field [script]",
                              caused_by={"type": "illegal_argument_exception", "reason": "expected a string id"})
            if lang is not None:
                raise EsError(400, "x_content_parse_exception",
                              "[1:1] [UpdateRequest] failed to parse field [script]",
                              caused_by={"type": "illegal_argument_exception",
                                         "reason": "illegally specified <lang> for a stored script"})
            return (StoredRef(stored_id), params, "painless")
        if stored_id is not None:
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] failed to parse field [script]",
                          caused_by={"type": "x_content_parse_exception",
                                     "reason": "[1:1] [script] failed to parse field [source]",
                                     "caused_by": {"type": "illegal_argument_exception",
                                                   "reason": "must only use one of [source, id] when specifying "
                                                             "a script"}})
        if source is None:
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] failed to parse field [script]",
                          caused_by={"type": "illegal_argument_exception",
                                     "reason": "must specify either [source] for an inline script or [id] for a "
                                               "stored script"})
        lang = lang or lang_param or "painless"
        if lang != "painless":
            reason = "script_lang not supported [%s]" % lang
            if lang in ("expression", "mustache"):
                reason = "%s engine does not know how to handle script context [update]" % lang
            raise EsError(400, "illegal_argument_exception", "failed to execute script",
                          caused_by={"type": "illegal_argument_exception", "reason": reason})
        if not isinstance(source, str):
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] failed to parse field [script]",
                          caused_by={"type": "illegal_argument_exception", "reason": "expected a string source"})
        return (source, params, lang)

    # ------------------------------------------------------------ handlers
    def forbidden(self, action):
        """403 as the security layer answers a user without the privilege
        for ACTION (a fault the tests inject: /_esemu/forbid), or, when the
        fault says 503, the answer of a cluster that cannot serve it now."""
        if self.control.forbid_status == 503:
            return unavailable()
        user = self.user or "anonymous"
        if self.flavor.startswith("opensearch"):
            reason = "no permissions for [%s] and User [name=%s, backend_roles=[], requestedTenant=null]" \
                % (action, user)
        else:
            reason = "action [%s] is unauthorized for user [%s]" % (action, user)
        return EsError(403, "security_exception", reason)

    def h_put_script(self, req):
        for p in ("timeout", "master_timeout", "context"):
            req.param(p)
        req.prepared()
        if "put_script" in self.control.forbid:
            raise self.forbidden("cluster:admin/script/put")
        body = self.json_body(req, required=True)
        script = body.get("script") if isinstance(body, dict) else None
        if not isinstance(script, dict):
            # no "script" object: the template form, whose language is mustache
            raise EsError(400, "illegal_argument_exception",
                          "unable to put stored script with unsupported lang [mustache]")
        lang, source = script.get("lang"), script.get("source")
        if lang is None:
            raise EsError(400, "illegal_argument_exception", "must specify lang for stored script")
        if source is None:
            raise EsError(400, "illegal_argument_exception", "must specify source for stored script")
        self.store.put_script(req.pp["id"], {"lang": lang, "source": source})
        self.store.persist()
        return 200, {"acknowledged": True}

    def h_get_script(self, req):
        req.param("master_timeout")
        req.prepared()
        if "get_script" in self.control.forbid:
            raise self.forbidden("cluster:admin/script/get")
        sid = req.pp["id"]
        stored = self.store.scripts.get(sid)
        if stored is None:
            return 404, {"_id": sid, "found": False}
        return 200, {"_id": sid, "found": True, "script": {"lang": stored["lang"], "source": stored["source"]}}

    def h_delete_script(self, req):
        for p in ("timeout", "master_timeout"):
            req.param(p)
        req.prepared()
        if "delete_script" in self.control.forbid:
            raise self.forbidden("cluster:admin/script/delete")
        sid = req.pp["id"]
        if not self.store.delete_script(sid):
            raise EsError(404, "resource_not_found_exception",
                          "stored script [%s] does not exist and cannot be deleted" % sid)
        self.store.persist()
        return 200, {"acknowledged": True}

    def h_info(self, req):
        req.prepared()
        fl = self.fl
        version = {}
        if self.flavor.startswith("opensearch"):
            version["distribution"] = "opensearch"
        version["number"] = fl["number"]
        if not self.flavor.startswith("opensearch"):
            version["build_flavor"] = "default"
        version.update({"build_type": "deb", "build_hash": fl["hash"], "build_date": fl["date"],
                        "build_snapshot": False, "lucene_version": fl["lucene"],
                        "minimum_wire_compatibility_version": fl["wire"],
                        "minimum_index_compatibility_version": fl["index"]})
        tagline = "The OpenSearch Project: https://opensearch.org/" if self.flavor.startswith("opensearch") \
            else "You Know, for Search"
        return 200, {"name": "esemu-node", "cluster_name": "esemu", "cluster_uuid": self.cluster_uuid,
                     "version": version, "tagline": tagline}

    def h_ping(self, req):
        req.prepared()
        return 200, None

    def h_indices_create(self, req):
        name = req.pp["index"]
        for p in ("wait_for_active_shards", "timeout", "master_timeout"):
            req.param(p)
        body = self.json_body(req) or {}
        if self.types and req.bool_param("include_type_name") and isinstance(body.get("mappings"), dict):
            m = body["mappings"]
            if len(m) == 1 and isinstance(list(m.values())[0], dict):
                body = dict(body, mappings=list(m.values())[0])
        req.prepared()
        self.store.create_index(name, body)
        self.store.persist()
        return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def h_indices_exists(self, req):
        for p in ("local", "flat_settings", "include_defaults", "expand_wildcards"):
            req.param(p)
        allow = req.bool_param("allow_no_indices", False)
        ignore = req.bool_param("ignore_unavailable")
        req.prepared()
        try:
            idxs = self.store.resolve(req.pp["index"], allow_no_indices=allow, ignore_unavailable=ignore)
        except EsError:
            return 404, None
        return (200 if idxs else 404), None

    def h_indices_delete(self, req):
        for p in ("timeout", "master_timeout", "expand_wildcards"):
            req.param(p)
        req.bool_param("allow_no_indices")
        ignore = req.bool_param("ignore_unavailable")
        req.prepared()
        expr = req.pp["index"]
        if self.flavor == "es8" and any(p == "_all" or "*" in p for p in expr.split(",")):
            # action.destructive_requires_name defaults to true since 8.0
            raise EsError(400, "illegal_argument_exception",
                          "Wildcard expressions or all indices are not allowed")
        try:
            self.store.delete_index(expr)
        except EsError:
            if not ignore:
                raise
        self.store.persist()
        return 200, {"acknowledged": True}

    def h_indices_get_mapping(self, req):
        for p in ("expand_wildcards", "master_timeout", "local"):
            req.param(p)
        itn = self.types and req.bool_param("include_type_name")
        req.bool_param("allow_no_indices")
        ignore = req.bool_param("ignore_unavailable")
        req.prepared()
        idxs = self.store.resolve(req.pp.get("index"), ignore_unavailable=ignore,
                                  kind="index_or_alias")
        out = {}
        for i in idxs:
            m = st.rendered_mapping(i.mappings)
            out[i.name] = {"mappings": ({"_doc": m} if itn and m else m)}
        return 200, out

    def h_cluster_health(self, req):
        """One node that may claim more (/_esemu/nodes): the node count only,
        shards as on its one node."""
        for p in API_PARAMS["cluster.health"]:
            req.param(p)
        req.prepared()
        n = self.control.data_nodes
        idxs = list(self.store.indices.values())
        prim = sum(i.num_shards for i in idxs)
        unassigned = sum(i.num_shards * i.replicas for i in idxs)
        return 200, {"cluster_name": "esemu", "status": "yellow" if unassigned else "green",
                     "timed_out": False, "number_of_nodes": n, "number_of_data_nodes": n,
                     "active_primary_shards": prim, "active_shards": prim, "relocating_shards": 0,
                     "initializing_shards": 0, "unassigned_shards": unassigned,
                     "delayed_unassigned_shards": 0, "number_of_pending_tasks": 0,
                     "number_of_in_flight_fetch": 0, "task_max_waiting_in_queue_millis": 0,
                     "active_shards_percent_as_number": 100.0 * prim / (prim + unassigned)
                     if prim + unassigned else 100.0}

    def h_indices_get_settings(self, req):
        """The index settings as set (nested, values as strings), the
        replica count auto-expanded on this one node."""
        for p in API_PARAMS["indices.get_settings"]:
            req.param(p)
        req.prepared()
        idxs = self.store.resolve(req.pp.get("index"), kind="index_or_alias")
        out = {}
        for i in idxs:
            flat = dict(i.settings)
            flat["number_of_shards"] = i.num_shards
            flat["number_of_replicas"] = i.replicas
            flat["provided_name"] = i.name
            flat["uuid"] = i.uuid
            nested = {}
            for k, v in flat.items():
                d = nested
                parts = k.split(".")
                for part in parts[:-1]:
                    d = d.setdefault(part, {})
                d[parts[-1]] = v if isinstance(v, (list, dict)) else \
                    ("true" if v is True else "false" if v is False else str(v))
            out[i.name] = {"settings": {"index": nested}}
        return 200, out

    def h_indices_refresh(self, req):
        req.param("expand_wildcards")
        allow = req.bool_param("allow_no_indices", True)
        ignore = req.bool_param("ignore_unavailable")
        req.prepared()
        idxs = self.store.resolve(req.pp.get("index"), allow_no_indices=allow, ignore_unavailable=ignore)
        for i in idxs:
            i.refresh()
        total = sum((1 + i.replicas) * i.num_shards for i in idxs)
        return 200, {"_shards": {"total": total, "successful": sum(i.num_shards for i in idxs), "failed": 0}}

    # documents
    def h_index(self, req, create=False):
        name = req.pp["index"]
        doc_id = req.pp.get("id")
        op_type = req.param("op_type")
        if create:
            op_type = "create"
        elif op_type is None:
            op_type = "index"
        elif op_type not in ("index", "create"):
            raise EsError(400, "illegal_argument_exception", "opType must be 'create' or 'index', found: [%s]"
                          % op_type)
        if_seq_no, if_term, msgs = (None, None, []) if create else self.check_cas_params(req, "index")
        version, vt = self.version_params(req)
        policy = self.refresh_policy(req)
        req.param("routing")
        check_active_shards(req.param("wait_for_active_shards"))
        check_time("timeout", req.param("timeout"))
        pipeline = req.param("pipeline")
        req.bool_param("require_alias")
        if not req.body:
            raise EsError(400, "parse_exception", "request body is required")
        req.prepared()
        msgs += index_validation(op_type, doc_id, version, vt, if_seq_no, if_term)
        if msgs:
            raise st.validation_error(*msgs)
        if doc_id == "":
            raise EsError(400, "illegal_argument_exception", "if _id is specified it must not be empty")
        if pipeline not in (None, "_none"):
            raise EsError(400, "illegal_argument_exception", "pipeline with id [%s] does not exist" % pipeline)
        source, raw = self.doc_source_body(req, doc_id)
        idx = self.get_index_for_write(name, req)
        self.claim_type(idx, req.pp.get("type"))
        result, doc = self.store.write_index(idx, doc_id, source, op_type=op_type, if_seq_no=if_seq_no,
                                             if_primary_term=if_term, version=version, version_type=vt, raw=raw)
        forced = self.do_refresh(idx, policy)
        self.store.persist()
        status = 201 if result == "created" else 200
        body = self.write_body(req, idx, doc.id, result, doc.version, doc.seq_no, forced)
        headers = {}
        if status == 201:
            headers["Location"] = "/%s/%s/%s" % (java_urlencode(idx.name),
                                                 java_urlencode(self.doc_type(idx, req.pp.get("type"))),
                                                 java_urlencode(doc.id))
        return status, body, headers

    def h_create(self, req):
        return self.h_index(req, create=True)

    def h_get(self, req, head=False):
        name = req.pp["index"]
        doc_id = req.pp["id"]
        realtime = req.bool_param("realtime", True)
        if req.bool_param("refresh"):
            pass
        for p in ("stored_fields", "preference", "routing"):
            req.param(p)
        fetch, inc, exc = self.source_filter(req)
        if req.params.get("stored_fields") is not None and "_source" not in req.params \
                and "_source_includes" not in req.params and "_source_excludes" not in req.params:
            fetch = False  # asking for stored fields only drops _source, as Elasticsearch does
        version, vt = self.version_params(req)
        req.prepared()
        idx = self.store.indices.get(name)
        if idx is None:
            if head:
                return 404, None
            raise st.index_not_found(name)
        if req.params.get("refresh") in ("", "true"):
            idx.refresh()
        doc = self.store.get_doc(idx, doc_id, realtime)
        if doc is not None and version is not None and doc.version != version:
            raise idx.vce(doc_id, "current version [%d] is different than the one provided [%d]"
                          % (doc.version, version))
        if head:
            return (200 if doc is not None else 404), None
        body = self.meta(name, doc_id, self.doc_type(idx, req.pp.get("type")))
        if doc is None:
            body["found"] = False
            return 404, body
        body["_version"] = doc.version
        body["_seq_no"] = doc.seq_no
        body["_primary_term"] = doc.term
        body["found"] = True
        if fetch:
            body["_source"] = self.source_value(doc, inc, exc)
        return 200, body

    def h_exists(self, req):
        return self.h_get(req, head=True)

    def h_delete(self, req):
        name = req.pp["index"]
        doc_id = req.pp["id"]
        if_seq_no, if_term, msgs = self.check_cas_params(req, "delete")
        version, vt = self.version_params(req)
        policy = self.refresh_policy(req)
        req.param("routing")
        check_active_shards(req.param("wait_for_active_shards"))
        check_time("timeout", req.param("timeout"))
        req.prepared()
        msgs += cas_validation(version, vt, if_seq_no, if_term) + id_length(doc_id)
        if msgs:
            raise st.validation_error(*msgs)
        if vt in ("external", "external_gte"):
            idx = self.get_index_for_write(name)
        else:
            idx = self.store.indices.get(name)
            if idx is None:
                st.check_index_name(name)
                raise st.index_not_found(name)
        result, ver, seq = self.store.write_delete(idx, doc_id, if_seq_no, if_term, version, vt)
        forced = self.do_refresh(idx, policy)
        self.store.persist()
        return (200 if result == "deleted" else 404), self.write_body(req, idx, doc_id, result, ver, seq, forced)

    UPDATE_FIELDS = ["script", "scripted_upsert", "upsert", "doc", "doc_as_upsert", "detect_noop", "_source",
                     "if_seq_no", "if_primary_term"]

    def parse_update_body(self, body, text=None, lang_param=None, line=None):
        if not isinstance(body, dict):
            raise EsError(400, "x_content_parse_exception", "[1:1] [UpdateRequest] Expected START_OBJECT")
        req = {}
        for k, v in body.items():
            if k not in self.UPDATE_FIELDS:
                col = (text.find('"%s"' % k) + 1) if text else 1
                dym = did_you_mean(k, self.UPDATE_FIELDS).replace(" -> did you mean", " did you mean")
                raise EsError(400, "x_content_parse_exception",
                              "[1:%d] [UpdateRequest] unknown field [%s]%s" % (max(col, 1), k, dym))
            if k == "script":
                try:
                    req["script"] = self.parse_script(v, lang_param)
                except EsError as e:
                    if e.reason.startswith("[1:1] [UpdateRequest] failed to parse field [script]") and \
                            (e.caused_by or {}).get("reason") == "illegally specified <lang> for a stored script":
                        # found when the script object ends: the parser stands on its "}"
                        e.reason = "[1:%d]%s" % (value_end(text, "script"), e.reason[5:])
                        if e.root:
                            e.root = [dict(r, reason=e.reason) for r in e.root]
                    raise
            elif k in ("doc", "upsert"):
                if not isinstance(v, dict):
                    raise EsError(400, "x_content_parse_exception",
                                  "[1:1] [UpdateRequest] failed to parse field [%s]" % k,
                                  caused_by={"type": "not_x_content_exception",
                                             "reason": "Compressor detection can only be called on some xcontent "
                                                       "bytes or compressed xcontent bytes"})
                req[k] = v
            elif k in ("scripted_upsert", "doc_as_upsert", "detect_noop"):
                if not isinstance(v, bool) and v not in ("true", "false"):
                    raise EsError(400, "x_content_parse_exception",
                                  "[1:1] [UpdateRequest] failed to parse field [%s]" % k,
                                  caused_by={"type": "illegal_argument_exception",
                                             "reason": "Failed to parse value [%s] as only [true] or [false] are "
                                                       "allowed." % painless.to_str(v)})
                req[k] = v in (True, "true")
            elif k == "_source":
                req["_source"] = v
            elif k in ("if_seq_no", "if_primary_term"):
                try:
                    req[k] = int(v)
                except (TypeError, ValueError):
                    raise EsError(400, "x_content_parse_exception",
                                  "[1:1] [UpdateRequest] failed to parse field [%s]" % k,
                                  caused_by={"type": "number_format_exception", "reason": 'For input string: "%s"' % v})
        return req

    def validate_update(self, u, retry):
        """UpdateRequest.validate() after the CAS checks, in its order."""
        msgs = []
        if u.get("if_seq_no") is not None:
            if retry > 0:
                msgs.append("compare and write operations can not be retried")
            if u.get("doc_as_upsert"):
                msgs.append("compare and write operations can not be used with upsert")
            if u.get("upsert") is not None:
                msgs.append("upsert requests don't support `if_seq_no` and `if_primary_term`")
        if u.get("script") is None and u.get("doc") is None:
            msgs.append("script or doc is missing")
        if u.get("script") is not None and u.get("doc") is not None:
            msgs.append("can't provide both script and doc")
        if u.get("doc") is None and u.get("doc_as_upsert"):
            msgs.append("doc must be specified if doc_as_upsert is enabled")
        return msgs

    def do_update(self, idx, doc_id, u):
        try:
            return self.store.update(idx, doc_id, u, self.run_script)
        finally:
            pass

    def h_update(self, req):
        name = req.pp["index"]
        doc_id = req.pp["id"]
        if_seq_no, if_term, msgs = self.check_cas_params(req, "update")
        retry = req.int_param("retry_on_conflict", 0)
        policy = self.refresh_policy(req)
        lang = req.param("lang")
        fetch, inc, exc = self.source_filter(req)
        want_get = req.has("_source") or req.has("_source_includes") or req.has("_source_excludes")
        req.param("routing")
        check_active_shards(req.param("wait_for_active_shards"))
        check_time("timeout", req.param("timeout"))
        require_alias = req.bool_param("require_alias")
        if req.body:
            text = req.body.decode("utf-8", errors="replace")
            u = self.parse_update_body(self.json_body(req), text, lang)
        else:
            u = {}
        req.prepared()
        if require_alias:
            raise EsError(404, "index_not_found_exception",
                          "no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias"
                          % (name, name), {"index_uuid": "_na_", "index": name})
        if if_seq_no is not None:
            u["if_seq_no"], u["if_primary_term"] = if_seq_no, if_term
        u["retry_on_conflict"] = retry
        msgs += cas_validation(None, None, if_seq_no, if_term)
        msgs += self.validate_update(u, retry) + id_length(doc_id)
        if retry < 0:
            msgs.append("retry_on_conflict must be greater than or equal to 0")
        if msgs:
            raise st.validation_error(*msgs)
        if "_source" in u:
            want_get = True
            s = u["_source"]
            fetch = s is not False
            if isinstance(s, (list, str)) and not isinstance(s, bool):
                inc = [s] if isinstance(s, str) else s
        idx = self.get_index_for_write(name)
        self.claim_type(idx, req.pp.get("type"))
        u["_type"] = req.pp.get("type")
        result, doc, _ = self.do_update(idx, doc_id, u)
        forced = self.do_refresh(idx, policy) if result != "noop" else False
        if result != "noop":
            self.store.persist()
        return self.update_response(req, idx, doc_id, result, doc, forced, want_get and fetch, inc, exc)

    def update_response(self, req, idx, doc_id, result, doc, forced, want_get=False, inc=None, exc=None,
                        in_bulk=False):
        if result == "noop":
            # a bulk item reports the shard copies even for a noop
            shards = None if in_bulk else {"total": 0, "successful": 0, "failed": 0}
            if doc is None:
                body = self.write_body(req, idx, doc_id, "noop", -1, None, False, shards)
            else:
                body = self.write_body(req, idx, doc_id, "noop", doc.version, doc.seq_no, False, shards)
            status = 200
        else:
            body = self.write_body(req, idx, doc_id, result, doc.version, doc.seq_no, forced)
            status = 201 if result == "created" else 200
        if want_get and doc is not None and doc.source is not None:
            body["get"] = {"_seq_no": doc.seq_no, "_primary_term": 1, "found": True,
                           "_source": st.filter_source(doc.source, inc, exc)}
        headers = {}
        if status == 201:
            headers["Location"] = "/%s/%s/%s" % (java_urlencode(idx.name),
                                                 java_urlencode(self.doc_type(idx, req.pp.get("type"))),
                                                 java_urlencode(doc_id))
        return status, body, headers

    # bulk
    BULK_ACTION_PARAMS = {"_index", "_id", "routing", "if_seq_no", "if_primary_term", "retry_on_conflict",
                          "require_alias", "pipeline", "version", "version_type", "op_type", "_source",
                          "dynamic_templates", "require_data_stream", "list_executed_pipelines"}

    def h_bulk(self, req):
        started = time.monotonic()
        policy = self.refresh_policy(req)
        default_index = req.pp.get("index")
        for p in ("routing", "_source", "_source_includes", "_source_excludes", "type"):
            req.param(p)
        check_active_shards(req.param("wait_for_active_shards"))
        check_time("timeout", req.param("timeout"))
        pipeline = req.param("pipeline")
        default_require_alias = req.bool_param("require_alias")
        for p in ("require_data_stream", "list_executed_pipelines"):
            req.param(p)
        data = req.body or b""
        if not data:
            raise EsError(400, "parse_exception", "request body is required")
        if not data.endswith(b"\n"):
            raise EsError(400, "illegal_argument_exception", "The bulk request must be terminated by a newline [\\n]")
        lines = data.split(b"\n")[:-1]
        actions = []
        i = 0
        while i < len(lines):
            lineno = i + 1
            text = lines[i].decode("utf-8", errors="replace").rstrip("\r")
            i += 1
            if not text.strip():
                if lineno == len(lines) or True:
                    raise EsError(400, "illegal_argument_exception",
                                  "Malformed action/metadata line [%d], expected START_OBJECT or END_OBJECT but "
                                  "found [null]" % lineno)
            try:
                action = json.loads(text, object_pairs_hook=dup_check_hook)
            except ValueError as e:
                raise EsError(400, "x_content_parse_exception" if "Duplicate" not in str(e) else
                              "json_parse_exception", "[%d:1] Unexpected character: %s" % (lineno, e))
            if not isinstance(action, dict) or not action:
                raise EsError(400, "illegal_argument_exception",
                              "Malformed action/metadata line [%d], expected FIELD_NAME but found [END_OBJECT]"
                              % lineno)
            if len(action) != 1:
                raise EsError(400, "illegal_argument_exception",
                              "Malformed action/metadata line [%d], expected END_OBJECT but found [FIELD_NAME]"
                              % lineno)
            (op, meta), = action.items()
            if op not in ("index", "create", "update", "delete"):
                raise EsError(400, "illegal_argument_exception",
                              "Malformed action/metadata line [%d], expected one of [create, delete, index, "
                              "update] but found [%s]" % (lineno, op))
            if not isinstance(meta, dict):
                raise EsError(400, "illegal_argument_exception",
                              "Malformed action/metadata line [%d], expected START_OBJECT but found [%s]"
                              % (lineno, "VALUE_STRING" if isinstance(meta, str) else "VALUE_NUMBER"))
            for k, v in meta.items():
                if k == "_type" and self.types:
                    continue
                if k not in self.BULK_ACTION_PARAMS or (k == "op_type" and op != "index"):
                    raise EsError(400, "illegal_argument_exception",
                                  "Action/metadata line [%d] contains an unknown parameter [%s]" % (lineno, k))
                if isinstance(v, (dict, list)) and k not in ("_source", "dynamic_templates"):
                    raise EsError(400, "illegal_argument_exception",
                                  "Malformed action/metadata line [%d], expected a simple value for field [%s] "
                                  "but found [START_%s]" % (lineno, k, "OBJECT" if isinstance(v, dict) else "ARRAY"))
                if k == "version_type" and v not in ("internal", "external", "external_gte", "force"):
                    raise EsError(400, "illegal_argument_exception", "No version type match [%s]" % v)
                if k in ("if_seq_no", "if_primary_term", "version", "retry_on_conflict") and v is not None:
                    try:
                        meta[k] = int(v) if not isinstance(v, float) else int(v)
                        if isinstance(v, bool):
                            raise ValueError
                    except ValueError:
                        raise EsError(400, "number_format_exception", 'For input string: "%s"' % v)
            src_text = None
            if op != "delete":
                if i >= len(lines):
                    break  # Elasticsearch drops an action whose source line is missing
                src_text = lines[i].decode("utf-8", errors="replace").rstrip("\r")
                i += 1
            actions.append((lineno, op, meta, src_text))
        # update bodies are parsed up front (a bad one fails the whole request)
        parsed = []
        for lineno, op, meta, src_text in actions:
            u = None
            if op == "update":
                try:
                    ub = json.loads(src_text, object_pairs_hook=dup_check_hook)
                except ValueError as e:
                    raise EsError(400, "json_parse_exception", "Unexpected character: %s" % e)
                u = self.parse_update_body(ub, src_text)
            parsed.append((lineno, op, meta, src_text, u))
        req.prepared()
        if not actions:
            raise st.validation_error("no requests added")
        # BulkRequest.validate(): every item's own validate(), one 400 for all
        msgs = []
        for lineno, op, meta, src_text, u in parsed:
            msgs += self.bulk_item_validation(op, meta, u, default_index)
        if msgs:
            raise st.validation_error(*msgs)
        if pipeline not in (None, "_none"):
            raise EsError(400, "illegal_argument_exception", "pipeline with id [%s] does not exist" % pipeline)
        items = []
        errors = False
        touched = {}
        for lineno, op, meta, src_text, u in parsed:
            name = str(meta.get("_index") or default_index)
            doc_id = meta.get("_id")
            if doc_id is not None:
                doc_id = str(doc_id)
            report_op = "create" if (op == "index" and meta.get("op_type") == "create") else op
            try:
                item = self.bulk_item(req, name, doc_id, op, meta, src_text, u, default_require_alias, touched)
            except EsError as e:
                item = {"_index": name}
                if self.types:
                    item["_type"] = self.doc_type(self.store.indices.get(name), meta.get("_type") or req.pp.get("type"))
                item["_id"] = doc_id
                item["status"] = e.status
                item["error"] = e.inner()
                if not (op == "delete" and e.status == 404 and e.etype != "index_not_found_exception"):
                    errors = True
            items.append({report_op: item})
        forced = False
        for idx in touched.values():
            if policy:
                idx.refresh()
                forced = policy == "true"
        if forced:
            for it in items:
                for v in it.values():
                    if "result" in v and v.get("result") != "noop" and "error" not in v:
                        v_items = list(v.items())
                        v.clear()
                        for k, x in v_items:
                            if k == "_shards":
                                v["forced_refresh"] = True
                            v[k] = x
        self.store.persist()
        took = int((time.monotonic() - started) * 1000)
        return 200, {"took": took, "errors": errors, "items": items}

    def bulk_item_validation(self, op, meta, u, default_index):
        msgs = []
        if not (meta.get("_index") or default_index):
            msgs.append("index is missing")
        doc_id = meta.get("_id")
        doc_id = None if doc_id is None else str(doc_id)
        version = meta.get("version")
        vt = meta.get("version_type")
        if_seq_no = meta.get("if_seq_no")
        if_term = meta.get("if_primary_term")
        if op in ("index", "create"):
            op_type = "create" if op == "create" or meta.get("op_type") == "create" else "index"
            msgs += index_validation(op_type, doc_id, version, vt, if_seq_no, if_term)
        elif op == "delete":
            if not doc_id:
                msgs.append("id is missing")
            msgs += cas_validation(version, vt, if_seq_no, if_term) + id_length(doc_id)
        else:
            if not doc_id:
                msgs.append("id is missing")
            retry = meta.get("retry_on_conflict", 0) or 0
            if if_seq_no is not None:
                u["if_seq_no"], u["if_primary_term"] = if_seq_no, if_term
            u["retry_on_conflict"] = retry
            msgs += cas_validation(None, None, if_seq_no, if_term)
            msgs += self.validate_update(u, retry) + id_length(doc_id)
        return msgs

    def bulk_item(self, req, name, doc_id, op, meta, src_text, u, default_require_alias, touched):
        st.check_index_name(name)
        type_name = meta.get("_type") or req.pp.get("type")
        if doc_id == "" and op in ("index", "create"):
            raise EsError(400, "illegal_argument_exception", "if _id is specified it must not be empty")
        require_alias = meta.get("require_alias", default_require_alias)
        if require_alias in (True, "true") and op != "delete":
            raise EsError(404, "index_not_found_exception",
                          "no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias"
                          % (name, name), {"index_uuid": "_na_", "index": name})
        if meta.get("pipeline") not in (None, "_none"):
            raise EsError(400, "illegal_argument_exception", "pipeline with id [%s] does not exist"
                          % meta.get("pipeline"))
        if_seq_no = meta.get("if_seq_no")
        if_term = meta.get("if_primary_term")
        version = meta.get("version")
        vt = meta.get("version_type")
        sub = Request(req.method, req.raw_path, req.path, req.segs, {}, req.headers, None)
        sub.pp = {"type": type_name}
        if op == "delete":
            idx = self.store.indices.get(name)
            if idx is None:
                if vt in ("external", "external_gte"):
                    idx, _ = self.store.auto_create(name)
                else:
                    raise st.index_not_found(name)
            touched[name] = idx
            result, ver, seq = self.store.write_delete(idx, doc_id, if_seq_no, if_term, version, vt)
            body = self.write_body(sub, idx, doc_id, result, ver, seq)
            body["status"] = 200 if result == "deleted" else 404
            return body
        if op in ("index", "create"):
            op_type = "create" if op == "create" or meta.get("op_type") == "create" else "index"
            source, raw = self.parse_source(src_text, doc_id)
            idx, _ = self.store.auto_create(name)
            touched[name] = idx
            self.claim_type(idx, type_name)
            result, doc = self.store.write_index(idx, doc_id, source, op_type=op_type, if_seq_no=if_seq_no,
                                                 if_primary_term=if_term, version=version,
                                                 version_type=vt, raw=raw)
            body = self.write_body(sub, idx, doc.id, result, doc.version, doc.seq_no)
            body["status"] = 201 if result == "created" else 200
            return body
        # update
        idx, _ = self.store.auto_create(name)
        touched[name] = idx
        self.claim_type(idx, type_name)
        u["_type"] = type_name
        result, doc, _ = self.store.update(idx, doc_id, u, self.run_script)
        status, body, _h = self.update_response(sub, idx, doc_id, result, doc, False, in_bulk=True)
        body["status"] = status
        return body

    # mget
    def h_mget(self, req):
        default_index = req.pp.get("index")
        realtime = req.bool_param("realtime", True)
        refresh = req.bool_param("refresh")
        for p in ("stored_fields", "preference", "routing"):
            req.param(p)
        fetch, inc, exc = self.source_filter(req)
        for p in ("force_synthetic_source",):
            req.param(p)
        body = self.json_body(req)
        if body is None:
            req.prepared()
            raise st.validation_error("no documents to get")
        if not isinstance(body, dict):
            raise EsError(400, "parse_exception", "Failed to derive xcontent")
        specs = []
        for k, v in body.items():
            if k == "docs":
                if not isinstance(v, list):
                    raise EsError(400, "parsing_exception", "docs array element should include an object")
                for d in v:
                    if not isinstance(d, dict):
                        raise EsError(400, "parsing_exception", "docs array element should include an object")
                    for dk in d:
                        if dk not in ("_index", "_id", "_type", "routing", "_routing", "stored_fields", "_source",
                                      "version", "version_type") or (dk == "_type" and not self.types):
                            raise EsError(400, "parsing_exception",
                                          "Unknown key for a VALUE_STRING in [%s]." % dk if not isinstance(
                                              d[dk], (dict, list)) else "Unknown key for a START_OBJECT in [%s]." % dk)
                    specs.append(d)
            elif k == "ids":
                if not isinstance(v, list):
                    raise EsError(400, "parsing_exception", "ids array element should only contain ids")
                for x in v:
                    if not isinstance(x, (str, int)) or isinstance(x, bool):
                        raise EsError(400, "parsing_exception", "ids array element should only contain ids")
                    specs.append({"_id": str(x)})
            else:
                raise EsError(400, "parsing_exception",
                              "unknown parameter [%s] in request body or parameter is of the wrong type[%s] " % (
                                  k, "START_ARRAY" if isinstance(v, list) else "START_OBJECT" if isinstance(v, dict)
                                  else "VALUE_STRING"))
        req.prepared()
        msgs = []
        for n, d in enumerate(specs):
            if not (d.get("_index") or default_index):
                msgs.append("index is missing for doc %d" % n)
            if d.get("_id") in (None, ""):
                msgs.append("id is missing for doc %d" % n)
        if not specs:
            msgs.append("no documents to get")
        if msgs:
            raise st.validation_error(*msgs)
        docs = []
        for d in specs:
            name = str(d.get("_index") or default_index)
            doc_id = str(d["_id"])
            tname = d.get("_type", "_doc")
            idx = self.store.indices.get(name)
            if idx is None:
                item = self.meta(name, doc_id, tname)
                item["error"] = st.index_not_found(name).body()["error"]
                docs.append(item)
                continue
            if refresh:
                idx.refresh()
            doc = self.store.get_doc(idx, doc_id, realtime)
            item = self.meta(name, doc_id, tname)
            if doc is None:
                item["found"] = False
            else:
                item["_version"] = doc.version
                item["_seq_no"] = doc.seq_no
                item["_primary_term"] = doc.term
                item["found"] = True
                s = d.get("_source", None)
                f, i2, e2 = fetch, inc, exc
                if s is not None:
                    if s is False:
                        f = False
                    elif isinstance(s, list):
                        i2 = s
                    elif isinstance(s, str):
                        i2 = [s]
                    elif isinstance(s, dict):
                        i2 = _as_list(s.get("includes", s.get("include", [])))
                        e2 = _as_list(s.get("excludes", s.get("exclude", [])))
                if f:
                    item["_source"] = self.source_value(doc, i2, e2)
            docs.append(item)
        return 200, {"docs": docs}

    # search
    SEARCH_BODY_KEYS = {"query", "size", "from", "sort", "_source", "seq_no_primary_term", "version",
                        "track_total_hits", "timeout", "terminate_after", "stored_fields", "track_scores",
                        "min_score", "explain", "stats", "profile", "search_after", "post_filter"}
    SEARCH_UNSUPPORTED = {"aggs", "aggregations", "highlight", "indices_boost", "collapse", "pit",
                          "runtime_mappings", "fields", "script_fields", "suggest", "rescore", "slice", "ext",
                          "docvalue_fields", "knn", "rank", "sub_searches", "retriever"}

    def search_request(self, req, count=False):
        body = self.json_body(req) or {}
        if not isinstance(body, dict):
            raise EsError(400, "parsing_exception", "Expected [START_OBJECT] but found [%s]" % (
                "START_ARRAY" if isinstance(body, list) else "VALUE_STRING"))
        for k in body:
            if count:
                if k not in ("query",):
                    raise EsError(400, "parsing_exception", "request does not support [%s]" % k)
                continue
            if k in self.SEARCH_UNSUPPORTED:
                raise EsError(400, "illegal_argument_exception",
                              "[esemu] search option [%s] is not supported by the emulator" % k)
            if k not in self.SEARCH_BODY_KEYS:
                v = body[k]
                tok = "START_OBJECT" if isinstance(v, dict) else "START_ARRAY" if isinstance(v, list) else \
                    "VALUE_STRING" if isinstance(v, str) else "VALUE_NUMBER" if is_number(v) else "VALUE_BOOLEAN"
                raise EsError(400, "parsing_exception", "Unknown key for a %s in [%s]." % (tok, k),
                              {"line": 1, "col": 1 + (req.body.decode("utf-8", "replace").find('"%s"' % k) + 1)})
        q = req.param("q")
        query = body.get("query")
        if q is not None:
            query = st.lite_query(q)
        return body, query

    def h_search(self, req):
        started = time.monotonic()
        body, query = self.search_request(req)
        for p in ("analyzer", "analyze_wildcard", "ccs_minimize_roundtrips", "default_operator", "df", "explain",
                  "stored_fields", "docvalue_fields", "ignore_throttled", "expand_wildcards", "lenient",
                  "preference", "routing", "scroll", "search_type", "stats", "suggest_field", "suggest_mode",
                  "suggest_size", "suggest_text", "timeout", "track_scores", "allow_partial_search_results",
                  "typed_keys", "request_cache", "batched_reduce_size", "max_concurrent_shard_requests",
                  "pre_filter_shard_size", "min_compatible_shard_node", "terminate_after", "type"):
            req.param(p)
        if req.params.get("scroll") is not None:
            raise EsError(400, "illegal_argument_exception", "[esemu] scroll is not supported by the emulator")
        size = req.int_param("size", body.get("size", 10))
        from_ = req.int_param("from", body.get("from", 0))
        if not isinstance(size, int) or size < 0:
            raise EsError(400, "illegal_argument_exception", "[size] parameter cannot be negative, found [%s]" % size)
        if not isinstance(from_, int) or from_ < 0:
            raise EsError(400, "illegal_argument_exception", "[from] parameter cannot be negative but was [%s]" % from_)
        sqpt = req.bool_param("seq_no_primary_term", body.get("seq_no_primary_term", False) is True)
        version = req.bool_param("version", body.get("version", False) is True)
        rest_int = req.bool_param("rest_total_hits_as_int")
        tth = req.param("track_total_hits")
        if tth is None:
            tth = body.get("track_total_hits", True)
            if not isinstance(tth, (bool, int)):
                raise EsError(400, "x_content_parse_exception",
                              "[1:1] [track_total_hits] failed to parse field, expected a boolean or an integer")
        elif tth in ("", "true", "false"):
            tth = tth != "false"
        else:
            tth = req.int_param("track_total_hits")
        sort = body.get("sort")
        if req.param("sort"):
            sort = [s if ":" not in s else {s.split(":")[0]: s.split(":")[1]} for s in req.params["sort"].split(",")]
        fetch, inc, exc = self.source_filter(req)
        bs = body.get("_source")
        if bs is not None:
            if bs is False:
                fetch = False
            elif isinstance(bs, (list, str)):
                inc = _as_list(bs)
            elif isinstance(bs, dict):
                inc = _as_list(bs.get("includes", bs.get("include", [])))
                exc = _as_list(bs.get("excludes", bs.get("exclude", [])))
        self.store.check_query([], query)  # the query is parsed with the request
        req.prepared()
        idxs = self.store.resolve(req.pp.get("index"), ignore_unavailable=req.bool_param("ignore_unavailable"),
                                  allow_no_indices=req.bool_param("allow_no_indices", True))
        if from_ + size > 10000 and idxs:
            reason = ("Result window is too large, from + size must be less than or equal to: [10000] but was "
                      "[%d]. See the scroll api for a more efficient way to request large data sets. This limit "
                      "can be set by changing the [index.max_result_window] index level setting." % (from_ + size))
            raise st.shard_failure(idxs, {"type": "illegal_argument_exception", "reason": reason})
        self.store.check_query(idxs, query)
        if sort:
            self.check_sort(idxs, sort)
        hits = self.store.search(idxs, query)
        if body.get("post_filter") is not None:
            pf = {}
            for idx in idxs:
                pq = st.parse_query(body["post_filter"], st.QueryContext(idx, idx.searchable, self.flavor))
                pf[idx.name] = pq
            hits = [h for h in hits if pf[h[0].name].fn(h[1]) is not None]
        if body.get("min_score") is not None:
            if not is_number(body["min_score"]):
                raise EsError(400, "x_content_parse_exception", "[1:1] [min_score] failed to parse field")
            hits = [h for h in hits if h[2] >= float(body["min_score"])]
        sort_values = None
        if sort:
            hits, sort_values = self.sort_hits(hits, sort)
        else:
            hits = sorted(hits, key=lambda h: -h[2])
        total = len(hits)
        page = hits[from_:from_ + size]
        out_hits = []
        scored = not sort or any(self._sort_field(s)[0] == "_score" for s in _as_list(sort))
        for n, (idx, d, score) in enumerate(page):
            h = {"_index": idx.name}
            if self.types:
                h["_type"] = "_doc"
            h["_id"] = d.id
            if version:
                h["_version"] = d.version
            if sqpt:
                h["_seq_no"] = d.seq_no
                h["_primary_term"] = d.term
            h["_score"] = score if scored else None
            if fetch:
                h["_source"] = self.source_value(d, inc, exc)
            if sort_values is not None:
                h["sort"] = sort_values[from_ + n]
            out_hits.append(h)
        max_score = max((h[2] for h in hits), default=None) if scored else None
        if tth is False:
            total_obj = None
        elif rest_int:
            total_obj = total
        else:
            limit = 10000 if tth is True else tth
            total_obj = {"value": min(total, limit), "relation": "eq" if total <= limit else "gte"}
        hits_obj = {}
        if total_obj is not None:
            hits_obj["total"] = total_obj
        hits_obj["max_score"] = max_score if size > 0 else None
        hits_obj["hits"] = out_hits
        n = sum(i.num_shards for i in idxs)
        return 200, {"took": int((time.monotonic() - started) * 1000), "timed_out": False,
                     "_shards": {"total": n, "successful": n, "skipped": 0, "failed": 0}, "hits": hits_obj}

    def _sort_field(self, s):
        if isinstance(s, str):
            return s, ("desc" if s == "_score" else "asc")
        if isinstance(s, dict) and len(s) == 1:
            (f, o), = s.items()
            if isinstance(o, str):
                return f, o
            if isinstance(o, dict):
                return f, o.get("order", "desc" if f == "_score" else "asc")
        raise EsError(400, "parsing_exception", "malformed sort format, within the sort array, an object, or an "
                                                "actual string are allowed")

    def check_sort(self, idxs, sort):
        keys = [self._sort_field(s) for s in _as_list(sort)]
        for f, o in keys:
            if o not in ("asc", "desc"):
                raise EsError(400, "illegal_argument_exception", "Unknown SortOrder [%s]" % o)
        for idx in idxs:
            for s, (f, o) in zip(_as_list(sort), keys):
                if f in ("_score", "_doc") or (f == "_id" and self.flavor != "es7"):
                    continue
                spec, parts = st.field_spec(idx.mappings, f)
                unmapped = isinstance(s, dict) and isinstance(s.get(f), dict) and "unmapped_type" in s[f]
                if spec is None and not unmapped:
                    raise st.shard_failure(idxs, {"type": "query_shard_exception",
                                                  "reason": "No mapping found for [%s] in order to sort on" % f,
                                                  "index_uuid": idx.uuid, "index": idx.name})
                if spec is not None and spec.get("type") in ("text", "match_only_text") \
                        and not spec.get("fielddata"):
                    raise st.shard_failure(idxs, {
                        "type": "illegal_argument_exception",
                        "reason": "Text fields are not optimised for operations that require per-document field "
                                  "data like aggregations and sorting, so these operations are disabled by default. "
                                  "Please use a keyword field instead. Alternatively, set fielddata=true on [%s] in "
                                  "order to load field data by uninverting the inverted index. Note that this can "
                                  "use significant memory." % f})

    def sort_hits(self, hits, sort):
        keys = [self._sort_field(s) for s in _as_list(sort)]
        rows = []
        for h in hits:
            idx, d, score = h
            vals = []
            for f, o in keys:
                if f == "_score":
                    vals.append(score)
                elif f == "_doc":
                    vals.append(d.seq_no)
                elif f == "_id" and self.flavor != "es7":
                    vals.append(d.id)
                else:
                    spec, parts = st.field_spec(idx.mappings, f)
                    terms = st.indexed_terms(spec, st.field_values(d, parts)) if spec is not None else []
                    if not terms:
                        vals.append(None)
                    else:
                        vals.append(min(terms) if o == "asc" else max(terms))
            rows.append((h, vals))

        import functools

        def cmp(a, b):
            for (f, o), x, y in zip(keys, a[1], b[1]):
                if x == y:
                    continue
                if x is None:
                    return 1
                if y is None:
                    return -1
                r = -1 if x < y else 1
                return r if o == "asc" else -r
            return a[0][1].seq_no - b[0][1].seq_no
        rows.sort(key=functools.cmp_to_key(cmp))
        out_vals = []
        for h, vals in rows:
            sv = []
            for (f, o), v in zip(keys, vals):
                if v is None:
                    sv.append(9223372036854775807 if o == "asc" else -9223372036854775808)
                elif isinstance(v, bool):
                    sv.append(1 if v else 0)
                else:
                    sv.append(v)
            out_vals.append(sv)
        return [r[0] for r in rows], out_vals

def java_urlencode(s):
    """java.net.URLEncoder.encode(s, "UTF-8") (used for the Location header)."""
    return urllib.parse.quote_plus(s, safe="*").replace("~", "%7E")


def cas_validation(version, vt, if_seq_no, if_term):
    """DocWriteRequest.validateSeqNoBasedCASParams, in its order."""
    vt = vt or "internal"
    msgs = []
    if vt in ("external", "external_gte") and (version is None or version < 0):
        msgs.append("illegal version value [%d] for version type [%s]" % (
            -3 if version is None else version, vt.upper()))
    if vt == "internal" and version is not None:
        msgs.append("internal versioning can not be used for optimistic concurrency control. "
                    "Please use `if_seq_no` and `if_primary_term` instead")
    if if_seq_no is not None and (vt != "internal" or version is not None):
        msgs.append("compare and write operations can not use versioning")
    if if_seq_no is not None and not if_term:
        msgs.append("ifSeqNo is set, but primary term is [0]")
    if if_term and if_seq_no is None:
        msgs.append("ifSeqNo is unassigned, but primary term is [%d]" % if_term)
    return msgs


def id_length(doc_id):
    """DocWriteRequest.validateDocIdLength as a list of messages."""
    if doc_id is None:
        return []
    n = len(doc_id.encode("utf-8"))
    if n > st.MAX_ID_BYTES:
        return ["id [%s] is too long, must be no longer than 512 bytes but was: %d" % (doc_id, n)]
    return []


def index_validation(op_type, doc_id, version, vt, if_seq_no, if_term):
    """IndexRequest.validate(): the create checks return early."""
    vt = vt or "internal"
    if op_type == "create":
        if vt != "internal":
            return ["create operations only support internal versioning. use index instead"]
        if version is not None:
            return ["create operations do not support explicit versions. use index instead"]
        if if_seq_no is not None or if_term:
            return ["create operations do not support compare and set. use index instead"]
    msgs = []
    if doc_id is None and (vt != "internal" or version is not None):
        msgs.append("an id must be provided if version type or value are set")
    return msgs + cas_validation(version, vt, if_seq_no, if_term) + id_length(doc_id)


def _as_list(v):
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_time(name, v):
    """TimeValue.parseTimeValue's refusals for the parameter NAME."""
    if v is None:
        return
    t = v.strip().lower()
    if t in ("0", "-1"):
        return
    m = re.match(r"^(-?\d+)(nanos|micros|ms|s|m|h|d)$", t)
    if not m:
        raise EsError(400, "illegal_argument_exception",
                      "failed to parse setting [%s] with value [%s] as a time value: unit is missing "
                      "or unrecognized" % (name, v))
    if int(m.group(1)) < 0:
        raise EsError(400, "illegal_argument_exception",
                      "failed to parse setting [%s] with value [%s] as a time value: negative durations "
                      "are not supported" % (name, v))


def check_active_shards(v):
    """ActiveShardCount.parseString's refusals."""
    if v is None or v in ("all", "default"):
        return
    try:
        n = int(v)
    except ValueError:
        raise EsError(400, "illegal_argument_exception", "cannot parse ActiveShardCount[%s]" % v,
                      caused_by={"type": "number_format_exception",
                                 "reason": 'For input string: "%s"' % v})
    if n < 0:
        raise EsError(400, "illegal_argument_exception", "shard count cannot be a negative value")


def parse_time(v, default):
    if v is None:
        return default
    m = re.match(r"^(\d+)(nanos|micros|ms|s|m|h|d)$", v)
    if not m:
        if v == "-1":
            return default
        raise EsError(400, "parse_exception",
                      "failed to parse setting [timeout] with value [%s] as a time value: unit is missing or "
                      "unrecognized" % v)
    n = int(m.group(1))
    return n * {"nanos": 1e-9, "micros": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def validation_source_missing():
    return st.validation_error("source is missing", "content type is missing")


def value_end(text, key):
    """The 1-based column of the last character of the value of top-level
    member KEY in the one-line JSON TEXT (1 when it cannot be told)."""
    if not text:
        return 1
    dec = json.JSONDecoder()
    i = text.find('"%s"' % key)
    while i >= 0:
        j = text.find(":", i + len(key) + 2)
        k = j + 1
        while 0 < k < len(text) and text[k] in " \t\r\n":
            k += 1
        try:
            _, end = dec.raw_decode(text, k)
            return end
        except ValueError:
            i = text.find('"%s"' % key, i + 1)
    return 1


class StoredRef(object):
    """The id of a stored script, in place of a source until it runs."""
    __slots__ = ("id",)

    def __init__(self, sid):
        self.id = sid


def script_error(src, reason, stack, pos, exc_type, message, name=None):
    if name is not None:  # a stored script is quoted by its id
        src = name
    elif len(src) > 256:  # the engine quotes a long script cut at 256 characters
        src = src[:256] + " ..."
    se = {"type": "script_exception", "reason": reason, "script_stack": stack, "script": src, "lang": "painless"}
    if pos is not None:
        se["position"] = pos
    cause = dict(se)
    cause["caused_by"] = {"type": exc_type, "reason": message}
    # UpdateHelper wraps the ScriptException in IllegalArgumentException("failed to
    # execute script"); that is not an ElasticsearchException, so guessRootCauses()
    # reports the wrapper itself as the root cause (as 7.17 answers show)
    return EsError(400, "illegal_argument_exception", "failed to execute script", caused_by=cause)


# --------------------------------------------------------------------------
# HTTP layer

MEDIA_JSON = re.compile(r"^application/(json|x-ndjson|vnd\.elasticsearch\+(json|x-ndjson);\s*compatible-with=(\d+))"
                        r"\s*(;\s*charset=utf-8)?\s*$", re.I)


def media_compat(value):
    m = MEDIA_JSON.match(value.strip()) if value else None
    if not m:
        return None, None
    return m.group(1).lower(), (int(m.group(3)) if m.group(3) else None)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "esemu"
    sys_version = ""

    def log_message(self, fmt, *args):
        if self.server.emu.args.verbose:
            sys.stderr.write("esemu: %s - %s\n" % (self.address_string(), fmt % args))

    def version_string(self):
        return ""

    def send_header(self, keyword, value):
        if keyword.lower() in ("server", "date"):
            return
        BaseHTTPRequestHandler.send_header(self, keyword, value)

    def handle_one_request(self):
        try:
            BaseHTTPRequestHandler.handle_one_request(self)
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError, ValueError):
            self.close_connection = True

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = do_GET

    # -------------------------------------------------------------- body
    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("eof in chunked body")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def decode_body(self, body):
        """Netty's HttpContentDecompressor: gzip/deflate request bodies."""
        enc = (self.headers.get("Content-Encoding") or "").strip().lower()
        if not body or enc in ("", "identity"):
            return body
        import zlib
        if enc in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if enc == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
        raise ValueError("unsupported Content-Encoding " + enc)

    # -------------------------------------------------------------- send
    def send(self, status, body, headers=None, ctype=None):
        emu = self.server.emu
        req = getattr(self, "_req", None)
        if ctype is None:
            ctype = self.answer_type()
        if body is None:
            data = b""
        elif isinstance(body, bytes):
            data = body
        else:
            if req is not None and req.params.get("filter_path"):
                body = apply_filter_path(body, req.params["filter_path"].split(","))
            out = []
            if req is not None and req.params.get("pretty") in ("", "true"):
                render_pretty(body, out)
                out.append("\n")
            else:
                render_compact(body, out)
            data = "".join(out).encode("utf-8")
        self.send_response(status)
        if emu.fl["product"]:
            self.send_header("X-Elastic-Product", "Elasticsearch")
        opaque = self.headers.get("X-Opaque-Id")
        if opaque is not None:
            self.send_header("X-Opaque-Id", opaque)
        for k, v in (headers or {}).items():
            if isinstance(v, list):
                for x in v:
                    self.send_header(k, x)
            else:
                self.send_header(k, v)
        if self.command == "HEAD":
            if status == 200 and body is None:
                ctype = "text/plain; charset=UTF-8"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", "0" if body is None else str(len(data)))
            self.end_headers()
            return
        self.send_header("Content-Type", ctype)
        # http.compression defaults to true without TLS: gzip when the client accepts it
        accept_enc = (self.headers.get("Accept-Encoding") or "").lower()
        if data and self.server.ssl_ctx is None and "gzip" in accept_enc and "gzip;q=0" not in \
                accept_enc.replace(" ", ""):
            import gzip
            data = gzip.compress(data)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def answer_type(self):
        """Elasticsearch 8 answers ``application/json`` (or the compatible
        media type that was asked for); 7.x and OpenSearch add the charset."""
        emu = self.server.emu
        if emu.flavor == "es8":
            _, compat = media_compat((self.headers.get("Accept") or "").split(",")[0])
            if compat is not None:
                return "application/vnd.elasticsearch+json;compatible-with=%d" % compat
            return "application/json"
        return "application/json; charset=UTF-8"

    def send_error_obj(self, e):
        self.send(e.status, e.body(), e.headers)

    def reset_connection(self):
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        for f in (self.rfile, self.wfile):
            try:
                f.close()
            except Exception:
                pass
        try:
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    # -------------------------------------------------------------- main
    def dispatch(self):
        emu = self.server.emu
        self._req = None
        try:
            body = self.read_body()
        except (ValueError, ConnectionError):
            self.close_connection = True
            return
        try:
            body = self.decode_body(body)
        except Exception:
            self._req = None
            return self.send(400, {"error": "request body could not be decompressed", "status": 400})
        raw_path = self.path
        if raw_path.startswith("http://") or raw_path.startswith("https://"):
            raw_path = "/" + raw_path.split("/", 3)[3] if raw_path.count("/") >= 3 else "/"
        path, _, query = raw_path.partition("?")
        if path == "/_esemu" or path.startswith("/_esemu/"):
            return self.admin(path, body)
        ctl = emu.control
        mode = ctl.wait_unpaused(self.headers.get("X-Opaque-Id"))
        if mode == "reset":
            return self.reset_connection()
        if ctl.latency_ms:
            time.sleep(ctl.latency_ms / 1000.0)
        try:
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        except ValueError:
            params = {}
        try:
            segs = [urllib.parse.unquote(s, errors="strict") for s in path.split("/")[1:] if s != ""]
        except UnicodeDecodeError:
            segs = None
        req = Request(self.command, raw_path, path, segs, params, self.headers, body)
        self._req = req
        if segs is None:
            ctl.count("unknown")
            self._req = Request(self.command, raw_path, path, [], {}, self.headers, body)
            return self.send_error_obj(EsError(400, "illegal_argument_exception",
                                               "unable to decode the path of [%s] as UTF-8" % path))
        api, pp, allowed = self.route(segs)
        ctl.count(STATS_NAMES.get(api, api) if api else "unknown")
        fail = ctl.next_failure()
        if fail == "reset":
            return self.reset_connection()
        try:
            if fail == "503":
                raise unavailable()
            if fail == "429":
                raise rejection(emu.flavor)
            self.handle_api(req, api, pp, allowed)
        except EsError as e:
            self.send_error_obj(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            # a value of the wrong type somewhere in the request: Elasticsearch's
            # parsers answer 400 for those, so do we (with a tell-tale reason)
            if emu.args.verbose:
                import traceback
                traceback.print_exc()
            self.send_error_obj(EsError(400, "illegal_argument_exception",
                                        "[esemu] malformed request value: %s" % (e,)))
        except Exception as e:  # an emulator bug: answer like an unexpected server error
            import traceback
            traceback.print_exc()
            self.send_error_obj(EsError(500, "exception", "[esemu] internal error: %r" % (e,)))

    def route(self, segs):
        """Like RestController over its path trie: every pattern matching the
        path is a candidate (literal segments preferred); the first that has
        the method wins, otherwise the union of their methods is "allowed"."""
        emu = self.server.emu
        routes = ROUTES + (TYPED_ROUTES if emu.types else [])
        matches = []
        for pattern, methods in routes:
            if len(pattern) != len(segs):
                continue
            pp = {}
            ok = True
            for p, s in zip(pattern, segs):
                if p.startswith("{"):
                    if p == "{type}" and s.startswith("_") and s != "_doc":
                        ok = False
                        break
                    pp[p[1:-1]] = s
                elif p != s:
                    ok = False
                    break
            if ok:
                key = tuple(0 if p.startswith("{") else 1 for p in pattern)
                matches.append((key, methods, pp))
        if not matches:
            return None, {}, None
        matches.sort(key=lambda m: m[0], reverse=True)
        for _, methods, pp in matches:
            api = methods.get(self.command)
            if api is not None:
                return api, pp, methods
        allowed = set()
        for _, methods, _pp in matches:
            allowed.update(methods)
        return None, matches[0][2], allowed

    def authenticate(self, req):
        emu = self.server.emu
        if not emu.user and not emu.api_key:
            return
        auth = self.headers.get("Authorization")
        uri = req.raw_path
        os_flavor = emu.flavor.startswith("opensearch")
        if os_flavor:
            ok = False
            if auth and auth.startswith("Basic ") and emu.user:
                try:
                    u, _, p = base64.b64decode(auth[6:].strip()).decode("utf-8").partition(":")
                    ok = u == emu.user and p == emu.password
                except (binascii.Error, UnicodeDecodeError):
                    ok = False
            if not ok:
                raise OsUnauthorized()
            return
        www = ['Basic realm="security" charset="UTF-8"', "ApiKey"]
        hdr = {"WWW-Authenticate": www}
        if not auth:
            reason = "missing authentication credentials for REST request [%s]" % uri
            raise EsError(401, "security_exception", reason, {"header": {"WWW-Authenticate": www}}, headers=hdr)
        scheme, _, cred = auth.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic" and emu.user:
            try:
                u, _, p = base64.b64decode(cred.strip(), validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                u, p = None, None
            if u == emu.user and p == emu.password:
                return
            if u is None:
                reason = "missing authentication credentials for REST request [%s]" % uri
            else:
                reason = "unable to authenticate user [%s] for REST request [%s]" % (u, uri)
            raise EsError(401, "security_exception", reason, {"header": {"WWW-Authenticate": www}}, headers=hdr)
        if scheme == "apikey" and emu.api_key:
            try:
                decoded = base64.b64decode(cred.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                decoded = None
            if decoded == emu.api_key:
                return
            reason = "unable to authenticate with provided credentials and anonymous access is not allowed for " \
                     "this request"
            raise EsError(401, "security_exception", reason,
                          {"additional_unsuccessful_credentials": "API key: invalid credentials for API key [%s]"
                           % ((decoded or "").partition(":")[0]), "header": {"WWW-Authenticate": www}},
                          headers=hdr)
        if scheme in ("basic", "apikey", "bearer"):
            reason = "unable to authenticate with provided credentials and anonymous access is not allowed for " \
                     "this request" if scheme != "basic" else \
                "missing authentication credentials for REST request [%s]" % uri
            raise EsError(401, "security_exception", reason, {"header": {"WWW-Authenticate": www}}, headers=hdr)
        reason = "missing authentication credentials for REST request [%s]" % uri
        raise EsError(401, "security_exception", reason, {"header": {"WWW-Authenticate": www}}, headers=hdr)

    def check_content_type(self, req):
        emu = self.server.emu
        ct = self.headers.get("Content-Type")
        accept = self.headers.get("Accept")
        ct_kind, ct_compat = media_compat(ct) if ct else (None, None)
        acc_compat = None
        if accept:
            ak, acc_compat = media_compat(accept.split(",")[0])
        if req.body:
            if ct is None:
                raise PlainError(406, "Content-Type header is missing")
            if ct_kind is None:
                raise PlainError(406, "Content-Type header [%s] is not supported" % ct)
        major = 8 if emu.flavor == "es8" else 7
        for c in (ct_compat if req.body else None, acc_compat):
            if c is not None and (emu.flavor.startswith("opensearch") or c not in (major, major - 1) or
                                  (major == 7 and c != 7)):
                if c is ct_compat:
                    raise PlainError(406, "Content-Type header [%s] is not supported" % ct)
                raise PlainError(406, "Accept header [%s] is not supported" % accept)
        if emu.flavor == "es8" and ((ct_compat if req.body else None) is not None or acc_compat is not None):
            a = acc_compat
            c = ct_compat if req.body else a
            if a != c or (req.body and (ct_compat is None) != (acc_compat is None)):
                raise EsError(400, "media_type_header_exception", "Invalid media-type value on headers [Accept, "
                                                                  "Content-Type]",
                              caused_by={"type": "status_exception",
                                         "reason": "A compatible version is required on both Content-Type and Accept "
                                                   "headers if either one has requested a compatible version and the "
                                                   "compatible versions must match. Accept=%s, Content-Type=%s"
                                                   % (accept, ct)})

    def handle_api(self, req, api, pp, allowed):
        emu = self.server.emu
        if emu.flavor == "es8":
            self.authenticate(req)
        if allowed is None:
            raise PlainError(400, "no handler found for uri [%s] and method [%s]" % (req.raw_path, req.method))
        if api is None:
            ms = sorted(allowed)
            if self.command == "OPTIONS":
                raise PlainOk(ms)
            raise PlainError(405, "Incorrect HTTP method for uri [%s] and method [%s], allowed: [%s]"
                             % (req.raw_path, req.method, ", ".join(ms)), {"Allow": ",".join(ms)})
        # 7.x and OpenSearch check the Content-Type before the security filter
        # that wraps each handler; 8.x authenticates as the request arrives
        if emu.flavor != "es8":
            if req.body or "source" not in req.params:
                self.check_content_type(req)
            self.authenticate(req)
        req.api = api
        req.pp = pp
        # query-string body (source + source_content_type)
        if not req.body and "source" in req.params:
            if "source_content_type" not in req.params:
                raise EsError(400, "illegal_argument_exception",
                              "source and source_content_type parameters are required")
            req.body = req.params["source"].encode("utf-8")
            self.headers.replace_header("Content-Type", req.params["source_content_type"]) \
                if "Content-Type" in self.headers else self.headers.add_header(
                "Content-Type", req.params["source_content_type"])
        self.check_content_type(req)
        fmt = req.params.get("format")
        if fmt is not None and fmt.lower() != "json":
            raise EsError(400, "illegal_argument_exception",
                          "[esemu] response format [%s] is not supported by the emulator (only json)" % fmt)
        allowed_params = set(API_PARAMS.get(api, set())) | GLOBAL_PARAMS
        if emu.types:
            allowed_params |= ES7_EXTRA_PARAMS.get(api, set())
        if emu.flavor == "es8":
            allowed_params |= ES8_EXTRA_PARAMS.get(api, set())
        candidates = sorted(allowed_params - {"source", "source_content_type"})

        def check():
            unknown = sorted(k for k in req.params if k not in allowed_params)
            if unknown:
                parts = []
                for k in unknown:
                    parts.append("[%s]%s" % (k, did_you_mean(k, candidates)))
                reason = "request [%s] contains unrecognized parameter%s: %s" % (
                    req.path, "s" if len(unknown) > 1 else "", ", ".join(parts))
                raise EsError(400, "illegal_argument_exception", reason)
            if req.body and api not in BODY_APIS:
                raise EsError(400, "illegal_argument_exception", "request [%s %s] does not support having a body"
                              % (req.method, req.path))
        req._check = check
        handler = getattr(emu, "h_" + api.replace(".", "_"))
        res = handler(req)
        req.prepared()
        if len(res) == 2:
            status, body = res
            headers = {}
        else:
            status, body, headers = res
        if "type" in pp and emu.types:
            headers = dict(headers)
            headers["Warning"] = ('299 Elasticsearch-%s-%s "[types removal] Specifying types in document %s '
                                  'requests is deprecated, use the typed endpoints instead."'
                                  % (emu.fl["number"], emu.fl["hash"], api))
        self.send(status, body, headers)

    # -------------------------------------------------------------- admin
    def admin(self, path, body):
        emu = self.server.emu
        ctl = emu.control
        cmd = path[len("/_esemu/"):] if path.startswith("/_esemu/") else ""
        try:
            data = json.loads(body.decode("utf-8")) if body else {}
        except ValueError:
            return self.send_admin(400, {"error": "invalid JSON body"})
        m = self.command
        if cmd == "stats" and m == "GET":
            with ctl.lock:
                return self.send_admin(200, {"requests": dict(ctl.stats), "total": ctl.total})
        if cmd == "reset_stats" and m == "POST":
            with ctl.lock:
                ctl.stats.clear()
                ctl.total = 0
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "reset" and m == "POST":
            emu.store.reset()
            with ctl.lock:
                ctl.stats.clear()
                ctl.total = 0
                ctl.fail_queue = []
                ctl.blocks.clear()
                ctl.paused = False
                ctl.latency_ms = 0
                ctl.forbid = set()
                ctl.forbid_status = 403
                ctl.data_nodes = 1
                ctl.lock.notify_all()
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "pause" and m == "POST":
            with ctl.lock:
                ctl.paused = True
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "resume" and m == "POST":
            with ctl.lock:
                ctl.paused = False
                ctl.lock.notify_all()
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "fail" and m == "POST":
            kind = str(data.get("kind", "503"))
            count = int(data.get("count", 1))
            if kind not in ("503", "429", "reset"):
                return self.send_admin(400, {"error": "kind must be 503, 429 or reset"})
            with ctl.lock:
                ctl.fail_queue = [kind] * max(0, count)
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "forbid" and m == "POST":
            apis = data.get("apis", [])
            known = {"put_script", "get_script", "delete_script"}
            if not isinstance(apis, list) or not set(apis) <= known:
                return self.send_admin(400, {"error": "apis: a list of " + ", ".join(sorted(known))})
            status = data.get("status", 403)
            if status not in (403, 503):
                return self.send_admin(400, {"error": "status: 403 or 503"})
            with ctl.lock:
                ctl.forbid = set(apis)
                ctl.forbid_status = status
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "nodes" and m == "POST":
            n = data.get("data_nodes")
            if not isinstance(n, int) or n < 1:
                return self.send_admin(400, {"error": "data_nodes: a count of 1 or more"})
            with ctl.lock:
                ctl.data_nodes = n
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "latency" and m == "POST":
            with ctl.lock:
                ctl.latency_ms = max(0, int(data.get("ms", 0)))
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "fail_rate" and m == "POST":
            with ctl.lock:
                ctl.fail_rate = float(data.get("rate", 0))
                if "seed" in data:
                    ctl.rng = random.Random(data["seed"])
            return self.send_admin(200, {"acknowledged": True})
        if cmd == "block" and m == "POST":
            oid = data.get("opaque_id")
            mode = data.get("mode", "none")
            if not isinstance(oid, str) or mode not in ("reset", "hang", "none"):
                return self.send_admin(400, {"error": "need opaque_id and mode reset|hang|none"})
            with ctl.lock:
                if mode == "none":
                    ctl.blocks.pop(oid, None)
                else:
                    ctl.blocks[oid] = mode
                ctl.lock.notify_all()
            return self.send_admin(200, {"acknowledged": True})
        if cmd.startswith("docs/") and m == "GET":
            name = urllib.parse.unquote(cmd[5:])
            idx = emu.store.indices.get(name)
            if idx is None:
                return self.send_admin(404, {"error": "no such index [%s]" % name})
            with idx.lock:
                docs = {d.id: {"_source": d.source, "_seq_no": d.seq_no, "_primary_term": d.term,
                               "_version": d.version} for d in idx.docs.values()}
            return self.send_admin(200, {"index": name, "count": len(docs), "docs": docs})
        if cmd == "state" and m == "GET":
            with ctl.lock:
                return self.send_admin(200, {"paused": ctl.paused, "latency_ms": ctl.latency_ms,
                                             "pending_failures": list(ctl.fail_queue),
                                             "blocks": dict(ctl.blocks), "flavor": emu.flavor,
                                             "forbid": sorted(ctl.forbid)})
        return self.send_admin(404, {"error": "unknown admin endpoint [%s %s]" % (m, path)})

    def send_admin(self, status, obj):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class PlainError(EsError):
    """Errors Elasticsearch renders as {"error": "<text>", "status": N}."""

    def __init__(self, status, text, headers=None):
        EsError.__init__(self, status, "", text, headers=headers)

    def body(self):
        return {"error": self.reason, "status": self.status}


class PlainOk(EsError):
    def __init__(self, methods):
        EsError.__init__(self, 200, "", "", headers={"Allow": ",".join(methods)})

    def body(self):
        return None


class OsUnauthorized(EsError):
    def __init__(self):
        EsError.__init__(self, 401, "", "Unauthorized",
                         headers={"WWW-Authenticate": 'Basic realm="OpenSearch Security"'})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, addr, handler, emu, ssl_ctx=None):
        self.emu = emu
        self.ssl_ctx = ssl_ctx
        ThreadingHTTPServer.__init__(self, addr, handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_ctx is not None:
            sock.settimeout(10)
            try:
                sock = self.ssl_ctx.wrap_socket(sock, server_side=True)
            except (ssl.SSLError, OSError):
                try:
                    sock.close()
                except OSError:
                    pass
                raise OSError("TLS handshake failed")
            sock.settimeout(None)
        return sock, addr

    def handle_error(self, request, client_address):
        if self.emu.args.verbose:
            ThreadingHTTPServer.handle_error(self, request, client_address)


# OpenSearch 401 is text/plain "Unauthorized"
_orig_send_error_obj = Handler.send_error_obj


def _send_error_obj(self, e):
    if isinstance(e, OsUnauthorized):
        return self.send(401, b"Unauthorized", e.headers, ctype="text/plain; charset=UTF-8")
    if isinstance(e, PlainOk):
        return self.send(200, None, e.headers)
    return _orig_send_error_obj(self, e)


Handler.send_error_obj = _send_error_obj


def write_port_file(path, port):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def build_parser():
    p = argparse.ArgumentParser(
        prog="esemu.py",
        description="esemu is a TEST DOUBLE: an Elasticsearch-compatible emulator for tests. It is not "
                    "Elasticsearch and must never hold real data. It answers the document, index, bulk, "
                    "search and update (Painless subset) APIs with Elasticsearch's status codes and error "
                    "bodies, and has an admin API under /_esemu/ for counters, pauses and fault injection.")
    p.add_argument("--port", type=int, default=9200, help="TCP port (0 = any free port)")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; tests with network namespaces "
                        "use a bridge address they created)")
    p.add_argument("--port-file", help="write the bound port to this file once listening")
    p.add_argument("--data", help="persist state to this JSON file (every acknowledged write is synced "
                                  "before it is answered) and restore it at start")
    p.add_argument("--flavor", choices=sorted(FLAVORS), default="es8", help="which server to imitate")
    p.add_argument("--user", help="require HTTP Basic authentication with this user")
    p.add_argument("--password-file", help="file holding the password for --user")
    p.add_argument("--api-key-file", help="file holding 'id:key'; accept 'Authorization: ApiKey base64(id:key)'")
    p.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    p.add_argument("--tls-key", help="PEM private key for --tls-cert")
    p.add_argument("--latency-ms", type=int, default=0, help="delay every non-admin request")
    p.add_argument("--fail-rate", type=float, default=0.0,
                   help="probability that a non-admin request fails (503, 429 or connection reset)")
    p.add_argument("--seed", type=int, default=None, help="random seed for --fail-rate")
    p.add_argument("--verbose", action="store_true", help="log requests to stderr")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.user and not args.password_file:
        build_parser().error("--user needs --password-file")
    if bool(args.tls_cert) != bool(args.tls_key):
        build_parser().error("--tls-cert and --tls-key go together")
    emu = Emulator(args)
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    server = Server((args.bind, args.port), Handler, emu, ctx)
    port = server.server_address[1]
    if args.port_file:
        write_port_file(args.port_file, port)
    if args.verbose:
        sys.stderr.write("esemu: listening on %s:%d (%s)\n" % (args.bind, port, args.flavor))
    import signal

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
