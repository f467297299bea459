"""Helpers and fixtures for the Elasticsearch lock store tests.

`backend` (tests/backend_fixtures.py) is each selected backend in turn, reset
before each test: the emulator's flavours and the real engines. `emu` is the
es8 emulator alone, for tests that need a fault only the emulator gives
(they say which with @pytest.mark.emulator_only). `es_mounts` mounts
treelockfs with lock_store=es against a backend, several mounts sharing one
backing directory; `ctl` runs treelockctl with the same store options.
Nothing here kills or unmounts what it did not start.
"""
import errno
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRCDIR, "tests"))

from backend_fixtures import emulator_fixture, start_emulator, timing_scale  # noqa: E402,F401
from backends import INDEX  # noqa: E402,F401

from conftest import CTL  # noqa: E402
from mounts import wait_for  # noqa: E402,F401

# the es8 emulator of a module, for emulator-only tests
emu_module = emulator_fixture("es8")


@pytest.fixture
def emu(emu_module):
    """The module's es8 emulator, reset (no index, no counters, no faults)."""
    return emu_module.reset()


# tests marked so run on the es8 emulator and the real engines: where the
# emulator's flavours would only repeat one another
ES8_AND_ENGINES = pytest.mark.backends("emulator-es8", "engines")
# ... and on OpenSearch 3 also in the default run (backends.OPT_IN_ENGINES):
# the few tests that show the store end to end on it
ES8_AND_ALL_ENGINES = pytest.mark.backends("emulator-es8", "engines", "opensearch3")


def es_opts(emu, owner, *extra, lease_ttl=2, url=None):
    return ["lock_store=es", "es_url=" + (url or emu.url), "owner=" + owner,
            "lease_ttl=%s" % lease_ttl, "lock_timeout=15", "es_timeout_ms=1000"] + list(extra)


# options for a mount whose lease and requests are not what a test is
# about: a lease that does not lapse and requests that do not time out
# however slowly a busy machine's store answers; its lock_timeout, which
# bounds only how long a failing test waits, generous as well
PATIENT = ["lease_ttl=60", "es_timeout_ms=30000", "lock_timeout=120"]


LEASE_FRESH = re.compile(r"^treelockfs_lease_fresh(\{[^}]*\})? 1(\.0*)?$", re.M)


def wait_lease(m, timeout=60):
    """Waits (up to TIMEOUT s, then goes on: the test judges) until mount M
    holds a fresh lease. A mount serves before its lease exists; a real
    node that just created the lock index may take tens of seconds to take
    its first write on a busy machine (an Elasticsearch 7.10 node took
    30 s once), and a test on such a mount would meet a store that is not
    its subject."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if LEASE_FRESH.search(m.ctl("metrics")):
                return True
        except OSError:
            return False
        time.sleep(0.05)
    return False


@pytest.fixture
def es_mounts(mount_factory, tmp_path):
    """es_mounts(emu, "A", "B", opts={"A": [...]}) -> list of mounts of one
    backing directory, each with its own owner= name. A later option of
    OPTS overrides the default one (e.g. "lease_ttl=30" for one mount).
    TAG names another set (its own backing directory and mount points),
    for a scenario run again (run_scaled)."""
    def make(emu, *owners, opts=None, lease_ttl=2, tag=""):
        backing = tmp_path / ("backing" + tag)
        backing.mkdir(exist_ok=True)
        out = []
        for o in owners:
            extra = (opts or {}).get(o, [])
            out.append(mount_factory(opts=es_opts(emu, o, *extra, lease_ttl=lease_ttl),
                                     backing=backing, name="mnt" + o + tag))
            if getattr(emu, "kind", None) == "engine":
                wait_lease(out[-1])
        return out
    return make


# what a mount logs when its own lease lapsed (es_lease.c, es_acquire.c,
# fs_rename.c): the store answered too late for its lease_ttl, and others
# may rightly take its locks over. (Not "was removed by another client":
# that is what a mount robbed of a live lease logs.)
LEASE_TROUBLE = ("lapsed (no renewal for", "has no fresh lease", "lease is no longer fresh")
# ... and when a request of its own ran out of es_timeout_ms
REQUEST_TIMED_OUT = "Operation timed out after"


def lease_trouble(*mounts):
    """The lines of the mounts' logs saying a lease of theirs lapsed."""
    return [line for m in mounts for line in m.log().splitlines()
            if any(w in line for w in LEASE_TROUBLE)]


def timed_out_requests(*mounts):
    """The lines of the mounts' logs saying a request ran out of time."""
    return [line for m in mounts for line in m.log().splitlines() if REQUEST_TIMED_OUT in line]


def not_held(why, *mounts):
    """From a scenario of run_scaled whose setup did not hold: stops MOUNTS
    (their daemons may exit as they can) and returns WHY."""
    for m in mounts:
        if m.proc is not None:
            m.stop(check=False)
    return why


def run_scaled(backend, scenario, tries=3):
    """Runs SCENARIO(scale, tag) for a test that needs short store timings
    (a lease that lapses within the test, a holder's lease against a slow
    store): SCALE multiplies them, starting from the store's answer time
    now (timing_scale), TAG names the attempt's mounts (es_mounts). The
    scenario asserts its outcome, or returns why its own setup did not
    hold (not_held: e.g. the mount that had to keep its lease logged that
    it lapsed); then it runs again with the timings doubled, on a reset
    backend, TRIES times in all, and the test fails saying why each did."""
    scale = timing_scale(backend)
    reasons = []
    for i in range(tries):
        if i:
            backend.reset()
        why = scenario(scale, "-%d" % i if i else "")
        if why is None:
            return scale
        print("\ntimings x%d did not hold (%s): again with x%d" % (scale, why, 2 * scale))
        reasons.append("x%d: %s" % (scale, why))
        scale *= 2
    pytest.fail("the store answered too slowly for this test's timings %d times, each time "
                "doubled:\n%s" % (tries, "\n".join(reasons)), pytrace=False)


def docs(b):
    """Every document of the lock index: {id: {"_source":..., "_seq_no":...}}."""
    return b.docs(INDEX)


def lock_docs(emu):
    return {k: v for k, v in docs(emu).items()
            if not k.startswith("owner:") and not k.startswith("intent:")}


def intent_docs(emu):
    return {k: v for k, v in docs(emu).items() if k.startswith("intent:")}


def owner_id(emu, name):
    for k, v in docs(emu).items():
        if k.startswith("owner:") and v["_source"].get("name") == name:
            return v["_source"]["owner"]
    return None


def owner_ids(emu, name):
    return [v["_source"]["owner"] for k, v in docs(emu).items()
            if k.startswith("owner:") and v["_source"].get("name") == name]


def store_requests(b):
    """Requests the store served since b.reset_stats() (the backend's own
    admin calls are not counted)."""
    return b.stats()


def ctl(emu, *args, timeout=60, url=None, extra=()):
    cmd = [CTL, "--es_url=" + (url or emu.url)] + list(extra) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def es_request(emu, method, path, body=None, ctype="application/json"):
    """A raw request as the guide's clients make it: (status, decoded body)."""
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(emu.url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        # generous: a busy machine's node may answer in many seconds
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def quote_id(key):
    return urllib.parse.quote(key, safe="")


class Op(threading.Thread):
    """Runs FUNC in a thread, recording its result or OSError and its time."""

    def __init__(self, func, *args):
        threading.Thread.__init__(self, daemon=True)
        self.func, self.args = func, args
        self.result = self.error = None
        self.t0 = self.t1 = None

    def run(self):
        self.t0 = time.monotonic()
        try:
            self.result = self.func(*self.args)
        except OSError as e:
            self.error = e
        self.t1 = time.monotonic()

    def finish(self, timeout=120):
        """Waits for the call to end and fails when it has not within
        TIMEOUT (generous: a busy machine only makes it later)."""
        self.join(timeout)
        assert not self.is_alive(), "%s%r did not end within %d s" % (
            self.func.__name__, self.args, timeout)
        return self

    @property
    def elapsed(self):
        return (self.t1 or time.monotonic()) - self.t0

    @property
    def errno(self):
        return self.error.errno if self.error else 0


def start_op(func, *args):
    op = Op(func, *args)
    op.start()
    return op


def held_by(emu, key):
    """The source of the lock document of KEY, or None."""
    d = lock_docs(emu).get(key)
    return d["_source"] if d else None


def forget_mount(m):
    """After a mount's daemon was killed on purpose: teardown must not
    expect exit status 0 from it."""
    if m.proc is not None:
        try:
            m.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        m.logf.close()
        m.proc = None


ENOLCK = errno.ENOLCK
EBUSY = errno.EBUSY
