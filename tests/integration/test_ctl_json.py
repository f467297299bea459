"""treelockctl check|locks|owners|intents --json: one JSON document each,
valid against contrib/treelockctl.schema.json (Debian package
python3-jsonschema), and saying what the tables say."""
import json
import os
import signal
import subprocess

import pytest

from conftest import CTL, SRCDIR, makedirs
from es_helpers import (PATIENT, ctl, emu, emu_module, es_mounts, forget_mount,  # noqa: F401
                        held_by, lease_trouble, not_held, owner_id, run_scaled, start_op,
                        wait_for)

try:
    import jsonschema
except ImportError:  # pragma: no cover - the environment, not the product
    jsonschema = None

SCHEMA_PATH = os.path.join(SRCDIR, "contrib", "treelockctl.schema.json")


def schema():
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return json.load(f)


def validated(r, kind):
    """The document R printed, checked against the schema's KIND part."""
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    s = schema()
    jsonschema.validate(doc, s)
    jsonschema.validate(doc, dict(s["$defs"][kind], **{"$defs": s["$defs"]}))
    return doc


# the lock store's protocol: the same code on every libfuse (run-tests.sh)
pytestmark = [pytest.mark.lock_store,
              pytest.mark.skipif(jsonschema is None,
                                 reason="no python3 jsonschema (Debian package python3-jsonschema)")]


@pytest.mark.nofuse
def test_ctl_json__schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_ctl_json__every_command(backend, es_mounts):
    # A holds locks, then dies: it must keep its one owner id until then,
    # so its lease_ttl is scaled by the store's answer time (and doubled
    # again should A log that it lapsed all the same); short enough that
    # A is found dead soon after (2 x lease_ttl)
    def scenario(scale, tag):
        ttl = 3 * scale
        patient = ["lock_timeout=120", "es_timeout_ms=30000"]
        a, b = es_mounts(backend, "A", "B", tag=tag, lease_ttl=ttl,
                         opts={"A": ["rename_delay_ms=600000"] + patient, "B": patient})
        try:
            return every_command(backend, a, b, ttl)
        except AssertionError:
            lapsed = lease_trouble(a, b)
            if lapsed:
                # A's rename would hold for minutes: A goes as it would have
                a.kill(signal.SIGKILL)
                forget_mount(a)
                return not_held("a lease lapsed: %s" % lapsed[0], b)
            raise
    run_scaled(backend, scenario)


def every_command(backend, a, b, ttl):
    makedirs(a, "d", "src")
    hung = start_op(os.rename, a.path("d/src"), a.path("d/dst"))
    wait_for(lambda: held_by(backend, "/d/src"), 120, what="A's locks")

    doc = validated(ctl(backend, "check", "--json"), "check")
    assert doc["status"] == "ok" and doc["mapping_ours"] is True
    assert doc["strategy"] == "tree"

    doc = validated(ctl(backend, "locks", "--json"), "locks")
    keys = {l["key"]: l for l in doc["locks"]}
    assert keys["/d/src"]["mode"] == "exclusive" and keys["/d/dst"]["mode"] == "exclusive"
    assert keys["/d"]["mode"] == "shared"
    a_owner = owner_id(backend, "A")
    assert any(h.startswith(a_owner + "#") for h in keys["/d/src"]["holders"]), keys
    # the table says the same
    table = ctl(backend, "locks").stdout
    assert all(k in table for k in keys)

    doc = validated(ctl(backend, "owners", "--json", "--no-wait"), "owners")
    names = {o["name"] for o in doc["owners"]}
    assert {"A", "B"} <= names
    assert all(o["ttl_ms"] == ttl * 1000 for o in doc["owners"]), doc

    doc = validated(ctl(backend, "intents", "--json", "--all", "--no-wait"), "intents")
    ours = [i for i in doc["intents"] if i["owner"] == a_owner]
    assert len(ours) == 1 and ours[0]["operation"] == "rename"
    assert (ours[0]["from"], ours[0]["to"]) == ("/d/src", "/d/dst")

    # A dies: its intent is a dead owner's, which intents lists by default
    # (once it has watched A's lease stand still for 2 x lease_ttl)
    a.kill(signal.SIGKILL)
    forget_mount(a)
    hung.join(5)

    def dead_intent():
        r = ctl(backend, "intents", "--json", timeout=300)
        d = validated(r, "intents")
        return [i for i in d["intents"] if i["owner"] == a_owner and
                i["owner_state"] == "dead"]
    found = wait_for(dead_intent, 300, what="A's intent as a dead owner's")
    assert found[0]["age_ms"] is None or found[0]["age_ms"] >= 0


# U+202E RIGHT-TO-LEFT OVERRIDE shows "evil\u202etxt.exe" as "evilexe.txt",
# and ESC [2J clears a terminal: names that could pass for others
HOSTILE = "evil\u202etxt.exe\x1b[2J"
SHOWN = "bytes:/d/evil\\xe2\\x80\\xaetxt.exe\\x1b[2J"


def test_ctl_json__keys_with_controls_shown_escaped(emu, es_mounts):
    """A key holding a bidirectional control and an ESC byte is shown as
    bytes:... with those bytes as \\xHH in every listing: in --json the
    string holds the escape as text (decoded: a backslash, 'x', two hex
    digits), never the control; the table says the same; break takes the
    key as shown."""
    (a,) = es_mounts(emu, "A", opts={"A": ["rename_delay_ms=600000"] + PATIENT})
    makedirs(a, "d")
    open(a.path("d", HOSTILE), "w").close()
    hung = start_op(os.rename, a.path("d", HOSTILE), a.path("d", "plain"))
    try:
        wait_for(lambda: held_by(emu, "/d/" + HOSTILE), 60, what="A's locks")

        doc = validated(ctl(emu, "locks", "--json"), "locks")
        keys = sorted(l["key"] for l in doc["locks"])
        assert keys == sorted(["/d", "/d/plain", SHOWN]), keys
        r = ctl(emu, "locks")
        assert r.returncode == 0, r.stderr
        assert SHOWN in r.stdout, r.stdout

        doc = validated(ctl(emu, "intents", "--json", "--all", "--no-wait"), "intents")
        assert [(i["from"], i["to"]) for i in doc["intents"]] == [(SHOWN, "/d/plain")], doc
        r = ctl(emu, "intents", "--all", "--no-wait")
        assert r.returncode == 0, r.stderr
        assert "rename '%s' -> '/d/plain'" % SHOWN in r.stdout, r.stdout
        for out in (r.stdout, ctl(emu, "locks", "--json").stdout):
            assert "\u202e" not in out and "\x1b" not in out, out

        # the key as shown names the lock
        r = ctl(emu, "break", SHOWN, "--force")
        assert r.returncode == 0, r.stderr
        assert r.stdout == "broke the lock on '%s'\n" % SHOWN, r.stdout
        assert held_by(emu, "/d/" + HOSTILE) is None
    finally:
        # A's rename would hold for minutes: A goes
        a.kill(signal.SIGKILL)
        forget_mount(a)
        hung.join(30)


def test_ctl_json__index_missing(backend):
    r = ctl(backend, "check", "--json", extra=["--es_index=treelockfs-nothing-here"])
    assert r.returncode == 2, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, schema())
    assert doc["status"] == "index_missing" and doc["mapping_ours"] is None


@pytest.mark.nofuse
def test_ctl_json__store_unreachable_prints_no_document(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([CTL, "--es_url=http://127.0.0.1:%d" % port, "--es_start_timeout=1",
                        "locks", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr
