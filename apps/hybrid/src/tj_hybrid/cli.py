"""``tj-hybrid`` / ``uv run apps/hybrid``: parse the command line and dispatch; nothing more."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from tj_hybrid.config import PROFILES, ConfigError, describe_profile, load_config, to_plain
from tj_hybrid.log_setup import setup_logging
from tj_hybrid.phases import PLANNED, REGISTRY, select_phases

__all__ = ["build_parser", "main"]


def _phase_list() -> str:
    built = ", ".join(f"{s.name} ({s.title})" for s in REGISTRY)
    planned = ", ".join(f"{k} ({v})" for k, v in PLANNED.items() if k not in
                        {s.name for s in REGISTRY})  # fmt: skip
    return built + (f"; not built yet: {planned}" if planned else "")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tj-hybrid",
        description=f"TJ Transport's three-phase trainer. Phases: {_phase_list()}.",
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=("train", "doctor", "eval", "watch"),
        default="train",
        help="train (default); doctor: check this machine; eval: an exported agent (--agent) or "
        "every policy a phase kept (--checkpoints) against the baselines on the "
        "scenario's held-out traffic; watch: an agent in sumo-gui",
    )
    p.add_argument("--agent", type=Path, metavar="PATH", help="eval / watch: an agent folder")
    p.add_argument("--checkpoints", type=Path, metavar="PATH",
                   help="eval: a run's phase2/ or phase3/ folder: every policy it kept (its "
                        "clone or phase 2's, each checkpoint) on validation and held-out "
                        "traffic")  # fmt: skip
    p.add_argument("--routes", type=Path, metavar="FILE",
                   help="watch: a route file (default: the first held-out one)")  # fmt: skip
    p.add_argument("--delay", type=float, default=100.0, metavar="MS",
                   help="watch: milliseconds per simulated step (default 100)")  # fmt: skip
    p.add_argument(
        "--phase",
        default="all",
        help="phases to run: one name (1), a range (2-3) or all (default)",
    )
    p.add_argument("--config", type=Path, help="defaults file (default: configs/hybrid.yaml)")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="overlay from configs/profiles/ (default: chosen for this hardware)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one value, e.g. --set phase1.steps=100 (repeatable)",
    )
    p.add_argument("--print-config", action="store_true", help="print the merged config and exit")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run named by run.name from its newest valid checkpoint",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(logging.DEBUG if args.verbose else logging.INFO)
    log = logging.getLogger("tj_hybrid")
    try:
        phases = select_phases(args.phase)
        loaded = load_config(args.config, args.profile, args.overrides)
    except ConfigError as exc:
        print(f"tj-hybrid: config error: {exc}", file=sys.stderr)
        return 2
    cfg = loaded.config
    if args.print_config:
        print(yaml.safe_dump(to_plain(cfg), sort_keys=False, default_flow_style=None), end="")
        return 0
    if args.command == "doctor":
        from tj_hybrid.data_paths import data_root
        from tj_hybrid.doctor import render, run_checks

        checks = run_checks({"run dir": cfg.run.root, "data dir": data_root(cfg)})
        print(render(checks))
        return 1 if any(c.status == "FAIL" for c in checks) else 0
    if args.command == "eval" and args.checkpoints is not None:
        if args.agent is not None:
            print("tj-hybrid: eval: give --agent or --checkpoints, not both", file=sys.stderr)
            return 2
        from tj_hybrid.commands.evaluate_checkpoints import run_checkpoints

        return run_checkpoints(cfg, args.checkpoints)
    if args.command == "eval":
        from tj_hybrid.commands.evaluate_agent import run_eval

        return run_eval(cfg, args.agent)
    if args.command == "watch":
        from tj_hybrid.commands.watch import run_watch

        return run_watch(cfg, args.agent, routes=args.routes, delay_ms=args.delay)
    log.info(
        "%s; config from %s",
        describe_profile(loaded.profile, loaded.profile_reason),
        ", ".join(map(str, loaded.files)),
    )
    from tj_hybrid.runner import run

    return run(loaded, phases, resume=args.resume)
