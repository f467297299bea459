#!/bin/sh
# Installs what treelockfs needs to build, run and test, from Debian's
# packages (Debian 12 "bookworm" or later). Uses sudo when not root.
# default-jdk-headless and maven are for the real-engine test tier
# (tests/engines: real OpenSearch and Elasticsearch nodes; Maven fetches
# their jars on the first run); s3fs is for the object-store test tier
# (tests/objstore, which also needs Go 1.24 or later, not from Debian 12);
# faketime is for the clock skew of tests/multihost; prometheus,
# prometheus-node-exporter and python3-jsonschema check the metrics and
# treelockctl's JSON with the real tools; python3-matplotlib draws
# bench/run's picture (bench/plot). meson, ninja-build, dpkg-dev and
# debian-archive-keyring are for contrib/build-libfuse.sh, run last: where
# the system's libfuse lacks FUSE passthrough (Debian 12's 3.14), it builds
# Debian 13's libfuse 3.17.2 into deps/libfuse, which configure then uses
# (the system's libfuse stays as it is).
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
	build-essential autoconf automake pkg-config \
	libfuse3-dev fuse3 libcurl4-openssl-dev libcjson-dev check \
	python3 python3-pytest python3-elasticsearch \
	curl openssl iproute2 attr util-linux procps fio bindfs faketime \
	default-jdk-headless maven s3fs python3-matplotlib \
	prometheus prometheus-node-exporter python3-jsonschema \
	meson ninja-build dpkg-dev debian-archive-keyring
sh "$(dirname "$0")/build-libfuse.sh"
