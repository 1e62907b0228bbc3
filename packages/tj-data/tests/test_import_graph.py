"""No import circles inside tj_data: the graph of which module imports which (read from the
source with `ast`: module-level and function-level imports, `from tj_data... import`, `import
tj_data...`, relative imports, and names taken from the lazy top level resolved through
`__init__.pyi`) has no cycle. Imports under `if TYPE_CHECKING:` never run and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import tj_data

PKG = Path(tj_data.__file__).parent


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (anywhere but under `if TYPE_CHECKING:`)."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _lazy_names() -> dict[str, str]:
    """Top-level name -> the module `__init__.pyi` loads it from."""
    out = {}
    for node in ast.parse((PKG / "__init__.pyi").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module or alias.name
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the tj_data modules it imports (names without the `tj_data.` prefix)."""
    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    lazy = _lazy_names()
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        deps: set[str] = set()
        for node in _imports(ast.parse((PKG / f"{name}.py").read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("tj_data.")}
                continue
            mod = node.module or ""
            if node.level:  # relative: inside this flat package
                mod = f"tj_data.{mod}" if mod else "tj_data"
            if mod == "tj_data":  # from tj_data import X: a submodule or a lazy name
                deps |= {a.name if a.name in modules else lazy[a.name] for a in node.names}
            elif mod.startswith("tj_data."):
                deps.add(mod.split(".")[1])
        graph[name] = deps - {name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path a -> ... -> a) through each module that lies on one."""
    cycles, done = [], set()
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in sorted(graph.get(node, ())):
                if dep == start:
                    cycle = [*path, start]
                    if not set(cycle) <= done:
                        cycles.append(cycle)
                        done |= set(cycle)
                    stack.clear()
                    break
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
    return cycles


def test_the_finder_sees_a_cycle_and_a_lazy_import() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tj_data import x\n"
        "def f():\n    from tj_data.y import z\n"
    )
    assert sorted(getattr(n, "module", "") for n in _imports(tree)) == ["tj_data.y", "typing"]


def test_tj_data_has_no_import_cycle() -> None:
    graph = import_graph()
    assert {"schema", "quant", "store", "loader", "plan"} <= set(graph)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
