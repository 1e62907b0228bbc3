"""The torchrun path's overhead: ``apps/hybrid --phase 1`` and ``--phase 3`` with the local
launcher (2 ranks) and with two torchrun agents on this host (``--nnodes 2 --nproc-per-node 1``,
c10d rendezvous), the same data, config and ranks. On one machine the ratio shows what the
multi-node path costs (rendezvous, the per-machine data waves and plans, the group joined in the
rank), not a speed-up.

Phase 3 starts from a phase-2 agent made once here (a quick phase 2 on the phase-1 warm-up run);
both phase-3 runs continue a copy of it with the same collectors in all (one machine's
``phase3.collect.collectors`` is that machine's), and their held-out delay and episode cost are
recorded beside the speed: the two paths sample in another order, so they agree only within the
spread over seeds.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._phase_app import ARGS_FILE, AppArgs, hybrid_app, split_sets
from tj_bench.suites._phase_chain import run_phase1, run_phase2, run_phase3
from tj_bench.suites._phase_scenario import QUICK_PHASE3, base_args
from tj_hybrid import read_evaluation, read_metrics, read_phase1_summary, read_result

__all__ = ["SUITE"]

SEED = 0  # the runs' training seed, and so their hash seed (the local launcher sets it too)


def _torchrun(argv: list[str], log: Path, nodes: int) -> float:
    """``nodes`` torchrun agents of one job on this host running ``apps/hybrid ARGV``; wall s.
    Node 0 starts first and hosts the rendezvous store (as on several machines)."""
    from tj_dist import free_port

    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": str(SEED)}
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    procs = []
    with log.open("w") as fh:
        for i in range(nodes):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
                 "--nproc-per-node", "1", "--node-rank", str(i), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
                 str(hybrid_app()), *argv],
                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            ))  # fmt: skip
            time.sleep(2.0 if i == 0 else 0.0)
        try:
            codes = [p.wait() for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    if any(codes):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"torchrun agents exited {codes}; log {log}:\n{tail}")
    return time.perf_counter() - t0


def _nodes_run(args: AppArgs, root: Path, name: str, phase: str) -> tuple[Path, float]:
    """``--phase PHASE`` of ``root/name`` under two torchrun agents: (the run folder, wall s)."""
    argv = [*args.argv(), "--set", f"run.root={root}", "--set", f"run.name={name}",
            "--phase", phase]  # fmt: skip
    return root / name, _torchrun(argv, root / f"{name}.log", nodes=2)


def _phase1(ctx: SuiteContext, args: AppArgs, root: Path) -> None:
    for rep in ctx.repetitions("local / 2-node phase-1 runs"):
        local, local_wall = run_phase1(args, root, f"local-{rep}")
        nodes, nodes_wall = _nodes_run(args, root, f"nodes-{rep}", "1")
        one, two = read_phase1_summary(local), read_phase1_summary(nodes)
        ctx.record("phase1/windows_per_s/local", one.windows_per_s, unit="windows/s", better="higher")
        ctx.record("phase1/windows_per_s/2_nodes", two.windows_per_s, unit="windows/s",
                   better="higher")  # fmt: skip
        ctx.record("phase1/wall/local", local_wall, unit="s", better="lower")
        ctx.record("phase1/wall/2_nodes", nodes_wall, unit="s", better="lower")
        ctx.record("phase1/training/local", one.wall_s["train"], unit="s", better="lower")
        ctx.record("phase1/training/2_nodes", two.wall_s["train"], unit="s", better="lower")
        ctx.record("phase1/ratio", two.windows_per_s / one.windows_per_s, unit="x", better="higher")


def _iteration_s(run: Path) -> float:
    """Phase 3's median iteration time, the first left out (it also waits for the collectors to
    start) when there are others."""
    times = [r["time/iteration_s"] for r in read_metrics(run, "3") if "time/iteration_s" in r]
    return statistics.median(times[1:] or times)


def _phase3(ctx: SuiteContext, args: AppArgs, root: Path, warm: Path, per_node: int,
            sets: tuple[str, ...]) -> None:  # fmt: skip
    src, _ = run_phase2(warm, args, root, "graph", SEED, quick=True)  # the agent, once
    made = AppArgs.load(src) or args  # phase 2's arguments: its traffic, for phase 3 too
    for rep in ctx.repetitions("local / 2-node phase-3 runs"):
        local, local_wall = run_phase3(src, made, root, SEED, quick=ctx.quick,
                                       sets=(*sets, f"phase3.collect.collectors={2 * per_node}"))  # fmt: skip
        nodes = root / f"nodes-p3-{rep}"
        shutil.rmtree(nodes, ignore_errors=True)  # a copy of phase 2's run, as run_phase3 makes
        shutil.copytree(src, nodes, ignore=shutil.ignore_patterns(ARGS_FILE, "phase3", "checkpoints", "ray"))
        p3 = made.plus(*(QUICK_PHASE3 if ctx.quick else ()), *sets,
                       f"phase3.collect.collectors={per_node}", seed=SEED)  # fmt: skip
        _, nodes_wall = _nodes_run(p3, root, nodes.name, "3")
        its = {"local": _iteration_s(local), "2_nodes": _iteration_s(nodes)}
        for case, run, wall in (("local", local, local_wall), ("2_nodes", nodes, nodes_wall)):
            held = read_evaluation(run, "3").held_out
            ctx.record(f"phase3/iteration/{case}", its[case], unit="s", better="lower")
            ctx.record(f"phase3/wall/{case}", wall, unit="s", better="lower")
            ctx.record(f"phase3/training/{case}", read_result(run, "3").metrics["train_wall_s"],
                       unit="s", better="lower")  # fmt: skip
            ctx.record(f"phase3/delay/{case}", held.means("avg_delay")["phase3"], unit="s",
                       better="lower")  # fmt: skip
            ctx.record(f"phase3/cost/{case}", held.means("cost")["phase3"], unit="per episode",
                       better="lower")  # fmt: skip
        ctx.record("phase3/ratio", its["local"] / its["2_nodes"], unit="x", better="higher")


def run(ctx: SuiteContext) -> None:
    sets = split_sets(ctx.option("sets", ""))
    phases = parse_counts(ctx.option("phases", "1,3"), "multinode.phases")
    if not set(phases) <= {1, 3}:
        raise ValueError(f"multinode.phases={phases}: expected 1, 3 or both (the DDP phases)")
    per_node = ctx.option("collectors", 1)
    if per_node < 1:
        raise ValueError(f"multinode.collectors={per_node}: expected >= 1")
    root = ctx.workdir / "multinode"
    args = base_args("default", root, quick=ctx.quick, sets=(*sets, "dist.nprocs=2",
                                                             "dist.threads_per_rank=1"))  # fmt: skip
    ctx.param("ranks", 2)
    ctx.param("phases", ", ".join(map(str, phases)))
    ctx.note("2 gloo ranks: `local` is the local launcher, `2_nodes` two torchrun agents on this "
             "host (1 rank each). The first local run records the dataset; the timed runs reuse "
             "it. `wall` is each command from start to exit (torchrun's rendezvous included); "
             "`training` under the local launcher includes spawning the ranks, under torchrun "
             "the ranks already run: compare `wall`.")  # fmt: skip
    warm, _ = run_phase1(args.plus("phase1.steps=1"), root, "warmup")  # the dataset, once
    if 1 in phases:
        _phase1(ctx, args, root)
    if 3 in phases:
        ctx.param("phase3 collectors", f"{per_node} per machine, {2 * per_node} in all")
        ctx.note("Phase 3 starts from a quick phase 2 (2 PPO iterations, its small held-out "
                 "set) on the warm-up run's 1-step phase-1 agent, made once. `phase3/iteration` "
                 "is the median iteration time without the first (collector start-up), `ratio` "
                 "local over 2 nodes; `delay` and `cost` are the phase-3 policy's held-out "
                 "means of each run (they differ by collector order, not by the path).")  # fmt: skip
        _phase3(ctx, args, root, warm, per_node, sets)


SUITE = Suite(
    name="multinode",
    summary="phases 1 and 3 under two torchrun agents on one host vs the local launcher: the "
            "overhead, and phase 3's held-out delay and cost on each path",
    run=run,
    options={
        "sets": "extra --set values for apps/hybrid, ';'-separated",
        "phases": "which DDP phases to compare: 1, 3 or 1,3 (default)",
        "collectors": "phase-3 collectors per machine (default 1; the local run has twice as many)",
    },
)  # fmt: skip
