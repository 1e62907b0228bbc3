"""The torchrun path's overhead: ``apps/hybrid --phase 1`` with the local launcher (2 ranks) and
with two torchrun agents on this host (``--nnodes 2 --nproc-per-node 1``, c10d rendezvous), the
same dataset, config and ranks. On one machine the ratio shows what the multi-node path costs
(rendezvous, the per-machine data waves, the group joined in the rank), not a speed-up.

Phase 3 across nodes is not measured here (it needs a phase-2 agent; the phase3 suite times the
local path).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tj_bench.suite import Suite, SuiteContext
from tj_bench.suites._phase_app import hybrid_app, split_sets
from tj_bench.suites._phase_chain import run_phase1
from tj_bench.suites._phase_scenario import base_args
from tj_hybrid import read_phase1_summary

__all__ = ["SUITE"]


def _torchrun(argv: list[str], log: Path, nodes: int) -> float:
    """``nodes`` torchrun agents of one job on this host running ``apps/hybrid ARGV``; wall s.
    Node 0 starts first and hosts the rendezvous store (as on several machines)."""
    from tj_dist import free_port

    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
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


def run(ctx: SuiteContext) -> None:
    sets = split_sets(ctx.option("sets", ""))
    root = ctx.workdir / "multinode"
    args = base_args("default", root, quick=ctx.quick, sets=(*sets, "dist.nprocs=2",
                                                             "dist.threads_per_rank=1"))  # fmt: skip
    ctx.param("ranks", 2)
    ctx.note("Phase 1 with 2 gloo ranks: `local` is the local launcher, `nodes` two torchrun "
             "agents on this host (1 rank each). The first local run records the dataset; the "
             "timed runs reuse it. `wall` is each command from start to exit (torchrun's "
             "rendezvous included); `training` under the local launcher includes spawning the "
             "ranks, under torchrun the ranks already run: compare `wall`.")  # fmt: skip
    run_phase1(args.plus("phase1.steps=1"), root, "warmup")  # the dataset, once
    for rep in ctx.repetitions("local / 2-node phase-1 runs"):
        local, local_wall = run_phase1(args, root, f"local-{rep}")
        name = f"nodes-{rep}"
        nodes_wall = _torchrun([*args.argv(), "--set", f"run.root={root}", "--set", f"run.name={name}",
                   "--phase", "1"], root / f"{name}.log", nodes=2)  # fmt: skip
        one, two = read_phase1_summary(local), read_phase1_summary(root / name)
        ctx.record("windows_per_s/local", one.windows_per_s, unit="windows/s", better="higher")
        ctx.record("windows_per_s/2_nodes", two.windows_per_s, unit="windows/s", better="higher")
        ctx.record("wall/local", local_wall, unit="s", better="lower")
        ctx.record("wall/2_nodes", nodes_wall, unit="s", better="lower")
        ctx.record("training/local", one.wall_s["train"], unit="s", better="lower")
        ctx.record("training/2_nodes", two.wall_s["train"], unit="s", better="lower")
        ctx.record("ratio", two.windows_per_s / one.windows_per_s, unit="x", better="higher")


SUITE = Suite(
    name="multinode",
    summary="phase 1 under two torchrun agents on one host vs the local launcher: the overhead",
    run=run,
    options={"sets": "extra --set values for apps/hybrid, ';'-separated"},
)
