"""save/load round trip (identical outputs), safetensors only, and corrupt or partial checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tj_models import CheckpointError, TrafficAgent, TrafficAgentConfig


def _outputs(agent: TrafficAgent, steps) -> list[torch.Tensor]:
    agent.eval()
    with torch.no_grad():
        enc = agent.encode(steps[0])
        pol = agent.controller(enc)
        wm = agent.predict(steps, input_steps=3, horizon=2)
        return [enc.node, pol.logits, pol.value, pol.cost_value, agent.shield(enc)] + [
            t for p in wm.steps for t in (p.state, p.risk_logit, p.aggregates)
        ]


def test_round_trip_gives_identical_outputs(
    tmp_path: Path, steps, tiny_agent: TrafficAgent
) -> None:
    agent = tiny_agent
    agent.gnn.set_feature_statistics(
        torch.full((9,), 0.5), torch.full((9,), 2.0), torch.zeros(4), torch.ones(4)
    )
    saved = agent.save(tmp_path / "ckpt")
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]
    loaded = TrafficAgent.load(saved)
    assert loaded.config == agent.config
    for a, b in zip(_outputs(agent, steps), _outputs(loaded, steps), strict=True):
        assert torch.equal(a, b)
    # the weights are plain safetensors (no pickle), including the normalisation statistics
    state = load_file(str(saved / "model.safetensors"))
    assert torch.equal(state["world_model.encoder.node_scaler.std"], torch.full((9,), 2.0))
    assert (saved / "model.safetensors").read_bytes()[:1] != b"\x80"  # not a pickle stream
    meta = json.loads((saved / "config.json").read_text())
    assert meta["format"] == "tj-models/agent-v1" and meta["config"]["gnn"]["hidden_dim"] == 32


def test_from_config_dict(tiny_agent: TrafficAgent) -> None:
    agent = TrafficAgent.from_config(tiny_agent.config.to_dict())
    assert agent.parameter_counts() == tiny_agent.parameter_counts()


def _saved(tmp_path: Path, agent: TrafficAgent) -> Path:
    return agent.save(tmp_path / "ckpt")


def test_corrupt_weights_are_detected(tmp_path: Path, tiny_agent: TrafficAgent) -> None:
    ckpt = _saved(tmp_path, tiny_agent)
    weights = ckpt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: sha256 does not match"):
        TrafficAgent.load(ckpt)


def test_truncated_weights_with_matching_checksum_are_unreadable(
    tmp_path: Path, tiny_agent: TrafficAgent
) -> None:
    ckpt = _saved(tmp_path, tiny_agent)
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    meta = json.loads((ckpt / "config.json").read_text())
    import hashlib

    meta["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (ckpt / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="unreadable safetensors"):
        TrafficAgent.load(ckpt)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "config.json").unlink(), r"config\.json: missing"),
        (lambda d: (d / "model.safetensors").unlink(), "weights file missing"),
        (lambda d: (d / "config.json").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "config.json").write_text('{"format": "other"}'), "format 'other'"),
    ],
)
def test_missing_or_broken_files(tmp_path: Path, tiny_agent: TrafficAgent, damage, message) -> None:
    ckpt = _saved(tmp_path, tiny_agent)
    damage(ckpt)
    with pytest.raises(CheckpointError, match=message):
        TrafficAgent.load(ckpt)


def test_config_that_does_not_fit_the_weights(tmp_path: Path, tiny_agent: TrafficAgent) -> None:
    ckpt = _saved(tmp_path, tiny_agent)
    meta = json.loads((ckpt / "config.json").read_text())
    meta["config"]["controller"]["hidden_dim"] = 64
    (ckpt / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="weights do not fit the config"):
        TrafficAgent.load(ckpt)
    meta["config"]["controller"]["hiden_dim"] = 64
    (ckpt / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"controller\.hiden_dim"):
        TrafficAgent.load(ckpt)


def test_crash_between_weights_and_config_is_detected(
    tmp_path: Path, tiny_agent: TrafficAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inject a crash at the config rename of a second save: the new weights are in place, the old
    config is not; load must refuse (checksum) rather than pair them, and no temp file remains."""
    ckpt = _saved(tmp_path, tiny_agent)
    other = TrafficAgent(TrafficAgentConfig.preset("tiny"))
    real_replace = os.replace

    def crash_on_config(src, dst):
        if str(dst).endswith("config.json"):
            raise KeyboardInterrupt("simulated crash")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_config)
    with pytest.raises(KeyboardInterrupt):
        other.save(ckpt)
    monkeypatch.undo()
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]
    with pytest.raises(CheckpointError, match="sha256 does not match"):
        TrafficAgent.load(ckpt)
    other.save(ckpt)  # a complete save repairs it
    TrafficAgent.load(ckpt)


def test_leftovers_of_a_killed_writer_are_removed_by_the_next_save(
    tmp_path: Path, tiny_agent: TrafficAgent
) -> None:
    """A writer killed mid-save leaves its private folder (named for the weights and the dead
    writer's pid), with safetensors' own temp file (``.tmpXXXXXX``) inside; nothing is left next
    to the checkpoint files after the next save."""
    tiny_agent.save(tmp_path)
    stale = tmp_path / ".tmp-model.safetensors-9999999-k1ll3d"  # pid above any pid_max: dead
    stale.mkdir()
    (stale / ".tmpAbC123").write_bytes(b"half a safetensors file")
    tiny_agent.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    TrafficAgent.load(tmp_path)


_WRITER = """
import importlib.util, json, sys
from pathlib import Path
from safetensors.torch import load_file
# load tj_models/checkpoint.py alone: the writer needs torch + safetensors, not torch_geometric
spec = importlib.util.find_spec("tj_models")
path = Path(spec.submodule_search_locations[0]) / "checkpoint.py"
module_spec = importlib.util.spec_from_file_location("tj_ckpt", path)
ckpt = importlib.util.module_from_spec(module_spec)
module_spec.loader.exec_module(ckpt)
target, config = sys.argv[1], json.loads(sys.argv[2])
states = [load_file(p) for p in sys.argv[3:]]
i = 0
while True:
    ckpt.write_checkpoint(target, config, states[i % 2])
    i += 1
    print(i, flush=True)
"""


def test_writer_killed_mid_save_never_yields_mixed_weights(tmp_path: Path, steps) -> None:
    """SIGKILL a process that keeps overwriting one checkpoint with two different agents: what is
    left either loads as exactly one of them or is reported as corrupt, and the next save cleans up."""
    import signal
    import subprocess
    import sys
    import time

    from safetensors.torch import save_file

    agents, sources = [], []
    for seed in (1, 2):
        torch.manual_seed(seed)
        agents.append(TrafficAgent.preset("tiny"))
        sources.append(tmp_path / f"state{seed}.safetensors")
        save_file({k: v.contiguous() for k, v in agents[-1].state_dict().items()}, str(sources[-1]))
    ckpt = tmp_path / "ckpt"
    config = json.dumps(agents[0].config.to_dict())
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(ckpt), config, *map(str, sources)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3):  # let a few complete saves happen, then kill during the next ones
            assert proc.stdout is not None and proc.stdout.readline(), "writer died"
        time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    references = [_outputs(a, steps) for a in agents]
    try:
        loaded = _outputs(TrafficAgent.load(ckpt), steps)
    except CheckpointError as exc:  # killed between the weights and the config rename
        assert "sha256" in str(exc)
    else:
        assert any(
            all(torch.equal(a, b) for a, b in zip(loaded, ref, strict=True)) for ref in references
        )
    agents[0].save(ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]
