"""The means of the cluster faults (multihost.py's node-cut, primary-cut,
minority-mount, slow-disk), checked on their own in a few seconds: a cut
between two namespaces that leaves their other links alone and heals, and
a disk whose fsync the throttle really slows. The faults themselves run
against a real cluster by hand (`multihost.py run --nodes 3`, see
tests/multihost/run.sh)."""
import os
import statistics
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import multihost  # noqa: E402

PORT = 7000


def reaches(net, i, j, timeout=2.0):
    """Whether a TCP connect from namespace I to J's listener succeeds
    within TIMEOUT seconds."""
    code = ("import socket\ntry:\n socket.create_connection((%r,%d),%r).close()\n"
            " print('yes')\nexcept OSError:\n print('no')" % (net.host_addr(j), PORT, timeout))
    return multihost.sh(*(net.nsenter(i) + [sys.executable, "-c", code])).stdout.strip() == "yes"


def test_nemesis__a_cut_parts_two_namespaces_alone_and_heals(machine):
    net = multihost.Net(3)
    srvs = []
    try:
        net.up()
        for j in (1, 2):
            srvs.append(subprocess.Popen(net.nsenter(j) + [
                sys.executable, "-c", "import socket\ns=socket.socket()\n"
                "s.bind((%r,%d))\ns.listen(64)\nwhile True:\n c,_=s.accept()\n c.close()\n"
                % (net.host_addr(j), PORT)]))
        deadline = time.monotonic() + 60
        while not (reaches(net, 0, 1) and reaches(net, 0, 2)):
            assert time.monotonic() < deadline, "the listeners never answered"
            time.sleep(0.2)
        net.cut(0, 1)
        # namespace 0 still reaches 2, and 2 reaches 1
        assert not reaches(net, 0, 1)
        assert reaches(net, 0, 2)
        assert reaches(net, 2, 1)
        net.heal()
        assert net.dropped == []
        assert reaches(net, 0, 1)
    finally:
        for p in srvs:
            p.kill()
            p.wait()
        net.down()


def fsync_ms(path, n=15):
    """The median time of an fsync after a 4 KB append to PATH, in ms."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        ts = []
        for _ in range(n):
            os.write(fd, b"x" * 4096)
            t = time.perf_counter()
            os.fsync(fd)
            ts.append(time.perf_counter() - t)
        return 1000 * statistics.median(ts)
    finally:
        os.close(fd)


def test_nemesis__a_slow_disk_slows_fsync(machine, tmp_path):
    why = multihost.Disk.missing()
    if why:
        pytest.skip(why)
    d = multihost.Disk(str(tmp_path / "disk.img"), str(tmp_path / "mnt"), size=256 << 20)
    try:
        d.make()
        f = os.path.join(d.mnt, "f")
        free = fsync_ms(f)
        d.slow(True)
        slow = fsync_ms(f)
        d.slow(False)
        print("\nnemesis: fsync of 4 KB on the node's disk: %.1f ms, slowed: %.1f ms"
              % (free, slow))
        # at 20 writes a second, an fsync (the data and a journal commit:
        # two writes at least) takes 100 ms or more whatever the load
        assert slow >= 100, (free, slow)
    finally:
        d.drop()
    assert not os.path.ismount(d.mnt)
