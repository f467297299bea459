"""Directory delegations (issue 44, item 1): a mount that renames
repeatedly in a directory keeps the store locks a rename of it would take
and renames below it in its own memory, until another mount asks."""
import errno
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import CTL, makedirs, write
from es_helpers import (ES8_AND_ENGINES, ctl, es_mounts, es_opts, forget_mount,  # noqa: F401
                        held_by, lock_docs, owner_id, PATIENT, start_op, wait_for)
from test_ctl_json import jsonschema, validated
from test_metrics import PROMTOOL, parse, value

# kept however long a busy machine makes a test pause after the grant
# (test_deleg__idle_delegation_is_given_back: the idle give-back)
DELEG = ["delegations=on", "delegation_recall=1", "delegation_idle=3600"]


def requests_of(m):
    return m.stats()["store_requests"]


def rename_many(m, d, n, start=0):
    for i in range(start, start + n):
        os.rename(m.path(d, "f%d" % i), m.path(d, "f%d" % (i + 1)))


def delegated(backend, key):
    src = held_by(backend, key)
    return bool(src) and any("#d" in h for h in (src.get("holders") or {}))


@ES8_AND_ENGINES
def test_deleg__renames_in_one_directory_stay_local(backend, es_mounts):
    (a,) = es_mounts(backend, "A", opts={"A": DELEG + PATIENT})
    makedirs(a, "dir")
    write(a, "dir/f0")
    rename_many(a, "dir", 10)
    wait_for(lambda: a.stats().get("delegations_held") == 1, 60, what="a delegation of /dir")
    before = requests_of(a)
    rename_many(a, "dir", 100, start=10)
    after = requests_of(a)
    st = a.stats()
    print("\n%s delegations on: %.3f store requests per rename" %
          (backend.flavor, (after - before) / 100.0))
    assert (after - before) / 100.0 <= 0.05, (before, after, st)
    assert st["renames_local"] >= 100, st
    assert delegated(backend, "/dir")
    assert any("#d" in line and "/dir" in line for line in a.locks()), a.locks()
    assert os.path.exists(a.path("dir/f110"))


@ES8_AND_ENGINES
def test_deleg__off_keeps_two_requests_per_rename(backend, es_mounts):
    (a,) = es_mounts(backend, "A", opts={"A": ["delegations=off"] + PATIENT})
    makedirs(a, "dir")
    write(a, "dir/f0")
    rename_many(a, "dir", 10)
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    before = requests_of(a)
    rename_many(a, "dir", 20, start=10)
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    after = requests_of(a)
    print("\n%s delegations off: %.3f store requests per rename" %
          (backend.flavor, (after - before) / 20.0))
    # two a rename (a release may share a request with the next acquire)
    assert after - before >= 30, (before, after)
    assert "delegations_held" not in a.stats()


@ES8_AND_ENGINES
def test_deleg__guide_scenario_with_delegations(backend, es_mounts):
    """A delegated /clinton/projects/elasticsearch; B moves /clinton: B's
    move waits for A's recall; A's later rename of the old path fails with
    ENOENT."""
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG + PATIENT, "B": DELEG + PATIENT})
    makedirs(a, "clinton", "projects", "elasticsearch")
    d = "clinton/projects/elasticsearch"
    write(a, d + "/f0")
    rename_many(a, d, 5)
    wait_for(lambda: a.stats().get("delegations_held") == 1, 60, what="A's delegation")
    big = start_op(os.rename, b.path("clinton"), b.path("bill"))
    big.finish(120)
    assert big.error is None, (big.error, b.log())
    wait_for(lambda: a.stats().get("delegations_recalled", 0) >= 1, 60, what="the recall")
    # as the guide's test across mounts: ENOENT, or (A's kernel still
    # knows the moved directory) the rename acts where the directory is now
    try:
        os.rename(a.path(d, "f5"), a.path(d, "g"))
        assert os.path.exists(a.bpath("bill/projects/elasticsearch/g"))
    except OSError as e:
        assert e.errno == errno.ENOENT, e
        assert os.path.exists(a.bpath("bill/projects/elasticsearch/f5"))
    assert not os.path.exists(a.bpath("clinton"))


def delegate_dir(a):
    """Makes /dir with dir/f0 and dir/other on A, renames f0 along to f5
    there, and waits until A holds the delegation of /dir."""
    makedirs(a, "dir")
    write(a, "dir/f0")
    write(a, "dir/other")
    rename_many(a, "dir", 5)
    wait_for(lambda: a.stats().get("delegations_held") == 1, 60, what="A's delegation")


@ES8_AND_ENGINES
def test_deleg__recall_while_the_delegate_renames(backend, es_mounts, tmp_path):
    """B's rename in A's delegated directory, while A's rename under the
    delegation holds its locks: B waits for it, then for the recall. A's
    hold log tells the delegation's life around its covered rename."""
    log = str(tmp_path / "holds")
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG + ["rename_delay_ms=400",
                                                            "hold_log=" + log] + PATIENT,
                                              "B": PATIENT})
    delegate_dir(a)
    local = a.stats()["renames_local"]
    mid = start_op(os.rename, a.path("dir/f5"), a.path("dir/f6"))
    # B's rename starts once A's is under way under the delegation (it then
    # holds 400 ms), however late a busy machine lets that be
    wait_for(lambda: a.stats()["renames_local"] > local, 60,
             what="A's rename under the delegation")
    t0 = time.monotonic()
    mine = start_op(os.rename, b.path("dir/other"), b.path("dir/mine"))
    mine.finish(120)
    waited = time.monotonic() - t0
    mid.finish(120)
    assert mid.error is None, (mid.error, a.log())
    assert mine.error is None, (mine.error, b.log())
    # B got its locks only once A's rename under the delegation was done
    assert mid.t1 <= mine.t1
    st = a.stats()
    assert st["renames_local"] == local + 1, st
    assert st["delegations_recalled"] >= 1, st
    # the recall is seen within delegation_recall (1 s), then the rename
    # under way ends and the release goes: generous slack for a busy machine
    assert st["recall_wait_max_us"] <= 1000000 + 5000000, st
    assert waited < 20, waited
    assert os.path.exists(a.bpath("dir/f6")) and os.path.exists(a.bpath("dir/mine"))
    assert st["delegations_held"] == 0, st
    # delegate /dir (its plan), the covered rename (a holder of the private
    # store, tickets from 2**62) inside it, recalled as B waited, returned
    # once the covered rename released
    with open(log) as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    ev = [(f[1], f[3]) for f in lines]
    grant = [f for f in lines if f[1] == "delegate" and f[4] == "/dir"]
    assert len(grant) == 1 and "X:/dir" in grant[0][5:], lines
    g = grant[0][3]
    covered = [f for f in lines if f[1] == "acquire" and f[4] == "/dir/f5"]
    assert len(covered) == 1 and int(covered[0][3].rpartition("#")[2]) >= 1 << 62, lines
    h = covered[0][3]
    assert ev.index(("delegate", g)) < ev.index(("acquire", h)) < ev.index(("release", h)) \
        < ev.index(("return", g)), ev
    recalls = [f for f in lines if f[1] == "recall"]
    assert recalls and recalls[0][3:] == [g, "wanted"], lines


@ES8_AND_ENGINES
def test_deleg__killed_delegate_is_taken_over(backend, es_mounts):
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG, "B": []}, lease_ttl=2)
    delegate_dir(a)
    t0 = time.monotonic()
    a.kill(signal.SIGKILL)
    forget_mount(a)
    os.rename(b.path("dir/other"), b.path("dir/mine"))
    # the take-over: 2 x lease_ttl + lease_ttl/3 + a backoff step, slack
    assert time.monotonic() - t0 < 2 * 2 + 10
    assert os.path.exists(b.bpath("dir/mine"))


@ES8_AND_ENGINES
def test_deleg__paused_delegate_loses_it(backend, es_mounts):
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG, "B": []}, lease_ttl=2)
    delegate_dir(a)
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        os.rename(b.path("dir/other"), b.path("dir/mine"))
        # B holds /dir for 3 s while A comes back
        hold = start_op(os.rename, b.path("dir/mine"), b.path("dir/mine2"))
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    hold.finish(120)
    # A's renames after the pause: refused (fenced) or done under new locks
    try:
        os.rename(a.path("dir/f5"), a.path("dir/f6"))
        done = True
    except OSError as e:
        assert e.errno in (errno.ENOLCK, errno.EBUSY), e
        done = False
    if done:
        assert os.path.exists(a.bpath("dir/f6"))
    assert os.path.exists(b.bpath("dir/mine2"))


@ES8_AND_ENGINES
def test_deleg__crossing_moves_between_delegated_directories(backend, es_mounts):
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG + PATIENT, "B": DELEG + PATIENT})
    makedirs(a, "a")
    makedirs(a, "b")
    write(a, "a/f0")
    write(a, "b/f0")
    write(a, "a/x")
    write(a, "b/y")
    rename_many(a, "a", 5)
    rename_many(b, "b", 5)
    wait_for(lambda: a.stats().get("delegations_held") == 1, 60, what="A's delegation")
    wait_for(lambda: b.stats().get("delegations_held") == 1, 60, what="B's delegation")
    ops = [start_op(os.rename, a.path("a/x"), a.path("b/x")),
           start_op(os.rename, b.path("b/y"), b.path("a/y"))]
    for op in ops:
        op.finish(120)
        assert op.error is None, op.error
    assert os.path.exists(a.bpath("b/x")) and os.path.exists(a.bpath("a/y"))


def mgets(backend):
    return backend.stats()["requests"].get("mget", 0)


@pytest.mark.backends("emulator-es8")
def test_deleg__idle_delegation_is_given_back(backend, es_mounts):
    """A delegation no rename used for delegation_idle is given back at the
    poller's next look, not recalled: the store holds none of its locks,
    the poller asks nothing more, another mount's rename there waits for
    no recall, and the directory is delegated again (no cooldown)."""
    idle, recall = 1.0, 0.5
    a, b = es_mounts(backend, "A", "B", opts={
        "A": ["delegations=on", "delegation_recall=%g" % recall,
              "delegation_idle=%g" % idle] + PATIENT,
        "B": PATIENT})
    delegate_dir(a)
    backend.reset_stats()
    # unused since the grant, which is before now: idle + a poll (recall/2)
    # at most, slack for a busy machine
    wait_for(lambda: a.stats()["delegations_held"] == 0, idle + recall + 5,
             what="the idle give-back")
    st = a.stats()
    assert st["delegations_idle_returned"] == 1 and st["delegations_recalled"] == 0, st
    assert mgets(backend) >= 1  # the poller looked while it held it
    assert not delegated(backend, "/dir")
    wait_for(lambda: lock_docs(backend) == {}, 10, what="no lock left")
    # nothing held: the poller sends nothing (two polls' time and more)
    backend.reset_stats()
    time.sleep(4 * recall / 2)
    assert mgets(backend) == 0, backend.stats()
    # B's rename there: no recall of A's
    os.rename(b.path("dir/other"), b.path("dir/mine"))
    assert a.stats()["delegations_recalled"] == 0
    assert os.path.exists(a.bpath("dir/mine"))
    s = parse(a.ctl("metrics"))
    assert value(s, "treelockfs_delegations_idle_returned_total") == 1
    # no cooldown: A's next two renames there take it again
    rename_many(a, "dir", 2, start=5)
    wait_for(lambda: a.stats()["delegations_held"] == 1, 60, what="A's delegation again")
    assert a.stats()["delegations_granted"] == 2


def promtool_check(text):
    """promtool accepts the exposition TEXT without a remark (when it is
    installed)."""
    if not PROMTOOL:
        return
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        r.stdout + r.stderr


@pytest.mark.backends("emulator-es8")
def test_deleg__listings_and_metrics_show_delegations(backend, es_mounts):
    """A delegation shows as such in treelockctl locks (table and JSON),
    in the mount's .treelockfs/locks (with how it serves) and in owners;
    after B's recall, the metrics count it granted and recalled and its
    recall wait."""
    if jsonschema is None:
        pytest.skip("no python3 jsonschema (Debian package python3-jsonschema)")
    # B with delegations=off: its metrics show the families' absence
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG + PATIENT,
                                              "B": PATIENT + ["delegations=off"]})
    delegate_dir(a)
    local = a.stats()["renames_local"]
    os.rename(a.path("dir/f5"), a.path("dir/f6"))  # under the delegation
    assert a.stats()["renames_local"] == local + 1
    a_owner = owner_id(backend, "A")

    doc = validated(ctl(backend, "locks", "--json"), "locks")
    rows = {l["key"]: l for l in doc["locks"]}
    deleg = rows["/dir"]["delegation"]
    assert deleg is not None, rows
    assert deleg["directory"] == "/dir" and deleg["mode"] == "exclusive", deleg
    assert re.fullmatch(re.escape(a_owner) + r"#d\d+", deleg["holder"]), deleg
    assert all(l["delegation"] is None for k, l in rows.items() if k != "/dir"), rows
    table = ctl(backend, "locks").stdout
    assert table.splitlines()[0].split()[-1] == "DELEGATION", table
    line = [l for l in table.splitlines() if l.startswith("/dir ")]
    assert len(line) == 1 and line[0].endswith("delegated"), table

    # the mount's own listing knows how its delegation serves
    own = [l for l in a.locks() if l.endswith(" /dir")]
    assert len(own) == 1, a.locks()
    m = re.search(r" delegation:held,users=0,served=(\d+) /dir$", own[0])
    assert m and int(m.group(1)) >= 1, own
    assert all(" - " in l for l in a.locks() if not l.endswith(" /dir")), a.locks()
    assert a.ctl("locks").startswith("# mode count age_ms waiters holder delegation key\n")
    # B's view of the store shows the delegation, not how A's serves
    assert any(l.endswith(" delegation /dir") for l in b.locks()), b.locks()

    doc = validated(ctl(backend, "owners", "--json", "--no-wait"), "owners")
    count = {o["name"]: o["delegations"] for o in doc["owners"]}
    assert count["A"] == 1 and count["B"] == 0, doc
    table = ctl(backend, "owners", "--no-wait").stdout
    assert table.splitlines()[0].split()[-2:] == ["DELEGATIONS", "STATE"], table
    cols = [l.split() for l in table.splitlines()[1:] if l.startswith(a_owner + " ")]
    assert len(cols) == 1 and cols[0][-2] == "1", table

    # B asks: A gives the delegation back
    os.rename(b.path("dir/other"), b.path("dir/mine"))
    wait_for(lambda: a.stats()["delegations_recalled"] >= 1 and
             a.stats()["delegations_held"] == 0, 60, what="A's recall and release")
    r = subprocess.run([CTL, "metrics", a.mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    promtool_check(r.stdout)
    s = parse(r.stdout)
    assert value(s, "treelockfs_delegations_granted_total") >= 1
    assert value(s, "treelockfs_delegations_recalled_total") >= 1
    assert value(s, "treelockfs_delegations_held") == 0
    assert value(s, "treelockfs_renames_local_total") >= 1
    w = "treelockfs_delegation_recall_wait_seconds"
    assert value(s, w + "_count") >= 1 and value(s, w + "_sum") > 0
    assert value(s, w + "_bucket", le="+Inf") == value(s, w + "_count")
    assert value(s, w + "_bucket", le="1.048576") <= value(s, w + "_count")
    # without delegations the families are not there
    assert not [n for (n, _) in parse(b.ctl("metrics")) if "deleg" in n]
    doc = validated(ctl(backend, "owners", "--json", "--no-wait"), "owners")
    assert {o["name"]: o["delegations"] for o in doc["owners"]}["A"] == 0, doc


def take_turns(a, b, k, rounds):
    """A renames its k files in /alt, then B its k others, ROUNDS times."""
    for r in range(rounds):
        x, y = ("", ".r") if r % 2 == 0 else (".r", "")
        for m, who in ((a, "a"), (b, "b")):
            for i in range(k):
                os.rename(m.path("alt", "%s%d%s" % (who, i, x)), m.path("alt", "%s%d%s" % (who, i, y)))


def turns_cost(backend, es_mounts, deleg, tag, k, rounds):
    """Store requests of two mounts taking turns in one directory, and the
    delegations granted and recalled (both together)."""
    opts = ["delegations=" + deleg, "delegation_recall=1"] + PATIENT
    a, b = es_mounts(backend, "A", "B", opts={"A": opts, "B": opts}, tag=tag)
    makedirs(a, "alt")
    for who in "ab":
        for i in range(k):
            write(a, "alt/%s%d" % (who, i))
    s0 = [a.stats(), b.stats()]
    t0 = time.monotonic()
    take_turns(a, b, k, rounds)
    elapsed = time.monotonic() - t0
    # the releases the senders still have out reach the store
    last, same = None, 0
    while same < 3:
        s1 = [a.stats(), b.stats()]
        now = (s1[0]["store_requests"], s1[1]["store_requests"])
        same = same + 1 if now == last else 0
        last = now
        time.sleep(0.1)

    def total(name):
        return sum(s1[i].get(name, 0) - s0[i].get(name, 0) for i in range(2))
    return {"requests": total("store_requests"), "granted": total("delegations_granted"),
            "recalled": total("delegations_recalled"), "seconds": elapsed}


@pytest.mark.backends("emulator-es8")
def test_deleg__two_hosts_taking_turns_do_not_ping_pong(backend, es_mounts):
    """Issue 44: two mounts renaming in turns in one directory. With
    delegations on, a host that had to wait in the directory (for the
    other's delegation) does not take one there itself for the cooldown:
    one recall, then both rename through the store, at about the cost of
    delegations=off."""
    k, rounds = 5, 20
    off = turns_cost(backend, es_mounts, "off", "off", k, rounds)
    on = turns_cost(backend, es_mounts, "on", "on", k, rounds)
    print("\ntaking turns, %d renames: off %s, on %s" % (2 * k * rounds, off, on))
    assert off["granted"] == 0 and off["recalled"] == 0, off
    # the cooldown (30 s, doubling) bounds the delegations: one, recalled
    # once, per cooldown the run lasted, and none taken by the waiter
    periods = 1 + int(on["seconds"] // 30)
    assert on["granted"] <= periods, on
    assert on["recalled"] <= on["granted"], on
    # a recall costs the waiter's retries and the delegate's polls: a
    # small constant beside the renames' two requests each
    assert on["requests"] <= 1.1 * off["requests"] + 40, (on, off)


FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1")


@ES8_AND_ENGINES
def test_deleg__a_delegate_whose_clock_runs_ahead_still_gives_it_back(backend, mount_factory,
                                                                       tmp_path):
    """A's wall clock 26 minutes ahead (libfaketime; the monotonic clock
    true): B's waiter mark looks stale on A's wall clock, yet A must give
    its delegation back within delegation_recall, not let B wait until
    lock_timeout and fail with EBUSY."""
    lib = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
    if not lib:
        pytest.skip("no libfaketime (Debian package faketime)")
    backing = tmp_path / "backing"
    backing.mkdir()
    skew = {"LD_PRELOAD": lib, "FAKETIME": "+26m", "DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_NO_CACHE": "1"}
    # lock_timeout=10: bounds B's wait should A never give back
    a = mount_factory(opts=es_opts(backend, "A", *(DELEG + PATIENT + ["lock_timeout=10"])),
                      backing=backing, name="mntA", env=skew)
    b = mount_factory(opts=es_opts(backend, "B", "lock_timeout=10"), backing=backing,
                      name="mntB")
    delegate_dir(a)
    t0 = time.monotonic()
    os.rename(b.path("dir/other"), b.path("dir/mine"))
    waited = time.monotonic() - t0
    st = a.stats()
    assert st["delegations_recalled"] >= 1 and st["delegations_held"] == 0, st
    # delegation_recall (1 s) and two round trips, slack for a busy machine
    assert waited < 8, waited
    assert os.path.exists(b.bpath("dir/mine"))


@pytest.mark.backends("emulator-es8")
def test_deleg__a_stop_while_a_rename_waits_gives_every_delegation_back(backend, es_mounts,
                                                                         tmp_path):
    """A is stopped while a rename of its waits for B: the watch thread
    may begin the stop (the request loop still waits for that rename) and
    give A's delegations back, one slow request each; the main thread must
    not close the store under it. (Seen in the multi-host runs: SIGSEGV in
    a request of the store at the stop, delegations never given back; this
    test passed before the fix too: it guards the stop, it does not make
    the race.)"""
    log = str(tmp_path / "holds")
    a, b = es_mounts(backend, "A", "B", opts={"A": DELEG + ["hold_log=" + log],
                                              "B": ["rename_delay_ms=3000"]})
    n = 4
    for i in range(n):
        makedirs(a, "d%d" % i)
        write(a, "d%d/f0" % i)
        rename_many(a, "d%d" % i, 3)
    wait_for(lambda: a.stats().get("delegations_held") == n, 60, what="A's delegations")
    write(a, "x")
    held = start_op(os.rename, b.path("x"), b.path("y"))     # B holds /x 3 s
    wait_for(lambda: b.stats()["acquired"] >= 1, 60, what="B's locks")
    waits = start_op(os.rename, a.path("x"), a.path("z"))
    time.sleep(0.3)
    backend.latency(1000)
    try:
        a.proc.send_signal(signal.SIGTERM)
        rc = a.stop(check=False)
    finally:
        backend.latency(0)
    waits.finish(120)
    held.finish(120)
    assert rc == 0, (rc, a.log())
    with open(log) as f:
        ev = [line.split("\t")[1] for line in f]
    assert ev.count("delegate") == n and ev.count("return") == n, ev
