"""Models per ticker after training and backtests: promotions (the gate) -> onnx_exports.

Both are partitioned by ticker and accept multi-partition (single-run) backfills: the bodies read
`context.partition_keys` and write to the database and the artifact store themselves (no IO manager).
"""

from dagster import AssetExecutionContext, BackfillPolicy, MaterializeResult, MetadataValue, asset

from ldtm_core.accountability.gate import gate
from ldtm_core.learning import export, registry
from ldtm_core.learning.recipes import LSTM, get
from ldtm_core.scoring import baselines

from ..metadata import records_table
from ..partition_steps import for_each_partition
from ..partitions import ticker_partitions
from ..resources import AppDatabase, ArtifactStore
from .backtests import backtests

SINGLE_RUN = BackfillPolicy.single_run()


@asset(
    partitions_def=ticker_partitions,
    backfill_policy=SINGLE_RUN,
    deps=[backtests],
    group_name="models",
)
def promotions(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Promotion gate decisions: a passing candidate becomes the ticker's active (versioned) model.

    Materialised by `promotion_gate_sensor` whenever a ticker's backtest lands. Every row states the
    decision with its policy and rule, the rows, the model's accuracy beside always-up, persistence and
    the trailing majority on the same rows with the p-values; a failing candidate, or one judged on
    too little evidence, stays a candidate and the champion keeps serving. `gate_reports` is each
    report as a Markdown table: both models on the shared rows, the discordant counts, the p-values,
    always-up and persistence on the same rows, the evidence and the rule.
    """
    engine, settings = database.engine(store), database.settings(store)
    reports: list[str] = []

    def one(ticker: str) -> dict:
        candidate = registry.newest_candidate(engine, ticker)
        if candidate is None:
            active = registry.active_model(engine, ticker)
            return {"ticker": ticker, "decision": "no candidate", "active_version": active and active.version}
        if get(candidate.recipe).scope == "global":  # the universe policy: recipe_decisions decides it
            return {
                "ticker": ticker,
                "decision": "universe policy",
                "model_id": candidate.id,
                "recipe": candidate.recipe,
            }
        try:
            report = gate.run_gate(engine, settings, ticker, model_id=candidate.id)
        except gate.AlreadyJudgedError as exc:
            # A repeated gate run (sensor restart, a run launched by hand): nothing flips, no notice.
            context.log.info(str(exc))
            return {
                "ticker": ticker,
                "decision": "already judged",
                "model_id": candidate.id,
                "failing": str(exc),
            }
        if report.passed:  # a failure is logged by the gate's notification (the `ldtm` logger)
            context.log.info(report.summary())
        reports.append(report.markdown())
        paired = report.comparison.paired if report.comparison else None
        # Every baseline on the same rows beside the model, each with its exact paired p-value.
        base = {}
        for name in (b.name for b in baselines.gate_baselines() if b.name != baselines.FOLD_OWN):
            b = report.baselines.get(name)  # always-up: the row's own always_up_accuracy
            base[f"{name}_accuracy"] = b.accuracy if b else None
            base[f"{name}_p_value"] = b.p_value if b else None
        return {
            "ticker": ticker,
            "decision": (
                "held by shadow"
                if report.decision == "held by shadow"
                else ("shadow" if report.promoted and report.promoted.shadow else "promoted")
            )
            if report.passed
            else ("insufficient evidence" if report.decision == "insufficient evidence" else "held"),
            "recipe": report.recipe,  # the candidate's (the champion's after a promotion)
            "policy": report.policy,
            "rule": report.rule,
            "model_id": report.model_id,
            "active_version": report.promoted.version if report.promoted else None,
            "n": report.n,
            "folds": report.folds,
            "direction_accuracy": report.direction_accuracy,
            "always_up_accuracy": report.always_up_accuracy,
            "skill_p_value": report.skill.p_value if report.skill else None,
            **base,
            "mean_abs_pct_error": report.mean_abs_pct_error,
            "leakage_rows": report.leakage_rows,
            "evidence": report.evidence,
            "paired_rows": paired.n if paired else None,
            "challenger_paired_accuracy": paired.challenger_accuracy if paired else None,
            "champion_paired_accuracy": paired.champion_accuracy if paired else None,
            "challenger_only": paired.challenger_only if paired else None,
            "champion_only": paired.champion_only if paired else None,
            "p_better": paired.p_better if paired else None,
            "p_worse": paired.p_worse if paired else None,
            "failing": "; ".join(c.describe() for c in report.failing),
        }

    rows = for_each_partition(context, "promotions", one)
    return MaterializeResult(
        metadata={
            "summary": records_table(rows),
            "gate_reports": MetadataValue.md("\n\n---\n\n".join(reports) or "no gate run"),
            "promoted": sum(r["decision"] == "promoted" for r in rows),
            "shadow": sum(r["decision"] == "shadow" for r in rows),
            "held": sum(r["decision"] == "held" for r in rows),
            "insufficient_evidence": sum(r["decision"] == "insufficient evidence" for r in rows),
            "already_judged": sum(r["decision"] == "already judged" for r in rows),
        }
    )


@asset(
    partitions_def=ticker_partitions,
    backfill_policy=SINGLE_RUN,
    deps=[promotions],
    group_name="models",
    kinds={"onnx"},
)
def onnx_exports(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """ONNX (opset 17, dynamic batch) of each ticker's active model, verified against PyTorch."""
    engine, settings = database.engine(store), database.settings(store)

    def one(ticker: str) -> dict:
        model = registry.active_model(engine, ticker)
        if model is None:
            return {"ticker": ticker, "status": "no active model"}
        if model.recipe != LSTM:  # its artifact is already a portable JSON file
            return {
                "ticker": ticker,
                "status": f"not exported: recipe {model.recipe} has no ONNX export",
                "path": model.checkpoint_path,  # its portable artifact: JSON data, sha256-verified
            }
        out = settings.export_dir / f"{ticker}_ldtm_{model.version or model.id}.onnx"
        result = export.export_onnx(model.promoted_path or model.checkpoint_path, out)
        return {
            "ticker": ticker,
            "status": "exported",
            "model_id": model.id,
            "path": str(result.path),
            "opset": result.opset,
            "max_abs_diff": result.max_abs_diff,
        }

    rows = for_each_partition(context, "onnx_exports", one)
    return MaterializeResult(
        metadata={"summary": records_table(rows), "exported": sum(r["status"] == "exported" for r in rows)}
    )
