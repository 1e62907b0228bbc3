"""Phase 1 as the registry sees it: check its inputs, run, export the agent it trained."""

from __future__ import annotations

from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.multinode import rank_result, torchrun_launch
from tj_hybrid.phase_api import PhaseContext, PhaseResult
from tj_hybrid.preflight import check_scenario, check_writable_dir

__all__ = ["PHASE", "Phase1"]


class Phase1:
    """World-model pretraining (GNN + world model) on a dataset recorded from the scenario."""

    def preflight(self, config: HybridConfig) -> None:
        data = config.phase1.data
        if data.json_source is not None:
            if not data.json_source.is_dir():
                raise ConfigError(f"phase1.data.json_source {data.json_source}: no such folder")
        else:
            check_scenario(config)
        if data.path is not None:
            check_writable_dir(data.path, "phase1.data.path")
        else:  # the scenario's folder under run.data_root (its key reads the scenario's files)
            check_writable_dir(scenario_data_dir(config), "run.data_root")

    def run(self, context: PhaseContext) -> PhaseResult:
        from tj_hybrid.phase1.run import run_phase1
        from tj_monitor import tree_memory

        launch = torchrun_launch()
        before = tree_memory()  # the ranks and loader workers end with the phase: measured
        result = run_phase1(context.config, context.phase_dir, resume=context.resume,
                            profile=context.profile, launch=launch)  # fmt: skip
        after = tree_memory()
        if result is None:  # a rank other than 0 under torchrun: rank 0 writes the result
            return rank_result(context)
        ev = result.eval
        return PhaseResult(
            name=context.spec.name,
            agent=context.phase_dir.agent,
            report=result.report,
            headline=(
                f"held-out position error {ev['model_mae']:.3f} m vs constant velocity "
                f"{ev['cv_mae']:.3f} m ({ev['improvement']:.1%} better)"
            ),
            metrics={
                "eval": ev,
                "data_wait_fraction": result.data_wait_fraction,
                "windows_per_s": result.windows_per_s,
                "peak_tree_pss": result.peak_tree_pss,
                "tree_uss_before": before.uss, "tree_uss_after": after.uss,
                "tree_pss_before": before.pss, "tree_pss_after": after.pss,
            },
        )


PHASE = Phase1()
