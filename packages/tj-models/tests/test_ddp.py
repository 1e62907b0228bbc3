"""Phase 1 and phase 3 under DistributedDataParallel: 2 gloo ranks train like one process.

Two spawned ranks (real gloo group, FileStore rendezvous) each train the tiny agent on their shard
of a fixed window batch; one process then trains the same agent on every shard, with the mean of
the shards' losses (what DDP's averaged gradients optimise: the losses are per-vehicle means, so
the loss of the concatenated batch would weigh shards differently). The parameters must agree to
float rounding, and must not agree with training on rank 0's shard alone (what a rank that skips
its all-reduce would do), so the comparison can fail. Several steps per phase also prove that every
trainable parameter is used on every step (DDP without `find_unused_parameters` fails otherwise).

This file is also the launcher (`python test_ddp.py OUT_DIR`): the ranks are started with
torch.multiprocessing and import their function from this file by path, since pytest's importlib
mode gives the test module a name that spawned children cannot import.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_geometric.data import Batch

from tj_models import TrafficAgent, shield_cost_loss, world_model_loss
from tj_models.synthetic import SyntheticTrafficConfig, collate_windows, synthetic_windows

WORLD_SIZE = 2
SHARD_SEED = 7  # every rank must draw the same permutation (as DistributedSampler's seed)
MODEL_SEED = 0
HORIZONS = (1, 2, 2)  # phase-1 steps (rollout horizon of each)
PHASE3_STEPS = 3
INPUT_STEPS = 3
# SGD keeps each update linear in the gradient, so the two sums' rounding (DDP: g0/2 + g1/2 in gloo;
# the reference: backward of (L0 + L1) / 2) stays ~1e-7. AdamW divides by sqrt(v) and turns rounding
# noise in gradients that are exactly zero in theory (attention key biases) into lr-sized steps.
LR = 0.05
RTOL, ATOL = 1e-6, 1e-6


def _shards(seed: int = SHARD_SEED) -> list[list[Batch]]:
    """The fixed dataset (6 windows of 6 steps), split between ranks as a seeded permutation."""
    cfg = SyntheticTrafficConfig(steps=9, warmup_steps=8, arrival_rate=0.5)
    windows = synthetic_windows(cfg, streams=3, window=6, stride=3, seed=1)
    assert len(windows) == 3 * WORLD_SIZE
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed)).tolist()
    return [collate_windows([windows[i] for i in order[r::WORLD_SIZE]]) for r in range(WORLD_SIZE)]


def _phase3_loss(
    agent: TrafficAgent, controller: nn.Module, shield: nn.Module, step: Batch
) -> Tensor:
    with torch.no_grad():
        enc = agent.encode(step)  # frozen in phase 3
    out = controller(enc)
    actions = step.phase.long()  # the current phase: a valid action of every intersection
    logp = torch.log_softmax(out.logits, -1).gather(1, actions[:, None]).squeeze(1)
    risky = torch.zeros(step.num_graphs).index_add_(0, step.batch, step.risk.float())
    loss = -logp.mean() + out.value.pow(2).mean() + out.cost_value.pow(2).mean()
    return loss + shield_cost_loss(shield(enc), actions, risky)


def _train(shards: list[list[Batch]], wrap: Callable[[nn.Module], nn.Module]) -> dict[str, Tensor]:
    """Phase 1 then phase 3 on `shards` (one step = the mean loss over them); final parameters."""
    torch.manual_seed(MODEL_SEED)
    agent = TrafficAgent.preset("tiny")
    opt = torch.optim.SGD(agent.freeze_for_phase(1), lr=LR, momentum=0.9)
    world_model = wrap(agent.world_model)  # the whole phase-1 model: GNN encoder + temporal core
    for horizon in HORIZONS:
        losses = [
            world_model_loss(
                agent.world_model, s, world_model(s, input_steps=INPUT_STEPS, horizon=horizon)
            ).total
            for s in shards
        ]
        opt.zero_grad()
        torch.stack(losses).mean().backward()
        opt.step()
    opt = torch.optim.SGD(agent.freeze_for_phase(3), lr=LR, momentum=0.9)
    controller, shield = wrap(agent.controller), wrap(agent.shield)
    for t in range(PHASE3_STEPS):
        losses = [_phase3_loss(agent, controller, shield, s[t]) for s in shards]
        opt.zero_grad()
        torch.stack(losses).mean().backward()
        opt.step()
    return {k: v.detach().clone() for k, v in agent.state_dict().items()}


def _as_is(module: nn.Module) -> nn.Module:
    return module


def _rank_main(rank: int, out_dir: Path) -> None:
    """One spawned rank: join the gloo group, train DDP-wrapped on its shard, save parameters."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out_dir / 'rendezvous'}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=60),  # a rank missing from a collective fails, not hangs
    )
    try:
        params = _train([_shards()[rank]], wrap=DDP)
        torch.save(params, out_dir / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _max_diff(
    a: dict[str, Tensor], b: dict[str, Tensor], prefixes: tuple[str, ...] = ("",)
) -> float:
    names = [k for k in a if k.startswith(prefixes)]
    return max((a[k].float() - b[k].float()).abs().max().item() for k in names)


def test_shards_hold_different_windows_of_equal_size() -> None:
    shards = _shards()
    assert [len(s) for s in shards] == [6, 6]  # window steps
    assert [s[0].num_graphs for s in shards] == [3, 3]
    assert not torch.equal(shards[0][0].x[:4], shards[1][0].x[:4])


@pytest.mark.timeout(180)
def test_two_gloo_ranks_train_like_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    launcher = subprocess.run(
        [sys.executable, "-W", "ignore::FutureWarning", __file__, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert launcher.returncode == 0, f"ranks failed:\n{launcher.stderr[-6000:]}"
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD_SIZE)]
    assert all(torch.equal(ranks[0][k], ranks[1][k]) for k in ranks[0]), "replicas drifted"
    shards = _shards()
    reference = _train(shards, wrap=_as_is)
    for name, value in reference.items():
        torch.testing.assert_close(
            ranks[0][name], value, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}"
        )
    # the comparison can fail: training on rank 0's shard alone (no all-reduce) ends far away
    assert _max_diff(_train(shards[:1], wrap=_as_is), ranks[0]) > 100 * ATOL
    torch.manual_seed(MODEL_SEED)
    initial = TrafficAgent.preset("tiny").state_dict()
    for trained in (("world_model.",), ("controller.", "shield.")):  # phase 1, phase 3
        assert _max_diff(initial, ranks[0], trained) > 100 * ATOL, f"{trained} did not train"


if __name__ == "__main__":
    tmp.spawn(_rank_main, args=(Path(sys.argv[1]),), nprocs=WORLD_SIZE)
