"""One evening's forecasts of a submitted model, from a file to the record (SPEC §7's rows, chained and
receipted like a recipe's).

A file (CSV or Parquet) holds one row per (ticker, run_date, horizon) with an `expected_return`, the forecast
log return from the run date's close to the horizon's target close (as every recipe predicts), and/or, on the
next-day horizon, a `direction` (bullish / neutral / bearish). Given both, the direction must be the one the
return gives under the neutral band. Given only the direction, the row is a direction-only forecast: its
predicted prices are NULL (no price error is ever scored) and its next-day call is the direction. A horizon
other than next-day may be left out (no forecast there); next-day is required. The whole file is checked
before anything is written, and refused with an error naming the file, the row and the rule: a model
registered for the ticker and a member of the universe on the run date, each horizon at most once, finite
values, the run date a session whose close is stored. Then all its rows are written in one transaction
(hash-chained, anchored in the run log) and the evening's receipt is signed where receipts are configured:
nothing is half-written.

The cut-off: a forecast is live only if it arrives before the open of the session after its run date (less
LDTM_SUBMISSION_CUTOFF_MIN minutes), when the first price that could execute it (LDTM_SIGNAL_EXECUTION's
next_open; next_close trades later) is not yet known, nor any part of the next-day answer. A later one is
refused, or with `late=True` recorded as a replay: kept, never scored as live. A row already recorded for
(ticker, run date, model) is never replaced: the same values again are a no-op, other values are refused.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability.ledger import receipts, runlog
from ldtm_core.accountability.ledger.chain import write_rows_anchored
from ldtm_core.accountability.ledger.snapshots import DIRECTIONS, baseline_calls, classify_direction
from ldtm_core.accountability.submissions.external import require
from ldtm_core.config import Settings, setting_int
from ldtm_core.data.calendar import (
    MARKET_TZ,
    is_session,
    now,
    session_close,
    session_open,
    sessions_after,
    target_dates,
)
from ldtm_core.data.membership import load_membership
from ldtm_core.errors import InputError
from ldtm_core.horizons import BY_NAME, DIRECTION, HORIZONS
from ldtm_core.learning.price_windows import load_price_arrays, start_for
from ldtm_core.learning.registry import EXTERNAL
from ldtm_core.schema import snapshots
from ldtm_core.scoring.baselines import TREND_SESSIONS

REQUIRED = ("ticker", "run_date", "horizon")
FORECASTS = ("expected_return", "direction")  # one of them at least (module doc)
MAX_ROWS = 1_000_000  # a file past this is no evening's submission


class SubmissionError(InputError):
    """A submission refused as a whole: nothing of it was written."""


@dataclass
class SubmitResult:
    name: str
    run_id: str
    run_dates: list[dt.date]
    mode: str  # live, or replay for a late submission recorded with `late`
    rows_written: int = 0
    rows_existing: int = 0
    tickers: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)  # tickers the model is active for: its row publishes
    cutoff: dict[str, str] = field(default_factory=dict)  # {run date: its cut-off, New York}
    seconds: float = 0.0
    receipt: receipts.Receipt | None = None

    def summary(self) -> dict:
        return {
            "model": self.name,
            "run_dates": [d.isoformat() for d in self.run_dates],
            "mode": self.mode,
            "rows_written": self.rows_written,
            "rows_existing": self.rows_existing,
            "tickers": len(self.tickers),
            "published": self.published,
            "cutoff": self.cutoff,
            "receipt": self.receipt.path.name if self.receipt else None,
        }


def cutoff(run_date: dt.date) -> dt.datetime:
    """When live submissions for `run_date` close (UTC-aware): the next session's open, less
    LDTM_SUBMISSION_CUTOFF_MIN minutes."""
    return session_open(sessions_after(run_date, 1)) - dt.timedelta(
        minutes=setting_int("LDTM_SUBMISSION_CUTOFF_MIN") or 0
    )


def read_file(path: Path | str) -> pd.DataFrame:
    """The submission's rows (CSV or Parquet by suffix), columns checked; SubmissionError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise SubmissionError(f"submission {path}: no such file")
    try:
        if path.suffix.lower() == ".parquet":
            df = pd.read_parquet(path)
        elif path.suffix.lower() == ".csv":
            df = pd.read_csv(path, dtype={"ticker": str, "run_date": str, "horizon": str, "direction": str})
        else:
            raise SubmissionError(f"submission {path}: expected a .csv or .parquet file")
    except SubmissionError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's complaint, named with the file
        raise SubmissionError(f"submission {path}: cannot be read: {str(exc).splitlines()[0]}") from None
    df.columns = [str(c).strip().lower() for c in df.columns]
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing or not any(c in df.columns for c in FORECASTS):
        raise SubmissionError(
            f"submission {path}: missing column(s) {', '.join(missing or [' or '.join(FORECASTS)])} (expected "
            f"{', '.join(REQUIRED)} and {' and/or '.join(FORECASTS)})"
        )
    for c in FORECASTS:
        if c not in df.columns:
            df[c] = None
    extra = [c for c in df.columns if c not in (*REQUIRED, *FORECASTS)]
    if extra:
        raise SubmissionError(f"submission {path}: unknown column(s) {', '.join(extra)}")
    if df.empty:
        raise SubmissionError(f"submission {path}: no rows")
    if len(df) > MAX_ROWS:
        raise SubmissionError(f"submission {path}: {len(df):,} rows, more than {MAX_ROWS:,}")
    return df


def _row(path, i: int) -> str:
    return f"submission {path}, row {i + 2}"  # as a spreadsheet numbers a CSV: the header is row 1


def _parse(df: pd.DataFrame, path, registered, band: float) -> pd.DataFrame:
    """The rows as (ticker, run_date, horizon, r, direction), each checked; SubmissionError at the first bad."""
    out = []
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(df.to_dict("records")):
        where = _row(path, i)
        ticker = str(rec["ticker"]).strip().upper()
        if ticker not in registered:
            raise SubmissionError(f"{where}: {ticker!r} is not a ticker this model is registered for")
        try:
            run_date = pd.Timestamp(str(rec["run_date"]).strip()).date()
        except ValueError:
            raise SubmissionError(
                f"{where}: run_date {rec['run_date']!r} is not a date (YYYY-MM-DD)"
            ) from None
        horizon = str(rec["horizon"]).strip()
        if horizon not in BY_NAME:
            raise SubmissionError(f"{where}: horizon {horizon!r} is unknown (known: {', '.join(BY_NAME)})")
        given = rec["expected_return"]
        r = None
        if not (pd.isna(given) or (isinstance(given, str) and not given.strip())):  # blank: no return
            try:
                r = float(given)
            except (TypeError, ValueError):
                r = math.nan
            if not math.isfinite(r) or abs(r) > 5:  # e^5: a 148-fold move is no forecast
                raise SubmissionError(
                    f"{where}: expected_return {given!r} is not a finite log return within ±5"
                )
        key = (ticker, run_date, horizon)
        if key in seen:
            raise SubmissionError(
                f"{where}: duplicate of row {seen[key] + 2} ({ticker} {run_date} {horizon})"
            )
        seen[key] = i
        direction = rec.get("direction")
        direction = None if direction is None or pd.isna(direction) else str(direction).strip().lower()
        if direction is not None and horizon != DIRECTION.name:
            raise SubmissionError(f"{where}: a direction is given for the {DIRECTION.name} horizon only")
        if direction is not None and direction not in DIRECTIONS:
            raise SubmissionError(f"{where}: direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
        if r is None and direction is None:
            raise SubmissionError(f"{where}: gives neither an expected_return nor a direction")
        if direction is not None and r is not None:
            implied = str(classify_direction(math.exp(r), 1.0, band))
            if implied != direction:
                raise SubmissionError(
                    f"{where}: direction {direction} contradicts expected_return {r:g} ({implied} under the "
                    f"{band:g} % neutral band): the record scores the direction the return gives"
                )
        out.append((ticker, run_date, horizon, math.nan if r is None else r, direction, i))
    rows = pd.DataFrame(out, columns=["ticker", "run_date", "horizon", "r", "direction", "line"])
    for (ticker, run_date), group in rows.groupby(["ticker", "run_date"], sort=False):
        if DIRECTION.name not in set(group["horizon"]):
            raise SubmissionError(
                f"{_row(path, int(group['line'].iloc[0]))}: {ticker} {run_date} lacks the {DIRECTION.name} "
                "horizon (an expected_return or a direction)"
            )
    return rows


def submit(
    engine: Engine,
    settings: Settings,
    name: str,
    path: Path | str,
    *,
    late: bool = False,
    at: dt.datetime | None = None,
) -> SubmitResult:
    """Check submission `path` of external model `name` whole, then record it (see module doc). `at`: the
    arrival time (default now; a simulation passes its clock)."""
    t0 = time.perf_counter()
    arrived = at or now()
    registered = require(engine, name)
    df = read_file(path)
    rows = _parse(df, path, registered, settings.neutral_band_pct)
    run_dates = sorted(set(rows["run_date"]))
    membership = load_membership(engine)
    live = True
    cut = {}
    for day in run_dates:
        if not is_session(day):
            raise SubmissionError(f"submission {path}: run date {day} is not an XNYS trading session")
        cut[day] = cutoff(day)
        if arrived >= cut[day]:
            if not late:
                raise SubmissionError(
                    f"submission {path}: run date {day} closed to live submissions at "
                    f"{cut[day].astimezone(MARKET_TZ):%Y-%m-%d %H:%M} New York (arrived "
                    f"{arrived.astimezone(MARKET_TZ):%Y-%m-%d %H:%M}); record it as late (--late: a replay, "
                    "never scored as live) or not at all"
                )
            live = False
    for ticker, day in rows[["ticker", "run_date"]].drop_duplicates().itertuples(index=False):
        if not membership.is_member(ticker, day):
            raise SubmissionError(f"submission {path}: {ticker} on {day}: {membership.why_not(ticker, day)}")
        if registered[ticker].status not in ("candidate", "active"):
            raise SubmissionError(
                f"submission {path}: {name} for {ticker} is {registered[ticker].status}: it submits no more"
            )
    tickers = sorted(set(rows["ticker"]))
    arrays = load_price_arrays(engine, tickers, start_for(run_dates[0], TREND_SESSIONS + 2), run_dates[-1])
    result = SubmitResult(name, str(uuid.uuid4()), run_dates, "live" if live else "replay")
    result.cutoff = {d.isoformat(): f"{c.astimezone(MARKET_TZ):%Y-%m-%d %H:%M}" for d, c in cut.items()}
    records = _records(rows, arrays, registered, settings, result, path, arrived)
    _refuse_changes(engine, records, path)
    receipt_settings = receipts.ready()  # checked before anything is written
    runlog.start(engine, "submit", run_dates[-1], tickers, run_id=result.run_id)
    try:
        result.rows_written, result.rows_existing, _ = write_rows_anchored(engine, records)
        result.receipt = receipts.after_predict(engine, receipt_settings)
    except BaseException as exc:
        runlog.finish(engine, result.run_id, "failed", message=runlog.failure_message(exc))
        raise
    result.tickers = tickers
    result.published = sorted({r["ticker"] for r in records if r["model_status"] == "active"})
    result.seconds = round(time.perf_counter() - t0, 4)
    runlog.finish(
        engine, result.run_id, "ok", n_rows=result.rows_written, summary=result.summary(), tickers=tickers
    )
    return result


def _records(rows, arrays, registered, settings, result, path, arrived) -> list[dict]:
    """The snapshot rows: the forecast as prices (close · e^r), the run date's close and the baselines'
    calls from the stored closes, model_status `external` until the model is active for the ticker."""
    days = np.array(sorted({np.datetime64(d, "D") for d in rows["run_date"]}))
    targets = {h: dict(zip(days, d, strict=True)) for h, d in target_dates(days).items()}
    keys = ["ticker", "run_date"]
    wide = rows.pivot(index=keys, columns="horizon", values="r").reindex(columns=[h.name for h in HORIZONS])
    said = rows[rows["horizon"] == DIRECTION.name].set_index(keys)["direction"]
    created = arrived.astimezone(dt.UTC)
    out = []
    for (ticker, run_date), r in wide.iterrows():
        series = arrays.get(ticker)
        day = np.datetime64(run_date, "D")
        at = -1 if series is None else int(np.searchsorted(series["date"], day, side="right")) - 1
        if at < 0 or series["date"][at] != day:
            raise SubmissionError(f"submission {path}: {ticker} has no stored close on {run_date}")
        close = float(series["close"][at])
        rec = registered[ticker]
        # No return for a horizon: no predicted price (NULL); the next-day call is then the direction given.
        preds = {
            h.col("pred"): None if pd.isna(r[h.name]) else close * math.exp(float(r[h.name]))
            for h in HORIZONS
        }
        direction = said.get((ticker, run_date))
        if preds[DIRECTION.col("pred")] is not None:
            direction = str(
                classify_direction(preds[DIRECTION.col("pred")], close, settings.neutral_band_pct)
            )
        out.append(
            {
                "ticker": ticker,
                "run_date": run_date,
                "run_date_close": close,
                "prev_close": float(series["close"][at - 1]) if at > 0 else None,
                "model_id": rec.id,
                "model_version": rec.snapshot_version,
                "model_status": "active" if rec.status == "active" else EXTERNAL,
                "mode": result.mode,
                **preds,
                "direction_pred": direction,
                # The answer was known when it arrived (a late submission's may be): never out of sample.
                "in_sample": arrived >= session_close(pd.Timestamp(targets[DIRECTION.name][day]).date()),
                "neutral_band_pct": settings.neutral_band_pct,
                **{h.col("date"): pd.Timestamp(targets[h.name][day]).date() for h in HORIZONS},
                "run_id": result.run_id,
                "created_at": created,
                "baseline_calls": baseline_calls(series, run_date),
            }
        )
    return out


def _same(old: float | None, new: float | None) -> bool:
    return (old is None) == (new is None) and (old is None or math.isclose(old, new, rel_tol=1e-12))


def _refuse_changes(engine: Engine, records: list[dict], path) -> None:
    """A row already recorded for (ticker, run date, version) with other forecasts refuses the file."""
    s = snapshots.c
    keys = {(r["ticker"], r["run_date"], r["model_version"]): r for r in records}
    cols = [s.ticker, s.run_date, s.model_version, s.direction_pred, *(s[h.col("pred")] for h in HORIZONS)]
    stmt = select(*cols).where(
        s.model_id.in_(sorted({r["model_id"] for r in records})),
        s.run_date.in_(sorted({r["run_date"] for r in records})),
    )
    with engine.connect() as conn:
        for row in conn.execute(stmt).mappings():
            new = keys.get((row["ticker"], row["run_date"], row["model_version"]))
            if new is not None and (
                row["direction_pred"] != new["direction_pred"]
                or any(not _same(row[h.col("pred")], new[h.col("pred")]) for h in HORIZONS)
            ):
                raise SubmissionError(
                    f"submission {path}: {row['ticker']} {row['run_date']} was already submitted with other "
                    "forecasts; a recorded forecast is never replaced"
                )
