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


# ---- delegations ---------------------------------------------------------------------------

LOCAL = "A#%d" % (checker.LOCAL_TICKET + 1)     # a covered rename's holder id


def dlg(t, pid, holder, d, *items):
    return "\t".join([str(t * MS), "delegate", str(pid), holder, d] + list(items))


def recall(t, pid, holder, why="wanted"):
    return "\t".join([str(t * MS), "recall", str(pid), holder, why])


def ret(t, pid, holder):
    return "\t".join([str(t * MS), "return", str(pid), holder])


# host A holds a delegation of /d0 from 5 to 40 and moves f0 into s0 in its
# memory; B's rename of f0 waits for the recall, then moves it to d1
DELEG_A = [dlg(5, 100, "A#d3", "/d0", "S:/", "X:/d0"),
           acq(10, 100, LOCAL, "/d0/f0", "/d0/s0/f0", "S:/", "S:/d0", "X:/d0/f0", "S:/d0/s0",
               "X:/d0/s0/f0"),
           rel(20, 100, LOCAL),
           recall(30, 100, "A#d3"),
           ret(40, 100, "A#d3")]
DELEG_RENAMES = [ren("A", 9, 21, "/d0/f0", "/d0/s0/f0"),
                 ren("B", 25, 51, "/d0/s0/f0", "/d1/f0")]
FINAL_F0_IN_D1 = final_of(dict(INITIAL, f0="d1"))


def test_checker__a_covered_rename_then_a_recall_has_no_violation_and_is_counted():
    holds = {"A": DELEG_A,
             "B": [acq(41, 200, "B#1", "/d0/s0/f0", "/d1/f0", "S:/", "S:/d0", "S:/d0/s0",
                       "X:/d0/s0/f0", "S:/d1", "X:/d1/f0"), rel(50, 200, "B#1")]}
    nemesis = [{"t": 35 * MS, "kind": "pause", "host": "A", "pid": 100, "phase": "start"},
               {"t": 45 * MS, "kind": "cut", "host": "A", "phase": "start"}]
    rep = run(holds, DELEG_RENAMES, nemesis, final=FINAL_F0_IN_D1)
    assert rep["violations"] == []
    assert rep["holds_covered"] == 1
    assert rep["delegations_granted"] == 1 and rep["delegations_recalled"] == 1
    # at 35 B's rename waited for A's delegation; at 45 it held its locks
    assert rep["faults_in_recall"] == {"pause": 1}


def test_checker__a_covered_rename_overlapping_another_hosts_rename_is_a_violation():
    # B got its locks at 15 while A's covered rename held /d0/f0 (10-20)
    holds = {"A": DELEG_A,
             "B": [acq(15, 200, "B#1", "/d0/f0", "/d1/f0", "S:/", "S:/d0", "X:/d0/f0", "S:/d1",
                       "X:/d1/f0"), rel(18, 200, "B#1")]}
    renames = [ren("A", 9, 21, "/d0/f0", "/d0/s0/f0"), ren("B", 14, 19, "/d0/f0", "/d1/f0")]
    rep = run(holds, renames, final=FINAL_F0_IN_D1)
    over = [v for v in rep["violations"] if v["rule"] == "overlap"]
    assert [v["key"] for v in over] == ["/d0/f0"], rep["violations"]
    # attributed to host A's daemon and the private store's holder
    assert "A/100/" + LOCAL in over[0]["holds"] and "B/200/B#1" in over[0]["holds"]


def test_checker__a_covered_rename_outside_its_daemons_delegations_is_a_violation():
    # the rename's target is below /d1, which A was never delegated; and one
    # after the return
    holds = {"A": [dlg(5, 100, "A#d3", "/d0", "S:/", "X:/d0"),
                   acq(10, 100, LOCAL, "/d0/f0", "/d1/f0", "X:/d0/f0", "X:/d1/f0"),
                   rel(20, 100, LOCAL),
                   recall(30, 100, "A#d3", "own"), ret(40, 100, "A#d3"),
                   acq(45, 100, "A#%d" % (checker.LOCAL_TICKET + 2), "/d1/f0", "/d0/f0",
                       "X:/d1/f0", "X:/d0/f0"),
                   rel(46, 100, "A#%d" % (checker.LOCAL_TICKET + 2))]}
    renames = [ren("A", 9, 21, "/d0/f0", "/d1/f0"), ren("A", 44, 47, "/d1/f0", "/d0/f0")]
    rep = run(holds, renames)
    assert rules(rep) == ["covered", "covered"], rep["violations"]
    # a delegation of another daemon (pid) of the host covers nothing
    holds = {"A": [dlg(5, 101, "A#d3", "/d0", "S:/", "X:/d0"),
                   acq(10, 100, LOCAL, "/d0/f0", "/d0/s0/f0", "X:/d0/f0", "X:/d0/s0/f0"),
                   rel(20, 100, LOCAL), ret(40, 101, "A#d3")]}
    rep = run(holds, [ren("A", 9, 21, "/d0/f0", "/d0/s0/f0")],
              final=final_of(dict(INITIAL, f0="s0")))
    assert rules(rep) == ["covered"], rep["violations"]


def test_checker__a_delegation_ends_returned_or_with_its_killed_daemon():
    holds = {"A": DELEG_A[:3]}
    renames = DELEG_RENAMES[:1]
    final = final_of(dict(INITIAL, f0="s0"))
    assert rules(run(holds, renames, final=final)) == ["deleg-ends"]
    kill = {"t": 25 * MS, "kind": "kill", "host": "A", "pid": 100, "phase": "start"}
    assert run(holds, renames, [kill], final=final)["violations"] == []
    # lines of a delegation never granted are reported
    assert rules(run({"A": [ret(40, 100, "A#d9")]})) == ["log"]


def test_checker__a_kill_of_the_delegate_strikes_while_its_recall_is_under_way():
    holds = {"A": DELEG_A[:3]}
    renames = DELEG_RENAMES[:1] + [ren("B", 25, 51, "/d0/s0/f0", "/d1/f0", errno.ENOLCK)]
    kill = {"t": 30 * MS, "kind": "kill", "host": "A", "pid": 100, "phase": "start"}
    rep = run(holds, renames, [kill], final=final_of(dict(INITIAL, f0="s0")))
    assert rep["violations"] == [] and rep["faults_in_recall"] == {"kill": 1}
