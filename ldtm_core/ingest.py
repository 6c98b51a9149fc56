"""Ingest: files, frames and the synthetic market validated, then stored in one transaction each (SPEC §2).

A file or frame that fails validation writes nothing, and the error names the file, the line (or row)
and date, and the problem. Reading files is `price_files`, checking rows `price_validation`, and the
upsert `price_writer`; this module ties them together per call.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from .db import run_in_transaction
from .errors import InputError, LDTMError
from .price_files import read_price_file
from .price_validation import canonical_header, validate_prices
from .price_writer import write_prices
from .universe import validate_ticker


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


def _store(engine: Engine, df: pd.DataFrame, source: str, label: str) -> IngestResult:
    written = run_in_transaction(engine, lambda conn: write_prices(conn, df, source))
    return IngestResult(label, int(df["ticker"].nunique()), len(df), written)


def ingest_frame(engine: Engine, df: pd.DataFrame, source: str, label: str | None = None) -> IngestResult:
    """Validate and upsert a long frame (ticker, date, open, high, low, close[, adj_close], volume)
    in one transaction. Raises InputError (nothing written) if any row is bad."""
    raw = df.rename(columns={c: canonical_header(c) for c in df.columns})
    clean = validate_prices(raw, label or source)
    return _store(engine, clean, source, label or source)


def ingest_files(
    engine: Engine, paths: Iterable[str | Path], universe: Iterable[str], allow_new: bool = False
) -> list[FileOutcome]:
    """Ingest each file in its own transaction. A bad file writes nothing and is reported in its
    outcome; the other files still ingest."""
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
