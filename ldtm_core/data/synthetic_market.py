"""A deterministic synthetic market: the offline default source (SPEC §2).

Each ticker's path mixes a shared market factor with its own regimes — trend, mean reversion and
high volatility — switching at random durations. OHLC is consistent by construction, volume rises
with the size of the move, and a few tickers list late (LATE_LISTINGS: recent IPOs with short history). The same
seed always gives the same prices, independent of which other tickers are generated.

None of those paths gives a model real skill: their next-day direction is close to a coin given the past.
PLANTED is the exception, a series with a known, learnable edge: it lets the demo show a
promotion the statistics justify beside no-skill tickers correctly refused. Its symbol (7 letters) cannot
be a real US listing (at most 5), and it is only in the `demo` universe.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.membership import Span
from ldtm_core.errors import InputError

# Real late listings in the universe (seed: < 3 years of history) with their first session. Only these
# list late, so the long-lived names (AAPL, TSLA, AMZN...) always have their full history.
LATE_LISTINGS = {
    "FER": "2024-05-09",
    "GEHC": "2023-01-04",
    "CSGP": "2023-06-01",
    "ARM": "2023-09-14",
    "DASH": "2020-12-09",
    "ABNB": "2020-12-10",
    "PLTR": "2020-09-30",
    "APP": "2021-04-14",
}
# Every random draw is indexed by a session's position on a fixed weekday grid, so a price never depends
# on the requested range: extending `end` by a day adds a row and changes none (nightly ingest relies
# on this, or history would be rewritten under recorded predictions).
GRID_START = np.datetime64("1990-01-01", "D")
GRID_LEN = int(np.busday_count(GRID_START, np.datetime64("2070-01-01", "D")))
# Daily (drift, volatility, mean-reversion strength) per regime.
REGIMES = {
    "trend": (0.0004, 0.012, 0.0),
    "mean_reversion": (0.0, 0.010, 0.08),
    "high_volatility": (-0.0002, 0.032, 0.0),
}
REGIME_NAMES = tuple(REGIMES)
# The index ETF is the market factor itself; its levered siblings are multiples of it.
LEVERED = {"QQQ": 1.0, "TQQQ": 3.0, "SQQQ": -3.0}
# The share of each day's unforeseen log move that happens overnight, between the previous close and the
# open (the foreseen part is all in the open).
OVERNIGHT_SHARE = 0.35
# The planted edge: log price = a slow random-walk anchor + a mean-reverting AR(1) deviation x,
# x_t = rho * x_{t-1} + sigma * e_t (rho = 0: every day's deviation is undone the next). Tomorrow's move
# is (rho - 1) x_t + noise, so its sign is opposite to today's deviation with probability
# 1/2 + arcsin(corr)/pi, corr = (1 - rho) sd(x) / sd(move) = 0.71 at rho = 0: a 75 % ceiling for a
# predictor that knew the anchor, and no drift (always-up near 50 %). A model sees the deviation in its
# inputs (close vs its 5/10/20-day means, RSI, the window's min-max position). Calibrated on the `demo`
# profile's walk-forward backtest (docs/reading-the-figures.md, "SYNEDGE"): 69-74 % next-day direction vs
# always-up ~50 %, exact one-sided p < 0.001 on the demo's 2 folds at its seed 0.
PLANTED = {"SYNEDGE": {"rho": 0.0, "sigma": 0.015, "anchor_vol": 0.0005}}


# Planted families (never in a universe; `benchmarks/recipes.py` adds them): edges that only one kind of
# recipe can find, on symbols of 7 characters (no US listing has more than 5).
# - pooled: every member's daily log return reverses the mean of its previous 5 by the same small amount,
#   r_t = -b mean(r_{t-5..t-1}) + sigma e_t: corr(r_t, 5-day return) = -b / sqrt(5), 0.067 at b = 0.15.
#   One ticker's few years hardly tell it from noise; every member's rows pooled do (a global recipe's).
# - own_sign: each member's return continues its last one, or reverses it, by its own sign,
#   r_t = s_i a r_{t-1} + sigma e_t, s_i = +1 for odd members and -1 for even: corr +-a, ~60 % next-day
#   direction at a = 0.3 for a model of that ticker; pooled, the signs cancel (a per-ticker recipe's).
# - lagged_factor: each member follows the market factor (the index ETF, QQQ) a session late,
#   r_t = beta m_{t-1} + sigma e_t: corr 0.31 with yesterday's market move, ~60 % next-day direction at
#   beta = 0.5, to a model that reads the market; its own past moves say nothing of m_{t-1} (a
#   cross-sectional recipe's: `recipes.market`).
PLANTED_FAMILIES = {
    "pooled": {"members": tuple(f"SYNPL{i:02d}" for i in range(1, 31)), "b": 0.15, "sigma": 0.015},
    "own_sign": {"members": tuple(f"SYNSG{i:02d}" for i in range(1, 11)), "a": 0.3, "sigma": 0.015},
    "lagged_factor": {"members": tuple(f"SYNLF{i:02d}" for i in range(1, 21)), "beta": 0.5, "sigma": 0.015},
}
FAMILY_OF = {t: name for name, f in PLANTED_FAMILIES.items() for t in f["members"]}


def family_path(ticker: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A planted family member's log price (from 0) on the whole weekday grid (PLANTED_FAMILIES), and its
    daily innovations: what its past did not tell (the rest of each move it did)."""
    name = FAMILY_OF[ticker]
    f = PLANTED_FAMILIES[name]
    shocks = f["sigma"] * _rng(seed, ticker, "family").standard_normal(GRID_LEN)
    if name == "lagged_factor":
        market = _market_returns(seed)
        return np.cumsum(f["beta"] * np.r_[0.0, market[:-1]] + shocks), shocks
    if name == "pooled":
        ar = [1.0, *([f["b"] / 5] * 5)]  # r_t + (b/5) (r_{t-1} + ... + r_{t-5}) = sigma e_t
    else:
        sign = 1.0 if int(ticker[-2:]) % 2 else -1.0
        ar = [1.0, -sign * f["a"]]  # r_t - s a r_{t-1} = sigma e_t
    from scipy.signal import lfilter  # here, not at import: scipy.signal is 1.5 s of every CLI start

    return np.cumsum(lfilter([1.0], ar, shocks)), shocks


def _foreseen(log_path: np.ndarray, surprise: np.ndarray, grid_pos: np.ndarray) -> np.ndarray:
    """Per session: the part of its move since the session before that the past foretold."""
    foreseen = np.cumsum(np.diff(log_path, prepend=0.0) - surprise)
    return np.diff(foreseen[grid_pos], prepend=0.0)


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def _market_returns(seed: int) -> np.ndarray:
    """The shared market factor on the whole weekday grid."""
    rng = _rng(seed, "__market__")
    vol = np.where(rng.random(GRID_LEN) < 0.1, 0.02, 0.008)
    return 0.0002 + vol * rng.standard_normal(GRID_LEN)


def planted_path(ticker: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The planted ticker's log price (from 0) on the whole weekday grid, anchor + AR(1) deviation, and
    its daily surprise: the anchor's step and the deviation's new innovation (the rest of each move, the
    deviation's reversion, its past foretold)."""
    p = PLANTED[ticker]
    draws = _rng(seed, ticker, "planted").standard_normal((2, GRID_LEN))
    from scipy.signal import lfilter

    # lfilter runs the AR(1) recursion x_t = rho x_{t-1} + sigma e_t in C.
    deviation = lfilter([1.0], [1.0, -p["rho"]], p["sigma"] * draws[0])
    anchor = np.cumsum(p["anchor_vol"] * draws[1])
    return anchor + deviation, p["anchor_vol"] * draws[1] + p["sigma"] * draws[0]


def _regime_path(rng: np.random.Generator, n: int) -> np.ndarray:
    """Regime index per day: segments of geometric length (mean ~120 sessions)."""
    out = np.empty(n, dtype=np.int64)
    i = 0
    while i < n:
        length = int(rng.geometric(1 / 120))
        out[i : i + length] = rng.choice(len(REGIME_NAMES), p=[0.5, 0.3, 0.2])
        i += length
    return out


def _ticker_frame(
    ticker: str,
    sessions: np.ndarray,
    grid_pos: np.ndarray,
    market: np.ndarray,
    seed: int,
    overnight_share: float = OVERNIGHT_SHARE,
) -> pd.DataFrame:
    """Prices on `sessions` (every session from the grid start to the requested end)."""
    rng = _rng(seed, ticker)
    n = len(sessions)
    draws = {name: _rng(seed, ticker, name) for name in ("regimes", "shocks", "open", "wick", "volume")}
    mkt = market[grid_pos]
    foreseen = np.zeros(n)  # the part of each day's move its past foretold: public at the open
    if ticker in LEVERED:
        idio = LEVERED[ticker] * mkt + 0.002 * draws["shocks"].standard_normal(GRID_LEN)[grid_pos]
    elif ticker in PLANTED or ticker in FAMILY_OF:
        path, surprise = planted_path(ticker, seed) if ticker in PLANTED else family_path(ticker, seed)
        idio = np.diff(path[grid_pos], prepend=0.0)
        foreseen = _foreseen(path, surprise, grid_pos)
    else:
        regimes = _regime_path(draws["regimes"], GRID_LEN)[grid_pos]
        drift, vol, kappa = (np.array([REGIMES[r][k] for r in REGIME_NAMES])[regimes] for k in range(3))
        beta = rng.uniform(0.6, 1.6)
        shocks = drift + vol * draws["shocks"].standard_normal(GRID_LEN)[grid_pos]
        idio = np.empty(n)
        # Mean reversion pulls the log price back toward its recent anchor; the recursion is
        # inherently sequential, so it runs on plain floats (a few ms per ticker).
        level = anchor = 0.0
        mkt_l, shocks_l, kappa_l = mkt.tolist(), shocks.tolist(), kappa.tolist()
        drift_l = drift.tolist()
        for i in range(n):
            pull = kappa_l[i] * (level - anchor)
            step = beta * mkt_l[i] + shocks_l[i] - pull
            foreseen[i] = drift_l[i] - pull
            anchor += 0.02 * (level - anchor)
            level += step
            idio[i] = step
    log_close = np.log(rng.uniform(2, 40)) + np.cumsum(idio)
    close = np.exp(log_close)
    prev_close = np.concatenate([[close[0] / np.exp(idio[0])], close[:-1]])
    # The open carries what the day's past foretold (public by then, so the market has priced it) and a
    # share of the rest of the move, as real opens do: a rule that trades at the next open gets no edge
    # from the closes alone. Before, opens were the previous close plus noise, and "next open" books
    # collected the whole predicted day (Sharpe 10.8 in the demo). A share of 0: that earlier market.
    overnight = 0.004 * draws["open"].standard_normal(GRID_LEN)[grid_pos]
    if overnight_share > 0:
        overnight = foreseen + overnight_share * (idio - foreseen) + overnight
    open_ = prev_close * np.exp(overnight)
    body_hi, body_lo = np.maximum(open_, close), np.minimum(open_, close)
    spread = np.abs(idio) + 0.004
    wick = draws["wick"].uniform(0.05, 0.6, (2, GRID_LEN))[:, grid_pos]
    high = body_hi * (1 + spread * wick[0])
    low = body_lo * (1 - spread * wick[1])
    base_volume = rng.uniform(2e6, 5e7)
    volume = (
        base_volume
        * np.exp(0.35 * draws["volume"].standard_normal(GRID_LEN)[grid_pos])
        * (1 + 25 * np.abs(idio))
    )
    frame = pd.DataFrame(
        {
            "ticker": ticker,
            "date": sessions,
            "open": open_.round(4),
            "high": high.round(4),
            "low": low.round(4),
            "close": close.round(4),
            "adj_close": close.round(4),
            "volume": volume.astype(np.int64),
        }
    )
    if ticker in LATE_LISTINGS:
        frame = frame[frame["date"] >= dt.date.fromisoformat(LATE_LISTINGS[ticker])]
    return frame.reset_index(drop=True)


def parse_splits(spec: str) -> dict[str, list[tuple[dt.date, float]]]:
    """`NVDA:2024-06-10:10,AAPL:2020-08-31:4` (ticker:ex-date:ratio for a ratio:1 split) -> {ticker: [...]}."""
    out: dict[str, list[tuple[dt.date, float]]] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        try:
            ticker, day, ratio = item.split(":")
            out.setdefault(ticker.strip().upper(), []).append((dt.date.fromisoformat(day), float(ratio)))
        except ValueError:
            raise InputError(f"synthetic split {item!r}: expected TICKER:YYYY-MM-DD:RATIO") from None
    return out


def apply_splits(df: pd.DataFrame, splits: Mapping[str, Sequence[tuple[dt.date, float]]]) -> pd.DataFrame:
    """The market as a style-1 source sends it: bars from each ex-date on divided by the ratio (volume
    times it), raw; `adj_close` back-adjusted onto the latest basis. The continuous market stays the
    truth: put on one basis through the recorded actions, it is unchanged (up to rounding)."""
    df = df.copy()
    levels = ["open", "high", "low", "close"]
    for ticker, events in splits.items():
        rows = df["ticker"] == ticker
        for ex, ratio in events:
            if not ratio > 0:
                raise InputError(f"synthetic split {ticker} {ex}: ratio {ratio!r} must be > 0")
            after = rows & (df["date"] >= ex)
            df.loc[after, levels] = (df.loc[after, levels] / ratio).round(4)
            df.loc[after, "volume"] = (df.loc[after, "volume"] * ratio).round().astype(np.int64)
            df.loc[rows, "adj_close"] = (
                df.loc[rows, "adj_close"] / ratio
            )  # the whole history on the new basis
        df.loc[rows, "adj_close"] = df.loc[rows, "adj_close"].round(4)
    return df


@lru_cache(maxsize=128)
def _ticker_path(ticker: str, seed: int, last: dt.date, overnight_share: float) -> pd.DataFrame:
    """One ticker's bars on every session from the grid start to `last`, simulated from the grid start so
    every path (and its mean-reversion state) is range-independent. Kept for the process's next ask (a
    test suite or a replay asks for the same paths again and again); callers only ever slice it."""
    sessions = np.array(sessions_between(GRID_START, last))
    grid_pos = np.busday_count(GRID_START, sessions.astype("datetime64[D]"))
    return _ticker_frame(ticker, sessions, grid_pos, _market_returns(seed), seed, overnight_share)


def generate(
    tickers: Sequence[str],
    start: dt.date | str,
    end: dt.date | str,
    seed: int = 0,
    splits: Mapping[str, Sequence[tuple[dt.date, float]]] | None = None,
    delistings: Mapping[str, dt.date | str] | None = None,
    overnight_share: float = OVERNIGHT_SHARE,
) -> pd.DataFrame:
    """Long frame (ticker, date, open, high, low, close, adj_close, volume) over XNYS sessions.

    `splits` (off by default: the demo and the tests see the continuous market): {ticker: [(ex-date,
    ratio)]} re-bases those tickers as raw closes after a ratio:1 split (`apply_splits`).
    `delistings` (off by default): {ticker: last session}: that ticker's bars stop after it, as a
    delisted name's do; the bars before are unchanged. `membership_spans` writes the matching history.
    `overnight_share`: the share of each day's unforeseen move in its open, which also carries the
    foreseen part (0: the releases before 2026-12, whose
    opens were the previous close plus noise; the closes are the same either way)."""
    if np.datetime64(pd.Timestamp(start).date(), "D") < GRID_START:
        # The random grid is fixed (prices never depend on the range asked), so it cannot grow backwards.
        raise InputError(f"synthetic start {start}: the synthetic market begins on {GRID_START}")
    days = sessions_between(start, end)
    if len(days) < 2:
        raise InputError(f"synthetic range {start}..{end} holds fewer than 2 XNYS sessions")
    first = days[0]
    frames = [_ticker_path(t, seed, days[-1], float(overnight_share)) for t in tickers]
    frames = [f[f["date"] >= first] for f in frames]
    gone = {t: pd.Timestamp(d).date() for t, d in (delistings or {}).items()}
    frames = [f[f["date"] <= gone[t]] if t in gone else f for t, f in zip(tickers, frames, strict=True)]
    df = pd.concat(frames, ignore_index=True)
    df["ticker"] = df["ticker"].astype(str)
    # Rounding can never break OHLC consistency: widen high/low to contain open and close.
    df["high"] = df[["high", "open", "close"]].max(axis=1)
    df["low"] = df[["low", "open", "close"]].min(axis=1)
    if splits:
        df = apply_splits(df, splits)
        df["high"] = df[["high", "open", "close"]].max(axis=1)
        df["low"] = df[["low", "open", "close"]].min(axis=1)
    return df


def membership_spans(
    tickers: Sequence[str], start: dt.date | str, delistings: Mapping[str, dt.date | str] | None = None
) -> list[Span]:
    """The synthetic market's membership history (data.membership): each ticker a member from `start`
    (or its late listing, LATE_LISTINGS) to its delisting (`delistings`; none: still a member). Written
    with `membership.write_membership_file`, it is what `ldtm universe import` loads beside the prices."""
    first = pd.Timestamp(start).date()
    gone = {t: pd.Timestamp(d).date() for t, d in (delistings or {}).items()}
    out = []
    for t in tickers:
        listed = max(first, dt.date.fromisoformat(LATE_LISTINGS[t])) if t in LATE_LISTINGS else first
        out.append(Span(t, listed, gone.get(t)))
    return out
