"""Cross-package contract checks: layout and import rules of DESIGN §2-§3.

These read source files as text (ast), so they run in milliseconds and fail with the offending
file and line when a package imports something it may not.
"""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module -> tj modules it may import (DESIGN §3). Apps may import any package.
ALLOWED: dict[str, set[str]] = {
    "tj_data": set(),
    "tj_models": set(),
    "tj_dist": set(),
    "tj_monitor": set(),
    "tj_rl": {"tj_models", "tj_data", "tj_monitor"},
}
APPS = {"tj_hybrid", "tj_bench"}
TJ_MODULES = set(ALLOWED) | APPS


def _members() -> list[Path]:
    return sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml")) + sorted(
        p.parent for p in ROOT.glob("apps/*/pyproject.toml")
    )


def _imported_tj_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in TJ_MODULES:
                found.append((node.lineno, top))
    return found


MEMBERS = _members()


def test_workspace_has_members() -> None:
    assert MEMBERS, "no workspace member found under packages/ or apps/"


@pytest.mark.parametrize("member", MEMBERS, ids=lambda p: p.name)
def test_member_layout(member: Path) -> None:
    meta = tomllib.loads((member / "pyproject.toml").read_text())
    project = meta["project"]
    module = project["name"].replace("-", "_")
    assert (member / "src" / module / "__init__.py").is_file(), f"{member}: src/{module} missing"
    assert meta["build-system"]["build-backend"] == "uv_build", f"{member}: use uv_build"
    parts = project["version"].split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts), f"{member}: semver version"
    assert (member / "README.md").is_file(), f"{member}: README.md missing"
    assert (member / "CHANGELOG.md").is_file(), f"{member}: CHANGELOG.md missing"
    assert project["version"] in (member / "CHANGELOG.md").read_text(), (
        f"{member}: CHANGELOG.md has no entry for {project['version']}"
    )
    init = (member / "src" / module / "__init__.py").read_text()
    assert "__all__" in init, f"{member}: __init__.py must declare __all__"
    # every member that depends on another member does so through the workspace
    sources = meta.get("tool", {}).get("uv", {}).get("sources", {})
    for dep in project.get("dependencies", []):
        name = dep.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()
        if name.startswith("tj-"):
            assert sources.get(name) == {"workspace": True}, f"{member}: {name} not from workspace"


@pytest.mark.parametrize("member", MEMBERS, ids=lambda p: p.name)
def test_import_rules(member: Path) -> None:
    module = member.name.replace("-", "_")
    if member.parent.name == "apps":
        return  # apps may import any package; nothing imports an app (checked below)
    allowed = ALLOWED.get(module)
    assert allowed is not None, f"{module}: not in DESIGN §3's table; add it there and here"
    bad = []
    for path in sorted((member / "src").rglob("*.py")):
        for line, top in _imported_tj_modules(path):
            if top != module and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {top}")
    assert not bad, "import rule broken (DESIGN §3):\n" + "\n".join(bad)


def test_lock_file_not_tracked() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "uv.lock"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    assert not tracked, "uv.lock must not be committed (DESIGN §2)"
    assert "uv.lock" in (ROOT / ".gitignore").read_text().split()
