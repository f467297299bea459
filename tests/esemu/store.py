"""Indices, documents, queries and persistence for the Elasticsearch emulator.

Fidelity choices
----------------
* Every index has one primary shard (the default since Elasticsearch 7.0)
  and ``number_of_replicas`` replicas (default 1, as in Elasticsearch), which
  a single node cannot allocate: write answers say ``"_shards": {"total": 2,
  "successful": 1, "failed": 0}`` and cluster health is ``yellow``, exactly
  what a one-node cluster answers.  Create the index with
  ``number_of_replicas: 0`` to get ``total: 1`` and ``green``.
* ``_seq_no`` is per index (one shard), starting at 0; ``_primary_term`` is
  always 1; ``_version`` is per document starting at 1.
* Deletes leave a tombstone for 60 s (``index.gc_deletes``): a document
  re-created while the tombstone lives continues the version (previous + 1),
  afterwards it starts again at 1.
* GET by id is realtime (sees the latest write); ``_search``, ``_count`` and
  ``_delete_by_query`` see the documents as of the last refresh.  As in
  Elasticsearch, indices refresh every ``index.refresh_interval`` (default
  1s); a shard without searches for 30s is "search idle" and skips
  scheduled refreshes, and the next search refreshes it first (only when
  ``refresh_interval`` is not set explicitly).  Create the index with
  ``refresh_interval: -1`` for fully deterministic visibility tests.
* Writes to one document are serialised by a per-document lock; an update is
  get -> script -> write-if-unchanged (compare ``_seq_no``), so concurrent
  updates of one document see version conflicts and ``retry_on_conflict``
  matters, as on a primary shard.
* Dynamic mapping follows Elasticsearch's defaults (strings become ``text``
  with a ``keyword`` sub-field unless they look like dates, integers
  ``long``, decimals ``float``); ``dynamic: strict`` and type mismatches are
  refused with Elasticsearch's exceptions.
* Queries: ``term``, ``terms``, ``prefix``, ``match_all``, ``match_none``,
  ``ids``, ``exists``, ``range``, ``match`` and ``bool``.  ``term`` matches
  ``keyword`` fields exactly and ``text`` fields token by token (the standard
  analyzer lower-cases), which is why a lock client must map its ids as
  ``keyword``.
* With ``--data FILE`` every acknowledged write is persisted (whole state,
  JSON, temp file + fsync + rename, group-committed) before it is answered.
"""

import copy
import fnmatch
import json
import math
import os
import re
import threading
import time
import uuid as uuidlib

import painless

GC_DELETES_SECONDS = 60.0
SEARCH_IDLE_AFTER_SECONDS = 30.0
MAX_ID_BYTES = 512
UNASSIGNED_SEQ_NO = -2
UPDATE_WINDOW_SECONDS = 0.0002


# --------------------------------------------------------------------------
# errors


class EsError(Exception):
    """An Elasticsearch exception rendered as Elasticsearch renders it."""

    def __init__(self, status, etype, reason, extra=None, caused_by=None, root=None, headers=None):
        Exception.__init__(self, reason)
        self.status = status
        self.etype = etype
        self.reason = reason
        self.extra = extra or {}
        self.caused_by = caused_by  # dict already rendered, may nest
        self.root = root  # list of rendered root causes, default: self
        self.headers = headers or {}

    def inner(self):
        d = {"type": self.etype, "reason": self.reason}
        d.update(self.extra)
        if self.caused_by is not None:
            d["caused_by"] = self.caused_by
        return d

    def root_causes(self):
        if self.root is not None:
            return self.root
        d = {"type": self.etype, "reason": self.reason}
        d.update(self.extra)
        return [d]

    def body(self):
        e = {"root_cause": self.root_causes()}
        e.update(self.inner())
        return {"error": e, "status": self.status}


def shard_failure(idxs, cause, phase="query"):
    """search_phase_execution_exception "all shards failed" around ``cause``
    (an EsError or a rendered dict), as a search whose every shard failed."""
    inner = cause.inner() if isinstance(cause, EsError) else dict(cause)
    root = cause.root_causes()[0] if isinstance(cause, EsError) else dict(cause)
    failed = []
    for i in idxs[:1]:
        failed.append({"shard": 0, "index": i.name, "node": "esemu-node-id", "reason": inner})
    caused = dict(inner)
    return EsError(400, "search_phase_execution_exception", "all shards failed",
                   {"phase": phase, "grouped": True, "failed_shards": failed},
                   caused_by=caused, root=[root])


def validation_error(*messages):
    reason = "Validation Failed: " + "".join("%d: %s;" % (i + 1, m) for i, m in enumerate(messages))
    return EsError(400, "action_request_validation_exception", reason)


def index_not_found(name, kind="index_expression"):
    return EsError(404, "index_not_found_exception", "no such index [%s]" % name,
                   {"resource.type": kind, "resource.id": name,
                    "index_uuid": "_na_", "index": name})


def invalid_index_name(name, why):
    return EsError(400, "invalid_index_name_exception", "Invalid index name [%s], %s" % (name, why),
                   {"index_uuid": "_na_", "index": name})


def check_index_name(name):
    if not name:
        raise invalid_index_name(name, "must not be empty")
    if name != name.lower():
        raise invalid_index_name(name, "must be lowercase")
    for ch in '\\/*?"<>| ,#':
        if ch in name:
            raise invalid_index_name(name, 'must not contain the following characters [ , ", *, \\, <, |, ,, >, /, ?]')
    if ":" in name:
        raise invalid_index_name(name, "must not contain ':'")
    if name[0] in "-_+":
        raise invalid_index_name(name, "must not start with '_', '-', or '+'")
    if name in (".", ".."):
        raise invalid_index_name(name, "must not be '.' or '..'")
    if len(name.encode("utf-8")) > 255:
        raise invalid_index_name(name, "index name is too long, (%d > 255)" % len(name.encode("utf-8")))


def check_id(doc_id):
    if doc_id is None:
        return
    if doc_id == "":
        raise EsError(400, "illegal_argument_exception", "if _id is specified it must not be empty")
    n = len(doc_id.encode("utf-8"))
    if n > MAX_ID_BYTES:
        raise validation_error("id [%s] is too long, must be no longer than 512 bytes but was: %d" % (doc_id, n))


# --------------------------------------------------------------------------
# mapping


FIELD_TYPES = {"keyword", "text", "long", "integer", "short", "byte", "double", "float", "half_float",
               "scaled_float", "boolean", "date", "object", "nested", "flattened", "ip", "wildcard",
               "constant_keyword", "binary", "unsigned_long", "date_nanos", "match_only_text"}
NUMERIC = {"long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long"}
INTEGRAL = {"long": (-(1 << 63), (1 << 63) - 1), "integer": (-(1 << 31), (1 << 31) - 1),
            "short": (-32768, 32767), "byte": (-128, 127), "unsigned_long": (0, (1 << 64) - 1)}
DATE_RE = re.compile(r"^\d{4}[-/]\d{2}[-/]\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$")
MAPPING_ROOT_KEYS = {"properties", "_meta", "dynamic", "_source", "_routing", "date_detection",
                     "numeric_detection", "dynamic_templates", "dynamic_date_formats", "enabled",
                     "runtime", "_field_names", "subobjects"}


def validate_mapping(m):
    if not isinstance(m, dict):
        raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: Expected map for property [mappings] but got a %s" % type(m).__name__)
    bad = [k for k in m if k not in MAPPING_ROOT_KEYS]
    if bad:
        desc = ", ".join("%s : %s" % (k, _java_map_str(m[k])) for k in bad)
        reason = "Root mapping definition has unsupported parameters:  [%s]" % desc
        raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: " + reason,
                      caused_by={"type": "mapper_parsing_exception", "reason": reason},
                      root=[{"type": "mapper_parsing_exception", "reason": reason}])
    if "dynamic" in m and str(m["dynamic"]).lower() not in ("true", "false", "strict", "runtime"):
        reason = "Could not convert [dynamic] to boolean"
        raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: " + reason,
                      caused_by={"type": "mapper_parsing_exception", "reason": reason},
                      root=[{"type": "mapper_parsing_exception", "reason": reason}])
    _validate_props(m.get("properties", {}))


def _java_map_str(v):
    if isinstance(v, dict):
        return "{" + ", ".join("%s=%s" % (k, _java_map_str(x)) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_java_map_str(x) for x in v) + "]"
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


def _validate_props(props):
    if not isinstance(props, dict):
        return
    for name, spec in props.items():
        if name.strip() == "":
            reason = "field name cannot be an empty string" if name == "" else \
                "field name cannot contain only whitespace: ['%s']" % name
            raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: " + reason,
                          caused_by={"type": "illegal_argument_exception", "reason": reason},
                          root=[{"type": "mapper_parsing_exception", "reason": "Failed to parse mapping [_doc]: " + reason}])
        if not isinstance(spec, dict):
            reason = "Expected map for property [fields] on field [%s] but got a class java.lang.String" % name
            raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: " + reason,
                          caused_by={"type": "mapper_parsing_exception", "reason": reason},
                          root=[{"type": "mapper_parsing_exception", "reason": reason}])
        t = spec.get("type", "object" if "properties" in spec else None)
        if t is None:
            t = "object"
        if t not in FIELD_TYPES:
            reason = "No handler for type [%s] declared on field [%s]" % (t, name)
            raise EsError(400, "mapper_parsing_exception", "Failed to parse mapping [_doc]: " + reason,
                          caused_by={"type": "mapper_parsing_exception", "reason": reason},
                          root=[{"type": "mapper_parsing_exception", "reason": reason}])
        if "properties" in spec:
            _validate_props(spec["properties"])


def rendered_mapping(m):
    """A mapping as the engine gives it back: "dynamic" as a string, an
    object field's "type" spelled out when it has parameters of its own."""
    if not isinstance(m, dict):
        return m
    out = {}
    for k, v in m.items():
        if k == "dynamic" and isinstance(v, bool):
            v = "true" if v else "false"
        elif k == "properties" and isinstance(v, dict):
            v = {f: _rendered_field(spec) for f, spec in v.items()}
        out[k] = v
    return out


def _rendered_field(spec):
    if not isinstance(spec, dict):
        return spec
    spec = rendered_mapping(spec)
    if "type" not in spec and "properties" not in spec and spec:
        spec = dict([("type", "object")] + list(spec.items()))
    return spec


def source_of_script(ctx):
    try:
        return painless.to_json(ctx.get("_source"))
    except painless.NotJson as e:
        raise EsError(400, "illegal_argument_exception", str(e))


def merge_mapping(old, new):
    out = copy.deepcopy(old)
    for k, v in new.items():
        if k == "properties":
            props = out.setdefault("properties", {})
            for f, spec in v.items():
                if f in props and "properties" in spec and "properties" in props[f]:
                    props[f] = merge_mapping(props[f], spec)
                else:
                    props[f] = copy.deepcopy(spec)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _parse_failure(field, ftype, doc_id, value, cause):
    preview = painless.to_str(painless.from_json(value)) if not isinstance(value, str) else value
    reason = "failed to parse field [%s] of type [%s] in document with id '%s'. Preview of field's value: '%s'" % (
        field, ftype, doc_id, preview)
    return EsError(400, "mapper_parsing_exception", reason, caused_by=cause,
                   root=[{"type": "mapper_parsing_exception", "reason": reason}])


def _check_value(field, ftype, doc_id, v):
    """Validate one scalar against a mapped type (coercion as ES does)."""
    if v is None:
        return
    if isinstance(v, dict) and ftype not in ("object", "nested", "flattened"):
        return _parse_failure(field, ftype, doc_id, v,
                              {"type": "illegal_state_exception",
                               "reason": "Can't get text on a START_OBJECT at 1:%d" % 1})
    if ftype in INTEGRAL:
        if isinstance(v, bool):
            return _parse_failure(field, ftype, doc_id, v, {"type": "json_parse_exception",
                                                            "reason": "Current token (VALUE_%s) not numeric, can not use numeric value accessors" % ("TRUE" if v else "FALSE")})
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            v = painless.fmt_double(v)  # the engine parses it back as text
        if isinstance(v, (int, float)):
            iv = int(v)
        else:
            try:
                iv = int(float(v)) if re.match(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$", v) else None
            except (ValueError, OverflowError):
                iv = None
            if iv is None:
                return _parse_failure(field, ftype, doc_id, v, {"type": "illegal_argument_exception",
                                                                "reason": 'For input string: "%s"' % v})
        lo, hi = INTEGRAL[ftype]
        if iv is None or not lo <= iv <= hi:
            return _parse_failure(field, ftype, doc_id, v, {"type": "illegal_argument_exception",
                                                            "reason": "Value [%s] is out of range for %s" % (
                                                                painless.to_str(v) if not isinstance(v, str) else v,
                                                                "a long" if ftype == "long" else "an " + ftype if ftype == "integer" else "a " + ftype)})
    elif ftype in NUMERIC:
        if isinstance(v, bool):
            return _parse_failure(field, ftype, doc_id, v, {"type": "json_parse_exception",
                                                            "reason": "Current token (VALUE_%s) not numeric, can not use numeric value accessors" % ("TRUE" if v else "FALSE")})
        if isinstance(v, str):
            try:
                float(v)
            except ValueError:
                return _parse_failure(field, ftype, doc_id, v, {"type": "number_format_exception",
                                                                "reason": 'For input string: "%s"' % v})
    elif ftype == "boolean":
        if not (isinstance(v, bool) or v in ("true", "false", "")):
            return _parse_failure(field, ftype, doc_id, v, {"type": "illegal_argument_exception",
                                                            "reason": "Failed to parse value [%s] as only [true] or [false] are allowed." % painless.to_str(painless.from_json(v))})
    elif ftype == "date":
        if isinstance(v, bool) or (isinstance(v, str) and not DATE_RE.match(v) and not v.lstrip("-").isdigit()):
            return _parse_failure(field, ftype, doc_id, v, {"type": "illegal_argument_exception",
                                                            "reason": "failed to parse date field [%s] with format [strict_date_optional_time||epoch_millis]" % painless.to_str(v)})
    elif ftype in ("object", "nested"):
        if not isinstance(v, dict):
            reason = "object mapping for [%s] tried to parse field [%s] as object, but found a concrete value" % (
                field, field.rsplit(".", 1)[-1])
            return EsError(400, "mapper_parsing_exception", reason)
    return None


def dynamic_type(v, mapping_root):
    if isinstance(v, bool):
        return {"type": "boolean"}
    if isinstance(v, int):
        return {"type": "long"}
    if isinstance(v, float):
        return {"type": "float"}
    if isinstance(v, str):
        if mapping_root.get("date_detection", True) is not False and DATE_RE.match(v):
            return {"type": "date"}
        return {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    if isinstance(v, dict):
        return {"properties": {}}
    return None


# metadata fields that a document's source may not carry
SOURCE_META_FIELDS = {"_id", "_index", "_routing", "_seq_no", "_version", "_primary_term",
                      "_source", "_ignored", "_field_names"}


def apply_mapping(mapping, source, doc_id):
    """Validate ``source`` against ``mapping`` and return the mapping with
    dynamic additions (or the same object when nothing was added)."""
    for k in source:
        if k in SOURCE_META_FIELDS:
            why = ("Field [%s] is a metadata field and cannot be added inside a document. "
                   "Use the index API request parameters." % k)
            v = source[k]
            preview = v if isinstance(v, str) else painless.to_str(painless.from_json(v))
            raise EsError(400, "mapper_parsing_exception",
                          "failed to parse field [%s] of type [%s] in document with id '%s'. "
                          "Preview of field's value: '%s'" % (k, k, doc_id, preview),
                          caused_by={"type": "mapper_parsing_exception", "reason": why},
                          root=[{"type": "mapper_parsing_exception", "reason": why}])
    new = copy.deepcopy(mapping)
    changed = [False]

    def walk(props, obj, prefix, dyn):
        for k, v in obj.items():
            full = prefix + k
            if k == "" or full.startswith(".") or full.endswith("."):
                raise EsError(400, "mapper_parsing_exception",
                              "field name cannot be an empty string" if k == "" else
                              "object field cannot contain only whitespace: ['%s']" % full)
            spec = props.get(k)
            values = v if isinstance(v, list) else [v]
            for item in values:
                if isinstance(item, list):
                    continue
                if spec is None:
                    if item is None:
                        continue
                    if dyn == "strict":
                        raise EsError(400, "strict_dynamic_mapping_exception",
                                      "mapping set to strict, dynamic introduction of [%s] within [%s] is not allowed"
                                      % (k, prefix[:-1] if prefix else "_doc"))
                    if dyn in ("false", False):
                        break
                    spec = dynamic_type(item, new)
                    if spec is None:
                        continue
                    props[k] = spec
                    changed[0] = True
                ftype = spec.get("type", "object")
                err = _check_value(full, ftype, doc_id, item)
                if err is not None:
                    raise err
                if isinstance(item, dict) and ftype in ("object", "nested"):
                    sub_dyn = spec.get("dynamic", dyn)
                    walk(spec.setdefault("properties", {}), item, full + ".", str(sub_dyn).lower())

    dyn = str(new.get("dynamic", "true")).lower()
    walk(new.setdefault("properties", {}), source, "", dyn)
    if not changed[0]:
        return mapping
    return new


class MetaField(tuple):
    """Source path stand-in for metadata fields such as ``_id``."""


META_FIELDS = {"_id": {"type": "keyword"}, "_index": {"type": "keyword"}}


def field_values(doc, parts):
    if isinstance(parts, MetaField):
        return [doc.id] if parts[0] == "_id" else [doc.index_name] if parts[0] == "_index" else []
    return extract(doc.source, parts)


def field_spec(mapping, path):
    """Resolve ``a.b`` / ``f.keyword`` to (mapping spec, source path)."""
    if path in META_FIELDS:
        return META_FIELDS[path], MetaField((path,))
    props = mapping.get("properties", {})
    parts = path.split(".")
    spec = None
    src_parts = []
    i = 0
    while i < len(parts):
        p = parts[i]
        if props is not None and p in props:
            spec = props[p]
            src_parts.append(p)
            props = spec.get("properties")
            i += 1
            continue
        if spec is not None and "fields" in spec and p in spec["fields"] and i == len(parts) - 1:
            return spec["fields"][p], src_parts
        return None, None
    return spec, src_parts


def extract(source, parts):
    vals = [source]
    for p in parts:
        nxt = []
        for v in vals:
            if isinstance(v, dict) and p in v:
                x = v[p]
                if isinstance(x, list):
                    nxt.extend(x)
                else:
                    nxt.append(x)
            elif isinstance(v, list):
                for e in v:
                    if isinstance(e, dict) and p in e:
                        nxt.append(e[p])
        vals = nxt
    out = []
    for v in vals:
        if isinstance(v, list):
            out.extend(v)
        elif v is not None:
            out.append(v)
    return out


TOKEN_RE = re.compile(r"\w+", re.UNICODE)


def analyze(text):
    return [t.lower() for t in TOKEN_RE.findall(text)]


def _keyword_str(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return painless.fmt_double(v)
    return str(v)


def _num(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v) if any(c in v for c in ".eE") else int(v)
    except (ValueError, TypeError):
        return None


def indexed_terms(spec, values):
    """The terms a field would index, typed for comparisons."""
    t = spec.get("type", "object")
    out = []
    for v in values:
        if isinstance(v, dict):
            continue
        if t == "keyword" or t in ("constant_keyword", "wildcard", "flattened"):
            s = _keyword_str(v)
            if len(s) > spec.get("ignore_above", 1 << 31):
                continue
            out.append(s)
        elif t in ("text", "match_only_text"):
            out.extend(analyze(_keyword_str(v)))
        elif t in NUMERIC:
            n = _num(v)
            if n is not None:
                if t in INTEGRAL:
                    n = int(n)
                out.append(n)
        elif t == "boolean":
            out.append(v is True or v == "true")
        elif t == "date":
            out.append(_date_millis(v))
        else:
            out.append(_keyword_str(v))
    return out


def _date_millis(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        if v.lstrip("-").isdigit():
            return int(v)
        m = DATE_RE.match(v)
        if m:
            import datetime
            s = v.replace("/", "-").replace(" ", "T")
            if s.endswith("Z"):
                s = s[:-1] + "+00:00"
            try:
                d = datetime.datetime.fromisoformat(s)
            except ValueError:
                return v
            if d.tzinfo is None:
                d = d.replace(tzinfo=datetime.timezone.utc)
            return int(d.timestamp() * 1000)
    return v


def query_value(spec, v):
    t = spec.get("type", "object")
    if t in NUMERIC:
        n = _num(v)
        if n is None:
            raise EsError(400, "query_shard_exception",
                          "failed to create query: For input string: \"%s\"" % _keyword_str(v))
        return int(n) if t in INTEGRAL and n == int(n) else n
    if t == "boolean":
        if v in (True, "true"):
            return True
        if v in (False, "false"):
            return False
        raise EsError(400, "query_shard_exception",
                      "failed to create query: Can't parse boolean value [%s], expected [true] or [false]" % _keyword_str(v))
    if t == "date":
        return _date_millis(v)
    return _keyword_str(v)


# --------------------------------------------------------------------------
# queries


class Query(object):
    """A parsed query: match(doc) -> score or None."""

    def __init__(self, fn, scoring=True):
        self.fn = fn
        self.scoring = scoring


QUERY_NAMES = {"match_all", "term", "terms", "prefix", "bool", "ids", "exists", "range"}
KNOWN_UNSUPPORTED = {"match", "match_none", "constant_score", "match_phrase", "match_phrase_prefix", "multi_match", "query_string",
                     "simple_query_string", "wildcard", "regexp", "fuzzy", "nested", "has_child", "has_parent",
                     "function_score", "script", "script_score", "geo_distance", "geo_bounding_box",
                     "more_like_this", "dis_max", "boosting", "terms_set", "intervals", "span_term",
                     "distance_feature", "pinned", "rank_feature", "wrapper", "combined_fields",
                     "match_bool_prefix", "percolate", "knn", "parent_id", "geo_shape", "shape"}


def parsing_error(reason, line=1, col=1):
    return EsError(400, "parsing_exception", reason, {"line": line, "col": col})


class QueryContext(object):
    def __init__(self, index, snapshot, flavor):
        self.index = index
        self.snapshot = snapshot
        self.flavor = flavor
        self._df = {}

    def doc_count(self):
        return len(self.snapshot)

    def bm25(self, field, term, spec, freq=1, dl=1, avgdl=1.0):
        key = (field, term)
        n = self._df.get(key)
        if n is None:
            n = 0
            _, parts = field_spec(self.index.mappings, field)
            for d in self.snapshot.values():
                if term in indexed_terms(spec, field_values(d, parts)):
                    n += 1
            self._df[key] = n
        N = max(self.doc_count(), n)
        idf = math.log(1 + (N - n + 0.5) / (n + 0.5))
        k1, b = 1.2, 0.75
        if spec.get("type") in ("text", "match_only_text"):
            norm = k1 * (1 - b + b * dl / avgdl)
        else:
            norm = k1
        tf = freq / (freq + norm)
        if self.flavor in ("es7", "opensearch2", "opensearch3"):
            tf *= (k1 + 1)
        return float("%.7g" % (idf * tf))


def parse_query(q, ctx):
    if not isinstance(q, dict):
        raise parsing_error("[_na] query malformed, must start with start_object")
    if len(q) != 1:
        if not q:
            return Query(lambda d: 1.0)
        keys = list(q)
        raise parsing_error("[%s] malformed query, expected [END_OBJECT] but found [FIELD_NAME]" % keys[0])
    (name, body), = q.items()
    if name not in QUERY_NAMES:
        if name in KNOWN_UNSUPPORTED:
            raise EsError(400, "illegal_argument_exception",
                          "[esemu] query [%s] is not supported by the emulator" % name)
        raise EsError(400, "parsing_exception", "unknown query [%s]" % name, {"line": 1, "col": 1},
                      caused_by={"type": "named_object_not_found_exception",
                                 "reason": "[1:1] unknown field [%s]" % name},
                      root=[{"type": "parsing_exception", "reason": "unknown query [%s]" % name,
                             "line": 1, "col": 1}])
    return QUERY_PARSERS[name](body, ctx)


def _boost(opts):
    if isinstance(opts, dict) and "boost" in opts:
        return float(opts["boost"])
    return 1.0


def _single_field(qname, body):
    if not isinstance(body, dict) or not body:
        raise parsing_error("[%s] query malformed, no start_object after query name" % qname)
    fields = [k for k in body if k != "boost"]
    if len(fields) != 1:
        raise parsing_error("[%s] query doesn't support multiple fields, found [%s] and [%s]" % (
            qname, fields[0], fields[1]) if len(fields) > 1 else "[%s] query malformed" % qname)
    f = fields[0]
    return f, body[f]


def _term_query(body, ctx):
    field, v = _single_field("term", body)
    boost = 1.0
    if isinstance(v, dict):
        unknown = [k for k in v if k not in ("value", "boost", "case_insensitive", "_name")]
        if unknown:
            raise parsing_error("[term] query does not support [%s]" % unknown[0])
        if "value" not in v:
            raise EsError(400, "illegal_argument_exception", "value cannot be null")
        boost = float(v.get("boost", 1.0))
        ci = v.get("case_insensitive", False)
        v = v["value"]
    else:
        ci = False
    if isinstance(v, (dict, list)):
        raise parsing_error("[term] query does not support array of values" if isinstance(v, list) else
                            "[term] query malformed, no start_object after query name")
    if v is None:
        raise EsError(400, "illegal_argument_exception", "value cannot be null")
    spec, parts = field_spec(ctx.index.mappings, field)
    if spec is None:
        return Query(lambda d: None)
    qv = query_value(spec, v)
    is_text = spec.get("type") in ("text", "match_only_text")

    def match(d):
        vals = field_values(d, parts)
        terms = indexed_terms(spec, vals)
        if ci and isinstance(qv, str):
            hit = [t for t in terms if isinstance(t, str) and t.lower() == qv.lower()]
        else:
            hit = [t for t in terms if t == qv]
        if not hit:
            return None
        if isinstance(parts, MetaField):
            return boost  # _id is not scored: a term on it is a constant-score query
        if is_text:
            return boost * ctx.bm25(field, qv, spec, len(hit), max(1, len(terms)), max(1, len(terms)))
        return boost * ctx.bm25(field, qv, spec)
    return Query(match)


def _terms_query(body, ctx):
    if not isinstance(body, dict):
        raise parsing_error("[terms] query malformed, no start_object after query name")
    fields = [k for k in body if k not in ("boost", "_name")]
    if len(fields) != 1:
        raise parsing_error("[terms] query does not support multiple fields" if fields else
                            "[terms] query requires a field")
    field = fields[0]
    vals = body[field]
    if not isinstance(vals, list):
        raise parsing_error("[terms] query does not support [%s]" % field)
    boost = float(body.get("boost", 1.0))
    spec, parts = field_spec(ctx.index.mappings, field)
    if spec is None:
        return Query(lambda d: None)
    qvs = [query_value(spec, v) for v in vals if v is not None]

    def match(d):
        terms = indexed_terms(spec, field_values(d, parts))
        return boost if any(t in qvs for t in terms) else None
    return Query(match)


def _prefix_query(body, ctx):
    field, v = _single_field("prefix", body)
    boost = 1.0
    ci = False
    if isinstance(v, dict):
        if "value" not in v:
            raise EsError(400, "illegal_argument_exception", "value cannot be null")
        boost = float(v.get("boost", 1.0))
        ci = v.get("case_insensitive", False)
        v = v["value"]
    spec, parts = field_spec(ctx.index.mappings, field)
    if spec is None:
        return Query(lambda d: None)
    if spec.get("type") in NUMERIC or spec.get("type") in ("date", "boolean"):
        raise EsError(400, "query_shard_exception",
                      "failed to create query: Can only use prefix queries on keyword and text fields - not on [%s] which is of type [%s]" % (field, spec.get("type")))
    p = _keyword_str(v)

    def match(d):
        for t in indexed_terms(spec, field_values(d, parts)):
            if isinstance(t, str) and (t.lower().startswith(p.lower()) if ci else t.startswith(p)):
                return boost
        return None
    return Query(match)


def _match_all(body, ctx):
    boost = _boost(body)
    return Query(lambda d: boost)


def _ids_query(body, ctx):
    if not isinstance(body, dict) or "values" not in body or not isinstance(body["values"], list):
        raise parsing_error("[ids] query malformed, no values")
    vals = set(str(v) for v in body["values"])
    boost = _boost(body)
    return Query(lambda d: boost if d.id in vals else None)


def _exists_query(body, ctx):
    if not isinstance(body, dict) or "field" not in body:
        raise parsing_error("[exists] must be provided with a [field]")
    field = body["field"]
    spec, parts = field_spec(ctx.index.mappings, field)
    boost = _boost(body)
    if spec is None:
        return Query(lambda d: None)

    def match(d):
        vals = field_values(d, parts)
        if spec.get("type", "object") in ("object", "nested"):
            return boost if any(isinstance(v, dict) and v for v in vals) else None
        return boost if indexed_terms(spec, vals) else None
    return Query(match)


def _range_query(body, ctx):
    field, opts = _single_field("range", body)
    if not isinstance(opts, dict):
        raise parsing_error("[range] query malformed, no start_object after query name")
    spec, parts = field_spec(ctx.index.mappings, field)
    if spec is None:
        return Query(lambda d: None)
    bounds = []
    for k, v in opts.items():
        if k in ("gt", "gte", "lt", "lte", "from", "to"):
            if v is None:
                continue
            op = {"from": "gte", "to": "lte"}.get(k, k)
            bounds.append((op, query_value(spec, v)))
        elif k in ("boost", "format", "time_zone", "relation", "include_lower", "include_upper", "_name"):
            continue
        else:
            raise parsing_error("[range] query does not support [%s]" % k)
    boost = float(opts.get("boost", 1.0))

    def ok(t):
        for op, b in bounds:
            try:
                if op == "gt" and not t > b or op == "gte" and not t >= b or \
                        op == "lt" and not t < b or op == "lte" and not t <= b:
                    return False
            except TypeError:
                return False
        return True

    def match(d):
        return boost if any(ok(t) for t in indexed_terms(spec, field_values(d, parts))) else None
    return Query(match)


def _as_list(v):
    return v if isinstance(v, list) else [v]


def _bool_query(body, ctx):
    if not isinstance(body, dict):
        raise parsing_error("[bool] query malformed, no start_object after query name")
    clauses = {"must": [], "filter": [], "should": [], "must_not": []}
    msm = None
    boost = 1.0
    for k, v in body.items():
        if k in clauses:
            clauses[k] = [parse_query(x, ctx) for x in _as_list(v)]
        elif k == "minimum_should_match":
            msm = v
        elif k == "boost":
            boost = float(v)
        elif k in ("_name", "adjust_pure_negative"):
            pass
        else:
            raise parsing_error("[bool] query does not support [%s]" % k)
    should = clauses["should"]
    if msm is None:
        need = 0 if (clauses["must"] or clauses["filter"]) else (1 if should else 0)
    else:
        s = str(msm)
        if s.endswith("%") and s[:-1].lstrip("-").isdigit():
            pct = int(s[:-1])
            need = int(len(should) * pct / 100.0) if pct >= 0 else len(should) + int(len(should) * pct / 100.0)
        else:
            try:
                need = int(s)
            except ValueError:
                raise EsError(400, "parsing_exception",
                              "[bool] failed to parse field [minimum_should_match]", {"line": 1, "col": 1},
                              caused_by={"type": "number_format_exception", "reason": 'For input string: "%s"' % s})
            if need < 0:
                need = len(should) + need
    only_filters = not clauses["must"] and not should

    def match(d):
        score = 0.0
        for q in clauses["must"]:
            s = q.fn(d)
            if s is None:
                return None
            score += s
        for q in clauses["filter"]:
            if q.fn(d) is None:
                return None
        for q in clauses["must_not"]:
            if q.fn(d) is not None:
                return None
        n = 0
        for q in should:
            s = q.fn(d)
            if s is not None:
                n += 1
                score += s
        if n < need:
            return None
        if only_filters:
            return 0.0
        return score * boost
    return Query(match)


QUERY_PARSERS = {"term": _term_query, "terms": _terms_query, "prefix": _prefix_query, "match_all": _match_all,
                 "bool": _bool_query, "ids": _ids_query, "exists": _exists_query, "range": _range_query}


def lite_query(q):
    """``q=`` URI search: ``*``, ``field:value`` or a bare value (all fields)."""
    q = q.strip()
    if q in ("*", "*:*", ""):
        return {"match_all": {}}
    if ":" in q:
        f, v = q.split(":", 1)
        v = v.strip('"')
        if v == "*":
            return {"exists": {"field": f}}
        return {"match": {f: v}}
    return {"_lite_all": q}


# --------------------------------------------------------------------------
# documents and indices


class Doc(object):
    __slots__ = ("id", "source", "seq_no", "version", "term", "raw", "index_name")

    def __init__(self, doc_id, source, seq_no, version, term=1, raw=None):
        self.id = doc_id
        self.source = source
        self.seq_no = seq_no
        self.version = version
        self.term = term
        self.raw = raw  # the source exactly as sent (Elasticsearch returns it verbatim)
        self.index_name = None


class Index(object):
    def __init__(self, name, mappings=None, settings=None, uuid=None, created=None):
        self.name = name
        self.uuid = uuid or _uuid()
        self.created = created or int(time.time() * 1000)
        self.mappings = mappings or {}
        self.settings = settings or {}
        self.docs = {}
        self.tombstones = {}
        self.max_seq_nos = {}  # shard -> highest _seq_no
        self.type_name = None  # the single mapping type of a 7.x index (None until first use)
        self.searchable = {}
        self.lock = threading.Lock()
        self.doc_locks = {}
        self.dirty = False  # writes not yet visible to search
        self.last_refresh = time.monotonic()
        self.last_search = time.monotonic()

    @property
    def replicas(self):
        auto = self.settings.get("auto_expand_replicas")
        if isinstance(auto, str) and "-" in auto and auto != "false":
            # AutoExpandReplicas on this one data node: as many replicas as
            # other data nodes (none), within the range
            low = auto.split("-", 1)[0]
            try:
                return max(0, int(low))
            except ValueError:
                pass
        try:
            return int(self.settings.get("number_of_replicas", 1))
        except (TypeError, ValueError):
            return 1

    @property
    def num_shards(self):
        try:
            return max(1, int(self.settings.get("number_of_shards", 1)))
        except (TypeError, ValueError):
            return 1

    def shard_of(self, doc_id):
        """OperationRouting: murmur3 of the id, over the routing shards."""
        n = self.num_shards
        if n == 1:
            return 0
        log2_num = (n - 1).bit_length()
        routing_num = n << max(1, 10 - log2_num)
        h = murmur3_es(doc_id)
        return (h % routing_num) // (routing_num // n)

    def shards(self):
        return {"total": 1 + self.replicas, "successful": 1, "failed": 0}

    def doc_lock(self, doc_id):
        with self.lock:
            lk = self.doc_locks.get(doc_id)
            if lk is None:
                lk = self.doc_locks[doc_id] = threading.Lock()
            return lk

    def refresh(self):
        with self.lock:
            self.searchable = dict(self.docs)
            self.dirty = False
            self.last_refresh = time.monotonic()

    def refresh_interval(self):
        """Seconds between scheduled refreshes (None: disabled), and whether
        it was set explicitly (only then are search-idle shards refreshed)."""
        v = self.settings.get("refresh_interval")
        if v is None:
            return 1.0, False
        v = str(v)
        if v in ("-1", "-1ms", "-1s"):
            return None, True
        m = re.match(r"^(\d+(?:\.\d+)?)(nanos|micros|ms|s|m|h|d)?$", v)
        if not m:
            return 1.0, True
        unit = {"nanos": 1e-9, "micros": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
        return float(m.group(1)) * unit[m.group(2) or "ms"], True

    def search_idle(self, now):
        interval, explicit = self.refresh_interval()
        return (not explicit) and now - self.last_search > SEARCH_IDLE_AFTER_SECONDS

    def before_search(self):
        """A search on a search-idle shard waits for a refresh (ES 7+)."""
        now = time.monotonic()
        if self.dirty and self.search_idle(now):
            self.refresh()
        self.last_search = now

    def scheduled_refresh(self, now):
        interval, explicit = self.refresh_interval()
        if interval is None or not self.dirty or self.search_idle(now):
            return
        if now - self.last_refresh >= interval:
            self.refresh()

    def live_tombstone(self, doc_id):
        t = self.tombstones.get(doc_id)
        if t is None:
            return None
        if time.monotonic() - t[2] > GC_DELETES_SECONDS:
            del self.tombstones[doc_id]
            return None
        return t

    def vce(self, doc_id, reason):
        return EsError(409, "version_conflict_engine_exception", "[%s]: version conflict, %s" % (doc_id, reason),
                       {"index_uuid": self.uuid, "shard": str(self.shard_of(doc_id)), "index": self.name})

    def doc_missing(self, doc_id, flavor, type_name=None):
        reason = "[%s]: document missing" % doc_id if flavor in ("es8", "opensearch2", "opensearch3") else \
            "[%s][%s]: document missing" % (type_name or "_doc", doc_id)
        return EsError(404, "document_missing_exception", reason,
                       {"index_uuid": self.uuid, "shard": str(self.shard_of(doc_id)), "index": self.name})


def murmur3_es(text):
    """Murmur3HashFunction.hash(String): murmur3_x86_32 (seed 0) over the
    UTF-16LE code units of the string, as a signed int."""
    data = bytearray()
    for ch in text.encode("utf-16-le"):
        data.append(ch)
    c1, c2 = 0xcc9e2d51, 0x1b873593
    h = 0
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        k = data[4 * i] | (data[4 * i + 1] << 8) | (data[4 * i + 2] << 16) | (data[4 * i + 3] << 24)
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xe6546b64) & 0xFFFFFFFF
    tail = data[nblocks * 4:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85ebca6b) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xc2b2ae35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def _uuid():
    import base64
    return base64.urlsafe_b64encode(uuidlib.uuid4().bytes).decode().rstrip("=")[:22]


def _autoid():
    import base64
    raw = int(time.time() * 1000).to_bytes(6, "big") + os.urandom(9)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def deep_merge(base, update):
    """XContentHelper.update: maps merge recursively, other values replace.
    Returns True when something changed."""
    changed = False
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            if deep_merge(base[k], v):
                changed = True
        else:
            if k not in base or base[k] != v or type(base[k]) is not type(v):
                changed = True
            base[k] = copy.deepcopy(v)
    return changed


def filter_source(source, includes, excludes):
    if not includes and not excludes:
        return source

    def flat_match(path, pats):
        for p in pats:
            if fnmatch.fnmatchcase(path, p) or path.startswith(p + "."):
                return True
        return False

    def prefix_of(path, pats):
        return any(p.startswith(path + ".") or fnmatch.fnmatchcase(path, p.split(".")[0]) for p in pats)

    def walk(obj, prefix):
        out = {}
        for k, v in obj.items():
            path = prefix + k
            if excludes and flat_match(path, excludes):
                continue
            if not includes or flat_match(path, includes):
                if isinstance(v, dict) and excludes:
                    out[k] = walk_excl(v, path + ".")
                else:
                    out[k] = v
            elif isinstance(v, dict) and prefix_of(path, includes):
                sub = walk(v, path + ".")
                if sub:
                    out[k] = sub
        return out

    def walk_excl(obj, prefix):
        return {k: (walk_excl(v, prefix + k + ".") if isinstance(v, dict) else v)
                for k, v in obj.items() if not flat_match(prefix + k, excludes)}

    return walk(source, "")


class Store(object):
    def __init__(self, flavor="es7", data_file=None, auto_refresh=False):
        self.flavor = flavor
        self.indices = {}
        self.scripts = {}  # stored scripts: id -> {"lang", "source"} (cluster state)
        self.lock = threading.RLock()
        self.data_file = data_file
        self.gen = 0
        self.persisted_gen = 0
        self.persist_lock = threading.Lock()
        if data_file and os.path.exists(data_file):
            self.load()
        if auto_refresh:
            t = threading.Thread(target=self._refresher, name="esemu-refresh", daemon=True)
            t.start()

    def _refresher(self):
        """index.refresh_interval (default 1s): scheduled refreshes."""
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            for idx in list(self.indices.values()):
                try:
                    idx.scheduled_refresh(now)
                except Exception:
                    pass

    # ---------------------------------------------------------------- indices
    def get_index(self, name):
        idx = self.indices.get(name)
        if idx is None:
            raise index_not_found(name)
        return idx

    def resolve(self, expr, allow_no_indices=True, ignore_unavailable=False,
                kind="index_expression"):
        """Resolve a comma-separated index expression with wildcards.
        KIND: the "resource.type" of the error for a missing index."""
        if expr in (None, "", "_all", "*"):
            return sorted(self.indices.values(), key=lambda i: i.name)
        out = []
        for part in expr.split(","):
            if not part:
                continue
            if "*" in part:
                out.extend(i for n, i in sorted(self.indices.items()) if fnmatch.fnmatchcase(n, part))
            else:
                i = self.indices.get(part)
                if i is None:
                    if ignore_unavailable:
                        continue
                    raise index_not_found(part, kind)
                out.append(i)
        seen = set()
        res = []
        for i in out:
            if i.name not in seen:
                seen.add(i.name)
                res.append(i)
        if not res and not allow_no_indices:
            raise index_not_found(expr)
        return res

    def create_index(self, name, body):
        check_index_name(name)
        body = body or {}
        if not isinstance(body, dict):
            raise EsError(400, "parse_exception", "Failed to derive xcontent")
        for k in body:
            if k not in ("settings", "mappings", "aliases"):
                raise EsError(400, "parse_exception", "unknown key [%s] for create index" % k)
        mappings = body.get("mappings") or {}
        validate_mapping(mappings)
        settings = self._settings(body.get("settings") or {})
        with self.lock:
            if name in self.indices:
                idx = self.indices[name]
                raise EsError(400, "resource_already_exists_exception",
                              "index [%s/%s] already exists" % (name, idx.uuid),
                              {"index_uuid": idx.uuid, "index": name})
            idx = Index(name, copy.deepcopy(mappings), settings)
            if mappings:
                idx.type_name = "_doc"
            self.indices[name] = idx
            self._dirty()
        return self.indices[name]

    def _settings(self, s):
        flat = {}

        def walk(d, prefix):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, prefix + k + ".")
                else:
                    flat[prefix + k] = v
        walk(s, "")
        out = {}
        for k, v in flat.items():
            key = k[6:] if k.startswith("index.") else k
            if key in ("number_of_replicas", "number_of_shards"):
                try:
                    n = int(v)
                except (TypeError, ValueError):
                    raise EsError(400, "illegal_argument_exception",
                                  "Failed to parse value [%s] for setting [index.%s]" % (v, key))
                if key == "number_of_shards" and n < 1 or n < 0:
                    raise EsError(400, "illegal_argument_exception",
                                  "Failed to parse value [%s] for setting [index.%s] must be >= %d" % (
                                      v, key, 1 if key == "number_of_shards" else 0))
                out[key] = n
            else:
                out[key] = v
        return out

    def auto_create(self, name):
        idx = self.indices.get(name)
        if idx is not None:
            return idx, False
        check_index_name(name)
        with self.lock:
            idx = self.indices.get(name)
            if idx is not None:
                return idx, False
            idx = self.indices[name] = Index(name)
            self._dirty()
            return idx, True

    def delete_index(self, expr):
        with self.lock:
            idxs = self.resolve(expr)
            for i in idxs:
                del self.indices[i.name]
            self._dirty()
        return idxs

    def update_mapping(self, idx, source, doc_id):
        new = apply_mapping(idx.mappings, source, doc_id)
        if new is not idx.mappings:
            with idx.lock:
                idx.mappings = merge_mapping(idx.mappings, new)
            self._dirty()

    # ---------------------------------------------------------------- writes
    def _next_seq(self, idx, doc_id):
        shard = idx.shard_of(doc_id)
        seq = idx.max_seq_nos.get(shard, -1) + 1
        idx.max_seq_nos[shard] = seq
        return seq

    def write_index(self, idx, doc_id, source, op_type="index", if_seq_no=None, if_primary_term=None,
                    version=None, version_type=None, raw=None):
        """Index/create one document.  Returns (result, Doc)."""
        auto = doc_id is None
        if auto:
            doc_id = _autoid()
        self.update_mapping(idx, source, doc_id)
        with idx.doc_lock(doc_id):
            with idx.lock:
                cur = idx.docs.get(doc_id)
                if op_type == "create" and cur is not None:
                    raise idx.vce(doc_id, "document already exists (current version [%d])" % cur.version)
                if if_seq_no is not None:
                    if cur is None:
                        raise idx.vce(doc_id, "required seqNo [%d], primary term [%d]. but no document was found"
                                      % (if_seq_no, if_primary_term))
                    if cur.seq_no != if_seq_no or cur.term != if_primary_term:
                        raise idx.vce(doc_id, "required seqNo [%d], primary term [%d]. current document has "
                                              "seqNo [%d] and primary term [%d]"
                                      % (if_seq_no, if_primary_term, cur.seq_no, cur.term))
                if version_type in ("external", "external_gte"):
                    curv = cur.version if cur is not None else None
                    if curv is None:
                        ts = idx.live_tombstone(doc_id)
                        curv = ts[0] if ts else None
                    if curv is not None and (version < curv or (version == curv and version_type == "external")):
                        raise idx.vce(doc_id, "current version [%d] is higher or equal to the one provided [%d]"
                                      % (curv, version) if version_type == "external" else
                                      "current version [%d] is higher than the one provided [%d]" % (curv, version))
                    new_version = version
                elif cur is not None:
                    new_version = cur.version + 1
                else:
                    ts = idx.live_tombstone(doc_id)
                    new_version = ts[0] + 1 if ts else 1
                doc = Doc(doc_id, source, self._next_seq(idx, doc_id), new_version, raw=raw)
                idx.docs[doc_id] = doc
                idx.tombstones.pop(doc_id, None)
                idx.dirty = True
                self.gen += 1
        return ("created" if cur is None else "updated"), doc

    def write_delete(self, idx, doc_id, if_seq_no=None, if_primary_term=None, version=None, version_type=None):
        """Returns (result, version, seq_no) with result deleted/not_found."""
        with idx.doc_lock(doc_id):
            with idx.lock:
                cur = idx.docs.get(doc_id)
                if if_seq_no is not None:
                    if cur is None:
                        raise idx.vce(doc_id, "required seqNo [%d], primary term [%d]. but no document was found"
                                      % (if_seq_no, if_primary_term))
                    if cur.seq_no != if_seq_no or cur.term != if_primary_term:
                        raise idx.vce(doc_id, "required seqNo [%d], primary term [%d]. current document has "
                                              "seqNo [%d] and primary term [%d]"
                                      % (if_seq_no, if_primary_term, cur.seq_no, cur.term))
                if version_type in ("external", "external_gte"):
                    curv = cur.version if cur is not None else None
                    if curv is None:
                        ts = idx.live_tombstone(doc_id)
                        curv = ts[0] if ts else None
                    if curv is not None and (version < curv or (version == curv and version_type == "external")):
                        raise idx.vce(doc_id, "current version [%d] is higher or equal to the one provided [%d]"
                                      % (curv, version))
                    new_version = version
                elif cur is not None:
                    new_version = cur.version + 1
                else:
                    ts = idx.live_tombstone(doc_id)
                    new_version = ts[0] + 1 if ts else 1
                seq = self._next_seq(idx, doc_id)
                if cur is not None:
                    del idx.docs[doc_id]
                idx.tombstones[doc_id] = (new_version, seq, time.monotonic())
                idx.dirty = True
                self.gen += 1
        return ("deleted" if cur is not None else "not_found"), new_version, seq

    def get_doc(self, idx, doc_id, realtime=True):
        if realtime:
            return idx.docs.get(doc_id)
        return idx.searchable.get(doc_id)

    # ---------------------------------------------------------------- update
    def update(self, idx, doc_id, req, run_script):
        """The update action.  ``req`` holds doc/script/upsert/... and
        ``run_script(script, ctx_fields)`` runs Painless, raising EsError.
        Returns (result, doc_or_None, info dict)."""
        retries = req.get("retry_on_conflict", 0)
        attempt = 0
        while True:
            try:
                return self._update_once(idx, doc_id, req, run_script)
            except EsError as e:
                if e.etype == "version_conflict_engine_exception" and attempt < retries and \
                        not getattr(e, "no_retry", False):
                    attempt += 1
                    continue
                raise

    def _update_once(self, idx, doc_id, req, run_script):
        cur = idx.docs.get(doc_id)
        # get -> script -> write-if-unchanged: let other writers in between, as
        # on a real primary, so that contention shows up as version conflicts
        time.sleep(UPDATE_WINDOW_SECONDS)
        if_seq_no = req.get("if_seq_no")
        if cur is None:
            upsert = req.get("upsert")
            if req.get("doc_as_upsert"):
                upsert = req.get("doc")
            if upsert is None:
                raise idx.doc_missing(doc_id, self.flavor, req.get("_type"))
            source = copy.deepcopy(upsert)
            if req.get("scripted_upsert") and req.get("script") is not None:
                ctx = {"op": "create", "_source": painless.from_json(source), "_now": painless.JLong(
                    int(time.time() * 1000))}
                if self.flavor == "es8":  # UpsertCtxMap also exposes the index and id
                    ctx = {"_index": idx.name, "_id": doc_id, **ctx}
                run_script(req["script"], ctx, idx, doc_id)
                op = ctx.get("op")
                if op != "create":
                    return "noop", None, {}
                source = source_of_script(ctx)
                if not isinstance(source, dict):
                    source = {}
            result, doc = self.write_index(idx, doc_id, source, op_type="create")
            return "created", doc, {}
        if if_seq_no is not None and (cur.seq_no != if_seq_no or cur.term != req.get("if_primary_term")):
            e = idx.vce(doc_id, "required seqNo [%d], primary term [%d]. current document has seqNo [%d] and "
                                "primary term [%d]" % (if_seq_no, req.get("if_primary_term"), cur.seq_no, cur.term))
            e.no_retry = True
            raise e
        if req.get("script") is not None:
            ctx = {"_index": idx.name, "_id": doc_id, "_version": cur.version, "_routing": None,
                   "op": "index", "_now": painless.JLong(int(time.time() * 1000)),
                   "_source": painless.from_json(copy.deepcopy(cur.source))}
            if self.flavor in ("es7", "es8"):
                ctx["_type"] = "_doc"  # 8.x UpdateCtxMap still carries _type: _doc
            run_script(req["script"], ctx, idx, doc_id)
            op = ctx.get("op")
            if op == "index":
                source = source_of_script(ctx)
                if not isinstance(source, dict):
                    source = {}
                result, doc = self.write_index(idx, doc_id, source, if_seq_no=cur.seq_no,
                                               if_primary_term=cur.term)
                return "updated", doc, {}
            if op == "delete":
                res, version, seq = self.write_delete(idx, doc_id, if_seq_no=cur.seq_no, if_primary_term=cur.term)
                return "deleted", Doc(doc_id, None, seq, version), {}
            return "noop", cur, {}
        # partial doc
        source = copy.deepcopy(cur.source)
        changed = deep_merge(source, req.get("doc") or {})
        if not changed and req.get("detect_noop", True):
            return "noop", cur, {}
        result, doc = self.write_index(idx, doc_id, source, if_seq_no=cur.seq_no, if_primary_term=cur.term)
        return "updated", doc, {}

    # ---------------------------------------------------------------- search
    def search(self, idxs, query, size=10, from_=0, sort=None, track_total=True):
        hits = []
        for idx in idxs:
            idx.before_search()
            snap = idx.searchable
            for d in snap.values():
                d.index_name = idx.name
            ctx = QueryContext(idx, snap, self.flavor)
            q = self._compile_query(query, ctx)
            for d in sorted(snap.values(), key=lambda d: d.seq_no):
                s = q.fn(d)
                if s is not None:
                    hits.append((idx, d, s))
        return hits

    def _compile_query(self, query, ctx):
        if query is None:
            return Query(lambda d: 1.0)
        if isinstance(query, dict) and "_lite_all" in query:
            v = query["_lite_all"].lower()

            def m(d):
                def any_val(o):
                    if isinstance(o, dict):
                        return any(any_val(x) for x in o.values())
                    if isinstance(o, list):
                        return any(any_val(x) for x in o)
                    return o is not None and (v in analyze(_keyword_str(o)) or _keyword_str(o).lower() == v)
                return 1.0 if any_val(d.source) else None
            return Query(m)
        return parse_query(query, ctx)

    def check_query(self, idxs, query):
        """Parse the query against every index; failures that Elasticsearch
        reports per shard become a search_phase_execution_exception."""
        for idx in idxs:
            try:
                self._compile_query(query, QueryContext(idx, {}, self.flavor))
            except EsError as e:
                if e.etype == "query_shard_exception":
                    e.extra = dict(e.extra, index_uuid=idx.uuid, index=idx.name)
                    raise shard_failure(idxs, e)
                raise
        if not idxs and query is not None:
            self._compile_query(query, QueryContext(Index("_probe"), {}, self.flavor))

    # ---------------------------------------------------------------- stored scripts
    def put_script(self, sid, script):
        with self.lock:
            self.scripts[sid] = script
            self._dirty()

    def delete_script(self, sid):
        with self.lock:
            if self.scripts.pop(sid, None) is None:
                return False
            self._dirty()
            return True

    # ---------------------------------------------------------------- persistence
    def _dirty(self):
        self.gen += 1

    def dump(self):
        with self.lock:
            out = {"format": 1, "flavor": self.flavor, "indices": {}, "scripts": dict(self.scripts)}
            for name, idx in self.indices.items():
                with idx.lock:
                    now = time.monotonic()
                    out["indices"][name] = {
                        "uuid": idx.uuid, "created": idx.created, "mappings": idx.mappings,
                        "settings": idx.settings, "type_name": idx.type_name,
                        "max_seq_nos": {str(k): v for k, v in idx.max_seq_nos.items()},
                        "docs": {d.id: [d.source, d.seq_no, d.version, d.raw] for d in idx.docs.values()},
                        "tombstones": {k: [v[0], v[1], GC_DELETES_SECONDS - (now - v[2])]
                                       for k, v in idx.tombstones.items()
                                       if now - v[2] <= GC_DELETES_SECONDS},
                    }
            return out

    def persist(self):
        if not self.data_file:
            return
        my_gen = self.gen
        with self.persist_lock:
            if self.persisted_gen >= my_gen:
                return
            snap_gen = self.gen
            data = json.dumps(self.dump(), separators=(",", ":"))
            tmp = "%s.tmp.%d" % (self.data_file, os.getpid())
            with open(tmp, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.data_file)
            try:
                dfd = os.open(os.path.dirname(os.path.abspath(self.data_file)), os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            except OSError:
                pass
            self.persisted_gen = snap_gen

    def load(self):
        with open(self.data_file) as f:
            data = json.load(f)
        now = time.monotonic()
        self.scripts = dict(data.get("scripts") or {})
        for name, d in data.get("indices", {}).items():
            idx = Index(name, d.get("mappings") or {}, d.get("settings") or {}, d.get("uuid"), d.get("created"))
            idx.max_seq_nos = {int(k): v for k, v in (d.get("max_seq_nos") or {}).items()}
            idx.type_name = d.get("type_name")
            for doc_id, v in d.get("docs", {}).items():
                idx.docs[doc_id] = Doc(doc_id, v[0], v[1], v[2], raw=v[3] if len(v) > 3 else None)
            for doc_id, v in d.get("tombstones", {}).items():
                left = v[2] if len(v) > 2 else GC_DELETES_SECONDS
                idx.tombstones[doc_id] = (v[0], v[1], now - (GC_DELETES_SECONDS - left))
            idx.searchable = dict(idx.docs)
            self.indices[name] = idx

    def reset(self):
        with self.lock:
            self.indices.clear()
            self.scripts.clear()
            self._dirty()
        self.persist()
