#!/bin/sh
# The GlusterFS tier: a glusterd of our own (in network and mount
# namespaces of its own: tests/gluster/gluster.py), a distributed volume of
# four bricks on this machine, two FUSE clients of it as two hosts, bare
# and with treelockfs (lock_store=es, the emulator) on each, under storms
# of directory and file renames, then an audit of the volume and of every
# brick. pytest, mounting for real; results also go to run.xml (JUnit XML),
# which run-tests.sh counts. Where glusterd is missing it installs Debian's
# glusterfs-server and glusterfs-client with apt-get when it can; exit 77
# (automake SKIP) with the reason where they cannot be had, or without
# root, FUSE, unshare/nsenter or a python3 with pytest.
#   TREELOCKFS_GLUSTER_SECONDS  length of each storm (default 15)
#   TREELOCKFS_GLUSTER_ROUNDS   storms of each kind (default 1 bare, 2
#                               through treelockfs)
# The damage table of BENCHMARKS.md, longer: tests/gluster/gluster.py table
TIER=gluster WHAT="GlusterFS tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
have_fuse || skip "no /dev/fuse or fusermount3 (Debian package fuse3)"
[ "$(id -u)" -eq 0 ] || skip "not root (glusterd, its bricks and the FUSE clients need root)"

if ! command -v glusterd >/dev/null 2>&1 || ! command -v glusterfs >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 ||
		skip "no glusterd (Debian packages glusterfs-server, glusterfs-client) and no apt-get"
	echo "installing glusterfs-server and glusterfs-client (apt-get)"
	log=$(mktemp "${TMPDIR:-/tmp}/tlfs-gluster-apt.XXXXXX") || exit 99
	install_gluster() {
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			glusterfs-server glusterfs-client >>"$log" 2>&1
	}
	# the package lists may be missing or old on a fresh machine
	install_gluster || { apt-get update -q >>"$log" 2>&1 && install_gluster; } || {
		tail -n 5 "$log"
		rm -f "$log"
		skip "glusterfs-server could not be installed with apt-get (see above)"
	}
	rm -f "$log"
fi
command -v glusterd >/dev/null 2>&1 || skip "no glusterd after installing glusterfs-server"

base=$(mktemp -d "${TMPDIR:-/tmp}/tlfs-gluster.XXXXXX") || exit 99
# -s: the storms print their figures
run_pytest -s --basetemp="$base/t"
rc=$?
rm -rf --one-file-system "$base"
exit $rc
