"""Leaderboard: every ticker's 30-day next-day accuracy beside the board's baselines and the skill tests;
labels from anytime-valid evidence over each ticker's whole published record (e-BH), the universe's
record answer and the window's SPA, and the tickers without a production model."""

import pandas as pd
import streamlit as st

from ldtm_core.accountability.board.leaderboard import (
    IN_SAMPLE_CAVEAT,
    MODES,
    SIGNIFICANCE,
    UNGATED_LEGEND,
    display_columns,
    hidden_in_sample,
    hidden_ungated,
    leaderboard,
    naive_column,
    non_member_note,
    universe,
    verdict,
)
from ldtm_core.accountability.board.no_champion import without_champion
from ldtm_core.accountability.board.recipes import by_recipe
from ldtm_core.accountability.board.record import e_column, evidence_rule, horizon_answers, record_answer
from ldtm_core.accountability.shadow.shadow import RULE as SHADOW_RULE
from ldtm_core.accountability.shadow.shadow import side_by_side
from ldtm_core.accountability.submissions.judge import RULE as SUBMITTED_RULE
from ldtm_core.accountability.submissions.judge import live_records
from ldtm_core.config import Settings
from ldtm_core.horizons import DIRECTION, ERROR_ONLY
from ldtm_core.scoring.baselines import Baseline, board_baselines
from ldtm_core.scoring.board_stats import label_rule
from ldtm_core.scoring.evidence import COIN
from ldtm_dashboard.charts import leaderboard_chart
from ldtm_dashboard.data import database_caption, engine, first_evening_hint


def shadow_section() -> None:
    """Champion beside shadow on the same filled evenings (only when a ticker has a model in shadow)."""
    pairs = side_by_side(engine(), Settings.from_env())
    if pairs.empty:
        return
    st.subheader("Champion vs shadow, on the same evenings")
    st.caption(
        "A shadow passed the gate and predicts every evening beside the champion; its rows are recorded "
        "in the hash chain but never published, and none of the figures above count them. After the "
        f"required filled evenings: {SHADOW_RULE}."
    )
    st.dataframe(
        pairs,
        hide_index=True,
        column_config={
            "champion_accuracy": PCT("champion acc.", format="percent"),
            "shadow_accuracy": PCT("shadow acc.", format="percent"),
            "direction_p": PCT("p (champion better)", format="%.3f", help="exact McNemar, one-sided"),
            "champion_mae": PCT("champion |err| 1d %", format="%.2f"),
            "shadow_mae": PCT("shadow |err| 1d %", format="%.2f"),
            "error_p": PCT(
                "p (shadow errs more)", format="%.3f", help="Diebold-Mariano (EWC HAC), one-sided"
            ),
        },
    )


def submitted_section() -> None:
    """Each submitted model's live record (only when one is registered): unpublished until promoted, so
    outside every figure above but its promoted tickers."""
    records = live_records(engine())
    if records.empty:
        return
    st.subheader("Submitted models, on their live record")
    st.caption(
        "Forecasts submitted from models LDTM does not run (`ldtm submit`), recorded, chained and receipted "
        "beside the published rows; a 'candidate' row is never published. Each e-value is anytime-valid "
        f"evidence against that comparison (large: shown). Rule: {SUBMITTED_RULE}. What each record could "
        "detect: "
        + "; ".join(
            f"{m}: {d}" for m, d in records.groupby("model", sort=False)["detectable"].first().items()
        )
    )
    st.dataframe(
        records.drop(columns=["detectable"]),
        hide_index=True,
        column_config={
            "accuracy": PCT("accuracy", format="percent"),
            "level": PCT("e-BH level", format="%.4g"),
        },
    )


def recipes_section(mode: str, include_in_sample: bool, include_ungated: bool) -> None:
    """Each recipe's rows of the window summed, side by side (two or more recipes have served)."""
    table = by_recipe(engine(), mode, include_in_sample=include_in_sample, include_ungated=include_ungated)
    if len(table) < 2:
        return
    st.subheader("Recipes side by side")
    st.caption(
        "Each recipe's models on their own rows of the window, summed: a description, not a paired test "
        "(`ldtm universe verdict` pairs two recipes on the same folds)."
    )
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "direction_accuracy": PCT("dir acc", format="percent"),
            "always_up_accuracy": PCT("always-up (same rows)", format="percent"),
        },
    )


def no_champion_section() -> None:
    """Tickers with no active model (the gate refused its candidate, or never judged one), with the reason:
    on the page, not silently absent."""
    missing = without_champion(engine())
    if not missing:
        return
    st.subheader("No production model")
    st.caption(
        "These tickers have no model that passed the gate. The nightly still predicts them with the newest "
        "candidate (ungated rows, recorded and hash-chained), but no figure above counts those rows. "
        "The reason is the latest gate decision's failing criteria."
    )
    st.dataframe(
        pd.DataFrame([m.to_dict() for m in missing])[
            ["ticker", "model_id", "decision", "decided_at", "reason"]
        ],
        hide_index=True,
        column_config={"reason": st.column_config.TextColumn("reason", width="large")},
    )


PCT = st.column_config.NumberColumn


def baseline_config(b: Baseline) -> dict:
    """The dashboard's columns of one board baseline (scoring.baselines): accuracy, n, the exact test."""
    return {
        b.column("accuracy"): PCT(b.label, format="percent", help=f"{b.says}, on the same rows"),
        b.column("n"): PCT(f"n {b.short}", help=f"rows {b.label} made a call on: it is scored on these"),
        b.column("model_only"): PCT(
            f"model only ({b.short})", help=f"rows where the model was right and {b.label} wrong"
        ),
        b.column("base_only"): PCT(
            f"{b.short} only", help=f"rows where {b.label} was right and the model wrong"
        ),
        b.column("p"): PCT(
            f"p vs {b.short}",
            format="%.3f",
            help=f"this ticker's one-sided exact sign test on the rows where model and {b.label} disagree "
            "(unadjusted: read 103 at a time, about 5 in 100 are below 0.05 by luck)",
        ),
        b.column("q"): PCT(
            f"q vs {b.short}",
            format="%.3f",
            help="Benjamini-Hochberg q over every (ticker, baseline) test of the window: a description of "
            "the month, not the label",
        ),
        b.column("beats"): st.column_config.CheckboxColumn(
            f"beats {b.short}",
            help=f"shown to beat {b.label} on the whole published record: e-BH at 0.05 over every "
            "(ticker, baseline) e-value, anytime-valid",
        ),
        e_column(b.name): PCT(
            f"e vs {b.short}",
            format="%.3g",
            help=f"the record's e-value against {b.label} on the evenings the two disagree (1: no evidence)",
        ),
    }


RECORD_CONFIG = {
    "record_n": PCT("record n", help="scored evenings of the ticker's whole published record"),
    "record_accuracy": PCT("record acc.", format="percent", help="direction accuracy over the record"),
    e_column(COIN): PCT("e vs coin", format="%.3g", help="the record's e-value against a fair coin"),
    "e_skill": PCT("e (all)", format="%.3g", help="the smallest of the record's e-values, coin included"),
    "shown_skill": st.column_config.CheckboxColumn(
        "shown", help="shown to beat every baseline, a coin included: e-BH at 0.05 over the tickers' e (all)"
    ),
}


COLUMNS = display_columns()
COLUMN_CONFIG = {
    "n": PCT("n", help="filled evenings in the 30-day window"),
    "direction_accuracy": PCT("accuracy", format="percent", help="next-day direction accuracy"),
    "wilson_low": PCT("95% low", format="percent", help="Wilson interval, lower end"),
    "wilson_high": PCT("95% high", format="percent", help="Wilson interval, upper end"),
    **{k: v for b in board_baselines() for k, v in baseline_config(b).items()},
    **RECORD_CONFIG,
    f"{DIRECTION.name}_mape": PCT(f"|err| {DIRECTION.abbr} %", format="%.2f"),
    **{
        f"{h.name}_mape": PCT(
            f"|err| {h.abbr} %",
            format="%.2f",
            help=f"the 30 days ending at the newest filled {h.label.replace(' ', '-')} target",
        )
        for h in ERROR_ONLY
    },
    **{
        f"{h.name}_n": PCT(
            f"n {h.abbr}", help=f"filled {h.label.replace(' ', '-')} targets in their own 30-day window"
        )
        for h in ERROR_ONLY
    },
    **{
        f"{h.name}_dates": PCT(
            f"dates {h.abbr}",
            help=f"distinct {h.label.replace(' ', '-')} target dates under those rows: rows sharing a "
            "target date (a week's evenings share one next Monday) are one outcome, not several",
        )
        for h in ERROR_ONLY
    },
    **{
        naive_column(h.name): PCT(
            f"no-change |err| {h.abbr} %",
            format="%.2f",
            help="the mean |error| of predicting no move (the run-date close) on the same rows: a model "
            "whose |err| is not below it has no error skill",
        )
        for h in (DIRECTION, *ERROR_ONLY)
    },
    "gated": st.column_config.CheckboxColumn("gated", help=f"unticked = {UNGATED_LEGEND}"),
}

st.title("Leaderboard")
st.caption(database_caption())
mode = st.radio("Snapshots", MODES, horizontal=True, help="live evenings, history replays, or both")
include_in_sample = st.checkbox(
    "Include in-sample replays",
    value=False,
    help="As `ldtm leaderboard --include-in-sample`: evenings whose next-day target the model's "
    "training data already reached",
)
include_ungated = st.checkbox(
    "Include ungated candidates",
    value=False,
    help="As `ldtm leaderboard --include-ungated`: evenings predicted by a candidate that never passed "
    "the gate (tickers with no active model). They describe no production model, so every figure here "
    "leaves them out by default.",
)
full_board = leaderboard(engine(), mode, include_in_sample=include_in_sample, include_ungated=include_ungated)
hidden = 0 if include_in_sample else hidden_in_sample(engine(), mode)
ungated_hidden = [] if include_ungated else hidden_ungated(engine())
ungated_text = (
    f" Ungated, left out (no active model; 'Include ungated candidates' shows them): {', '.join(ungated_hidden)}."
    if ungated_hidden
    else ""
)
# Evenings of tickers outside the dated universe that evening: kept in the record, named, not scored.
if outside := non_member_note(engine(), mode):
    st.info(outside)
# Tickers with a serving model but no filled evening in the window: named, not scored, never dropped.
stale = full_board[full_board["stale"]]
board = full_board[~full_board["stale"]]
if len(stale):
    st.warning(
        "Stale, no filled evening in the window: "
        + ", ".join(f"{r.ticker} (last filled {r.last_filled or 'never'})" for r in stale.itertuples())
    )

if board.empty:
    if ungated_hidden:
        st.info(
            "No gated model has a filled evening in the window, so nothing in production is scored."
            + ungated_text
        )
    elif hidden:
        st.info(
            f"All {hidden} filled evenings in the window are in-sample replays (the model trained on "
            "their answers), so nothing is scored: tick 'Include in-sample replays' to see them."
        )
    else:
        st.info(
            f"No filled snapshots ({mode}) in the database yet, so there is nothing to score. "
            + first_evening_hint()
        )
    no_champion_section()
    shadow_section()
    submitted_section()
    st.stop()

# One short answer per question first: the record's label (the test), each error horizon, then the
# window's SPA (a description). How each is reached sits in the expander below the table, said once.
caveat = IN_SAMPLE_CAVEAT if include_in_sample else ""
on_record = record_answer(full_board, caveat)
by_horizons = horizon_answers(
    engine(),
    sorted(full_board["ticker"]),
    mode,
    include_in_sample=include_in_sample,
    include_ungated=include_ungated,
)
answer = universe(
    engine(), full_board, mode, include_in_sample=include_in_sample, include_ungated=include_ungated
)
(st.success if on_record.rejects else st.info)(on_record.short())
for by_horizon in by_horizons:
    st.markdown(by_horizon.short())
st.caption(answer.short())
if caveat:
    st.warning(caveat.strip())
left, mid, right = st.columns(3)
left.metric("tickers scored", len(board))
mid.metric(
    "shown to beat every baseline",
    int(board["shown_skill"].sum()),
    help="a coin included, on the whole published record (e-BH over the tickers, anytime-valid)",
)
right.metric(
    f"window p <= {SIGNIFICANCE:g}, unadjusted",
    int((board["skill_p_value"] <= SIGNIFICANCE).sum()),
    help="each ticker's own 30-day test vs always-up, before the adjustment for reading the whole board: "
    "a description of the month, not evidence",
)

with st.expander("Filter", expanded=False):
    needle = st.text_input("Ticker contains", "").strip().upper()
    only_beating = st.checkbox("Only models shown to beat every baseline")
    # Stale rows (no filled evening in the window) have no n: a board of only those has no maximum.
    most = int(board["n"].max()) if board["n"].notna().any() else 0
    min_n = st.slider("At least n evenings", 0, max(most, 1), 0)
shown = board
if needle:
    shown = shown[shown["ticker"].str.contains(needle, regex=False)]
if only_beating:
    shown = shown[shown["shown_skill"]]
shown = shown[shown["n"] >= min_n]

st.dataframe(shown[COLUMNS], hide_index=True, column_config=COLUMN_CONFIG)
if shown.empty:
    st.info("No ticker matches the filter.")
else:
    st.subheader("Accuracy with its 95% interval; the orange tick is always-up")
    st.altair_chart(leaderboard_chart(shown), width="stretch")
with st.expander("How these answers are reached: the method, its power, the labels' rules", expanded=False):
    st.markdown(verdict(full_board))
    for said in (on_record, *by_horizons, answer):
        st.caption(said.describe())
    st.caption(
        f"Labels: {evidence_rule(full_board)}. "
        f"Window {board['window_start'].min()} .. {board['window_end'].max()} (30 calendar days of filled "
        f"snapshots ending at the newest). p is each ticker's one-sided exact test of 'right more often than "
        f"the baseline' on the window's rows where the two disagree; {label_rule(full_board)}. A higher "
        "accuracy alone is not evidence. The next-Monday and one-month errors each cover the 30 days ending "
        "at their own newest filled target, with their row counts and the distinct target dates those rows "
        "stand on."
    )
notes = (
    f"{hidden} in-sample rows hidden; 'Include in-sample replays' shows them." if hidden else ""
) + ungated_text
if not board["gated"].all():
    notes += f" Unticked 'gated': {UNGATED_LEGEND}."
if notes:
    st.caption(notes.strip())
recipes_section(mode, include_in_sample, include_ungated)
no_champion_section()
shadow_section()
submitted_section()
