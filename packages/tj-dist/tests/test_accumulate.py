"""Gradient accumulation equals one big batch: single process, and 2-rank DDP (gloo) with no_sync.

The DDP test also trains the classic off-by-one variant (syncing the first micro-batch of a group
instead of the stepping one) and requires it to FAIL the same comparison, so the test provably
catches that bug.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _tjdist_workers import IN_DIM, accumulation_worker, make_data, make_model

import tj_dist

TOL = 1e-6


def reference_params(data: torch.Tensor, steps: int, clip: float | None) -> list[torch.Tensor]:
    """One process, one optimizer step per group on the concatenation of all ranks' micro-batches."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    count = data.shape[1]
    for start in range(0, count, steps):
        batch = data[:, start : start + steps].reshape(-1, data.shape[-1])
        loss = F.mse_loss(model(batch[:, :IN_DIM]), batch[:, IN_DIM:])
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def accumulate_single(data: torch.Tensor, steps: int, clip: float | None, **kw) -> tuple:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    acc = tj_dist.GradAccumulator(model, optimizer, steps=steps, clip_grad_norm=clip, **kw)
    seen = []
    for mb in acc.micro_batches(list(data[0])):
        with mb:
            mb.backward(F.mse_loss(model(mb.data[:, :IN_DIM]), mb.data[:, IN_DIM:]))
        seen.append((mb.index, mb.position, mb.sync, mb.is_last, mb.stepped))
    return [p.detach() for p in model.parameters()], seen, acc


@pytest.mark.parametrize("count", [9, 7])  # 7 = groups of 3, 3 and an uneven final 1
def test_single_process_accumulation_matches_concatenated_batch(count: int) -> None:
    data = make_data(1, count, batch=5)
    params, seen, acc = accumulate_single(data, steps=3, clip=0.5)
    assert max_diff(params, reference_params(data, steps=3, clip=0.5)) < TOL
    assert acc.optimizer_steps == -(-count // 3)
    stepping = [s[0] for s in seen if s[4]]
    assert stepping == [i for i in range(count) if (i + 1) % 3 == 0 or i == count - 1]


def test_sync_each_micro_batch_gives_the_same_result() -> None:
    data = make_data(1, 7, batch=5)
    params, seen, _ = accumulate_single(data, steps=3, clip=None, sync_each_micro_batch=True)
    assert all(s[2] for s in seen)
    assert max_diff(params, reference_params(data, steps=3, clip=None)) < TOL


def test_ddp_accumulation_matches_one_process_and_catches_off_by_one() -> None:
    steps, count = 4, 10  # groups of 4, 4 and an uneven final 2 per rank
    data = make_data(2, count, batch=3)
    clip = 0.3  # active on some steps: clipping must see the synced, rescaled gradients
    results = tj_dist.launch_local(accumulation_worker, 2, data, steps, clip, backend="gloo")
    expected = reference_params(data, steps, clip)
    correct = [r["correct"] for r in results]
    for rank in (0, 1):
        assert correct[rank]["optimizer_steps"] == 3
        assert correct[rank]["syncs"] == [False, False, False, True] * 2 + [False, True]
        assert max_diff(correct[rank]["params"], expected) < TOL, f"rank {rank} diverged"
    # the off-by-one accumulator runs the same steps but all-reduces the wrong micro-batch
    wrong = [r["off_by_one"] for r in results]
    assert wrong[0]["syncs"] == [True, False, False, False] * 2 + [True, False]
    assert max_diff(wrong[0]["params"], expected) > 1e-3
    assert max_diff(wrong[0]["params"], wrong[1]["params"]) > 1e-3  # ranks drifted apart


@pytest.mark.parametrize("steps", [0, -1, 1.5, "4"])
def test_bad_accumulation_steps_are_refused(steps) -> None:
    model = make_model()
    with pytest.raises(ValueError, match=r"accumulation steps=.* must be an integer >= 1"):
        tj_dist.GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=steps)


def test_bad_clip_is_refused() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="clip_grad_norm=0"):
        tj_dist.GradAccumulator(
            model, torch.optim.SGD(model.parameters(), lr=0.1), steps=2, clip_grad_norm=0
        )


def test_forgetting_or_repeating_backward_is_an_error() -> None:
    model = make_model()
    acc = tj_dist.GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    data = list(make_data(1, 2, batch=2)[0])
    with pytest.raises(RuntimeError, match="backward\\(loss\\) was not called"):
        for mb in acc.micro_batches(data):
            with mb:
                model(mb.data[:, :IN_DIM])
    with pytest.raises(RuntimeError, match="called twice"):
        for mb in acc.micro_batches(data):
            with mb:
                loss = model(mb.data[:, :IN_DIM]).sum()
                mb.backward(loss)
                mb.backward(loss)


def test_empty_iterable_yields_nothing() -> None:
    model = make_model()
    acc = tj_dist.GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    assert list(acc.micro_batches([])) == []
