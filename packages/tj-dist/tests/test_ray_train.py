"""The scale-out path: the README's example training function, unchanged, under Ray Train's
TorchTrainer with 2 CPU workers on a local Ray instance started (and shut down) by the test."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # a guard only: ray[train] is in the dev group, so this runs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_anywhere.py"


@pytest.fixture
def example():
    spec = importlib.util.spec_from_file_location("tj_dist_example_train_anywhere", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # Ray workers cannot import a file outside the package: ship the module's code by value
    ray.cloudpickle.register_pickle_by_value(module)
    yield module
    ray.cloudpickle.unregister_pickle_by_value(module)
    del sys.modules[spec.name]


@pytest.fixture
def local_ray(monkeypatch: pytest.MonkeyPatch):
    # Under `uv run pytest`, Ray's uv hook would start every worker through `uv run` in a packaged
    # copy of the working directory, which builds a fresh environment per run (minutes, no
    # bytecode). The workers here are local and share this interpreter. Ray reads the
    # RAY_ENABLE_UV_RUN_RUNTIME_ENV variable once at import, so the flag is switched off directly.
    monkeypatch.setattr(ray._private.ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", False)
    # Ray's session files (logs, sockets) go to a short private dir removed afterwards: pytest's
    # tmp_path is too long for the unix-socket paths Ray creates inside it
    temp_dir = tempfile.mkdtemp(prefix="tjray")
    ray.init(
        num_cpus=2,
        object_store_memory=80 * 2**20,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=temp_dir,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
# a hang guard, not a speed check: Ray Train starts a controller and two workers, which took over
# 300 s on 2 cores shared with three training runs (a CI beside other jobs must still pass)
@pytest.mark.timeout(900)
def test_example_runs_under_ray_train_with_two_cpu_workers(
    example, local_ray, tmp_path: Path
) -> None:
    config = {"checkpoint_dir": str(tmp_path / "ckpt"), "epochs": 1}
    summary = example.run_ray(config, num_workers=2, storage_path=str(tmp_path / "ray"))
    assert summary["world_size"] == 2 and summary["rank"] == 0
    assert summary["backend"] == "gloo"  # Ray Train made the group; init_distributed joined it
    assert summary["ranks_agree"]  # DDP kept both workers' parameters identical
    assert summary["optimizer_steps"] == 6
    assert summary["last_loss"] < summary["first_loss"]
    assert summary["checkpoint"] == str(tmp_path / "ckpt" / "ckpt-000000006.pt")

    import tj_dist

    loaded = tj_dist.load_latest(tmp_path / "ckpt")
    assert loaded is not None and loaded.step == 6 and len(loaded.state["rng"]) == 2
