"""The package's top level loads names on first use, and the store-side modules never import
torch (checked in fresh interpreters): store-only users never pay for it."""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tj_data


def _stub_all() -> list[str]:
    stub = ast.parse(Path(tj_data.__file__).with_suffix(".pyi").read_text())
    for node in stub.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
            return list(ast.literal_eval(node.value))
    raise AssertionError("__init__.pyi has no __all__")


def test_every_listed_name_resolves_and_all_matches_the_stub():
    listed = _stub_all()
    assert sorted(tj_data.__all__) == sorted(listed)
    assert sorted(dir(tj_data)) == sorted(listed)
    for name in listed:
        assert getattr(tj_data, name) is not None, name
    assert tj_data.AUGMENT_PRESETS is tj_data.augment.PRESETS


def test_readme_api_table_lists_exactly_the_exported_names():
    lines = (Path(__file__).parents[1] / "README.md").read_text().splitlines()
    start = lines.index("| piece | what | module |") + 2
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[start:])
    documented = [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]
    assert sorted(documented) == sorted(_stub_all())


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = tj_data.NoSuchThing


def test_store_writing_and_reading_do_not_import_torch(tmp_path: Path):
    code = f"""
import sys
import numpy as np
from tj_data import GraphStore, GraphStoreWriter, Schema
schema = Schema.graph(node_features=3, edge_features=2)
sample = {{"x": np.ones((4, 3), np.float32), "edge_index": np.array([[0, 1], [1, 2]]),
          "edge_attr": np.zeros((2, 2), np.float32)}}
with GraphStoreWriter({str(tmp_path / "store")!r}, schema) as w:
    w.append(sample)
store = GraphStore.open({str(tmp_path / "store")!r})
assert np.array_equal(store[0]["x"], sample["x"])
assert "torch" not in sys.modules, "writing or reading a store imported torch"
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# The store side: what a recording worker or the `tj-data` CLI imports. None of these may pull in
# torch, directly or through another module (quantisation is numpy here; torch's half lives in
# tj_data.quant_torch).
STORE_SIDE = [
    "errors", "_fs", "quant", "schema", "manifest", "backends", "gather", "verify", "store",
    "writer", "moments", "progress", "statistics", "quantize_store", "json_import", "synthetic",
    "cli",
]  # fmt: skip


def test_store_side_modules_never_import_torch():
    code = f"""
import importlib, sys
for name in {STORE_SIDE!r}:
    importlib.import_module("tj_data." + name)
    assert "torch" not in sys.modules, f"importing tj_data.{{name}} imported torch"
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
