"""Indices, documents, stored scripts and persistence of the emulator.

* One primary shard per index ("shard": "0"); ``_shards.total`` is 1 +
  replicas (``number_of_replicas``, default 1; ``auto_expand_replicas``
  "N-M" gives N on this one node).
* ``_seq_no`` per index from 0, ``_primary_term`` 1, ``_version`` per
  document; a delete leaves a tombstone for 60 s (``index.gc_deletes``): a
  document re-created meanwhile continues the version.
* GET by id and _mget are realtime; _search sees the last refresh (every
  ``refresh_interval``, default 1 s, ``-1`` never; ``_refresh`` and
  ``refresh=true`` at once).
* An update is get -> script -> write-if-unchanged; a conflict is retried
  ``retry_on_conflict`` times.
* Mappings are kept as given (no dynamic mapping); values of mapped
  integer fields are checked as the engine parses them.
* External versions (``version`` with ``version_type`` external or
  external_gte) on index and delete: the document (or its tombstone) keeps
  the given version; an older one is refused with 409.
* ``dynamic: strict`` mappings refuse a document with an unmapped field.
* Queries: ``match_all``, ``term`` (mapped keyword/numeric fields, ``_id``),
  ``ids``, ``prefix`` (keyword fields), ``bool`` (must, filter, should,
  must_not, minimum_should_match); sort by one keyword field with
  search_after.
* ``--data FILE``: every acknowledged write is persisted (temp file, fsync,
  rename) before it is answered; a restart restores it.
"""

import base64
import copy
import json
import math
import os
import threading
import time
import uuid as uuidlib

import painless

GC_DELETES_SECONDS = 60.0
UPDATE_WINDOW_SECONDS = 0.0002
INTEGRAL = {"long": "a long", "integer": "an integer", "short": "a short", "byte": "a byte"}
RANGES = {"long": 63, "integer": 31, "short": 15, "byte": 7}
SOURCE_META_FIELDS = {"_id", "_index", "_routing", "_seq_no", "_version", "_primary_term",
                      "_source", "_ignored", "_field_names"}


class EsError(Exception):
    """An engine exception, rendered as the engine renders it."""

    def __init__(self, status, etype, reason, extra=None, caused_by=None, root=None, headers=None):
        Exception.__init__(self, reason)
        self.status, self.etype, self.reason = status, etype, reason
        self.extra = extra or {}
        self.caused_by = caused_by  # rendered dict
        self.root = root            # rendered root causes; default: this error
        self.headers = headers or {}

    def inner(self):
        d = {"type": self.etype, "reason": self.reason}
        d.update(self.extra)
        if self.caused_by is not None:
            d["caused_by"] = self.caused_by
        return d

    def body(self):
        root = self.root
        if root is None:
            root = [dict({"type": self.etype, "reason": self.reason}, **self.extra)]
        e = {"root_cause": root}
        e.update(self.inner())
        return {"error": e, "status": self.status}


def validation_error(*messages):
    return EsError(400, "action_request_validation_exception", "Validation Failed: " +
                   "".join("%d: %s;" % (i + 1, m) for i, m in enumerate(messages)))


def index_not_found(name, kind="index_expression"):
    return EsError(404, "index_not_found_exception", "no such index [%s]" % name,
                   {"resource.type": kind, "resource.id": name,
                    "index_uuid": "_na_", "index": name})


def not_supported(what):
    return EsError(400, "illegal_argument_exception",
                   "[esemu] %s is not supported by the emulator" % what)


def _parse_failure(field, ftype, doc_id, preview, cause):
    reason = ("failed to parse field [%s] of type [%s] in document with id '%s'. "
              "Preview of field's value: '%s'" % (field, ftype, doc_id, preview))
    return EsError(400, "mapper_parsing_exception", reason, caused_by=cause,
                   root=[{"type": "mapper_parsing_exception", "reason": reason}])


def check_source(mapping, source, doc_id):
    """Refuses what the engine refuses to index: metadata fields in the
    source, values of mapped integer fields that do not parse, fields a
    strict mapping does not map."""
    if mapping.get("dynamic") == "strict":
        props = mapping.get("properties") or {}
        for k in source:
            if k not in props and k not in SOURCE_META_FIELDS:
                raise EsError(400, "strict_dynamic_mapping_exception",
                              "mapping set to strict, dynamic introduction of [%s] within [_doc] "
                              "is not allowed" % k)
    for k, v in source.items():
        if k in SOURCE_META_FIELDS:
            why = ("Field [%s] is a metadata field and cannot be added inside a document. "
                   "Use the index API request parameters." % k)
            raise EsError(400, "mapper_parsing_exception", "failed to parse field [%s] of type [%s] "
                          "in document with id '%s'. Preview of field's value: '%s'"
                          % (k, k, doc_id, v if isinstance(v, str) else painless.to_str(v)),
                          caused_by={"type": "mapper_parsing_exception", "reason": why},
                          root=[{"type": "mapper_parsing_exception", "reason": why}])
        ftype = (mapping.get("properties") or {}).get(k, {}).get("type")
        if ftype not in INTEGRAL:
            continue
        for x in (v if isinstance(v, list) else [v]):
            if x is None or isinstance(x, bool):
                continue
            if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
                text = painless.fmt_double(x)
                raise _parse_failure(k, ftype, doc_id, text, {
                    "type": "illegal_argument_exception", "reason": 'For input string: "%s"' % text})
            if isinstance(x, (int, float)) and abs(int(x)) >= 1 << RANGES[ftype] and \
                    int(x) != -(1 << RANGES[ftype]):
                raise _parse_failure(k, ftype, doc_id, painless.to_str(x), {
                    "type": "illegal_argument_exception", "reason": "Value [%s] is out of range for %s"
                    % (painless.to_str(x), INTEGRAL[ftype])})


def rendered_mapping(m):
    """A mapping as GET _mapping gives it back: "dynamic" as a string,
    object fields with their "type" spelled out."""
    out = {}
    for k, v in m.items():
        if k == "dynamic" and isinstance(v, bool):
            v = "true" if v else "false"
        elif k == "properties" and isinstance(v, dict):
            v = {f: (dict([("type", "object")] + list(s.items()))
                     if isinstance(s, dict) and s and "type" not in s and "properties" not in s
                     else rendered_mapping(s) if isinstance(s, dict) else s)
                 for f, s in sorted(v.items())}
        out[k] = v
    return out


class Doc(object):
    __slots__ = ("id", "source", "seq_no", "version", "raw")

    def __init__(self, doc_id, source, seq_no, version, raw=None):
        self.id, self.source, self.seq_no, self.version = doc_id, source, seq_no, version
        self.raw = raw  # the source as sent: the engine returns those bytes
        # (a source rewritten by a script has raw None)


class Index(object):
    def __init__(self, name, mappings=None, settings=None, uuid=None):
        self.name = name
        self.uuid = uuid or base64.urlsafe_b64encode(uuidlib.uuid4().bytes).decode()[:22]
        self.mappings = mappings or {}
        self.settings = settings or {}
        self.docs = {}
        self.tombstones = {}  # id -> (version, seq_no, monotonic time of the delete)
        self.max_seq_no = -1
        self.searchable = {}
        self.lock = threading.Lock()
        self.doc_locks = {}
        self.dirty = False
        self.last_refresh = time.monotonic()

    @property
    def replicas(self):
        auto = self.settings.get("auto_expand_replicas")
        if isinstance(auto, str) and "-" in auto:
            try:
                return max(0, int(auto.split("-", 1)[0]))
            except ValueError:
                pass
        try:
            return int(self.settings.get("number_of_replicas", 1))
        except (TypeError, ValueError):
            return 1

    def shards(self):
        return {"total": 1 + self.replicas, "successful": 1, "failed": 0}

    def doc_lock(self, doc_id):
        with self.lock:
            return self.doc_locks.setdefault(doc_id, threading.Lock())

    def refresh(self):
        with self.lock:
            self.searchable = dict(self.docs)
            self.dirty = False
            self.last_refresh = time.monotonic()

    def refresh_interval(self):
        """Seconds between scheduled refreshes, None: never."""
        v = str(self.settings.get("refresh_interval", "1s"))
        if v.startswith("-"):
            return None
        for unit, mult in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
            if v.endswith(unit):
                try:
                    return float(v[:-len(unit)]) * mult
                except ValueError:
                    break
        return 1.0

    def gc_deletes(self):
        v = str(self.settings.get("gc_deletes", "60s"))
        for unit, mult in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
            if v.endswith(unit):
                try:
                    return float(v[:-len(unit)]) * mult
                except ValueError:
                    break
        return GC_DELETES_SECONDS

    def ext_conflict(self, doc_id, cur, version, gte):
        """The 409 of an external VERSION older than the document's (or its
        tombstone's), else None."""
        if cur is not None:
            have = cur.version
        else:
            t = self.live_tombstone(doc_id)
            have = t[0] if t else None
        if have is None or version > have or (gte and version == have):
            return None
        return self.vce(doc_id, "current version [%d] is higher or equal to the one provided "
                        "[%d]" % (have, version))

    def live_tombstone(self, doc_id):
        t = self.tombstones.get(doc_id)
        if t is not None and time.monotonic() - t[2] > self.gc_deletes():
            del self.tombstones[doc_id]
            t = None
        return t

    def vce(self, doc_id, reason):
        return EsError(409, "version_conflict_engine_exception",
                       "[%s]: version conflict, %s" % (doc_id, reason),
                       {"index_uuid": self.uuid, "shard": "0", "index": self.name})

    def cas_conflict(self, doc_id, cur, if_seq_no, if_term):
        if cur is None:
            return self.vce(doc_id, "required seqNo [%d], primary term [%d]. but no document was "
                            "found" % (if_seq_no, if_term))
        if cur.seq_no != if_seq_no or if_term != 1:
            return self.vce(doc_id, "required seqNo [%d], primary term [%d]. current document has "
                            "seqNo [%d] and primary term [1]" % (if_seq_no, if_term, cur.seq_no))
        return None


class Store(object):
    def __init__(self, fl, data_file=None):
        self.fl = fl  # the flavour's table (esemu.FLAVORS)
        self.indices = {}
        self.scripts = {}  # stored scripts (cluster state): id -> {"lang", "source"}
        self.updating = 0  # update actions running now
        self.lock = threading.RLock()
        self.data_file = data_file
        self.gen = self.persisted_gen = 0
        self.persist_lock = threading.Lock()
        if data_file and os.path.exists(data_file):
            self.load()
        threading.Thread(target=self._refresher, name="esemu-refresh", daemon=True).start()

    def _refresher(self):
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            for idx in list(self.indices.values()):
                interval = idx.refresh_interval()
                if idx.dirty and interval is not None and now - idx.last_refresh >= interval:
                    idx.refresh()

    # ---- indices --------------------------------------------------------------------------
    def get_index(self, name, kind="index_expression"):
        idx = self.indices.get(name)
        if idx is None:
            raise index_not_found(name, kind)
        return idx

    def create_index(self, name, body):
        if not isinstance(body, dict) or set(body) - {"settings", "mappings"}:
            raise not_supported("index creation with anything but settings and mappings")
        flat = {}

        def walk(d, prefix):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, prefix + k + ".")
                else:
                    flat[(prefix + k)[6:] if (prefix + k).startswith("index.") else prefix + k] = v
        walk(body.get("settings") or {}, "")
        with self.lock:
            if name in self.indices:
                uuid = self.indices[name].uuid
                raise EsError(400, "resource_already_exists_exception",
                              "index [%s/%s] already exists" % (name, uuid),
                              {"index_uuid": uuid, "index": name})
            self.indices[name] = Index(name, copy.deepcopy(body.get("mappings") or {}), flat)
            self.gen += 1

    def auto_create(self, name):
        with self.lock:
            idx = self.indices.get(name)
            if idx is None:
                idx = self.indices[name] = Index(name)
                self.gen += 1
            return idx

    def delete_index(self, name):
        with self.lock:
            self.get_index(name)
            del self.indices[name]
            self.gen += 1

    # ---- writes ---------------------------------------------------------------------------
    def _version(self, idx, doc_id, cur):
        if cur is not None:
            return cur.version + 1
        ts = idx.live_tombstone(doc_id)
        return ts[0] + 1 if ts else 1

    def write_index(self, idx, doc_id, source, create=False, if_seq_no=None, if_term=None, raw=None,
                    ext=None):
        """Indexes one document: (result, Doc). EXT: (version, gte) of an
        external version."""
        check_source(idx.mappings, source, doc_id)
        with idx.doc_lock(doc_id), idx.lock:
            cur = idx.docs.get(doc_id)
            if create and cur is not None:
                raise idx.vce(doc_id, "document already exists (current version [%d])" % cur.version)
            if if_seq_no is not None:
                err = idx.cas_conflict(doc_id, cur, if_seq_no, if_term)
                if err:
                    raise err
            if ext is not None:
                err = idx.ext_conflict(doc_id, cur, ext[0], ext[1])
                if err:
                    raise err
            idx.max_seq_no += 1
            doc = Doc(doc_id, source, idx.max_seq_no,
                      ext[0] if ext is not None else self._version(idx, doc_id, cur), raw)
            idx.docs[doc_id] = doc
            idx.tombstones.pop(doc_id, None)
            idx.dirty = True
            self.gen += 1
        return ("created" if cur is None else "updated"), doc

    def write_delete(self, idx, doc_id, if_seq_no=None, if_term=None, ext=None):
        """Deletes one document: (result, version, seq_no). EXT: as
        write_index()'s; a missing document then leaves a tombstone too."""
        with idx.doc_lock(doc_id), idx.lock:
            cur = idx.docs.get(doc_id)
            if if_seq_no is not None:
                err = idx.cas_conflict(doc_id, cur, if_seq_no, if_term)
                if err:
                    raise err
            if ext is not None:
                err = idx.ext_conflict(doc_id, cur, ext[0], ext[1])
                if err:
                    raise err
            version = ext[0] if ext is not None else self._version(idx, doc_id, cur)
            idx.max_seq_no += 1
            idx.docs.pop(doc_id, None)
            idx.tombstones[doc_id] = (version, idx.max_seq_no, time.monotonic())
            idx.dirty = True
            self.gen += 1
        return ("deleted" if cur is not None else "not_found"), version, idx.max_seq_no

    # ---- update ---------------------------------------------------------------------------
    def update(self, idx, doc_id, u, run_script):
        """The update action of U ({script, upsert, scripted_upsert,
        retry_on_conflict}); RUN_SCRIPT(script, ctx) runs it.
        Returns (result, Doc or None)."""
        attempt = 0
        with self.lock:
            self.updating += 1
        try:
            while True:
                try:
                    return self._update_once(idx, doc_id, u, run_script)
                except EsError as e:
                    if e.etype != "version_conflict_engine_exception" or \
                            attempt >= u.get("retry_on_conflict", 0):
                        raise
                    attempt += 1
        finally:
            with self.lock:
                self.updating -= 1

    def _source_of(self, ctx):
        try:
            source = painless.to_json(ctx.get("_source"))
        except painless.NotJson as e:
            raise EsError(400, "illegal_argument_exception", str(e))
        return source if isinstance(source, dict) else {}

    def _update_once(self, idx, doc_id, u, run_script):
        cur = idx.docs.get(doc_id)
        # get -> script -> write-if-unchanged, with room between for the
        # other updates running now (none: no sleep, a long bulk stays quick)
        if self.updating > 1:
            time.sleep(UPDATE_WINDOW_SECONDS)
        now = int(time.time() * 1000)
        if cur is None:
            if u.get("upsert") is None:
                reason = ("[_doc][%s]: document missing" if self.fl["typed_missing"]
                          else "[%s]: document missing") % doc_id
                raise EsError(404, "document_missing_exception", reason,
                              {"index_uuid": idx.uuid, "shard": "0", "index": idx.name})
            source = copy.deepcopy(u["upsert"])
            if u.get("scripted_upsert"):
                ctx = {"op": "create", "_now": now, "_source": source}
                if self.fl["upsert_ctx_ids"]:
                    ctx.update(_index=idx.name, _id=doc_id)
                run_script(u["script"], ctx)
                if ctx.get("op") != "create":
                    return "noop", None
                source = self._source_of(ctx)
            return "created", self.write_index(idx, doc_id, source, create=True)[1]
        ctx = {"_index": idx.name, "_id": doc_id, "_version": cur.version, "_routing": None,
               "op": "index", "_now": now, "_source": copy.deepcopy(cur.source)}
        if self.fl["ctx_type"]:
            ctx["_type"] = "_doc"
        run_script(u["script"], ctx)
        op = ctx.get("op")
        if op == "index":
            return "updated", self.write_index(idx, doc_id, self._source_of(ctx), if_seq_no=cur.seq_no,
                                               if_term=1)[1]
        if op == "delete":
            _, version, seq = self.write_delete(idx, doc_id, if_seq_no=cur.seq_no, if_term=1)
            return "deleted", Doc(doc_id, None, seq, version)
        return "noop", cur

    # ---- search ---------------------------------------------------------------------------
    def matcher(self, idx, query):
        """A predicate over documents for QUERY (match_all, term, ids)."""
        if query is None:
            return lambda d: True
        if not isinstance(query, dict) or len(query) != 1:
            raise EsError(400, "parsing_exception", "query malformed, no start_object after query name")
        (kind, body), = query.items()
        if kind == "match_all":
            return lambda d: True
        if kind == "ids":
            values = set(str(v) for v in (body or {}).get("values", []))
            return lambda d: d.id in values
        if kind == "term" and isinstance(body, dict) and len(body) == 1:
            (field, value), = body.items()
            return _term_matcher(idx, field, value)
        if kind == "prefix" and isinstance(body, dict) and len(body) == 1:
            (field, value), = body.items()
            if isinstance(value, dict):
                value = value.get("value")
            ftype = ((idx.mappings.get("properties") or {}).get(field) or {}).get("type")
            if ftype != "keyword" or not isinstance(value, str):
                raise not_supported("prefix query on field [%s]" % field)
            return lambda d: any(isinstance(x, str) and x.startswith(value)
                                 for x in _values(d.source.get(field)))
        if kind == "bool" and isinstance(body, dict):
            def clauses(name):
                c = body.get(name) or []
                return [self.matcher(idx, q) for q in (c if isinstance(c, list) else [c])]
            must = clauses("must") + clauses("filter")
            should, must_not = clauses("should"), clauses("must_not")
            msm = body.get("minimum_should_match", 0 if must else 1 if should else 0)
            msm = int(msm)
            return lambda d: all(m(d) for m in must) and not any(m(d) for m in must_not) and \
                sum(1 for m in should if m(d)) >= msm
        raise not_supported("query [%s]" % kind)

    def search(self, idx, query, sort_field=None):
        match = self.matcher(idx, query)
        if sort_field:
            return sorted((d for d in idx.searchable.values() if match(d)),
                          key=lambda d: str(d.source.get(sort_field)))
        return sorted((d for d in idx.searchable.values() if match(d)), key=lambda d: d.seq_no)

    # ---- stored scripts -------------------------------------------------------------------
    def put_script(self, sid, script):
        with self.lock:
            self.scripts[sid] = script
            self.gen += 1

    def delete_script(self, sid):
        with self.lock:
            self.gen += 1
            return self.scripts.pop(sid, None) is not None

    # ---- persistence ----------------------------------------------------------------------
    def dump(self):
        with self.lock:
            out = {"format": 2, "indices": {}, "scripts": dict(self.scripts)}
            now = time.monotonic()
            for name, idx in self.indices.items():
                with idx.lock:
                    out["indices"][name] = {
                        "uuid": idx.uuid, "mappings": idx.mappings, "settings": idx.settings,
                        "max_seq_no": idx.max_seq_no,
                        "docs": {d.id: [d.source, d.seq_no, d.version, d.raw]
                                 for d in idx.docs.values()},
                        "tombstones": {k: [v[0], v[1], GC_DELETES_SECONDS - (now - v[2])]
                                       for k, v in idx.tombstones.items()
                                       if now - v[2] <= GC_DELETES_SECONDS}}
            return out

    def persist(self):
        """Writes the state to --data (group commit: one write covers every
        change made before it started)."""
        if not self.data_file:
            return
        gen = self.gen
        with self.persist_lock:
            if self.persisted_gen >= gen:
                return
            gen = self.gen
            data = json.dumps(self.dump(), separators=(",", ":"))
            tmp = "%s.tmp.%d" % (self.data_file, os.getpid())
            with open(tmp, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.data_file)
            dfd = os.open(os.path.dirname(os.path.abspath(self.data_file)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            self.persisted_gen = gen

    def load(self):
        with open(self.data_file) as f:
            data = json.load(f)
        now = time.monotonic()
        self.scripts = dict(data.get("scripts") or {})
        for name, d in data.get("indices", {}).items():
            idx = Index(name, d.get("mappings"), d.get("settings"), d.get("uuid"))
            idx.max_seq_no = d.get("max_seq_no", -1)
            for doc_id, v in d.get("docs", {}).items():
                idx.docs[doc_id] = Doc(doc_id, v[0], v[1], v[2], v[3])
            for doc_id, v in d.get("tombstones", {}).items():
                idx.tombstones[doc_id] = (v[0], v[1], now - (GC_DELETES_SECONDS - v[2]))
            idx.searchable = dict(idx.docs)
            self.indices[name] = idx

    def reset(self):
        with self.lock:
            self.indices.clear()
            self.scripts.clear()
            self.gen += 1
        self.persist()


def _values(v):
    return v if isinstance(v, list) else [v]


# What a field's mapping may say besides its type without changing what a
# term query on it matches.
TERM_NEUTRAL_PARAMS = {"type", "doc_values", "store", "fields", "meta"}


def _unmapped(mappings, field):
    """Whether FIELD has no mapping in an index whose MAPPINGS (the ones it
    was created with) map no field by itself: "dynamic" false or strict, and
    no mapped object or multi-field that FIELD could name a part of."""
    props = mappings.get("properties") or {}
    top = field.split(".")[0]
    if any(k == top or k.startswith(top + ".") or k.startswith(field + ".") for k in props):
        return False
    return mappings.get("dynamic") in (False, "false", "strict")


def _term_matcher(idx, field, spec):
    """A predicate over documents for {"term": {FIELD: SPEC}}, as the engine
    matches it: on _id, on a top-level keyword or integer field, or on a
    field that has no mapping (no document matches). What would need
    anything else (dynamic mapping, analysis, another field type, a
    parameter of the query) is refused."""
    value = spec
    if isinstance(spec, dict):
        for k in spec:
            if k not in ("value", "boost"):
                raise not_supported("term query parameter [%s]" % k)
        if "value" not in spec:
            raise not_supported("term query without a value")
        value = spec["value"]
    if isinstance(value, (dict, list)) or value is None:
        raise not_supported("term query on [%s] with a value that is no string, number or "
                            "boolean" % field)
    if field == "_id":
        want = painless.to_str(value)
        return lambda d: d.id == want
    if field.startswith("_"):
        raise not_supported("term query on the metadata field [%s]" % field)
    mapping = (idx.mappings.get("properties") or {}).get(field)
    if mapping is not None and "." in field:
        raise not_supported("term query on the field [%s] of an object" % field)
    if mapping is None:
        if _unmapped(idx.mappings, field):
            return lambda d: False
        raise not_supported("term query on field [%s], which has no explicit mapping (the "
                            "emulator maps no field dynamically)" % field)
    ftype = mapping.get("type") if isinstance(mapping, dict) else None
    if ftype not in INTEGRAL and ftype != "keyword":
        raise not_supported("term query on field [%s] of type [%s]"
                            % (field, ftype or "object"))
    extra = sorted(set(mapping) - TERM_NEUTRAL_PARAMS)
    if extra:
        raise not_supported("term query on field [%s] mapped with [%s]" % (field, extra[0]))
    if ftype == "keyword":
        want = painless.to_str(value)

        def keyword_text(x):
            if isinstance(x, (str, bool, int)):
                return painless.to_str(x)
            raise not_supported("term query on keyword field [%s] of a document whose value "
                                "is no string, integer or boolean" % field)
        return lambda d: any(x is not None and keyword_text(x) == want
                             for x in _values(d.source.get(field)))
    if not isinstance(value, int) or isinstance(value, bool) or \
            not -(1 << RANGES[ftype]) <= value < 1 << RANGES[ftype]:
        raise not_supported("term query on %s field [%s] with a value that is no integer of "
                            "its range" % (ftype, field))

    def integral(x):
        if isinstance(x, int) and not isinstance(x, bool):
            return x
        raise not_supported("term query on %s field [%s] of a document whose value is no "
                            "integer" % (ftype, field))
    return lambda d: any(x is not None and integral(x) == value
                         for x in _values(d.source.get(field)))
