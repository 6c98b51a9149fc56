"""Price files: CSV and Parquet read into raw rows with canonical headers and their line numbers.

One file per ticker (`AAPL.csv`, ticker from the file name) or a long file with a ticker column.
Validation of the rows themselves lives in `price_validation`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ldtm_core.data.price_validation import canonical_header, validate_prices
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError

FILE_SUFFIXES = (".csv", ".parquet")
UNTERMINATED_LAST_LINE = (
    "no line terminator at the end of the file: it may have been cut off inside this line, so the file "
    "is refused (if the line is complete, end the file with a newline)"
)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) in (b"\n", b"\r")


def _read_raw(path: Path) -> tuple[pd.DataFrame, np.ndarray, str, dict[int, list[str]]]:
    """The file's rows with canonical headers, their line/row numbers, the unit name, and problems
    found while reading ({row position: [message]})."""
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise InputError(
            f"{path}: unsupported file type {path.suffix or '(none)'!r} (expected .csv or .parquet)"
        )
    if not path.is_file():
        raise InputError(f"{path}: file does not exist")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: file is empty")
    problems: dict[int, list[str]] = {}
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
        # A writer killed mid-file leaves a last line without its newline, and a value cut inside its
        # last field (volume 33973585 -> 3397) still parses: such a line cannot be trusted.
        if len(df) and not _ends_with_newline(path):
            problems[len(df) - 1] = [UNTERMINATED_LAST_LINE]
    else:
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for truncated/corrupt files
            raise InputError(f"{path}: not a readable Parquet file (truncated or corrupt): {exc}") from None
        if not isinstance(df.index, pd.RangeIndex) and any(n is not None for n in df.index.names):
            df = df.reset_index()  # yfinance-style frames keep Date as the index
        lines, unit = np.arange(1, len(df) + 1), "row"
    renamed = [canonical_header(c) for c in df.columns]
    dupes = sorted({c for c in renamed if renamed.count(c) > 1})
    if dupes:
        raise InputError(f"{path}: column(s) given more than once: {', '.join(dupes)}")
    df.columns = renamed
    return df, lines, unit, problems


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
    df, lines, unit, problems = _read_raw(path)
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
        row_problems=problems,
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
