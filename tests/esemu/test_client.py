"""The official Python client (Debian's python3-elasticsearch 7.17) against the emulator."""

import pytest

elasticsearch = pytest.importorskip("elasticsearch")
from elasticsearch import Elasticsearch, helpers  # noqa: E402
from elasticsearch.exceptions import ConflictError, NotFoundError, RequestError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARED = ("if (ctx._source.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); } "
          "ctx._source.lock_count++;")


@pytest.fixture(params=["es7", "es8"])
def client(request, emu7, emu8):
    emu = emu7 if request.param == "es7" else emu8
    emu.admin("POST", "/_esemu/reset")
    c = Elasticsearch([emu.url], max_retries=0)
    yield c
    c.close()


def test_official_client_end_to_end(client):
    es = client
    r = es.indices.create(index="locks", body={"mappings": {"properties": {"path": {"type": "keyword"},
                                                                          "owner": {"type": "keyword"}},
                                                           "_meta": {"strategy": "tree"}}})
    assert r["acknowledged"]
    assert es.indices.get_mapping(index="locks")["locks"]["mappings"]["_meta"] == {"strategy": "tree"}
    with pytest.raises(RequestError) as ei:
        es.indices.create(index="locks")
    assert ei.value.error == "resource_already_exists_exception"

    r = es.index(index="locks", id="/x", body={"path": "/x", "owner": "o1"})
    assert r["result"] == "created"
    r = es.create(index="locks", id="/excl", body={"lock_type": "exclusive", "owner": "o1"})
    assert r["result"] == "created"
    with pytest.raises(ConflictError) as ei:
        es.create(index="locks", id="/excl", body={"lock_type": "exclusive", "owner": "o2"})
    assert ei.value.error == "version_conflict_engine_exception"

    body = {"script": {"source": SHARED, "lang": "painless"}, "upsert": {"lock_type": "shared", "lock_count": 1,
                                                                          "owner": "o1"}}
    assert es.update(index="locks", id="/dir", body=body)["result"] == "created"
    assert es.update(index="locks", id="/dir", body=body, retry_on_conflict=3)["result"] == "updated"
    assert es.get(index="locks", id="/dir")["_source"]["lock_count"] == 2
    with pytest.raises(RequestError) as ei:
        es.update(index="locks", id="/excl", body=body)
    assert ei.value.status_code == 400
    assert ei.value.info["error"]["caused_by"]["type"] == "script_exception"

    ok, errors = helpers.bulk(es, [
        {"_op_type": "create", "_index": "locks", "_id": "/b1", "_source": {"owner": "o2", "path": "/b1"}},
        {"_op_type": "index", "_index": "locks", "_id": "/b2", "_source": {"owner": "o2", "path": "/b2"}},
        {"_op_type": "update", "_index": "locks", "_id": "/dir", "script": {"source": SHARED}},
        {"_op_type": "delete", "_index": "locks", "_id": "/x"},
    ])
    assert ok == 4 and errors == []

    r = es.mget(index="locks", body={"ids": ["/b1", "/nope"]})
    assert [d["found"] for d in r["docs"]] == [True, False]

    es.indices.refresh(index="locks")
    r = es.search(index="locks", body={"query": {"term": {"owner": "o2"}}}, seq_no_primary_term=True)
    assert sorted(h["_id"] for h in r["hits"]["hits"]) == ["/b1", "/b2"]
    assert "_seq_no" in r["hits"]["hits"][0]

    assert es.delete(index="locks", id="/b1", refresh=True)["result"] == "deleted"
    with pytest.raises(NotFoundError):
        es.get(index="locks", id="/b1")
    assert es.delete(index="locks", id="/excl")["result"] == "deleted"
    with pytest.raises(NotFoundError):
        es.delete(index="locks", id="/excl")
    assert es.info()["tagline"] == "You Know, for Search"
    es.indices.delete(index="locks")
    with pytest.raises(NotFoundError):  # the store never sends HEAD /index
        es.indices.get_mapping(index="locks")


def test_official_client_cas(client):
    es = client
    r = es.index(index="c", id="1", body={"a": 1}, refresh=True)
    es.index(index="c", id="1", body={"a": 2}, if_seq_no=r["_seq_no"], if_primary_term=r["_primary_term"])
    with pytest.raises(ConflictError):
        es.index(index="c", id="1", body={"a": 3}, if_seq_no=r["_seq_no"], if_primary_term=r["_primary_term"])
