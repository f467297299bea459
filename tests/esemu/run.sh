#!/bin/sh
# The Elasticsearch emulator's own tests (pytest). Exit 77 (automake SKIP)
# where no python3 with pytest is available. Results also go to run.xml
# (JUnit XML), which run-tests.sh counts.
TIER=esemu WHAT="emulator tests"
. "$(dirname "$0")/../lib.sh"
need_pytest
run_pytest
