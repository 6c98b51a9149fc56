"""Accountability: snapshots (predictions recorded before the answer), fillbacks, the leaderboard."""

import dataclasses
import datetime as dt
import math

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
)

from ldtm_core.accountability.board import leaderboard as board
from ldtm_core.accountability.board import record as board_record
from ldtm_core.accountability.board.no_champion import without_champion
from ldtm_core.accountability.ledger import audit, chain, fillback, refill
from ldtm_core.accountability.ledger import snapshots as snaps
from ldtm_core.accountability.shadow import shadow
from ldtm_core.data.calendar import is_session
from ldtm_core.scoring import baselines, board_stats

from ..deployment import gpu_step_tags
from ..gpu_pool import GPU_POOL, gpu_slot_lease
from ..metadata import records_table
from ..partition_steps import failing_as, for_each_partition, partition_keys
from ..partitions import check_evening_keys, evening_partitions
from ..plots import leaderboard_figure_markdown
from ..resources import AppDatabase, ArtifactStore


class SnapshotsConfig(Config):
    """No options: the evening is the partition and the tickers are the universe's. Declared so that a
    misspelt or misplaced key (e.g. `tickers`, which belongs to `prices`) is refused before the run."""


@asset(
    partitions_def=evening_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    pool=GPU_POOL,
    op_tags=gpu_step_tags(),
    # Every evening reads the serving model and the stored features of every ticker: all partitions.
    deps=[
        "prices",
        AssetDep("features", partition_mapping=AllPartitionMapping()),
        AssetDep("promotions", partition_mapping=AllPartitionMapping()),
    ],
    group_name="accountability",
    check_specs=[
        AssetCheckSpec("one_per_ticker", asset="snapshots", blocking=True),
        AssetCheckSpec("audit_chain_intact", asset="snapshots", blocking=True),
        # Blocking: every evening's chain heads, kept in its own materialization outside the app database,
        # must still be in the table. (Resetting the app database on purpose: wipe this asset's
        # materializations too, `dagster asset wipe snapshots`.)
        AssetCheckSpec("chain_matches_dagster_anchors", asset="snapshots", blocking=True),
    ],
)
def snapshots(
    context: AssetExecutionContext, config: SnapshotsConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Hash-chained predictions (3 horizons) per ticker for the evening, written before the outcome.

    A past evening is written as `replay` rows; a weekday holiday records "no session" and writes nothing.
    """
    check_evening_keys(context.run.tags, partition_keys(context, "snapshots"))
    engine, settings = database.engine(store), database.settings(store)
    previous = _materialized_anchors(context, audit.verified_tickers(engine))
    duplicates: dict[str, int] = {}
    heads: dict[str, str] = {}
    failed_models: set[str] = set()

    def one(key: str) -> dict:
        day = dt.date.fromisoformat(key)
        if not is_session(day):
            return {"run_date": key, "status": "no session", "rows_written": 0}
        result = snaps.predict(engine, settings, run_date=day, tickers=store.tickers())
        heads.update(result.chain_heads.get("heads", {}))
        for t, why in result.failed.items():
            failed_models.add(t)
            context.log.warning(f"snapshots {key} {t}: not served, its model failed: {why}")
        for t, why in result.features_recomputed.items():
            context.log.info(f"snapshots {key} {t}: features recomputed from prices: {why}")
        # One row per (ticker, evening) per model: a model promoted later may add its own row for an
        # evening already predicted (the leaderboard scores only the first); a second row of the same
        # model, or none for a predicted ticker, is the violation.
        rows = snaps.latest_rows(engine, day) if result.tickers_predicted else None
        counts = rows.groupby(["ticker", "model_version"]).size() if rows is not None else {}
        # A shadow model's row (never published) is held to the same rule under its own version.
        for t, version in [*result.model_versions.items(), *result.shadow.items()]:
            n = int(counts.get((t, version), 0))
            if n != 1:
                duplicates[f"{t} {key} {version}"] = n
        return {
            "run_date": key,
            "status": result.mode,
            "rows_written": result.rows_written,
            "rows_existing": result.rows_existing,
            "predicted": len(result.tickers_predicted),
            # Production's cohort: rows of active models; candidates' rows are counted in `ungated`.
            "bullish": result.cohort.get("bullish", 0),
            "neutral": result.cohort.get("neutral", 0),
            "bearish": result.cohort.get("bearish", 0),
            "skipped": "; ".join(f"{t}: {why}" for t, why in result.skipped.items()),
            # Of those, the tickers whose model failed (not the data): a partial evening to fix.
            "models_failed": ",".join(sorted(result.failed)),
            # Not members of the universe on the evening (universe_membership): not predicted, no failure.
            "not_members": ",".join(sorted(result.not_members)),
            "used_candidate": ",".join(result.used_candidate),
            "ungated": sum(result.cohort_ungated.values()),
            "in_sample": ",".join(result.in_sample),
            # Tickers whose shadow model also predicted (rows never published; see `leaderboard`'s shadow).
            "shadow": ",".join(sorted(result.shadow)),
            "shadow_skipped": "; ".join(f"{t}: {why}" for t, why in result.shadow_skipped.items()),
            "features_recomputed": "; ".join(f"{t}: {why}" for t, why in result.features_recomputed.items()),
        }

    with gpu_slot_lease(context, settings.database_url):
        runs = for_each_partition(context, "snapshots", one)
    sessions = sum(r["status"] != "no session" for r in runs)
    # Each row is audited with the band stored with it, not today's LDTM_NEUTRAL_BAND_PCT.
    # The nightly audit: what is new since the last passing audit's chain heads, every row once a week
    # (`auto`); it records its heads for tomorrow. `ldtm audit verify` recomputes everything on demand.
    anchored = (
        audit.verify(engine, tickers=sorted(previous), extra_anchors=previous, mode="auto")
        if previous
        else None
    )
    report = audit.verify(engine, mode="auto", record=True)
    last = runs[-1] if runs else {}
    return MaterializeResult(
        metadata={
            "runs": records_table(runs),
            "rows_written": sum(r.get("rows_written", 0) for r in runs),
            "tickers_with_failed_model": len(failed_models),
            "sessions": sessions,
            "mode": last.get("status", ""),
            "cohort": MetadataValue.json({k: last.get(k, 0) for k in ("bullish", "neutral", "bearish")}),
            # The chain head of every ticker after this run: a copy of the audit anchors kept outside
            # the app database (compared by the next run's `chain_matches_dagster_anchors`).
            CHAIN_HEADS: MetadataValue.json(heads),
            # Whether the chain checks passed: the next runs read the anchors back to the newest such one.
            CHAIN_VERIFIED: report.ok and (anchored is None or anchored.ok),
        },
        check_results=[
            AssetCheckResult(
                check_name="one_per_ticker",
                passed=not duplicates,
                metadata={"evenings": sessions, "violations": MetadataValue.json(duplicates)},
                description="every predicted ticker has exactly one snapshot row per evening from the "
                "model that predicted it (the leaderboard scores only the evening's first row)",
            ),
            AssetCheckResult(
                check_name="audit_chain_intact",
                passed=report.ok,
                metadata={
                    "rows_checked": report.rows_checked,
                    "audit_mode": report.mode,
                    "problems": MetadataValue.json([_plain(p) for p in report.problems[:20]]),
                    # Not problems: stale for a recorded reason, re-filled by this run's fillbacks.
                    "stale_actuals": MetadataValue.json([st.describe() for st in report.stale[:20]]),
                    "refills_so_far": len(report.revisions),
                },
                description="every row's hash matches its prediction and links to its predecessor, "
                "the chain heads recorded in run_log are all present, and filled actuals match prices "
                "(or are stale for a recorded reason: a revised bar, a late corporate action)",
            ),
            AssetCheckResult(
                check_name="chain_matches_dagster_anchors",
                passed=anchored is None or anchored.ok,
                severity=AssetCheckSeverity.ERROR,
                metadata={
                    "anchors_compared": sum(len(v) for v in previous.values()),
                    "problems": MetadataValue.json(
                        [_plain(p) for p in (anchored.problems if anchored else [])[:20]]
                    ),
                },
                description="the chain heads recorded in the earlier snapshots materializations' metadata "
                "(each evening's own, back to the newest evening whose chain checks passed) are still in the "
                "snapshots table with the same hash (nothing deleted or rewritten since)",
            ),
        ],
    )


CHAIN_HEADS = "chain_heads"
CHAIN_VERIFIED = "chain_verified"
PAGE = 10  # materializations per read, newest first (one or two are usually enough)


def _materialized_anchors(
    context: AssetExecutionContext, verified: set[str] | None
) -> dict[str, list[chain.Anchor]]:
    """{ticker: [Anchor, ...]} from the chain heads of the earlier snapshots materializations, each named
    by its evening, newest first back to the newest one whose chain checks passed (`chain_verified`) once
    every ticker of the last verified audit (`verified`; None: no audit passed yet, read them all) has an
    anchor. Every later evening is compared against its own record, so a rewrite flagged once does not
    become the baseline; the heads of a verified evening cover every row before them through
    the hash chain, as the audit's own verified heads do, so the older ones add nothing (the
    read no longer grows with the evenings stored). Materializations written before `chain_verified`
    existed count as unverified (the first run after the upgrade reads them all)."""
    out: dict[str, list[chain.Anchor]] = {}
    cursor = None
    while True:
        page = context.instance.fetch_materializations(
            context.asset_key, limit=PAGE, cursor=cursor, ascending=False
        )
        for record in page.records:
            materialization = record.asset_materialization
            metadata = materialization.metadata if materialization else {}
            value = metadata.get(CHAIN_HEADS)
            if value is None or not isinstance(value.value, dict):
                continue
            source = f"the Dagster snapshots materialization of {materialization.partition or '-'} (run {record.run_id})"
            try:
                heads = chain.parse_heads(value.value, source)
            except (ValueError, TypeError, IndexError):
                context.log.warning(f"unreadable chain heads in {source}")
                continue
            for t, a in heads.items():
                out.setdefault(t, []).append(a)
            passed = metadata.get(CHAIN_VERIFIED)
            if (
                verified is not None
                and passed is not None
                and passed.value is True
                and verified <= out.keys()
            ):
                return _oldest_first(out)
        if not page.has_more:
            return _oldest_first(out)
        cursor = page.cursor


def _oldest_first(anchors: dict[str, list[chain.Anchor]]) -> dict[str, list[chain.Anchor]]:
    return {t: v[::-1] for t, v in anchors.items()}


def _plain(obj) -> dict:
    return (
        {k: str(v) for k, v in dataclasses.asdict(obj).items()}
        if dataclasses.is_dataclass(obj)
        else {"problem": str(obj)}
    )


@asset(deps=[snapshots, "prices"], group_name="accountability")
def fillbacks(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Actual prices filled into snapshot rows whose target dates have closed (predictions untouched).

    First the actuals made stale by a revised bar inside the overlap window or a late corporate action are
    re-filled (ldtm_core.accountability.ledger.refill; each logged in fill_revisions with its old value).
    Then each shadow model whose paired filled evenings reach the N stored when it started is promoted
    or retired on its live record against the champion, and one whose checkpoint no longer loads, whose
    champion stopped serving or that timed out is ended (ldtm_core.accountability.shadow.shadow)."""
    engine = database.engine(store)
    with failing_as("fillbacks"):
        redone = refill.refill(engine, automatic=True)
        result = fillback.fillback(engine)
        outcomes = shadow.conclude_all(engine, database.settings(store))
    for st in redone.refilled:
        context.log.warning(f"re-filled {st.describe()}")
    for o in outcomes:
        if o.error:
            context.log.warning(f"shadow decision not carried out: {o.error}")
        else:
            context.log.info(o.comparison.summary())
    return MaterializeResult(
        metadata={
            "rows_pending": result.rows_pending,
            "filled": result.total_filled,
            **{f"filled_{h}": n for h, n in result.filled.items()},
            "refilled": len(redone.refilled),
            "refills": MetadataValue.json([st.describe() for st in redone.refilled[:50]]),
            # Explained but beyond the overlap window: `ldtm fillback --refill` (an operator's decision).
            "stale_left": MetadataValue.json([st.describe() for st in redone.left[:50]]),
            # Pending actuals that can never be filled (the ticker left and its prices stop): kept, unscored.
            "unfillable": len(result.unfillable),
            "unfillable_reasons": MetadataValue.json(
                sorted({u.ticker: u.reason for u in result.unfillable}.values())[:50]
            ),
            # Each shadow: its paired live record so far and the decision (pending until N evenings).
            "shadow_decisions": records_table(
                [
                    {
                        **{k: v for k, v in o.comparison.to_dict().items() if k not in ("horizons", "rule")},
                        "error": o.error,
                    }
                    for o in outcomes
                ]
            ),
            "shadow_promoted": sum(o.comparison.decision == "promote" for o in outcomes),
            "shadow_retired": sum(o.comparison.decision == "retire" for o in outcomes),
        }
    )


@asset(deps=[fillbacks], group_name="accountability")
def leaderboard(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """Per-ticker accuracy over the last 30 days of filled snapshots, beside the board's baselines;
    labels by e-BH over each ticker's whole published record (anytime-valid), the universe's record answer
    and the window's SPA, tickers without a champion named."""
    engine = database.engine(store)
    with failing_as("leaderboard"):
        table = board.leaderboard(engine, mode="all")
        answer = board.universe(engine, table, "all")
        record_answer = board_record.record_answer(table)
        by_horizon = board_record.horizon_answers(engine, sorted(table["ticker"]), "all")
        missing = without_champion(engine)
    rows = table.to_dict("records")
    metadata = {
        "verdict": board.verdict(table),
        # What the labels control (e-BH over the whole records) and what the board could show; then
        # what the window's q is (a description).
        "label_controls": board_record.evidence_rule(table),
        "window_q": board_stats.label_rule(table),
        # The universe's answer on the record (the test): does any model beat every baseline, a coin
        # included? Then the window's SPA (a description of the month).
        "universe": record_answer.describe(),
        "universe_record": MetadataValue.json(record_answer.to_dict()),
        # The error horizons' answers on the record: closer to the answer than no change, more often?
        "universe_by_horizon": MetadataValue.json([a.describe() for a in by_horizon]),
        "universe_window": answer.describe(),
        "universe_spa_p": MetadataValue.text("not tested")
        if math.isnan(answer.p_value)
        else MetadataValue.float(answer.p_value),
        "universe_spa": MetadataValue.json(answer.to_dict()),
        # Tickers with no active model (refused by the gate, or never judged), with the reason.
        "no_production_model": records_table([m.to_dict() for m in missing]),
        "tickers": len(rows),
        # The in-sample evenings the board leaves out (`ldtm leaderboard --include-in-sample` shows them).
        "in_sample_hidden": board.hidden_in_sample(engine, "all"),
        # Tickers served by a candidate that never passed the gate: left off the table and every figure
        # here (`ldtm leaderboard --include-ungated` shows them, marked).
        "ungated_hidden": MetadataValue.json(board.hidden_ungated(engine)),
        # Filled evenings of tickers that were not members of the universe that evening (a dated
        # universe, `ldtm universe import`): kept, out of every figure here.
        "non_members_hidden": MetadataValue.json(board.hidden_non_members(engine, "all")),
        # Labelled by e-BH over the tickers' whole records (label_controls).
        **{
            b.column("beats"): int(table[b.column("beats")].sum()) if rows else 0
            for b in baselines.board_baselines()
        },
        "shown_skill": int(table["shown_skill"].sum()) if rows else 0,
        # Each ticker's own exact one-sided test at the 5 % level, unadjusted: read 103 at a time, about
        # 5 of them are luck (kept so the adjusted count above can be compared with it).
        "beats_always_up_p_le_0_05": int((table["skill_p_value"] <= 0.05).sum()) if rows else 0,
        "mean_direction_accuracy": float(table["direction_accuracy"].mean()) if rows else 0.0,
        "table": records_table(rows),
        "leaderboard": MetadataValue.md(
            table.to_markdown(index=False, floatfmt=".3f") if rows else "_no filled snapshots yet_"
        ),
    }
    # Champion vs shadow on the same filled evenings (shadow rows are never in the table above).
    metadata["shadow"] = records_table(
        shadow.side_by_side(engine, database.settings(store)).to_dict("records")
    )
    plot = leaderboard_figure_markdown(engine, table)
    if plot:
        metadata["plot"] = MetadataValue.md(plot)
    return MaterializeResult(metadata=metadata)
