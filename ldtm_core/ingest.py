"""Writing prices: files and frames validated, then upserted in one transaction each (SPEC §2).

Re-ingesting identical rows changes nothing; an overlapping newer file updates only rows whose values
differ. A file or frame that fails validation writes nothing, and the error names the file, the line
(or row) and date, and the problem.

PostgreSQL: rows are COPY'd into a temporary staging table and merged with one
`INSERT ... SELECT ... ON CONFLICT DO UPDATE ... WHERE IS DISTINCT FROM`, all in the caller's
transaction (≈10x faster than multi-row INSERTs for 500k rows). SQLite: batched `ON CONFLICT` upserts.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    MetaData,
    String,
    Table,
    literal,
    or_,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .db import is_postgres, run_in_transaction
from .errors import InputError, LDTMError
from .schema import prices
from .universe import validate_ticker

VALUE_COLUMNS = ["open", "high", "low", "close", "adj_close", "volume"]
PRICE_FIELDS = ["open", "high", "low", "close"]
REQUIRED_COLUMNS = ["date", *PRICE_FIELDS, "volume"]
FRAME_COLUMNS = ["ticker", "date", *VALUE_COLUMNS]
FILE_SUFFIXES = (".csv", ".parquet")
# Header spellings accepted (compared lower-case with spaces, '_' and '-' removed): Yahoo's
# `Adj Close`, `adj_close`, `AdjClose` all mean the same column.
_HEADER_ALIASES = {
    "date": "date",
    "open": "open",
    "high": "high",
    "low": "low",
    "close": "close",
    "adjclose": "adj_close",
    "volume": "volume",
    "ticker": "ticker",
    "symbol": "ticker",
}
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T].*)?$")
MAX_REPORTED_ROWS = 5


@dataclass
class IngestResult:
    source: str
    tickers: int
    rows: int
    written: int  # rows inserted or changed


@dataclass
class FileOutcome:
    """What happened to one file of an `ingest_files` call. `error` is None when it was stored."""

    path: str
    tickers: list[str] = field(default_factory=list)
    rows: int = 0
    written: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        return "ok" if self.ok else "failed"


# --------------------------------------------------------------------------------------------------
# Reading and validating


def _canonical_header(name: object) -> str:
    key = re.sub(r"[\s_\-]+", "", str(name).strip().lower())
    return _HEADER_ALIASES.get(key, str(name).strip())


def _fmt(value) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 30 else value[:30] + "...")
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)
    return str(value)


def _string_cells(raw: pd.Series) -> pd.Series:
    """True where the cell holds a string (vectorised for the common all-string and no-string columns)."""
    kind = pd.api.types.infer_dtype(raw, skipna=True)
    if kind in ("string", "empty"):
        return raw.notna()
    if kind != "mixed" and kind != "mixed-integer":
        return pd.Series(False, index=raw.index)
    return raw.map(lambda v: isinstance(v, str)).astype(bool)


def _date_objects(values: pd.Series) -> pd.Series:
    """datetime.date / Timestamp objects to wall-clock midnight datetime64 (NaT where not a date)."""
    try:
        parsed = pd.to_datetime(values, errors="coerce")
        if getattr(parsed.dt, "tz", None) is not None:
            parsed = parsed.dt.tz_localize(None)
        return parsed.dt.normalize().astype("datetime64[ns]")
    except (TypeError, ValueError):  # mixed time zones or odd objects: one at a time

        def one(v):
            try:
                ts = pd.Timestamp(v)
                return pd.Timestamp(ts.year, ts.month, ts.day)
            except (TypeError, ValueError):
                return pd.NaT

        return values.map(one).astype("datetime64[ns]")


def _parse_dates(raw: pd.Series) -> pd.Series:
    """datetime64 (midnight) per row, NaT where missing or unparsable. Accepts ISO dates, ISO
    timestamps (the date as written, so `2024-01-05 00:00:00-05:00` is 5 January) and native
    date/datetime columns from Parquet."""
    if pd.api.types.is_datetime64_any_dtype(raw.dtype):
        s = raw
        if getattr(s.dt, "tz", None) is not None:
            s = s.dt.tz_localize(None)  # the exchange-local wall date, not the UTC one
        return s.dt.normalize().astype("datetime64[ns]")
    out = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
    is_str = _string_cells(raw)
    if is_str.any():
        text = raw[is_str].astype(str).str.strip()
        iso = text.str.match(_ISO_DATE).astype(bool)
        out[iso.index[iso]] = pd.to_datetime(text[iso].str[:10], format="%Y-%m-%d", errors="coerce")
    other = raw.notna() & ~is_str
    if other.any():  # datetime.date / Timestamp objects (Parquet date32, object columns)
        out[other] = _date_objects(raw[other])
    return out


def _to_number(raw: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
        return raw.astype("float64")
    is_str = _string_cells(raw)
    text = raw.astype(object).copy()
    text[is_str] = raw[is_str].astype(str).str.strip()
    return pd.to_numeric(text, errors="coerce").astype("float64")


def _is_missing(raw: pd.Series) -> pd.Series:
    missing = raw.isna()
    is_str = _string_cells(raw)
    if is_str.any():
        missing |= (raw[is_str].astype(str).str.strip() == "").reindex(raw.index, fill_value=False)
    return missing


def validate_prices(
    raw: pd.DataFrame,
    where: str,
    *,
    lines: Sequence[int] | np.ndarray | None = None,
    unit: str = "row",
    default_ticker: str | None = None,
    universe: Iterable[str] | None = None,
    allow_new: bool = False,
) -> pd.DataFrame:
    """Check a frame of raw price rows and return the clean long frame (FRAME_COLUMNS, sorted).

    `raw` has canonical column names (date, open, ..., optionally ticker/adj_close); values may be
    strings. `lines` numbers the rows as the source does (CSV line numbers); `where` names the source.
    Every problem is collected, and the first few are reported in one InputError naming the source,
    the line/row, its date and what is wrong.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if "ticker" not in raw.columns and default_ticker is None:
        missing.append("ticker")
    if missing:
        found = ", ".join(str(c) for c in raw.columns) or "none"
        raise InputError(f"{where}: missing column(s) {', '.join(missing)} (found: {found})")
    if raw.empty:
        raise InputError(f"{where}: no data rows (empty or truncated file)")
    raw = raw.reset_index(drop=True)
    n = len(raw)
    line_no = np.asarray(lines if lines is not None else np.arange(1, n + 1))
    problems: dict[int, list[str]] = {}

    def flag(mask: pd.Series | np.ndarray, message) -> None:
        for i in np.flatnonzero(np.asarray(mask, dtype=bool)):
            problems.setdefault(int(i), []).append(message(i) if callable(message) else message)

    # Dates.
    dates = _parse_dates(raw["date"])
    date_missing = _is_missing(raw["date"])
    flag(date_missing, "missing date")
    flag(
        dates.isna() & ~date_missing,
        lambda i: f"unparsable date {_fmt(raw['date'].iat[i])} (expected YYYY-MM-DD)",
    )

    # Tickers.
    if "ticker" in raw.columns:
        tick_raw = raw["ticker"]
        # Validate each distinct value once (a long file repeats a handful of tickers many times).
        canon: dict[object, str | None] = {}
        errors: dict[object, str] = {}
        for v in tick_raw.dropna().unique():
            if isinstance(v, str) and not v.strip():
                continue
            try:
                canon[v] = validate_ticker(v)
            except InputError as exc:
                errors[v] = str(exc)
        tickers = tick_raw.map(canon).astype(object)
        tickers = tickers.where(tickers.notna(), None)
        flag(_is_missing(tick_raw), "missing ticker")
        bad_tick = tick_raw.isin(list(errors))
        flag(bad_tick, lambda i: errors[tick_raw.iat[i]])
    else:
        tickers = pd.Series([default_ticker] * n, dtype=object)
    if universe is not None and not allow_new:
        known = set(universe)
        outside = tickers.notna() & ~tickers.isin(known)
        # One report per unknown ticker (at its first row), not one per row.
        first = outside & ~tickers.where(outside).duplicated()
        flag(
            first, lambda i: f"ticker {tickers.iat[i]} is not in the universe (pass --allow-new to accept it)"
        )

    # Numbers.
    values: dict[str, pd.Series] = {}
    for col in [*PRICE_FIELDS, "volume", "adj_close"]:
        if col not in raw.columns:
            values[col] = pd.Series(np.nan, index=raw.index)
            continue
        r = raw[col]
        v = _to_number(r)
        miss = _is_missing(r)
        if col != "adj_close":
            flag(miss, f"missing {col} (NaN, empty or incomplete row)")
        flag(v.isna() & ~miss, lambda i, r=r, col=col: f"{col} {_fmt(r.iat[i])} is not a number")
        flag(np.isinf(v), f"{col} is infinite")
        if col == "volume":
            flag(v < 0, lambda i, v=v: f"volume {_fmt(v.iat[i])} is negative")
            flag(
                (v >= 0) & np.isfinite(v) & (v != np.round(v)),
                lambda i, v=v: f"volume {_fmt(v.iat[i])} is not a whole number",
            )
        else:
            flag(np.isfinite(v) & (v <= 0), lambda i, v=v, col=col: f"{col} {_fmt(v.iat[i])} is not positive")
        values[col] = v

    o, h, lo, c = (values[k] for k in PRICE_FIELDS)
    ok_prices = pd.concat([o, h, lo, c], axis=1).gt(0).all(axis=1) & np.isfinite(
        pd.concat([o, h, lo, c], axis=1)
    ).all(axis=1)
    flag(ok_prices & (h < lo), lambda i: f"high {_fmt(h.iat[i])} < low {_fmt(lo.iat[i])}")
    range_ok = ok_prices & (h >= lo)
    for name, s in (("open", o), ("close", c)):
        flag(
            range_ok & ((s < lo) | (s > h)),
            lambda i, s=s, name=name: (
                f"{name} {_fmt(s.iat[i])} outside [low {_fmt(lo.iat[i])}, high {_fmt(h.iat[i])}]"
            ),
        )

    # Duplicate dates per ticker (only among rows whose key parsed).
    key_ok = dates.notna() & tickers.notna()
    keys = pd.DataFrame({"t": tickers, "d": dates})[key_ok]
    dup = keys.duplicated(keep="first")
    if dup.any():
        first_line = keys[~keys.duplicated(keep="first")].reset_index().set_index(["t", "d"])["index"]
        for i in dup.index[dup]:
            j = first_line.loc[(keys.at[i, "t"], keys.at[i, "d"])]
            problems.setdefault(int(i), []).append(
                f"duplicate date for {keys.at[i, 't']} (also at {unit} {line_no[j]})"
            )

    bad = sorted(problems)
    if bad:
        parts = []
        for i in bad[:MAX_REPORTED_ROWS]:
            when = f" ({dates.iat[i].date()})" if pd.notna(dates.iat[i]) else ""
            parts.append(f"{unit} {line_no[i]}{when}: {', '.join(problems[i])}")
        more = (
            f"; and {len(bad) - MAX_REPORTED_ROWS} more bad {unit}s" if len(bad) > MAX_REPORTED_ROWS else ""
        )
        raise InputError(f"{where}: {len(bad)} bad {unit}(s): " + "; ".join(parts) + more)

    out = pd.DataFrame(
        {
            "ticker": tickers.astype(str).to_numpy(),
            "date": dates.to_numpy(),
            "open": o.to_numpy(),
            "high": h.to_numpy(),
            "low": lo.to_numpy(),
            "close": c.to_numpy(),
            "adj_close": values["adj_close"].to_numpy(),
            "volume": values["volume"].round().astype("int64").to_numpy(),
        }
    )
    return out.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True)


def _read_raw(path: Path) -> tuple[pd.DataFrame, np.ndarray, str]:
    """The file's rows with canonical headers, their line/row numbers, and the unit name."""
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise InputError(
            f"{path}: unsupported file type {path.suffix or '(none)'!r} (expected .csv or .parquet)"
        )
    if not path.is_file():
        raise InputError(f"{path}: file does not exist")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: file is empty")
    if suffix == ".csv":
        try:
            # Strings everywhere so that a bad cell is reported as written, not coerced.
            df = pd.read_csv(path, dtype=str, skip_blank_lines=False, encoding="utf-8-sig")
        except pd.errors.EmptyDataError:
            raise InputError(f"{path}: file is empty") from None
        except pd.errors.ParserError as exc:
            raise InputError(f"{path}: malformed or truncated CSV: {str(exc).strip()}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
        # Line 1 is the header; data row i is on line i + 2. Blank lines keep their numbers but are dropped.
        lines = np.arange(2, len(df) + 2)
        keep = ~df.isna().all(axis=1).to_numpy()
        df, lines, unit = df[keep], lines[keep], "line"
    else:
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for truncated/corrupt files
            raise InputError(f"{path}: not a readable Parquet file (truncated or corrupt): {exc}") from None
        if not isinstance(df.index, pd.RangeIndex) and any(n is not None for n in df.index.names):
            df = df.reset_index()  # yfinance-style frames keep Date as the index
        lines, unit = np.arange(1, len(df) + 1), "row"
    renamed = [_canonical_header(c) for c in df.columns]
    dupes = sorted({c for c in renamed if renamed.count(c) > 1})
    if dupes:
        raise InputError(f"{path}: column(s) given more than once: {', '.join(dupes)}")
    df.columns = renamed
    return df, lines, unit


def read_price_file(
    path: str | Path, *, universe: Iterable[str] | None = None, allow_new: bool = False
) -> pd.DataFrame:
    """Read and validate one CSV or Parquet file into the long frame (ticker, date, open, high, low,
    close, adj_close, volume), sorted by ticker and date.

    One file per ticker (`AAPL.csv`, ticker from the file name) or a long file with a ticker column.
    Headers are matched case-insensitively (Yahoo's `Date, Open, High, Low, Close, Adj Close, Volume`).
    With `universe`, tickers outside it are refused unless `allow_new`. Raises InputError naming the
    file, the line (CSV, 1-based as in the file) or row (Parquet), the date and the problem.
    """
    path = Path(path)
    df, lines, unit = _read_raw(path)
    default_ticker = None
    if "ticker" not in df.columns:
        try:
            default_ticker = validate_ticker(path.stem)
        except InputError as exc:
            raise InputError(f"{path}: no ticker column, and the file name is not a ticker: {exc}") from None
    return validate_prices(
        df,
        str(path),
        lines=lines,
        unit=unit,
        default_ticker=default_ticker,
        universe=universe,
        allow_new=allow_new,
    )


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; directories expand to their .csv/.parquet files (sorted, not recursive)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in FILE_SUFFIXES)
            if not found:
                raise InputError(f"{p}: directory holds no .csv or .parquet files")
            out.extend(found)
        else:
            out.append(p)
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------------------------------
# Writing

_stage_metadata = MetaData()
# Dropped explicitly after the merge, and ON COMMIT DROP as a backstop; a rollback removes it too.
_STAGE_COLUMNS = ("ticker", "date", "open", "high", "low", "close", "adj_close", "volume")
_stage = Table(
    "ldtm_prices_stage",
    _stage_metadata,
    # Same names, types and nullability as `prices`, without its keys and checks.
    *(Column(c, prices.c[c].type, nullable=prices.c[c].nullable) for c in _STAGE_COLUMNS),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DROP",
)
_COPY_SQL = (
    f"COPY ldtm_prices_stage ({', '.join(_STAGE_COLUMNS)}) FROM STDIN WITH (FORMAT csv)"  # constants only
)


def _copy_merge(conn: Connection, df: pd.DataFrame, source: str, now: dt.datetime) -> int:
    _stage.create(conn)
    buf = io.StringIO()
    # pandas writes floats with repr precision, so PostgreSQL parses back exactly the same doubles;
    # a NaN adj_close becomes an empty field, which CSV-format COPY reads as NULL.
    df[FRAME_COLUMNS].to_csv(buf, header=False, index=False, date_format="%Y-%m-%d")
    buf.seek(0)
    with conn.connection.driver_connection.cursor() as cur:
        cur.copy_expert(_COPY_SQL, buf)
    cols = FRAME_COLUMNS
    stmt = postgresql.insert(prices).from_select(
        [*cols, "source", "ingested_at"],
        select(
            *[_stage.c[c] for c in cols],
            literal(source, String(32)),
            literal(now, DateTime(timezone=True)),
        ),
    )
    excluded = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=["ticker", "date"],
        set_={c: excluded[c] for c in [*VALUE_COLUMNS, "source", "ingested_at"]},
        where=or_(*[prices.c[c].is_distinct_from(excluded[c]) for c in VALUE_COLUMNS]),
    )
    written = max(conn.execute(stmt).rowcount or 0, 0)
    _stage.drop(conn)
    return written


def _records(df: pd.DataFrame, source: str, now: dt.datetime) -> list[dict]:
    out = df[FRAME_COLUMNS].copy()
    out["date"] = pd.to_datetime(out["date"]).dt.date
    out["adj_close"] = out["adj_close"].astype(object).where(out["adj_close"].notna(), None)
    out["source"] = source
    out["ingested_at"] = now
    return out.to_dict("records")


def write_prices(conn: Connection, df: pd.DataFrame, source: str) -> int:
    """Upsert a validated frame on an open connection (the caller owns the transaction). Rows written."""
    if df.empty:
        return 0
    now = dt.datetime.now(dt.UTC)
    if is_postgres(conn):
        return _copy_merge(conn, df, source, now)
    return _sqlite_upsert(conn, _records(df, source, now))


def _sqlite_upsert(conn: Connection, records: list[dict]) -> int:
    """One prepared ON CONFLICT statement run with executemany: SQLite reuses it per row, which is
    ~10x faster than compiling multi-row VALUES statements (db.upsert) for large frames."""
    stmt = sqlite.insert(prices)
    excluded = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=["ticker", "date"],
        set_={c: excluded[c] for c in [*VALUE_COLUMNS, "source", "ingested_at"]},
        where=or_(*[prices.c[c].is_distinct_from(excluded[c]) for c in VALUE_COLUMNS]),
    )
    # sqlite3's executemany rowcount is the sum of changes(): rows skipped by WHERE count 0.
    return max(conn.execute(stmt, records).rowcount or 0, 0)


def _store(engine: Engine, df: pd.DataFrame, source: str, label: str) -> IngestResult:
    written = run_in_transaction(engine, lambda conn: write_prices(conn, df, source))
    return IngestResult(label, int(df["ticker"].nunique()), len(df), written)


def ingest_frame(engine: Engine, df: pd.DataFrame, source: str, label: str | None = None) -> IngestResult:
    """Validate and upsert a long frame (ticker, date, open, high, low, close[, adj_close], volume)
    in one transaction. Raises InputError (nothing written) if any row is bad."""
    raw = df.rename(columns={c: _canonical_header(c) for c in df.columns})
    clean = validate_prices(raw, label or source)
    return _store(engine, clean, source, label or source)


def ingest_files(
    engine: Engine,
    paths: Iterable[str | Path],
    universe: Iterable[str],
    allow_new: bool = False,
    on_outcome: Callable[[FileOutcome], None] | None = None,
) -> list[FileOutcome]:
    """Ingest each file in its own transaction. A bad file writes nothing and is reported in its
    outcome; the other files still ingest. `on_outcome` sees each file's outcome as it is done."""
    universe = list(universe)
    outcomes = []
    for path in map(Path, paths):
        outcome = FileOutcome(str(path))
        try:
            df = read_price_file(path, universe=universe, allow_new=allow_new)
            outcome.tickers = sorted(df["ticker"].unique().tolist())
            outcome.rows = len(df)
            source = path.suffix.lower().lstrip(".")
            outcome.written = _store(engine, df, source, str(path)).written
        except LDTMError as exc:
            outcome.error = str(exc)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def ingest_synthetic(
    engine: Engine, tickers: Sequence[str], start: dt.date | str, end: dt.date | str, seed: int = 0
) -> IngestResult:
    """Generate the synthetic market for `tickers` and upsert it in one transaction."""
    from .synthetic import generate

    tickers = list(dict.fromkeys(validate_ticker(t) for t in tickers))
    if not tickers:
        raise InputError("no tickers given for synthetic ingest")
    df = generate(tickers, start, end, seed)
    clean = validate_prices(df, f"synthetic seed={seed}")
    return _store(engine, clean, "synthetic", f"synthetic seed={seed}")
