"""Dead holders (issue 4): owner leases, take-over at conflict time, fencing
of a mount cut from the store, intents of dead owners, writer preference.
A holder that dies has lease_ttl=2, so a take-over is due 2 x 2 s after
its last renewal; a mount whose lease must not lapse has a long one
(PATIENT), or one scaled by the store's answer time (run_scaled). A take-over is judged by its outcome: it happens (within
lock_timeout, 15 s, where the dead holder would hold for a minute); its
time against the documented bound is printed, not asserted (a busy machine
makes it later, or earlier when the holder's renewals were already late
before it died)."""
import errno
import os
import signal
import statistics
import time

import pytest

from conftest import makedirs
from es_helpers import (ES8_AND_ENGINES, ctl, emu, emu_module, es_mounts,  # noqa: F401
                        forget_mount, held_by, intent_docs, lease_trouble, lock_docs, not_held,
                        owner_id, owner_ids, PATIENT, run_scaled, start_op, wait_for)

# the lock store's protocol: the same code on every libfuse (run-tests.sh)
pytestmark = pytest.mark.lock_store

TTL = 2.0
# The store's documented bound (2 x lease_ttl + lease_ttl/3 + one 200 ms
# backoff step) plus slack for request latency on a shared 2-core machine: a
# real engine's first take-over of a run also compiles its Painless scripts.
DOC_BOUND = 2 * TTL + TTL / 3 + 0.2
SLACK = {"emulator": 0.8}


def bound(backend):
    return DOC_BOUND + SLACK.get(backend.kind, 1.5)
TAKEOVERS = []


@pytest.mark.backends("emulator", "engines", "opensearch3")
def test_es__kill9_holder_is_taken_over(backend, es_mounts):
    # A (lease_ttl 2, killed) holds for a minute; B's own lease and
    # requests are not what the test is about: they hold on a busy
    # machine, and B waits up to lock_timeout 120 s, where the dead holder
    # would hold for ever
    a, b = es_mounts(backend, "A", "B", opts={"A": ["rename_delay_ms=60000", "lock_timeout=120",
                                                    "es_timeout_ms=30000"],
                                              "B": PATIENT})
    makedirs(a, "d", "src")
    hung = start_op(os.rename, a.path("d/src"), a.path("d/dst"))
    wait_for(lambda: held_by(backend, "/d/src"), 120, what="A's locks")
    a_owner = owner_id(backend, "A")
    t_kill = time.monotonic()
    a.kill(signal.SIGKILL)
    forget_mount(a)
    op = start_op(os.rename, b.path("d/src"), b.path("d/other")).finish(180)
    took = op.t1 - t_kill
    TAKEOVERS.append(took)
    assert op.error is None, (op.error, b.log())
    print("\n%s take-over after kill -9: %.2fs (bound %.2fs)" % (backend.flavor, took,
                                                               bound(backend)))
    assert os.path.isdir(b.bpath("d/other"))
    # nothing of the dead owner is left locked (B's own release may still
    # be on its way); its intent is reported
    wait_for(lambda: lock_docs(backend) == {}, 120, what="no lock left")
    r = ctl(backend, "intents", "--no-wait")
    assert r.returncode == 0, r.stderr
    assert "rename '/d/src' -> '/d/dst'" in r.stdout and "dead" in r.stdout, r.stdout
    # A's mount (its name and pid; a lease that lapsed under load gives the
    # mount a new owner id, so not necessarily the one read before)
    assert a_owner.rsplit(":", 1)[0] + ":" in r.stdout, (a_owner, r.stdout)
    hung.join(5)


@ES8_AND_ENGINES
def test_es__kill9_takeover_times(backend, es_mounts):
    """Several take-overs, for the median and the worst case
    (TREELOCKFS_TAKEOVER_RUNS=10 for the figures of the documentation)."""
    runs = int(os.environ.get("TREELOCKFS_TAKEOVER_RUNS", "2"))
    # the holder's lease is short (the take-over is the subject), its
    # requests are not: a busy machine's store may answer in seconds
    holder = ["rename_delay_ms=60000", "es_timeout_ms=30000", "lock_timeout=120"]
    a, b = es_mounts(backend, "A", "B", opts={"A": holder, "B": PATIENT})
    for i in range(runs):
        makedirs(b, "t%d" % i)
    times = []
    m = a
    for i in range(runs):
        for attempt in range(3):
            hung = start_op(os.rename, m.path("t%d" % i), m.path("u%d" % i))
            wait_for(lambda: held_by(backend, "/t%d" % i) or not hung.is_alive(), 300,
                     what="locks")
            if hung.is_alive():
                break
            # its 2 s lease lapsed before it held (a store answering in
            # seconds): it gave up, as it must; again
            assert attempt < 2, (hung.error, m.log())
        t_kill = time.monotonic()
        m.kill(signal.SIGKILL)
        forget_mount(m)
        op = start_op(os.rename, b.path("t%d" % i), b.path("v%d" % i)).finish(180)
        assert op.error is None, (op.error, b.log())
        times.append(op.t1 - t_kill)
        hung.join(5)
        if i + 1 < runs:
            name = "A%d" % (i + 2)
            (m,) = es_mounts(backend, name, opts={name: holder})
    times += TAKEOVERS
    print("\ntake-over times: median %.2fs, worst %.2fs (bound %.2fs)"
          % (statistics.median(times), max(times), bound(backend)))
    wait_for(lambda: lock_docs(backend) == {}, 120, what="no lock left")


@pytest.mark.emulator_only('cuts one owner off by X-Opaque-Id')
def test_es__cut_mount_is_fenced_and_taken_over(emu, es_mounts):
    a, b = es_mounts(emu, "A", "B", opts={"A": ["rename_delay_ms=6000", "es_timeout_ms=500"]})
    makedirs(a, "e", "src")
    pending = start_op(os.rename, a.path("e/src"), a.path("e/dst"))
    wait_for(lambda: held_by(emu, "/e/src"), 5, what="A's locks")
    a_owner = owner_id(emu, "A")
    t_cut = time.monotonic()
    emu.admin("POST", "/_esemu/block", {"opaque_id": a_owner, "mode": "reset"})
    try:
        op = start_op(os.rename, b.path("e/src"), b.path("e/taken"))
        op.join(20)
        assert op.error is None, op.error
        pending.join(20)
        # the cut mount noticed its lease was stale and did not rename
        assert pending.errno == errno.ENOLCK, pending.error
        assert os.path.isdir(b.bpath("e/taken"))
        assert not os.path.exists(b.bpath("e/dst"))
        assert "lease is no longer fresh" in a.log()
    finally:
        emu.admin("POST", "/_esemu/block", {"opaque_id": a_owner, "mode": "none"})
    # reconnected, A continues as a new owner
    deadline = time.monotonic() + 10
    makedirs(a, "e", "again")
    while True:
        try:
            os.rename(a.path("e/again"), a.path("e/again2"))
            break
        except OSError as e:
            assert e.errno == errno.ENOLCK and time.monotonic() < deadline, e
            time.sleep(0.3)
    assert owner_id(emu, "A") != a_owner
    wait_for(lambda: lock_docs(emu) == {}, 5, what="no lock left")


@ES8_AND_ENGINES
def test_es__live_slow_holder_is_not_robbed(backend, es_mounts):
    """A holder whose store answers slowly keeps renewing: never taken over.
    Its lease_ttl (2 s) and the store's added latency (150 ms) are scaled by
    the store's answer time; a run in which A's lease lapsed all the same
    (A logs it: then B may rightly take over) proves nothing and runs
    again with both doubled (run_scaled)."""
    def scenario(scale, tag):
        ttl = 2 * scale
        # A holds for 3 x its lease_ttl: past 2 x lease_ttl, where a
        # waiter that judged it by the age of its locks would rob it
        a, b = es_mounts(backend, "A", "B", tag=tag, lease_ttl=ttl, opts={
            "A": ["rename_delay_ms=%d" % (3000 * ttl), "lock_timeout=120",
                  "es_timeout_ms=30000"],
            "B": PATIENT})
        makedirs(a, "l", "src")
        backend.latency(150 * scale)
        try:
            held = start_op(os.rename, a.path("l/src"), a.path("l/dst"))
            wait_for(lambda: held_by(backend, "/l/src"), 120, what="A's locks")
            op = start_op(os.rename, b.path("l/src"), b.path("l/b"))
            held.finish(300)
            op.finish(300)
        finally:
            backend.latency(0)
        lapsed = lease_trouble(a)
        if lapsed:
            return not_held("A's lease lapsed: %s" % lapsed[0], a, b)
        assert "taking its locks over" not in b.log(), b.log()
        assert held.error is None, (held.error, a.log())
        # B waited for A, then its source was gone
        assert op.errno == errno.ENOENT, (op.error, b.log())
        assert os.path.isdir(a.bpath("l/dst"))
    run_scaled(backend, scenario)


def _rename_stream(root, i, stop, done, ended):
    """One process renaming a file below big/ again and again; ENDED[i] is
    the errno that stopped it (0: told to stop)."""
    n = 0
    time.sleep(0.05 * i)  # staggered: some holder always has /big shared
    while not stop.is_set():
        try:
            os.rename(os.path.join(root, "big", "sub%d" % i, "f%d" % n),
                      os.path.join(root, "big", "sub%d" % i, "f%d" % (n + 1)))
        except OSError as e:
            ended[i] = e.errno
            return
        n += 1
        done[i] += 1


@ES8_AND_ENGINES
def test_es__directory_rename_not_starved(backend, es_mounts):
    """A directory rename under a stream of 4 processes renaming files below
    it (on another mount) completes, and the stream yields to it: once it
    waits, the stream's renames wait for it (a few are under way), where
    without writer preference they would go on and hold it off as long as
    they run (measured: over 1,000 renames in 99 s before it slipped in). The time it took is printed (the documented
    bound, the holders it found, 200 ms each, plus backoff, is for bench/
    to measure); leases and request timeouts, not the subject, are
    generous (PATIENT)."""
    import multiprocessing
    a, b = es_mounts(backend, "A", "B", opts={"A": PATIENT,
                                              "B": ["rename_delay_ms=200"] + PATIENT})
    for i in range(4):
        makedirs(a, "big", "sub%d" % i)
        with open(a.path("big", "sub%d" % i, "f0"), "w"):
            pass
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    done = ctx.Array("i", 4)
    ended = ctx.Array("i", 4)
    workers = [ctx.Process(target=_rename_stream, args=(b.mnt, i, stop, done, ended), daemon=True)
               for i in range(4)]
    for w in workers:
        w.start()
    # the stream is running: /big is always held shared
    wait_for(lambda: all(done[i] > 0 for i in range(4)), 120, what="every stream renaming")
    before = sum(done)
    t0 = time.monotonic()
    try:
        os.rename(a.path("big"), a.path("big2"))
        took = time.monotonic() - t0
    finally:
        stop.set()
        for w in workers:
            w.join(120)
    during = sum(done) - before
    print("\ndirectory rename under 4 processes: %.2fs (streams did %s, %d meanwhile)"
          % (took, list(done), during))
    assert sum(done) > 4
    # the streams ran until the move took their files away (ENOENT) or
    # were told to stop: none gave up before, which would have let the
    # rename through unopposed
    assert all(e in (0, errno.ENOENT) for e in ended), (list(ended), b.log())
    # the stream yielded: the renames it did meanwhile are the few under
    # way when A marked /big (each stream's in flight, one more while the
    # mark is sent), not a free run (a count, not a time: it does not grow
    # with a busy machine's slowness)
    assert during <= 40, (during, list(done))
    assert os.path.isdir(a.bpath("big2"))
    wait_for(lambda: lock_docs(backend) == {}, 120, what="no lock or mark left")


@ES8_AND_ENGINES
def test_es__ctl_reap_dead_owner(backend, es_mounts):
    # B must stay alive on a busy machine (its lease_ttl/3 is how long
    # treelockctl owners may watch it)
    a, b = es_mounts(backend, "A", "B", opts={"A": ["rename_delay_ms=60000"],
                                              "B": ["lease_ttl=6", "es_timeout_ms=30000"]})
    makedirs(a, "r", "src")
    hung = start_op(os.rename, a.path("r/src"), a.path("r/dst"))
    wait_for(lambda: held_by(backend, "/r/src"), 120, what="A's locks")
    a_owner = owner_id(backend, "A")
    a.kill(signal.SIGKILL)
    forget_mount(a)
    # a live owner is not reaped without --force
    r = ctl(backend, "reap", owner_id(backend, "B"), "--no-wait")
    assert r.returncode != 0
    r = ctl(backend, "owners")
    assert r.returncode == 0
    lines = {l.split()[0]: l for l in r.stdout.splitlines()[1:]}
    assert lines[a_owner].endswith("dead"), r.stdout
    assert lines[owner_id(backend, "B")].endswith("alive"), r.stdout
    r = ctl(backend, "reap", "--dead")
    assert r.returncode == 0, r.stderr
    assert "reaped '%s'" % a_owner in r.stdout
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    assert owner_id(backend, "A") is None
    wait_for(lambda: intent_docs(backend) == {}, 60, what="no lock left")
    os.rename(b.path("r/src"), b.path("r/b"))  # at once: nothing in the way
    hung.join(5)


@ES8_AND_ENGINES
def test_es__failover_to_second_node(backend, mount_factory):
    url = "http://127.0.0.1:1," + backend.url
    # in -o form a comma separates options: the list is separated by ';'
    m = mount_factory(opts=["lock_store=es", "owner=F", "lease_ttl=2",
                            "es_url=" + url.replace(",", ";")])
    os.mkdir(m.path("x"))
    for i in range(3):
        os.rename(m.path("x" if i == 0 else "x%d" % (i - 1)), m.path("x%d" % i))
    assert os.path.isdir(m.bpath("x2"))
    r = ctl(backend, "check", url=url)
    assert r.returncode == 0, r.stderr


@pytest.mark.emulator_only('cuts one owner off by X-Opaque-Id')
def test_es__lapsed_lease_means_new_owner(emu, es_mounts):
    """Renewing after the lease lapsed does not make the old owner id usable
    again (others may be evicting it right then): the mount starts over."""
    (a,) = es_mounts(emu, "A", opts={"A": ["es_timeout_ms=300"]})
    old = owner_id(emu, "A")
    emu.admin("POST", "/_esemu/block", {"opaque_id": old, "mode": "reset"})
    time.sleep(TTL + 0.5)
    emu.admin("POST", "/_esemu/block", {"opaque_id": old, "mode": "none"})
    wait_for(lambda: [o for o in owner_ids(emu, "A") if o != old], 5, what="a new owner id")
    assert "lapsed" in a.log()
    os.mkdir(a.path("n"))
    deadline = time.monotonic() + 5
    while True:
        try:
            os.rename(a.path("n"), a.path("n2"))
            break
        except OSError as e:
            assert e.errno == errno.ENOLCK and time.monotonic() < deadline, e
            time.sleep(0.2)
