"""The checks of the `features` asset (current, finite, RSI in range, equal to a recomputation; and the
`price_features` library's rows current and equal to a recomputation), from one read of prices and
stored rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Engine

import ldtm_core.data.feature_store.library as library
from ldtm_core.data.feature_store.bulk_read import load_prices_bulk, load_stored_bulk
from ldtm_core.data.feature_store.fingerprint import current_fingerprint
from ldtm_core.data.feature_store.read_rule import stale_reason, stored_sets
from ldtm_core.data.features import compute_features
from ldtm_core.data.universe import validate_ticker
from ldtm_core.schema import FEATURE_COLUMNS


@dataclass
class CheckResult:
    passed: bool
    problems: dict[str, str] = field(default_factory=dict)  # ticker -> what is wrong
    checked: int = 0


def check_features(
    engine: Engine, tickers: Sequence[str], sample_rows: int = 50, seed: int = 0, rtol: float = 1e-12
) -> dict[str, CheckResult]:
    """The checks of the `features` asset over `tickers`, from one read of prices and stored rows:

    - `current`: the stored set has the same last date and fingerprint as the ticker's prices now;
    - `finite`: no NaN/inf in any stored row (the warm-up rows are not stored at all);
    - `rsi_in_range`: RSI-14 within [0, 100];
    - `match_recomputation`: on a random sample of rows per ticker, stored values equal a fresh
      recomputation from prices (to `rtol`; the store keeps doubles exactly, so any difference is real);
    - `library_current`, `library_match_recomputation`: the same two for the `price_features` library's
      stored rows (bars and values; NaN in warm-up equals NaN).
    """
    tickers = [validate_ticker(t) for t in tickers]
    all_prices = load_prices_bulk(engine, tickers)
    all_stored = load_stored_bulk(engine, tickers)
    sets = stored_sets(engine, tickers)
    rng = np.random.default_rng(seed)
    library_sets, library_rows = library.library_sets(engine, tickers), library.stored_rows(engine, tickers)
    names = ("current", "finite", "rsi_in_range", "match_recomputation", *LIBRARY_CHECKS)
    res = {name: CheckResult(True) for name in names}
    for t in tickers:
        prices, stored = all_prices[t], all_stored[t]
        if not prices.empty:
            current = current_fingerprint(engine, t, prices)
            res["current"].checked += 1
            reason = stale_reason(sets.get(t), current)
            if reason:
                res["current"].problems[t] = reason
            res["library_current"].checked += 1
            reason = stale_reason(library_sets.get(t), current, library.LIBRARY_DEFINITION)
            if reason:
                res["library_current"].problems[t] = reason
        if t in library_rows:
            _check_library(
                res["library_match_recomputation"], t, prices, library_rows[t], rng, sample_rows, rtol
            )
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


LIBRARY_CHECKS = ("library_current", "library_match_recomputation")


def _check_library(
    res: CheckResult,
    t: str,
    prices,
    stored: tuple[np.ndarray, np.ndarray],
    rng,
    sample_rows: int,
    rtol: float,
) -> None:
    """Sampled stored library rows against a recomputation from the ticker's prices now."""
    dates, values = stored
    if prices.empty:
        res.problems[t] = "stored price features but no prices to recompute them from"
        return
    fresh = library.library_rows(prices, t)
    fresh_dates = np.asarray(prices["date"], dtype="datetime64[D]")
    picks = np.sort(rng.choice(len(dates), size=min(sample_rows, len(dates)), replace=False))
    res.checked += len(picks)
    at = np.searchsorted(fresh_dates, dates[picks])
    found = (at < len(fresh_dates)) & (fresh_dates[np.minimum(at, len(fresh_dates) - 1)] == dates[picks])
    if not found.all():
        res.problems[t] = f"stored price feature row {dates[picks][~found][0]} has no price row"
        return
    a, b = values[picks], fresh[at]
    close = np.isclose(a, b, rtol=rtol, atol=0.0) | (np.isnan(a) & np.isnan(b))
    if not close.all():
        i, j = np.argwhere(~close)[0]
        res.problems[t] = (
            f"{library.COLUMNS[j]} on {dates[picks][i]}: stored {a[i, j]!r}, recomputed {b[i, j]!r}"
        )
