"""Who may import what, read from the source files (ast; nothing is imported): a phase folder
imports no other phase folder (DESIGN §10: what phases share lives outside them), and apps/bench
uses tj_hybrid's public top level only, the names in its ``__all__`` (DESIGN §3)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HYBRID = ROOT / "apps" / "hybrid" / "src" / "tj_hybrid"
BENCH = ROOT / "apps" / "bench"
PHASE_FOLDER = re.compile(r"phase\d+")


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every module ``path`` imports, relative imports resolved; a name
    taken from a module (``from a import b``) also counts as ``a.b`` (it may be a submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [base])])
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{a.name}") for a in node.names)


def phase_violations(hybrid: Path) -> list[str]:
    """Imports of one phase folder's modules from another phase folder's."""
    src, found = hybrid.parent, []
    for path in sorted(hybrid.rglob("*.py")):
        own = path.relative_to(hybrid).parts[0]
        if not PHASE_FOLDER.fullmatch(own):
            continue
        for line, name in _imported(path, _module_name(path, src)):
            parts = name.split(".")
            if parts[0] == hybrid.name and len(parts) > 1 and PHASE_FOLDER.fullmatch(parts[1]) \
                    and parts[1] != own:  # fmt: skip
                found.append(f"{path.relative_to(src)}:{line} imports {name}")
    return sorted(found)


def _public(init: Path) -> set[str]:
    """The names in the ``__all__`` list of a package's ``__init__.py``."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{init}: no __all__ list")


def bench_violations(bench: Path, hybrid: Path) -> list[str]:
    """apps/bench's uses of tj_hybrid beyond its public top level: a submodule imported, a name
    imported or read (``tj_hybrid.x``) that is not in ``tj_hybrid.__all__``."""
    public, top, found = _public(hybrid / "__init__.py"), hybrid.name, []
    for path in sorted(bench.rglob("*.py")):
        if ".venv" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            bad: list[str] = []
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith(f"{top}.")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == top:
                bad = ([node.module] if node.module != top else
                       [f"{top}.{a.name}" for a in node.names if a.name not in public])  # fmt: skip
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == top and not node.attr.startswith("__"):  # fmt: skip
                bad = [f"{top}.{node.attr}"] if node.attr not in public else []
            found += [f"{path.relative_to(bench.parent)}:{node.lineno} uses {b}" for b in bad]
    return sorted(found)


def test_no_phase_imports_another_phase() -> None:
    assert {p.name for p in HYBRID.iterdir() if PHASE_FOLDER.fullmatch(p.name)} >= {
        "phase1", "phase2", "phase3"}  # fmt: skip
    assert phase_violations(HYBRID) == []


def test_bench_uses_only_the_public_top_level_of_tj_hybrid() -> None:
    assert list(BENCH.rglob("suites/phase2.py")), "apps/bench not found beside apps/hybrid"
    assert bench_violations(BENCH, HYBRID) == []


def test_the_rules_find_what_they_forbid(tmp_path: Path) -> None:
    """Each forbidden form is reported with its file and line; what is allowed is not."""
    hybrid = tmp_path / "src" / "tj_hybrid"
    for folder in ("phase1", "phase2", "training"):
        (hybrid / folder).mkdir(parents=True)
    (hybrid / "__init__.py").write_text('__all__ = ["read_result", "load_config"]\n')
    (hybrid / "phase2" / "a.py").write_text(
        "from tj_hybrid.phase1.shrinkers import CacheShrinker\n"  # another phase: no
        "from ..phase1 import data\n"  # relative, another phase: no
        "from tj_hybrid import phase1\n"  # the other phase as a name: no
        "from tj_hybrid.phase2 import train\n"  # its own phase: yes
        "from tj_hybrid.training import CacheShrinker\n"  # shared: yes
    )
    (hybrid / "training" / "b.py").write_text("from tj_hybrid.phase1 import run\n")  # not a phase
    assert phase_violations(hybrid) == [
        "tj_hybrid/phase2/a.py:1 imports tj_hybrid.phase1.shrinkers",
        "tj_hybrid/phase2/a.py:1 imports tj_hybrid.phase1.shrinkers.CacheShrinker",
        "tj_hybrid/phase2/a.py:2 imports tj_hybrid.phase1",
        "tj_hybrid/phase2/a.py:2 imports tj_hybrid.phase1.data",
        "tj_hybrid/phase2/a.py:3 imports tj_hybrid.phase1",
    ]
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "c.py").write_text(
        "import tj_hybrid\n"  # the top level: yes
        "from tj_hybrid import read_result, config\n"  # config is not in __all__: no
        "from tj_hybrid.phase2.setup import prepare\n"  # a submodule: no
        "import tj_hybrid.results\n"  # a submodule: no
        "x = tj_hybrid.load_config, tj_hybrid.__file__, tj_hybrid.runner\n"  # runner: no
    )
    assert bench_violations(bench, hybrid) == [
        "bench/c.py:2 uses tj_hybrid.config",
        "bench/c.py:3 uses tj_hybrid.phase2.setup",
        "bench/c.py:4 uses tj_hybrid.results",
        "bench/c.py:5 uses tj_hybrid.runner",
    ]
