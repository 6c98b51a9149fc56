"""The board's statistics at the scale it is read: 103 tickers x its baselines every evening.

Two questions, two tests, both pure functions of per-row flags so a simulation (benchmarks/null_universe.py)
runs exactly what the board runs:

* **Which tickers "beat" a baseline?** Each (ticker, baseline) has its one-sided exact sign test on the
  evenings where the model and the baseline disagree (`skill.py`). Read 309 at a time (103 tickers x 3
  baselines), p <= 0.05 labels several coin-flip models every evening, so the label is set by
  Benjamini-Hochberg over all the board's (ticker, baseline) p-values (`multipletests(...,
  method="fdr_bh")`): q <= 0.05 means at most 5 % of the labels on a board are expected to be false,
  and under the complete null (no model has skill) the chance that a board shows any label is at most
  5 %. BH holds for independent or positively dependent
  tests (PRDS); tickers that move with the market are positively dependent. The per-ticker p stays beside.
* **Does any model beat its best no-hindsight baseline, after the search over the tickers?** One answer per
  board: the data-snooping test of White (2000) / Hansen (2005), `arch.bootstrap.SPA`, on the per-(evening,
  ticker) loss differentials d = model miss - baseline miss (0/1 next-day direction misses), benchmark
  zero. Resampling whole evenings keeps the cross-section of an evening together (tickers move with the
  market on the same evenings); the stationary bootstrap's mean block is 1 session because the next-day
  horizon is 1 session and next-day direction misses carry no measurable serial dependence (a longer
  block with ~21 evenings shrinks the bootstrap variance and over-rejects: 9 % at block 2, measured).
  Each ticker's baseline is chosen *before* its window (the best of the board's baselines over
  the ticker's filled evenings in the `HISTORY_DAYS` before it; always-up without history): choosing
  the better one inside the window, with hindsight, raises every bar by the luck of the better of two
  and the test never rejects (measured: 0 % size, 3 % power on 10 tickers at 65 %). An evening a ticker
  has no row, or a persistence row without a previous close, counts d = 0 (no evidence either way).
  arch 8 computes SPA's p-values on unstudentized means (studentizing by hand with 21 evenings and 103
  columns over-rejects: 27-31 %, measured), and the reported p is its `upper` p-value (White's
  reality-check recentring): measured size 5.0-5.5 % against 5.3-6.5 % for `consistent` on coin-flip
  universes, same power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from ldtm_core.scoring import baselines
from ldtm_core.scoring.skill import SkillTest, format_p_value

ALPHA = 0.05  # the q (and the universe p) the board calls evidence
# The board's baselines and their columns come from the registry (scoring.baselines.board_baselines).
# Per-row flags of a baseline in the rows these functions take: `{name}_right` (its call was right) and
# `{name}_has` (it made a call; absent: always). The first two baselines' flags keep their first names.
LEGACY_FLAGS = {"always_up": ("up", None), "persistence": ("persist_right", "has_prev")}

SPA_REPS = 1000
SPA_BLOCK = 1  # sessions: the next-day horizon (see the module docstring)
SPA_SEED = 20271  # fixed: the same board gives the same answer every time it is read
SPA_P = "upper"
HISTORY_DAYS = 91  # calendar days before the window that choose each ticker's baseline

LABEL_RULE = (
    f"the window's q = Benjamini-Hochberg over every (ticker, baseline) one-sided exact test of this board's "
    f"30 days (a description of the month: q <= {ALPHA:g} on at most {ALPHA:.0%} of boards of models without "
    "skill, read once; the labels come from the whole record); p is each ticker's own test, q the adjusted one"
)


def _scored(board: pd.DataFrame) -> pd.Series:
    """The board rows whose tests are in its BH family: scored (n > 0), not stale."""
    scored = board["n"] > 0 if "n" in board else pd.Series(False, index=board.index)
    if "stale" in board:
        scored &= ~board["stale"].astype(bool)
    return scored


def scored_keys(board: pd.DataFrame) -> int:
    """How many board rows have tests in its BH family (`_scored`)."""
    return int(_scored(board).sum())


def window_tests(board: pd.DataFrame) -> int:
    """The board's window BH family: one test per (scored row, board baseline that made a call on the
    row's evenings), at most `baselines.family_size` (a baseline with no recorded call has no test)."""
    which = [b.column("p") for b in baselines.board_baselines() if b.column("p") in board]
    return int(board.loc[_scored(board), which].notna().to_numpy().sum())


def label_rule(board: pd.DataFrame | None = None) -> str:
    """LABEL_RULE, with the size of this board's BH family when given: one test per (row, board
    baseline with a call there), `window_tests`."""
    if board is None:
        return LABEL_RULE
    which = baselines.board_baselines()
    rows = scored_keys(board)
    return (
        f"{LABEL_RULE}; this board's window family: {window_tests(board)} tests over {rows} scored rows x "
        f"{len(which)} baselines ({', '.join(b.label for b in which)}; a baseline without a recorded call "
        "on a row's evenings has no test there)"
    )


def bh_qvalues(p_values) -> np.ndarray:
    """Benjamini-Hochberg q-values of one family; NaN (no test) stays NaN and is not counted in it."""
    p = np.asarray(p_values, dtype=float)
    q = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        q[ok] = multipletests(p[ok], alpha=ALPHA, method="fdr_bh")[1]
    return q


def label_board(board: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Add each board baseline's q column (`q_vs_{name}`) and set its `beats_*` from it (a copy).

    The family is every (ticker, board baseline) p of the board's scored rows (stale rows, n = 0, have no
    test: q NaN, never "beats"); its size is `baselines.family_size`. "Beats" also needs the model
    strictly more accurate than the baseline on the same rows (implied by a one-sided p <= alpha; kept
    explicit).
    """
    board = board.copy()
    scored = ~board["stale"].astype(bool) if "stale" in board else pd.Series(True, index=board.index)
    scored &= board["n"] > 0
    which = baselines.board_baselines()
    family = np.concatenate([board[b.column("p")].where(scored).to_numpy(float) for b in which])
    q = bh_qvalues(family)
    for i, b in enumerate(which):
        qb = q[i * len(board) : (i + 1) * len(board)]
        board[b.column("q")] = qb
        ahead = board["direction_accuracy"].to_numpy(float) > board[b.column("accuracy")].to_numpy(float)
        board[b.column("beats")] = ahead & (np.nan_to_num(qb, nan=1.0) <= alpha)
    return board


def flags(rows: pd.DataFrame, name: str) -> tuple[pd.Series, pd.Series]:
    """(right, has) per row of baseline `name`: its call was right; it made a call (see LEGACY_FLAGS)."""
    right, has = f"{name}_right", f"{name}_has"
    if right not in rows and name in LEGACY_FLAGS:
        right, has = LEGACY_FLAGS[name]
    made = rows[has].astype(bool) if has and has in rows else pd.Series(True, index=rows.index)
    return rows[right].astype(bool) & made, made


def board_from_rows(rows: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """A labelled board straight from per-row flags (one row per key and evening): what `leaderboard`
    computes from the database, for simulations (benchmarks/null_universe.py) and tests.

    rows: `key`, `model_right` and each board baseline's flags (`flags`). Returns one row per key with n,
    the accuracies, each baseline's n, discordant counts and exact one-sided p (skill.SkillTest), and
    `label_board`'s q-values and labels.
    """
    out = baseline_figures(rows, "key")
    return label_board(out, alpha)


def baseline_figures(rows: pd.DataFrame, keys: str | list[str]) -> pd.DataFrame:
    """Per group of `keys`: n, hits, direction_accuracy, and for each board baseline its columns
    (`Baseline.column`): n (rows it made a call on), accuracy there, model-only / baseline-only counts
    and the one-sided exact p of "the model is right more often" on the rows where the two disagree."""
    m = rows["model_right"].astype(bool)
    cols = {"n": 1, "hits": m}
    which = baselines.board_baselines()
    for b in which:
        right, has = flags(rows, b.name)
        cols[f"{b.name}:n"] = has
        cols[f"{b.name}:hits"] = right
        cols[f"{b.name}:model_only"] = m & ~right & has
        cols[f"{b.name}:base_only"] = ~m & right & has
    keys = [keys] if isinstance(keys, str) else list(keys)
    flat = pd.DataFrame({**{k: rows[k] for k in keys}, **cols})
    g = flat.groupby(keys, sort=True).sum().astype(int)
    out = g.index.to_frame(index=False)
    out["n"] = g["n"].to_numpy()
    out["hits"] = g["hits"].to_numpy()
    out["direction_accuracy"] = (g["hits"] / g["n"]).to_numpy()
    for b in which:
        n = g[f"{b.name}:n"]
        out[b.column("accuracy")] = (g[f"{b.name}:hits"] / n.where(n > 0)).to_numpy()
        out[b.column("n")] = n.to_numpy()
        out[b.column("model_only")] = g[f"{b.name}:model_only"].to_numpy()
        out[b.column("base_only")] = g[f"{b.name}:base_only"].to_numpy()
        # No call on any of the group's rows (a baseline recorded only from chain version 3): no test.
        out[b.column("p")] = [
            SkillTest(a, c).p_value if k else np.nan
            for a, c, k in zip(g[f"{b.name}:model_only"], g[f"{b.name}:base_only"], n, strict=True)
        ]
    return out


def best_baselines(history: pd.DataFrame, keys: list) -> dict:
    """Each key's baseline, chosen on its evenings BEFORE the window (no hindsight): the most accurate of
    the board's baselines there, each on the rows it made a call on (ties and no history: the first).

    history: rows with `key` and each board baseline's flags (`flags`).
    """
    which = baselines.board_baselines()
    first = which[0].name
    out = dict.fromkeys(keys, first)
    if history.empty:
        return out
    best = None
    for b in which:
        right, has = flags(history, b.name)
        rate = right[has].groupby(history.loc[has, "key"]).mean()
        if best is None:
            best, choice = rate, pd.Series(first, index=rate.index)
            continue
        rate = rate.reindex(best.index).fillna(-1.0)
        better = rate > best
        best, choice = best.where(~better, rate), choice.where(~better, b.name)
    for key, name in choice.items():
        if key in out:
            out[key] = name
    return out


def loss_differentials(rows: pd.DataFrame, baseline_of: dict) -> pd.DataFrame:
    """Evenings x keys of d = model miss - chosen baseline miss (0/1 next-day direction misses).

    rows: one per (key, evening) with `key`, `run_date`, `model_right` and each board baseline's flags.
    A key without a row on an evening, or a baseline that made no call on it, has d = 0.
    """
    keys = list(baseline_of)
    if rows.empty or not keys:
        return pd.DataFrame(columns=keys, dtype=float)
    r = rows[rows["key"].isin(keys)]
    model_miss = (~r["model_right"].astype(bool)).astype(float).to_numpy()
    chosen = r["key"].map(baseline_of).to_numpy()
    base_right = np.zeros(len(r), dtype=bool)
    defined = np.zeros(len(r), dtype=bool)
    for b in baselines.board_baselines():
        right, has = flags(r, b.name)
        mine = chosen == b.name
        base_right |= mine & right.to_numpy()
        defined |= mine & has.to_numpy()
    d = np.where(defined, model_miss - (~base_right).astype(float), 0.0)
    r = r.assign(d=d).drop_duplicates(["key", "run_date"], keep="first")
    dates = sorted(r["run_date"].unique())
    matrix = np.zeros((len(dates), len(keys)))
    matrix[pd.Index(dates).get_indexer(r["run_date"]), pd.Index(keys).get_indexer(r["key"])] = r[
        "d"
    ].to_numpy()
    return pd.DataFrame(matrix, index=dates, columns=keys)


# The window's answer describes a month: its baselines are chosen before the window and include no coin,
# so in a market that turns, always-up falls below a coin and coin-flip models look better than it.
WINDOW_NOTE = (
    "A description of the month, not the label: the record's answer (anytime-valid, a coin among the "
    "baselines) is the test."
)


@dataclass(frozen=True)
class UniverseTest:
    """The board's one answer: does any model beat its baseline after the search over the tickers?"""

    p_value: float  # SPA's `upper` p-value (NaN: nothing to test)
    p_lower: float
    p_consistent: float
    tickers: int
    evenings: int
    best: str | None  # the key with the largest mean improvement over its baseline
    best_improvement: float  # that key's baseline miss rate minus the model's (points of accuracy / 100)
    baselines: dict  # {baseline: how many keys were judged against it}
    caveat: str = ""  # appended to the answer (e.g. a board that includes in-sample rows)

    @property
    def rejects(self) -> bool:
        return not math.isnan(self.p_value) and self.p_value <= ALPHA

    def describe(self) -> str:
        question = (
            "In the 30-day window, does any model beat its best no-hindsight baseline after the search over "
            f"the {self.tickers} tickers?"
        )
        # The description first, so no reader takes its "Yes" for the label (issue 62).
        return f"{WINDOW_NOTE} {self._answer(question)}{self.caveat}"

    def short(self) -> str:
        """One line: the window's SPA p, marked as the description it is."""
        if self.tickers == 0 or self.evenings == 0:
            return "30-day window (a description, not the label): not tested, no scored evenings."
        p = format_p_value(self.p_value)
        edge = (
            f"; largest edge {self.best} (+{self.best_improvement * 100:.1f} points)" if self.rejects else ""
        )
        return (
            f"30-day window (a description, not the label): best model vs its best baseline after the search "
            f"over {self.tickers} tickers, SPA p = {p}{edge}."
        )

    def _answer(self, question: str) -> str:
        if self.tickers == 0 or self.evenings == 0:
            return f"{question} Not tested: no scored evenings."
        chosen = ", ".join(
            f"{b.label} for {self.baselines.get(b.name, 0)}" for b in baselines.board_baselines()
        )
        method = (
            f"arch's SPA test, its `{SPA_P}` p (White's reality check, not Hansen's consistent p), on {self.evenings} evenings "
            f"x {self.tickers} tickers of next-day direction misses, model minus its baseline ({chosen}, each "
            f"chosen on its evenings before the window; no coin among them), whole evenings resampled "
            f"(stationary bootstrap, block {SPA_BLOCK}, {SPA_REPS} reps, seed {SPA_SEED})"
        )
        p = format_p_value(self.p_value)
        if self.rejects:
            return (
                f"{question} Yes at p = {p} ({method}); the largest edge is {self.best} "
                f"(+{self.best_improvement * 100:.1f} points)."
            )
        return f"{question} No evidence: p = {p} ({method})."

    def to_dict(self) -> dict:
        """JSON-safe (NaN: None)."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        return {
            "p_value": num(self.p_value),
            "p_lower": num(self.p_lower),
            "p_consistent": num(self.p_consistent),
            "rejects": self.rejects,
            "tickers": self.tickers,
            "evenings": self.evenings,
            "best": self.best,
            "best_improvement": num(self.best_improvement),
            "baselines": self.baselines,
            "method": f"arch.bootstrap.SPA, stationary, block {SPA_BLOCK}, {SPA_REPS} reps, seed {SPA_SEED}",
        }


def spa_test(diffs: pd.DataFrame | np.ndarray, baselines: dict | None = None) -> UniverseTest:
    """SPA on an evenings x keys matrix of loss differentials (model loss minus baseline loss; negative =
    the model better). Deterministic: fixed reps and seed."""
    frame = diffs if isinstance(diffs, pd.DataFrame) else pd.DataFrame(np.asarray(diffs, dtype=float))
    t, k = frame.shape
    counts = pd.Series(baselines or {}).value_counts().to_dict() if baselines else {}
    if t < 2 or k == 0:
        return UniverseTest(math.nan, math.nan, math.nan, k, t, None, math.nan, counts)
    d = frame.to_numpy(float)
    from arch.bootstrap import SPA  # here: arch is ~2.5 s of importing every module that reads the board

    spa = SPA(np.zeros(t), d, block_size=SPA_BLOCK, reps=SPA_REPS, bootstrap="stationary", seed=SPA_SEED)
    spa.compute()
    p = spa.pvalues
    gain = -d.mean(axis=0)
    best = int(np.argmax(gain))
    return UniverseTest(
        float(p[SPA_P]),
        float(p["lower"]),
        float(p["consistent"]),
        k,
        t,
        str(frame.columns[best]),
        float(gain[best]),
        counts,
    )


def universe_test(rows: pd.DataFrame, history: pd.DataFrame, keys: list) -> UniverseTest:
    """The board's SPA answer from its scored rows and the rows before its window (see `loss_differentials`
    and `best_baselines` for the columns)."""
    chosen = best_baselines(history, keys)
    return spa_test(loss_differentials(rows, chosen), chosen)
