"""Phase 2 on an existing Ray cluster (``phase2.ray_address``): a local two-node cluster started
with Ray's CLI (tj-rl's ``LocalCluster``), env runners on both nodes, the cluster left running
when the phase ends (it is not the phase's to stop)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1500)  # phases 1 and 2 (twice): a loaded CI host is slow
def test_phase_2_runs_on_a_two_node_cluster(
    small_args: list[str], tiny_phase2: list[str], tmp_path: Path, app: Path
) -> None:
    from tj_dist.ray_cluster import LocalCluster
    from tj_monitor.processes import processes_naming

    with LocalCluster(nodes=2, cpus_per_node=1) as cluster:
        args = [*small_args, "--set", "run.name=p2cluster", "--set", "phase1.steps=5",
                "--set", "phase1.eval_batches=1", *tiny_phase2,
                "--set", f"phase2.ray_address={cluster.address}", "--phase", "1-2"]  # fmt: skip
        out = subprocess.run([sys.executable, str(app), *args], capture_output=True, text=True,
                             timeout=900, env={**cluster.env(), "PYTHONUNBUFFERED": "1"},
                             check=False)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "phase 2 on the cluster at" in out.stderr
        found = re.search(r"(\d+) env runner\(s\) on (\d+) node\(s\)", out.stderr)
        assert found and found.groups() == ("2", "2"), out.stderr[-3000:]
        assert "phase 2 done: held-out avg delay" in out.stdout
        assert cluster.temp_dir is not None and processes_naming(cluster.temp_dir)  # still up
        assert not (tmp_path / "runs" / "p2cluster" / "phase2" / "ray").exists()  # not ours
    assert processes_naming(cluster.temp_dir) == []
