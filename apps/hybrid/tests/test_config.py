"""Configuration: layering, validation into the packages' typed configs, dotted-path errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tj_hybrid.cli import main
from tj_hybrid.config import (
    PROFILES,
    ConfigError,
    HybridConfig,
    deep_merge,
    describe_profile,
    load_config,
    parse_bytes,
    parse_override,
    validate_dataclass,
)
from tj_hybrid.config.loading import find_project_root
from tj_rl.env import EnvConfig

ROOT = find_project_root(Path(__file__).parent)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_loads_and_validates(profile: str) -> None:
    loaded = load_config(profile=profile)
    cfg = loaded.config
    assert loaded.profile == profile and cfg.profile == profile
    assert isinstance(cfg.scenario.env, EnvConfig)  # a package's own typed config
    assert cfg.scenario.path.is_absolute() and cfg.scenario.path.is_file()
    assert cfg.phase1.effective_batch % (cfg.phase1.loader.batch_size * cfg.dist.nprocs) == 0


def test_the_cpu_profile_says_how_long_before_it_starts() -> None:
    loaded = load_config(profile="cpu")
    line = describe_profile(loaded.profile, loaded.profile_reason)
    assert line.startswith("profile cpu (given with --profile): a real agent without a GPU")
    assert "about 15 min on 2 cores" in line
    cfg = loaded.config
    # what put the agent below the best baseline (BENCHMARKS): a 200 m view, a look-ahead teacher
    assert cfg.scenario.env.obs_radius == 200.0 and cfg.scenario.env.max_nodes == 256
    assert cfg.phase2.imitation.lookahead_s == 40.0
    assert cfg.phase2.imitation.lookahead_sees == "observed"
    assert cfg.phase2.imitation.lookahead_cost == 2.0  # a teacher that weighs the dilemma zone
    # choices on 12 validation episodes, on route seeds never trained on nor held out
    val, demand = cfg.phase2.validation, cfg.phase2.demand
    assert len(val.route_seeds) * len(val.sumo_seeds) == 12
    trained = set(range(1, demand.train_seeds + 1))
    assert set(val.route_seeds).isdisjoint(trained | set(demand.heldout_seeds))
    assert set(val.sumo_seeds).isdisjoint(cfg.phase2.eval.sumo_seeds)
    assert describe_profile("custom", "x") == "profile custom (x)"


def test_auto_profile_on_this_machine_is_smoke_without_gpu() -> None:
    import torch

    loaded = load_config()
    assert loaded.profile == ("normal" if torch.cuda.is_available() else "smoke")
    assert "CUDA" in loaded.profile_reason


def test_set_overrides_are_typed_and_win() -> None:
    cfg = load_config(
        profile="smoke",
        overrides=[
            "phase1.steps=7",
            "scenario.env.delta_time=2",
            "phase1.data.quantize={x: int8}",
            "memory.budget=3G",
        ],
    ).config
    assert cfg.phase1.steps == 7 and cfg.scenario.env.delta_time == 2.0
    assert cfg.phase1.data.quantize == {"x": "int8"}
    assert cfg.memory.budget_bytes(limit=2**40) == 3 * 2**30


def test_eval_margins_add_named_hysteresis_baselines() -> None:
    cfg = load_config(profile="smoke", overrides=["phase2.eval.margins=[2, 4.5]"]).config
    policies = cfg.phase2.eval.baseline_policies()
    assert [k for k, v in policies.items() if isinstance(v, str)] == cfg.phase2.eval.baselines
    assert {k: v.margin for k, v in policies.items() if not isinstance(v, str)} == {
        "greedy-m2": 2.0, "max-occupancy-m2": 2.0, "greedy-m4.5": 4.5, "max-occupancy-m4.5": 4.5}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("phase1.stepz=3", "unknown config key phase1.stepz; allowed at phase1: steps"),
        ("scenario.env.backend=sumo", "scenario.env.backend: Input should be 'libsumo' or 'traci'"),
        ("scenario.env.graph.k_nearest=0", "scenario.env.graph: GraphConfig.k_nearest"),
        ("scenario.path=net.xml", "scenario: path net.xml: expected a SUMO configuration file"),
        ("model.preset=huge", "model.preset: Input should be 'tiny', 'normal' or 'large'"),
        ("amp.backoff_factor=2", "amp: backoff_factor=2.0 must be in (0, 1)"),
        ("phase1.effective_batch=50", "must be a multiple of loader.batch_size=16"),
        ("memory.budget=lots", "'lots' is not a size"),
        ("phase1.data.quantize={x: int4}", "phase1.data.quantize.x"),
        ("record.scenario=x.sumocfg", "config key record.scenario moved to scenario.path"),
        ("loader.ram_budget=3G", "config key loader.ram_budget moved to memory.budget"),
        ("data.path=/tmp/x", "config key data moved to phase1.data"),
        ("dist.nprocs=0", "dist: nprocs must be > 0"),
        ("monitor.warn=0.9", "monitor:"),
        ("phase2.eval.margins=[2, 0]", "margins must be finite and > 0 (0 is the plain baseline)"),
        ("phase2.eval.margins=[2, .inf]", "margins must be finite and > 0"),
        ("phase2.eval.margins=[2, 2]", "margins: each at most once"),
        ("phase2.eval.baselines=[smart]", "phase2.eval.baselines"),
        ("phase2.eval.reuse_rows=sometimes", "phase2.eval.reuse_rows"),
        ("scenario.plans=actuated", "scenario.plans: Input should be 'own' or 'rebuilt'"),
    ],
)
def test_bad_values_name_their_dotted_path(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(profile="smoke", overrides=[override])
    assert message in str(err.value)


def test_layering_and_override_parsing() -> None:
    assert parse_override("a.b.c=1e-3") == {"a": {"b": {"c": 1e-3}}}
    assert parse_override("a=[1, 2]") == {"a": [1, 2]}
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}}
    for bad in ("novalue", "=3", "a..b=1"):
        with pytest.raises(ConfigError, match=r"expected KEY\.PATH=VALUE"):
            parse_override(bad)
    assert parse_bytes("512M") == 512 * 2**20 and parse_bytes(0.5) == 0.5
    with pytest.raises(ValueError):
        parse_bytes(-1)


def test_a_section_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match="phase1: expected a mapping, got int"):
        validate_dataclass(HybridConfig, {"phase1": 3})


def test_bad_yaml_and_missing_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "configs" / "hybrid.yaml"
    bad.parent.mkdir()
    bad.write_text("run: [unclosed\n")
    with pytest.raises(ConfigError, match=r"hybrid\.yaml: invalid YAML"):
        load_config(bad, profile="smoke")
    bad.write_text("run: {seed: 1}\n")  # valid, but the profile overlay is missing next to it
    with pytest.raises(ConfigError, match=r"profiles/smoke\.yaml does not exist"):
        load_config(bad, profile="smoke")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", profile="smoke")


def test_cli_print_config_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "smoke", "--set", "phase1.steps=11", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["phase1"]["steps"] == 11 and printed["profile"] == "smoke"
    assert printed["scenario"]["env"]["delta_time"] == 5.0
    assert main(["--profile", "smoke", "--set", "phase1.oops=1", "--print-config"]) == 2
    assert "unknown config key phase1.oops" in capsys.readouterr().err
    assert main(["--phase", "3", "--set", "phase3.epochs=3", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["phase3"]["epochs"] == 3
    assert main(["--phase", "7", "--print-config"]) == 2
    assert "no phase '7'; available: 1, 2, 3 or all" in capsys.readouterr().err
