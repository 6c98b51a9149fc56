"""Submitted forecasts in Dagster: one `submissions` materialization per accepted file (`submission_sensor`
watches LDTM_SUBMISSIONS_DIR/<model name>/), and `external_judgements`: each submitted model's live record
judged after the evening's fillbacks (accountability.submissions)."""

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset

from ldtm_core.accountability.submissions import external, judge, submit
from ldtm_core.errors import InputError

from ..partition_steps import failing_as
from ..resources import AppDatabase, ArtifactStore


class SubmissionFile(Config):
    # Defaults, so a run of other assets needs no config for this one; an empty one is refused by name.
    model: str = ""  # a registered submitted model
    path: str = ""  # the CSV or Parquet file
    late: bool = False  # past the cut-off: kept as a replay, never scored as live


@asset(group_name="submissions")
def submissions(
    context: AssetExecutionContext, config: SubmissionFile, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """One submission of a model LDTM cannot run, checked whole and recorded (chained, receipted) beside
    the published rows, or refused naming the row and the rule with nothing written."""
    engine = database.engine(store)
    with failing_as("submissions"):
        if not config.model or not config.path:
            raise InputError("submissions: give the run config's model and path (submission_sensor does)")
        result = submit.submit(engine, database.settings(store), config.model, config.path, late=config.late)
    context.log.info(
        f"{config.model}: {result.rows_written} row(s) recorded ({result.mode}) from {config.path}"
    )
    return MaterializeResult(
        metadata={
            "model": config.model,
            "file": config.path,
            "rows_written": result.rows_written,
            "rows_existing": result.rows_existing,
            "mode": result.mode,
            "run_dates": MetadataValue.json([d.isoformat() for d in result.run_dates]),
            "cutoff_new_york": MetadataValue.json(result.cutoff),
            "publishes": MetadataValue.json(result.published),
            "receipt": result.receipt.path.name if result.receipt else "",
            "seconds": result.seconds,
        }
    )


@asset(deps=["fillbacks"], group_name="submissions")
def external_judgements(store: ArtifactStore, database: AppDatabase) -> MaterializeResult:
    """Every submitted model's live record: per ticker its anytime-valid evidence against a coin, the board
    baselines and the champion on the same evenings, where it is shown, and what it could detect."""
    engine = database.engine(store)
    with failing_as("external_judgements"):
        verdicts = [judge.judge(engine, name) for name in external.names(engine)]
    return MaterializeResult(
        metadata={
            "models": len(verdicts),
            **{
                f"{v.name}": MetadataValue.json(
                    {
                        "tickers": len(v.table),
                        "shown": v.shown,
                        "promotable": v.promotable,
                        "level": v.level,
                        "detectable": v.detectable,
                    }
                )
                for v in verdicts
            },
        }
    )
