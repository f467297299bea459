"""bench/plot draws the picture of a saved bench/run result.

Run on the results BENCHMARKS.md cites: for bench/run's, an SVG with a bar
per filesystem and workload; for bench/es-cluster's, a line per setting and
spread over the processes; the same bytes twice (no date in it), and a
clear error for a file that is not a result. Skipped, with the reason, where Debian's
python3-matplotlib is missing (bench/plot then exits 77).
"""
import json
import os
import re
import subprocess

import pytest

from conftest import SRCDIR

PLOT = os.path.join(SRCDIR, "bench", "plot")
RESULT = os.path.join(SRCDIR, "bench", "results", "20261127-030106-full.json")
CLUSTER = os.path.join(SRCDIR, "bench", "results", "20261127-es-cluster-warm.json")
PYTHON = os.environ.get("PYTHON") or "/usr/bin/python3"


def plot(*args):
    r = subprocess.run([PYTHON, PLOT] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    if r.returncode == 77:
        pytest.skip(r.stdout.strip())
    return r


def draw(result, tmp_path):
    """RESULT drawn twice: the SVG's text, having checked that both
    drawings succeeded and are the same bytes (no date in the picture)."""
    out, again = tmp_path / "first.svg", tmp_path / "again.svg"
    for svg in (out, again):
        r = plot(result, "-o", str(svg))
        assert r.returncode == 0, r.stderr
    assert again.read_bytes() == out.read_bytes()
    return out.read_text()


@pytest.mark.nofuse
def test_bench__plot_draws_every_filesystem_and_workload(tmp_path):
    svg = draw(RESULT, tmp_path)
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    with open(RESULT) as f:
        table = json.load(f)["table"]
    for name in ("treelockfs tree", "treelockfs none", "passthrough_ll", "bindfs"):
        assert name in svg, name
    for row in ("create", "rename_same", "fio_seqread_1m"):
        assert row in svg, row
    # one bar per (filesystem, workload) the run has: 5 filesystems x 11 rows
    bars = [w for w in ("treelockfs tree", "treelockfs none", "passthrough (timeouts=tlfs)",
                        "passthrough_ll", "bindfs")
            for row in ("create", "stat", "rename_same", "rename_cross", "rename_bigdir",
                        "unlink", "mp_same_disjoint_4", "mp_cross_shared_4",
                        "fio_seqread_1m", "fio_seqwrite_1m", "fio_randread_4k")
            if table[row].get(w)]
    assert len(bars) == 55
    assert len(re.findall(r'<g id="patch_', svg)) >= len(bars)


@pytest.mark.nofuse
def test_bench__plot_draws_an_es_cluster_run_by_setting_and_spread(tmp_path):
    svg = draw(CLUSTER, tmp_path)
    with open(CLUSTER) as f:
        res = json.load(f)
    lines = {(k.split("/")[1], int(k.split("/")[3])) for k in res
             if k.count("/") == 5 and "/tp/" in k and "/disjoint/" in k}
    assert lines == {("on", 1), ("on", 3), ("off", 1), ("off", 3)}
    # the legend names every line (matplotlib writes text as glyph paths
    # and keeps the string in a comment)
    for name, hosts in lines:
        label = "%s, %d host%s" % (name, hosts, "" if hosts == 1 else "s")
        assert "<!-- %s -->" % label in svg, label
    assert "opensearch 2.19.1" in svg and "renaming processes" in svg


@pytest.mark.nofuse
def test_bench__plot_refuses_a_file_that_is_not_a_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"info": {}}')
    r = plot(str(bad), "-o", str(tmp_path / "bad.svg"))
    assert r.returncode == 1
    assert "cannot read '%s'" % bad in r.stderr, r.stderr
    assert not (tmp_path / "bad.svg").exists()
