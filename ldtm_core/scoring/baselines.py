"""Next-day direction baselines scored on the model's own rows, each with its exact paired test (issue 21).

- always-up: "up" every evening. In a falling market it is far below a coin, so "the model beats
  always-up" can be said of a model worse than a coin (real IXIC: 40.9 % vs 36.4 %).
- persistence: tomorrow moves like today (run-date close vs the close before it).
- trailing majority (`TREND_SESSIONS`): the majority direction of the last 21 sessions' moves up to the
  run date (ties: up). Known at prediction time, no hindsight, and a falling market cannot flatter the
  model against it: when most recent sessions fall it says "down". The trailing window is chosen over
  the model's training window because a training window is one constant direction for a whole fold
  (always-up or always-down again, years stale by the end of a long fold), and because the same rule
  scores live rows without knowing which model or training window produced them.

A tie (the next-day close equals the run-date close) is scored by no one: every baseline and the model
skip those rows (`n` counts the rest), the rule the fillback, the views and the backtest apply. A
baseline that calls no move (persistence after a flat day) misses any real move.

"Beats" is only ever said with the one-sided exact sign test on the rows where model and baseline
disagree (`skill.sign_test_p_value`), p beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldtm_core.scoring.skill import format_p_value, sign_test_p_value

TREND_SESSIONS = 21  # one trading month; odd, so a month without flat days never ties
SIGNIFICANCE = 0.05  # the p-value at which a report says "beats"
BASELINES = ("always_up", "persistence", "trend")
LABELS = {
    "always_up": "always-up",
    "persistence": "persistence",
    "trend": f"trailing-{TREND_SESSIONS} majority",
}


@dataclass(frozen=True)
class Paired:
    """One baseline on the model's rows: its hits, and the discordant rows of model vs baseline."""

    name: str
    n: int
    hits: int
    model_only: int  # model right, baseline wrong
    base_only: int  # baseline right, model wrong

    @property
    def accuracy(self) -> float:
        return self.hits / self.n if self.n else float("nan")

    @property
    def p_value(self) -> float:
        """One-sided exact p of "the model is right more often than this baseline"."""
        return sign_test_p_value(self.model_only, self.base_only)

    def verdict(self) -> str:
        """'beats' / 'does not beat', always with its test and p-value."""
        word = "beats" if self.p_value <= SIGNIFICANCE else "does not beat"
        return (
            f"{word} {LABELS[self.name]} ({self.accuracy * 100:.2f}%): model right on {self.model_only} vs "
            f"{self.base_only} of {self.model_only + self.base_only} disagreements, one-sided exact "
            f"p = {format_p_value(self.p_value)}"
        )

    def __add__(self, other: Paired) -> Paired:
        return Paired(
            self.name,
            self.n + other.n,
            self.hits + other.hits,
            self.model_only + other.model_only,
            self.base_only + other.base_only,
        )


def trailing_majority(close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """+1/-1 per row: the majority sign of the moves of the `TREND_SESSIONS` sessions ending at each row
    (fewer at the start of the series; ties and no moves: up). Uses only closes up to the row's date."""
    moves = np.nan_to_num(np.sign(np.asarray(close, float) - np.asarray(prev_close, float)))
    csum = np.concatenate([[0.0], np.cumsum(moves)])
    rows = np.asarray(rows, dtype=int)
    total = csum[rows + 1] - csum[np.maximum(rows + 1 - TREND_SESSIONS, 0)]
    return np.where(total < 0, -1.0, 1.0)


def score(
    model_right: np.ndarray, actual: np.ndarray, close: np.ndarray, prev_close: np.ndarray, trend: np.ndarray
) -> dict[str, Paired]:
    """Each baseline on the same rows as the model: `actual` next-day close, `close` run-date close,
    `prev_close` the close before it (NaN: persistence says flat, a miss of any move), `trend` the
    trailing-majority sign per row."""
    truth = np.sign(np.asarray(actual, float) - np.asarray(close, float))
    decided = truth != 0  # ties are nobody's hit or miss
    truth = truth[decided]
    model_right = np.asarray(model_right, dtype=bool)[decided]
    calls = {
        "always_up": np.ones_like(truth),
        "persistence": np.nan_to_num(np.sign(np.asarray(close, float) - np.asarray(prev_close, float)))[
            decided
        ],
        "trend": np.asarray(trend, float)[decided],
    }
    out = {}
    for name, call in calls.items():
        right = call == truth
        out[name] = Paired(
            name,
            len(truth),
            int(right.sum()),
            int((model_right & ~right).sum()),
            int((~model_right & right).sum()),
        )
    return out


def baseline_columns(scored: dict[str, Paired]) -> dict[str, int | None]:
    """The backtest_folds columns (revision 0020) of a fold's persistence and trend baselines."""
    out = {}
    for name in ("persistence", "trend"):
        b = scored.get(name)
        out[f"{name}_hits"] = b.hits if b else None
        out[f"{name}_model_only"] = b.model_only if b else None
        out[f"{name}_only"] = b.base_only if b else None
    return out


def from_fold(fold: dict) -> dict[str, Paired | None]:
    """A stored fold's baselines (None: the fold predates the column, so its test is unknown)."""
    n = int(fold["n"]) - int(fold.get("ties") or 0)  # the scored rows: ties out (0026; NULL before)
    up_hits = round(fold["always_up_accuracy"] * n)
    out: dict[str, Paired | None] = {
        "always_up": None
        if fold.get("model_only_hits") is None
        else Paired("always_up", n, up_hits, int(fold["model_only_hits"]), int(fold["up_only_hits"]))
    }
    for name in ("persistence", "trend"):
        hits = fold.get(f"{name}_hits")
        out[name] = (
            None
            if hits is None
            else Paired(name, n, int(hits), int(fold[f"{name}_model_only"]), int(fold[f"{name}_only"]))
        )
    return out


def pooled(folds: list[dict]) -> dict[str, Paired | None]:
    """Each baseline over all folds (None when any fold lacks it)."""
    parts = [from_fold(f) for f in folds]
    out = {}
    for name in BASELINES:
        got = [p[name] for p in parts]
        out[name] = None if not got or any(g is None for g in got) else sum(got[1:], got[0])
    return out
