"""The fs index (fs_index=NAME) and the tree it describes, as the tests
compare them: the integration tests (tests/integration/test_fs_index.py)
and the multi-host storm (tests/multihost/test_fsindex.py), each with its
own way to reach the engine.

    docs = fs_docs(search, "treelockfs-locks-fs")   # {path: source}
    tree(backing, mtime=True) == indexed(docs, mtime=True)
"""
import os
import stat

TYPES = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p",
         stat.S_IFSOCK: "s", stat.S_IFCHR: "c", stat.S_IFBLK: "b"}
PAGE = 5000


def fs_docs(request, index):
    """{path: source} of every document of INDEX, read in pages sorted by
    path (search_after), after a refresh. REQUEST(method, path, body) sends
    one request to the engine and returns (status, decoded answer)."""
    request("POST", "/%s/_refresh" % index, None)
    out, after = {}, None
    while True:
        body = {"size": PAGE, "query": {"match_all": {}}, "sort": [{"path": {"order": "asc"}}]}
        if after is not None:
            body["search_after"] = [after]
        st, r = request("POST", "/%s/_search" % index, body)
        if st == 404:
            return {}
        assert st == 200, r
        hits = r["hits"]["hits"]
        for h in hits:
            out[h["_source"]["path"]] = h["_source"]
        if len(hits) < PAGE:
            return out
        after = hits[-1]["sort"][0]


def tree(root, mtime=False):
    """{key: (type, size, mode, uid, gid[, mtime_ns])} of every entry below
    ROOT (the root left out: it is indexed only once something noted it),
    a directory's size None."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            row = (TYPES[stat.S_IFMT(st.st_mode)], None if stat.S_ISDIR(st.st_mode) else st.st_size,
                   stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            out["/" + os.path.relpath(p, root)] = row + ((st.st_mtime_ns,) if mtime else ())
    return out


def indexed(docs, mtime=False):
    """DOCS (fs_docs()) in the form of tree()."""
    out = {}
    for k, d in docs.items():
        if k == "/":
            continue
        row = (d["type"], None if d["type"] == "d" else d["size"], d["mode"], d["uid"], d["gid"])
        out[k] = row + ((d["mtime"] * 1000000000 + d["mtime_ns"],) if mtime else ())
    return out
