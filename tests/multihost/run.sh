#!/bin/sh
# Many hosts for real (tests/multihost): the checker's own tests, and the
# quick form of the multi-host run (hosts in network namespaces, a
# nemesis, the checker). Exit 77 (automake SKIP) only where no python3 with
# pytest is found; without root, ip netns, nsenter or /dev/fuse the run is
# skipped with the reason and the checker's tests still run. Results also
# go to run.xml (JUnit XML), which run-tests.sh counts. The long form:
# tests/multihost/multihost.py run --runs N --duration S [--engine opensearch]
# [--delegations on] (delegations=on on every mount, a workload that makes
# them and recalls them, and each fault struck while a recall is under way;
# figures in BENCHMARKS.md); on
# a cluster of engine nodes in namespaces of their own, links with a round
# trip of R ms (tc netem): add --nodes 3 --rtt-ms R (R = 0.2, 1, 5).
# With --nodes 3 the nemesis also partitions the cluster (kinds node-cut,
# primary-cut, minority-mount, node-pause, cluster-restart, slow-disk; see
# multihost.py's docstring; the mounts then get lease_ttl=30,
# lock_timeout=60, es_timeout_ms=10000), e.g. 30 minutes of them on
# OpenSearch 3:
# tests/multihost/multihost.py run --engine opensearch3 --nodes 3 --heap 384m
#   --kinds node-cut,primary-cut,minority-mount,node-pause,cluster-restart,slow-disk,kill
#   --duration 1800 --max-duration 2400 --quiet 30 --report FILE
TIER=multihost WHAT="multihost tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
# -s: the run prints its figures
run_pytest -s
