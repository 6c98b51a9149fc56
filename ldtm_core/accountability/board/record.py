"""The board's labels, from each ticker's whole published record (scoring.evidence).

The 30-day window describes the month; it is not the test. A label is evidence read every evening and
grown with the record: per ticker (per model version on the per-model board), the counts of its whole
scored record (the same selection as the window's: first published row of an evening, out of sample and
gated unless asked, its ticker a member, this mode, ties out) give one e-value per comparison:

* `e_vs_coin`: right calls against wrong ones (a coin is right half the time, in any market);
* `e_vs_{baseline}` for each board baseline: won against lost disagreements (the sign test's rows).

`beats_{baseline}` is e-BH at ALPHA over every (row, board baseline) e-value of the board; `shown_skill`
is e-BH over the rows' `e_skill`, the smallest of a row's e-values, coin included: a model is "shown to
beat every baseline" only when it beats each of them, so a coin-flip model in a falling market (which
does beat always-up) is never labelled. Both hold their false-discovery rate on every evening they are
read, for as long as the record grows.

The read covers every stored evening of the board's tickers: its cost grows with the record
(docs/performance.md), unlike the window's bounded reads.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from ldtm_core.accountability.board.reads import next_day_rows, scored_rows
from ldtm_core.scoring import baselines, board_stats, evidence

FIRST_DAY, LAST_DAY = dt.date(1900, 1, 1), dt.date(9999, 12, 31)  # the whole record


def e_column(name: str) -> str:
    """The e-value column of comparison `name` (evidence.COIN or a board baseline)."""
    return f"e_vs_{name}"


def comparisons() -> list[str]:
    """Every comparison a row's skill label needs: a coin, then the board baselines."""
    return [evidence.COIN, *(b.name for b in baselines.board_baselines())]


def display_columns() -> list[str]:
    """The record's columns a reader sees beside the window's (leaderboard.display_columns)."""
    return ["record_n", "record_accuracy", *(e_column(c) for c in comparisons()), "e_skill", "shown_skill"]


def with_evidence(
    engine: Engine,
    board: pd.DataFrame,
    mode: str,
    *,
    by_model: bool = False,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> pd.DataFrame:
    """The board with its record's figures (`record_n`, `record_accuracy`, `record_start`), each
    comparison's e-value, `e_skill` and the labels (`beats_*`, `shown_skill`), a copy."""
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    rows = pd.DataFrame()
    if len(board):
        raw = next_day_rows(engine, sorted(board["ticker"].unique()), FIRST_DAY, LAST_DAY)
        rows = scored_rows(
            raw,
            mode,
            by_model=by_model,
            include_in_sample=include_in_sample,
            include_ungated=include_ungated,
        )
    return label(board, record_figures(rows, cols), cols)


def record_figures(rows: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per key: the record's n, hits, first evening and each comparison's wins and losses."""
    names = ["record_n", "record_hits", "record_start"]
    names += [f"{c}_{w}" for c in comparisons() for w in ("wins", "losses")]
    if rows.empty:
        return pd.DataFrame(columns=[*cols, *names])
    figures = board_stats.baseline_figures(rows, cols)
    out = figures[cols].copy()
    out["record_n"] = figures["n"].to_numpy()
    out["record_hits"] = figures["hits"].to_numpy()
    out["record_start"] = rows.groupby(cols, sort=True)["run_date"].min().to_numpy()
    out[f"{evidence.COIN}_wins"] = out["record_hits"]
    out[f"{evidence.COIN}_losses"] = out["record_n"] - out["record_hits"]
    for b in baselines.board_baselines():
        out[f"{b.name}_wins"] = figures[b.column("model_only")].to_numpy()
        out[f"{b.name}_losses"] = figures[b.column("base_only")].to_numpy()
    return out


def label(board: pd.DataFrame, figures: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Join the record's figures to the board rows and set the e-values and labels (a copy). A row with
    no scored record has e = 1 for every comparison and no label."""
    board = board.copy()
    merged = board[cols].merge(figures, on=cols, how="left")
    n = merged["record_n"].fillna(0).to_numpy(int)
    board["record_n"] = n
    board["record_accuracy"] = np.where(n > 0, merged["record_hits"].fillna(0) / np.maximum(n, 1), np.nan)
    board["record_start"] = merged["record_start"].to_numpy()
    scored = n > 0
    for c in comparisons():
        e = evidence.e_value(merged[f"{c}_wins"].fillna(0), merged[f"{c}_losses"].fillna(0))
        board[e_column(c)] = np.where(scored, e, np.nan)
    board["e_skill"] = board[[e_column(c) for c in comparisons()]].min(axis=1, skipna=False)
    which = baselines.board_baselines()
    family = np.concatenate([board[e_column(b.name)].to_numpy(float) for b in which])
    found = evidence.e_bh(family)
    for i, b in enumerate(which):
        board[b.column("beats")] = found[i * len(board) : (i + 1) * len(board)]
    board["shown_skill"] = evidence.e_bh(board["e_skill"].to_numpy(float))
    return board


def evidence_rule(board: pd.DataFrame) -> str:
    """What the labels control, and what this board could show (the sentence under every board)."""
    rows = int((board["record_n"] > 0).sum()) if "record_n" in board else 0
    which = baselines.board_baselines()
    return (
        f"'beats' and 'shown to beat every baseline' come from each ticker's whole published record, not "
        f"the 30-day window: anytime-valid e-values (a mixture of likelihood ratios over win rates "
        f"{', '.join(f'{g:.0%}' for g in evidence.GRID)}; against a coin every evening, against "
        f"{', '.join(b.label for b in which)} the evenings they disagree) with e-BH at {evidence.ALPHA:g} "
        f"over the {rows} tickers with a record, so the expected share of false labels stays <= "
        f"{evidence.ALPHA:.0%} on every evening the board is read, for as long as the record grows; "
        f"{evidence.detectable(max(rows, 1))}"
    )


@dataclass(frozen=True)
class RecordAnswer:
    """The universe's answer on the whole record: does any model beat every baseline, a coin included?"""

    e: float  # the universe's e-value: the mean of the rows' e_skill (evidence.universe_e)
    tickers: int  # rows with a scored record
    evenings: int  # their scored evenings, summed
    shown: int  # rows labelled shown_skill (e-BH)
    caveat: str = ""

    @property
    def rejects(self) -> bool:
        return self.tickers > 0 and self.e >= 1 / evidence.ALPHA

    def describe(self) -> str:
        question = (
            "Does any model beat every baseline, a coin included, on its whole published record "
            f"({self.tickers} tickers, {self.evenings:,} scored evenings)?"
        )
        if self.tickers == 0:
            return f"{question} Not tested: no scored evenings." + self.caveat
        how = (
            f"the universe's e-value, the mean of each ticker's smallest e-value, is {self.e:.3g}; "
            f"anytime-valid: a false Yes on at most {evidence.ALPHA:.0%} of boards of models without "
            "skill, however often it is read"
        )
        if self.rejects:
            answer = f"Yes: {how} (>= {1 / evidence.ALPHA:g}); {self.shown} shown individually."
        else:
            answer = (
                f"No evidence yet: {how} (a Yes needs {1 / evidence.ALPHA:g}); "
                f"{evidence.detectable(self.tickers)}."
            )
        return f"{question} {answer}" + self.caveat

    def to_dict(self) -> dict:
        return {
            "e_value": self.e,
            "rejects": self.rejects,
            "tickers": self.tickers,
            "evenings": self.evenings,
            "shown": self.shown,
            "method": "mean of per-ticker min e-values (coin and board baselines), Ville at 1/alpha",
        }


def record_answer(board: pd.DataFrame, caveat: str = "") -> RecordAnswer:
    """The board's record answer from its e-values (`with_evidence`'s columns)."""
    scored = board[board["record_n"] > 0] if "record_n" in board else board.iloc[0:0]
    return RecordAnswer(
        e=evidence.universe_e(scored["e_skill"]) if len(scored) else 1.0,
        tickers=len(scored),
        evenings=int(scored["record_n"].sum()) if len(scored) else 0,
        shown=int(scored["shown_skill"].sum()) if len(scored) else 0,
        caveat=caveat,
    )
