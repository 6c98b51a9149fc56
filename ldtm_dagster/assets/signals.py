"""Signal performance: what trading the published signals would have earned, every evening."""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from ldtm_core.accountability.signals.execution import RULES, held_label, tag
from ldtm_core.accountability.signals.signals import signal_report

from ..metadata import records_table
from ..partition_steps import failing_as
from ..resources import AppDatabase, ArtifactStore
from ..signal_plots import equity_figure_markdown
from .accountability import fillbacks


@asset(deps=[fillbacks], group_name="accountability")
def signal_performance(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Rank IC, quintile returns and paper portfolios (long bullish / short bearish, long-only bullish,
    net of LDTM_SIGNAL_COST_BP, traded by LDTM_SIGNAL_EXECUTION) against the equal-weight universe, from
    the published production rows (ldtm_core.accountability.signals.signals; `ldtm signals` prints the same
    report)."""
    engine = database.engine(store)
    with failing_as("signal_performance"):
        report = signal_report(engine)
        summary = report.summary()
    context.log.info(report.headline())
    metadata = {
        "headline": report.headline(),
        "evenings": len(report.evenings),
        "tickers": len(report.universe),
        "cost_bp": report.cost_bp,
        "execution": MetadataValue.text(f"{tag(report.execution)}: {RULES[report.execution]}"),
        "recipes_tried": report.trials.n,
        "summary": records_table(summary.to_dict("records")),
        "ic": records_table(report.ic.to_dict("records")),
        "quintiles": records_table(report.quintiles.to_dict("records")),
        "notes": MetadataValue.md("\n".join(f"- {n}" for n in report.notes)),
    }
    if report.evenings:
        net = summary.set_index(["portfolio", "basis"]).loc[("long bullish / short bearish", "net")]
        next_day = report.ic.set_index("horizon").loc["next_day"]
        held = report.ic.set_index("horizon").loc[held_label(report.execution)]
        # Plain floats: Dagster charts numeric metadata over materializations.
        for key, value in {
            "long_short_sharpe_net": net["sharpe"],
            "long_short_dsr": net["dsr"],
            "long_short_total_return_net": net["total_return"],
            "mean_ic_next_day": next_day["mean_ic"],
            "ic_hac_t_next_day": next_day["hac_t"],
            "mean_ic_held": held["mean_ic"],  # the prediction against the return the books held
            "ic_p_next_day": next_day["hac_p"],  # NaN (n/a) when too short to test
            "residual_ic_next_day": report.residual.set_index("horizon").loc["next_day", "mean_ic_sector"],
            "churn_next_day": report.residual.set_index("horizon").loc["next_day", "mean_churn"],
        }.items():
            metadata[key] = MetadataValue.float(float(value)) if value == value else MetadataValue.text("n/a")
        top = report.portfolios["long_short"].contributions()
        metadata["contributions"] = records_table(top.to_dict("records"))
        plot = equity_figure_markdown(report)
        if plot:
            metadata["equity_curve"] = MetadataValue.md(plot)
    return MaterializeResult(metadata=metadata)
