#!/bin/sh
# The differential test (pytest): the emulator against the recorded answers
# of real engines, and, where Java and Maven are installed, against fresh
# real nodes; then the official Python clients (PyPI, pinned, in a virtual
# environment made here) against the emulator and a real node.
# Exit 77 (automake SKIP) where no python3 with pytest is available. Results
# also go to run.xml (JUnit XML), which run-tests.sh counts.
TIER=difftest WHAT="differential tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
run_pytest
