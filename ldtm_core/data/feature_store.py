"""Stored features (SPEC §3): the `features` table, the fingerprint of the prices they came from, and
the rule every reader follows.

One source of truth: each ticker's stored feature rows carry (in `feature_sets`) the fingerprint of the
prices they were computed from. A reader uses the stored rows only when that fingerprint equals the
fingerprint of the prices as they are now; otherwise it recomputes from prices and says why (the
`reason` of a FeatureRead, and the `ldtm.features` logger). `fingerprint()` and
`corporate_actions_applied()` are the one place that defines "the same prices": extend them there.

Storage is a table in the application database rather than Parquet in the artifact store: the rows and
their fingerprint are replaced in one transaction (a reader never sees half a rebuild), inference reads
every ticker's window with one query, and backups cover it. Measured in docs/performance.md.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, delete, insert, select

from ldtm_core.data.corporate_actions import adjust_frame, load_actions
from ldtm_core.data.features import FEATURE_NAMES, WARMUP_ROWS, compute_features
from ldtm_core.data.price_gaps import max_gap_sessions, missing_sessions
from ldtm_core.data.prices import load_prices
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import is_postgres, run_in_transaction
from ldtm_core.schema import FEATURE_COLUMNS, feature_sets, features

log = logging.getLogger("ldtm.features")

# Stored rows are only valid for the feature code that wrote them: a change of names or warm-up
# (bump the number for any change of a formula) makes every stored set stale.
FEATURE_DEFINITION = f"ldtm-features-1:{','.join(FEATURE_NAMES)}:warmup={WARMUP_ROWS}"
NO_ACTIONS = "none"
BAR_FIELDS = ("open", "high", "low", "close", "volume")
assert tuple(FEATURE_COLUMNS) == FEATURE_NAMES, "schema.FEATURE_COLUMNS must follow features.FEATURE_NAMES"


# --- the fingerprint ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PriceFingerprint:
    """What a ticker's feature rows were computed from: row count, first/last date, a hash of the bars,
    and the corporate actions applied to the series."""

    rows: int
    first_date: dt.date | None
    last_date: dt.date | None
    bars_sha256: str
    corporate_actions: str = NO_ACTIONS
    # The holes features restart after (price_gaps), as "<max gap>:<count>"; "" for none, which keeps the
    # token of a gap-free series as it was before the rule (stored sets and fold keys stay valid).
    gaps: str = ""

    @property
    def token(self) -> str:
        gaps = f";gaps={self.gaps}" if self.gaps else ""
        return (
            f"rows={self.rows};first={self.first_date};last={self.last_date};"
            f"bars={self.bars_sha256};ca={self.corporate_actions}{gaps}"
        )

    @property
    def short(self) -> str:
        return f"{self.rows} rows to {self.last_date}, bars {self.bars_sha256[:12]}, actions {self.corporate_actions}"

    @classmethod
    def from_token(cls, token: str) -> PriceFingerprint:
        parts = dict(p.split("=", 1) for p in token.split(";"))

        def day(value: str) -> dt.date | None:
            return None if value == "None" else dt.date.fromisoformat(value)

        return cls(
            rows=int(parts["rows"]),
            first_date=day(parts["first"]),
            last_date=day(parts["last"]),
            bars_sha256=parts["bars"],
            corporate_actions=parts["ca"],
            gaps=parts.get("gaps", ""),
        )


def fingerprint(prices: pd.DataFrame, corporate_actions: Sequence[tuple] = ()) -> PriceFingerprint:
    """The fingerprint of one ticker's price frame (date, open, high, low, close, volume).

    The hash covers the dates and all five bar fields, not only closes: every one of them is a feature,
    so a revised volume makes stored features stale as surely as a revised close. `corporate_actions`
    are the actions applied to the series (see corporate_actions_applied).
    """
    df = prices.sort_values("date") if len(prices) else prices
    digest = hashlib.sha256()
    if len(df):
        days = pd.to_datetime(df["date"]).to_numpy().astype("datetime64[D]").astype("<i8")
        bars = np.ascontiguousarray(
            np.stack([df[f].to_numpy(dtype=np.float64) for f in BAR_FIELDS], 1), "<f8"
        )
        digest.update(days.tobytes())
        digest.update(bars.tobytes())
    actions = NO_ACTIONS
    if corporate_actions:
        actions = hashlib.sha256(repr(sorted(map(tuple, corporate_actions))).encode()).hexdigest()[:16]
    first = pd.Timestamp(df["date"].iloc[0]).date() if len(df) else None
    last = pd.Timestamp(df["date"].iloc[-1]).date() if len(df) else None
    # Features restart after a long hole: which holes count (the setting) is part of what they came from.
    limit = max_gap_sessions()
    holes = int((missing_sessions(df["date"]) > limit).sum()) if len(df) else 0
    gaps = f"{limit}:{holes}" if holes else ""
    return PriceFingerprint(len(df), first, last, digest.hexdigest(), actions, gaps)


def corporate_actions_applied(conn_or_engine: Connection | Engine, ticker: str) -> tuple[tuple, ...]:
    """The corporate actions applied to `ticker`'s price series, as (ex_date, factor, kind) tuples: the
    recorded ones (load_prices applies them all), so recording an action makes stored features stale."""
    actions = load_actions(conn_or_engine, [ticker]).get(ticker, [])
    return tuple((a.ex_date.isoformat(), round(a.factor, 12), a.kind) for a in actions)


def current_fingerprint(engine: Engine, ticker: str, prices: pd.DataFrame) -> PriceFingerprint:
    return fingerprint(prices, corporate_actions_applied(engine, ticker))


# --- stored sets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSet:
    ticker: str
    fingerprint: PriceFingerprint
    definition: str
    price_rows: int
    rows: int
    warmup_rows: int
    first_date: dt.date | None
    last_date: dt.date | None
    built_at: dt.datetime


def stored_sets(engine: Engine, tickers: Sequence[str] | None = None) -> dict[str, StoredSet]:
    stmt = select(feature_sets)
    if tickers is not None:
        stmt = stmt.where(feature_sets.c.ticker.in_([validate_ticker(t) for t in tickers]))
    with engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    return {
        r["ticker"]: StoredSet(
            ticker=r["ticker"],
            fingerprint=PriceFingerprint.from_token(r["fingerprint"]),
            definition=r["definition"],
            price_rows=r["price_rows"],
            rows=r["rows"],
            warmup_rows=r["warmup_rows"],
            first_date=r["first_date"],
            last_date=r["last_date"],
            built_at=r["built_at"],
        )
        for r in rows
    }


def stale_reason(stored: StoredSet | None, current: PriceFingerprint) -> str | None:
    """None when the stored set was computed from exactly these prices by this feature code; else why not."""
    if stored is None:
        return "no stored features"
    if stored.definition != FEATURE_DEFINITION:
        return f"stored features come from another feature definition ({stored.definition})"
    was = stored.fingerprint
    if was == current:
        return None
    if (was.rows, was.last_date) != (current.rows, current.last_date):
        return (
            f"prices changed since the features were built: {was.rows} rows to {was.last_date}, "
            f"now {current.rows} rows to {current.last_date}"
        )
    if was.corporate_actions != current.corporate_actions:
        return f"corporate actions changed ({was.corporate_actions} -> {current.corporate_actions})"
    if was.gaps != current.gaps:
        return f"the price gaps features restart after changed ({was.gaps or 'none'} -> {current.gaps or 'none'})"
    return f"a stored bar was revised since the features were built (bars hash {was.bars_sha256[:12]} -> {current.bars_sha256[:12]})"


def read_stored(
    engine: Engine, ticker: str, start: dt.date | None = None, end: dt.date | None = None
) -> pd.DataFrame:
    """Stored feature rows of one ticker as a frame indexed by date (like compute_features)."""
    ticker = validate_ticker(ticker)
    stmt = select(features.c.date, *(features.c[c] for c in FEATURE_COLUMNS)).where(
        features.c.ticker == ticker
    )
    if start is not None:
        stmt = stmt.where(features.c.date >= start)
    if end is not None:
        stmt = stmt.where(features.c.date <= end)
    with engine.connect() as conn:
        rows = conn.execute(stmt.order_by(features.c.date)).all()
    frame = pd.DataFrame(rows, columns=["date", *FEATURE_COLUMNS])
    dates = pd.to_datetime(frame["date"]).dt.date if len(frame) else frame["date"]
    out = frame[list(FEATURE_COLUMNS)].astype(np.float64)
    out.index = pd.Index(dates.to_numpy(), name="date")
    return out


def _copy_out(conn: Connection, query: str, params: dict) -> io.StringIO:
    """PostgreSQL COPY of a bound query to CSV text (4x faster than fetching rows through the driver)."""
    with conn.connection.driver_connection.cursor() as cur:
        sql = cur.mogrify(query, params).decode()  # the driver binds the parameters
        buf = io.StringIO()
        cur.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", buf)
    buf.seek(0)
    return buf


def _split(df: pd.DataFrame, tickers: list[str], columns: list[str]) -> dict[str, pd.DataFrame]:
    out = {t: g[columns].reset_index(drop=True) for t, g in df.groupby("ticker", sort=False)}
    return {t: out.get(t, pd.DataFrame(columns=columns)) for t in tickers}


def load_prices_bulk(engine: Engine, tickers: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Like prices.load_prices (date objects, sorted), through COPY on PostgreSQL: a build reads every
    bar of the universe, and that read is most of its time."""
    tickers = [validate_ticker(t) for t in tickers]
    if not tickers or not is_postgres(engine):
        return {t: f[["date", *BAR_FIELDS]] for t, f in load_prices(engine, tickers).items()}
    query = (
        "SELECT ticker, date, open, high, low, close, volume FROM prices "
        "WHERE ticker = ANY(%(tickers)s) ORDER BY ticker, date"
    )
    with engine.connect() as conn:
        buf = _copy_out(conn, query, {"tickers": tickers})
    df = pd.read_csv(buf, names=["ticker", "date", *BAR_FIELDS], dtype={"ticker": str}, keep_default_na=False)
    df["date"] = df["date"].to_numpy(dtype="datetime64[D]").astype(object)  # datetime.date, like load_prices
    actions = load_actions(engine, tickers)  # the same adjusted series as load_prices
    return {
        t: adjust_frame(f, actions.get(t, [])) for t, f in _split(df, tickers, ["date", *BAR_FIELDS]).items()
    }


def _stored_arrays(
    engine: Engine, tickers: list[str], start: dt.date | None, end: dt.date | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{ticker: (dates datetime64[D], values [N, 11])} of stored rows within [start, end]; one read, no
    per-ticker pandas work (inference calls this every evening for the whole universe)."""
    columns = ["ticker", "date", *FEATURE_COLUMNS]
    if is_postgres(engine):
        query = f"SELECT {', '.join(columns)} FROM features WHERE ticker = ANY(%(tickers)s)"  # noqa: S608 - constant column names
        query += " AND date >= %(start)s" if start is not None else ""
        query += " AND date <= %(end)s" if end is not None else ""
        with engine.connect() as conn:
            buf = _copy_out(
                conn, query + " ORDER BY ticker, date", {"tickers": tickers, "start": start, "end": end}
            )
        df = pd.read_csv(buf, names=columns, dtype={"ticker": str}, keep_default_na=False)
        names, dates = df["ticker"].to_numpy(), df["date"].to_numpy(dtype="datetime64[D]")
        values = df[list(FEATURE_COLUMNS)].to_numpy(dtype=np.float64)
    else:
        stmt = select(*(features.c[c] for c in columns)).where(features.c.ticker.in_(tickers))
        if start is not None:
            stmt = stmt.where(features.c.date >= start)
        if end is not None:
            stmt = stmt.where(features.c.date <= end)
        with engine.connect() as conn:
            rows = conn.execute(stmt.order_by(features.c.ticker, features.c.date)).all()
        names = np.array([r[0] for r in rows], dtype=object)
        dates = np.array([r[1] for r in rows], dtype="datetime64[D]")
        values = np.array([r[2:] for r in rows], dtype=np.float64).reshape(len(rows), len(FEATURE_COLUMNS))
    out = {}
    bounds = np.flatnonzero(names[1:] != names[:-1]) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(names)], strict=True):
        if hi > lo:
            out[str(names[lo])] = (dates[lo:hi], values[lo:hi])
    return out


def load_stored_bulk(
    engine: Engine, tickers: Sequence[str], start: dt.date | None = None, end: dt.date | None = None
) -> dict[str, pd.DataFrame]:
    """Stored feature rows of many tickers (dates within [start, end]) with one read: {ticker: frame
    indexed by date objects, like read_stored}."""
    tickers = [validate_ticker(t) for t in tickers]
    arrays = _stored_arrays(engine, tickers, start, end) if tickers else {}
    empty = (np.empty(0, "datetime64[D]"), np.empty((0, len(FEATURE_COLUMNS))))
    out = {}
    for t in tickers:
        dates, values = arrays.get(t, empty)
        out[t] = pd.DataFrame(
            values, columns=list(FEATURE_COLUMNS), index=pd.Index(dates.astype(object), name="date")
        )
    return out


# --- the read rule -------------------------------------------------------------------------------------


@dataclass
class FeatureRead:
    """The features a reader got and where they came from: `store`, or `recomputed` with the reason."""

    ticker: str
    frame: pd.DataFrame
    source: str
    reason: str = ""
    fingerprint: PriceFingerprint | None = None

    def describe(self) -> str:
        return "stored" if self.source == "store" else f"recomputed ({self.reason})"


def prices_and_features(
    engine: Engine, ticker: str, end: dt.date | None = None
) -> tuple[pd.DataFrame, FeatureRead]:
    """One ticker's prices up to `end` and its features: stored when the fingerprint of the whole price
    series matches the stored set's, else recomputed from these prices (logged with the reason).

    Features at t use nothing after t, so stored rows up to `end` equal a recomputation on the prices
    up to `end`; the fingerprint is always taken over the whole series.
    """
    ticker = validate_ticker(ticker)
    whole = load_prices(engine, [ticker])[ticker]  # every price column, as callers had it before
    current = current_fingerprint(engine, ticker, whole)
    prices = whole if end is None else whole[whole["date"] <= end].reset_index(drop=True)
    reason = stale_reason(stored_sets(engine, [ticker]).get(ticker), current)
    if reason is None:
        stored = load_stored_bulk(engine, [ticker], end=end)[ticker]
        return prices, FeatureRead(ticker, stored, "store", "", current)
    if prices.empty:  # nothing to compute from; the caller reports "no prices"
        empty = pd.DataFrame(columns=list(FEATURE_COLUMNS), dtype=np.float64)
        return prices, FeatureRead(ticker, empty, "recomputed", "no prices", current)
    log.info("%s: features recomputed from prices: %s", ticker, reason)
    return prices, FeatureRead(ticker, compute_features(prices), "recomputed", reason, current)


def stored_windows(
    engine: Engine, arrays: dict[str, dict], run_date: dt.date, windows: dict[str, int]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Inference's read: ({ticker: [W, 11] stored feature rows ending at run_date}, {ticker: why not}).

    Inference loads only the recent bars of each ticker (`arrays`, as price_windows.load_price_arrays
    returns them), so it checks the stored rows against exactly those bars instead of hashing twenty
    years per ticker every evening (2 s for 103 tickers on PostgreSQL): the stored set must come from
    this feature code, and every loaded bar must equal the OHLCV stored on its row. That covers all a
    window's values depend on (SMA/returns look back 20 sessions; RSI's weight of a bar 250 sessions
    back is below 1e-8).
    """
    tickers = [t for t in windows if t in arrays]
    if not tickers:
        return {}, {}
    day = np.datetime64(run_date, "D")
    start = min(pd.Timestamp(arrays[t]["date"][0]).date() for t in tickers)
    sets = stored_sets(engine, tickers)
    stored_by_ticker = _stored_arrays(engine, tickers, start, run_date)
    empty = (np.empty(0, "datetime64[D]"), np.empty((0, len(FEATURE_COLUMNS))))
    out, why = {}, {}
    for t in tickers:
        a, w, s = arrays[t], windows[t], sets.get(t)
        if s is None or s.definition != FEATURE_DEFINITION:
            why[t] = "no stored features" if s is None else "stored features come from another definition"
            continue
        dates, values = stored_by_ticker.get(t, empty)
        loaded = a["date"] <= day
        bars = np.stack([a[f][loaded] for f in BAR_FIELDS], axis=1)
        if len(dates) != int(loaded.sum()) or not np.array_equal(dates, a["date"][loaded]):
            why[t] = f"stored features do not cover the {int(loaded.sum())} sessions up to {run_date}"
        elif not np.array_equal(values[:, : len(BAR_FIELDS)], bars):
            first = dates[(values[:, : len(BAR_FIELDS)] != bars).any(axis=1)][0]
            why[t] = f"a bar was revised since the features were built (first on {first})"
        elif len(dates) < w:
            why[t] = f"only {len(dates)} stored rows up to {run_date}, the window needs {w}"
        else:
            out[t] = values[-w:]
    for t, reason in why.items():
        log.info("%s: features recomputed from prices for %s: %s", t, run_date, reason)
    return out, why


# --- building -------------------------------------------------------------------------------------------


@dataclass
class BuildOutcome:
    """One ticker's `features` build: `built` (replaced), `appended` (new sessions only), `current`
    (nothing to do) or `no prices`."""

    ticker: str
    status: str
    fingerprint: PriceFingerprint | None = None
    rows: int = 0
    rows_written: int = 0
    price_rows: int = 0
    warmup_rows: int = 0
    first_date: dt.date | None = None
    last_date: dt.date | None = None
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    reason: str = ""


def feature_stats(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per feature: min / mean / max over the stored rows."""
    if frame.empty:
        return {}
    return {
        c: {"min": float(frame[c].min()), "mean": float(frame[c].mean()), "max": float(frame[c].max())}
        for c in FEATURE_COLUMNS
    }


_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no header extension
_PG_COPY_TRAILER = b"\xff\xff"
_PG_EPOCH = np.datetime64("2000-01-01", "D")
_COPY_SQL = f"COPY features (ticker, date, {', '.join(FEATURE_COLUMNS)}) FROM STDIN WITH (FORMAT binary)"


def _pg_binary_rows(ticker: str, frame: pd.DataFrame) -> bytes:
    """One ticker's rows in PostgreSQL's binary COPY format, built by numpy in one pass: no text
    formatting of half a million floats, and the doubles arrive bit for bit."""
    name = ticker.encode()
    layout = [
        ("fields", ">i2"),
        ("ticker_len", ">i4"),
        ("ticker", f"S{len(name)}"),
        ("date_len", ">i4"),
        ("date", ">i4"),
    ]
    for i in range(len(FEATURE_COLUMNS)):
        layout += [(f"len{i}", ">i4"), (f"value{i}", ">f8")]
    rec = np.empty(len(frame), dtype=np.dtype(layout))
    rec["fields"] = 2 + len(FEATURE_COLUMNS)
    rec["ticker_len"], rec["ticker"] = len(name), name
    rec["date_len"] = 4
    rec["date"] = (np.asarray(frame.index, dtype="datetime64[D]") - _PG_EPOCH).astype(np.int64)
    values = frame.to_numpy(dtype=np.float64)
    for i in range(len(FEATURE_COLUMNS)):
        rec[f"len{i}"], rec[f"value{i}"] = 8, values[:, i]
    return rec.tobytes()


def _insert_rows(conn: Connection, parts: list[tuple[str, pd.DataFrame]]) -> None:
    parts = [(t, f) for t, f in parts if len(f)]
    if not parts:
        return
    if is_postgres(conn):
        body = b"".join(_pg_binary_rows(t, f) for t, f in parts)
        with conn.connection.driver_connection.cursor() as cur:
            cur.copy_expert(_COPY_SQL, io.BytesIO(_PG_COPY_HEADER + body + _PG_COPY_TRAILER))
        return
    rows = []
    for ticker, frame in parts:
        values = frame.to_numpy(dtype=np.float64).tolist()
        rows += [
            {"ticker": ticker, "date": d, **dict(zip(FEATURE_COLUMNS, v, strict=True))}
            for d, v in zip(frame.index, values, strict=True)
        ]
    conn.execute(insert(features), rows)


def _write_sets(conn: Connection, writes: list[tuple[BuildOutcome, pd.DataFrame, bool]]) -> None:
    """Rows and fingerprints of the given tickers in the caller's transaction: a reader sees every set as
    it was or as it is now, never rows without their fingerprint."""
    replaced = [o.ticker for o, _, replace in writes if replace]
    if replaced:
        conn.execute(delete(features).where(features.c.ticker.in_(replaced)))
    _insert_rows(conn, [(o.ticker, rows) for o, rows, _ in writes])
    conn.execute(delete(feature_sets).where(feature_sets.c.ticker.in_([o.ticker for o, _, _ in writes])))
    now = dt.datetime.now(dt.UTC)
    conn.execute(
        insert(feature_sets),
        [
            {
                "ticker": o.ticker,
                "fingerprint": o.fingerprint.token,
                "definition": FEATURE_DEFINITION,
                "price_rows": o.price_rows,
                "rows": o.rows,
                "warmup_rows": o.warmup_rows,
                "first_date": o.first_date,
                "last_date": o.last_date,
                "built_at": now,
            }
            for o, _, _ in writes
        ],
    )


def _remove_set(conn: Connection, ticker: str) -> None:
    conn.execute(delete(features).where(features.c.ticker == ticker))
    conn.execute(delete(feature_sets).where(feature_sets.c.ticker == ticker))


def build_features(engine: Engine, tickers: Sequence[str], force: bool = False) -> list[BuildOutcome]:
    """Compute and store the features of `tickers`: one prices read, one write transaction.

    A ticker whose stored set already matches its prices is left alone (`current`); one whose stored
    prices are an unchanged prefix of today's (the nightly case: one new session) gets only the new
    rows (`appended`); anything else is replaced (`built`). `force` replaces every set.
    """
    tickers = [validate_ticker(t) for t in tickers]
    all_prices = load_prices_bulk(engine, tickers)
    sets = stored_sets(engine, tickers)
    outcomes, writes, gone = [], [], []
    for t in tickers:
        prices = all_prices[t]
        stored = sets.get(t)
        if prices.empty:
            if stored is not None:
                gone.append(t)
            outcomes.append(BuildOutcome(t, "no prices", reason="no prices stored for this ticker"))
            continue
        actions = corporate_actions_applied(engine, t)
        fp = fingerprint(prices, actions)
        frame = compute_features(prices)
        outcome = BuildOutcome(
            t,
            "built",
            fingerprint=fp,
            rows=len(frame),
            price_rows=len(prices),
            warmup_rows=len(prices) - len(frame),
            first_date=frame.index[0] if len(frame) else None,
            last_date=frame.index[-1] if len(frame) else None,
            stats=feature_stats(frame),
        )
        outcomes.append(outcome)
        reason = stale_reason(stored, fp)
        if reason is None and not force:
            outcome.status, outcome.reason = "current", "stored features match the prices"
        elif (
            not force
            and stored is not None
            and stored.definition == FEATURE_DEFINITION
            and stored.price_rows < len(prices)
            and fingerprint(prices.iloc[: stored.price_rows], actions) == stored.fingerprint
        ):
            # Features at t use nothing after t: the stored rows stay right, only new sessions are added.
            new = frame[frame.index > stored.last_date] if stored.last_date is not None else frame
            outcome.status, outcome.rows_written, outcome.reason = "appended", len(new), reason or ""
            writes.append((outcome, new, False))
        else:
            outcome.rows_written, outcome.reason = len(frame), ("forced" if force else reason or "")
            writes.append((outcome, frame, True))
    if writes or gone:

        def work(conn: Connection) -> None:
            for t in gone:
                _remove_set(conn, t)
            if writes:
                _write_sets(conn, writes)

        run_in_transaction(engine, work)
    return outcomes


# --- checks (the asset checks' core) --------------------------------------------------------------------


@dataclass
class CheckResult:
    passed: bool
    problems: dict[str, str] = field(default_factory=dict)  # ticker -> what is wrong
    checked: int = 0


def check_features(
    engine: Engine, tickers: Sequence[str], sample_rows: int = 50, seed: int = 0, rtol: float = 1e-12
) -> dict[str, CheckResult]:
    """The four checks of the `features` asset over `tickers`, from one read of prices and stored rows:

    - `current`: the stored set has the same last date and fingerprint as the ticker's prices now;
    - `finite`: no NaN/inf in any stored row (the warm-up rows are not stored at all);
    - `rsi_in_range`: RSI-14 within [0, 100];
    - `match_recomputation`: on a random sample of rows per ticker, stored values equal a fresh
      recomputation from prices (to `rtol`; the store keeps doubles exactly, so any difference is real).
    """
    tickers = [validate_ticker(t) for t in tickers]
    all_prices = load_prices_bulk(engine, tickers)
    all_stored = load_stored_bulk(engine, tickers)
    sets = stored_sets(engine, tickers)
    rng = np.random.default_rng(seed)
    res = {name: CheckResult(True) for name in ("current", "finite", "rsi_in_range", "match_recomputation")}
    for t in tickers:
        prices, stored = all_prices[t], all_stored[t]
        if not prices.empty:
            res["current"].checked += 1
            reason = stale_reason(sets.get(t), current_fingerprint(engine, t, prices))
            if reason:
                res["current"].problems[t] = reason
        if stored.empty:
            continue
        values = stored.to_numpy()
        res["finite"].checked += len(stored)
        bad = ~np.isfinite(values).all(axis=1)
        if bad.any():
            res["finite"].problems[t] = f"{int(bad.sum())} rows with NaN/inf, first on {stored.index[bad][0]}"
        res["rsi_in_range"].checked += len(stored)
        rsi = stored["rsi_14"].to_numpy()
        out = (rsi < 0) | (rsi > 100)
        if out.any():
            res["rsi_in_range"].problems[t] = (
                f"{int(out.sum())} RSI values outside [0, 100], first on {stored.index[out][0]}"
            )
        if prices.empty:
            res["match_recomputation"].problems[t] = "stored rows but no prices to recompute them from"
            continue
        fresh = compute_features(prices)
        picks = stored.index[rng.choice(len(stored), size=min(sample_rows, len(stored)), replace=False)]
        res["match_recomputation"].checked += len(picks)
        missing = [d for d in picks if d not in fresh.index]
        if missing:
            res["match_recomputation"].problems[t] = (
                f"stored row {missing[0]} has no price-derived counterpart"
            )
            continue
        a, b = stored.loc[picks].to_numpy(), fresh.loc[picks].to_numpy()
        close = np.isclose(a, b, rtol=rtol, atol=0.0) | (np.isnan(a) & np.isnan(b))
        if not close.all():
            i, j = np.argwhere(~close)[0]
            res["match_recomputation"].problems[t] = (
                f"{FEATURE_COLUMNS[j]} on {picks[i]}: stored {a[i, j]!r}, recomputed {b[i, j]!r}"
            )
    for r in res.values():
        r.passed = not r.problems
    return res


def check_current(engine: Engine, tickers: Sequence[str]) -> CheckResult:
    return check_features(engine, tickers, sample_rows=0)["current"]
