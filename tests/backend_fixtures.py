"""pytest fixtures over tests/backends.py, shared by the emulator's suite
(tests/esemu) and the integration tests. A conftest imports what it uses:

    from backend_fixtures import emulator_fixture, start_emulator
    emu8 = emulator_fixture("es8")           # a module-scoped emulator

and, for tests run on every backend, the integration conftest also
re-exports ``backend_session``/``backend`` and calls
``parametrize_backends`` from its pytest_generate_tests.

A test that takes ``backend`` runs once per selected backend
(TREELOCKFS_BACKENDS); ``@pytest.mark.backends("emulator-es8", "engines")``
narrows that list ("emulator" and "engines" stand for every emulator flavour
and every real engine). Tests are ordered by backend (order_by_backend), an engine is stopped
before the next one starts, so at most one real engine runs at a time and
each starts once per session.
"""

import time

import pytest

import backends

_SKIPPED = {}      # backend name -> why its tests are skipped (printed once)
_FAILED = {}       # backend name -> why it did not start (each of its tests fails)


def start_emulator(tmp_path_factory, flavor="es8", args=()):
    """A started emulator of FLAVOR in a fresh directory (the caller stops it)."""
    emu = backends.EmulatorBackend(flavor, workdir=str(tmp_path_factory.mktemp("esemu-" + flavor)))
    emu.start(list(args))
    return emu


def emulator_fixture(flavor, scope="module", args=()):
    """A fixture yielding a started emulator of FLAVOR for SCOPE."""
    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        emu = start_emulator(tmp_path_factory, flavor, args)
        yield emu
        emu.stop()
    return fixture


def _allowed(name, wanted):
    for w in wanted:
        if w == name or (w == "emulator" and name.startswith("emulator-")) or \
                (w == "engines" and name in backends.ENGINES):
            return True
    return False


def parametrize_backends(metafunc):
    """From pytest_generate_tests: one test per selected backend. Without
    TREELOCKFS_BACKENDS, an opt-in engine (backends.OPT_IN_ENGINES) runs
    only the tests whose backends mark names it."""
    if "backend_session" not in metafunc.fixturenames:
        return
    names, skipped = backends.selected()
    _SKIPPED.update(skipped)
    mark = metafunc.definition.get_closest_marker("backends")
    if mark is not None:
        names = [n for n in names if _allowed(n, mark.args)]
    if not backends.os.environ.get("TREELOCKFS_BACKENDS", "").strip():
        named = mark.args if mark is not None else ()
        names = [n for n in names if n not in backends.OPT_IN_ENGINES or n in named]
    metafunc.parametrize("backend_session", names, indirect=True)


def order_by_backend(items):
    """From pytest_collection_modifyitems: the tests of each backend run
    together (emulators first, then each engine), so that each engine
    starts once and is stopped before the next one starts."""
    names, _ = backends.selected()

    def rank(item):
        name = backend_of(item)
        return -1 if name is None else names.index(name) if name in names else len(names)
    items.sort(key=rank)


_RUNNING = {}      # name -> started backend; at most one engine among them


def _get(name, tmp_path_factory):
    if name in _SKIPPED:
        pytest.skip(_SKIPPED[name])
    if name in _FAILED:
        pytest.fail(_FAILED[name], pytrace=False)
    b = _RUNNING.get(name)
    if b is not None:
        return b
    if name in backends.ENGINES:
        for other in [n for n in _RUNNING if n in backends.ENGINES]:
            _RUNNING.pop(other).stop()
    b = backends.make(name, str(tmp_path_factory.mktemp(name)))
    try:
        b.start()
    except RuntimeError as e:
        if b.kind == "engine" and not backends.os.environ.get("TREELOCKFS_BACKENDS") \
                and "could not resolve" in str(e):
            _SKIPPED[name] = "%s: its jars do not resolve (see tests/engines/start)" % b.version
            pytest.skip(_SKIPPED[name])
        _FAILED[name] = "%s did not start: %s" % (b.version, e)
        raise
    _RUNNING[name] = b
    return b


def stop_all():
    """From pytest_sessionfinish: stops every backend started here."""
    while _RUNNING:
        _RUNNING.popitem()[1].stop()


@pytest.fixture
def backend_session(request, tmp_path_factory):
    """The started backend of this parameter, started at its first use and
    kept for the session (stop_all)."""
    return _get(request.param, tmp_path_factory)


@pytest.fixture
def backend(backend_session):
    """The session's backend of this parameter, reset: no lock index, no
    counters, no faults."""
    return backend_session.reset()


def answer_time(backend, n=3):
    """The slowest of N small requests to BACKEND (GET / through the URL
    the mounts use), in seconds: what a busy machine makes of the store's
    answers right now."""
    worst = 0.0
    for _ in range(n):
        t0 = time.monotonic()
        backends._http(backend.url, "GET", "/", timeout=120)
        worst = max(worst, time.monotonic() - t0)
    return worst


def timing_scale(backend, prompt=0.1, most=8):
    """The factor (1, 2, 4 or 8) by which a test multiplies the short store
    timings it needs (a lease that must lapse within the test, a holder's
    ttl against a slow store): 1 while BACKEND answers within PROMPT
    seconds, doubled for each doubling of its answer time beyond that."""
    t = answer_time(backend)
    scale = 1
    while t > prompt * scale and scale < most:
        scale *= 2
    return scale


def backend_of(item):
    """The backend test ITEM runs on (its backend_session parameter), or None."""
    cs = getattr(item, "callspec", None)
    return cs.params.get("backend_session") if cs is not None else None


def keep_shard(config, items):
    """From pytest_collection_modifyitems: with TREELOCKFS_SHARD=engines only
    the tests on a real engine stay, with TREELOCKFS_SHARD=others only the
    others (emulators, no store): tests/integration/run.sh runs the two at
    once. The real engines' tests share each engine's one node and reset its
    index, so they all stay in one shard; the emulators are each session's
    own. Left out, not skipped: the other shard runs them."""
    shard = backends.os.environ.get("TREELOCKFS_SHARD", "").strip()
    if not shard:
        return
    if shard not in ("engines", "others"):
        raise ValueError("TREELOCKFS_SHARD: %r is neither engines nor others" % shard)
    want = shard == "engines"
    gone = [i for i in items if (backend_of(i) in backends.ENGINES) != want]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [i for i in items if (backend_of(i) in backends.ENGINES) == want]


def skip_unselected(items):
    """From pytest_collection_modifyitems: emulator_only tests are skipped
    when TREELOCKFS_BACKENDS names no emulator."""
    names, _ = backends.selected()
    if any(n.startswith("emulator-") for n in names):
        return
    skip = pytest.mark.skip(reason="emulator-only test; TREELOCKFS_BACKENDS names no emulator")
    for item in items:
        if item.get_closest_marker("emulator_only") is not None:
            item.add_marker(skip)


def register(config):
    """From pytest_configure: the markers."""
    config.addinivalue_line("markers", "backends(*names): run only on these backends "
                            "(emulator, engines, emulator-FLAVOR, opensearch, opensearch3, elasticsearch)")
    config.addinivalue_line("markers", "emulator_only(why): needs a fault or feature only the "
                            "emulator gives; runs on the emulator alone")


def summary(terminalreporter):
    """From pytest_terminal_summary: why a real-engine tier was skipped."""
    for name, why in sorted(_SKIPPED.items()):
        terminalreporter.write_line("backend %s skipped: %s" % (name, why))


def started_store(name, tmp_path_factory):
    """For a tier's own store fixture (tests/objstore, tests/gluster): yields
    backend NAME started in a directory of its own, and stops it after; a
    real engine where none can run skips with the reason."""
    if name in backends.ENGINES:
        why = backends.engines_available()
        if why:
            pytest.skip("real %s: %s" % (name, why))
    b = backends.make(name, str(tmp_path_factory.mktemp(name)))
    b.start()
    yield b
    b.stop()
