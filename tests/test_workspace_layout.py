"""Cross-package contract checks: layout, dependency ranges and import rules of DESIGN §2-§3.

These read source files as text (ast, toml), so they run in milliseconds and fail with the
offending file and line when a package imports something it may not, or when a member asks for
a version of another member that the workspace does not have (uv resolves members from the
workspace and ignores those ranges, so nothing else notices until a `pip install` from an index).
"""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

# module -> tj modules it may import (DESIGN §3). Apps may import any package.
ALLOWED: dict[str, set[str]] = {
    "tj_data": {"tj_monitor"},
    "tj_models": {"tj_monitor"},  # the atomic-write helper (the lead's decision, issue 15)
    "tj_dist": {"tj_monitor"},
    "tj_monitor": set(),
    "tj_rl": {"tj_models", "tj_data", "tj_dist", "tj_monitor"},
}
# Packages that may use tj-monitor's core only: their requirement on it names no extra (DESIGN §3:
# psutil and numpy; `report` would pull rich, matplotlib and tensorboard into `pip install tj-data`).
CORE_ONLY_MONITOR = {"tj-data", "tj-dist", "tj-models"}
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


def _project(member: Path) -> dict:
    return tomllib.loads((member / "pyproject.toml").read_text(encoding="utf-8"))["project"]


# member name -> its current version, e.g. {"tj-rl": "0.4.0"}
VERSIONS = {canonicalize_name(p["name"]): p["version"] for p in map(_project, MEMBERS)}


def _requirements(project: dict) -> list[str]:
    """Every requirement string of a member: dependencies and all optional-dependency extras."""
    found = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        found += extra
    return found


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


@pytest.mark.parametrize("member", MEMBERS, ids=lambda p: p.name)
def test_member_ranges_accept_the_workspace_versions(member: Path) -> None:
    """A dependency on another member has a version range containing that member's version."""
    project = _project(member)
    bad = []
    for text in _requirements(project):
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name not in VERSIONS:
            continue
        if not req.specifier:
            bad.append(f"{text!r} has no version range (DESIGN §2)")
        elif not req.specifier.contains(VERSIONS[name], prereleases=True):
            bad.append(f"{text!r} excludes {name} {VERSIONS[name]}, the workspace's version")
        if name == "tj-monitor" and req.extras and project["name"] in CORE_ONLY_MONITOR:
            bad.append(f"{text!r}: {project['name']} may use tj-monitor's core only (DESIGN §3)")
    assert not bad, f"{member.relative_to(ROOT)}/pyproject.toml:\n" + "\n".join(bad)


def test_lock_file_not_tracked() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "uv.lock"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    assert not tracked, "uv.lock must not be committed (DESIGN §2)"
    assert "uv.lock" in (ROOT / ".gitignore").read_text().split()
