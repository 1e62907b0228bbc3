"""Where the trainer's data lives: one folder per scenario, named by its content.

```
<run.data_root>/<scenario name>-<digest>/   the scenario's files, hashed (scenario_key)
  phase1-<fingerprint>/{train,holdout}/      phase 1's stores, one per recording setting
  demand/                                    phase 2's demand pool and held-out sets (tj-rl)
  nets/                                      nets converted for the baselines (sumo-actuated)
<run.data_root>/eval-rows/                   evaluated episodes' rows, every scenario's (keyed
                                             by content: ``evaluation.row_cache``)
```
Switching scenarios, or editing one, or changing a recording setting, finds (or makes) the data
that belongs to it; nothing is refused or overwritten. An explicit ``phase1.data.path`` keeps
its meaning: phase 1's stores there (refused when made with other settings), the demand pool
and the nets beside it, in its parent folder.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.traffic import own_programs, scenario_span

__all__ = ["data_root", "phase1_data_dir", "scenario_data_dir", "scenario_key", "scenario_name"]


def scenario_name(path: Path) -> str:
    """The .sumocfg's file name without ``.sumocfg``/``.sumo.cfg``/``.cfg``, in the characters a
    folder name takes here (``[A-Za-z0-9._-]``); read from the name alone, nothing parsed."""
    from tj_rl.env import sumocfg_stem

    name = sumocfg_stem(path)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "scenario"


def scenario_key(cfg: HybridConfig) -> str:
    """``<name>-<12 hex>``: the scenario's name and the sha256 of its .sumocfg, net, route and
    additional files (their bytes, in that order): an edited file is another scenario."""
    from tj_rl.env import ScenarioError

    try:
        span = scenario_span(cfg)
        own = own_programs(cfg) or span  # the scenario's own files
    except ScenarioError as exc:
        raise ConfigError(f"scenario.path: {exc}") from None
    digest = hashlib.sha256()
    for path in (own.sumocfg, own.net_file, *own.route_files, *own.additional_files):
        if path is not None:
            with open(path, "rb") as f:
                digest.update(hashlib.file_digest(f, "sha256").digest())
    if own is not span:  # rebuilt plans: the conversion's name (source sha, type, options, SUMO
        digest.update(span.net_file.name.encode())  # version), not its bytes, which hold a date
    return f"{scenario_name(cfg.scenario.path)}-{digest.hexdigest()[:12]}"


def data_root(cfg: HybridConfig) -> Path:
    """The folder every scenario's data goes under (``run.data_root``; with an explicit
    ``phase1.data.path``, its parent): what the doctor checks."""
    explicit = cfg.phase1.data.path
    return explicit.parent if explicit is not None else cfg.run.data_root


def scenario_data_dir(cfg: HybridConfig) -> Path:
    """The configured scenario's data folder (demand pool, nets, phase 1's stores by default)."""
    explicit = cfg.phase1.data.path
    return explicit.parent if explicit is not None else cfg.run.data_root / scenario_key(cfg)


def phase1_data_dir(cfg: HybridConfig, fingerprint: str) -> Path:
    """Phase 1's dataset folder: ``phase1.data.path``, or one per ``fingerprint`` (what the
    dataset depends on) in the scenario's data folder."""
    explicit = cfg.phase1.data.path
    return explicit if explicit is not None else scenario_data_dir(cfg) / f"phase1-{fingerprint}"
