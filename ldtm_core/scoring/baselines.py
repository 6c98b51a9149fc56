"""Next-day direction baselines scored on the model's own rows, each with its exact paired test.

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

`REGISTRY` is the one list: a `Baseline` entry is called in the backtest and the paired
comparison (`calls`), stored per fold (`fold_rows`, backtest_fold_baselines), reported by the gate, and,
with `on_board`, recorded with each snapshot row at predict time (`encode_calls`, chain version 3) and
scored on the board with its BH family (`family_size`), the CLI's and the dashboard's columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ldtm_core.scoring.skill import format_p_value, sign_test_p_value

TREND_SESSIONS = 21  # one trading month; odd, so a month without flat days never ties
SIGNIFICANCE = 0.05  # the p-value at which a report says "beats"

# A baseline's call: (close, prev_close, rows) -> one float per row of `rows`: +1 up, -1 down, 0 no move
# (a miss of any real move), NaN no call (too little history: the row is not that baseline's to score).
# `close`: the ticker's closes in session order; `prev_close`: the close before each (NaN: unknown);
# `rows`: positions in `close` of the run dates. Only closes up to each run date may be read.
Call = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Baseline:
    """One no-hindsight next-day direction baseline: the one entry the backtest, the gate, the board,
    the fold storage, the predict-time record, the reports, the CLI and the dashboard all read.

    `sessions`: how many closes up to the run date its call reads (the run-date close counts): a row
    recorded before calls were (chain version < 3) carries two (`prev_close`, `run_date_close`), so only
    a baseline with sessions <= 2 can be scored on it. Board column names follow `name` except where a
    stored or published name predates the registry (`columns`)."""

    name: str
    label: str  # in sentences and tables
    short: str  # in narrow column heads: "p (q) vs {short}"
    call: Call
    says: str  # what it calls, in one line (the dashboard's help)
    sessions: int = 2
    on_board: bool = False  # scored on the leaderboard: its call is recorded with each snapshot row
    on_gate: bool = True  # beside the model in every gate report, on the backtest's rows
    columns: Mapping[str, str] = field(default_factory=dict)  # board column overrides (see `column`)

    def column(self, what: str) -> str:
        """The board's column `what` of this baseline: accuracy, n, model_only, base_only, p, q, beats."""
        default = {
            "accuracy": f"{self.name}_accuracy",
            "n": f"{self.name}_n",
            "model_only": f"{self.name}_model_only",
            "base_only": f"{self.name}_only",
            "p": f"{self.name}_p_value",
            "q": f"q_vs_{self.name}",
            "beats": f"beats_{self.name}",
        }
        return self.columns.get(what, default[what])


def _always_up(close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.ones(len(rows))


def _persistence(close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=int)
    return np.sign(np.asarray(close, float)[rows] - np.asarray(prev_close, float)[rows])


def trailing_majority(close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """+1/-1 per row: the majority sign of the moves of the `TREND_SESSIONS` sessions ending at each row
    (fewer at the start of the series; ties and no moves: up). Uses only closes up to the row's date."""
    moves = np.nan_to_num(np.sign(np.asarray(close, float) - np.asarray(prev_close, float)))
    csum = np.concatenate([[0.0], np.cumsum(moves)])
    rows = np.asarray(rows, dtype=int)
    total = csum[rows + 1] - csum[np.maximum(rows + 1 - TREND_SESSIONS, 0)]
    return np.where(total < 0, -1.0, 1.0)


REGISTRY: tuple[Baseline, ...] = (
    Baseline(
        "always_up",
        "always-up",
        "up",
        _always_up,
        "'up' every day",
        sessions=0,
        on_board=True,
        # Published before the registry: the board's always-up test kept its first names.
        columns={"model_only": "model_only", "base_only": "up_only", "p": "skill_p_value"},
    ),
    Baseline(
        "persistence",
        "persistence",
        "persist.",
        _persistence,
        "tomorrow's sign = today's sign (rows with a previous close)",
        on_board=True,
    ),
    Baseline(
        "trend",
        f"trailing-{TREND_SESSIONS} majority",
        "trend",
        trailing_majority,
        f"the majority sign of the last {TREND_SESSIONS} sessions' moves",
        sessions=TREND_SESSIONS + 1,
        # On the board from chain version 3 rows that recorded its call: it reads 22 closes, more than a
        # row carries, so older rows are not its to score (no call).
        on_board=True,
    ),
)


def registry() -> tuple[Baseline, ...]:
    """Every baseline, in report order (read at call time: a test may register one more)."""
    return REGISTRY


def by_name(name: str) -> Baseline:
    return next(b for b in registry() if b.name == name)


def gate_baselines() -> tuple[Baseline, ...]:
    return tuple(b for b in registry() if b.on_gate)


def board_baselines() -> tuple[Baseline, ...]:
    return tuple(b for b in registry() if b.on_board)


def family_size(tickers: int) -> int:
    """The board's multiple-testing family: one exact test per (ticker, board baseline)."""
    return len(board_baselines()) * tickers


def calls(
    close: np.ndarray, prev_close: np.ndarray, rows: np.ndarray, which: Sequence[Baseline] | None = None
) -> dict[str, np.ndarray]:
    """{name: call per row of `rows`} of `which` (default: the gate's baselines); see `Call`."""
    which = gate_baselines() if which is None else which
    rows = np.asarray(rows, dtype=int)
    return {b.name: np.asarray(b.call(close, prev_close, rows), dtype=float) for b in which}


def recorded_close_calls(
    close: np.ndarray, prev_close: np.ndarray, which: Sequence[Baseline] | None = None
) -> dict[str, np.ndarray]:
    """Each baseline's call from a row's own recorded closes (`prev_close`, `run_date_close`) alone: how a
    row written before calls were recorded (chain version < 3) is scored. NaN (no call) for a baseline
    that reads more than those two closes."""
    which = board_baselines() if which is None else which
    close = np.asarray(close, float)
    prev_close = np.asarray(prev_close, float)
    # Each row its own two-session series: [prev_close, close], the row at position 1.
    series = np.column_stack([prev_close, close]).ravel()
    before = np.column_stack([np.full(len(close), np.nan), prev_close]).ravel()
    rows = np.arange(1, 2 * len(close), 2)
    out = {}
    for b in which:
        out[b.name] = (
            np.asarray(b.call(series, before, rows), dtype=float)
            if b.sessions <= 2
            else np.full(len(close), np.nan)
        )
    return out


def encode_calls(calls: Mapping[str, float]) -> str:
    """A row's recorded calls as canonical JSON (sorted names; 1, -1, 0, or null for no call): what
    snapshots.baseline_calls stores and chain version 3 hashes."""
    return json.dumps(
        {k: None if np.isnan(v) else int(v) for k, v in sorted(calls.items())}, separators=(",", ":")
    )


def decode_calls(text: str | None) -> dict[str, float]:
    """{name: call} of a stored snapshots.baseline_calls (NaN: no call); {} for a row without them."""
    if not text:
        return {}
    return {k: float("nan") if v is None else float(v) for k, v in json.loads(text).items()}


def __getattr__(name: str):
    """`BASELINES` / `LABELS`: the gate's names and every label, read from the registry when asked."""
    if name == "BASELINES":
        return tuple(b.name for b in gate_baselines())
    if name == "LABELS":
        return {b.name: b.label for b in registry()}
    raise AttributeError(name)


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
            f"{word} {by_name(self.name).label} ({self.accuracy * 100:.2f}%): model right on {self.model_only} vs "
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


def score(
    model_right: np.ndarray, actual: np.ndarray, close: np.ndarray, calls: Mapping[str, np.ndarray]
) -> dict[str, Paired]:
    """Each baseline of `calls` ({name: call per row}, see `Call`) on the same rows as the model: `actual`
    the next-day close, `close` the run-date close. A tie (no move) is nobody's row; a call of 0 or NaN
    (no move, no call) is a miss of any real move."""
    truth = np.sign(np.asarray(actual, float) - np.asarray(close, float))
    decided = truth != 0  # ties are nobody's hit or miss
    truth = truth[decided]
    model_right = np.asarray(model_right, dtype=bool)[decided]
    out = {}
    for name, call in calls.items():
        right = np.nan_to_num(np.asarray(call, float)[decided]) == truth
        out[name] = Paired(
            name,
            len(truth),
            int(right.sum()),
            int((model_right & ~right).sum()),
            int((~model_right & right).sum()),
        )
    return out


# Always-up's figures are the fold's own columns (always_up_accuracy, model_only_hits, up_only_hits: the
# gate's skill test); every other gate baseline is a row of backtest_fold_baselines (revision 0031).
FOLD_OWN = "always_up"


def fold_rows(backtest_id: str, fold: int, scored: Mapping[str, Paired]) -> list[dict]:
    """The backtest_fold_baselines rows of one fold's baselines (always-up lives in the fold's row)."""
    return [
        {
            "backtest_id": backtest_id,
            "fold": fold,
            "baseline": name,
            "n": p.n,
            "hits": p.hits,
            "model_only": p.model_only,
            "base_only": p.base_only,
        }
        for name, p in scored.items()
        if name != FOLD_OWN
    ]


def from_fold(fold: dict) -> dict[str, Paired | None]:
    """A stored fold's gate baselines (None: the fold predates that baseline, so its test is unknown).
    `fold`: a backtest_folds row with `baselines`, its backtest_fold_baselines rows by name."""
    n = int(fold["n"]) - int(fold.get("ties") or 0)  # the scored rows: ties out (0026; NULL before)
    stored = fold.get("baselines") or {}
    out: dict[str, Paired | None] = {}
    for b in gate_baselines():
        if b.name == FOLD_OWN:
            out[b.name] = (
                None
                if fold.get("model_only_hits") is None
                else Paired(
                    b.name,
                    n,
                    round(fold["always_up_accuracy"] * n),
                    int(fold["model_only_hits"]),
                    int(fold["up_only_hits"]),
                )
            )
            continue
        row = stored.get(b.name)
        out[b.name] = (
            None
            if row is None
            else Paired(
                b.name, int(row["n"]), int(row["hits"]), int(row["model_only"]), int(row["base_only"])
            )
        )
    return out


def pooled(folds: list[dict]) -> dict[str, Paired | None]:
    """Each gate baseline over all folds (None when any fold lacks it)."""
    parts = [from_fold(f) for f in folds]
    out = {}
    for b in gate_baselines():
        got = [p[b.name] for p in parts]
        out[b.name] = None if not got or any(g is None for g in got) else sum(got[1:], got[0])
    return out
