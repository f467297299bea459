"""The es lock store against a flaky, lost or paused store and hostile
names: keys that are not UTF-8, mount start under failures, a lost index,
lease documents at a clean exit, lock_timeout as a bound on the whole
rename, reaping dead owners."""
import errno
import os
import signal
import subprocess
import time

import pytest

from es_helpers import (INDEX, ctl, docs, emu, emu_module, es_mounts, es_opts, es_request,  # noqa: F401,E501
                        forget_mount, held_by, intent_docs, lock_docs, owner_id, start_op,
                        wait_for)

# the lock store's protocol: the same code on every libfuse (run-tests.sh)
pytestmark = pytest.mark.lock_store


def fsname(m, *parts):
    return os.path.join(os.fsencode(m.mnt), *[os.fsencode(p) if isinstance(p, str) else p
                                              for p in parts])


# ---- D7: names that are not UTF-8 -----------------------------------------------------------


def test_es__names_not_utf8_are_distinct_keys(emu, es_mounts):
    # two mounts: the kernel serialises renames in one directory of one mount
    a, b = es_mounts(emu, "A", "B", opts={"A": ["rename_delay_ms=1500"],
                                          "B": ["rename_delay_ms=1500"]})
    os.mkdir(fsname(a, "d"))
    for n in (b"\xff", b"\xfe"):
        open(fsname(a, "d", n), "w").close()
    # two renames of distinct names proceed side by side: distinct locks
    op1 = start_op(os.rename, fsname(a, "d", b"\xff"), fsname(a, "d", b"\xff1"))
    wait_for(lambda: held_by(emu, "bytes:/d/\\xff"), 5, what="the lock on /d/\\xff")
    src = held_by(emu, "bytes:/d/\\xff")
    assert "path" not in src  # the id is the key's text: no copy of it
    assert src["lock_type"] == "exclusive"
    op2 = start_op(os.rename, fsname(b, "d", b"\xfe"), fsname(b, "d", b"\xfe1"))
    wait_for(lambda: held_by(emu, "bytes:/d/\\xfe"), 1.0,
             what="a lock on /d/\\xfe while /d/\\xff is held")
    assert not any("\ufffd" in k for k in lock_docs(emu)), list(lock_docs(emu))
    # listings print the escaped form
    r = ctl(emu, "locks")
    assert "bytes:/d/\\xff" in r.stdout and "\ufffd" not in r.stdout, r.stdout
    intents = [v["_source"] for v in intent_docs(emu).values()]
    assert {i["from"] for i in intents} == {"bytes:/d/\\xff", "bytes:/d/\\xfe"}, intents
    for op in (op1, op2):
        op.join(10)
        assert op.error is None, op.error
    assert sorted(os.listdir(fsname(a, "d"))) == [b"\xfe1", b"\xff1"]


def test_es__long_name_not_utf8(emu, es_mounts):
    (a,) = es_mounts(emu, "A")
    os.mkdir(fsname(a, "d"))
    name = b"\xff" * 255
    open(fsname(a, "d", name), "w").close()
    os.rename(fsname(a, "d", name), fsname(a, "d", b"\xfe" * 255))
    assert os.listdir(fsname(a, "d")) == [b"\xfe" * 255]


def test_es__ctl_break_name_not_utf8(emu, es_mounts):
    (a,) = es_mounts(emu, "A", opts={"A": ["rename_delay_ms=3000"]})
    os.mkdir(fsname(a, "d"))
    open(fsname(a, "d", b"\xff"), "w").close()
    op = start_op(os.rename, fsname(a, "d", b"\xff"), fsname(a, "d", b"g"))
    wait_for(lambda: held_by(emu, "bytes:/d/\\xff"), 5, what="the lock")
    # the raw name
    r = subprocess.run([__import__("es_helpers").CTL, "--es_url=" + emu.url, "break",
                        b"/d/\xff", "--force"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"broke the lock on 'bytes:/d/\\xff'\n", r.stdout
    assert held_by(emu, "bytes:/d/\\xff") is None
    # the printed form
    wait_for(lambda: held_by(emu, "/d/g"), 5, what="the lock on /d/g")
    op.join(10)
    assert op.error is None
    os.mkdir(fsname(a, "e"))
    open(fsname(a, "e", b"\xfe"), "w").close()
    op = start_op(os.rename, fsname(a, "e", b"\xfe"), fsname(a, "e", b"g"))
    wait_for(lambda: held_by(emu, "bytes:/e/\\xfe"), 5, what="the lock")
    r = ctl(emu, "break", "bytes:/e/\\xfe", "--force")
    assert r.returncode == 0, r.stderr
    assert held_by(emu, "bytes:/e/\\xfe") is None
    op.join(10)
    assert op.error is None


# ---- lease documents at a clean exit -------------------------------------------------------


def test_es__clean_exit_deletes_own_lease(emu, es_mounts):
    a, b = es_mounts(emu, "A", "B")
    os.mkdir(a.path("d"))
    open(a.path("d/f"), "w").close()
    os.rename(a.path("d/f"), a.path("d/g"))
    assert owner_id(emu, "A") and owner_id(emu, "B")
    a.stop()
    assert owner_id(emu, "A") is None, list(docs(emu))
    assert owner_id(emu, "B") is not None


def lapse(emu, owner):
    """Cuts OWNER's requests (its X-Opaque-Id) for longer than lease_ttl."""
    emu.admin("POST", "/_esemu/block", {"opaque_id": owner, "mode": "reset"})
    time.sleep(2.5)  # lease_ttl 2 s
    emu.admin("POST", "/_esemu/block", {"opaque_id": owner, "mode": "none"})


def test_es__clean_exit_after_new_owner_id(emu, es_mounts):
    """A mount that lapsed (store paused past lease_ttl) carries on under a
    new owner id; at a clean exit neither lease document is left."""
    (a,) = es_mounts(emu, "A")
    first = owner_id(emu, "A")
    lapse(emu, first)
    wait_for(lambda: [o for o in __import__("es_helpers").owner_ids(emu, "A") if o != first],
             10, what="a new owner id")
    a.stop()
    assert __import__("es_helpers").owner_ids(emu, "A") == [], list(docs(emu))


def test_es__abandoned_lease_deleted_after_a_lease(emu, es_mounts):
    """...and while it runs, the old document goes one lease_ttl after the
    new owner id was taken (not at once: a rename that passed its lease
    check may still act under it)."""
    (a,) = es_mounts(emu, "A")
    first = owner_id(emu, "A")
    lapse(emu, first)
    ids = __import__("es_helpers").owner_ids
    wait_for(lambda: [o for o in ids(emu, "A") if o != first], 10, what="a new owner id")
    t0 = time.monotonic()
    wait_for(lambda: first not in ids(emu, "A"), 6, what="the old lease document deleted")
    assert time.monotonic() - t0 >= 1.0
    assert len(ids(emu, "A")) == 1


# ---- D13: mount start against a flaky store ----------------------------------------------


def test_es__mount_start_retries_flaky_store(emu, mount_factory, tmp_path):
    """With 40% of the store's answers failing (503, 429, resets), every
    mount comes up; before, most exited with ENOLCK."""
    backing = tmp_path / "backing"
    backing.mkdir()
    for i in range(6):
        emu.admin("POST", "/_esemu/reset")
        emu.admin("POST", "/_esemu/fail_rate", {"rate": 0.4, "seed": 100 + i})
        m = mount_factory(opts=es_opts(emu, "F%d" % i), backing=backing, name="mntF%d" % i,
                          start=False)
        try:
            m.start(timeout=20)
        finally:
            emu.admin("POST", "/_esemu/fail_rate", {"rate": 0.0, "seed": 1})
        assert "retrying" in m.log() or "cannot" not in m.log()
        m.stop()


def test_es__lease_not_created_at_start_is_created_when_the_store_answers(emu, mount_factory,
                                                                         tmp_path):
    """The store bootstraps, then refuses the lease's creation for longer
    than es_start_timeout: the mount serves, its renames fail with ENOLCK,
    and once the store takes the lease the heartbeat creates it and renames
    work. Before, such a mount stayed without a lease until remounted."""
    backing = tmp_path / "backing"
    (backing / "d").mkdir(parents=True)
    (backing / "d" / "f").write_text("x")
    emu.admin("POST", "/_esemu/block_path", {"contains": "/_create/owner", "mode": "reset"})
    try:
        m = mount_factory(opts=es_opts(emu, "L", "es_start_timeout=1", "lock_timeout=2"),
                          backing=backing)
        wait_for(lambda: "in the lock store yet" in m.log(), 30, what="the lease's failed start")
        with pytest.raises(OSError) as e:
            os.rename(m.path("d/f"), m.path("d/g"))
        assert e.value.errno == errno.ENOLCK, e.value
    finally:
        emu.admin("POST", "/_esemu/block_path", {"contains": "/_create/owner", "mode": "none"})

    def renamed():
        try:
            os.rename(m.path("d/f"), m.path("d/g"))
            return True
        except OSError as e:
            assert e.errno == errno.ENOLCK, e
            return False
    wait_for(renamed, 60, step=0.2, what="a rename once the lease exists")
    assert os.path.exists(backing / "d" / "g")
    assert "renames take locks again" in m.log(), m.log()


def test_es__mount_start_gives_up_with_reason(mount_factory, tmp_path):
    # credentials come from the environment (a URL with user:password@ is
    # refused before any request): they must not show in the reason either
    m = mount_factory(opts=["lock_store=es", "es_url=http://127.0.0.1:1", "owner=A",
                            "es_user=user", "es_allow_insecure=1", "es_start_timeout=2"], start=False)
    t0 = time.monotonic()
    r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, TREELOCKFS_ES_PASSWORD="secret"))
    elapsed = time.monotonic() - t0
    err = r.stdout + r.stderr
    assert r.returncode == 1, err
    assert 1.5 <= elapsed < 6, elapsed
    assert "secret" not in err
    assert "retrying" in err
    last = [line for line in err.splitlines() if "last error" in line]
    assert last, err
    assert "http://127.0.0.1:1" in last[0] and "cannot reach the lock store" in last[0], last


def test_es__mount_start_waits_for_store_paused_at_start(emu, mount_factory, tmp_path):
    emu.admin("POST", "/_esemu/pause")
    m = mount_factory(opts=es_opts(emu, "P", "es_start_timeout=180"), start=False)
    op = start_op(m.start, 180)
    # the store resumes once the mount has given up on a first request
    # (es_timeout_ms) and said it retries, however late a busy machine
    # lets that be
    wait_for(lambda: "retrying" in m.log() or not op.is_alive(), 60,
             what="the mount to retry its first request")
    emu.admin("POST", "/_esemu/resume")
    op.join(185)
    assert op.error is None and op.result is m, m.log()
    assert "retrying" in m.log()


# ---- a store outage: no directory closed for longer than lock_timeout ------------------------


def metric(m, name):
    with open(m.path(".treelockfs/metrics")) as f:
        for line in f:
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_es__store_outage_closes_no_directory_past_lock_timeout(emu, es_mounts):
    """With the store paused, renames queued in one directory (the kernel
    lets one at a time in, and makes lookups there wait too) each used
    to wait out lock_timeout in turn: root's touch of a new name there
    waited for all of them. Once one gave up on the outage, the others
    fail at once, so the touch answers within lock_timeout (+1 s)."""
    timeout = 2
    (a,) = es_mounts(emu, "A", opts={"A": ["lock_timeout=%d" % timeout, "es_timeout_ms=500"]})
    os.mkdir(a.path("d"))
    for i in range(10):
        open(a.path("d/f%d" % i), "w").close()
    emu.admin("POST", "/_esemu/pause")
    try:
        ops = [start_op(os.rename, a.path("d/f%d" % i), a.path("d/g%d" % i)) for i in range(10)]
        # the first rename's request to the paused store timed out (it
        # tries again until lock_timeout); the others queue behind it
        wait_for(lambda: metric(a, "treelockfs_store_request_failures_total") >= 1, 10,
                 what="a rename's request to the paused store timed out")
        t0 = time.monotonic()
        open(a.path("d/new"), "w").close()
        took = time.monotonic() - t0
        for op in ops:
            op.join(60)
            assert not op.is_alive()
            assert op.errno == errno.ENOLCK, op.error
        assert took <= timeout + 1, "touch took %.1f s" % took
        assert metric(a, "treelockfs_store_down") == 1
        assert metric(a, "treelockfs_store_down_refusals_total") >= 1
        assert sorted(os.listdir(a.bpath("d"))) == sorted(["new"] + ["f%d" % i for i in range(10)])
        assert "renames fail at once" in a.log()
    finally:
        emu.admin("POST", "/_esemu/resume")
    # the store answers again: the circuit closes, renames lock again
    rename_eventually(a, "d/f0", "d/g0", timeout=15)
    wait_for(lambda: metric(a, "treelockfs_store_down") == 0, 10, what="the store up again")
    assert "the lock store answers again" in a.log()


# ---- D14: a lost index ------------------------------------------------------------------------


def mapping_meta(emu):
    status, body = es_request(emu, "GET", "/%s/_mapping" % INDEX)
    if status != 200:
        return None
    m = body[INDEX]["mappings"]
    return (m.get("_meta", {}).get("treelockfs", {}).get("strategy"),
            m.get("properties", {}).get("path", {}).get("type"))


def rename_eventually(m, a, b, timeout=8):
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rename(m.path(a), m.path(b))
            return
        except OSError as e:
            assert e.errno == errno.ENOLCK and time.monotonic() < deadline, e
            time.sleep(0.2)


def test_es__lost_index_recreated_with_mapping(emu, es_mounts, mount_factory):
    (a,) = es_mounts(emu, "A")
    os.mkdir(a.path("x"))
    assert mapping_meta(emu) == ("tree", "keyword")
    # the store loses the index (as when it restarts empty)
    assert es_request(emu, "DELETE", "/" + INDEX)[0] == 200
    wait_for(lambda: mapping_meta(emu) == ("tree", "keyword"), 5,
             what="the index re-created with our mapping")
    rename_eventually(a, "x", "y")
    assert mapping_meta(emu) == ("tree", "keyword")
    r = ctl(emu, "check")
    assert r.returncode == 0 and "NOT OURS" not in r.stdout, r.stdout + r.stderr
    assert "strategy: tree" in r.stdout, r.stdout
    # and a mount with another strategy is still refused
    m = mount_factory(opts=es_opts(emu, "G", "lock_strategy=global"), name="mntG", start=False)
    r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "refusing to mix strategies" in r.stdout + r.stderr


def test_es__auto_created_index_refused(emu, es_mounts, mount_factory):
    (a,) = es_mounts(emu, "A")
    os.mkdir(a.path("x"))
    # lost, then auto-created by a write before the mount noticed
    assert es_request(emu, "DELETE", "/" + INDEX)[0] == 200
    assert es_request(emu, "PUT", "/%s/_doc/%s" % (INDEX, "%2Fz"),
                      {"lock_type": "exclusive", "path": "/z"})[0] == 201
    assert mapping_meta(emu)[0] is None
    # the mount stops locking (ENOLCK, at once) and says why
    wait_for(lambda: "lost its mapping" in a.log(), 5, what="the mount noticing")
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        os.rename(a.path("x"), a.path("y"))
    assert e.value.errno == errno.ENOLCK
    assert time.monotonic() - t0 < 2
    assert os.path.isdir(a.bpath("x"))
    assert not any(k.startswith("intent:") for k in docs(emu))
    # a new mount (any strategy) refuses the index with a clear message
    for strategy in ("tree", "global"):
        m = mount_factory(opts=es_opts(emu, "N", "lock_strategy=" + strategy,
                                       "es_start_timeout=1"),
                          name="mntN" + strategy, start=False)
        r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "records no lock strategy" in r.stdout + r.stderr
    # the operator deletes it: the mount re-creates it and locks again
    assert es_request(emu, "DELETE", "/" + INDEX)[0] == 200
    wait_for(lambda: mapping_meta(emu) == ("tree", "keyword"), 5, what="re-created")
    rename_eventually(a, "x", "y")


# ---- lock_timeout bounds the whole rename -------------------------------------------------


FAULTS = {
    "paused": lambda emu: emu.admin("POST", "/_esemu/pause"),
    "slow": lambda emu: emu.admin("POST", "/_esemu/latency", {"ms": 4000}),
    "slow_release": lambda emu: emu.admin("POST", "/_esemu/latency", {"ms": 1200}),
    "dropping": lambda emu: emu.admin("POST", "/_esemu/fail", {"count": 100000, "kind": "reset"}),
}


def lift(emu):
    emu.admin("POST", "/_esemu/resume")
    emu.admin("POST", "/_esemu/latency", {"ms": 0})
    emu.admin("POST", "/_esemu/fail", {"count": 0, "kind": "reset"})


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_es__lock_timeout_bounds_the_rename(emu, es_mounts, fault):
    """lock_timeout=3 with the default 5 s request timeout and a lease long
    enough to stay fresh: every request is capped by what is left of the
    rename's deadline (before: 30 s with the store paused)."""
    (a,) = es_mounts(emu, "A", opts={"A": ["lock_timeout=3", "es_timeout_ms=5000"]},
                     lease_ttl=30)
    os.makedirs(a.path("s/t"))
    open(a.path("s/t/f"), "w").close()
    FAULTS[fault](emu)
    try:
        op = start_op(os.rename, a.path("s/t/f"), a.path("s/t/g"))
        op.join(40)
        assert not op.is_alive()
        print("\nlock_timeout=3, store %s: the rename returned %s after %.2f s"
              % (fault, errno.errorcode.get(op.errno, op.errno), op.elapsed))
        assert op.errno in (0, errno.EBUSY, errno.ENOLCK), op.error
        assert op.elapsed < 3 + 1.0, (fault, op.elapsed, op.error)
        if fault == "slow_release":
            assert op.errno == 0, a.log()
    finally:
        lift(emu)
    if fault.startswith("slow"):
        time.sleep(4.5)  # requests the emulator still delays arrive first
    # what could not be sent in time is cleaned up once the store answers
    wait_for(lambda: lock_docs(emu) == {} and intent_docs(emu) == {}, 25,
             what="locks cleaned up after the fault")


# ---- treelockctl reap ---------------------------------------------------------------------------


def hold_and_kill(emu, a):
    os.makedirs(a.path("r/src"))
    start_op(os.rename, a.path("r/src"), a.path("r/dst"))
    wait_for(lambda: held_by(emu, "/r/src") and intent_docs(emu), 5, what="A's locks")
    oid = owner_id(emu, "A")
    a.kill(signal.SIGKILL)
    forget_mount(a)
    return oid


def test_es__reap_by_name_without_lease_document(emu, es_mounts):
    (a,) = es_mounts(emu, "A", opts={"A": ["rename_delay_ms=60000"]})
    oid = hold_and_kill(emu, a)
    # its lease document is gone (as after a take-over): locks and intent stay
    assert es_request(emu, "DELETE", "/%s/_doc/%s" % (INDEX, "owner:" + oid))[0] == 200
    assert lock_docs(emu) and intent_docs(emu)
    r = ctl(emu, "reap", "A", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reaped '%s'" % oid in r.stdout, r.stdout
    wait_for(lambda: lock_docs(emu) == {} and intent_docs(emu) == {}, 60, what="no lock left")


def test_es__reap_dead_after_takeover_removes_intents(emu, es_mounts):
    a, b = es_mounts(emu, "A", "B", opts={"A": ["rename_delay_ms=60000"]})
    oid = hold_and_kill(emu, a)
    # B takes A's locks over when they are in its way; A's intent stays
    os.rename(b.path("r/src"), b.path("r/b"))
    assert owner_id(emu, "A") is None
    # B's own intent goes with its release, answered after the rename
    # returned
    wait_for(lambda: [v["_source"]["owner"] for v in intent_docs(emu).values()] == [oid], 60,
             what="B's release")
    r = ctl(emu, "reap", "--dead", "--force", "--no-wait")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reaped '%s'" % oid in r.stdout, r.stdout
    wait_for(lambda: intent_docs(emu) == {}, 60, what="no lock left")
    assert owner_id(emu, "B") is not None


def test_es__reap_removes_waiter_marks(emu, es_mounts):
    (a,) = es_mounts(emu, "A")
    os.mkdir(a.path("x"))
    # a lock nobody of ours holds (a guide-style client): A waits, marking it
    assert es_request(emu, "PUT", "/%s/_create/%s" % (INDEX, "%2Fx"),
                      {"lock_type": "exclusive"})[0] == 201
    start_op(os.rename, a.path("x"), a.path("y"))
    wait_for(lambda: (held_by(emu, "/x") or {}).get("waiters"), 5, what="A's waiter mark")
    oid = owner_id(emu, "A")
    a.kill(signal.SIGKILL)
    forget_mount(a)
    assert es_request(emu, "DELETE", "/%s/_doc/%s" % (INDEX, "owner:" + oid))[0] == 200
    r = ctl(emu, "reap", oid, "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not held_by(emu, "/x").get("waiters"), held_by(emu, "/x")
    assert held_by(emu, "/x")["lock_type"] == "exclusive"  # not ours: kept
    wait_for(lambda: intent_docs(emu) == {}, 60, what="no lock left")


def test_es__reap_matching_nothing_fails(emu, es_mounts):
    es_mounts(emu, "A")
    for args in (["nosuch", "--force"], ["nosuch"]):
        r = ctl(emu, "reap", *args, "--no-wait")
        assert r.returncode != 0, r.stdout
        assert "no owner matches 'nosuch'" in r.stderr, r.stderr
    assert owner_id(emu, "A") is not None
