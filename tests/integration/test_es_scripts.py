"""The es store's lock scripts: stored in the cluster at mount and referred
to by id, inline where storing them is refused, inline again should they
vanish while mounted; treelockctl check says which."""
import os

import pytest

from conftest import makedirs, write
from es_helpers import (ES8_AND_ALL_ENGINES, ES8_AND_ENGINES, ctl, emu, emu_module, es_mounts, es_request,  # noqa: F401
                        held_by, intent_docs, lock_docs, not_held, PATIENT, run_scaled, start_op,
                        wait_for)

# the lock store's protocol: the same code on every libfuse (run-tests.sh)
pytestmark = pytest.mark.lock_store

SCRIPT_IDS = ["treelockfs-%s-v1" % n for n in ("acqs", "acqx", "rel", "mark", "unmark", "evict")]


def renames_work(m, n=3):
    makedirs(m, "s/t")
    write(m, "s/t/f")
    src = "s/t/f"
    for i in range(n):
        dst = "s/t/g%d" % i
        os.rename(m.path(src), m.path(dst))
        src = dst
    os.rename(m.path("s/t"), m.path("s/u"))
    assert os.path.exists(m.path("s/u/" + os.path.basename(src)))


@ES8_AND_ENGINES
def test_es__scripts_stored_at_mount(backend, es_mounts):
    for sid in SCRIPT_IDS:  # a fresh cluster (other tests may have stored them)
        es_request(backend, "DELETE", "/_scripts/" + sid)
    # a lease and requests that hold however slowly a busy machine's node
    # answers: timing is not this test's subject
    (a,) = es_mounts(backend, "A", opts={"A": PATIENT})
    for sid in SCRIPT_IDS:
        st, body = es_request(backend, "GET", "/_scripts/" + sid)
        assert st == 200 and body["found"], (sid, body)
        assert body["script"]["lang"] == "painless"
    assert "lock scripts: stored in the cluster (treelockfs-*-v1)" in a.log()
    r = ctl(backend, "check")
    assert r.returncode == 0, r.stderr
    assert "scripts:  stored in the cluster (treelockfs-*-v1)" in r.stdout
    try:
        renames_work(a)
    except OSError:
        print(a.log())
        raise
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    wait_for(lambda: intent_docs(backend) == {}, 60, what="no lock left")
    # a second mount finds them and stores nothing
    (b,) = es_mounts(backend, "B", opts={"B": PATIENT})
    assert "lock scripts: stored in the cluster" in b.log()


@pytest.mark.emulator_only("a user without the privilege to store scripts is the emulator's fault")
def test_es__no_script_privilege_falls_back_inline(emu, es_mounts):
    emu.admin("POST", "/_esemu/forbid", {"apis": ["put_script"]})
    (a,) = es_mounts(emu, "A", lease_ttl=60)  # no heartbeat re-check during the count
    assert ("lock scripts: sent inline (cannot store scripts: HTTP 403 security_exception)"
            in a.log()), a.log()
    st, body = es_request(emu, "GET", "/_scripts/treelockfs-acqs-v1")
    assert st == 404 and body == {"_id": "treelockfs-acqs-v1", "found": False}
    emu.reset_stats()
    renames_work(a)
    st = emu.stats()
    assert "put_script" not in st["requests"] and "get_script" not in st["requests"], st
    wait_for(lambda: lock_docs(emu) == {}, 60, what="no lock left")
    r = ctl(emu, "check")
    assert r.returncode == 0, r.stderr
    # treelockctl only reads: the scripts are not there, so inline for it too
    assert "scripts:  inline (not stored in the cluster yet; a mount stores them)" in r.stdout
    emu.admin("POST", "/_esemu/forbid", {"apis": ["get_script"]})
    r = ctl(emu, "check")
    assert "scripts:  inline (cannot read stored scripts: HTTP 403 security_exception)" \
        in r.stdout, r.stdout


@pytest.mark.emulator_only("counting the requests of one API is the emulator's")
def test_es__mount_reads_every_script(emu, es_mounts):
    # a mount reads and compares every script, not the last one alone: one
    # replaced behind a stored last one would be run by every request
    (a,) = es_mounts(emu, "A", lease_ttl=60)  # no heartbeat re-check during the count
    assert "lock scripts: stored in the cluster" in a.log(), a.log()
    emu.reset_stats()
    (b,) = es_mounts(emu, "B", lease_ttl=60)
    st = emu.stats()["requests"]
    assert st.get("get_script") == 6 and "put_script" not in st, st
    assert "lock scripts: stored in the cluster" in b.log(), b.log()
    renames_work(b)
    assert es_request(emu, "DELETE", "/_scripts/treelockfs-rel-v1")[0] == 200
    emu.reset_stats()
    r = ctl(emu, "check")
    assert r.returncode == 0, r.stderr
    assert emu.stats()["requests"].get("get_script") == 6
    assert ("scripts:  inline (stored script treelockfs-rel-v1 is missing: the next mount "
            "stores it again)") in r.stdout, r.stdout
    for sid in SCRIPT_IDS:  # no half-stored set for the tests after this one
        es_request(emu, "DELETE", "/_scripts/" + sid)


@ES8_AND_ALL_ENGINES
def test_es__scripts_deleted_while_mounted(backend, es_mounts):
    # no heartbeat during the test: its check would store them again
    (a,) = es_mounts(backend, "A", lease_ttl=60)
    makedirs(a, "p/q")
    write(a, "p/q/f")
    try:
        os.rename(a.path("p/q/f"), a.path("p/q/g"))
    except OSError:
        print(a.log())
        raise
    for sid in SCRIPT_IDS:
        assert es_request(backend, "DELETE", "/_scripts/" + sid)[0] == 200
    # the next rename meets the missing scripts and goes on inline
    os.rename(a.path("p/q/g"), a.path("p/q/h"))
    os.rename(a.path("p/q"), a.path("p/r"))
    assert os.path.exists(a.path("p/r/h"))
    wait_for(lambda: "sending them inline from now on" in a.log(), 5, what="the switch logged")
    wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    wait_for(lambda: intent_docs(backend) == {}, 60, what="no lock left")


@ES8_AND_ENGINES
def test_es__scripts_deleted_while_holding(backend, es_mounts):
    # the release was built by id; it meets the missing scripts and is
    # sent again inline: nothing stays locked. The rename holds for 2 s,
    # scaled by the store's answer time, and again doubled when the
    # scripts were not all deleted before it let go (a busy store)
    def scenario(scale, tag):
        # no heartbeat during the test: its check would store them again
        (a,) = es_mounts(backend, "A", tag=tag, lease_ttl=60,
                         opts={"A": ["rename_delay_ms=%d" % (2000 * scale), "lock_timeout=120",
                                     "es_timeout_ms=30000"]})
        makedirs(a, "p/q")
        write(a, "p/q/f")
        op = start_op(os.rename, a.path("p/q/f"), a.path("p/q/g"))
        wait_for(lambda: held_by(backend, "/p/q/f"), 120, what="locks")
        for sid in SCRIPT_IDS:
            assert es_request(backend, "DELETE", "/_scripts/" + sid)[0] == 200
        if not op.is_alive():
            op.finish()
            return not_held("the rename let go before the scripts were deleted", a)
        op.finish(300)
        assert op.error is None, (op.error, a.log())
        wait_for(lambda: lock_docs(backend) == {}, 120, what="locks released")
        wait_for(lambda: intent_docs(backend) == {}, 60, what="no lock left")
        assert "sending them inline from now on" in a.log()
        os.rename(a.path("p/q/g"), a.path("p/q/h"))
        wait_for(lambda: lock_docs(backend) == {}, 60, what="no lock left")
    run_scaled(backend, scenario)


@pytest.mark.emulator_only("a store that fails one API for a while is the emulator's fault")
def test_es__scripts_stored_once_the_store_recovers(emu, es_mounts):
    # the store fails PUT _scripts at mount: the mount starts anyway, with
    # inline scripts, and the heartbeat (every lease_ttl/3) stores them
    emu.admin("POST", "/_esemu/forbid", {"apis": ["put_script"], "status": 503})
    # delegations off: the end wants no lock left, and a delegation of /s stays held
    (a,) = es_mounts(emu, "A", lease_ttl=1, opts={"A": ["delegations=off"]})
    assert "lock scripts: sent inline (the store failed: HTTP 503 cluster_block_exception; " \
        "storing them again later)" in a.log(), a.log()
    renames_work(a)
    emu.admin("POST", "/_esemu/forbid", {"apis": []})
    wait_for(lambda: "lock scripts: stored in the cluster" in a.log(), 10, what="scripts stored")
    for sid in SCRIPT_IDS:
        assert es_request(emu, "GET", "/_scripts/" + sid)[0] == 200
    os.rename(a.path("s/u"), a.path("s/v"))
    wait_for(lambda: lock_docs(emu) == {}, 60, what="no lock left")


def sent_bytes(m):
    with open(m.path(".treelockfs/metrics")) as f:
        for line in f:
            if line.startswith("treelockfs_store_sent_bytes_total"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no treelockfs_store_sent_bytes_total")


@pytest.mark.emulator_only("counting the requests of one API is the emulator's")
def test_es__scripts_inline_only_never_use_the_clusters(emu, es_mounts):
    """es_scripts=inline, for clusters whose script administrators are not
    trusted: a script stored under one of our ids (here replaced before
    the mount) is never read, stored or run; every request carries the
    sources. Prints what that costs in request bytes a rename."""
    assert es_request(emu, "PUT", "/_scripts/treelockfs-acqs-v1",
                      {"script": {"lang": "painless", "source": "ctx.op = 'noop'"}})[0] == 200
    emu.reset_stats()
    (a,) = es_mounts(emu, "A", opts={"A": ["es_scripts=inline"]}, lease_ttl=60)
    assert "lock scripts: sent inline (es_scripts=inline)" in a.log(), a.log()
    before = sent_bytes(a)
    renames_work(a, n=20)
    inline = (sent_bytes(a) - before) / 21
    st = emu.stats()["requests"]
    assert "get_script" not in st and "put_script" not in st, st
    st, body = es_request(emu, "GET", "/_scripts/treelockfs-acqs-v1")
    assert body["script"]["source"] == "ctx.op = 'noop'", body
    wait_for(lambda: lock_docs(emu) == {} and intent_docs(emu) == {}, 60, what="no lock left")
    # the same renames with the scripts stored, for the figure
    es_request(emu, "DELETE", "/_scripts/treelockfs-acqs-v1")
    (b,) = es_mounts(emu, "B", lease_ttl=60, tag="-stored")
    before = sent_bytes(b)
    renames_work(b, n=20)
    stored = (sent_bytes(b) - before) / 21
    print("\nrequest bytes a rename: %.0f stored, %.0f inline (es_scripts=inline)"
          % (stored, inline))
    assert inline > stored
    for sid in SCRIPT_IDS:
        es_request(emu, "DELETE", "/_scripts/" + sid)
