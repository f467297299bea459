"""The tiers that mount fail, never skip, when the product is not built.

A skip says the machine lacks something (no /dev/fuse, no s3fs, not
root); a treelockfs that is missing or cannot be executed is a broken
build. Each mounting tier's pytest run is started here with
TREELOCKFS_BIN naming such a file: it must fail, say which file, and skip
nothing.
"""
import os
import re
import stat
import subprocess
import sys

import pytest

from conftest import SRCDIR

# a tier, and the part of it that is run (each test of it mounts)
TIERS = [
    ("integration", ["tests/integration/test_smoke.py"]),
    ("objstore", ["tests/objstore/test_objstore.py", "-k", "removal_during_a_move"]),
    ("multihost", ["tests/multihost/test_multihost.py"]),
]


def broken_program(tmp_path, how):
    path = tmp_path / "bin" / "treelockfs"
    if how == "missing":
        return path
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


@pytest.mark.nofuse
@pytest.mark.parametrize("how", ["missing", "not executable"])
@pytest.mark.parametrize("tier,args", TIERS, ids=[t[0] for t in TIERS])
def test_tiers__an_unbuilt_treelockfs_fails_the_tier(tmp_path, tier, args, how):
    bogus = broken_program(tmp_path, how)
    if how == "not executable":
        # no x bit at all: not even root may execute it
        assert not os.access(str(bogus), os.X_OK)
    env = dict(os.environ, TREELOCKFS_BIN=str(bogus),
               # nothing of the selected tests may reach a real engine
               TREELOCKFS_OBJSTORE_ES="emulator-es8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
                        "--basetemp", str(tmp_path / "run")] + args,
                       cwd=SRCDIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600)
    out = r.stdout
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert r.returncode == 1, "%s tier: exit %d, not a failure:\n%s" % (tier, r.returncode, out)
    assert "broken build: %s" % bogus in out, out
    assert not re.search(r"\d+ (passed|skipped)", summary), summary
