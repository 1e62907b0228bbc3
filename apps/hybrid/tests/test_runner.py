"""The runner with real (tiny) phases: order, hand-off paths, results, resume skipping finished
phases, refusing to overwrite, and inputs checked before anything starts."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tj_hybrid.config import load_config
from tj_hybrid.phases import PhaseSpec
from tj_hybrid.runner import run

TINY = '''
import json
from pathlib import Path
from tj_hybrid.config import ConfigError
from tj_hybrid.phase_api import PhaseResult

class Tiny:
    """A phase that records its calls, exports an "agent" folder, and fails once on request."""

    def __init__(self, name):
        self.name = name

    def preflight(self, config):
        pass

    def run(self, ctx):
        log = ctx.run_dir.path / "calls.jsonl"
        with log.open("a") as f:
            f.write(json.dumps({"phase": self.name, "resume": ctx.resume,
                                "previous": str(ctx.previous_agent)}) + "\\n")
        fail = ctx.run_dir.path / f"fail-{self.name}"
        if fail.exists():
            fail.unlink()
            raise ConfigError(f"phase {self.name} asked to fail")
        ctx.phase_dir.agent.mkdir(parents=True, exist_ok=True)
        return PhaseResult(name=self.name, agent=ctx.phase_dir.agent,
                           report=ctx.phase_dir.root / "report.md", headline=f"{self.name} ok")

PHASE = Tiny(NAME)
'''


@pytest.fixture
def specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PhaseSpec, PhaseSpec]:
    for name in ("a", "b"):  # one module per phase, as in the real registry
        (tmp_path / f"tiny_{name}.py").write_text(f"NAME = {name!r}\n" + textwrap.dedent(TINY))
    monkeypatch.syspath_prepend(str(tmp_path))
    a = PhaseSpec(name="a", title="A", section="phase1", folder="pa", starts_from=None, trains=1,
                  module="tiny_a")  # fmt: skip
    b = PhaseSpec(name="b", title="B", section="phase1", folder="pb", starts_from="a", trains=2,
                  module="tiny_b")  # fmt: skip
    return a, b


def _calls(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]


def test_resume_skips_finished_phases_and_hands_off_the_agent(
    specs: tuple[PhaseSpec, PhaseSpec], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_config(profile="smoke", overrides=[f"run.root={tmp_path / 'runs'}",
                                                     "run.name=r"])  # fmt: skip
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "fail-b").touch()
    assert run(loaded, specs, registry=specs) == 2  # b fails after a finished
    assert "phase b asked to fail" in capsys.readouterr().err
    assert (run_dir / "pa" / "result.json").is_file() and not (run_dir / "pb").exists()
    # without --resume, a run directory holding a phase's work is not overwritten
    assert run(loaded, specs, registry=specs) == 2
    assert "already has checkpoints or a result of phase a: pass --resume" in capsys.readouterr().err
    assert run(loaded, specs, resume=True, registry=specs) == 0
    out = capsys.readouterr().out
    assert "phase b done: b ok" in out and "phase a done" not in out
    calls = _calls(run_dir)
    assert [c["phase"] for c in calls] == ["a", "b", "b"]  # a ran once
    assert calls[-1]["previous"] == str(run_dir / "pa" / "agent")
    assert json.loads((run_dir / "pb" / "result.json").read_text())["headline"] == "b ok"
    assert (run_dir / "config.yaml").is_file()


def test_a_phase_needs_the_agent_of_the_phase_it_starts_from(
    specs: tuple[PhaseSpec, PhaseSpec], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_config(profile="smoke", overrides=[f"run.root={tmp_path / 'runs'}",
                                                     "run.name=r"])  # fmt: skip
    assert run(loaded, specs[1:], registry=specs) == 2
    err = capsys.readouterr().err
    assert "phase b starts from phase a's agent" in err and "run phase a first" in err
    assert not (tmp_path / "runs" / "r").exists()  # nothing was created


def test_resume_without_a_run_is_a_clear_error(
    specs: tuple[PhaseSpec, PhaseSpec], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_config(profile="smoke", overrides=[f"run.root={tmp_path / 'none'}"])
    assert run(loaded, specs, resume=True, registry=specs) == 2
    assert "--resume: no run with checkpoints under" in capsys.readouterr().err
