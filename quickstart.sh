#!/bin/sh
# Installs the build dependencies (Debian 12), builds treelockfs and mounts a
# demo tree with the defaults (embedded lock store, tree locking):
#   demo/backing  the real directory
#   demo/mnt      the treelockfs mount of it
# Unmount with: fusermount3 -u demo/mnt
set -eu
cd "$(dirname "$0")"
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
sh ./contrib/install-deps.sh
[ -x configure ] || autoreconf -fi
if [ ! -f Makefile ] || [ deps/libfuse/.built-from -nt Makefile ]; then
	./configure --enable-tests
fi
make -j"$(nproc 2>/dev/null || echo 2)"
mkdir -p demo/backing/clinton/projects/elasticsearch demo/mnt
[ -e demo/backing/clinton/projects/elasticsearch/README.txt ] ||
	echo "Hello from the guide's example tree" >demo/backing/clinton/projects/elasticsearch/README.txt
if grep -qs " $(pwd)/demo/mnt " /proc/mounts; then
	echo "demo/mnt is mounted already"
else
	./src/treelockfs demo/backing demo/mnt
fi
cat <<MSG
treelockfs is mounted: demo/backing -> demo/mnt
  try:      mv demo/mnt/clinton demo/mnt/bill && cat demo/mnt/.treelockfs/stats
  unmount:  fusermount3 -u demo/mnt
MSG
