"""``tj-hybrid eval`` and ``watch`` on an exported agent, with no training: eval puts it against the
baselines on the scenario's held-out traffic in a folder of its own; a missing, foreign or
too-small agent is one line and exit 2; watch without a display is one line and exit 2, and
nothing starts. Real SUMO; the agent is a tiny tj-models agent with untrained weights."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

APP = Path(__file__).resolve().parents[1]
REPO = APP.parents[1]

# The embedded scenario's own demand, cut small: 2-minute windows, one training variation, one
# held-out seed, one SUMO seed, one baseline.
SMALL_EVAL = ["--profile", "smoke", *(a for o in (
    "phase2.episode_seconds=120", "phase2.demand.train_seeds=1", "phase2.demand.scales=[1.0]",
    "phase2.demand.heldout_seeds=[101]", "phase2.eval.sumo_seeds=[9]",
    "phase2.eval.baselines=[max-pressure]") for a in ("--set", o))]  # fmt: skip


def _app(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(APP), *args], capture_output=True, text=True,
                          timeout=600, env=env if env is not None else dict(os.environ),
                          check=False)  # fmt: skip


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``fits``: a tiny agent embedding the embedded scenario's lane rows; ``too_small``: one lane
    row fewer than its widest light has."""
    import torch

    from tj_models import TrafficAgent, TrafficAgentConfig
    from tj_rl.control.fit import check_spaces
    from tj_rl.env import EnvConfig, TrafficSignalCore, default_scenario

    scenario = default_scenario(REPO / "configs/scenarios/default/default.sumocfg")
    core = TrafficSignalCore(EnvConfig(metrics=False, pad_to_scenario=True), scenario=scenario)
    light = core.possible_agents[0]
    greens, lanes = check_spaces(core.observation_spaces[light], core.action_spaces[light])
    core.close()
    base = TrafficAgentConfig.preset("tiny", max_actions=greens)
    root = tmp_path_factory.mktemp("agents")
    out = {}
    for name, rows in (("fits", lanes), ("too_small", lanes - 1)):
        config = dataclasses.replace(base, gnn=dataclasses.replace(base.gnn, num_movements=rows))
        torch.manual_seed(0)
        out[name] = TrafficAgent(config).save(root / name / "agent")
    return out


def _refused(out: subprocess.CompletedProcess[str], *untouched: Path) -> str:
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("tj-hybrid:")]
    assert len(errors) == 1 and out.stderr.strip() == errors[0], out.stderr
    assert not any(p.exists() for p in untouched)  # nothing started, nothing half-written
    return errors[0]


def test_eval_puts_the_agent_against_the_baselines_in_its_own_folder(
    agents: dict[str, Path], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    out = _app("eval", "--agent", str(agents["fits"]), *SMALL_EVAL, "--set", f"run.root={runs}",
               "--set", f"run.data_root={tmp_path / 'data'}")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (folder,) = runs.iterdir()
    assert folder.name.startswith("eval-default-")
    assert {p.name for p in folder.iterdir()} == {"report.md", "eval.json", "heldout.png"}
    evaluation: dict[str, Any] = json.loads((folder / "eval.json").read_text())
    for label in ("held_out", "held_out_heavy"):
        assert set(evaluation[label]["summary"]) == {"agent", "max-pressure"}
        # the scenario's own demand and a held-out seed, each run by both policies
        assert len(evaluation[label]["rows"]) == 4
        assert {r["window"][0] for r in evaluation[label]["rows"]} == {120}  # never trained on
    for table in (out.stdout, (folder / "report.md").read_text()):
        rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")]
        assert rows.count("agent") == 2 and rows.count("max-pressure") == 2  # normal and heavy
    for text in (out.stdout, (folder / "report.md").read_text()):
        assert "- held-out: agent " in text and "against the best baseline, max-pressure" in text
    assert f"report: {folder / 'report.md'}" in out.stdout
    # again on the same data root: every episode's row comes from the row cache, unchanged
    again = _app("eval", "--agent", str(agents["fits"]), *SMALL_EVAL, "--set",
                 f"run.root={tmp_path / 'again'}", "--set", f"run.data_root={tmp_path / 'data'}")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 of 4 episode(s) from the row cache" in again.stdout + again.stderr
    (second,) = (tmp_path / "again").iterdir()
    assert json.loads((second / "eval.json").read_text()) == evaluation


@pytest.mark.parametrize("which", ["missing", "not_an_agent", "too_small", "none"])
def test_a_bad_agent_is_one_line_and_exit_2(agents: dict[str, Path], tmp_path: Path,
                                            which: str) -> None:  # fmt: skip
    given = {"missing": ["--agent", str(tmp_path / "nope")],
             "not_an_agent": ["--agent", str(tmp_path)],
             "too_small": ["--agent", str(agents["too_small"])], "none": []}[which]  # fmt: skip
    runs, data = tmp_path / "runs", tmp_path / "data"
    out = _app("eval", *given, *SMALL_EVAL, "--set", f"run.root={runs}",
               "--set", f"run.data_root={data}")  # fmt: skip
    line = _refused(out, runs, data)
    expected = {"missing": "no such directory", "not_an_agent": "not an exported tj-models agent",
                "too_small": "cannot control it", "none": "needs --agent"}[which]  # fmt: skip
    assert expected in line


def test_an_agent_trained_on_other_plans_is_refused_in_one_line(agents: dict[str, Path],
                                                                tmp_path: Path) -> None:  # fmt: skip
    """The run an agent came from says which greens it switched (``scenario.plans``)."""
    agent = tmp_path / "run" / "phase2" / "agent"
    shutil.copytree(agents["fits"], agent)
    (tmp_path / "run" / "config.yaml").write_text("scenario:\n  plans: rebuilt\n")
    runs, data = tmp_path / "runs", tmp_path / "data"
    out = _app("eval", "--agent", str(agent), *SMALL_EVAL, "--set", f"run.root={runs}",
               "--set", f"run.data_root={data}")  # fmt: skip
    line = _refused(out, runs, data)
    assert "trained with scenario.plans=rebuilt" in line
    assert line.endswith("add --set scenario.plans=rebuilt")


def test_watch_without_a_display_says_so_and_starts_nothing(agents: dict[str, Path],
                                                            tmp_path: Path) -> None:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    runs, data = tmp_path / "runs", tmp_path / "data"
    out = _app("watch", "--agent", str(agents["fits"]), *SMALL_EVAL, "--set", f"run.root={runs}",
               "--set", f"run.data_root={data}", env=env)  # fmt: skip
    assert "no display" in _refused(out, runs, data)


@pytest.mark.skipif(shutil.which("xvfb-run") is None, reason="needs xvfb-run (a virtual display)")
def test_watch_runs_the_episode_in_sumo_gui(agents: dict[str, Path], tmp_path: Path) -> None:
    out = subprocess.run(
        ["xvfb-run", "-a", sys.executable, str(APP), "watch", "--agent", str(agents["fits"]),
         "--delay", "0", *SMALL_EVAL, "--set", f"run.data_root={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "watch: episode ended at 240 s" in out.stdout, out.stdout
