"""The `features` asset's build: compute and store the reference features and the `price_features`
library for many tickers with one prices read and one write transaction; a set already current is left
alone, one new session is appended."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, delete, insert

import ldtm_core.data.feature_store.library as library
from ldtm_core.data.feature_store.binary_copy import insert_rows
from ldtm_core.data.feature_store.bulk_read import load_prices_bulk
from ldtm_core.data.feature_store.fingerprint import (
    FEATURE_DEFINITION,
    PriceFingerprint,
    corporate_actions_applied,
    fingerprint,
)
from ldtm_core.data.feature_store.read_rule import stale_reason, stored_sets
from ldtm_core.data.features import compute_features
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError
from ldtm_core.schema import FEATURE_COLUMNS, feature_sets, features


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
    # The `price_features` library's set: its status (as above, or `refused` with why) and rows written.
    library: str = ""
    library_rows_written: int = 0
    library_reason: str = ""


def feature_stats(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per feature: min / mean / max over the stored rows."""
    if frame.empty:
        return {}
    return {
        c: {"min": float(frame[c].min()), "mean": float(frame[c].mean()), "max": float(frame[c].max())}
        for c in FEATURE_COLUMNS
    }


def _write_sets(conn: Connection, writes: list[tuple[BuildOutcome, pd.DataFrame, bool]]) -> None:
    """Rows and fingerprints of the given tickers in the caller's transaction: a reader sees every set as
    it was or as it is now, never rows without their fingerprint."""
    replaced = [o.ticker for o, _, replace in writes if replace]
    if replaced:
        conn.execute(delete(features).where(features.c.ticker.in_(replaced)))
    insert_rows(conn, [(o.ticker, rows) for o, rows, _ in writes])
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


def _plan(stored, fp: PriceFingerprint, definition: str, force: bool, prefix) -> tuple[str, str]:
    """(`current`, `appended` or `built`, why) for a stored set against prices fingerprinted `fp`;
    `prefix(n)` is the fingerprint of the first n price rows. Features at t use nothing after t, so a set
    whose prices are an unchanged prefix of today's stays right and only gains the new sessions."""
    reason = stale_reason(stored, fp, definition)
    if force:
        return "built", "forced"
    if reason is None:
        return "current", "stored features match the prices"
    if (
        stored is not None
        and stored.definition == definition
        and stored.price_rows < fp.rows
        and prefix(stored.price_rows) == stored.fingerprint
    ):
        return "appended", reason
    return "built", reason


def _remove_set(conn: Connection, ticker: str) -> None:
    conn.execute(delete(features).where(features.c.ticker == ticker))
    conn.execute(delete(feature_sets).where(feature_sets.c.ticker == ticker))


def build_features(engine: Engine, tickers: Sequence[str], force: bool = False) -> list[BuildOutcome]:
    """Compute and store the features of `tickers` and their `price_features` library: one prices
    read, one write transaction.

    A ticker whose stored set already matches its prices is left alone (`current`); one whose stored
    prices are an unchanged prefix of today's (the nightly case: one new session) gets only the new
    rows (`appended`); anything else is replaced (`built`). `force` replaces every set.
    """
    tickers = [validate_ticker(t) for t in tickers]
    all_prices = load_prices_bulk(engine, tickers)
    sets, library_sets = stored_sets(engine, tickers), library.library_sets(engine, tickers)
    outcomes, writes, library_writes, gone = [], [], [], []
    for t in tickers:
        prices = all_prices[t]
        stored = sets.get(t)
        if prices.empty:
            if stored is not None or t in library_sets:
                gone.append(t)
            outcomes.append(BuildOutcome(t, "no prices", reason="no prices stored for this ticker"))
            continue
        actions = corporate_actions_applied(engine, t)
        fp = fingerprint(prices, actions)
        prefixes: dict[int, PriceFingerprint] = {}

        def prefix(n: int, prices=prices, actions=actions, prefixes=prefixes) -> PriceFingerprint:
            if n not in prefixes:
                prefixes[n] = fingerprint(prices.iloc[:n], actions)
            return prefixes[n]

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
        outcome.status, outcome.reason = _plan(stored, fp, FEATURE_DEFINITION, force, prefix)
        if outcome.status == "appended":
            new = frame[frame.index > stored.last_date] if stored.last_date is not None else frame
            outcome.rows_written = len(new)
            writes.append((outcome, new, False))
        elif outcome.status == "built":
            outcome.rows_written = len(frame)
            writes.append((outcome, frame, True))
        lib = library_sets.get(t)
        outcome.library, outcome.library_reason = _plan(lib, fp, library.LIBRARY_DEFINITION, force, prefix)
        if outcome.library == "current":
            continue
        try:
            rows = library.library_rows(prices, t)
        except InputError as e:  # bars the library refuses: this ticker's library rows only
            outcome.library, outcome.library_reason = "refused", str(e)
            continue
        keep = np.arange(len(prices)) >= (lib.rows if outcome.library == "appended" else 0)
        outcome.library_rows_written = int(keep.sum())
        library_writes.append((t, fp, prices["date"][keep], rows[keep], outcome.library == "built"))
    if writes or library_writes or gone:

        def work(conn: Connection) -> None:
            for t in gone:
                _remove_set(conn, t)
                library.remove_set(conn, t)
            if writes:
                _write_sets(conn, writes)
            library.write_sets(conn, library_writes)

        run_in_transaction(engine, work)
    return outcomes
