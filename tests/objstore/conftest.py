"""Fixtures of the object-store tier: an S3 server with one bucket, a
per-host s3fs mount of it, an Elasticsearch lock store and treelockfs
mounts (the integration tier's Mount) over the s3fs mounts.

The lock store is the es8 emulator and a real OpenSearch node from
tests/engines (where java and mvn are), or the backends that
TREELOCKFS_OBJSTORE_ES lists (a comma list, e.g. "emulator-es8").
Nothing here kills or unmounts what it did not start.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRCDIR, "tests"))
sys.path.insert(0, HERE)

from backend_fixtures import started_store  # noqa: E402
import mounts  # noqa: E402
import objstore  # noqa: E402


integration = mounts.integration_conftest()
S3SERVER = os.environ.get("S3SERVER_BIN") or os.path.join(HERE, ".build", "s3server")


@pytest.fixture(autouse=True, scope="session")
def built_programs():
    """Every test fails, none skips, when treelockfs is not built."""
    mounts.require_built(integration.BIN)


def pytest_collection_modifyitems(config, items):
    why = None
    if mounts.unbuilt(integration.BIN):
        return
    if not integration.fuse_available():
        why = "no /dev/fuse or fusermount3 (Debian package fuse3)"
    elif not os.access(S3SERVER, os.X_OK):
        why = "no S3 server binary (tests/objstore/run.sh builds it)"
    elif not objstore.have_s3fs():
        why = "no s3fs (Debian package s3fs)"
    if why:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def s3(tmp_path):
    """A started S3 server with an empty bucket."""
    server = objstore.S3Server(S3SERVER, tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def s3fs_hosts(s3, tmp_path):
    """s3fs_hosts(n) -> N s3fs mounts of the bucket, one per host, each with
    its own cache directory."""
    mounts = []

    def make(n=2):
        for i in range(n):
            mounts.append(objstore.S3fsMount(s3, tmp_path, "s3fs%c" % (ord("A") + i)).start())
        return mounts
    yield make
    for m in reversed(mounts):
        m.stop()


STORES = [w.strip() for w in os.environ.get("TREELOCKFS_OBJSTORE_ES", "").split(",")
          if w.strip()] or ["emulator-es8", "opensearch"]


@pytest.fixture(scope="module", params=STORES)
def store(request, tmp_path_factory):
    """The lock store: the es8 emulator and a real OpenSearch node (skipped,
    with the reason, where no JDK and Maven are), or the backends that
    TREELOCKFS_OBJSTORE_ES lists (tests/backends.py)."""
    name = request.param
    yield from started_store(name, tmp_path_factory)


@pytest.fixture
def treelockfs_over(tmp_path, store):
    """treelockfs_over(s3fs_mount, owner, opts) -> a started treelockfs
    (lock_store=es) over one host's s3fs mount."""
    started = []
    store.reset()

    def make(backing, owner, opts=()):
        mnt = tmp_path / ("tl" + owner)
        mnt.mkdir()
        m = integration.Mount(backing.mnt, mnt, opts=["lock_store=es", "es_url=" + store.url,
                                                       "owner=" + owner] + list(opts))
        started.append(m)
        return m.start()
    yield make
    mounts.stop_mounts(started)
