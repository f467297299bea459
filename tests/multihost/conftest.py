"""Fixtures shared by the multi-host tests."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import multihost  # noqa: E402


@pytest.fixture
def machine():
    """Fails when the programs are not built; skips, with the reason, where
    the machine cannot run hosts."""
    why = multihost.unbuilt()
    if why:
        pytest.fail("broken build: " + why, pytrace=False)
    why = multihost.missing()
    if why:
        pytest.skip(why)
