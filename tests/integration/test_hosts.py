"""Two hosts over one shared directory: keys from the shared storage's view.

Each "host" is a client cache over the shared directory S (a treelockfs
mount of S with lock_strategy=none and kernel entry/attribute timeouts, as
an NFS client caches lookups) and, on top of it, a treelockfs with the es
store against the emulator. Host A moves /clinton to /bill holding its
locks for a while; host B's rename inside /clinton, started meanwhile,
waits, and must then fail with ENOENT as the README promises: B's own cache
still names the directory /clinton, so only a lookup from the backing root
after the locks are held tells that it moved.
"""
import errno
import os
import shutil
import time

import pytest

from es_helpers import emu, emu_module, es_opts, held_by, start_op, wait_for  # noqa: F401

# The cache must revalidate a lookup within the time a rename may wait for
# its locks (README, "Many hosts"): here 1 s against a 2 s hold.
CACHE = ["lock_strategy=none", "entry_timeout=1", "attr_timeout=1"]


def one_round(mount_factory, tmp_path, emu, i):  # noqa: F811
    shared = tmp_path / ("shared%d" % i)
    os.makedirs(shared / "clinton" / "projects" / "elasticsearch")
    with open(shared / "clinton" / "projects" / "elasticsearch" / "README.txt", "w") as f:
        f.write("guide")
    hosts = {}
    for h, extra in (("A", ["rename_delay_ms=2000"]), ("B", [])):
        cache = mount_factory(opts=CACHE, backing=shared, name="cache%s%d" % (h, i))
        hosts[h] = mount_factory(opts=es_opts(emu, h + str(i), *extra), backing=cache.mnt,
                                 name="host%s%d" % (h, i))
    a, b = hosts["A"], hosts["B"]
    # B has looked the tree up: its cache holds /clinton/projects/elasticsearch
    assert os.path.exists(b.path("clinton", "projects", "elasticsearch", "README.txt"))
    big = start_op(os.rename, a.path("clinton"), a.path("bill"))
    wait_for(lambda: held_by(emu, "/clinton"), 5, what="A's lock on /clinton")
    time.sleep(0.2)
    small = start_op(os.rename, b.path("clinton/projects/elasticsearch/README.txt"),
                     b.path("clinton/projects/elasticsearch/README.asciidoc"))
    big.join(15)
    small.join(15)
    assert big.error is None
    # B waited for A (the order of the answers says nothing: a lock is
    # released before its rename is answered): its source was gone then
    assert small.errno == errno.ENOENT, "round %d: B's rename gave %r" % (i, small.error)
    assert os.listdir(shared / "bill" / "projects" / "elasticsearch") == ["README.txt"]
    assert not os.path.exists(shared / "clinton")
    for m in (b, a):
        m.stop()
    shutil.rmtree(shared)


def test_hosts__rename_under_a_parent_moved_by_another_host(mount_factory, tmp_path, emu):  # noqa: F811,E501
    for i in range(5):
        one_round(mount_factory, tmp_path, emu, i)
