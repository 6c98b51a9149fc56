"""The tables, as SQLAlchemy 2 Core metadata. Alembic migrations create exactly these on SQLite and PostgreSQL.

Names are fixed (tools rely on them): prices, snapshots, model_registry, registry_events,
backtest_folds, backtest_fold_baselines, gate_decisions, run_log, ingested_files, features, feature_sets,
corporate_actions, fill_revisions, universe_membership, unfillable_actuals (0033), price_feature_rows and
price_feature_sets (0036), and the views accuracy_30d and accuracy_30d_by_model, each also `_with_in_sample`,
`_with_ungated` and `_with_in_sample_and_ungated` (created by migrations; 0021 added the ungated ones;
0024 leaves shadow rows out of all of them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from ldtm_core.feature_names import REFERENCE_FEATURES
from ldtm_core.horizons import DIRECTION, ERROR_ONLY, HORIZONS, Horizon

metadata = MetaData()

TICKER = String(12)

prices = Table(
    "prices",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("date", Date, primary_key=True),
    Column("open", Float, nullable=False),
    Column("high", Float, nullable=False),
    Column("low", Float, nullable=False),
    Column("close", Float, nullable=False),
    Column("adj_close", Float),
    Column("volume", BigInteger, nullable=False),
    Column("source", String(32), nullable=False),
    Column("ingested_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("low <= high AND low > 0", name="ck_prices_range"),
)

# A split or dividend re-bases a ticker's prices. `factor` multiplies every price before `ex_date` to put
# it on the basis from `ex_date` on (a 10:1 split: 0.1). Stored prices stay as ingested; readers apply
# the recorded factors (ldtm_core.data.corporate_actions).
corporate_actions = Table(
    "corporate_actions",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("ex_date", Date, primary_key=True),
    Column("kind", String(12), primary_key=True),
    Column("factor", Float, nullable=False),
    Column("source", String(32), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("factor > 0", name="ck_corporate_actions_factor"),
)

model_registry = Table(
    "model_registry",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ticker", TICKER, nullable=False),
    Column("status", String(12), nullable=False),
    Column("profile", String(32), nullable=False),
    Column("arch_signature", String(64), nullable=False),
    Column("config_json", Text, nullable=False),
    Column("trained_on_date", Date, nullable=False),
    Column("val_loss", Float),
    Column("epochs", Integer),
    Column("device", String(32)),
    Column("duration_s", Float),
    Column("metrics_json", Text),
    Column("checkpoint_path", Text, nullable=False),
    Column("checkpoint_sha256", String(64), nullable=False),
    # Set when the gate promotes the model: v{major}.{trained_on_date} and the versioned copy.
    Column("version", String(40)),
    Column("promoted_path", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 'shadow' (migration 0024): passed the gate, predicting beside the champion until its live record decides.
    CheckConstraint("status IN ('candidate','active','retired','shadow')", name="ck_registry_status"),
    Index("ix_registry_ticker_status", "ticker", "status"),
    # The database, not the code, guarantees at most one active model per ticker.
    Index(
        "uq_registry_one_active",
        "ticker",
        unique=True,
        sqlite_where=text("status = 'active'"),
        postgresql_where=text("status = 'active'"),
    ),
    Index(
        "uq_registry_one_shadow",
        "ticker",
        unique=True,
        sqlite_where=text("status = 'shadow'"),
        postgresql_where=text("status = 'shadow'"),
    ),
)

registry_events = Table(
    "registry_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model_id", Integer, ForeignKey("model_registry.id"), nullable=False),
    Column("ticker", TICKER, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("from_status", String(12)),
    Column("to_status", String(12), nullable=False),
    Column("reason", Text, nullable=False),
    Index("ix_registry_events_ticker", "ticker", "id"),
)

run_log = Table(
    "run_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False, unique=True),
    Column("kind", String(20), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("status", String(12), nullable=False),
    Column("run_date", Date),
    Column("tickers", Text),
    Column("n_rows", Integer),
    Column("phases_json", Text),
    Column("summary_json", Text),
    Column("message", Text),
    # predict runs: {ticker: [snapshot id, row_hash]} of each chain head after the run (audit anchors)
    Column("chain_heads_json", Text),
)


def _actual_columns(h: Horizon) -> list[Column]:
    """A horizon's filled answer: its actual close and pct error; the direction horizon also its actual
    direction and whether the predicted one was right (NULL on a tie)."""
    cols = [Column(h.col("actual"), Float), Column(h.col("pct_error"), Float)]
    if h == DIRECTION:
        cols += [Column(h.col("direction_actual"), String(8)), Column(h.col("direction_correct"), Boolean)]
    return cols


snapshots = Table(
    "snapshots",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ticker", TICKER, nullable=False),
    Column("run_date", Date, nullable=False),
    Column("run_date_close", Float, nullable=False),
    # Close of the session before run_date: known at prediction time, feeds the persistence baseline.
    Column("prev_close", Float),
    Column("model_id", Integer, ForeignKey("model_registry.id"), nullable=False),
    Column("model_version", String(40), nullable=False),
    Column("model_status", String(12), nullable=False),
    Column("mode", String(8), nullable=False),
    # One prediction, target date, actual, pct error and fill time per horizon (ldtm_core.horizons). A
    # prediction is NULL where a submitted model gave none (a direction-only forecast; revision 0040).
    *(Column(h.col("pred"), Float) for h in HORIZONS),
    Column("direction_pred", String(8), nullable=False),
    # The next-day target is on or before the model's data cutoff: it may have trained on the answer.
    Column("in_sample", Boolean, nullable=False, server_default=false()),
    # The neutral band (%) this row's directions are judged with; NULL (rows before 0017): 0.25 %.
    Column("neutral_band_pct", Float),
    *(Column(h.col("date"), Date, nullable=False) for h in HORIZONS),
    Column("run_id", String(36), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("row_hash", String(64), nullable=False),
    # Which definition of the row hash this row was written under (chain.canonical): 1 = the prediction,
    # 2 = also created_at, run_id and model_status. Old rows keep 1 and verify under it.
    Column("chain_version", Integer, nullable=False, server_default=text("1")),
    # Each board baseline's call at predict time, JSON {name: 1 / -1 / 0 / null}; hashed from chain
    # version 3 (revision 0032; NULL before: the board scores those rows from their recorded closes).
    Column("baseline_calls", Text),
    *(c for h in HORIZONS for c in _actual_columns(h)),
    Column("filled_at", DateTime(timezone=True)),  # the row's last fill (any horizon)
    # When each horizon's actual was written (0026): a bar revised after it is stale for that horizon only.
    *(Column(h.col("filled_at"), DateTime(timezone=True)) for h in HORIZONS),
    UniqueConstraint("ticker", "run_date", "model_version", name="uq_snapshots_ticker_date_model"),
    # Two rows can never claim the same predecessor: the hash chain of a ticker cannot fork.
    UniqueConstraint("ticker", "prev_hash", name="uq_snapshots_chain"),
    CheckConstraint("mode IN ('live','replay')", name="ck_snapshots_mode"),
    CheckConstraint("direction_pred IN ('bullish','neutral','bearish')", name="ck_snapshots_direction"),
    Index("ix_snapshots_run_date", "run_date"),
    # A chain's head (max id of a ticker) is one probe of this index (chain.chain_heads), 0028.
    Index("ix_snapshots_ticker_id", "ticker", "id"),
    # The board's windows of the error-only horizons are found by target date (0029).
    *(Index(f"ix_snapshots_{h.col('date')}", h.col("date")) for h in ERROR_ONLY),
    # Room on each page for the fills' new row versions: HOT updates, no index writes (migration 0030).
    postgresql_with={"fillfactor": 40},
)

# Every re-fill of a filled actual (a revised bar, a corporate action recorded after the fill): the old
# value stays visible here, written in the same transaction as the new one (accountability.ledger.refill).
fill_revisions = Table(
    "fill_revisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("snapshot_id", Integer, ForeignKey("snapshots.id"), nullable=False),
    Column("ticker", TICKER, nullable=False),
    Column("run_date", Date, nullable=False),
    Column("horizon", String(12), nullable=False),
    Column("old_actual", Float, nullable=False),
    Column("new_actual", Float, nullable=False),
    Column("old_pct_error", Float),
    Column("new_pct_error", Float),  # NULL: a row with no predicted price (revision 0040)
    Column("reason", Text, nullable=False),
    Column("revised_at", DateTime(timezone=True), nullable=False),
    Index("ix_fill_revisions_snapshot", "snapshot_id"),
)

backtest_folds = Table(
    "backtest_folds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("backtest_id", String(36), nullable=False),
    Column("model_id", Integer, ForeignKey("model_registry.id")),
    Column("ticker", TICKER, nullable=False),
    Column("fold", Integer, nullable=False),
    Column("cutoff", Date, nullable=False),
    Column("train_start", Date, nullable=False),
    Column("train_end", Date, nullable=False),
    Column("test_start", Date, nullable=False),
    Column("test_end", Date, nullable=False),
    Column("n", Integer, nullable=False),
    Column("direction_accuracy", Float, nullable=False),
    Column("always_up_accuracy", Float, nullable=False),
    Column("mean_abs_pct_error", Float, nullable=False),
    Column("leakage_rows", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Discordant rows vs always-up for the exact skill test (ldtm_core.scoring.skill); NULL before revision 0013.
    Column("model_only_hits", Integer),
    Column("up_only_hits", Integer),
    # What produced the folds: the full model config's signature and the price range it read.
    Column("config_signature", String(64)),
    Column("data_start", Date),
    Column("data_end", Date),
    # The stored outcome this fold row came from (backtest_fold_results) and whether it was reused
    # rather than refitted; NULL before revision 0022.
    Column("fold_key", String(64)),
    Column("reused", Boolean),
    # Baselines on the fold's rows as revision 0020 stored them; since 0031 they are rows of
    # backtest_fold_baselines (these stay NULL on newer folds; nothing reads them).
    Column("persistence_hits", Integer),
    Column("persistence_model_only", Integer),
    Column("persistence_only", Integer),
    Column("trend_hits", Integer),
    Column("trend_model_only", Integer),
    Column("trend_only", Integer),
    # Test rows whose next-day close equals the run-date close: scored by nobody, left out of `n` and
    # every accuracy (revision 0026; NULL before: unknown).
    Column("ties", Integer),
    UniqueConstraint("backtest_id", "fold", name="uq_backtest_fold"),
    Index("ix_backtest_ticker", "ticker", "model_id"),
)

# Each gate baseline but always-up (the fold row's own columns) on a fold's test rows
# (ldtm_core.scoring.baselines): the rows it scored (ties out), its hits, and the discordant rows vs the
# model for the exact paired test; one row per (fold, baseline), so a new baseline needs no column
# (revision 0031, which copied the folds' persistence_* / trend_* columns of 0020 here).
backtest_fold_baselines = Table(
    "backtest_fold_baselines",
    metadata,
    Column("backtest_id", String(36), nullable=False),
    Column("fold", Integer, nullable=False),
    Column("baseline", String(32), nullable=False),
    Column("n", Integer, nullable=False),
    Column("hits", Integer, nullable=False),
    Column("model_only", Integer, nullable=False),  # model right, baseline wrong
    Column("base_only", Integer, nullable=False),  # baseline right, model wrong
    PrimaryKeyConstraint("backtest_id", "fold", "baseline", name="pk_backtest_fold_baselines"),
)

# A fold's outcome under its reuse key (ldtm_core.learning.fold_cache): the key hashes the config
# signature, the fingerprint of exactly the rows the fold trains/validates/tests on, the cutoff, the
# seed and the key of the fold whose weights it started from. Rows are immutable (same key, same result).
backtest_fold_results = Table(
    "backtest_fold_results",
    metadata,
    Column("fold_key", String(64), primary_key=True),
    Column("ticker", TICKER, nullable=False),
    Column("config_signature", String(64), nullable=False),
    Column("data_fingerprint", String(64), nullable=False),
    Column("cutoff", Date, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("parent_key", String(64)),
    Column("weights_path", Text),  # the fold's fitted weights, for a later fold to warm-start from
    Column("result_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_fold_results_ticker", "ticker", "config_signature"),
)

# One row per promotion-gate decision: the backtest it judged, so that backtest is never judged again
# (by the promotion sensor or `ldtm gate`) unless an operator forces it.
gate_decisions = Table(
    "gate_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("backtest_id", String(36), nullable=False),
    Column("model_id", Integer, ForeignKey("model_registry.id"), nullable=False),
    Column("ticker", TICKER, nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("decided_at", DateTime(timezone=True), nullable=False),
    # "pass" / "fail" / "insufficient evidence" and the whole report (GateReport.to_dict); revision 0023
    Column("decision", String(24)),
    Column("report_json", Text),
    Index("ix_gate_decisions_backtest", "backtest_id"),
)

# The trials ledger (revision 0025): every recipe (config signature) the evidence-policy gate
# judged on a ticker's folds, one row per (recipe, evidence): `evidence_key` hashes the folds' stored
# keys (the same folds give the same key), `cutoffs` lists the fold cutoffs (ISO dates, comma-separated)
# so overlapping folds can be found. `kind`: first deployment / recipe change (superiority claims,
# counted for the adjusted alpha) or refresh (a non-inferiority check, shown but not counted).
gate_trials = Table(
    "gate_trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ticker", TICKER, nullable=False),
    Column("config_signature", String(64), nullable=False),
    Column("evidence_key", String(64), nullable=False),
    Column("cutoffs", Text, nullable=False),
    Column("kind", String(24), nullable=False),
    Column("backtest_id", String(36), nullable=False),
    Column("model_id", Integer, ForeignKey("model_registry.id"), nullable=False),
    Column("trials", Integer, nullable=False),
    Column("alpha_adjusted", Float, nullable=False),
    Column("decision", String(24), nullable=False),
    Column("judged_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("ticker", "config_signature", "evidence_key", name="uq_gate_trials_evidence"),
    Index("ix_gate_trials_ticker", "ticker"),
)

# The ledger of universe verdicts (revision 0035): one row per (challenger recipe, evidence) judged by
# `ldtm gate universe` (accountability.gate.universe): its figures and the level it was judged at.
universe_trials = Table(
    "universe_trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("recipe", String(32), nullable=False),
    Column("config_signature", String(64), nullable=False),
    Column("evidence_key", String(64), nullable=False),
    Column("cutoffs", Text, nullable=False),
    Column("tickers", Integer, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("evenings", Integer, nullable=False),
    Column("difference", Float),
    Column("std_error", Float),
    Column("p_value", Float),
    Column("detectable", Float),
    Column("trials", Integer, nullable=False),
    Column("alpha_adjusted", Float, nullable=False),
    Column("decision", String(24), nullable=False),
    Column("judged_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("config_signature", "evidence_key", name="uq_universe_trials_evidence"),
)

# Price files the `files:<dir>` source has ingested, by path + content hash (written with their prices).
ingested_files = Table(
    "ingested_files",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("path", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("status", String(12), nullable=False),
    Column("tickers", Text),
    Column("rows", Integer, nullable=False),
    Column("written", Integer, nullable=False),
    Column("error", Text),
    Column("ingested_at", DateTime(timezone=True), nullable=False),
    # JSON {ticker: reason} of the tickers refused from the file (NULL before migration 0018).
    Column("refused", Text),
    CheckConstraint("status IN ('ok','partial','rejected')", name="ck_ingested_files_status"),
    UniqueConstraint("path", "sha256", name="uq_ingested_files_path_sha"),
)

# The stored features per (ticker, session): the reference recipe's (SPEC §3), one column each, named as
# the feature registry names them. A registered feature without a column is computed from the prices on
# read (data/feature_store), so adding one needs no migration. Rows are only ever replaced together with
# their ticker's `feature_sets` row, in one transaction.
FEATURE_COLUMNS = REFERENCE_FEATURES

features = Table(
    "features",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("date", Date, primary_key=True),
    *(Column(name, Float, nullable=False) for name in FEATURE_COLUMNS),
)

# One row per ticker: what its stored features were computed from (ldtm_core.data.feature_store).
feature_sets = Table(
    "feature_sets",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("fingerprint", String(255), nullable=False),
    Column("definition", String(255), nullable=False),
    Column("price_rows", Integer, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("warmup_rows", Integer, nullable=False),
    Column("first_date", Date),
    Column("last_date", Date),
    Column("built_at", DateTime(timezone=True), nullable=False),
)

# The `price_features` library (the tabular recipes' inputs) per (ticker, session), written by the
# `features` asset beside the reference features (revision 0036): `packed` holds the five bars and the
# library's values on that date (NaN in warm-up) as little-endian float64, in the order of its set's
# `columns`, so a library change needs no migration and a reader checks the bars it loaded against the
# stored ones (data/feature_store/library.py).
price_feature_rows = Table(
    "price_feature_rows",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("date", Date, primary_key=True),
    Column("packed", LargeBinary, nullable=False),
)

# One row per ticker: what its stored library rows were computed from, and by which definition.
price_feature_sets = Table(
    "price_feature_sets",
    metadata,
    Column("ticker", TICKER, primary_key=True),
    Column("fingerprint", String(255), nullable=False),
    Column("definition", String(255), nullable=False),
    Column("columns", Text, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("first_date", Date),
    Column("last_date", Date),
    Column("built_at", DateTime(timezone=True), nullable=False),
)

# The design of each shadow, fixed when it starts (revision 0027): the evenings it needs,
# the margin and power they were sized for, the champion it is compared with and its timeout. Changing
# LDTM_SHADOW_SESSIONS during a shadow changes nothing; a rollback of that champion ends the shadow.
shadow_designs = Table(
    "shadow_designs",
    metadata,
    Column("model_id", Integer, ForeignKey("model_registry.id"), primary_key=True),
    Column("ticker", TICKER, nullable=False),
    Column("champion_model_id", Integer, ForeignKey("model_registry.id"), nullable=False),
    Column("sessions", Integer, nullable=False),
    Column("margin_points", Float, nullable=False),
    Column("power", Float, nullable=False),
    Column("alpha", Float, nullable=False),
    Column("max_evenings", Integer, nullable=False),
    # The newest snapshot id when it started: published evenings after it count towards the timeout.
    Column("after_snapshot_id", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
)

# A dated universe (revision 0033; SPEC §2): each ticker's spans of membership, end_date NULL while it is
# still a member, loaded from a Qlib-style instruments file (`ldtm universe import`,
# ldtm_core.data.membership). No rows: every ticker of the configured universe counts as a member on
# every evening (today's list applied to the past, which the reports say).
universe_membership = Table(
    "universe_membership",
    metadata,
    Column("ticker", TICKER, nullable=False),
    Column("start_date", Date, nullable=False),
    Column("end_date", Date),
    Column("source", Text, nullable=False),
    Column("imported_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("ticker", "start_date", name="pk_universe_membership"),
    CheckConstraint("end_date IS NULL OR end_date >= start_date", name="ck_membership_span"),
)

# A pending horizon of a snapshot row that can never be filled (revision 0033): its ticker left the
# universe and its prices stop before the target date (fillback marks it, with the reason). The snapshot
# row is untouched and stays in the record; a price that arrives later still fills it (the mark goes).
unfillable_actuals = Table(
    "unfillable_actuals",
    metadata,
    Column("snapshot_id", Integer, ForeignKey("snapshots.id"), nullable=False),
    Column("horizon", String(12), nullable=False),
    Column("ticker", TICKER, nullable=False),
    Column("target_date", Date, nullable=False),
    Column("reason", Text, nullable=False),
    Column("marked_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("snapshot_id", "horizon", name="pk_unfillable_actuals"),
)
