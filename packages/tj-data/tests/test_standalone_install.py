"""tj-data installed alone (no workspace) writes, reads and collates a store, and pulls no
reporting stack: tj-monitor's core is psutil and numpy, its report extra is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]  # packages/

SCRIPT = textwrap.dedent(
    """
    import importlib.metadata as md
    import sys
    from pathlib import Path

    import numpy as np
    import tj_monitor

    import tj_data
    from tj_data import GraphStore, GraphStoreWriter, MmapGraphDataset, Schema, collate_graphs

    path = Path(sys.argv[1])
    schema = Schema.graph(node_features=3, edge_features=2)
    rng = np.random.default_rng(0)
    with GraphStoreWriter(path, schema, shard_size=4) as w:
        for n in (3, 4, 5, 3, 6):
            w.append({
                "x": rng.random((n, 3), dtype=np.float32),
                "edge_index": np.array([[0, 1], [1, 2]]),
                "edge_attr": np.ones((2, 2), np.float32),
            })
    store = GraphStore.open(path)
    assert len(store) == 5 and store.num_shards == 2
    ds = MmapGraphDataset(store)
    batch = collate_graphs([ds[i] for i in range(5)])
    assert batch.num_graphs == 5 and batch.x.shape == (21, 3)
    assert batch.edge_index.max().item() == 21 - 6 + 2  # batch-global ids: last graph's node 2
    assert 0 < tj_data.default_budget() <= tj_monitor.memory_limit()  # tj-monitor's core
    missing = []
    for dist in ("matplotlib", "tensorboard", "rich"):
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            missing.append(dist)
    print("not installed:", ",".join(missing))
    print("tj-monitor", md.version("tj-monitor"))
    """
)


@pytest.mark.slow
def test_tj_data_alone_in_a_fresh_venv_writes_reads_collates_without_report_libs(
    tmp_path: Path,
) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (CI installs it: .ci/run)")
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_NO_PROGRESS": "1"}
    env.pop("VIRTUAL_ENV", None)  # never the workspace's environment

    def run(*args: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(a) for a in args],
            cwd=tmp_path,  # outside the workspace: no workspace config applies
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        assert out.returncode == 0, f"{args}:\n{out.stdout}\n{out.stderr}"
        return out

    run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    run(uv, "pip", "install", "--python", python, PACKAGES / "tj-data", PACKAGES / "tj-monitor")
    out = run(python, "-c", SCRIPT, tmp_path / "store", timeout=300)
    lines = out.stdout.splitlines()
    assert "not installed: matplotlib,tensorboard,rich" in lines, out.stdout
    version = tomllib.loads((PACKAGES / "tj-monitor" / "pyproject.toml").read_text())["project"][
        "version"
    ]
    assert f"tj-monitor {version}" in lines, out.stdout  # the workspace's own, not a registry's
