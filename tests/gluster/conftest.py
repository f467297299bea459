"""Fixtures of the GlusterFS tier: a glusterd of the test's own (gluster.py
says where and how it runs), the Elasticsearch emulator as the lock store
and treelockfs mounts (the integration tier's Mount) over each host's
GlusterFS client.

The lock store is the es8 emulator, or the backend TREELOCKFS_GLUSTER_ES
names (tests/backends.py). Nothing here kills or unmounts what it did not
start.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRCDIR, "tests"))
sys.path.insert(0, HERE)

from backend_fixtures import started_store  # noqa: E402
import gluster  # noqa: E402
import mounts  # noqa: E402


integration = mounts.integration_conftest()


@pytest.fixture(autouse=True, scope="session")
def built_programs():
    """Every test fails, none skips, when treelockfs is not built."""
    mounts.require_built(integration.BIN)


@pytest.fixture(scope="module")
def glusterd(tmp_path_factory):
    """A started glusterd of our own; skips, with the reason, where
    GlusterFS cannot run here."""
    why = gluster.missing()
    if why:
        pytest.skip(why)
    gd = gluster.Glusterd(tmp_path_factory.mktemp("glusterd")).start()
    yield gd
    gd.stop()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    name = os.environ.get("TREELOCKFS_GLUSTER_ES", "emulator-es8")
    yield from started_store(name, tmp_path_factory)


@pytest.fixture
def make_tl(store):
    """make_tl(backing, owner, opts=TREELOCKFS_OPTS) -> a started treelockfs
    (lock_store=es) at BACKING-tl over one host's GlusterFS client."""
    started = []
    store.reset()

    def make(backing, owner, opts=None):
        mnt = backing.rstrip("/") + "-tl"
        os.makedirs(mnt, exist_ok=True)
        m = integration.Mount(backing, mnt, opts=[
            "lock_store=es", "es_url=" + store.url, "owner=" + owner]
            + list(gluster.TREELOCKFS_OPTS if opts is None else opts))
        started.append(m)
        return m.start(timeout=30)
    yield make
    mounts.stop_mounts([m for m in started if m.proc is not None])
