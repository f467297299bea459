"""Replaying a recorded sequence of requests and comparing answers.

A corpus file (corpus/*.jsonl) is one sequence: JSON lines as the test proxy
(tests/engines/proxy.py) records them — method, path, content_type,
request_body, status, response_body — each answer being the one a real node
gave when the sequence was replayed, in order, from a node without the
sequence's indices and stored scripts.  The first line is a header: {"engine": "opensearch" | "opensearch3" |
"elasticsearch", "version": ..., "flavor": the emulator's flavour}.

Only what must differ between two nodes is ignored (see normalize()).
Standard library only.
"""
import http.client
import json
import re
import urllib.parse

# "[index/uuid]" in a reason: the uuid is the node's
_INDEX_UUID = re.compile(r"\[([^/\[\]]+)/[A-Za-z0-9_-]{22}\]")

# Keys whose values differ between any two nodes or any two runs.
IGNORED_KEYS = {"took", "index_uuid", "uuid", "creation_date", "cluster_uuid",
                "cluster_name", "name", "build_hash", "build_date", "build_type",
                "build_flavor", "build_snapshot", "lucene_version",
                "minimum_wire_compatibility_version",
                "minimum_index_compatibility_version", "tagline"}
# Only ignored in the answer of GET / (elsewhere "name" is data).
ROOT_ONLY = {"name", "cluster_name", "build_hash", "build_date", "build_type",
             "build_flavor", "build_snapshot", "lucene_version", "tagline",
             "minimum_wire_compatibility_version", "minimum_index_compatibility_version"}
# Settings the engine makes up for an index.
IGNORED_SETTINGS = {"uuid", "creation_date", "version", "provided_name", "replication"}


def load(path):
    """(header, [exchange, ...]) of one corpus file."""
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return lines[0], lines[1:]


def save(path, header, exchanges):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, sort_keys=True) + "\n")
        for x in exchanges:
            keep = {k: x.get(k) for k in ("method", "path", "content_type", "request_body",
                                           "status", "response_body")}
            if x.get("note"):
                keep["note"] = x["note"]
            f.write(json.dumps(keep, sort_keys=True) + "\n")


def indices_of(exchanges):
    """Index names a sequence touches (to drop them before a replay)."""
    out = []
    for x in exchanges:
        first = urllib.parse.urlsplit(x["path"]).path.lstrip("/").split("/")[0]
        first = urllib.parse.unquote(first)
        if first and not first.startswith("_") and "*" not in first and "," not in first \
                and first not in out:
            out.append(first)
    return out


class Client:
    """One kept-alive HTTP/1.1 connection to a node."""

    def __init__(self, port, host="127.0.0.1", timeout=60):
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn = None

    def request(self, method, path, body=None, content_type=None):
        data = body.encode("utf-8") if isinstance(body, str) else body
        headers = {}
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
            try:
                send = data if data or method in ("POST", "PUT") else None
                self.conn.request(method, path, body=send, headers=headers)
                r = self.conn.getresponse()
                out = r.read()
                return r.status, out.decode("utf-8", "replace")
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def scripts_of(exchanges):
    """Stored script ids a sequence touches (to delete them before a replay)."""
    out = []
    for x in exchanges:
        parts = urllib.parse.urlsplit(x["path"]).path.lstrip("/").split("/")
        if len(parts) == 2 and parts[0] == "_scripts" and parts[1] and parts[1] not in out:
            out.append(parts[1])
    return out


def reset(client, exchanges):
    """Drops every index and stored script the sequence touches: the node is
    then as fresh as far as the sequence can tell."""
    for name in indices_of(exchanges):
        client.request("DELETE", "/" + urllib.parse.quote(name, safe=""))
    for sid in scripts_of(exchanges):
        client.request("DELETE", "/_scripts/" + sid)


def replay(client, exchanges):
    """Sends each request in order: [(status, body text), ...]."""
    reset(client, exchanges)
    return [client.request(x["method"], x["path"], x.get("request_body") or None,
                           x.get("content_type")) for x in exchanges]


def _norm(v, root, in_settings=False):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in IGNORED_KEYS and (k not in ROOT_ONLY or root):
                continue
            if in_settings and k in IGNORED_SETTINGS:
                continue
            out[k] = _norm(x, root, in_settings or k == "settings")
        return out
    if isinstance(v, list):
        return [_norm(x, root, in_settings) for x in v]
    if isinstance(v, str):
        return _INDEX_UUID.sub(r"[\1/(uuid)]", v)
    return v


def _scored(query):
    """Whether QUERY scores by BM25 (a term or match on a field other than
    _id): its scores count deleted documents that Lucene has not merged away
    yet, so they depend on when the engine merged segments."""
    if not isinstance(query, dict):
        return False
    for k, v in query.items():
        if k in ("term", "match") and isinstance(v, dict) and "_id" not in v:
            return True
        if k == "bool" and isinstance(v, dict):
            return any(_scored(q) for c in ("must", "should") for q in
                       (v.get(c) if isinstance(v.get(c), list) else [v.get(c)]))
    return False


def normalize(method, path, text, request_body=None):
    """The comparable form of an answer body: parsed JSON without what
    legitimately differs between two nodes; non-JSON bodies as they are.

    - keys a node makes up: took, uuids, creation dates, node and cluster
      names, build details (IGNORED_KEYS);
    - GET /: the version number down to its major (the store reads only the
      major and the distribution; a flavour of the emulator stands for one
      major);
    - search hits without a sort: ties in score come in Lucene's internal
      document order, which a segment merge changes; the hits are compared
      as a set (ordered by index and id).  BM25 scores (_scored) too."""
    if method == "HEAD" or not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return text
    root = urllib.parse.urlsplit(path).path in ("", "/")
    v = _norm(v, root)
    if root and isinstance(v, dict) and isinstance(v.get("version"), dict):
        num = v["version"].get("number")
        if isinstance(num, str):
            v["version"]["number"] = num.split(".")[0]
    if "/_search" in path and isinstance(v, dict) and isinstance(v.get("hits"), dict):
        try:
            req = json.loads(request_body) if request_body else {}
        except ValueError:
            req = {}
        if not isinstance(req, dict):
            req = {}
        hits = v["hits"].get("hits")
        if "sort" not in req and isinstance(hits, list):
            if _scored(req.get("query")):
                v["hits"].pop("max_score", None)
                for h in hits:
                    h.pop("_score", None)
            hits.sort(key=lambda h: (h.get("_score") is None, -(h.get("_score") or 0),
                                     str(h.get("_index")), str(h.get("_id"))))
    return v


def differences(a, b, where=""):
    """Field-by-field differences between two normalized bodies."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append("%s/%s: missing on the left (right %s)" % (where, k, _short(b[k])))
            elif k not in b:
                out.append("%s/%s: missing on the right (left %s)" % (where, k, _short(a[k])))
            else:
                out += differences(a[k], b[k], "%s/%s" % (where, k))
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append("%s: %d items vs %d" % (where or "/", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, "%s[%d]" % (where, i))
    elif a != b or type(a) is not type(b):
        out.append("%s: %s vs %s" % (where or "/", _short(a), _short(b)))
    return out


def _short(v):
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= 300 else s[:300] + "..."


def compare(exchanges, answers, left="recorded", right="replayed"):
    """Every difference between the recorded answers and ANSWERS, as text."""
    out = []
    for i, (x, (status, body)) in enumerate(zip(exchanges, answers)):
        what = "#%d %s %s" % (i + 1, x["method"], x["path"])
        if x["status"] != status:
            out.append("%s: status %s (%s) vs %s (%s): %s | %s" % (
                what, x["status"], left, status, right,
                _short(x["response_body"]), _short(body)))
            continue
        a = normalize(x["method"], x["path"], x["response_body"], x.get("request_body"))
        b = normalize(x["method"], x["path"], body, x.get("request_body"))
        out += ["%s: %s" % (what, d) for d in differences(a, b)]
    return out
