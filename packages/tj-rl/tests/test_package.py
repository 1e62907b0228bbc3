"""Package metadata: ``tj_rl.__version__`` is the version in pyproject.toml (it was once left
behind by two releases when it was a literal)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tj_rl


def test_version_is_the_pyproject_version() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert tj_rl.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]
