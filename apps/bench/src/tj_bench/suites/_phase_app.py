"""The trainer as the phase suites run it: ``python apps/hybrid ARGS`` in a subprocess with its
output in a log file, and the arguments a run folder was made with (``bench-args.json`` in it), so
that a later phase suite continues that run with the same scenario, dataset and settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from tj_bench.suite import SuiteContext, Unavailable

__all__ = ["ARGS_FILE", "AppArgs", "hybrid_app", "profile_param", "record_setup", "run_app",
           "split_sets"]  # fmt: skip

ARGS_FILE = "bench-args.json"


@dataclass(frozen=True, kw_only=True)
class AppArgs:
    """How a run was made: scenario key (default / grid / a .sumocfg), profile (``None``: the
    trainer picks one for the hardware), ``--set`` values and the training seed."""

    scenario: str = "default"
    profile: str | None = None
    sets: tuple[str, ...] = ()
    seed: int | None = None

    def plus(self, *sets: str, seed: int | None = None) -> AppArgs:
        """These arguments with more ``--set`` values (later ones win) and maybe a seed."""
        return replace(self, sets=(*self.sets, *sets), seed=self.seed if seed is None else seed)

    def argv(self) -> list[str]:
        out = ["--profile", self.profile] if self.profile else []
        out += [a for s in self.sets for a in ("--set", s)]
        if self.seed is not None:
            out += ["--set", f"run.seed={self.seed}"]
        return out

    def save(self, run: Path) -> None:
        (Path(run) / ARGS_FILE).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, run: Path) -> AppArgs | None:
        """The arguments saved in ``run``; ``None`` for a run the phase suites did not make."""
        path = Path(run) / ARGS_FILE
        return TypeAdapter(cls).validate_json(path.read_bytes()) if path.is_file() else None


def split_sets(text: str) -> tuple[str, ...]:
    """``"a.b=1; c=2"`` -> ``("a.b=1", "c=2")`` (the suites' ``sets`` option)."""
    return tuple(s.strip() for s in text.split(";") if s.strip())


def hybrid_app() -> Path:
    """The ``apps/hybrid`` folder of this checkout (what ``uv run apps/hybrid`` runs)."""
    import tj_hybrid

    app = Path(tj_hybrid.__file__).resolve().parents[2]
    if not (app / "__main__.py").is_file():
        raise Unavailable(
            f"apps/hybrid not found beside tj_hybrid ({app}): not a workspace checkout"
        )
    return app


def run_app(args: Sequence[str], log: Path, *, command: Sequence[str] | None = None,
            cwd: Path | None = None, env: dict[str, str] | None = None) -> float:  # fmt: skip
    """Run the trainer with ``args`` (output into ``log``); its wall time in s. A failed run
    raises with the end of its log. ``command`` replaces ``python apps/hybrid`` (a clone's
    ``uv run apps/hybrid``)."""
    app = hybrid_app()
    cmd = [*(command or [sys.executable, str(app)]), *args]
    env = {**(env if env is not None else os.environ), "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd or app.parents[1],
                            env=env, check=False).returncode  # fmt: skip
    wall = time.perf_counter() - t0
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"apps/hybrid {' '.join(args)} failed ({rc}); log {log}:\n{tail}")
    return wall


def profile_param(profile: str | None) -> str:
    """The profile a run uses: the given one, or the one the trainer picks here (and why)."""
    if profile:
        return profile
    from tj_hybrid import auto_profile

    name, why = auto_profile()
    return f"{name} (chosen by the trainer: {why})"


def record_setup(ctx: SuiteContext, scenario: str, profile: str | None, sets: Sequence[str],
                 root: Path | None = None, **more: Any) -> None:  # fmt: skip
    """A phase suite's settings, in this order: the scenario, the profile (``profile_param``),
    where the models run (the CUDA devices, or ``cpu``), ``more``, the extra ``--set`` values and
    the kept root."""
    from tj_dist import detect_environment

    gpus = detect_environment().gpus
    device = f"{len(gpus)} x {gpus[0].name}" if gpus else "cpu"
    for key, value in {"scenario": scenario, "profile": profile_param(profile), "device": device,
                       **more, "sets": "; ".join(sets), "root": root and str(root)}.items():  # fmt: skip
        if value not in ("", None):
            ctx.param(key, value)
