#!/bin/sh
# Many hosts for real (tests/multihost): the checker's own tests, and the
# quick form of the multi-host run (hosts in network namespaces, a
# nemesis, the checker). Exit 77 (automake SKIP) only where no python3 with
# pytest is found; without root, ip netns, nsenter or /dev/fuse the run is
# skipped with the reason and the checker's tests still run. Results also
# go to run.xml (JUnit XML), which run-tests.sh counts. The long form:
# tests/multihost/multihost.py run --runs N --duration S [--engine opensearch]; on
# a cluster of engine nodes in namespaces of their own, links with a round
# trip of R ms (tc netem): add --nodes 3 --rtt-ms R (R = 0.2, 1, 5).
TIER=multihost WHAT="multihost tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
# -s: the run prints its figures
run_pytest -s
