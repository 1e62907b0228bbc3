"""Run the requested phases into one run directory (new, or resumed)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

import yaml

from tj_data import StoreError
from tj_dist import RankFailedError
from tj_hybrid.config import ConfigError, LoadedConfig, to_plain
from tj_hybrid.run_dir import RunDir

__all__ = ["latest_run", "run"]

log = logging.getLogger(__name__)


def latest_run(root: os.PathLike[str] | str) -> RunDir | None:
    """The most recently modified run under ``root`` that has phase checkpoints."""
    from pathlib import Path

    runs = [p for p in Path(root).glob("*") if any(p.glob("phase*/checkpoints/*.done"))]
    return RunDir(path=max(runs, key=lambda p: p.stat().st_mtime)) if runs else None


def _write_config(run_dir: RunDir, loaded: LoadedConfig) -> None:
    run_dir.path.mkdir(parents=True, exist_ok=True)
    tmp = run_dir.config.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(to_plain(loaded.config), sort_keys=False))
    os.replace(tmp, run_dir.config)


def run(loaded: LoadedConfig, phases: Sequence[int], *, resume: bool = False) -> int:
    """Run ``phases`` in order; returns the process exit status."""
    cfg = loaded.config
    if resume and cfg.run.name is None:
        found = latest_run(cfg.run.root)
        if found is None:
            print(
                f"tj-hybrid: --resume: no run with checkpoints under {cfg.run.root}",
                file=sys.stderr,
            )
            return 2
        run_dir = found
    else:
        run_dir = RunDir.resolve(cfg.run.root, cfg.run.name)
    log.info("run directory %s%s", run_dir.path, " (resuming)" if resume else "")
    _write_config(run_dir, loaded)
    try:
        for phase in phases:
            if phase == 1:
                from tj_hybrid.phase1 import run_phase1

                result = run_phase1(cfg, run_dir, resume=resume, profile=loaded.profile)
                ev = result.eval
                print(
                    f"phase 1 done: held-out position error {ev['model_mae']:.3f} m vs constant "
                    f"velocity {ev['cv_mae']:.3f} m ({ev['improvement']:.1%} better); "
                    f"report {result.report}"
                )
    except ConfigError as exc:
        print(f"tj-hybrid: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # corrupt, incomplete or malformed data: name it, no traceback
        print(f"tj-hybrid: data error: {exc}", file=sys.stderr)
        return 2
    except RankFailedError as exc:
        print(f"tj-hybrid: training failed: {exc}", file=sys.stderr)
        return 1
    return 0
