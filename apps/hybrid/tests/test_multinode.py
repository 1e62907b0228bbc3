"""The trainer's torchrun rules without processes: this rank from torchrun's variables, the
refusals, the world (ranks from torchrun, plans per machine)."""

from __future__ import annotations

import pytest

from tj_hybrid import load_config
from tj_hybrid.config import ConfigError
from tj_hybrid.config.sections import DistSection
from tj_hybrid.multinode import Torchrun, check_torchrun_run, peer_lost, torchrun_launch
from tj_hybrid.phases import select_phases
from tj_hybrid.training import resolve_world

# what torchrun --nnodes 2 --nproc-per-node 2 sets for the second rank of node 1
NODE1 = {"TORCHELASTIC_RUN_ID": "job", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
         "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "MASTER_ADDR": "a", "MASTER_PORT": "1"}  # fmt: skip


def test_torchrun_is_detected_by_its_run_id_only() -> None:
    assert torchrun_launch({}) is None
    # the local launcher sets RANK / WORLD_SIZE too, but no run id: not torchrun
    assert torchrun_launch({k: v for k, v in NODE1.items() if k != "TORCHELASTIC_RUN_ID"}) is None
    launch = torchrun_launch(NODE1)
    assert launch == Torchrun(run_id="job", rank=3, world_size=4, local_rank=1,
                              local_world_size=2, node_rank=1)  # fmt: skip
    assert not launch.is_main
    with pytest.raises(ConfigError, match=r"incomplete.*GROUP_RANK"):
        torchrun_launch({k: v for k, v in NODE1.items() if k != "GROUP_RANK"})
    with pytest.raises(ValueError, match="RANK=4 must be in"):
        Torchrun(run_id="j", rank=4, world_size=4, local_rank=0, local_world_size=1,
                 node_rank=0)  # fmt: skip


def test_a_torchrun_run_needs_a_name_and_ddp_phases_only() -> None:
    cfg = load_config(profile="smoke").config
    with pytest.raises(ConfigError, match=r"set run\.name"):
        check_torchrun_run(cfg, select_phases("1"))
    named = load_config(profile="smoke", overrides=["run.name=x"]).config
    check_torchrun_run(named, select_phases("1"))
    check_torchrun_run(named, select_phases("3"))
    with pytest.raises(ConfigError, match=r"phase\(s\) 2 do not run under torchrun"):
        check_torchrun_run(named, select_phases("all"))


def test_the_world_under_torchrun_is_torchruns() -> None:
    launch = torchrun_launch(NODE1)
    dist = DistSection(nprocs=2, backend="auto")  # nprocs is not read under torchrun
    world = resolve_world(dist, effective_batch=64, micro_batch=8, gpus=0, section="phase1",
                          launch=launch)  # fmt: skip
    assert (world.nprocs, world.local_nprocs, world.backend) == (4, 2, "gloo")
    assert world.accumulation_steps == 2 and world.effective_batch == 64
    local = resolve_world(dist, effective_batch=64, micro_batch=8, gpus=0, section="phase1")
    assert local.local_nprocs == local.nprocs == 2
    with pytest.raises(ConfigError, match="started 2 rank"):
        resolve_world(DistSection(backend="nccl"), effective_batch=64, micro_batch=8, gpus=1,
                      section="phase1", launch=launch)  # fmt: skip


def test_a_lost_peer_is_told_from_other_errors() -> None:
    import torch.distributed as dist

    gloo = ("[gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:10983: Connection "
            "reset by peer")  # fmt: skip
    assert peer_lost(RuntimeError(gloo))
    assert peer_lost(dist.DistNetworkError("recv failed"))
    assert not peer_lost(RuntimeError("shape mismatch"))
    assert not peer_lost(ValueError(gloo))
