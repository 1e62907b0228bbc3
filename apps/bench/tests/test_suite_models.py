"""The models suite: its quick run records every component's figures, and its pure helpers."""

from __future__ import annotations

import math

import pytest
import torch

from tj_bench.measure import ratio
from tj_bench.suite import parse_list
from tj_bench.suites._models_child import COMPONENTS
from tj_bench.suites.models import figure, targets


def test_quick_run_records_every_component(quick) -> None:
    r = quick.suite("models")
    assert r.params["presets"] == "tiny"
    for comp in COMPONENTS:
        unit = "windows/s" if comp.startswith("world_model") else "graphs/s"
        speed = r.figure(figure("tiny", comp, "cpu", "fp32", "samples_per_s"))
        assert speed.unit == unit and len(speed.values) == 1
        assert math.isfinite(speed.median) and speed.median > 0
        for what in ("peak_uss_delta", "peak_pss_delta"):
            mem = r.figure(figure("tiny", comp, "cpu", "fp32", what))
            assert mem.unit == "MiB" and math.isfinite(mem.median) and mem.median >= 0
        params = r.figure(f"tiny/{comp}/params").median
        assert params > 0 and params == int(params)
    # activations of a fwd+bwd step over a batch of windows cost memory
    assert r.figure("tiny/world_model/cpu-fp32/peak_uss_delta").median > 0
    # checkpointing changes how, not what, is computed: same parameters
    assert (
        r.figure("tiny/world_model/params").median
        == r.figure("tiny/world_model+ckpt/params").median
    )
    for what in ("throughput_ratio", "memory_ratio"):
        x = r.figure(f"tiny/checkpointing/cpu-fp32/{what}").median
        assert math.isfinite(x) and x > 0
    assert 0 < r.params["vehicles_per_graph"] < 100


def test_quick_run_says_what_the_gpu_part_did(quick) -> None:
    r = quick.suite("models")
    if torch.cuda.is_available():
        assert "cuda" not in r.unavailable
        for precision in ("fp32", "fp16"):
            f = r.figure(figure("tiny", "gnn", "cuda", precision, "samples_per_s"))
            assert f.median > 0
            assert (
                r.figure(figure("tiny", "gnn", "cuda", precision, "peak_alloc_delta")).median >= 0
            )
    else:
        assert "no CUDA device" in r.unavailable["cuda"]
        assert not any("/cuda-" in f.name for f in r.figures)


def test_parse_choices() -> None:  # the presets and components options (parse_list)
    assert parse_list(" tiny, normal ", ("tiny", "normal", "large"), "presets") == (
        "tiny",
        "normal",
    )
    with pytest.raises(ValueError, match="presets"):
        parse_list("tiny,huge", ("tiny", "normal"), "presets")
    with pytest.raises(ValueError):
        parse_list(" , ", ("tiny",), "presets")


def test_targets() -> None:
    assert targets(False, False) == [("cpu", "fp32")]
    assert targets(False, True) == [("cpu", "fp32")]
    assert targets(True, False) == [("cpu", "fp32"), ("cuda", "fp32"), ("cuda", "fp16")]
    assert targets(True, True)[-1] == ("cuda", "bf16")


def test_figure_and_ratio() -> None:
    assert figure("normal", "world_model", "cuda", "bf16", "samples_per_s") == (
        "normal/world_model/cuda-bf16/samples_per_s"
    )
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0)) and math.isnan(ratio(1.0, -0.5))
