"""init_distributed's reading of torchrun's variables, and the single-process behaviour."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import tj_dist

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def launch_env(monkeypatch: pytest.MonkeyPatch):
    """A clean slate of torchrun's variables; returns a setter for the ones a test wants."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)

    def set_vars(values: dict[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_vars


def test_no_launcher_variables_means_single_process(launch_env) -> None:
    info = tj_dist.init_distributed()
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
def test_bad_launcher_variables_name_the_variable(launch_env, environ: dict, match: str) -> None:
    launch_env(environ)
    with pytest.raises(ValueError, match=match):
        tj_dist.init_distributed("gloo")
    assert not dist.is_initialized()


def test_unknown_backend_is_refused(launch_env) -> None:
    with pytest.raises(ValueError, match="backend='mpi' is unknown; use one of auto, nccl, gloo"):
        tj_dist.init_distributed("mpi")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_nccl_without_cuda_is_refused(launch_env) -> None:
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA"):
        tj_dist.init_distributed("nccl")


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


def test_torchrun_style_group_of_one_and_noop_reinit(launch_env) -> None:
    """The real env:// path in this process (a gloo group of one), then the no-op on re-init."""
    port = str(tj_dist.free_port())
    launch_env(
        {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
    )
    info = tj_dist.init_distributed("gloo")
    try:
        assert dist.is_initialized() and info.owns_group and info.backend == "gloo"
        assert (info.rank, info.world_size, info.device) == (0, 1, torch.device("cpu"))
        again = tj_dist.init_distributed("auto")  # e.g. Ray Train made the group: leave it be
        assert not again.owns_group and again.backend == "gloo" and again.world_size == 1
        tj_dist.cleanup(again)
        assert dist.is_initialized()
        t = torch.ones(2)
        dist.all_reduce(t)
        assert torch.equal(t, torch.ones(2))
    finally:
        tj_dist.cleanup(info)
    assert not dist.is_initialized()
