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

The record's counts are one GROUP BY in the database over the accuracy view's own selection, with no
window (`sql_figures`); its cost grows with the stored rows, far slower than reading them into Python
(docs/performance.md). The error horizons get their answers the same way (`horizon_answers`): closer to
the answer than no change, one row per target, no two overlapping.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine, bindparam, text

from ldtm_core import accuracy_views
from ldtm_core.accountability.board.reads import next_day_rows, scored_rows, view_name
from ldtm_core.horizons import ERROR_ONLY
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
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    if board.empty:
        figures = record_figures(pd.DataFrame(), cols)
    elif all(counted_in_sql(b) for b in baselines.board_baselines()):
        figures = sql_figures(engine, mode, by_model=by_model, **flags)
    else:
        figures = python_figures(engine, sorted(board["ticker"].unique()), mode, by_model=by_model, **flags)
    return label(board, figures, cols)


# Board baselines whose record the database counts from the row's recorded closes: (its call was right,
# it made one), hashed with the row, which is the call recorded with it (chain version 3) too.
SQL_COUNTS = {
    "always_up": ("s.next_day_actual > s.run_date_close", "1 = 1"),
    "persistence": (
        "((s.run_date_close > s.prev_close AND s.next_day_actual > s.run_date_close) OR "
        "(s.run_date_close < s.prev_close AND s.next_day_actual < s.run_date_close))",
        "s.prev_close IS NOT NULL",
    ),
}


def counted_from_closes(b: baselines.Baseline) -> bool:
    """`b`'s call follows from a row's own recorded closes, so every row of the record is its to score;
    a baseline reading more closes is scored only where the row recorded its call (chain version 3)."""
    return b.sessions <= 2


def counted_in_sql(b: baselines.Baseline) -> bool:
    """The database counts `b`'s record: from the row's closes (SQL_COUNTS), or, for a baseline that
    reads more closes than a row carries, from the call recorded with the row (`recorded_call_sql`).
    Any other registered baseline is counted in Python (`python_figures`)."""
    return b.name in SQL_COUNTS or not counted_from_closes(b)


def recorded_call_sql(name: str) -> tuple[str, str, dict[str, str]]:
    """(right, has, bind parameters) of baseline `name` from snapshots.baseline_calls, as reads.row_calls
    reads it: the recorded call of a chain-version-3 row (canonical JSON, baselines.encode_calls), no call
    on an older row or a row that recorded none (null or absent)."""
    key = json.dumps(name).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    params = {f"{name}_{word}": f"%{key}:{call}%" for word, call in (("up", 1), ("down", -1), ("flat", 0))}
    said = {word: f"s.baseline_calls LIKE :{name}_{word} ESCAPE '\\'" for word in ("up", "down", "flat")}
    hashed = "s.chain_version >= 3"
    right = (
        f"({hashed} AND (({said['up']} AND s.next_day_actual > s.run_date_close) OR "
        f"({said['down']} AND s.next_day_actual < s.run_date_close)))"
    )
    has = f"({hashed} AND ({said['up']} OR {said['down']} OR {said['flat']}))"
    return right, has, params


def _count_sql(b: baselines.Baseline) -> tuple[str, str, dict[str, str]]:
    """(right, has, bind parameters) of a baseline the database counts (`counted_in_sql`)."""
    if b.name in SQL_COUNTS:
        return (*SQL_COUNTS[b.name], {})
    return recorded_call_sql(b.name)


def sql_figures(
    engine: Engine,
    mode: str,
    *,
    by_model: bool,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> pd.DataFrame:
    """`record_figures`' columns counted by the database over the accuracy view's own selection (its
    scored-rows condition, accuracy_views, no window), ties out."""
    keys, scored = accuracy_views.views(accuracy_views.CURRENT)[
        view_name(by_model, include_in_sample, include_ungated)
    ]
    right = "s.next_day_direction_correct"
    wrong = f"({right} IS NULL OR NOT {right})"  # as reads.next_day_rows: unknown is not a hit
    sums = [
        "COUNT(*) AS record_n",
        f"SUM(CASE WHEN {right} THEN 1 ELSE 0 END) AS record_hits",
        "MIN(s.run_date) AS record_start",
    ]
    params: dict[str, str] = {}
    for b in baselines.board_baselines():
        b_right, b_has, more = _count_sql(b)
        params.update(more)
        name = b.name
        sums.append(
            f"SUM(CASE WHEN {right} AND ({b_has}) AND NOT {b_right} THEN 1 ELSE 0 END) AS {name}_wins"
        )
        sums.append(f"SUM(CASE WHEN {wrong} AND ({b_has}) AND {b_right} THEN 1 ELSE 0 END) AS {name}_losses")
    group = ", ".join(f"s.{k}" for k in keys)
    # Fixed SQL from the view definitions and this module: no user text.
    stmt = text(
        f"SELECT {group}, s.mode, {', '.join(sums)} FROM snapshots s "  # noqa: S608
        f"WHERE {scored} AND s.next_day_actual IS NOT NULL AND s.next_day_actual <> s.run_date_close "
        f"GROUP BY {group}, s.mode"
    )
    with engine.connect() as conn:
        got = pd.DataFrame(conn.execute(stmt, params).mappings().all())
    if got.empty:
        return record_figures(pd.DataFrame(), list(keys))
    if mode != "all":
        got = got[got["mode"] == mode]
    got["record_start"] = pd.to_datetime(got["record_start"]).dt.date
    counts = [c for c in got.columns if c not in (*keys, "mode", "record_start")]
    out = got.groupby(list(keys), sort=True).agg({**dict.fromkeys(counts, "sum"), "record_start": "min"})
    out = out.reset_index()
    out[counts] = out[counts].astype("int64")
    out[f"{evidence.COIN}_wins"] = out["record_hits"]
    out[f"{evidence.COIN}_losses"] = out["record_n"] - out["record_hits"]
    return out


def python_figures(
    engine: Engine,
    tickers: list[str],
    mode: str,
    *,
    by_model: bool,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> pd.DataFrame:
    """`record_figures` from every stored row of these tickers, read into Python with each board
    baseline's recorded call (reads.next_day_rows): any registered baseline, at the cost of the read."""
    cols = ["ticker", "model_version"] if by_model else ["ticker"]
    raw = next_day_rows(engine, tickers, FIRST_DAY, LAST_DAY)
    rows = scored_rows(
        raw, mode, by_model=by_model, include_in_sample=include_in_sample, include_ungated=include_ungated
    )
    return record_figures(rows, cols)


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
    recorded = [b.label for b in which if not counted_from_closes(b)]
    only = f"; {', '.join(recorded)} only on evenings whose row recorded its call" if recorded else ""
    return (
        f"'beats' and 'shown to beat every baseline' come from each ticker's whole published record, not "
        f"the 30-day window: anytime-valid e-values (a mixture of likelihood ratios over win rates "
        f"{', '.join(f'{g:.0%}' for g in evidence.GRID)}; against a coin every evening, against "
        f"{', '.join(b.label for b in which)} the evenings they disagree{only}) with e-BH at {evidence.ALPHA:g} "
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

    def short(self) -> str:
        """One line: the label's answer and its figure (`describe`: the method and the power)."""
        head = "Shown to beat every baseline, a coin included (whole record):"
        if self.tickers == 0:
            return f"{head} not tested, no scored evenings."
        figure = f"e = {self.e:.3g}, a Yes needs {1 / evidence.ALPHA:g}; {self.tickers} tickers, {self.evenings:,} evenings"
        if self.rejects:
            return f"{head} YES, {self.shown} ticker(s) shown ({figure})."
        return f"{head} not yet ({figure})."

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


@dataclass(frozen=True)
class HorizonAnswer:
    """An error horizon's universe answer on the record: does any model's forecast land closer to the
    answer than no change (the run-date close) more often than not? One target per row, the targets of
    a ticker's kept rows never overlapping, so each outcome is known before the next one is bet on."""

    horizon: str  # Horizon.label
    e: float  # the mean over tickers of each one's e-value (closer vs farther than no change)
    tickers: int
    targets: int  # non-overlapping targets scored, summed over tickers
    closer: int  # of which the model was closer than no change
    shown: int  # tickers e-BH labels

    @property
    def rejects(self) -> bool:
        return self.tickers > 0 and self.e >= 1 / evidence.ALPHA

    def describe(self) -> str:
        question = (
            f"{self.horizon[:1].upper()}{self.horizon[1:]}: does any model land closer to the answer than no "
            f"change more often than not, on its whole record ({self.tickers} tickers, {self.targets:,} "
            "non-overlapping targets)?"
        )
        if self.tickers == 0 or self.targets == 0:
            return f"{question} Not tested: no filled targets."
        share = f"closer on {self.closer:,} of {self.targets:,}"
        if self.rejects:
            return (
                f"{question} Yes: e = {self.e:.3g} >= {1 / evidence.ALPHA:g} ({share}; {self.shown} shown)."
            )
        return f"{question} No evidence yet: e = {self.e:.3g} ({share}; a Yes needs {1 / evidence.ALPHA:g})."

    def short(self) -> str:
        head = f"{self.horizon[:1].upper()}{self.horizon[1:]}, closer than no change (whole record):"
        if self.tickers == 0 or self.targets == 0:
            return f"{head} not tested, no filled targets."
        figure = f"e = {self.e:.3g}, a Yes needs {1 / evidence.ALPHA:g}; closer on {self.closer:,} of {self.targets:,}"
        return (
            f"{head} YES, {self.shown} shown ({figure})." if self.rejects else f"{head} not yet ({figure})."
        )


def horizon_answers(
    engine: Engine,
    tickers: list[str],
    mode: str,
    *,
    include_in_sample: bool = False,
    include_ungated: bool = False,
) -> list[HorizonAnswer]:
    """Each error-only horizon's answer (HorizonAnswer) over the board's tickers' whole records, by the
    board's selection (first published row of an evening, out of sample and gated unless asked, members)."""
    rows = horizon_rows(engine, tickers, mode, include_in_sample, include_ungated)
    return [
        horizon_answer(h.label, rows[rows[f"{h.name}_closer"].notna()].rename(columns=_renamed(h)))
        for h in ERROR_ONLY
    ]


def _renamed(h) -> dict:
    return {h.col("date"): "target", f"{h.name}_closer": "closer"}


def horizon_answer(label: str, rows: pd.DataFrame) -> HorizonAnswer:
    """From rows of (ticker, run_date, target, closer: 1 the forecast landed closer to the answer than no
    change, -1 farther, 0 as close; `horizon_rows`): keep per ticker the first row of each target, then only rows whose run date is on or after the previous kept row's target (no overlap:
    each answer is known before the next forecast is made)."""
    if rows.empty:
        return HorizonAnswer(label, 1.0, 0, 0, 0, 0)
    rows = rows.sort_values(["ticker", "run_date"]).drop_duplicates(["ticker", "target"], keep="first")
    run = pd.to_datetime(rows["run_date"]).to_numpy("datetime64[D]")
    target = pd.to_datetime(rows["target"]).to_numpy("datetime64[D]")
    kept = []
    for idx in rows.groupby("ticker", sort=True).indices.values():
        r, t = run[idx], target[idx]
        i = 0
        while i < len(idx):  # one step per kept row: the next run on or after this row's target
            kept.append(idx[i])  # its close is the last answer: known by then
            i = max(i + 1, int(np.searchsorted(r, t[i], side="left")))
    k = rows.iloc[np.sort(kept)]
    k = k.assign(win=k["closer"] > 0, loss=k["closer"] < 0)  # equal: no evidence either way
    per = k.groupby("ticker")[["win", "loss"]].sum()
    e = evidence.e_value(per["win"].to_numpy(), per["loss"].to_numpy())
    return HorizonAnswer(
        label,
        evidence.universe_e(e),
        len(per),
        int((k["win"] | k["loss"]).sum()),
        int(k["win"].sum()),
        int(evidence.e_bh(e).sum()),
    )


def horizon_rows(
    engine: Engine, tickers: list[str], mode: str, include_in_sample: bool, include_ungated: bool
) -> pd.DataFrame:
    """The board's selection of these tickers' rows over the whole record, one read for every error
    horizon: run date, each horizon's target date and `{name}_closer` (1: the forecast landed closer to
    the answer than no change, -1 farther, 0 as close; NULL: not filled). The ticker accuracy view's
    scored-rows condition (accuracy_views: first published row, in-sample, gated, member)."""
    _, scored = accuracy_views.views(accuracy_views.CURRENT)[
        view_name(False, include_in_sample, include_ungated)
    ]
    cols, filled = [], []
    for h in ERROR_ONLY:
        pred, actual = f"s.{h.col('pred')}", f"s.{h.col('actual')}"
        model, naive = f"ABS({pred} - {actual})", f"ABS(s.run_date_close - {actual})"
        cols.append(f"s.{h.col('date')}")
        cols.append(
            f"CASE WHEN {actual} IS NULL THEN NULL WHEN {model} < {naive} THEN 1 "
            f"WHEN {model} > {naive} THEN -1 ELSE 0 END AS {h.name}_closer"
        )
        filled.append(f"{actual} IS NOT NULL")
    # Fixed SQL from the view definitions and the horizon registry; tickers are bound parameters.
    stmt = text(
        f"SELECT s.ticker, s.run_date, s.mode, {', '.join(cols)} FROM snapshots s "  # noqa: S608
        f"WHERE {scored} AND ({' OR '.join(filled)}) AND s.ticker IN :tickers"
    ).bindparams(bindparam("tickers", expanding=True))
    names = [
        "ticker",
        "run_date",
        "mode",
        *(c for h in ERROR_ONLY for c in (h.col("date"), f"{h.name}_closer")),
    ]
    if not tickers:  # nothing to read (and an empty IN list is typed NULL on PostgreSQL)
        return pd.DataFrame(columns=names)
    with engine.connect() as conn:
        raw = pd.DataFrame(conn.execute(stmt, {"tickers": list(tickers)}).all(), columns=names)
    if mode != "all":
        raw = raw[raw["mode"] == mode]
    return raw
