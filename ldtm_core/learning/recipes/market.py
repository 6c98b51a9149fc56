"""Recipes that read the market beside each ticker's own prices: `ridge_market` and `lightgbm_market`.

Their inputs are the `price_features` library of the row's own ticker plus the market's k-day log
returns on the row's date (`MARKET_RETURN_WINDOWS`), the market being one ticker of the store (`market`,
QQQ by default: the default universe is the NASDAQ-100; `--set market=SPY` for another). That is an
input that reads another ticker, so these recipes can find what a model of one ticker's prices cannot:
a ticker that follows the market a session late (`synthetic_market.PLANTED_FAMILIES`, "lagged_factor").
A row on a date the market has no bar for has no inputs (not trained on; not served, said why).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ldtm_core.errors import InputError
from ldtm_core.learning.recipes.inputs import PRICE_FEATURES, Inputs
from ldtm_core.learning.recipes.tabular import LIGHTGBM, RIDGE, TabularConfig

VERSION = 1
MARKET_RETURN_WINDOWS = (1, 5, 20)
# The ticker's own lead-lag sensitivity: the slope of its daily log return on the market's return one
# session earlier, over its last LAG_BETA_WINDOW sessions. Times today's market move it is the move the
# ticker's own history says follows tomorrow; a global model needs it, since one pooled coefficient on the
# market's return alone is the universe's average sensitivity, not this ticker's.
LAG_BETA_WINDOW = 120
KINDS = ("ridge_market", "lightgbm_market")


@dataclass(frozen=True)
class MarketConfig(TabularConfig):
    """A tabular recipe's settings (`TabularConfig`) and the ticker whose returns are the market."""

    kind: str = "ridge_market"
    market: str = "QQQ"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"market recipe kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not isinstance(self.market, str) or not self.market.strip():
            raise InputError("market recipe: --set market=TICKER needs a ticker")
        self.check_settings()


def market_names(cfg: MarketConfig | None = None) -> tuple[str, ...]:
    lead_lag = (f"market_lag_beta_{LAG_BETA_WINDOW}", "market_lag_signal")
    return (*PRICE_FEATURES.names(cfg), *(f"market_ret_{k}" for k in MARKET_RETURN_WINDOWS), *lead_lag)


def market_returns(arrays: dict, market: str, days: np.ndarray) -> np.ndarray:
    """[len(days), len(MARKET_RETURN_WINDOWS)]: the market's k-day log return ending on each day (its
    own sessions), NaN where it has no bar that day or fewer than k before it."""
    out = np.full((len(days), len(MARKET_RETURN_WINDOWS)), np.nan)
    a = arrays.get(market)
    if a is None or not len(a["date"]):
        return out
    log_close = np.log(np.asarray(a["close"], dtype=np.float64))
    own = np.asarray(a["date"], dtype="datetime64[D]")
    pos = np.searchsorted(own, days)
    hit = pos < len(own)
    hit[hit] = own[pos[hit]] == days[hit]
    for j, k in enumerate(MARKET_RETURN_WINDOWS):
        ret = np.full(len(own), np.nan)
        ret[k:] = log_close[k:] - log_close[:-k]
        out[hit, j] = ret[pos[hit]]
    return out


def lag_beta(tickers: np.ndarray, close: np.ndarray, market_1: np.ndarray) -> np.ndarray:
    """Per row: the slope of the ticker's log return on the market's return of its previous session, over
    its last LAG_BETA_WINDOW rows (rows of one ticker in date order; NaN until the window is full)."""
    same = np.r_[False, tickers[1:] == tickers[:-1]]
    r = np.where(same, np.log(close / np.r_[np.nan, close[:-1]]), np.nan)
    m = np.where(same, np.r_[np.nan, market_1[:-1]], np.nan)
    frame = pd.DataFrame({"r": r, "m": m, "rm": r * m, "mm": m * m})
    means = frame.groupby(tickers, sort=False).rolling(LAG_BETA_WINDOW).mean()
    means = means.reset_index(level=0, drop=True).sort_index()
    var = means["mm"] - means["m"] ** 2
    slope = (means["rm"] - means["r"] * means["m"]) / var.where(var > 1e-12)
    return slope.to_numpy(np.float64)


def _compute(bars: pd.DataFrame, cfg: MarketConfig, context: dict) -> np.ndarray:
    own = PRICE_FEATURES.compute(bars, cfg, context)
    days = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")
    market = market_returns(context, cfg.market, days)
    tickers = bars["ticker"].to_numpy(dtype=str)
    beta = lag_beta(tickers, bars["close"].to_numpy(np.float64), market[:, 0])
    return np.column_stack([own, market, beta, beta * market[:, 0]])


def _fingerprint(cfg: MarketConfig) -> str:
    spec = {
        "version": VERSION,
        "price_features": PRICE_FEATURES.fingerprint(cfg),
        "market": cfg.market,
        "market_returns": [
            f"ln(close_t / close_t-{k}) of the market, on its own sessions" for k in MARKET_RETURN_WINDOWS
        ],
        "lag_beta": f"rolling {LAG_BETA_WINDOW}-row OLS slope of r_t on the market's r of the row before",
        "lag_signal": "lag_beta x the market's r_t",
    }
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


MARKET_INPUTS = Inputs(
    "price_features+market",
    market_names,
    _compute,
    _fingerprint,
    lambda cfg: max(PRICE_FEATURES.lookback(cfg), max(MARKET_RETURN_WINDOWS) + 1, LAG_BETA_WINDOW + 2),
    lambda cfg: (cfg.market,),
    library=True,
)

# The tabular families' fit, predict and artifact, on these inputs.
RIDGE_MARKET = replace(RIDGE, config=MarketConfig, inputs=MARKET_INPUTS)
LIGHTGBM_MARKET = replace(LIGHTGBM, config=MarketConfig, inputs=MARKET_INPUTS)
