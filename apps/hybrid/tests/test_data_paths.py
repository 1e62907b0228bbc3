"""Data and run folders keyed by scenario: two scenarios never share a dataset folder, the same
scenario (and recording settings) always finds its own; an explicit stale ``phase1.data.path`` is
one line naming that key; run names carry the scenario's name and ``--resume`` without a name
continues the newest run of the configured scenario."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tj_data import GraphStore
from tj_data.synthetic import write_synthetic
from tj_hybrid.config import ConfigError, load_config
from tj_hybrid.data_paths import data_root, scenario_data_dir, scenario_key, scenario_name
from tj_hybrid.phase1.data import dataset_dir, ensure_dataset
from tj_hybrid.phases import PhaseSpec
from tj_hybrid.runner import run
from tj_rl.env import SyntheticSpec, build_scenario

DEFAULT = Path(__file__).resolve().parents[3] / "configs/scenarios/default/default.sumocfg"


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small 2x2 grid of lights, 5 minutes of traffic."""
    out = tmp_path_factory.mktemp("grid")
    sumocfg = build_scenario(SyntheticSpec(kind="grid", duration=300.0, name="grid"), out).sumocfg
    assert sumocfg is not None
    return sumocfg


def _config(scenario: Path, *overrides: str):
    return load_config(profile="smoke", overrides=[f"scenario.path={scenario}", *overrides]).config


def test_each_scenario_and_setting_has_its_own_data_folder(grid: Path, tmp_path: Path) -> None:
    default, other = _config(DEFAULT), _config(grid)
    assert default.phase1.data.path is None  # the default: keyed folders under run.data_root
    assert scenario_data_dir(default) == scenario_data_dir(_config(DEFAULT))  # stable
    assert (
        scenario_data_dir(default).parent == scenario_data_dir(other).parent == data_root(default)
    )
    assert scenario_key(default).startswith("default-") and scenario_key(other).startswith("grid-")
    assert scenario_key(default) != scenario_key(other)
    # the key is the scenario's files: an edited route file is another scenario
    copy = tmp_path / "default"
    shutil.copytree(DEFAULT.parent, copy)
    assert scenario_key(_config(copy / "default.sumocfg")) == scenario_key(default)
    routes = copy / "default.rou.xml"
    routes.write_text(routes.read_text().replace("</routes>", "<!-- edited --></routes>"))
    assert scenario_key(_config(copy / "default.sumocfg")) != scenario_key(default)
    # phase 1's dataset: one folder per recording setting, inside the scenario's
    first = dataset_dir(default)
    assert first.parent == scenario_data_dir(default) and first.name.startswith("phase1-")
    assert dataset_dir(_config(DEFAULT)) == first
    assert dataset_dir(_config(DEFAULT, "phase1.record.episode_seconds=200")) != first
    assert dataset_dir(other).parent == scenario_data_dir(other)


def test_an_explicit_path_stays_explicit(tmp_path: Path) -> None:
    cfg = _config(DEFAULT, f"phase1.data.path={tmp_path / 'mine' / 'p1'}")
    assert dataset_dir(cfg) == tmp_path / "mine" / "p1"
    assert scenario_data_dir(cfg) == data_root(cfg) == tmp_path / "mine"  # demand beside it
    assert (
        load_config(profile="smoke", overrides=["phase1.data.path=null"]).config.phase1.data.path
        is None
    )


def test_a_stale_explicit_dataset_is_one_line_naming_the_key(tmp_path: Path) -> None:
    data = tmp_path / "p1"
    for split in ("train", "holdout"):  # a valid dataset, made with other settings
        write_synthetic({"npy": data / split}, samples=4, traffic=True)
        GraphStore.open(data / split).update_manifest(
            metadata={"tj_hybrid": {"fingerprint": "0" * 16}}
        )
    with pytest.raises(ConfigError) as err:
        ensure_dataset(_config(DEFAULT, f"phase1.data.path={data}"))
    line = str(err.value)
    assert "\n" not in line and f"the dataset at {data} was made with other settings" in line
    assert "phase1.data.path" in line and not re.search(r"(?<!phase1\.)data\.path", line)


_PHASE = textwrap.dedent('''
    from tj_hybrid.phase_api import PhaseResult

    class Done:
        """A phase that finishes at once: what the runner needs, nothing else."""

        def preflight(self, config):
            pass

        def run(self, ctx):
            ctx.phase_dir.create()
            return PhaseResult(name="a", agent=ctx.phase_dir.agent, report=ctx.phase_dir.report,
                               headline="done")

    PHASE = Done()
''')


def test_runs_are_named_by_scenario_and_resume_picks_its_newest(
    grid: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "done_phase.py").write_text(_PHASE)
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = (PhaseSpec(name="a", title="A", section="phase1", folder="pa", starts_from=None,
                       trains=1, module="done_phase"),)  # fmt: skip
    runs = tmp_path / "runs"

    def start(scenario: Path, *overrides: str, resume: bool = False) -> int:
        loaded = load_config(profile="smoke", overrides=[f"run.root={runs}",
                                                         f"scenario.path={scenario}", *overrides])  # fmt: skip
        return run(loaded, specs, resume=resume, registry=specs)

    assert start(DEFAULT) == 0 and start(grid) == 0
    (mine,) = runs.glob(f"{scenario_name(DEFAULT)}-*")
    (theirs,) = runs.glob("grid-*")
    os.utime(mine, (1, 1))  # the grid's run is the newest under run.root
    assert start(DEFAULT, "run.seed=7", resume=True) == 0  # continues the default's run
    assert yaml.safe_load((mine / "config.yaml").read_text())["run"]["seed"] == 7
    assert yaml.safe_load((theirs / "config.yaml").read_text())["run"]["seed"] == 0
    assert start(grid, "run.seed=8", resume=True) == 0
    assert yaml.safe_load((theirs / "config.yaml").read_text())["run"]["seed"] == 8
    assert sorted(p.name for p in runs.iterdir()) == sorted([mine.name, theirs.name])
    # an explicit run.name is kept as it is
    assert start(DEFAULT, "run.name=mine") == 0 and (runs / "mine" / "pa" / "result.json").is_file()


def test_rebuilt_plans_are_another_scenario_and_keep_the_own_program_baseline(
    tmp_path: Path,
) -> None:
    """``scenario.plans=rebuilt``: every phase's scenario is on netconvert's static plans (one
    conversion under the data root), its data has its own key, and ``scenario-program`` still
    runs the scenario's own net."""
    from tj_hybrid.traffic import own_programs, scenario_span
    from tj_rl.control import ScenarioProgramPolicy, tls_types

    own = _config(DEFAULT, f"run.data_root={tmp_path}")
    rebuilt = _config(DEFAULT, f"run.data_root={tmp_path}", "scenario.plans=rebuilt")
    span = scenario_span(rebuilt)
    assert span.net_file.parent == tmp_path / "nets" and tls_types(span.net_file) == {"A0": "static"}
    assert span.route_files == scenario_span(own).route_files
    assert scenario_span(rebuilt).net_file == span.net_file  # converted once, then found
    assert scenario_key(rebuilt) != scenario_key(own)
    assert own_programs(own) is None
    programs = own_programs(rebuilt)
    assert programs is not None and programs.net_file == scenario_span(own).net_file
    baseline = rebuilt.phase2.eval.baseline_policies(programs=programs)["scenario-program"]
    assert isinstance(baseline, ScenarioProgramPolicy)
    assert baseline.scenario_for(span).net_file == programs.net_file
    assert own.phase2.eval.baseline_policies()["scenario-program"] == "scenario-program"


def test_the_report_says_when_sumo_actuated_leads_on_other_plans() -> None:
    from tj_hybrid.evaluation import plans_note

    delay = {"phase2": 30.0, "clone": 29.0, "sumo-actuated": 25.0, "max-pressure": 28.0}
    (line,) = plans_note("own", delay, ("phase2", "clone"))
    assert "--set scenario.plans=rebuilt" in line
    assert plans_note("rebuilt", delay, ("phase2", "clone")) == []  # the same plans already
    assert plans_note("own", {**delay, "max-pressure": 24.0}, ("phase2", "clone")) == []
    assert plans_note("own", {"phase2": 20.0}, ("phase2",)) == []  # no baseline
