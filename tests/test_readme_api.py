"""Every member's README lists its public API as it is (issue 26: "every package README's API
list matches its ``__all__``").

tj-models and tj-dist keep a module table whose second column names the public names: it must
list exactly ``__all__``. tj-data's and tj-rl's own tests check their tables the same way
(``packages/tj-data/tests/test_lazy_import.py``, ``packages/tj-rl/tests/test_package.py``).
For tj-monitor and the two apps, every name of ``__all__`` must at least appear in the README.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = {  # module -> (README, the table's header line)
    "tj_models": ("packages/tj-models/README.md", "| module | contents |"),
    "tj_dist": ("packages/tj-dist/README.md", "| module | what |"),
}
MENTIONED = {
    "tj_monitor": "packages/tj-monitor/README.md",
    "tj_hybrid": "apps/hybrid/README.md",
    "tj_bench": "apps/bench/README.md",
}


def _public(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__) - {"__version__"}


@pytest.mark.parametrize("module", sorted(TABLES))
def test_module_table_lists_exactly_all(module: str) -> None:
    path, header = TABLES[module]
    lines = (ROOT / path).read_text().splitlines()
    start = lines.index(header) + 2
    listed: set[str] = set()
    for row in lines[start:]:
        if not row.startswith("|"):
            break
        listed |= set(re.findall(r"`(\w+)(?![.\w])", row.split("|")[2]))  # not `module.name`
    public = _public(module)
    assert sorted(public - listed) == [], f"{path}: public names missing from the table"
    assert sorted(listed - public) == [], f"{path}: the table names what {module} does not export"


@pytest.mark.parametrize("module", sorted(MENTIONED))
def test_every_public_name_is_in_the_readme(module: str) -> None:
    text = (ROOT / MENTIONED[module]).read_text()
    missing = sorted(n for n in _public(module) if not re.search(rf"`[^`]*\b{n}\b[^`]*`", text))
    assert missing == [], f"{MENTIONED[module]}: {missing}"
