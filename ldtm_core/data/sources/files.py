"""A folder of dropped price files (`files:<dir>`): every new *.csv / *.parquet is ingested once.

A file is "new" when its (path, SHA-256 of content) is not in the `ingested_files` ledger, so a
file rewritten in place with different content is ingested again and an unchanged one is skipped.
The ledger lives in the application database, written in the same transaction as the file's
prices: a crash can never mark a file done without its rows, and every run container sees the
same ledger (a manifest file beside the data could promise neither).

Files are read with the ingest rules (`price_files.read_price_file`). When a file with several tickers
fails validation, its tickers are validated one by one, so one bad ticker is refused with its
reason and the others are stored. A file that cannot be read at all is recorded as rejected and
is not retried until its content changes. Newer files win over older ones for the same
(ticker, date): a later file is a revision.

A refused ticker is remembered with its reason (`ingested_files.refused`): while no newer file holds
it, `refusal(ticker)` names that file and reason (the fetch reports it instead of "no new data"), and
`--force` / `--refetch` re-read the file that refused it (the fix the refusal message gives).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.data.price_files import FILE_SUFFIXES, read_price_file
from ldtm_core.data.price_validation import canonical_header, validate_prices
from ldtm_core.data.sources.base import RAW_COLUMNS, FileReceipt, PriceSource, SourceAnswer
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, LDTMError
from ldtm_core.schema import ingested_files

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def ingested_keys(engine: Engine) -> set[tuple[str, str]]:
    with engine.connect() as conn:
        return {
            (r.path, r.sha256) for r in conn.execute(select(ingested_files.c.path, ingested_files.c.sha256))
        }


def refused_tickers(row) -> dict[str, str]:
    """{ticker: reason} refused from one ledger row (a row from before migration 0018 has no `refused`:
    a rejected file then refused every ticker it named, with its error)."""
    if row.refused:
        return json.loads(row.refused)
    if row.status == "rejected" and row.error:
        return {t: row.error for t in (row.tickers or "").split(",") if t}
    return {}


def last_refusals(engine: Engine) -> dict[str, tuple[str, str, str]]:
    """Per ticker whose newest file refused it: (path, sha256, reason). A ticker a later file stored is absent."""
    f = ingested_files.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(f.path, f.sha256, f.status, f.tickers, f.error, f.refused).order_by(f.id)
        ).all()
    out: dict[str, tuple[str, str, str]] = {}
    for row in rows:
        refused = refused_tickers(row)
        for t in (row.tickers or "").split(","):
            if t in refused:
                out[t] = (row.path, row.sha256, refused[t])
            else:
                out.pop(t, None)
    return out


class FilesSource(PriceSource):
    name = "files"
    argument = "<dir>"
    incremental = False  # a dropped file is ingested whole, whatever range is asked

    @classmethod
    def from_spec(cls, arg: str, *, seed: int) -> FilesSource:
        if not arg.strip():
            raise InputError("price source 'files': give the folder, e.g. files:/data/drop")
        return cls(arg.strip())

    def __init__(self, directory: str | Path):
        self.directory = Path(directory).expanduser()
        self._done: set[tuple[str, str]] = set()
        self._refusals: dict[str, tuple[str, str, str]] = {}
        self._reread = False

    def describe(self) -> str:
        return f"files:{self.directory}"

    def prepare(self, engine: Engine, *, reread: bool = False) -> None:
        if not self.directory.is_dir():
            raise InputError(f"files source: {self.directory} is not a directory")
        self._done = ingested_keys(engine)
        self._refusals = last_refusals(engine)
        self._reread = reread

    def refusal(self, ticker: str) -> str | None:
        if ticker not in self._refusals:
            return None
        path, _, reason = self._refusals[ticker]
        return f"{path} was refused: {reason}"

    def pending(self, tickers: Sequence[str] | None = None) -> list[tuple[Path, str]]:
        """New files, oldest first (modification time, then name), with their content hash; with `reread`
        (--force / --refetch) also the file whose refusal of one of `tickers` is the newest word on it."""
        files = [p for p in self.directory.iterdir() if p.is_file() and p.suffix.lower() in FILE_SUFFIXES]
        files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name))
        again = set()
        if self._reread:
            wanted = self._refusals if tickers is None else [t for t in tickers if t in self._refusals]
            again = {self._refusals[t][:2] for t in wanted}
        out = []
        for path in files:
            sha = file_sha256(path)
            key = (str(path.resolve()), sha)
            if key not in self._done or key in again:
                out.append((path, sha))
        return out

    def fetch(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> SourceAnswer:
        """Every pending file merged into one answer (a later file's row wins for the same date)."""
        merged = SourceAnswer()
        for answer in self.answers(tickers, start, end):
            for ticker, frame in answer.frames.items():
                if ticker in merged.frames:
                    frame = pd.concat([merged.frames[ticker], frame], ignore_index=True)
                    frame = frame.drop_duplicates("date", keep="last").sort_values("date")
                answer.frames[ticker] = frame.reset_index(drop=True)
            merged.merge(answer)
        return merged

    def answers(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> Iterator[SourceAnswer]:
        """One answer per pending file, oldest first: each is stored with its receipt in one transaction."""
        for path, sha in self.pending(tickers):
            answer = SourceAnswer()
            receipt = FileReceipt(str(path.resolve()), sha, path.stat().st_size)
            frames, failures = _read_per_ticker(path)
            if "" in failures:  # the file as a whole is unreadable
                receipt.error = failures.pop("")
            for ticker, reason in failures.items():
                answer.fail(ticker, reason)
            answer.frames.update(frames)
            receipt.tickers = sorted({*frames, *failures})
            receipt.rows = sum(len(f) for f in frames.values())
            answer.receipts.append(receipt)
            yield answer


def _read_per_ticker(path: Path) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Clean frames per ticker, and a reason per refused ticker ("" = the whole file)."""
    try:
        clean = read_price_file(path, allow_new=True)
    except InputError as whole_file_error:
        raw = _raw_with_tickers(path)
        if raw is None:
            return {}, {"": str(whole_file_error), **_stem_ticker(path, str(whole_file_error))}
        frames, failures = {}, {}
        for ticker, group in raw.groupby("ticker", sort=True):
            try:
                t = validate_ticker(ticker)
                frames[t] = validate_prices(
                    group.drop(columns="ticker"),
                    f"{path} ticker {t}",
                    lines=group["__line"].to_numpy(),
                    unit="line" if path.suffix.lower() == ".csv" else "row",
                    default_ticker=t,
                ).drop(columns="ticker")
            except LDTMError as exc:
                failures[str(ticker)] = str(exc)
        return frames, failures
    return {str(t): g.drop(columns="ticker").reset_index(drop=True) for t, g in clean.groupby("ticker")}, {}


def _stem_ticker(path: Path, reason: str) -> dict[str, str]:
    """A one-ticker file (AAPL.csv) that is refused as a whole names its ticker."""
    try:
        return {validate_ticker(path.stem): reason}
    except InputError:
        return {}


def _raw_with_tickers(path: Path) -> pd.DataFrame | None:
    """The file's rows as written (strings), with canonical headers and source line numbers, when it is
    a readable long file with a ticker column; None otherwise (then the file fails as a whole)."""
    try:
        if path.suffix.lower() == ".csv":
            df = pd.read_csv(path, dtype=str, skip_blank_lines=False, encoding="utf-8-sig")
            lines = np.arange(2, len(df) + 2)
        else:
            df = pd.read_parquet(path)
            if not isinstance(df.index, pd.RangeIndex):
                df = df.reset_index()
            lines = np.arange(1, len(df) + 1)
    except Exception:  # noqa: BLE001 - unreadable: reported by read_price_file's own error
        return None
    renamed = [canonical_header(c) for c in df.columns]
    if "ticker" not in renamed or len(set(renamed)) != len(renamed):
        return None
    df.columns = renamed
    df["__line"] = lines
    df = df[df.drop(columns="__line").notna().any(axis=1) & df["ticker"].notna()]
    if df.empty:
        return None
    keep = [c for c in [*RAW_COLUMNS, "ticker", "__line"] if c in df.columns]
    return df[keep]
