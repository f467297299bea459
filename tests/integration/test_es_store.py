"""The Elasticsearch lock store (issue 3): mounts sharing one backing tree
through one emulator, the guide's scenarios across mounts, guide-request
interoperability, round trips per rename, and faults."""
import errno
import json
import os
import statistics
import subprocess
import threading
import time

import pytest

import backends
from conftest import BIN, detach, is_mounted, makedirs, write
from es_helpers import (ES8_AND_ALL_ENGINES, ES8_AND_ENGINES, INDEX, Op, ctl, docs,  # noqa: F401
                        emu, emu_module, es_mounts, es_opts, es_request, forget_mount, held_by, intent_docs,
                        lock_docs, not_held, PATIENT, quote_id, run_scaled, start_emulator,
                        start_op, wait_for)
from mounts import daemons_of, wait_gone


# ---- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 5, 20])
@pytest.mark.backends("emulator", "engines", "opensearch3")
def test_es__two_requests_per_uncontended_rename(backend, es_mounts, depth):
    # no heartbeat during the measure, and no request timed out (and sent
    # again) however slowly a busy machine lets the store answer; delegations
    # off: they would take the renames after the second off the store
    (a,) = es_mounts(backend, "A", opts={"A": PATIENT + ["delegations=off"]})
    dirs = ["d%d" % i for i in range(depth - 1)]
    if dirs:
        makedirs(a, *dirs)
    src = "/".join(dirs + ["f"])
    write(a, src)
    times = []
    for i in range(5):
        dst = "/".join(dirs + ["g%d" % i])
        backend.reset_stats()
        t0 = time.monotonic()
        os.rename(a.path(src), a.path(dst))
        times.append(time.monotonic() - t0)
        # a release handed to the sender thread may still be on its way
        wait_for(lambda: backend.stats()["requests"].get("bulk", 0) >= 2, 60,
                 what="the rename's release")
        st = backend.stats()
        renewals = st["requests"].get("index", 0)
        assert st["total"] - renewals == 2, st
        assert st["requests"].get("bulk") == 2, st
        src = dst
    print("\n%s depth %d: 2 requests per rename, median %.1f ms" %
          (backend.flavor, depth, statistics.median(times) * 1000))
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    wait_for(lambda: intent_docs(backend) == {}, 60, what="no lock left")


def _bulks_of_renames_while_held(backend, a, n):
    """Renames d<i>/f to d<i>/g for i < N on mount A all at once while the
    store holds each request 300 ms; every rename must succeed. Returns the
    _bulk requests the store served for them."""
    for i in range(n):
        makedirs(a, "d%d" % i)
        write(a, "d%d/f" % i)
    backend.latency(300)
    try:
        backend.reset_stats()
        ops = [start_op(os.rename, a.path("d%d/f" % i), a.path("d%d/g" % i)) for i in range(n)]
        for op in ops:
            op.join(30)
            assert op.error is None
        # releases handed to the sender thread may still be on their way:
        # count once every lock is gone
        wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 60,
                 what="the renames' releases")
        return backend.stats()["requests"].get("bulk", 0)
    finally:
        backend.latency(0)


@ES8_AND_ENGINES
def test_es__one_request_in_flight_is_shared(backend, es_mounts):
    """es_inflight=1: while the mount's one request is out (each held
    300 ms), the lock operations of the other renames queue and leave
    together; six renames in six directories, each with its own outcome."""
    n = 6
    (a,) = es_mounts(backend, "A", lease_ttl=60, opts={"A": ["es_inflight=1"]})
    bulks = _bulks_of_renames_while_held(backend, a, n)
    # alone, each rename sends two: here the first acquire goes alone, the
    # other five leave in one request, and the releases share the same way
    assert 2 <= bulks <= n, bulks
    for i in range(n):
        assert os.listdir(a.bpath("d%d" % i)) == ["g"]
    wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 10,
             what="no lock left")


@pytest.mark.backends("emulator-es8")
def test_es__rename_alone_returns_after_one_round_trip(backend, es_mounts):
    """An uncontended rename returns once its acquire is answered and its
    work is done: its release, handed to the mount's sender thread, is
    still held on its way to the store (four times the rename's hold) when
    the rename has returned, and lands afterwards. (Before, the rename
    waited for it.) The hold is 2 s where the store answers at once, and
    twice that again each time a busy machine made it end before the store
    was slowed down, or made the rename return late."""
    def scenario(scale, tag):
        hold = 2 * scale
        (a,) = es_mounts(backend, "A", tag=tag, lease_ttl=120,
                         opts={"A": ["es_timeout_ms=60000", "lock_timeout=120",
                                     "rename_delay_ms=%d" % (hold * 1000)]})
        write(a, "f")
        op = start_op(os.rename, a.path("f"), a.path("g"))
        wait_for(lambda: held_by(backend, "/f"), 60, what="the rename's locks")
        backend.latency(4 * hold * 1000)  # every request from now on: the release first
        try:
            # the rename holds its locks for HOLD s: still doing so now, or
            # the release may have gone before the latency
            if not op.is_alive():
                return not_held("the rename ended before the store was slowed down", a)
            # it returns within its hold and some slack, well before its
            # release could be answered (4 x HOLD)
            op.join(2 * hold)
            if op.is_alive():
                op.finish(300)
                if held_by(backend, "/f") is None:
                    raise AssertionError("the rename waited for its release to be answered")
                return not_held("the rename returned late, its release still held", a)
            assert op.error is None
            assert held_by(backend, "/f") is not None  # the release is on its way
        finally:
            backend.latency(0)
        wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 120,
                 what="the rename's release")
    run_scaled(backend, scenario)


@pytest.mark.backends("emulator-es8")
def test_es__no_group_commit_sends_each_rename_alone(backend, es_mounts):
    """no_es_group_commit: six renames at once while each request is held
    300 ms, and still every one sends its own acquire and its own release
    (with group commit they would share: see the test above). On the
    emulator only: a real engine on a busy machine answers some of them
    after the mount's 1 s timeout, and their resends count too."""
    n = 6
    (a,) = es_mounts(backend, "A", lease_ttl=60, opts={"A": ["no_es_group_commit"]})
    bulks = _bulks_of_renames_while_held(backend, a, n)
    assert bulks == 2 * n, bulks
    for i in range(n):
        assert os.listdir(a.bpath("d%d" % i)) == ["g"]
    wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 10,
             what="no lock left")


# ---- the guide's scenarios across mounts -------------------------------------------------


@pytest.mark.backends("emulator", "engines", "opensearch3")
def test_es__guide_scenario_across_mounts(backend, es_mounts):
    # leases that hold on a busy machine: a lapsed one would rightly be
    # taken over, which is not this test's subject
    a, b = es_mounts(backend, "A", "B", opts={"A": ["rename_delay_ms=1500"] + PATIENT,
                                              "B": PATIENT})
    makedirs(a, "clinton", "projects", "elasticsearch")
    write(a, "clinton/projects/elasticsearch/README.txt", "guide")
    big = start_op(os.rename, a.path("clinton"), a.path("bill"))
    wait_for(lambda: held_by(backend, "/clinton"), 120, what="A's lock on /clinton")
    small = start_op(os.rename, b.path("clinton/projects/elasticsearch/README.txt"),
                     b.path("clinton/projects/elasticsearch/README.asciidoc"))
    big.finish(300)
    small.finish(300)
    assert big.error is None, (big.error, a.log())
    # the second waited for the first, then found its source gone
    assert small.errno == errno.ENOENT
    with open(b.path("bill/projects/elasticsearch/README.txt")) as f:
        assert f.read() == "guide"
    assert not os.path.exists(a.bpath("clinton"))
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")


@ES8_AND_ENGINES
def test_es__disjoint_renames_overlap(backend, es_mounts):
    """B's rename, started while A holds its locks, takes its own at once:
    both are held together, and B never met a conflict."""
    a, b = es_mounts(backend, "A", "B", opts={"A": ["rename_delay_ms=4000"] + PATIENT,
                                              "B": ["rename_delay_ms=4000"] + PATIENT})
    for d in ("x", "y"):
        makedirs(a, d)
        write(a, d + "/f")
    first = start_op(os.rename, a.path("x/f"), a.path("x/g"))
    wait_for(lambda: held_by(backend, "/x/f"), 30, what="A's locks")
    second = start_op(os.rename, b.path("y/f"), b.path("y/g"))
    wait_for(lambda: held_by(backend, "/y/f"), 30, what="B's locks")
    overlapped = held_by(backend, "/x/f") is not None
    for op in (first, second):
        op.finish(300)
        assert op.error is None
    assert overlapped, "A's locks were gone when B got its own"
    st = b.stats()
    assert st["conflicts"] == 0 and st["waits"] == 0, st


@ES8_AND_ALL_ENGINES
def test_es__crossing_directory_moves(backend, es_mounts):
    a, b = es_mounts(backend, "A", "B", opts={"A": ["rename_delay_ms=50"], "B": ["rename_delay_ms=50"]})
    for i in range(8):
        root = "r%d" % i
        makedirs(a, root, "a", "deep")
        makedirs(a, root, "b", "deep")
        write(a, root + "/a/deep/fa", "a")
        write(a, root + "/b/deep/fb", "b")
        ops = [start_op(os.rename, a.path(root, "a"), a.path(root, "b", "x")),
               start_op(os.rename, b.path(root, "b"), b.path(root, "a", "y"))]
        for op in ops:
            op.join(20)
        ok = [op for op in ops if op.error is None]
        assert len(ok) == 1, [op.error for op in ops]
        # The loser fails cleanly: ENOENT when it waited for the winner's
        # move; EINVAL when it started only after that move had finished while
        # its kernel still cached the moved directory (entry_timeout): it then
        # asks, in the backing's tree, to move a directory into itself.
        for op in ops:
            assert op.error is None or op.errno in (errno.ENOENT, errno.EINVAL), op.error
        # nothing lost, nothing detached: both files reachable from the root
        found = set()
        for dirpath, _, files in os.walk(a.bpath(root)):
            found.update(files)
        assert found == {"fa", "fb"}
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")


# ---- guide interoperability ----------------------------------------------------------------

GUIDE_SHARED = ("if (ctx._source.lock_type == 'exclusive') { throw new IllegalStateException('x'); }"
                " ctx._source.lock_count++")
GUIDE_RELEASE = "if (--ctx._source.lock_count == 0) { ctx.op = 'delete' }"


def guide_exclusive(emu, key):
    return es_request(emu, "PUT", "/%s/_create/%s" % (INDEX, quote_id(key)),
                      {"lock_type": "exclusive"})[0]


def guide_shared(emu, key):
    return es_request(emu, "POST", "/%s/_update/%s" % (INDEX, quote_id(key)),
                      {"upsert": {"lock_type": "shared", "lock_count": 1},
                       "script": {"source": GUIDE_SHARED, "lang": "painless"}})


def test_es__guide_lock_blocks_mount(backend, es_mounts):
    (a,) = es_mounts(backend, "A", opts={"A": PATIENT})
    makedirs(a, "clinton", "projects")
    assert guide_exclusive(backend, "/clinton") == 201
    op = start_op(os.rename, a.path("clinton/projects"), a.path("clinton/p2"))
    time.sleep(1.0)
    assert op.is_alive(), "the mount ignored the guide's exclusive lock on an ancestor"
    assert es_request(backend, "DELETE", "/%s/_doc/%s" % (INDEX, quote_id("/clinton")))[0] == 200
    op.finish(300)
    assert op.error is None and op.elapsed >= 1.0
    # the rename returned before its release was answered (one round
    # trip): its share of /clinton goes a moment later
    wait_for(lambda: lock_docs(backend) == {}, 60, what="the rename's release")
    # a guide-style shared lock lets shared holders in, blocks exclusive
    status, _ = guide_shared(backend, "/clinton")
    assert status == 201
    os.rename(a.path("clinton/p2"), a.path("clinton/p3"))  # shared on /clinton: fine
    op = start_op(os.rename, a.path("clinton"), a.path("bill"))
    time.sleep(1.0)
    assert op.is_alive(), "the mount took /clinton exclusive over a guide shared lock"
    es_request(backend, "POST", "/%s/_update/%s" % (INDEX, quote_id("/clinton")),
               {"script": {"source": GUIDE_RELEASE, "lang": "painless"}})
    op.finish(300)
    assert op.error is None
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")


def test_es__mount_lock_blocks_guide(backend, es_mounts):
    # the mount holds its locks (rename_delay_ms) while the guide's four
    # requests are answered: 3 s where the store answers at once, and
    # twice that again each time a busy machine made the hold end before
    # them (checked below), rather than 10 s every time
    def scenario(scale, tag):
        (a,) = es_mounts(backend, "A", tag=tag,
                         opts={"A": ["rename_delay_ms=%d" % (3000 * scale)] + PATIENT})
        makedirs(a, "p", "q")
        write(a, "p/q/r")
        op = start_op(os.rename, a.path("p/q/r"), a.path("p/q/s"))
        wait_for(lambda: held_by(backend, "/p/q/r"), 120, what="the mount's locks")
        # exclusive held by the mount: the guide's create and shared update fail
        excl_leaf = guide_exclusive(backend, "/p/q/r")
        shared_leaf = guide_shared(backend, "/p/q/r")
        # shared held by the mount: guide shared joins, guide exclusive fails
        excl_parent = guide_exclusive(backend, "/p")
        shared_parent = guide_shared(backend, "/p")
        count = (held_by(backend, "/p") or {}).get("lock_count")
        if not op.is_alive():
            op.finish(300)
            return not_held("the mount let go before the guide's requests were answered", a)
        assert excl_leaf == 409
        status, body = shared_leaf
        assert status == 400 and "script_exception" in str(body)
        assert excl_parent == 409
        assert shared_parent[0] == 200
        assert count == 2
        op.finish(300)
        assert op.error is None
        # the guide's share is left once the rename's release is answered
        wait_for(lambda: (held_by(backend, "/p") or {}).get("lock_count") == 1, 60,
                 what="the rename's release")
        assert held_by(backend, "/p")["lock_count"] == 1
        es_request(backend, "POST", "/%s/_update/%s" % (INDEX, quote_id("/p")),
                   {"script": {"source": GUIDE_RELEASE, "lang": "painless"}})
        wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    run_scaled(backend, scenario)


# ---- faults ----------------------------------------------------------------------------------


def test_es__store_down_at_mount_time(mount_factory, tmp_path):
    m = mount_factory(opts=["lock_store=es", "es_url=http://127.0.0.1:1", "owner=A",
                            "es_start_timeout=1"], start=False)
    r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    err = r.stdout + r.stderr
    assert "cannot reach the lock store" in err, err


@ES8_AND_ENGINES
def test_es__strategy_mismatch_refused(backend, es_mounts, mount_factory, tmp_path):
    es_mounts(backend, "A")
    m = mount_factory(opts=es_opts(backend, "B", "lock_strategy=global"), name="mntG", start=False)
    r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "refusing to mix strategies" in r.stdout + r.stderr


@ES8_AND_ENGINES
def test_es__paused_store_fails_in_time_and_cleans_up(backend, es_mounts):
    (a,) = es_mounts(backend, "A", opts={"A": ["lock_timeout=3", "es_timeout_ms=500"]})
    makedirs(a, "s")
    write(a, "s/f")
    backend.pause()
    try:
        op = start_op(os.rename, a.path("s/f"), a.path("s/g"))
        op.join(15)
        assert not op.is_alive()
        assert op.errno in (errno.EBUSY, errno.ENOLCK), op.error
        assert op.elapsed < 3 + 2.5, op.elapsed
    finally:
        backend.resume()
    wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 8,
             what="locks cleaned up after resume")
    # the lease recovers: renames work again
    deadline = time.monotonic() + 8
    while True:
        try:
            os.rename(a.path("s/f"), a.path("s/g"))
            break
        except OSError as e:
            assert e.errno == errno.ENOLCK and time.monotonic() < deadline
            time.sleep(0.3)
    assert os.path.exists(a.bpath("s/g"))


@pytest.mark.parametrize("kind", ["503", "429", "reset"])
@ES8_AND_ENGINES
def test_es__injected_faults(backend, es_mounts, kind):
    # delegations off: each rename meets the faults in the store, and none is left held
    (a,) = es_mounts(backend, "A", opts={"A": ["delegations=off"]})
    makedirs(a, "f", "g")
    write(a, "f/g/x")
    name = "x"
    for i in range(6):
        backend.fail(kind, 2)
        os.rename(a.path("f/g", name), a.path("f/g", "x%d" % i))
        name = "x%d" % i
    assert os.listdir(a.bpath("f/g")) == [name]
    wait_for(lambda: lock_docs(backend) == {}, 5, what="no lock left")


@pytest.mark.emulator_only("users and passwords are the emulator's options")
def test_es__wrong_password(tmp_path_factory, mount_factory, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("right-horse")
    emu = start_emulator(tmp_path_factory, "es8", ["--user", "elastic", "--password-file", str(pw)])
    try:
        m = mount_factory(opts=es_opts(emu, "A", "es_user=elastic", "es_allow_insecure=1"), start=False)
        env = dict(os.environ, TREELOCKFS_ES_PASSWORD="battery-staple-wrong")
        r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30, env=env)
        out = r.stdout + r.stderr
        assert r.returncode == 1
        assert "battery-staple-wrong" not in out
        lines = [l for l in out.splitlines() if "credentials" in l]
        assert len(lines) == 1, out
        # and with the right one (from a private file) it mounts and renames
        secret = tmp_path / "secret"
        secret.write_text("right-horse\n")
        os.chmod(secret, 0o600)
        ok = mount_factory(opts=es_opts(emu, "A", "es_user=elastic", "es_allow_insecure=1",
                                        "es_password_file=%s" % secret), name="mntok")
        os.mkdir(ok.path("d"))
        os.rename(ok.path("d"), ok.path("e"))
        ok.stop()
        assert "right-horse" not in ok.log()
    finally:
        emu.stop()


@pytest.mark.emulator_only("TLS with a private CA is the emulator's option")
def test_es__tls_with_private_ca(tmp_path_factory, mount_factory, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    emu = start_emulator(tmp_path_factory, "es8", ["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        assert emu.url.startswith("https://")
        # without the CA: refused at mount time, at once (waiting for the
        # store to come up does not make its certificate trusted)
        m = mount_factory(opts=es_opts(emu, "A"), name="mntnoca", start=False)
        t0 = time.monotonic()
        r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30)
        assert r.returncode == 1
        assert time.monotonic() - t0 < 5, r.stderr
        assert "retrying" not in r.stderr, r.stderr
        ok = mount_factory(opts=es_opts(emu, "A", "es_cacert=%s" % cert), name="mntca")
        os.mkdir(ok.path("d"))
        os.rename(ok.path("d"), ok.path("e"))
        assert ctl(emu, "check", extra=["--es_cacert=%s" % cert]).returncode == 0
        ok.stop()
    finally:
        emu.stop()


@pytest.mark.libfuse  # libfuse's fuse_daemonize
@pytest.mark.emulator_only("TLS with a private CA is the emulator's option")
def test_es__relative_cacert_serves_once_daemonised(tmp_path_factory, tmp_path, monkeypatch):
    """es_cacert=cert.pem named from the caller's directory: the daemon
    leaves that directory when it goes to the background and its request
    threads move through the backing tree, yet every TLS connection made
    after that (renames from several threads, the lease's heartbeat)
    still finds the file."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    emu = start_emulator(tmp_path_factory, "es8", ["--tls-cert", str(cert), "--tls-key", str(key)])
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    pids = []
    try:
        monkeypatch.chdir(tmp_path)
        r = subprocess.run([BIN, str(backing), str(mnt), "-o",
                            ",".join(es_opts(emu, "A", "es_cacert=cert.pem", "max_threads=8"))],
                           capture_output=True, text=True, timeout=120)
        pids = daemons_of(str(mnt))
        assert r.returncode == 0, r.stderr
        assert is_mounted(str(mnt))
        monkeypatch.undo()
        for d in ("a/b/c", "x/y", "p"):
            os.makedirs(os.path.join(str(mnt), d))

        # renames from several threads at once
        errors = []

        def worker(top):
            try:
                src = os.path.join(str(mnt), top)
                for i in range(5):
                    dst = os.path.join(str(mnt), "%s-%d" % (top.replace("/", "_"), i))
                    os.rename(src, dst)
                    src = dst
                os.rename(src, os.path.join(str(mnt), top))
            except OSError as e:
                errors.append((top, e))

        tops = ["a/b/c", "x/y", "p"]
        ths = [threading.Thread(target=worker, args=(t,)) for t in tops]
        for t in ths:
            t.start()
        for t in ths:
            t.join(120)
        assert not errors, errors
        # past lease_ttl: the heartbeat renewed the lease over TLS too,
        # or this rename would be refused as fenced
        time.sleep(3)
        os.rename(os.path.join(str(mnt), "p"), os.path.join(str(mnt), "q"))
        assert os.path.isdir(os.path.join(str(mnt), "q"))
    finally:
        detach(str(mnt))
        gone = wait_gone(pids, 30)
        emu.stop()
    assert gone, "treelockfs did not exit after the unmount"


@ES8_AND_ALL_ENGINES
def test_es__ctl_check_and_locks(backend, es_mounts):
    # owners/intents watch each owner until its seq_no moves (up to
    # lease_ttl/3); the rename holds its locks through the five treelockctl
    # runs below (5 s where the store answers at once, twice that again
    # each time a busy machine made the hold end before them: checked),
    # and its lease holds too, on a busy machine (checked at the end)
    def scenario(scale, tag):
        (a,) = es_mounts(backend, "A", tag=tag,
                         opts={"A": ["rename_delay_ms=%d" % (5000 * scale), "lease_ttl=6",
                                     "es_timeout_ms=30000", "lock_timeout=120"]})
        makedirs(a, "u", "v")
        r = ctl(backend, "check")
        assert r.returncode == 0, r.stderr
        assert "strategy: tree" in r.stdout
        op = start_op(os.rename, a.path("u/v"), a.path("u/w"))
        wait_for(lambda: held_by(backend, "/u/v"), 120, what="locks")
        locks = ctl(backend, "locks")
        locks_v = ctl(backend, "locks", "/u/v")
        own = a.ctl("locks")  # the mount's own view of the store
        owners = ctl(backend, "owners")
        intents = ctl(backend, "intents", "--all")
        if not op.is_alive():
            op.finish(300)
            return not_held("the rename let go before treelockctl had looked", a)
        assert locks.returncode == 0
        assert "/u/v" in locks.stdout and "exclusive" in locks.stdout and "/u " in locks.stdout
        assert "/u/w" not in locks_v.stdout
        assert "/u/v" in own
        assert "alive" in owners.stdout and "A:" in owners.stdout
        assert "rename '/u/v' -> '/u/w'" in intents.stdout
        op.finish(300)
        assert op.error is None
    run_scaled(backend, scenario)
    assert ctl(backend, "bogus").returncode == 1
    t0 = time.monotonic()
    assert ctl(backend, "check", url="http://127.0.0.1:1").returncode == 2
    assert time.monotonic() - t0 < 5  # a diagnostic reports at once


@pytest.mark.parametrize("strategy", ["global", "document"])
@ES8_AND_ENGINES
def test_es__global_and_document_strategies(backend, es_mounts, strategy):
    a, b = es_mounts(backend, "A", "B",
                     opts={"A": ["lock_strategy=" + strategy, "rename_delay_ms=1000"] + PATIENT,
                           "B": ["lock_strategy=" + strategy] + PATIENT})
    makedirs(a, "clinton", "projects")
    write(a, "clinton/projects/README.txt")
    op = start_op(os.rename, a.path("clinton"), a.path("bill"))
    if strategy == "global":
        src = wait_for(lambda: held_by(backend, "global"), 120, what="the global lock")
    else:
        # X on the source, every entry below it, and the destination
        wait_for(lambda: held_by(backend, "/clinton/projects/README.txt"), 120,
                 what="document locks")
        src = held_by(backend, "/clinton")
        assert held_by(backend, "/clinton/projects") and held_by(backend, "/bill")
    assert src["lock_type"] == "exclusive" and src["process_id"].startswith("A:")
    other = start_op(os.rename, b.path("clinton/projects/README.txt"),
                     b.path("clinton/projects/README.asciidoc"))
    op.finish(300)
    other.finish(300)
    assert op.error is None
    assert other.errno == errno.ENOENT
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")


@pytest.mark.emulator_only("API keys are the emulator's option")
def test_es__api_key(tmp_path_factory, mount_factory, tmp_path):
    import base64
    keyfile = tmp_path / "emu-key"
    keyfile.write_text("kid:ksecret")
    emu = start_emulator(tmp_path_factory, "es8", ["--api-key-file", str(keyfile)])
    try:
        enc = tmp_path / "api-key"
        enc.write_text(base64.b64encode(b"kid:ksecret").decode() + "\n")
        os.chmod(enc, 0o600)
        m = mount_factory(opts=es_opts(emu, "A", "es_allow_insecure=1", "es_api_key_file=%s" % enc))
        os.mkdir(m.path("d"))
        os.rename(m.path("d"), m.path("e"))
        m.stop()
        assert "ksecret" not in m.log()
        enc.write_text("kid:ksecret\n")  # the id:key form is encoded for us
        m = mount_factory(opts=es_opts(emu, "A", "es_allow_insecure=1", "es_api_key_file=%s" % enc), name="mnt2")
        os.rename(m.path("e"), m.path("f"))
        m.stop()
    finally:
        emu.stop()


@ES8_AND_ENGINES
def test_es__store_paused_while_holding(backend, es_mounts):
    """The store stops answering after the locks were taken: the rename
    ends (renamed, or ENOLCK when the lease went stale meanwhile) and the
    locks it could not release are released once the store is back."""
    def scenario(scale, tag):
        # the rename holds its locks for 0.8 s (x SCALE, the store's answer
        # time): the test must see them in the store within that window,
        # and a slow store may even refuse the acquire in time
        (a,) = es_mounts(backend, "A", tag=tag,
                         opts={"A": ["rename_delay_ms=%d" % (800 * scale),
                                     "es_timeout_ms=%d" % (400 * scale),
                                     "lock_timeout=%d" % (3 * scale)]})
        makedirs(a, "h")
        write(a, "h/f")
        op = start_op(os.rename, a.path("h/f"), a.path("h/g"))
        try:
            wait_for(lambda: held_by(backend, "/h/f") or not op.is_alive(), 5 * scale,
                     what="the locks")
            seen = op.is_alive()   # else the rename ended before they were seen
        except AssertionError:
            seen = False
        if not seen:
            op.join(30 * scale)
            return not_held("the locks were not seen in the store while the rename "
                            "held them (rename: %s)" % (op.error or "done"), a)
        backend.pause()
        try:
            op.join(15 * scale)
            assert not op.is_alive()
            assert op.error is None or op.errno == errno.ENOLCK, op.error
            assert lock_docs(backend) != {}  # still there: the release could not be sent
        finally:
            backend.resume()
        wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 10 * scale,
                 what="the kept release after resume")
    run_scaled(backend, scenario)


@ES8_AND_ENGINES
def test_es__kept_release_resent_before_the_heartbeat(backend, es_mounts):
    """A release the store refuses (429, as an overloaded node answers) is
    kept and resent within moments, not at the next heartbeat (here 200 s
    away): until it is, the mount's own renames of those names would wait
    for locks that nobody holds any more."""
    (a,) = es_mounts(backend, "A", lease_ttl=600,
                     opts={"A": ["rename_delay_ms=800", "lock_timeout=60"]})
    makedirs(a, "k")
    write(a, "k/f")
    op = start_op(os.rename, a.path("k/f"), a.path("k/g"))
    wait_for(lambda: held_by(backend, "/k/f"), 120, what="the locks")
    backend.fail("429", 3)  # every attempt of the release within its deadline
    op.finish(300)
    assert op.error is None
    # a release handed to the sender thread is refused a moment after the
    # rename returned
    wait_for(lambda: "HTTP 429" in a.log() and "release kept for a later retry" in a.log(), 60,
             what="the release refused and kept")
    wait_for(lambda: lock_docs(backend) == {} and intent_docs(backend) == {}, 10,
             what="the kept release, resent")
    os.rename(a.path("k/g"), a.path("k/f"))  # the same names again
    assert os.listdir(a.bpath("k")) == ["f"]


@ES8_AND_ENGINES
def test_es__ctl_break(backend, es_mounts):
    (a,) = es_mounts(backend, "A", opts={"A": PATIENT})
    makedirs(a, "x")
    assert guide_exclusive(backend, "/x") == 201
    # no terminal to confirm on: refused
    r = subprocess.run([__import__("es_helpers").CTL, "--es_url=" + backend.url, "break", "/x"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                       start_new_session=True)
    assert r.returncode == 1 and "--force" in r.stderr
    assert held_by(backend, "/x") is not None
    r = ctl(backend, "break", "/x", "--force")
    assert r.returncode == 0, r.stderr
    assert held_by(backend, "/x") is None
    os.rename(a.path("x"), a.path("y"))
    assert ctl(backend, "break", "/nothing", "--force").returncode == 2


NO_REPLICA = "no replica on a cluster of 3 data nodes"


@pytest.mark.emulator_only("the cluster's node count is the emulator's to set (/_esemu/nodes); "
                           "tests/engines checks a real three-node cluster")
def test_es__start_warns_where_the_index_has_no_replica(emu, es_mounts):
    emu.admin("POST", "/_esemu/nodes", {"data_nodes": 3})
    # the index as the store makes it: a replica wherever a second node is
    (a,) = es_mounts(emu, "A")
    a.stop()
    assert NO_REPLICA not in a.log(), a.log()
    r = ctl(emu, "check")
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout
    assert json.loads(ctl(emu, "check", "--json").stdout)["warnings"] == []
    # made again by hand, without a replica: every start says so, and check
    backends.recreate_without_replica(emu.url)
    (b,) = es_mounts(emu, "B")
    wait_for(lambda: "lock index '%s': %s" % (INDEX, NO_REPLICA) in b.log(), 10,
             what="the warning")
    r = ctl(emu, "check")
    assert r.returncode == 0 and "warning:  " + NO_REPLICA in r.stdout, r.stdout
    doc = json.loads(ctl(emu, "check", "--json").stdout)
    assert len(doc["warnings"]) == 1 and doc["warnings"][0].startswith(NO_REPLICA), doc
    # renames go on: a warning, not a refusal
    makedirs(b, "x")
    os.rename(b.path("x"), b.path("y"))
    # on one node there is nowhere to put a replica: nothing to say
    emu.admin("POST", "/_esemu/nodes", {"data_nodes": 1})
    r = ctl(emu, "check")
    assert r.returncode == 0 and "warning:" not in r.stdout, r.stdout
