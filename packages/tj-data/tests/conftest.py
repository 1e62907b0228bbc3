"""Fixtures of the tj-data tests; helpers live in tjdata_testutil (importable by test modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make tjdata_testutil importable


@pytest.fixture(params=["npy", "hdf5"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param
