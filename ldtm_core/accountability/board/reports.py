"""Read-only views of the application database for people who read forecasts (the dashboard).

Every function here only reads; none formats SQL with user text (tickers pass `validate_ticker` and are
bound parameters). The dashboard calls these and nothing else, so it shows the same numbers as the CLI.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine, func, select

from ldtm_core.accountability.gate.gate import GateThresholds, evaluate, newest_backtest
from ldtm_core.accountability.gate.gate import _fmt as format_criterion
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.data.universe import validate_ticker
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.learning.registry import UNPUBLISHED, history, list_models
from ldtm_core.schema import registry_events, run_log, snapshots
from ldtm_core.scoring.skill import SkillTest, discordant_counts

ROLLING_DAYS = 30


def tickers_with_snapshots(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(select(snapshots.c.ticker).distinct().order_by(snapshots.c.ticker)).scalars()
        )


def snapshot_range(engine: Engine, ticker: str | None = None) -> tuple[dt.date, dt.date] | None:
    """First and last run date of the stored snapshots (of one ticker when given)."""
    stmt = select(func.min(snapshots.c.run_date), func.max(snapshots.c.run_date))
    if ticker is not None:
        stmt = stmt.where(snapshots.c.ticker == validate_ticker(ticker))
    with engine.connect() as conn:
        lo, hi = conn.execute(stmt).one()
    if lo is None:
        return None
    return pd.Timestamp(lo).date(), pd.Timestamp(hi).date()


def ticker_predictions(
    engine: Engine, ticker: str, start: dt.date | None = None, end: dt.date | None = None
) -> pd.DataFrame:
    """One row per evening of `ticker`: what was published (the first row recorded that evening).

    Columns: run_date, run_date_close, model_version, mode, direction_pred, in_sample, gated (False:
    predicted by a candidate that never passed the gate), per horizon `{h}_date`, `{h}_pred`,
    `{h}_actual`, `{h}_pct_error`, and `correct` / `went_up` for next day (None until filled).
    """
    ticker = validate_ticker(ticker)
    s = snapshots.c
    cols = [
        s.id,
        s.run_date,
        s.run_date_close,
        s.model_version,
        s.model_status,
        s.mode,
        s.direction_pred,
        s.in_sample,
    ]
    for h in HORIZONS:
        cols += [s[f"{h}_date"], s[f"{h}_pred"], s[f"{h}_actual"], s[f"{h}_pct_error"]]
    cols.append(s.next_day_direction_correct)
    stmt = select(*cols).where(
        s.ticker == ticker, s.model_status.not_in(UNPUBLISHED)
    )  # a shadow row is never published
    if start is not None:
        stmt = stmt.where(s.run_date >= start)
    if end is not None:
        stmt = stmt.where(s.run_date <= end)
    with engine.connect() as conn:
        rows = conn.execute(stmt.order_by(s.run_date, s.id)).mappings().all()
    df = pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in cols])
    df = df.drop_duplicates("run_date", keep="first").drop(columns="id").reset_index(drop=True)
    for c in ["run_date"] + [f"{h}_date" for h in HORIZONS]:
        df[c] = pd.to_datetime(df[c]).dt.date
    df["in_sample"] = df["in_sample"].astype(bool)
    df.insert(df.columns.get_loc("model_status"), "gated", df.pop("model_status") == "active")
    df = df.rename(columns={"next_day_direction_correct": "correct"})
    filled = df["next_day_actual"].notna()
    df["correct"] = df["correct"].where(filled, None)
    df["went_up"] = (df["next_day_actual"] > df["run_date_close"]).where(filled, None)
    return df


def counted_predictions(
    predictions: pd.DataFrame, include_in_sample: bool = False, include_ungated: bool = False
) -> pd.DataFrame:
    """The evenings an accuracy figure counts, with the leaderboard's defaults: in-sample replays (the
    model's training data reached the next-day target) and ungated evenings (a candidate predicted) are
    left out unless asked for."""
    keep = pd.Series(True, index=predictions.index)
    if not include_in_sample:
        keep &= ~predictions["in_sample"]
    if not include_ungated:
        keep &= predictions["gated"]
    return predictions[keep]


def scored(predictions: pd.DataFrame) -> pd.DataFrame:
    """The filled evenings a direction figure scores: a tie (next-day close = run-date close) is nobody's
    hit or miss (fillback.direction_hit), as on the leaderboard."""
    return predictions[
        predictions["next_day_actual"].notna()
        & (predictions["next_day_actual"] != predictions["run_date_close"])
    ]


def rolling_accuracy(predictions: pd.DataFrame, days: int = ROLLING_DAYS) -> pd.DataFrame:
    """Next-day accuracy of the model and of always-up over the `days` calendar days ending at each
    scored evening (the leaderboard's window, evaluated at every evening)."""
    filled = scored(predictions)
    columns = ["run_date", "n", "model", "always_up"]
    if filled.empty:
        return pd.DataFrame(columns=columns)
    dates = pd.to_datetime(filled["run_date"]).to_numpy()
    right = filled["correct"].astype(bool).to_numpy()
    up = filled["went_up"].astype(bool).to_numpy()
    out = []
    for i, day in enumerate(dates):
        inside = (dates > day - np.timedelta64(days, "D")) & (dates <= day)
        n = int(inside.sum())
        out.append((filled["run_date"].iloc[i], n, right[inside].mean(), up[inside].mean()))
    return pd.DataFrame(out, columns=columns)


def ticker_skill(predictions: pd.DataFrame) -> SkillTest:
    filled = scored(predictions)
    return discordant_counts(
        filled["correct"].astype(bool).to_numpy(), filled["went_up"].astype(bool).to_numpy()
    )


def evening_cohorts(
    engine: Engine, start: dt.date | None = None, end: dt.date | None = None, include_ungated: bool = False
) -> pd.DataFrame:
    """Bullish / neutral / bearish counts across all tickers per evening (first row per ticker and
    evening); an evening published by a candidate (ungated) counts only with `include_ungated`."""
    s = snapshots.c
    stmt = select(s.id, s.ticker, s.run_date, s.direction_pred, s.model_status).where(
        s.model_status.not_in(UNPUBLISHED)
    )
    if start is not None:
        stmt = stmt.where(s.run_date >= start)
    if end is not None:
        stmt = stmt.where(s.run_date <= end)
    with engine.connect() as conn:
        df = pd.DataFrame(
            conn.execute(stmt.order_by(s.id)).all(),
            columns=["id", "ticker", "run_date", "direction", "model_status"],
        )
    df = df.drop_duplicates(["ticker", "run_date"], keep="first")
    if not include_ungated:
        df = df[df["model_status"] == "active"]
    df["run_date"] = pd.to_datetime(df["run_date"]).dt.date
    counts = df.groupby(["run_date", "direction"]).size().unstack(fill_value=0)
    for c in ("bullish", "neutral", "bearish"):
        if c not in counts:
            counts[c] = 0
    return counts[["bullish", "neutral", "bearish"]].reset_index()


def model_timeline(engine: Engine, ticker: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(models, registry events) of a ticker: every registered model and every status transition."""
    ticker = validate_ticker(ticker)
    models = pd.DataFrame(
        [
            {
                "model_id": m.id,
                "status": m.status,
                "version": m.version or "",
                "profile": m.profile,
                "trained_on": m.trained_on_date,
                "val_loss": m.val_loss,
            }
            for m in list_models(engine, ticker)
        ],
        columns=["model_id", "status", "version", "profile", "trained_on", "val_loss"],
    )
    events = pd.DataFrame(
        [
            {
                "at": pd.Timestamp(e.at),
                "model_id": e.model_id,
                "from": e.from_status or "",
                "to": e.to_status,
                "reason": e.reason,
            }
            for e in history(engine, ticker)
        ],
        columns=["at", "model_id", "from", "to", "reason"],
    )
    return models, events


@dataclass
class GateView:
    """The newest gate decision of a ticker, and its backtest's figures re-evaluated."""

    model_id: int
    at: dt.datetime
    decision: str  # the recorded event text
    backtest_id: str | None
    figures: dict = field(default_factory=dict)
    criteria: list = field(default_factory=list)

    def criteria_table(self) -> list[dict]:
        """Each criterion as the gate prints it: value, what it needs, and whether it is met."""
        return [
            {
                "criterion": c.name,
                "value": format_criterion(c.name, c.value),
                "needs": f"{c.op} {format_criterion(c.name, c.threshold)}",
                "ok": c.passed,
            }
            for c in self.criteria
        ]


def last_gate_report(engine: Engine, ticker: str) -> GateView | None:
    """The newest registry event written by the gate (pass or fail), with the pooled backtest figures
    and the criteria as the gate would judge them now (thresholds from the environment)."""
    ticker = validate_ticker(ticker)
    e = registry_events.c
    stmt = (
        select(e.model_id, e.at, e.reason)
        .where(e.ticker == ticker, e.reason.like("gate %"))
        .order_by(e.id.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        row = conn.execute(stmt).first()
    if row is None:
        return None
    view = GateView(model_id=row.model_id, at=row.at, decision=row.reason, backtest_id=None)
    found = newest_backtest(engine, row.model_id)
    if found is not None:
        view.backtest_id, folds = found
        view.figures, view.criteria = evaluate(folds, GateThresholds.from_env())
    return view


def recent_runs(engine: Engine, limit: int = 50) -> pd.DataFrame:
    """The newest `run_log` rows, newest first, with their summaries decoded."""
    r = run_log.c
    stmt = select(
        r.run_id,
        r.kind,
        r.status,
        r.run_date,
        r.started_at,
        r.finished_at,
        r.n_rows,
        r.tickers,
        r.summary_json,
        r.message,
    ).order_by(r.id.desc())
    with engine.connect() as conn:
        rows = conn.execute(stmt.limit(limit)).mappings().all()
    df = pd.DataFrame([dict(x) for x in rows], columns=[c.name for c in stmt.selected_columns])
    df["duration_s"] = [
        (pd.Timestamp(f) - pd.Timestamp(s)).total_seconds() if f is not None else None
        for s, f in zip(df["started_at"], df["finished_at"], strict=True)
    ]
    df["summary"] = [json.loads(x) if x else {} for x in df.pop("summary_json")]
    return df


def latest_evening(engine: Engine) -> dict | None:
    """The newest snapshot evening: date, rows, tickers, mode(s), its cohort (gated rows) and the
    ungated tickers (predicted by a candidate) beside it."""
    rng = snapshot_range(engine)
    if rng is None:
        return None
    day = rng[1]
    cohorts = evening_cohorts(engine, day, day)
    with engine.connect() as conn:
        rows = conn.execute(
            select(snapshots.c.ticker, snapshots.c.mode, snapshots.c.model_status).where(
                snapshots.c.run_date == day, snapshots.c.model_status.not_in(UNPUBLISHED)
            )
        ).all()
    row = cohorts.iloc[0] if len(cohorts) else pd.Series(0, index=["bullish", "neutral", "bearish"])
    return {
        "run_date": day,
        "rows": len(rows),
        "tickers": len({r.ticker for r in rows}),
        "modes": sorted({r.mode for r in rows}),
        "cohort": row[["bullish", "neutral", "bearish"]].astype(int).to_dict(),
        "ungated": sorted({r.ticker for r in rows if r.model_status != "active"}),
    }


def pending_fillback(engine: Engine) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fills ready now, rows still waiting per ticker and horizon) — the fillback dry run writes nothing."""
    ready = fillback(engine, dry_run=True).pending
    ready_df = pd.DataFrame(
        [(p.ticker, p.run_date, p.horizon, p.target_date, p.actual) for p in ready],
        columns=["ticker", "run_date", "horizon", "target_date", "actual"],
    )
    s = snapshots.c
    waiting = []
    with engine.connect() as conn:
        for h in HORIZONS:
            q = select(s.ticker, func.count()).where(s[f"{h}_actual"].is_(None)).group_by(s.ticker)
            waiting += [(t, h, n) for t, n in conn.execute(q).all()]
    waiting_df = pd.DataFrame(waiting, columns=["ticker", "horizon", "rows"])
    if not waiting_df.empty:
        waiting_df = waiting_df.pivot(index="ticker", columns="horizon", values="rows").fillna(0).astype(int)
        waiting_df = waiting_df.reindex(columns=list(HORIZONS), fill_value=0).reset_index()
    return ready_df, waiting_df


def audit_status(engine: Engine) -> pd.DataFrame:
    """Per ticker: snapshot rows and whether its hash chain verifies (with the first problem found)."""
    report = verify(engine)
    with engine.connect() as conn:
        counts = dict(
            conn.execute(select(snapshots.c.ticker, func.count()).group_by(snapshots.c.ticker)).all()
        )
    first_problem: dict[str, str] = {}
    for p in report.problems:
        first_problem.setdefault(p.ticker, f"{p.run_date} {p.model_version}: {p.what}")
    return pd.DataFrame(
        [
            {
                "ticker": t,
                "rows": int(n),
                "chain": "broken" if t in first_problem else "intact",
                "problem": first_problem.get(t, ""),
            }
            for t, n in sorted(counts.items())
        ],
        columns=["ticker", "rows", "chain", "problem"],
    )
