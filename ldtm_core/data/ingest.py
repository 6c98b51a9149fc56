"""Ingest: files, frames and the synthetic market validated, then stored in one transaction each (SPEC §2).

A file or frame that fails validation writes nothing, and the error names the file, the line (or row)
and date, and the problem. Reading files is `price_files`, checking rows `price_validation`, and the
upsert `price_writer`; this module ties them together per call.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from ldtm_core.config import setting
from ldtm_core.data.calendar import require_in_range
from ldtm_core.data.corporate_actions import Action, force_from_env, reconcile, record_actions, split_factor
from ldtm_core.data.price_files import read_price_file
from ldtm_core.data.price_gaps import PriceGap, gaps_since
from ldtm_core.data.price_moves import LargeMove, moves_since
from ldtm_core.data.price_validation import VALUE_COLUMNS, canonical_header, validate_prices
from ldtm_core.data.price_writer import write_prices
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, LDTMError


@dataclass
class IngestResult:
    source: str
    tickers: int
    rows: int
    written: int  # rows inserted or changed
    # Tickers that got a corporate action recorded: the caller re-fills their actuals (the data layer
    # knows nothing of predictions; accountability.ledger.refill.refill_after_ingest does it).
    action_tickers: list[str] = field(default_factory=list)
    # Holes longer than LDTM_MAX_GAP_SESSIONS next to what was stored (features restart after them).
    gaps: list[PriceGap] = field(default_factory=list)


@dataclass
class FileOutcome:
    """What happened to one file of an `ingest_files` call. `error` is None when it was stored."""

    path: str
    tickers: list[str] = field(default_factory=list)
    rows: int = 0
    written: int = 0
    error: str | None = None
    # One-day moves in what this file stored that no recorded corporate action explains (a split?).
    moves: list[LargeMove] = field(default_factory=list)
    action_tickers: list[str] = field(default_factory=list)  # as IngestResult.action_tickers
    # Holes longer than LDTM_MAX_GAP_SESSIONS next to what this file stored (price_gaps.gaps_since).
    gaps: list[PriceGap] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        return "ok" if self.ok else "failed"


def _store(
    engine: Engine,
    df: pd.DataFrame,
    source: str,
    label: str,
    force: bool | None,
    source_actions: Sequence[Action] = (),
) -> IngestResult:
    """Write in one transaction, through the same history checks as the nightly fetch (`reconcile`): a
    ticker whose stored history the frame rescales by one constant before a date gets that corporate
    action recorded (the rescaled rows are not merged); revisions of the latest sessions are written; any
    other change to stored history refuses the whole call (HistoryRewriteRefused naming the ticker)
    unless `force` (default LDTM_FORCE_REINGEST). `source_actions`: the corporate actions the source itself
    reports with its raw bars (a style-1 source), recorded in the same transaction."""
    force = force_from_env() if force is None else force

    recorded: list[str] = []

    def work(conn) -> int:
        frames, actions = [], list(source_actions)
        for ticker, part in df.groupby("ticker", sort=False):
            rec = reconcile(conn, str(ticker), part.drop(columns="ticker"), source=source, force=force)
            frames.append(rec.frame.assign(ticker=ticker))
            actions.extend(rec.actions)
        record_actions(conn, actions)
        recorded[:] = [a.ticker for a in actions]
        kept = pd.concat(frames, ignore_index=True) if frames else df
        return write_prices(conn, kept[df.columns], source)

    written = run_in_transaction(engine, work)
    spans = df.groupby("ticker")["date"].agg(["min", "max"])
    gaps = gaps_since(engine, {t: (r["min"], r["max"]) for t, r in spans.iterrows()})
    return IngestResult(
        label, int(df["ticker"].nunique()), len(df), written, sorted(set(recorded)), gaps=gaps
    )


def ingest_frame(
    engine: Engine, df: pd.DataFrame, source: str, label: str | None = None, force: bool | None = None
) -> IngestResult:
    """Validate and upsert a long frame (ticker, date, open, high, low, close[, adj_close], volume)
    in one transaction. Raises InputError (nothing written) if any row is bad or it rewrites stored
    history without `force`."""
    raw = df.rename(columns={c: canonical_header(c) for c in df.columns})
    clean = validate_prices(raw, label or source)
    return _store(engine, clean, source, label or source, force)


def ingest_files(
    engine: Engine,
    paths: Iterable[str | Path],
    universe: Iterable[str],
    allow_new: bool = False,
    on_outcome: Callable[[FileOutcome], None] | None = None,
    force: bool | None = None,
    threshold_pct: float | None = None,
) -> list[FileOutcome]:
    """Ingest each file in its own transaction. A bad file writes nothing and is reported in its
    outcome; the other files still ingest. Files of one call that give different values for the same
    (ticker, date) are all refused, each naming the other: which one is right is the user's call.
    Stored history is changed only as `ingest fetch` changes it (`_store`; `force` to overwrite), and each
    stored file's unexplained large moves are in its outcome (`price_moves.moves_since`).
    `on_outcome` sees each file's outcome as it is done (progress)."""
    universe = list(universe)
    paths = list(map(Path, paths))
    outcomes = [FileOutcome(str(path)) for path in paths]
    frames: dict[int, pd.DataFrame] = {}
    for i, path in enumerate(paths):
        try:
            frames[i] = read_price_file(path, universe=universe, allow_new=allow_new)
        except LDTMError as exc:
            outcomes[i].error = str(exc)
    conflicts = _conflicting_sources(frames, paths)
    for i, outcome in enumerate(outcomes):
        df = frames.get(i)
        if df is not None:
            outcome.tickers = sorted(df["ticker"].unique().tolist())
            outcome.rows = len(df)
            if i in conflicts:
                outcome.error = conflicts[i]
            else:
                try:
                    source = paths[i].suffix.lower().lstrip(".")
                    stored = _store(engine, df, source, str(paths[i]), force)
                    outcome.written, outcome.gaps = stored.written, stored.gaps
                    outcome.action_tickers = stored.action_tickers
                    firsts = df.groupby("ticker")["date"].min()
                    outcome.moves = moves_since(
                        engine, {t: pd.Timestamp(d).date() for t, d in firsts.items()}, threshold_pct
                    )
                except LDTMError as exc:
                    outcome.error = str(exc)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def _conflicting_sources(frames: dict[int, pd.DataFrame], paths: list[Path]) -> dict[int, str]:
    """{file index: error} for files holding a (ticker, date) that another file gives other values for.
    Rows with identical values in several files are no conflict (the upsert writes them once)."""
    if len(frames) < 2:
        return {}
    rows = pd.concat([df.assign(_file=i) for i, df in frames.items()], ignore_index=True)
    shared = rows[rows.duplicated(["ticker", "date"], keep=False)]
    if shared.empty:
        return {}
    # drop_duplicates treats NaN as equal, so a missing adj_close in both files agrees.
    distinct = shared.drop_duplicates(["ticker", "date", *VALUE_COLUMNS])
    clash = distinct[distinct.duplicated(["ticker", "date"], keep=False)]
    if clash.empty:
        return {}
    errors: dict[int, str] = {}
    for i, mine in clash.groupby("_file", sort=True):
        keys = mine.set_index(["ticker", "date"]).index
        others = clash[(clash["_file"] != i) & clash.set_index(["ticker", "date"]).index.isin(keys)]
        first = mine.iloc[0]
        other = others[(others["ticker"] == first["ticker"]) & (others["date"] == first["date"])].iloc[0]
        column = next(c for c in VALUE_COLUMNS if not _same(first[c], other[c]))
        names = ", ".join(str(paths[j]) for j in sorted(others["_file"].unique()))
        errors[int(i)] = (
            f"{paths[i]}: {len(mine)} (ticker, date) row(s) differ from {names}: e.g. {first['ticker']} "
            f"{first['date'].date()} {column} {first[column]:g} here, {other[column]:g} in {paths[other['_file']]}; "
            "none of the conflicting files was stored (remove one source or make them agree)"
        )
    return errors


def _same(a, b) -> bool:
    return (pd.isna(a) and pd.isna(b)) or a == b


def ingest_synthetic(
    engine: Engine,
    tickers: Sequence[str],
    start: dt.date | str,
    end: dt.date | str,
    seed: int = 0,
    force: bool | None = None,
) -> IngestResult:
    """Generate the synthetic market for `tickers` and upsert it in one transaction. Splits planted by
    LDTM_SYNTHETIC_SPLITS (off by default) are honoured as `ingest fetch --source synthetic` honours them:
    raw bars re-based from each ex-date, and the split recorded as a corporate action."""
    from ldtm_core.data.sources.synthetic import ENV_SPLITS
    from ldtm_core.data.synthetic_market import generate, parse_splits

    tickers = list(dict.fromkeys(validate_ticker(t) for t in tickers))
    if not tickers:
        raise InputError("no tickers given for synthetic ingest")
    # Sessions past the calendar's range are unknown, not absent: refuse instead of silently stopping short.
    require_in_range(start, "synthetic start")
    require_in_range(end, "synthetic end")
    splits = {t: events for t, events in parse_splits(setting(ENV_SPLITS)).items() if t in tickers}
    df = generate(tickers, start, end, seed, splits=splits)
    first, last = pd.Timestamp(df["date"].min()).date(), pd.Timestamp(df["date"].max()).date()
    actions = [
        Action(t, ex, split_factor(ratio), "split", "synthetic")
        for t, events in splits.items()
        for ex, ratio in events
        if first <= ex <= last
    ]
    label = f"synthetic seed={seed}" + (f" splits={setting(ENV_SPLITS)}" if splits else "")
    clean = validate_prices(df, label)
    return _store(engine, clean, "synthetic", label, force, actions)
