"""The README documents every public name, and every Python block in it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tj_monitor

README = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_every_public_name_is_documented() -> None:
    code = "\n".join(re.findall(r"```(?:python|bash)?\n(.*?)```", README, flags=re.S))
    missing = [n for n in tj_monitor.__all__ if n != "__version__" and n not in code]
    assert not missing, f"public names without an example in README.md: {missing}"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "readme"})
