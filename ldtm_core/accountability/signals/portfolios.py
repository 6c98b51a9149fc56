"""Signal performance, part 3: paper portfolios traded on the published directions (SPEC §15).

Each evening's book is built from the evening's published rows and held one session by the execution
rule (signals.execution: by default entered at the next session's close and held to the one after; no
slippage beyond the cost setting):
- `long_short`: long every bullish name, short every bearish one, equal weight per name, gross exposure 1
  (w = +1/n or -1/n over the n bullish + bearish names; the net exposure is reported beside it);
- `long_only`: long every bullish name at 1/n_bullish (no bullish name: cash, return 0).
A ticker with no chosen row that evening (no prediction, or one the flags leave out) holds nothing.
The return of a position is the row's `held_return` (execution.with_held; under `same_close` the row's
own filled-back next-day return). Turnover is sum |w_t - w_{t-1} drifted by the session's returns|; the
first evening buys the whole book. Cost = turnover x LDTM_SIGNAL_COST_BP / 10,000, taken from that evening's return,
at most the evening's wealth (1 + gross): a cost can ruin a book, never take it below zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ldtm_core.accountability.signals.ic import grid
from ldtm_core.data.calendar import sessions_between

PORTFOLIOS = ("long_short", "long_only")
LABELS = {
    "long_short": "long bullish / short bearish",
    "long_only": "long-only bullish",
    "benchmark": "equal-weight universe",
}


def scored_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows whose held return is known: only they can be in a scored evening's book."""
    if "held_return" not in rows:  # no silent default: the rule decides what a position earns
        raise ValueError("rows without held returns: apply signals.execution.with_held(rows, rule) first")
    return rows[np.isfinite(rows["held_return"].to_numpy(dtype=float))]


def weights(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Evenings x tickers target weights of `kind` from the evening's published directions."""
    if kind not in PORTFOLIOS:
        raise ValueError(f"portfolio must be one of {PORTFOLIOS}, not {kind!r}")
    rows = scored_rows(rows)
    side = rows["side"].to_numpy(dtype=float)
    if kind == "long_only":
        side = np.maximum(side, 0.0)
    frame = rows[["run_date", "ticker", "day_code", "name_code"]].assign(side=side)
    count = (frame["side"] != 0).groupby(frame["run_date"]).transform("sum")
    frame["w"] = np.where(count > 0, frame["side"] / count.clip(lower=1), 0.0)
    return grid(frame, ["w"])[0].fillna(0.0)


def realised(rows: pd.DataFrame) -> pd.DataFrame:
    """Evenings x tickers held returns under the execution rule (NaN: no scored row)."""
    return grid(scored_rows(rows), ["held_return"])[0]


@dataclass
class Portfolio:
    name: str
    daily: pd.DataFrame  # run_date, gross, turnover, cost, net, long, short, net_exposure
    weights: pd.DataFrame
    returns: pd.DataFrame  # the realised returns the weights earned

    def contributions(self) -> pd.DataFrame:
        """Per ticker: the sum over evenings of weight x return (the gross returns add up to it), the
        evenings long and short, and the share of its held evenings whose sign went its way. A zero move
        (a tie) is nobody's hit or miss, as on the board (accountability.board.reads): out of the hit rate."""
        w, r = self.weights, self.returns.reindex_like(self.weights).fillna(0.0)
        held = (w != 0) & (r != 0)
        right = (np.sign(w) == np.sign(r)) & held
        out = pd.DataFrame(
            {
                "ticker": w.columns,
                "contribution": (w * r).sum(axis=0).to_numpy(),
                "evenings_long": (w > 0).sum(axis=0).to_numpy(),
                "evenings_short": (w < 0).sum(axis=0).to_numpy(),
                "hit_rate": (right.sum(axis=0) / held.sum(axis=0).replace(0, np.nan)).to_numpy(),
            }
        )
        return out.sort_values("contribution", ascending=False).reset_index(drop=True)


def simulate(rows: pd.DataFrame, kind: str, cost_bp: float) -> Portfolio:
    """The daily record of portfolio `kind` over the evenings with a scored row, and the sessions between
    them with no published row at all: the book is flat then (sold, and bought back at a cost), never a
    gap the record skips."""
    w = weights(rows, kind)
    if len(w) > 1:
        sessions = sessions_between(w.index[0], w.index[-1])
        w = w.reindex(pd.Index(sorted(set(w.index) | set(sessions)), name=w.index.name), fill_value=0.0)
    r = realised(rows).reindex(index=w.index, columns=w.columns)
    wv, rv = w.to_numpy(), np.nan_to_num(r.to_numpy(), nan=0.0)
    gross = (wv * rv).sum(axis=1)
    # Last evening's book after the session it was held: each weight grown by its return, over the NAV.
    drifted = np.zeros_like(wv)
    if len(wv) > 1:
        drifted[1:] = wv[:-1] * (1.0 + rv[:-1]) / (1.0 + gross[:-1])[:, None]
    turnover = np.abs(wv - drifted).sum(axis=1)
    # A cost never takes more than the evening's wealth (10,000 bp on a flipped book was a net
    # below -100 %): at worst the book is ruined (net -100 %), never below.
    cost = np.minimum(turnover * cost_bp / 10_000.0, np.maximum(1.0 + gross, 0.0))
    daily = pd.DataFrame(
        {
            "run_date": w.index,
            "gross": gross,
            "turnover": turnover,
            "cost": cost,
            "net": gross - cost,
            "long": (wv > 0).sum(axis=1),
            "short": (wv < 0).sum(axis=1),
            "net_exposure": wv.sum(axis=1),
        }
    )
    return Portfolio(kind, daily, w, r)
