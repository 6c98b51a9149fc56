"""Runs: the run log, the newest snapshot evening, what fillback is waiting for, the audit chain."""

import streamlit as st

from ldtm_core.accountability.board.reports import audit_status, latest_evening, pending_fillback, recent_runs
from ldtm_dashboard.data import database_caption, engine, first_evening_hint

st.title("Runs")
st.caption(database_caption())
db = engine()

st.header("Newest snapshot evening")
evening = latest_evening(db)
if evening is None:
    st.info("No snapshots yet. " + first_evening_hint())
else:
    cols = st.columns(5)
    cols[0].metric("evening", str(evening["run_date"]))
    cols[1].metric("tickers", evening["tickers"])
    cols[2].metric("bullish", evening["cohort"]["bullish"])
    cols[3].metric("neutral", evening["cohort"]["neutral"])
    cols[4].metric("bearish", evening["cohort"]["bearish"])
    st.caption(
        f"{evening['rows']} rows, mode {', '.join(evening['modes'])}. The cohort counts gated models only"
        + (
            f"; ungated (a candidate that never passed the gate predicted): {', '.join(evening['ungated'])}"
            if evening["ungated"]
            else ""
        )
    )

st.header("Run log")
runs = recent_runs(db)
if runs.empty:
    st.info("No runs recorded yet.")
else:
    st.dataframe(
        runs[
            [
                "kind",
                "status",
                "run_date",
                "started_at",
                "duration_s",
                "n_rows",
                "tickers",
                "message",
                "run_id",
            ]
        ],
        hide_index=True,
        column_config={"duration_s": st.column_config.NumberColumn("duration s", format="%.2f")},
    )

st.header("Pending fillback")
ready, waiting = pending_fillback(db)
st.markdown(
    f"**{len(ready)}** fills can be made now (`ldtm fillback`); the rest wait for their target dates."
)
if not ready.empty:
    st.dataframe(ready, hide_index=True)
if not waiting.empty:
    st.caption("Rows whose actual is still unknown, per horizon")
    st.dataframe(waiting, hide_index=True)

st.header("Audit chain per ticker")
chains = audit_status(db)
if chains.empty:
    st.info("No chains to check yet.")
else:
    broken = chains[chains["chain"] == "broken"]
    if broken.empty:
        st.success(f"All {len(chains)} chains intact ({int(chains['rows'].sum())} rows re-hashed).")
    else:
        st.error(f"{len(broken)} of {len(chains)} chains broken: {', '.join(broken['ticker'])}")
    st.dataframe(chains, hide_index=True)
