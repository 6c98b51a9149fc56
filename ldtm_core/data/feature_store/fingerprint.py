"""The fingerprint of the prices a ticker's stored features came from: the one place that defines "the
same prices" (`fingerprint`, `corporate_actions_applied`); extend it here."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine

from ldtm_core.data.corporate_actions import load_actions
from ldtm_core.data.features import warmup_rows
from ldtm_core.data.price_gaps import max_gap_sessions, missing_sessions
from ldtm_core.schema import FEATURE_COLUMNS

# Stored rows are only valid for the feature code that wrote them: a change of the stored columns or their
# warm-up (bump the number for any change of a stored feature's formula) makes every stored set stale.
# Registering a feature the store has no column for changes nothing here: it is computed on read.
FEATURE_DEFINITION = f"ldtm-features-1:{','.join(FEATURE_COLUMNS)}:warmup={warmup_rows(FEATURE_COLUMNS)}"
NO_ACTIONS = "none"
BAR_FIELDS = ("open", "high", "low", "close", "volume")


@dataclass(frozen=True)
class PriceFingerprint:
    """What a ticker's feature rows were computed from: row count, first/last date, a hash of the bars,
    and the corporate actions applied to the series."""

    rows: int
    first_date: dt.date | None
    last_date: dt.date | None
    bars_sha256: str
    corporate_actions: str = NO_ACTIONS
    # The holes features restart after (price_gaps), as "<max gap>:<count>"; "" for none, which keeps the
    # token of a gap-free series as it was before the rule (stored sets and fold keys stay valid).
    gaps: str = ""

    @property
    def token(self) -> str:
        gaps = f";gaps={self.gaps}" if self.gaps else ""
        return (
            f"rows={self.rows};first={self.first_date};last={self.last_date};"
            f"bars={self.bars_sha256};ca={self.corporate_actions}{gaps}"
        )

    @property
    def short(self) -> str:
        return f"{self.rows} rows to {self.last_date}, bars {self.bars_sha256[:12]}, actions {self.corporate_actions}"

    @classmethod
    def from_token(cls, token: str) -> PriceFingerprint:
        parts = dict(p.split("=", 1) for p in token.split(";"))

        def day(value: str) -> dt.date | None:
            return None if value == "None" else dt.date.fromisoformat(value)

        return cls(
            rows=int(parts["rows"]),
            first_date=day(parts["first"]),
            last_date=day(parts["last"]),
            bars_sha256=parts["bars"],
            corporate_actions=parts["ca"],
            gaps=parts.get("gaps", ""),
        )


def fingerprint(prices: pd.DataFrame, corporate_actions: Sequence[tuple] = ()) -> PriceFingerprint:
    """The fingerprint of one ticker's price frame (date, open, high, low, close, volume).

    The hash covers the dates and all five bar fields, not only closes: every one of them is a feature,
    so a revised volume makes stored features stale as surely as a revised close. `corporate_actions`
    are the actions applied to the series (see corporate_actions_applied).
    """
    df = prices.sort_values("date") if len(prices) else prices
    digest = hashlib.sha256()
    if len(df):
        days = pd.to_datetime(df["date"]).to_numpy().astype("datetime64[D]").astype("<i8")
        bars = np.ascontiguousarray(
            np.stack([df[f].to_numpy(dtype=np.float64) for f in BAR_FIELDS], 1), "<f8"
        )
        digest.update(days.tobytes())
        digest.update(bars.tobytes())
    actions = NO_ACTIONS
    if corporate_actions:
        actions = hashlib.sha256(repr(sorted(map(tuple, corporate_actions))).encode()).hexdigest()[:16]
    first = pd.Timestamp(df["date"].iloc[0]).date() if len(df) else None
    last = pd.Timestamp(df["date"].iloc[-1]).date() if len(df) else None
    # Features restart after a long hole: which holes count (the setting) is part of what they came from.
    limit = max_gap_sessions()
    holes = int((missing_sessions(df["date"]) > limit).sum()) if len(df) else 0
    gaps = f"{limit}:{holes}" if holes else ""
    return PriceFingerprint(len(df), first, last, digest.hexdigest(), actions, gaps)


def corporate_actions_applied(conn_or_engine: Connection | Engine, ticker: str) -> tuple[tuple, ...]:
    """The corporate actions applied to `ticker`'s price series, as (ex_date, factor, kind) tuples: the
    recorded ones (load_prices applies them all), so recording an action makes stored features stale."""
    actions = load_actions(conn_or_engine, [ticker]).get(ticker, [])
    return tuple((a.ex_date.isoformat(), round(a.factor, 12), a.kind) for a in actions)


def current_fingerprint(engine: Engine, ticker: str, prices: pd.DataFrame) -> PriceFingerprint:
    return fingerprint(prices, corporate_actions_applied(engine, ticker))
