"""Phase 2 on an existing Ray cluster (``phase2.ray_address``): a local two-node cluster started
with Ray's CLI (tj-dist's ``LocalCluster``), env runners on both nodes, the learner in the
driver process (on the machine that ran the command), checkpoints and the exported agent in the
run folder, the cluster left running when the phase ends (it is not the phase's to stop)."""

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
        # the learner (num_learners=0) is the driver process, on the machine of the command
        place = re.search(r"placement: driver (pid \d+ on node \w+) \(.*?\); "
                          r"learner (pid \d+ on node \w+) \(.*?\), device (\S+);", out.stderr)
        assert place, out.stderr[-3000:]
        assert place[1] == place[2] and place[3] == "cpu"  # the same process; no GPU here
        runners = re.search(r"env runner\(s\) on 2 node\(s\): (\w+) x1, (\w+) x1", out.stderr)
        assert runners and place[1].split()[-1] in runners.groups()  # one beside the learner
        phase2 = tmp_path / "runs" / "p2cluster" / "phase2"
        assert sorted(p.name for p in (phase2 / "checkpoints").glob("iter-*"))[-1:] == ["iter-00002"]
        assert {p.name for p in (phase2 / "agent").iterdir()} >= {"config.json",
                                                                  "model.safetensors"}
        assert "phase 2 done: held-out avg delay" in out.stdout
        assert cluster.temp_dir is not None and processes_naming(cluster.temp_dir)  # still up
        assert not (tmp_path / "runs" / "p2cluster" / "phase2" / "ray").exists()  # not ours
    assert processes_naming(cluster.temp_dir) == []
