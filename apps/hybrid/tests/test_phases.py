"""The trainer's structure: phase registry and selection, world resolution, shared loop pieces,
typed hand-off, interrupt handling, and a light top-level import."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tj_hybrid.config import ConfigError, load_config
from tj_hybrid.config.sections import DistSection
from tj_hybrid.handoff import HandoffError, load_handoff
from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
from tj_hybrid.phases import REGISTRY, PhaseSpec, select_phases
from tj_hybrid.training import Cadence, resolve_world, warmup_cosine


def test_select_phases_by_name_range_and_all() -> None:
    assert select_phases("all") == REGISTRY
    assert [s.name for s in select_phases("1")] == ["1"]
    assert [s.name for s in select_phases("1-1")] == ["1"]
    assert [s.name for s in select_phases("1-2")] == ["1", "2"]
    assert [s.name for s in select_phases("3")] == ["3"]
    assert [s.name for s in select_phases("2-3")] == ["2", "3"]
    assert select_phases("1-3") == REGISTRY
    with pytest.raises(ConfigError, match="phase 1 comes before phase 2"):
        select_phases("2-1")
    with pytest.raises(ConfigError, match="no phase 'x'"):
        select_phases("x")


def test_every_registered_phase_loads_and_names_a_config_section() -> None:
    cfg = load_config(profile="smoke").config
    for spec in REGISTRY:
        phase = spec.load()
        assert callable(phase.run) and callable(phase.preflight)
        assert hasattr(cfg, spec.section)
        assert spec.starts_from is None or spec.starts_from in {s.name for s in REGISTRY}


def test_accumulation_is_derived_after_the_rank_count_is_final() -> None:
    # 2 NCCL ranks asked for, 1 GPU found: 1 rank, twice the accumulation, same effective batch
    dist = DistSection(nprocs=2, backend="auto")
    world = resolve_world(dist, effective_batch=64, micro_batch=16, gpus=1, section="phase1")
    assert (world.nprocs, world.backend, world.accumulation_steps) == (1, "nccl", 4)
    assert world.effective_batch == 64
    cpu = resolve_world(dist, effective_batch=64, micro_batch=16, gpus=0, section="phase1")
    assert (cpu.nprocs, cpu.backend, cpu.accumulation_steps) == (2, "gloo", 2)
    with pytest.raises(ConfigError, match=r"phase1.effective_batch=48 is not a multiple of 2"):
        resolve_world(dist, effective_batch=48, micro_batch=16, gpus=0, section="phase1")
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        resolve_world(DistSection(backend="nccl"), effective_batch=64, micro_batch=16, gpus=0,
                      section="phase1")  # fmt: skip


def test_phase1_world_keeps_the_effective_batch_on_a_one_gpu_machine() -> None:
    from tj_hybrid.phase1.run import phase1_world

    cfg = load_config(profile="normal").config  # 2 ranks x 32 x accumulation 4 = 256
    one = phase1_world(cfg, gpus=1)
    assert one.nprocs == 1 and one.effective_batch == cfg.phase1.effective_batch == 256
    assert phase1_world(cfg, gpus=2).accumulation_steps == 4


def test_cadence_and_lr_schedule() -> None:
    c = Cadence(total=25, log_every=10, checkpoint_every=20)
    assert [s for s in range(1, 26) if c.log(s)] == [10, 20, 25]
    assert [s for s in range(1, 26) if c.checkpoint(s)] == [20, 25]
    f = warmup_cosine(4, 104)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(54) == pytest.approx(0.55) and f(104) == pytest.approx(0.1) and f(500) == f(104)
    with pytest.raises(ValueError):
        Cadence(total=0, log_every=1, checkpoint_every=1)


def _spec(trains: int) -> PhaseSpec:
    return PhaseSpec(name="2", title="t", section="phase1", folder="phase2", starts_from="1",
                     trains=trains, module="unused")  # fmt: skip


def test_handoff_loads_the_previous_agent_frozen_for_the_next_phase(tmp_path: Path) -> None:
    from tj_models import TrafficAgent

    torch.manual_seed(0)
    exported = TrafficAgent.preset("tiny", max_actions=4)
    exported.save(tmp_path / "agent")
    agent = load_handoff(tmp_path / "agent", _spec(trains=2))
    for name, param in agent.named_parameters():
        assert param.requires_grad == name.startswith("controller."), name
        assert torch.equal(param, dict(exported.named_parameters())[name])
    three = load_handoff(tmp_path / "agent", _spec(trains=3))
    trained = {n.split(".")[0] for n, p in three.named_parameters() if p.requires_grad}
    assert trained == {"controller", "shield"}
    weights = tmp_path / "agent" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    with pytest.raises(HandoffError, match=r"phase 2 starts from phase 1's agent: .*model\.safetensors"):
        load_handoff(tmp_path / "agent", _spec(trains=2))


def test_signals_raise_once_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as caught, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # let the handler run
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # a second signal while cleaning up: no raise
            signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_importing_the_app_is_light() -> None:
    code = (
        "import sys, warnings, tj_hybrid, tj_hybrid.cli, tj_hybrid.runner\n"
        "heavy = sorted(m for m in ('torch', 'tj_models', 'torch_geometric', 'ray') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert not any('jit' in str(f[1]) for f in warnings.filters), 'filter installed at import'\n"
        "import importlib.metadata as md\n"
        "assert tj_hybrid.__version__ == md.version('tj-hybrid')\n"
        "assert 'tj_hybrid.phase2.imitation' not in sys.modules\n"
        "assert callable(tj_hybrid.make_teacher)  # phase 2's teacher pieces load on first use\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
