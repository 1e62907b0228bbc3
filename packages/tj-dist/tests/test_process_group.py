"""init_distributed's reading of torchrun's variables, and the single-process behaviour."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import tj_dist


def test_no_launcher_variables_means_single_process() -> None:
    info = tj_dist.init_distributed(environ={})
    assert (info.rank, info.world_size, info.backend, info.owns_group) == (0, 1, None, False)
    assert info.is_main and not info.distributed
    assert info.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert not dist.is_initialized()
    assert tj_dist.is_main_process() and tj_dist.get_rank() == 0 and tj_dist.get_world_size() == 1
    tj_dist.cleanup(info)  # nothing to destroy


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is missing"),
        ({"RANK": "0"}, "RANK is set but WORLD_SIZE is missing"),
        ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two' is not an integer"),
        (
            {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            r"RANK=2 must be in \[0, WORLD_SIZE=2\)",
        ),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "1"}, "MASTER_ADDR is missing"),
        (
            {
                "WORLD_SIZE": "2",
                "RANK": "1",
                "MASTER_ADDR": "h",
                "MASTER_PORT": "1",
                "LOCAL_RANK": "x",
            },
            "LOCAL_RANK='x'",
        ),
    ],
)
def test_bad_launcher_variables_name_the_variable(environ: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tj_dist.init_distributed("gloo", environ=environ)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend='mpi' is unknown; use one of auto, nccl, gloo"):
        tj_dist.init_distributed("mpi", environ={})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_nccl_without_cuda_is_refused() -> None:
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA"):
        tj_dist.init_distributed("nccl", environ={})


def test_single_process_helpers_are_pass_through() -> None:
    model = nn.Linear(2, 2)
    assert tj_dist.wrap_ddp(model) is model  # no group: nothing to wrap
    with tj_dist.rank_zero_only() as main:
        assert main
    assert tj_dist.unwrap_model(model) is model


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"static_graph": True, "accumulation_steps": 2}, "static_graph=True cannot be combined"),
        ({"comm_hook": "int8"}, "comm_hook='int8' is unknown"),
        ({"accumulation_steps": 0}, "accumulation_steps=0"),
        ({"bucket_cap_mb": 0}, "bucket_cap_mb=0"),
    ],
)
def test_wrap_ddp_refuses_bad_options_before_any_group(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tj_dist.wrap_ddp(nn.Linear(2, 2), **kwargs)


def test_accumulator_refuses_a_static_graph_model() -> None:
    class FakeStatic(
        nn.Linear
    ):  # the attribute DDP sets; a real DDP needs a group (see launch tests)
        static_graph = True

    model = FakeStatic(2, 2)
    with pytest.raises(ValueError, match="static_graph=True cannot be combined"):
        tj_dist.GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=4)
    tj_dist.GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=1)
