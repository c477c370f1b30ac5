"""Fixtures for check tests: the copied fixture home and its stores."""

import pytest

from .helpers import store_of


@pytest.fixture
def store(hermes_home):
    """``store("ops")``: a Store of the per-test copy of the fixture home."""
    return lambda profile="default": store_of(hermes_home, profile)
