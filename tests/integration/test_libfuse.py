"""The libfuse treelockfs is built with: the bundled static build of
deps/libfuse (contrib/build-libfuse.sh) has no fusermount3 of its own and
must run the system's, or an ordinary user could not mount at all."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import BIN

# depends on the libfuse (run again on the system's by run-tests.sh): the
# libfuse's own fusermount3 for mounts by other users
pytestmark = pytest.mark.libfuse

NOBODY = 65534
SYSTEM_FUSERMOUNT = "/usr/bin/fusermount3"

# Runs in a private mount namespace (unshare -m) as root: gives /dev/fuse
# mode 666 there (as udev does on a desktop; this machine's may be root's
# only), then mounts as nobody with no PATH at all, so libfuse must find
# fusermount3 by the directory it was built with, checks the mount and a
# read through it, and unmounts as nobody. The daemon is killed by pid
# only if it outlives its unmount.
SCRIPT = r'''
set -u
top=$1 bin=$2
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
mount --make-rprivate / || exit 90
mknod "$top/fuse" c 10 229 && chmod 666 "$top/fuse" && mount --bind "$top/fuse" /dev/fuse || exit 91
as_user env -i PATH=/nonexistent "$bin" "$top/backing" "$top/mnt" -f 2>"$top/log" &
pid=$!
i=0
while ! grep -q " $top/mnt fuse.treelockfs " /proc/self/mounts; do
	if ! kill -0 $pid 2>/dev/null || [ $i -ge 300 ]; then
		echo "not mounted:"; cat "$top/log"; kill $pid 2>/dev/null; exit 92
	fi
	i=$((i + 1)); sleep 0.1
done
grep " $top/mnt fuse.treelockfs " /proc/self/mounts
as_user cat "$top/mnt/hello" || { as_user /usr/bin/fusermount3 -u "$top/mnt"; exit 93; }
as_user /usr/bin/fusermount3 -u "$top/mnt" || { kill $pid; exit 94; }
i=0
while kill -0 $pid 2>/dev/null; do
	[ $i -ge 300 ] && { kill $pid; exit 95; }
	i=$((i + 1)); sleep 0.1
done
wait $pid
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace")
def test_libfuse__user_mount_runs_the_system_fusermount3():
    for tool in ("unshare", "setpriv", "mknod"):
        if not shutil.which(tool):
            pytest.skip("%s is missing (Debian packages util-linux, coreutils)" % tool)
    if not os.access(SYSTEM_FUSERMOUNT, os.X_OK) or not os.stat(SYSTEM_FUSERMOUNT).st_mode & 0o4000:
        pytest.skip("no setuid %s (Debian package fuse3)" % SYSTEM_FUSERMOUNT)
    # under /tmp itself: pytest's own directory is root's only
    top = tempfile.mkdtemp(prefix="treelockfs-usermount-")
    try:
        os.chmod(top, 0o755)
        for d in ("backing", "mnt"):
            os.mkdir(os.path.join(top, d))
            os.chown(os.path.join(top, d), NOBODY, NOBODY)
        with open(os.path.join(top, "backing", "hello"), "w") as f:
            f.write("hello from the backing\n")
        # the user runs a copy: the build's own directory may be private
        # to root (a checkout under a 0700 directory)
        binary = os.path.join(top, "treelockfs")
        shutil.copy(BIN, binary)
        os.chmod(binary, 0o755)
        r = subprocess.run(["unshare", "-m", "sh", "-c", SCRIPT, "sh", top, binary],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "user_id=%d" % NOBODY in r.stdout, r.stdout
        assert "hello from the backing" in r.stdout, r.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)
