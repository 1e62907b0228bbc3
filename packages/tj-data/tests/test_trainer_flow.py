"""The phase-1 trainer's data flow, end to end, on 2 gloo ranks (real process group, real
DataLoader workers): statistics -> manifest -> Normalizer by column names -> WindowDataset with
normalisation + augmentation -> plan_loader -> build_loader (chunk sampler, or torch's
DistributedSampler) -> equal batches on every rank."""

from __future__ import annotations

import json
import multiprocessing as mp
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from tjdata_traffic import write_traffic

from tj_data import (
    AugmentConfig,
    Augmenter,
    DistributedChunkSampler,
    MmapGraphDataset,
    Normalizer,
    WindowDataset,
    build_loader,
    compute_statistics,
    plan_loader,
)
from tj_monitor import tree_memory

RULES = {
    "rel_*": "zscore(p1,p99)",
    "dist_to_stop_line": "clamp(p1,p99)",
    "heading_*": "identity",
    "speed": "minmax",
    "length": "minmax",
    "*": "zscore",
}


def _rank(store: str, pg: str, out: str, rank: int) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"file://{pg}", rank=rank, world_size=2)
        base = MmapGraphDataset(store)
        norm = Normalizer.from_statistics(
            store, RULES, fields=["x", "edge_attr", "y_next"], stats_from={"y_next": "x"}
        )
        aug = Augmenter(AugmentConfig.preset("phase1"), base.schema, seed=7)
        win = WindowDataset(
            base, window=4, horizon=1, stream_key="intersection", transforms=[norm, aug]
        )
        plan = plan_loader(
            win, budget_bytes=tree_memory().pss + (512 << 20), batch_size=8, device="cpu",
            num_workers=1,
        )  # fmt: skip
        result: dict[str, object] = {"plan": plan.describe()}
        for kind in ("chunk", "torch"):
            sampler = (
                None
                if kind == "chunk"
                else torch.utils.data.DistributedSampler(win, shuffle=True, seed=7)
            )
            loader = build_loader(win, plan, sampler=sampler, seed=7)
            if kind == "chunk":
                assert isinstance(loader.sampler, DistributedChunkSampler)
                assert loader.sampler.rank == rank and loader.sampler.num_replicas == 2
            counts = []
            for epoch in range(2):
                loader.set_epoch(epoch)
                n = 0
                for steps in loader:
                    assert len(steps) == 5
                    assert set(steps[0].meta["normalized"]) == {"x", "y_next", "edge_attr"}
                    assert steps[0].meta.get("augmented") is True
                    assert all(s.num_graphs == steps[0].num_graphs for s in steps)
                    x = steps[0].x
                    assert torch.isfinite(x).all() and float(x[:, 2].min()) >= -0.1  # speed minmax
                    loss = torch.tensor([float(x.mean())])
                    dist.all_reduce(loss)  # a DDP step would hang if ranks had unequal batches
                    n += steps[0].num_graphs
                counts.append(n)
            gathered: list[object] = [None, None]
            dist.all_gather_object(gathered, counts)
            result[kind] = gathered
        Path(out).write_text(json.dumps(result))
        dist.destroy_process_group()
    except BaseException:
        Path(out).write_text(json.dumps({"error": traceback.format_exc()}))
        raise


def test_phase1_window_flow_on_two_gloo_ranks(tmp_path: Path) -> None:
    store = write_traffic(tmp_path / "s", episodes=3, steps=40, shard_size=32)
    stats = compute_statistics(store, fields=["x", "edge_attr", "y_next"], method="sampled")
    assert set(stats) == {"x", "edge_attr", "y_next"}
    ctx = mp.get_context("fork")
    outs = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    procs = [
        ctx.Process(target=_rank, args=(str(store), str(tmp_path / "pg"), str(outs[r]), r))
        for r in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    results = [json.loads(o.read_text()) for o in outs]
    for r in results:
        assert "error" not in r, r.get("error")
    assert [p.exitcode for p in procs] == [0, 0]
    win = WindowDataset(MmapGraphDataset(store), window=4, horizon=1, stream_key="intersection")
    for kind in ("chunk", "torch"):
        per_rank = results[0][kind]
        assert per_rank == results[1][kind]
        assert per_rank[0][0] == per_rank[1][0] == -(-len(win) // 2)  # equal, padded halves
