#!/bin/sh
# Integration tests: pytest mounting treelockfs for real. Exit 77 (automake
# SKIP) only where no python3 with pytest is found: without /dev/fuse or
# fusermount3 the tests that mount are skipped one by one (conftest.py) and
# the others (man pages, --help, option checks) still run and can fail.
# Results also go to run.xml (JUnit XML), which run-tests.sh counts.
TIER=integration WHAT="integration tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
have_fuse || echo "no /dev/fuse or fusermount3 (Debian package fuse3): the tests that mount are skipped"
run_pytest
