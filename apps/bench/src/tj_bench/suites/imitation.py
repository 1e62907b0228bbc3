"""How close a clone gets to its teacher (issue 28): phase 2's teacher (with the configured
look-ahead) records its demonstrations once, one clone per seed is fitted to them, and the
teacher, the clones, the teacher with a share of its choices replaced by its second-best green
(``flips``) and the configured baselines run the held-out traffic. Why: the clone is what phase 2
exports in practice, and it is bounded by how much of the teacher's edge survives imitation; this
measures that gap in minutes, without PPO.

Phase 1 runs first (``apps/hybrid --phase 1`` with the suite's profile, in its own folder); the
measurement runs in a spawned child (``_imitation_child``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._phase_app import AppArgs, record_setup, split_sets
from tj_bench.suites._phase_chain import run_phase1
from tj_bench.suites._phase_scenario import QUICK_PHASE2, base_args
from tj_hybrid import phase_dir
from tj_monitor import run_in_child

__all__ = ["SUITE", "parse_flips"]

# --quick: phase 2's tiny settings with a short look-ahead, so the flipped teacher runs too
QUICK_SETS = (*QUICK_PHASE2, "phase2.imitation.lookahead_s=10",
              "phase2.imitation.lookahead_sees=observed", "phase2.imitation.dagger_rounds=1")  # fmt: skip


def parse_flips(raw: str) -> list[float]:
    """``"0.04,0.08"`` -> ``[0.04, 0.08]``: shares in (0, 1), none twice; ``""``: none."""
    try:
        rates = [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"imitation.flips={raw!r}: expected comma-separated shares") from None
    if any(not 0.0 < r < 1.0 for r in rates) or len(set(rates)) != len(rates):
        raise ValueError(f"imitation.flips={raw!r}: expected distinct shares in (0, 1)")
    return rates


def _base(args: AppArgs, root: Path) -> Path:
    """The phase-1 run the clones take their GNN from: ``root/base`` when finished, else made."""
    base = root / "base"
    if phase_dir(base, "1").finished:
        return base
    return run_phase1(args, root, "base")[0]


def run(ctx: SuiteContext) -> None:
    from tj_bench.suites._imitation_child import measure
    from tj_hybrid import CLONABLE

    seeds = parse_counts(ctx.option("seeds", "0" if ctx.quick else "0,1,2"), "imitation.seeds", 0)
    flips = parse_flips(ctx.option("flips", "0.08"))
    teacher = ctx.option("teacher", "max-occupancy")
    if teacher not in CLONABLE:
        raise ValueError(f"imitation.teacher={teacher!r}: one of {', '.join(CLONABLE)}")
    profile = ctx.option("profile", "smoke" if ctx.quick else "cpu")
    scenario = ctx.option("scenario", "default")
    sets = split_sets(ctx.option("sets", ""))
    kept = ctx.option("root", "")
    root = Path(kept).resolve() if kept else ctx.shared_dir / "imitation"
    root.mkdir(parents=True, exist_ok=True)
    args = replace(base_args(scenario, root, quick=ctx.quick, sets=sets), profile=profile)
    base = _base(args, root)
    phase2_sets = [*args.sets, *(QUICK_SETS if ctx.quick else ()), *sets]
    record_setup(ctx, args.scenario, profile, sets, root if kept else None, teacher=teacher,
                 seeds=",".join(map(str, seeds)), flips=",".join(f"{r:g}" for r in flips))  # fmt: skip
    out = run_in_child(measure, profile, phase2_sets, phase_dir(base, "1").agent,
                       ctx.workdir / "imitation", teacher, seeds, flips)  # fmt: skip
    ctx.param("teacher_label", out["teacher"])
    ctx.record("demonstrations", out["demonstrations"], unit="decisions")
    ctx.record("record_wall", out["record_s"], unit="s", better="lower")
    for share in out["agreement"]:  # one value per DAgger round
        ctx.record("dagger_agreement", 100 * share, unit="%", better="higher",
                   note="the first clone driving: its share of the teacher's greens")  # fmt: skip
    for seed in seeds:
        ctx.record("clone/accuracy", 100 * out["accuracy"][seed], unit="%", better="higher")
    if flips and not out["flips"]:
        ctx.unavailable("second-best", "the teacher has no look-ahead values "
                        "(phase2.imitation.lookahead_s is 0)")  # fmt: skip
    for label in ("held_out", "held_out_heavy"):
        means = out[label]
        learned = {"teacher", *(f"clone-s{s}" for s in seeds),
                   *(f"second-best-{r:g}" for r in flips)}  # fmt: skip
        baselines = {p: v for p, v in means.items() if p not in learned}
        for p, v in baselines.items():
            ctx.record(f"baseline/delay/{label}/{p}", v, unit="s")
        best = min(baselines, key=baselines.__getitem__)
        ctx.record(f"best_baseline/delay/{label}", baselines[best], unit="s",
                   note=f"{best} on {label}")  # fmt: skip
        ctx.record(f"teacher/delay/{label}", means["teacher"], unit="s", better="lower")
        for seed in seeds:
            ctx.record(f"clone/delay/{label}", means[f"clone-s{seed}"], unit="s", better="lower")
        for r in flips:
            if f"second-best-{r:g}" in means:
                ctx.record(f"second-best-{r:g}/delay/{label}", means[f"second-best-{r:g}"],
                           unit="s", better="lower")  # fmt: skip
    ctx.note("The clone figures' repetitions are clone seeds (one clone per seed, each fitted "
             "afresh to the same demonstrations), not --runs. second-best-R: the teacher taking "
             "its second-best green at a share R of its decisions with a choice.")  # fmt: skip


SUITE = Suite(
    name="imitation",
    summary="phase 2's teacher against its clones on held-out traffic: how much of the "
            "teacher's edge imitation keeps, and what a share of second-best choices costs it",
    run=run,
    options={
        "seeds": "clone seeds, comma-separated (default 0,1,2; quick 0)",
        "flips": "shares of the teacher's choices replaced by its second-best green "
                 "(default 0.08; '' for none; needs a look-ahead teacher)",
        "teacher": "the baseline the teacher starts from (default max-occupancy)",
        "profile": "apps/hybrid profile (default cpu: the look-ahead teacher; quick smoke)",
        "scenario": "default, grid (a generated 2x2 grid), arterial or a .sumocfg path",
        "sets": "extra --set values for apps/hybrid, ';'-separated",
        "root": "keep the runs in this folder; a finished phase-1 run in ROOT/base is reused",
    },
)  # fmt: skip
