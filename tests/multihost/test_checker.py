"""The checker on hand-made logs: it must report each kind of violation,
and accept what the design allows (fenced holders, killed daemons)."""
import errno
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checker  # noqa: E402


MS = 1000000
INITIAL = {"d0": "/", "d1": "/", "s0": "d0", "f0": "d0", "f1": "s0"}
CONTENTS = {"f0": "f0", "f1": "f1"}


def acq(t, pid, holder, src, dst, *items):
    return "\t".join([str(t * MS), "acquire", str(pid), holder, src, dst] + list(items))


def rel(t, pid, holder, res=0):
    return "\t".join([str(t * MS), "release", str(pid), holder, str(res)])


def ren(host, t0, t1, src, dst, res=0):
    return {"host": host, "t0": t0 * MS, "t1": t1 * MS, "src": src, "dst": dst, "res": res}


def final_of(tree):
    return [[n, p] for n, p in sorted(tree.items())]


def run(holds, renames=(), nemesis=(), final=None, final_contents=None, leftovers=()):
    final = final if final is not None else final_of(INITIAL)
    return checker.check(holds, list(renames), list(nemesis), INITIAL, final, CONTENTS,
                         dict(final_contents or CONTENTS), list(leftovers))


def rules(rep):
    return sorted(v["rule"] for v in rep["violations"])


# host A moves f0 from d0 to d1, host B moves f0 back, one after the other
CLEAN_HOLDS = {
    "A": [acq(10, 100, "A#1", "/d0/f0", "/d1/f0", "S:/d0", "X:/d0/f0", "S:/d1", "X:/d1/f0"),
          rel(20, 100, "A#1")],
    "B": [acq(21, 200, "B#1", "/d1/f0", "/d0/f0", "S:/d0", "X:/d0/f0", "S:/d1", "X:/d1/f0"),
          rel(30, 200, "B#1")],
}
CLEAN_RENAMES = [ren("A", 9, 21, "/d0/f0", "/d1/f0"), ren("B", 20, 31, "/d1/f0", "/d0/f0")]


def test_checker__clean_run_has_no_violation():
    rep = run(CLEAN_HOLDS, CLEAN_RENAMES)
    assert rep["violations"] == []
    assert rep["holds"] == 2 and rep["renames"] == 2


def test_checker__two_exclusive_holds_that_both_renamed_overlap():
    holds = {"A": CLEAN_HOLDS["A"],
             "B": [acq(15, 200, "B#1", "/d1/f0", "/d0/f0", "X:/d1/f0"), rel(25, 200, "B#1")]}
    renames = [ren("A", 9, 21, "/d0/f0", "/d1/f0"), ren("B", 14, 26, "/d1/f0", "/d0/f0")]
    rep = run(holds, renames)
    assert rules(rep) == ["overlap"]
    assert "/d1/f0" == rep["violations"][0]["key"]
    assert "5.000 ms" in rep["violations"][0]["what"]


def test_checker__exclusive_against_shared_is_a_conflict_shared_against_shared_is_not():
    holds = {"A": [acq(10, 100, "A#1", "/d0", "/d2", "X:/d0", "X:/d2"), rel(20, 100, "A#1")],
             "B": [acq(12, 200, "B#1", "/d0/f0", "/d1/f0", "S:/d0", "X:/d0/f0"),
                   rel(18, 200, "B#1")],
             "C": [acq(22, 300, "C#1", "/d0/s0/f1", "/d1/f1", "S:/d0", "X:/d0/s0/f1"),
                   rel(30, 300, "C#1")],
             "D": [acq(25, 400, "D#1", "/d0/f0", "/d1/f0", "S:/d0", "X:/d0/f0"),
                   rel(28, 400, "D#1")]}
    rep = run(holds)
    assert rules(rep) == ["overlap"]
    assert rep["violations"][0]["holds"] == ["A/100/A#1", "B/200/B#1"]


def test_checker__a_fenced_holder_that_failed_is_no_violation():
    # A paused past its lease: B took over and renamed; A, resumed, was
    # fenced (ENOLCK) and renamed nothing
    holds = {"A": [acq(10, 100, "A#1", "/d0/f0", "/d1/f0", "X:/d0/f0"),
                   rel(40, 100, "A#1", errno.ENOLCK)],
             "B": [acq(25, 200, "B#1", "/d0/f0", "/d1/f0", "X:/d0/f0"), rel(30, 200, "B#1")]}
    renames = [ren("A", 9, 41, "/d0/f0", "/d1/f0", errno.ENOLCK),
               ren("B", 24, 31, "/d0/f0", "/d1/f0")]
    final = dict(INITIAL, f0="d1")
    rep = run(holds, renames, final=final_of(final))
    assert rep["violations"] == []
    assert rep["overlaps_tolerated"] == 1 and rep["holds_fenced"] == 1
    # the same overlap where A's rename went through is one
    holds["A"][1] = rel(40, 100, "A#1", 0)
    assert rules(run(holds, renames, final=final_of(final))) == ["overlap"]


def test_checker__a_daemon_stopped_after_its_last_check_is_the_known_limit():
    # A held X:/d0/f0 from 10 to 40 ms and renamed; its daemon was stopped
    # at 35 ms; B took over at 25 ms and renamed too
    holds = {"A": [acq(10, 100, "A#1", "/d0/f0", "/d1/f0", "X:/d0/f0"), rel(40, 100, "A#1")],
             "B": [acq(25, 200, "B#1", "/d0/f0", "/d1/f0", "X:/d0/f0"), rel(30, 200, "B#1")]}
    renames = [ren("A", 9, 41, "/d0/f0", "/d1/f0"), ren("B", 24, 31, "/d0/f0", "/d1/f0")]
    final = final_of(dict(INITIAL, f0="d1"))

    def go(pause_ms, pid=100, fenced_ms=20):
        nemesis = [{"t": pause_ms * MS, "kind": "pause", "host": "A", "pid": pid,
                    "phase": "start"}]
        return checker.check(holds, renames, nemesis, INITIAL, final, CONTENTS, dict(CONTENTS),
                             [], fenced_ns=None if fenced_ms is None else fenced_ms * MS)
    # stopped 25 ms after its grant, past the 20 ms before its last check
    rep = go(35)
    assert rep["violations"] == [] and rep["overlaps_limit"] == 1
    # stopped 5 ms after its grant: fencing should have refused its rename
    rep = go(15)
    assert rules(rep) == ["overlap"] and rep["overlaps_limit"] == 0
    # another daemon of host A stopped, or no FENCED_NS given: a violation
    assert rules(go(35, pid=101)) == ["overlap"]
    assert rules(go(35, fenced_ms=None)) == ["overlap"]


def test_checker__a_killed_daemon_ends_its_hold_and_an_unended_hold_is_reported():
    holds = {"A": [acq(10, 100, "A#1", "/d0/f0", "/d1/f0", "X:/d0/f0")],
             "B": [acq(25, 200, "B#1", "/d0/f0", "/d1/f0", "X:/d0/f0"), rel(30, 200, "B#1")]}
    renames = [ren("A", 9, 12, "/d0/f0", "/d1/f0", errno.ENOTCONN),
               ren("B", 24, 31, "/d0/f0", "/d1/f0")]
    final = final_of(dict(INITIAL, f0="d1"))
    kill = [{"t": 11 * MS, "kind": "kill", "host": "A", "pid": 100}]
    rep = run(holds, renames, kill, final=final)
    assert rep["violations"] == [] and rep["holds_killed"] == 1
    rep = run(holds, renames, [], final=final)
    assert rules(rep) == ["hold-ends"]


def test_checker__a_rename_that_returned_0_must_be_in_the_final_tree():
    renames = [ren("A", 9, 21, "/d0/f0", "/d1/f0")]
    # f0 is still in d0 although the rename returned 0
    rep = run(CLEAN_HOLDS, renames)
    assert rules(rep) == ["rename-kept"]
    assert "f0 is in d0" in rep["violations"][0]["what"]
    # a rename that failed for sure must not have happened either
    renames = [ren("A", 9, 21, "/d0/f0", "/d1/f0", errno.EBUSY)]
    rep = run({}, renames, final=final_of(dict(INITIAL, f0="d1")))
    assert rules(rep) == ["rename-kept"]
    # one whose daemon died under it may have
    renames = [ren("A", 9, 21, "/d0/f0", "/d1/f0", errno.ENOTCONN)]
    assert run({}, renames, final=final_of(dict(INITIAL, f0="d1")))["violations"] == []
    assert run({}, renames)["violations"] == []


def test_checker__overlapping_renames_of_one_entry_may_end_either_way():
    renames = [ren("A", 10, 30, "/d0/f0", "/d1/f0"), ren("B", 20, 40, "/d1/f0", "/d0/f0")]
    assert run({}, renames, final=final_of(dict(INITIAL, f0="d1")))["violations"] == []
    assert run({}, renames)["violations"] == []
    # not so when one ended before the other began
    renames[1]["t0"] = 31 * MS
    assert rules(run({}, renames, final=final_of(dict(INITIAL, f0="d1")))) == ["rename-kept"]


def test_checker__lost_duplicated_unknown_and_changed_entries():
    final = final_of(INITIAL)
    final = [e for e in final if e[0] != "f1"] + [["f0", "d1"], ["x9", "/"]]
    rep = run({}, [], final=final, final_contents={"f0": "f0"})
    assert rules(rep) == ["duplicate", "lost", "unknown"]
    rep = run({}, [], final_contents={"f0": "f0", "f1": "garbage"})
    assert rules(rep) == ["content"]


def test_checker__documents_left_in_the_index():
    left = [{"id": "/d0", "source": {"lock_type": "shared", "lock_count": 1}},
            {"id": "intent:abc", "source": {"from": "/a", "to": "/b"}},
            {"id": "owner:A", "source": {}}]
    rep = run(CLEAN_HOLDS, CLEAN_RENAMES, leftovers=left)
    assert rules(rep) == ["leftover"] * 3
    assert "intent document" in rep["violations"][1]["what"]


def test_checker__unreadable_or_unpaired_log_lines():
    holds = {"A": ["garbage", rel(5, 100, "A#9")]}
    assert rules(run(holds)) == ["log", "log"]


def test_checker__escaped_keys_and_the_command(tmp_path):
    holds = {"A": [acq(10, 100, "A#1", "/a\\x20b", "/c", "X:/a\\x20b"), rel(20, 100, "A#1")],
             "B": [acq(15, 200, "B#1", "/a b", "/d", "X:/a\\x20b"), rel(25, 200, "B#1")]}
    files = []
    for h, lines in holds.items():
        p = tmp_path / ("holds" + h)
        p.write_text("\n".join(lines) + "\n")
        files.append("%s=%s" % (h, p))
    (tmp_path / "w").write_text("")
    (tmp_path / "n").write_text("")
    (tmp_path / "t").write_text(json.dumps({
        "initial": INITIAL, "final": final_of(INITIAL), "contents": CONTENTS,
        "final_contents": CONTENTS, "leftovers": []}))
    r = subprocess.run([sys.executable, os.path.join(HERE, "checker.py"), "--holds"] + files +
                       ["--workload", str(tmp_path / "w"), "--nemesis", str(tmp_path / "n"),
                        "--trees", str(tmp_path / "t")], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    assert [v["key"] for v in rep["violations"]] == ["/a b"]


def test_checker__renames_that_returned_0_against_the_holds():
    # B's rename returned 0 but its hold says it failed
    holds = dict(CLEAN_HOLDS, B=[CLEAN_HOLDS["B"][0], rel(30, 200, "B#1", errno.ENOENT)])
    rep = run(holds, CLEAN_RENAMES, final=final_of(dict(INITIAL, f0="d1")))
    assert rules(rep) == ["result"]
    # a rename that returned 0 and no daemon saw (the kernel's no-op when
    # its cache shows one file at both paths) is counted, not applied
    renames = CLEAN_RENAMES + [ren("A", 40, 41, "/d1/f0", "/d0/s0/f0")]
    rep = run(CLEAN_HOLDS, renames)
    assert rep["violations"] == [] and rep["renames_unseen"] == 1
    assert rep["unseen"] == [{"host": "A", "src": "/d1/f0", "dst": "/d0/s0/f0"}]
