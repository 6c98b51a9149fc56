"""Ticker: predictions against what happened, rolling accuracy against always-up, cohorts, models, gate."""

import streamlit as st

from ldtm_core.accountability.board.reports import (
    counted_predictions,
    evening_cohorts,
    last_gate_report,
    model_timeline,
    rolling_accuracy,
    scored,
    snapshot_range,
    ticker_predictions,
    ticker_skill,
    tickers_with_snapshots,
)
from ldtm_core.accountability.gate.gate import latest_reports
from ldtm_core.horizons import HORIZONS
from ldtm_core.scoring.skill import format_p_value
from ldtm_dashboard.charts import (
    cohort_chart,
    predicted_vs_actual_chart,
    rolling_accuracy_chart,
    timeline_chart,
)
from ldtm_dashboard.data import database_caption, engine, first_evening_hint, ticker_from_query

MIN_ROLLING_N = 5

st.title("Ticker")
st.caption(database_caption())
db = engine()
requested = ticker_from_query(None)  # refused (page stops) when the address carries a bad ticker
known = tickers_with_snapshots(db)
if not known:
    st.info("No snapshots in the database yet. " + first_evening_hint())
    st.stop()
missing = requested is not None and requested not in known
if missing:  # another ticker's evenings under this one's address would mislead: the reader picks
    st.warning(f"{requested} has no snapshots (not in the universe, or not predicted yet): pick a ticker.")
index = None if missing else known.index(requested) if requested else 0
ticker = st.selectbox("Ticker", known, index=index, placeholder="a ticker with snapshots")
if ticker is None:
    st.stop()
st.query_params["ticker"] = ticker  # the address names what is shown, so it can be shared

first, last = snapshot_range(db, ticker)
picked = st.date_input("Evenings", value=(first, last), min_value=first, max_value=last)
start, end = (picked[0], picked[-1]) if isinstance(picked, tuple | list) and picked else (first, last)
include_in_sample = st.checkbox(
    "Include in-sample replays",
    value=False,
    help="As `ldtm leaderboard --include-in-sample`: evenings whose next-day target the model's "
    "training data already reached. Left out by default, as on the leaderboard.",
)
include_ungated = st.checkbox(
    "Include ungated evenings",
    value=False,
    help="As `ldtm leaderboard --include-ungated`: evenings predicted by a candidate that never passed "
    "the gate (the ticker had no active model). Left out by default, as on the leaderboard.",
)
predictions = ticker_predictions(db, ticker, start, end)
counted = counted_predictions(predictions, include_in_sample, include_ungated)
filled = scored(counted)  # ties (a zero move) are nobody's hit or miss
hidden = int((predictions["in_sample"] & predictions["next_day_actual"].notna()).sum())
ungated = int((~predictions["gated"] & predictions["next_day_actual"].notna()).sum())
if ungated and not include_ungated:
    st.warning(
        f"{ungated} filled evenings of {ticker} were predicted by a candidate that never passed the gate "
        "(ungated): left out of the figures below. Tick 'Include ungated evenings' to score them."
    )
skill = ticker_skill(counted)

cols = st.columns(4)
cols[0].metric("evenings", len(predictions))
cols[1].metric("next-day scored", len(filled), help="filled next-day evenings the figures count")
if len(filled):
    cols[2].metric(
        "direction accuracy",
        f"{filled['correct'].astype(bool).mean():.1%}",
        f"{filled['correct'].astype(bool).mean() - filled['went_up'].astype(bool).mean():+.1%} vs always-up",
    )
cols[3].metric("p (beats always-up)", format_p_value(skill.p_value) if len(filled) else "—")
st.caption(
    f"Counted: the {len(filled)} filled next-day evenings in the chosen range (the first prediction of each "
    + (
        "evening, in-sample replays included"
        if include_in_sample
        else f"evening, as the leaderboard; {hidden} in-sample evenings left out"
    )
    + ("" if include_ungated else f"; {ungated} ungated evenings left out")
    + f"). Skill test over them: {skill.describe()}."
)

st.header("Predicted vs actual close")
for tab, h in zip(st.tabs([h.title for h in HORIZONS]), HORIZONS, strict=True):
    with tab:
        st.altair_chart(predicted_vs_actual_chart(predictions, h.name), width="stretch")
        st.caption(f"{h.title}: each point is a target date; the actual line appears as closes arrive.")

st.header("Rolling 30-day next-day accuracy")
rolling = rolling_accuracy(counted)
rolling = rolling[rolling["n"] >= MIN_ROLLING_N]  # a window of 1-4 evenings is noise, not accuracy
if rolling.empty:
    st.info(f"Fewer than {MIN_ROLLING_N} filled next-day predictions in any 30-day window of this range.")
else:
    st.altair_chart(rolling_accuracy_chart(rolling), width="stretch")
    st.caption(f"Each point: the 30 calendar days ending that evening (at least {MIN_ROLLING_N} evenings).")

st.header("Cohort of each evening")
st.altair_chart(cohort_chart(evening_cohorts(db, start, end, include_ungated)), width="stretch")
calls = predictions[
    ["run_date", "direction_pred", "model_version", "gated", "mode", "next_day_pred", "next_day_actual"]
]
st.caption(f"{ticker}'s own call each evening")
st.dataframe(calls, hide_index=True)

st.header("Models and registry events")
models, events = model_timeline(db, ticker)
if not events.empty:
    st.altair_chart(timeline_chart(events), width="stretch")
st.dataframe(models, hide_index=True)
st.dataframe(events, hide_index=True)

st.header("Last gate report")
recorded = latest_reports(db, [ticker]).get(ticker)
if recorded and recorded.get("markdown"):
    # As decided (revision 0023): the paired comparison with the champion, the evidence and the rule.
    st.caption(f"as the gate recorded it, {recorded['decided_at']} UTC; evidence: {recorded.get('evidence')}")
    st.markdown(recorded["markdown"])
gate = last_gate_report(db, ticker)
if gate is None:
    st.info(f"The gate has not judged a model of {ticker} yet.")
else:
    st.markdown(f"Model **{gate.model_id}**, {str(gate.at)[:19]}: {gate.decision}")
    if gate.criteria:
        st.caption(f"backtest {gate.backtest_id}, judged with today's thresholds")
        st.dataframe(gate.criteria_table(), hide_index=True)
        fig = gate.figures
        sk = fig.get("skill")
        st.markdown(
            f"accuracy **{fig['direction_accuracy']:.1%}** vs always-up **{fig['always_up_accuracy']:.1%}** "
            f"on {fig['n']} test rows; "
            + (
                f"one-sided p = **{format_p_value(sk.p_value)}**"
                if sk
                else "skill test unknown (old backtest)"
            )
        )
