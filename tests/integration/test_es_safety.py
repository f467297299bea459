"""The es lock store against a careless admin and a hostile cluster user:
start bounded by es_start_timeout, credentials over plain HTTP, stored
scripts that are not ours, names of unreadable directories in the lock
listing, directories too large for one request, and an unmount while the
store is busy."""
import os
import socket
import subprocess
import time

import pytest

from es_helpers import (INDEX, ctl, emu, emu_module, es_mounts, es_opts, es_request,  # noqa: F401,E501
                        forget_mount, held_by, lock_docs, start_op, wait_for)


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
