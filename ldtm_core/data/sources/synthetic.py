"""The deterministic synthetic market (ldtm_core.data.synthetic_market) as a price source: the offline default.

Optional splits (`LDTM_SYNTHETIC_SPLITS=NVDA:2024-06-10:10,...`, off by default) make it a style-1
source: raw bars re-based from each ex-date, and the split events in its answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from ldtm_core.config import setting
from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.corporate_actions import Action, split_factor
from ldtm_core.data.sources.base import RAW_COLUMNS, PriceSource, SourceAnswer
from ldtm_core.data.synthetic_market import generate, parse_splits

ENV_SPLITS = "LDTM_SYNTHETIC_SPLITS"


class SyntheticSource(PriceSource):
    name = "synthetic"
    batch_size = 1000  # no network: one call for any number of tickers

    def __init__(self, seed: int = 0, splits: dict | None = None, delistings: dict | None = None):
        self.seed = seed
        self.splits = parse_splits(setting(ENV_SPLITS)) if splits is None else splits
        # {ticker: last session} (off by default): bars stop after it (synthetic_market.generate).
        self.delistings = delistings or {}

    @classmethod
    def from_spec(cls, arg: str, *, seed: int) -> SyntheticSource:
        return cls(seed=seed)

    def describe(self) -> str:
        return f"synthetic seed={self.seed}"

    def fetch(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> SourceAnswer:
        answer = SourceAnswer()
        if len(sessions_between(start, end)) < 2:  # the generator needs two sessions; widen backwards
            start = start - dt.timedelta(days=7)
        df = generate(list(tickers), start, end, self.seed, splits=self.splits, delistings=self.delistings)
        for ticker in tickers:
            for ex, ratio in self.splits.get(ticker, []):
                if start <= ex <= end:
                    answer.actions.append(Action(ticker, ex, split_factor(ratio), "split", "synthetic"))
        for ticker, group in df.groupby("ticker", sort=False):
            answer.frames[str(ticker)] = group[RAW_COLUMNS].reset_index(drop=True)
        for ticker in tickers:
            if ticker not in answer.frames or answer.frames[ticker].empty:
                why = (
                    f"delisted after {self.delistings[ticker]}"
                    if ticker in self.delistings and str(self.delistings[ticker]) < str(start)
                    else "not listed yet"
                )
                answer.fail(ticker, f"empty answer: no synthetic bars between {start} and {end} ({why})")
        return answer
