"""Package shape: ``tj_rl.__version__`` is the version in pyproject.toml (it was once left behind
by two releases when it was a literal); the env room imports neither Ray nor torch, by structure;
the 0.8 top-level names still resolve, with a warning that names their room."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import pytest

import tj_rl
import tj_rl.env


def test_version_is_the_pyproject_version() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert tj_rl.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]


def test_every_env_module_imports_neither_ray_nor_torch(fresh_python) -> None:
    """Each module of ``tj_rl.env`` (and the traffic, control baselines, eval and recording modules
    an env or recording process loads) in a fresh interpreter: no Ray, torch or tj-models. numba is
    allowed only for ``numba_kernels``, which an env loads when it chooses that kernel."""
    env_modules = [
        f"tj_rl.env.{m.name}" for m in pkgutil.iter_modules(tj_rl.env.__path__)
        if m.name != "numba_kernels"
    ]  # fmt: skip
    light = [
        "tj_rl.traffic.demand", "tj_rl.control.baselines", "tj_rl.eval.episodes",
        "tj_rl.eval.heldout", "tj_rl.recording.record", "tj_rl.recording.snapshot",
        "tj_rl.rollout.advantages", "tj_rl.rollout.samples",
    ]  # fmt: skip
    assert len(env_modules) >= 20, env_modules
    code = (
        "import importlib, sys\n"
        f"for name in {[*env_modules, *light]!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in ('ray', 'torch', 'tj_models', 'numba') if m in sys.modules))\n"
    )
    assert fresh_python(code, timeout=180) == "[]"


def test_old_top_level_names_warn_and_resolve() -> None:
    from tj_rl.env import RuleShield, Scenario
    from tj_rl.eval import evaluate_heldout

    with pytest.warns(DeprecationWarning, match=r"tj_rl\.Scenario moved: use tj_rl\.env\.Scenario"):
        assert tj_rl.Scenario is Scenario
    with pytest.warns(DeprecationWarning, match="tj_rl.env.RuleShield"):
        assert tj_rl.SafetyShield is RuleShield
    with pytest.warns(DeprecationWarning):
        assert tj_rl.evaluate_heldout is evaluate_heldout
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = tj_rl.nothing_here


def test_readme_api_table_is_every_rooms_all() -> None:
    """README's "Public API" table lists exactly each room's ``__all__``, and every room."""
    import importlib
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    api = readme[readme.index("## Public API"):]
    rows = dict(re.findall(r"^\| `tj_rl\.(\w+)` \|[^|]*\| (.*) \|$", api, flags=re.M))
    rooms = sorted(m.name for m in pkgutil.iter_modules(tj_rl.__path__) if m.ispkg)
    assert sorted(rows) == rooms
    for room, names in rows.items():
        listed = re.findall(r"`(\w+)`", names)
        assert listed == list(importlib.import_module(f"tj_rl.{room}").__all__), room
