"""The es lock store against a careless admin and a hostile cluster user:
start bounded by es_start_timeout, credentials over plain HTTP, stored
scripts that are not ours, names of unreadable directories in the lock
listing, directories too large for one request, and an unmount while the
store is busy."""
import errno
import os
import socket
import subprocess
import time

import pytest

from conftest import open_tree, run_as
from es_helpers import (ES8_AND_ENGINES, INDEX, ctl, emu, emu_module, es_mounts, es_opts,  # noqa: F401,E501
                        es_request, forget_mount, held_by, intent_docs, lease_trouble, lock_docs,
                        not_held, owner_id, quote_id, run_scaled, start_op, timed_out_requests,
                        wait_for)

# the lock store's protocol: the same code on every libfuse (run-tests.sh)
pytestmark = pytest.mark.lock_store

OTHER_USER = 4243


# ---- es_start_timeout bounds the start, its last attempt included -----------------------------


@pytest.mark.parametrize("silent", [False, True], ids=["closed-port", "silent-listener"])
def test_es__start_fails_within_start_timeout(mount_factory, silent):
    # a closed loopback port refuses at once; a listener that never
    # answers makes every request wait for its whole timeout: the last
    # attempt must be cut to what is left of es_start_timeout
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    if silent:
        s.listen(64)
    else:
        s.close()
    try:
        m = mount_factory(opts=["lock_store=es", "es_url=http://127.0.0.1:%d" % port, "owner=A",
                                "es_timeout_ms=3000", "es_start_timeout=4"], start=False)
        t0 = time.monotonic()
        r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        s.close()
    err = r.stdout + r.stderr
    assert r.returncode == 1, err
    assert "es_start_timeout 4 s" in err, err
    # 4 s and the slack of starting a process on a busy machine
    assert elapsed < 4 + 1.5, (elapsed, err)


# ---- credentials over plain http: refused unless es_allow_insecure=1 ------------------------


@pytest.mark.parametrize("cred", ["user", "api-key"])
def test_es__credentials_over_http_refused(mount_factory, tmp_path, cred):
    key = tmp_path / "key"
    key.write_text("kid:ksecret-xyzzy\n")
    os.chmod(key, 0o600)
    s = socket.socket()  # a port that counts the connections made to it
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.settimeout(0.5)
    port = s.getsockname()[1]
    extra = ["es_user=u"] if cred == "user" else ["es_api_key_file=%s" % key]
    try:
        m = mount_factory(opts=["lock_store=es", "es_url=http://127.0.0.1:%d" % port, "owner=A",
                                "es_start_timeout=0"] + extra, start=False)
        r = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, TREELOCKFS_ES_PASSWORD="pw-secret-xyzzy"))
        with pytest.raises(socket.timeout):
            s.accept()  # refused before a single request
        # treelockctl follows the same rule
        c = subprocess.run(ctl_cmd("http://127.0.0.1:%d" % port, extra, "check"),
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, TREELOCKFS_ES_PASSWORD="pw-secret-xyzzy"))
    finally:
        s.close()
    for res in (r, c):
        out = res.stdout + res.stderr
        assert res.returncode != 0, out
        assert "would travel unencrypted" in out and "es_allow_insecure=1" in out, out
        assert "secret-xyzzy" not in out


def ctl_cmd(url, extra, *args):
    from conftest import CTL
    return [CTL, "--es_url=" + url] + ["--" + e for e in extra] + list(args)


@pytest.mark.emulator_only("a store that asks for a password is the emulator's option")
def test_es__credentials_over_http_allowed_and_warned(tmp_path_factory, mount_factory, tmp_path):
    from es_helpers import start_emulator
    pw = tmp_path / "pw"
    pw.write_text("right-horse")
    emu = start_emulator(tmp_path_factory, "es8", ["--user", "elastic", "--password-file", str(pw)])
    env = dict(os.environ, TREELOCKFS_ES_PASSWORD="right-horse")
    try:
        m = mount_factory(opts=es_opts(emu, "A", "es_user=elastic", "es_allow_insecure=1"),
                          env=env)
        assert "API key of the lock store travels unencrypted (http://)" in m.log(), m.log()
        os.mkdir(m.path("d"))
        os.rename(m.path("d"), m.path("e"))
        conf = tmp_path / "ctl.conf"
        conf.write_text("es_user = elastic\nes_allow_insecure = 1\n")
        c = subprocess.run(ctl_cmd(emu.url, ["config=%s" % conf], "check"),
                           capture_output=True, text=True, timeout=30, env=env)
        assert c.returncode == 0, c.stdout + c.stderr
        assert "warning:  credentials travel unencrypted (http://, es_allow_insecure)" \
            in c.stdout, c.stdout
        m.stop()
        assert "right-horse" not in m.log()
    finally:
        emu.stop()


# ---- .treelockfs/locks: every key form judged by the entry it names ---------------------------


def fsname(m, *parts):
    return os.path.join(os.fsencode(m.mnt), *[os.fsencode(p) if isinstance(p, str) else p
                                              for p in parts])


@ES8_AND_ENGINES
def test_es__locks_file_hides_names_of_unlistable_dirs(backend, es_mounts, tmp_path):
    # renames hold their locks for a while; another user reads the list.
    # Three renames must hold at once while both read: 6 s where the
    # store answers at once, twice that again each time a busy machine
    # made a hold end before the reads (checked), rather than 30 s always
    def scenario(scale, tag):
        (a,) = es_mounts(backend, "A", tag=tag,
                         opts={"A": ["allow_other", "rename_delay_ms=%d" % (6000 * scale),
                                     "lock_timeout=60"]})
        os.chmod(a.mnt, 0o755)
        open_tree(tmp_path)
        for d, mode in (("sec700", 0o700), ("x711", 0o711), ("pub", 0o755)):
            os.mkdir(fsname(a, d))
            os.chmod(fsname(a, d), mode)
        for parts in (("sec700", b"caf\xe9-secret"), ("x711", "hidden-name"),
                      ("pub", b"pub\xe9-open")):
            open(fsname(a, *parts), "w").close()
        ops = [start_op(os.rename, fsname(a, "sec700", b"caf\xe9-secret"),
                        fsname(a, "sec700", b"caf\xe9-secret2")),
               start_op(os.rename, fsname(a, "x711", "hidden-name"), fsname(a, "x711", "hidden-2")),
               start_op(os.rename, fsname(a, "pub", b"pub\xe9-open"),
                        fsname(a, "pub", b"pub\xe9-2"))]
        held = False
        try:
            def state():
                if all(held_by(backend, k) for k in KEYS):
                    return "held"
                if not all(op.is_alive() for op in ops):
                    return "one let go"
                return None
            held = wait_for_or_none(state, 25 * scale) == "held"
            if held:
                as_root = a.ctl("locks")
                open_tree(tmp_path)
                as_other = run_as(OTHER_USER, OTHER_USER, lambda: a.ctl("locks"))
                held = all(op.is_alive() for op in ops)
        finally:
            for op in ops:
                op.join(90 * scale)
        for op in ops:
            assert op.error is None, op.error
        if not held:
            return not_held("the three renames did not hold their locks at once while the "
                            "list was read; held: %s" % sorted(lock_docs(backend)), a)
        # the listing escapes backslashes: one key is one line of text
        shown = [k.replace("\\", "\\\\") for k in KEYS]
        for k in shown:
            assert k in as_root, (k, as_root)
        assert as_other.startswith("# mode"), as_other
        # a name that is not UTF-8, in a 0700 directory
        assert "secret" not in as_other, as_other
        # a name in a directory the user may search but not list
        assert "hidden" not in as_other, as_other
        # what the user may list stays visible, whatever its form
        assert shown[2] in as_other and "/pub/pub\\\\xe9-2" in as_other, as_other
        assert " /x711\n" in as_other, as_other  # a name in /, which the user may list
    run_scaled(backend, scenario)


KEYS = ["bytes:/sec700/caf\\xe9-secret", "/x711/hidden-name", "bytes:/pub/pub\\xe9-open"]


def wait_for_or_none(pred, timeout, step=0.02):
    """PRED's first true value within TIMEOUT seconds, or None."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v or None
        time.sleep(step)


# ---- a stored script under our id that is not ours ---------------------------------------------

SCRIPT_IDS = ["treelockfs-%s-v1" % n for n in ("acqs", "acqx", "rel", "mark", "unmark", "evict")]
EXCLUSIVE_CHECK = "if (s.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); }"


def replace_script(backend, sid, source=None, lang="painless"):
    st, body = es_request(backend, "GET", "/_scripts/" + sid)
    assert st == 200 and body["found"], body
    src = body["script"]["source"] if source is None else source
    st, body = es_request(backend, "PUT", "/_scripts/" + sid,
                          {"script": {"lang": lang, "source": src}})
    assert st == 200, body


@ES8_AND_ENGINES
def test_es__foreign_acquire_script_does_not_break_exclusion(backend, es_mounts):
    # A's heartbeat (every lease_ttl/3) finds the foreign script; A holds
    # /p/q while B starts and B's lock_timeout runs out (6 s, where B needs
    # about 3 on a quiet machine): these timings are scaled by the store's
    # answer time, and doubled again when a run's setup did not hold (A's
    # lease lapsed, A's rename ended first)
    def scenario(scale, tag):
        for sid in SCRIPT_IDS:  # a fresh cluster: A stores ours
            es_request(backend, "DELETE", "/_scripts/" + sid)
        (a,) = es_mounts(backend, "A", tag=tag, lease_ttl=2 * scale,
                         opts={"A": ["rename_delay_ms=%d" % (6000 * scale), "lock_timeout=120",
                                     "es_timeout_ms=30000"]})
        assert "lock scripts: stored in the cluster" in a.log(), a.log()
        os.makedirs(a.path("p", "q"))
        open(a.path("p", "q", "f"), "w").close()
        # the shared acquire script, without its exclusive check, under our id
        st, body = es_request(backend, "GET", "/_scripts/treelockfs-acqs-v1")
        foreign = body["script"]["source"].replace(EXCLUSIVE_CHECK, "")
        assert foreign != body["script"]["source"]
        replace_script(backend, "treelockfs-acqs-v1", foreign)
        # the running mount finds it at its next check, a new one at start
        wait_for(lambda: "treelockfs-acqs-v1 is not ours" in a.log(), 120,
                 what="mount A's heartbeat to find the foreign script")
        (b,) = es_mounts(backend, "B", tag=tag, opts={"B": ["lock_timeout=%d" % (2 * scale),
                                                            "lease_ttl=60"]})
        line = [x for x in b.log().splitlines() if "lock scripts:" in x]
        assert line and ("stored script treelockfs-acqs-v1 is not ours: its source differs "
                         "from this release's: sending every script inline" in line[0]), b.log()
        r = ctl(backend, "check")
        assert ("scripts:  inline (stored script treelockfs-acqs-v1 is not ours: its source "
                "differs from this release's)") in r.stdout, r.stdout
        # A holds /p/q exclusive while it renames it; B's rename below
        # needs /p/q shared: refused until A is done, so B gives up
        op_a = start_op(os.rename, a.path("p", "q"), a.path("p", "r"))
        try:
            wait_for(lambda: (held_by(backend, "/p/q") or {}).get("lock_type") == "exclusive",
                     120, what="A's exclusive lock on /p/q")
            op_b = start_op(os.rename, b.path("p", "q", "f"), b.path("p", "q", "g"))
            op_b.finish(300)
            a_held = op_a.is_alive()
        finally:
            op_a.finish(300)
        lapsed = lease_trouble(a)
        if lapsed:
            return not_held("A's lease lapsed: %s" % lapsed[0], a, b)
        if not a_held and op_b.error is not None:
            return not_held("A's rename ended before B's", a, b)
        # B never had /p/q while A held it exclusive: refused until its
        # deadline (EBUSY), or ENOLCK when the deadline cut the request
        # it was making then (a busy store answers slowly)
        assert op_b.errno == errno.EBUSY or (op_b.errno == errno.ENOLCK and
                                             timed_out_requests(b)), (op_b.error, b.log())
        assert "got its locks" not in b.log(), b.log()
        assert op_a.error is None, op_a.error
        assert os.path.exists(a.path("p", "r", "f"))
        wait_for(lambda: lock_docs(backend) == {}, 120, what="every lock released")
    try:
        run_scaled(backend, scenario)
    finally:
        for sid in SCRIPT_IDS:  # ours again for the tests after this one
            es_request(backend, "DELETE", "/_scripts/" + sid)


@pytest.mark.emulator_only("real engines refuse to store our source in another language "
                           "(mustache); the emulator stores what it is given")
def test_es__stored_script_of_another_language_is_not_ours(emu, es_mounts):
    backend = emu
    for sid in SCRIPT_IDS:
        es_request(backend, "DELETE", "/_scripts/" + sid)
    (a,) = es_mounts(backend, "A")
    # our release script's very source, stored as a search template
    replace_script(backend, "treelockfs-rel-v1", lang="mustache")
    (b,) = es_mounts(backend, "B")
    assert "stored script treelockfs-rel-v1 is not ours: its language differs" in b.log(), \
        b.log()
    wait_for(lambda: "treelockfs-rel-v1 is not ours" in a.log(), 20, what="A's re-check")
    os.mkdir(b.path("d"))
    os.rename(b.path("d"), b.path("e"))  # inline: works
    os.rename(a.path("e"), a.path("f"))
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    # stored again as ours: by id again, at the next check
    for sid in SCRIPT_IDS:
        es_request(backend, "DELETE", "/_scripts/" + sid)
    wait_for(lambda: a.log().count("lock scripts: stored in the cluster") >= 2, 20,
             what="A back to stored scripts")
    for sid in SCRIPT_IDS:
        es_request(backend, "DELETE", "/_scripts/" + sid)


# ---- document strategy: large plans in chunks; an unmount ends the daemon ----------------------


def fill(dirpath, n):
    for i in range(n):
        open(os.path.join(dirpath, "entry-%06d" % i), "w").close()


@ES8_AND_ENGINES
def test_es__document_plan_in_chunks_is_all_or_nothing(backend, es_mounts):
    # 2,500 entries: three requests; a lock held by a guide-style client on
    # an entry of the third refuses the plan, and what the first two took
    # is let go again
    # a lease long enough not to lapse, and requests allowed long enough
    # (within lock_timeout), while a busy machine's store answers the
    # plan's requests slowly
    (a,) = es_mounts(backend, "A", opts={"A": ["lock_strategy=document", "lock_timeout=5",
                                               "es_timeout_ms=300000"]}, lease_ttl=30)
    os.mkdir(a.path("big"))
    fill(a.bpath("big"), 2500)
    st, body = es_request(backend, "PUT", "/%s/_create/%s?refresh=true" % (
        INDEX, "%2Fbig%2Fentry-002400"), {"lock_type": "exclusive"})
    assert st == 201, body

    # nothing of ours is left: only the guide's lock, as it was, without
    # a live waiter mark of ours (the unmarks go in chunks too: wait for
    # the last). A mark is never resent; one whose request the store
    # applied only after the unmark (a busy machine's store reorders
    # requests of two connections) stays, but is stale once its own
    # timeout (age + tmo, wall clock ms) passed: others ignore it
    def only_the_guides_lock():
        docs_now = lock_docs(backend)
        if list(docs_now) != ["/big/entry-002400"]:
            return False
        waiters = docs_now["/big/entry-002400"]["_source"].get("waiters") or {}
        now_ms = time.time() * 1000
        return all(w["age"] + w["tmo"] < now_ms for w in waiters.values())
    refused = "waits for '/big/entry-002400', held by a client without owner"
    # on a busy machine the plan's three requests may not all be answered
    # within lock_timeout: then the refusal was not seen, and the rename
    # is tried again with a longer one (it waits for the guide's lock that
    # long: short first, as a quiet machine answers the plan in a second
    # or two)
    for lock_timeout in (5, 60, 600):
        a.set_option("lock_timeout=%d" % lock_timeout)
        with pytest.raises(OSError) as e:
            os.rename(a.path("big"), a.path("big2"))
        # EBUSY, or ENOLCK when the deadline cut the last attempt's requests
        assert e.value.errno in (errno.EBUSY, errno.ENOLCK), a.log()
        assert os.path.isdir(a.path("big")) and not os.path.exists(a.path("big2"))
        # past the deadline a bulk gets a short grace and what it could not
        # finish is kept for the heartbeat: on a busy machine that takes a
        # while
        wait_for(only_the_guides_lock, 900, what="every lock and mark of the refused plan let go")
        if refused in a.log():
            break
        print("\nlock_timeout=%d: the plan was not answered in time; again" % lock_timeout)
    assert refused in a.log(), a.log()
    src = lock_docs(backend)["/big/entry-002400"]["_source"]
    assert src["lock_type"] == "exclusive" and not src.get("holders"), src
    es_request(backend, "DELETE", "/%s/_doc/%s?refresh=true" % (INDEX, "%2Fbig%2Fentry-002400"))
    # the rename that must succeed, given the time its three requests take
    # on a busy machine
    a.set_option("lock_timeout=600")
    os.rename(a.path("big"), a.path("big2"))
    a.set_option("lock_timeout=20")  # what the daemon's exit may take
    assert len(os.listdir(a.path("big2"))) == 2500
    # three chunks of releases, each a bulk a busy node answers slowly
    wait_for(lambda: lock_docs(backend) == {}, 300, what="the rename's locks released")


def test_es__release_after_the_deadline_gets_its_own_time(emu, es_mounts):
    """A rename that used up lock_timeout (here: held past it) releases a
    plan of several chunks in full before it returns, instead of one
    chunk's grace and the rest left to the heartbeat's resends (a large
    directory's locks stayed in the store for half a minute)."""
    (a,) = es_mounts(emu, "A", opts={"A": ["lock_strategy=document", "lock_timeout=6",
                                           "rename_delay_ms=6500", "es_timeout_ms=30000"]},
                     lease_ttl=30)
    os.mkdir(a.path("big"))
    fill(a.bpath("big"), 2500)
    os.rename(a.path("big"), a.path("big2"))
    # a release of several chunks is waited for: nothing is left on return
    assert lock_docs(emu) == {} and intent_docs(emu) == {}
    assert "release kept" not in a.log(), a.log()[-2000:]


def test_es__clean_exit_leaves_no_lock_behind(emu, es_mounts):
    """What a mount may leave in the store (a plan the end of the mount cut
    short, a release that did not arrive, an intent whose delete failed)
    used to stay there under a lease deleted at a clean exit, listed as a
    dead owner's intent. Such documents, written here as the mount writes
    them, are gone after a clean unmount; another owner's share stays."""
    (a,) = es_mounts(emu, "A")
    os.makedirs(a.path("d"))
    owner = owner_id(emu, "A")
    holder = owner + "#999"
    now = int(time.time() * 1000)
    put = [("intent:" + holder, {"type": "intent", "owner": owner, "name": "A", "from": "/d/x",
                                 "to": "/d/y", "start": now, "pid": 1}),
           ("/d", {"lock_type": "shared", "lock_count": 2, "since": now,
                   "holders": {holder: 1, "other:1:1#1": 1}}),
           ("/d/x", {"lock_type": "exclusive", "owner": owner, "holder": holder,
                     "process_id": holder, "holders": {holder: 1}, "since": now, "pid": 1}),
           ("/d/y", {"lock_type": "exclusive", "owner": owner, "holder": holder,
                     "process_id": holder, "holders": {holder: 1}, "since": now, "pid": 1})]
    for doc_id, src in put:
        st, body = es_request(emu, "PUT", "/%s/_doc/%s?refresh=true" % (INDEX, quote_id(doc_id)),
                              src)
        assert st in (200, 201), body
    a.stop()
    left = lock_docs(emu)
    assert list(left) == ["/d"], left
    assert left["/d"]["_source"]["holders"] == {"other:1:1#1": 1}, left
    assert left["/d"]["_source"]["lock_count"] == 1, left
    assert intent_docs(emu) == {} and owner_id(emu, "A") is None
    assert "this mount had left in the lock store" in a.log(), a.log()[-3000:]


# minutes a backend: on the es8 emulator and one real engine, not on each
@pytest.mark.backends("emulator-es8", "opensearch")
def test_es__document_plan_of_a_large_directory(backend, es_mounts):
    # 100,200 entries: one _bulk answer would exceed the 16 MiB response
    # cap
    n = 100200
    # lock_timeout bounds the daemon's stop too (its last requests end by
    # 3/4 of it): 240 s lets the rename through on a busy machine and the
    # stop below end within its wait
    (a,) = es_mounts(backend, "A", opts={"A": ["lock_strategy=document", "lock_timeout=240",
                                           "es_timeout_ms=60000"]}, lease_ttl=30)
    os.mkdir(a.path("big"))
    fill(a.bpath("big"), n)
    backend.reset_stats()
    t0 = time.monotonic()
    try:
        os.rename(a.path("big"), a.path("big2"))
    except OSError:
        print(a.log()[-3000:])
        raise
    print("\nrenamed a directory of %d entries in %.1f s, %d requests" % (
        n, time.monotonic() - t0, backend.stats()["total"]))
    assert len(os.listdir(a.path("big2"))) == n
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    t0 = time.monotonic()
    a.stop(timeout=240)
    print("stopped in %.1f s" % (time.monotonic() - t0))


@ES8_AND_ENGINES
def test_es__unmount_ends_daemon_within_lock_timeout(backend, es_mounts):
    # the store stops answering; requests would wait es_timeout_ms (60 s)
    # each: the lease renewals, the release kept by a failed rename, the
    # lease's deletion at exit. After the unmount the daemon must be gone
    # within lock_timeout (and some slack for a busy machine)
    lock_timeout = 4
    (a,) = es_mounts(backend, "A", opts={"A": ["lock_timeout=%d" % lock_timeout,
                                               "es_timeout_ms=60000"]})
    os.mkdir(a.path("d"))
    backend.pause()
    try:
        with pytest.raises(OSError) as e:
            os.rename(a.path("d"), a.path("e"))
        assert e.value.errno == errno.ENOLCK
        r = subprocess.run(["fusermount3", "-u", a.mnt], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        t0 = time.monotonic()
        try:
            a.proc.wait(timeout=lock_timeout + 6)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon still runs %.1f s after the unmount (lock_timeout %d s):\n%s"
                        % (time.monotonic() - t0, lock_timeout, a.log()))
        print("\ndaemon gone %.1f s after the unmount" % (time.monotonic() - t0))
        # a quarter of lock_timeout into the stop, it says what it waits for
        assert "still stopping 1.0 s after the session ended" in a.log(), a.log()
    finally:
        backend.resume()
        forget_mount(a)
