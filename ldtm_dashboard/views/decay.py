"""Decay: each ticker's published record, across model changes, against what its models' gate reports
promised (CUSUM alarms), with the
drift of its features (PSI) beside it. The same figures as the `leaderboard_decay` check and `ldtm decay`."""

import pandas as pd
import streamlit as st

from ldtm_core.accountability.decay.decay import TABLE_COLUMNS, DecaySettings, check
from ldtm_core.accountability.decay.drift import BLIND_SPOTS
from ldtm_dashboard.data import database_caption, engine

PCT = st.column_config.NumberColumn
COLUMNS = TABLE_COLUMNS
COLUMN_CONFIG = {
    "decaying": st.column_config.CheckboxColumn(
        "decaying", help="a chart signalled within the newest evenings (LDTM_DECAY_HOLD_SESSIONS)"
    ),
    "signals": PCT("signals", help="CUSUM signals on the record (the chart restarts at 0 after each)"),
    "live_n": PCT("live n", help="filled out-of-sample published evenings, whichever model served"),
    "live_models": PCT("models", help="models whose published rows make up the record"),
    "live_accuracy": PCT("live acc.", format="percent"),
    "expected_accuracy": PCT(
        "expected",
        format="percent",
        help="the best estimate of the model's accuracy after the gate's selection: the posterior mean "
        "given its backtest under a prior fitted to every stored backtest (empirical Bayes)",
    ),
    "promised_accuracy": PCT(
        "chart floor",
        format="percent",
        help="mean over the record of each row's promise, what the charts expect: the exact lower "
        "confidence bound of the pooled accuracy of the backtest the gate promoted the model that wrote it "
        "on, at the level the gate judged it at (a backtest kept because it passed overstates the model)",
    ),
    "backtest_accuracy": PCT(
        "backtest",
        format="percent",
        help="the same backtests' raw pooled accuracy, before the selection margin is taken off",
    ),
    "always_up_accuracy": PCT("always-up", format="percent", help="on the same evenings"),
    "cusum": PCT("CUSUM", format="%.2f", help="accuracy chart: evidence of a drop of delta points"),
    "threshold": PCT("h", format="%.2f", help="designed for the configured false-alarm rate"),
    "cusum_vs_up": PCT("CUSUM vs up", format="%.2f", help="on the evenings model and always-up disagree"),
    "threshold_vs_up": PCT("h vs up", format="%.2f"),
    "psi_max": PCT(
        "max PSI",
        format="%.3f",
        help="of the model's input features, recent window vs up to the recipe's data cutoff",
    ),
    "psi_unusual": st.column_config.TextColumn(
        "PSI unusual",
        help="features whose PSI is beyond what unchanged inputs show, calibrated on a null simulated from "
        "the training window: a ticker whose inputs did not change lists any at most 5 % of the time "
        "(consecutive sessions are autocorrelated: the usual bands alone over-flag)",
    ),
}

st.title("Decay")
st.caption(database_caption())
settings = DecaySettings.from_env()
report = check(engine(), settings=settings)
if not report.tickers:
    st.info(
        "No active model yet, so nothing in production to watch: a model becomes active when the gate "
        "promotes it (`ldtm gate`)."
        + (f" Ungated (candidate only): {', '.join(report.without_active)}." if report.without_active else "")
    )
    st.stop()

bad = report.decaying
if bad:
    st.warning(report.summary())
else:
    st.success(report.summary())
st.caption(
    "A Bernoulli CUSUM per ticker on its published record across model changes (a weekly promotion does "
    "not wipe the evidence), each filled out-of-sample evening judged against the promise of the model that "
    f"made it: in control that accuracy, out of control {settings.delta * 100:g} points lower. The promise is "
    "the backtest's accuracy shrunk for the gate's selection (its exact lower bound at the level the gate "
    "judged it at; 'backtest' shows the raw figure); a second chart on the "
    "evenings where model and always-up disagree. Thresholds are designed (exact Markov-chain run length) "
    f"for one false alarm per {settings.arl0:g} sessions per ticker; one alarm episode is notified once. PSI: "
    f"the last {settings.psi_sessions} sessions after the recipe's data cutoff (its first model's) against "
    "the rows up to it, decile bins; 'PSI unusual' lists the inputs beyond limits simulated from the "
    "training window (an unchanged ticker lists any at most 5 % of the time; the usual 0.1 / 0.25 bands "
    f"assume independent draws and do not apply to these persistent inputs). {BLIND_SPOTS}. What to do on an "
    "alarm: docs/operations.md (Decay)."
)
left, mid, right = st.columns(3)
left.metric("active models", len(report.tickers))
mid.metric("decaying", len(bad))
right.metric("inputs unusual", sum(bool(t.drift and t.drift.unusual) for t in report.tickers))

table = pd.DataFrame(report.rows())
st.subheader("Alarms")
if bad:
    st.dataframe(table[table["decaying"]][COLUMNS], hide_index=True, column_config=COLUMN_CONFIG)
else:
    st.info("No active model is below its promise beyond the designed noise.")
st.subheader("Every active model")
st.dataframe(table[COLUMNS], hide_index=True, column_config=COLUMN_CONFIG)

st.subheader("Feature drift (PSI per feature)")
psi = pd.DataFrame({t.ticker: t.drift.values for t in report.tickers if t.drift and t.drift.values}).T
if psi.empty:
    st.info("No PSI yet: a recipe needs 20 sessions after its first model's data cutoff.")
else:
    st.dataframe(psi.style.format("{:.3f}"), column_config={"_index": "ticker"})
