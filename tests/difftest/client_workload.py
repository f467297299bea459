"""A small lock workload through an official Python client.

    python3 client_workload.py elasticsearch|opensearch URL INDEX

Creates a lock document with op_type create, creates it again (409), takes
it over with if_seq_no/if_primary_term, fails a stale take-over (409),
searches for it, deletes it and fails a stale delete (409): prints one JSON
object with what each step saw (no seq_no values: they are compared as
relations)."""
import json
import sys

TIMEOUT = 120


def main():
    kind, url, index_name = sys.argv[1:4]
    if kind == "opensearch":
        from opensearchpy import OpenSearch as Client
        from opensearchpy.exceptions import ConflictError, NotFoundError
    else:
        from elasticsearch import Elasticsearch as Client
        from elasticsearch.exceptions import ConflictError, NotFoundError
    import importlib
    mod = importlib.import_module("opensearchpy" if kind == "opensearch" else "elasticsearch")
    v8 = kind == "elasticsearch" and mod.__version__[0] >= 8
    # a generous timeout per request (the clients' default is 10 s): a real
    # node on a busy machine answers its first index creation later
    es = Client(url, **({"request_timeout": TIMEOUT} if v8 else {"timeout": TIMEOUT}))
    out = {"client": "%s %s" % (mod.__name__, ".".join(map(str, mod.__version__)))}

    def put(**kw):
        # 8.x takes document=, 7.x and opensearch-py body=
        if v8:
            kw["document"] = kw.pop("body")
        return es.index(index=index_name, **kw)
    try:
        es.indices.delete(index=index_name)
    except NotFoundError:
        pass
    mapping = {"dynamic": False, "properties": {"owner": {"type": "keyword"},
                                                "lock_type": {"type": "keyword"}}}
    if v8:
        es.indices.create(index=index_name, mappings=mapping, settings={"number_of_shards": 1})
    else:
        es.indices.create(index=index_name, body={"settings": {"number_of_shards": 1},
                                                  "mappings": mapping})
    r = put(id="/a", body={"owner": "o1", "lock_type": "exclusive"}, op_type="create",
              refresh="true")
    out["create"] = r["result"]
    first = (r["_seq_no"], r["_primary_term"])
    try:
        put(id="/a", body={"owner": "o2", "lock_type": "exclusive"}, op_type="create")
        out["create_again"] = "no error"
    except ConflictError as e:
        out["create_again"] = [e.status_code if hasattr(e, "status_code") else e.meta.status,
                               e.error if isinstance(e.error, str) else str(e.error)]
    r = put(id="/a", body={"owner": "o2", "lock_type": "exclusive"}, if_seq_no=first[0],
              if_primary_term=first[1], refresh="true")
    out["take_over"] = r["result"]
    second = (r["_seq_no"], r["_primary_term"])
    out["seq_no_grew"] = second[0] > first[0]
    try:
        put(id="/a", body={"owner": "o3"}, if_seq_no=first[0], if_primary_term=first[1])
        out["stale_take_over"] = "no error"
    except ConflictError as e:
        out["stale_take_over"] = "conflict"
    q = {"term": {"owner": "o2"}}
    r = es.search(index=index_name, query=q, seq_no_primary_term=True) if v8 else \
        es.search(index=index_name, body={"query": q}, seq_no_primary_term=True)
    hits = r["hits"]["hits"]
    out["search"] = [(h["_id"], h["_source"]["owner"], h["_seq_no"] == second[0]) for h in hits]
    out["search_total"] = r["hits"]["total"]["value"]
    r = es.get(index=index_name, id="/a")
    out["get"] = [r["found"], r["_source"]["owner"], r["_seq_no"] == second[0]]
    try:
        es.delete(index=index_name, id="/a", if_seq_no=first[0], if_primary_term=first[1])
        out["stale_delete"] = "no error"
    except ConflictError:
        out["stale_delete"] = "conflict"
    r = es.delete(index=index_name, id="/a", if_seq_no=second[0], if_primary_term=second[1])
    out["delete"] = r["result"]
    try:
        es.get(index=index_name, id="/a")
        out["get_deleted"] = "found"
    except NotFoundError:
        out["get_deleted"] = "not found"
    es.indices.delete(index=index_name)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
