"""Signals: what trading the published signals would have earned. The same report as
`ldtm signals` and the `signal_performance` asset (ldtm_core.accountability.signals.signals)."""

import datetime as dt
import math

import streamlit as st

from ldtm_core.accountability.signals.execution import EXECUTIONS, RULES, execution_from_env, held_label, tag
from ldtm_core.accountability.signals.ic import HORIZONS
from ldtm_core.accountability.signals.rows import MODES, RowChoice
from ldtm_core.accountability.signals.signals import cost_bp_from_env, explain, signal_report
from ldtm_core.accountability.signals.stats import PERIODS_PER_YEAR
from ldtm_core.errors import LDTMError
from ldtm_dashboard.data import database_caption, engine
from ldtm_dashboard.signal_charts import drawdown_chart, equity_chart, ic_chart, quintile_chart

NUM = st.column_config.NumberColumn
SUMMARY_CONFIG = {
    "total_return": NUM("total", format="percent"),
    "annual_return": NUM("ann. return", format="percent"),
    "annual_vol": NUM("ann. vol", format="percent"),
    "sharpe": NUM("Sharpe", format="%.2f", help="annualised (252 sessions), risk-free 0 (empyrical)"),
    "sortino": NUM("Sortino", format="%.2f"),
    "max_drawdown": NUM("max DD", format="percent"),
    "psr_vs_0": NUM(
        "PSR vs 0",
        format="%.3f",
        help="probability the true Sharpe is above 0 (serial correlation counted as fewer sessions)",
    ),
    "p_sharpe_above_benchmark": NUM(
        "P(SR > bench)",
        format="%.3f",
        help="probability the true Sharpe is above the benchmark's: Ledoit-Wolf test of the difference "
        "(both series' noise and serial correlation counted)",
    ),
    "dsr": NUM(
        "DSR",
        format="%.3f",
        help="PSR against the best Sharpe expected from the (ticker, recipe) trials; none for the benchmark",
    ),
    "turnover": NUM("turnover", format="%.2f", help="mean per evening"),
    "net_exposure": NUM("net exp.", format="%.2f"),
}


def _f(v, digits=2) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


st.title("Signals")
st.caption(database_caption())
with st.sidebar:
    st.subheader("Rows and costs")
    mode = st.selectbox("mode", MODES, index=0)
    in_sample = st.checkbox("include in-sample replays", value=False)
    ungated = st.checkbox("include ungated (candidate) evenings", value=False)
    cost = st.number_input("cost, bp per unit turnover", min_value=0.0, value=float(cost_bp_from_env()))
    execution = st.selectbox(
        "execution",
        EXECUTIONS,
        index=EXECUTIONS.index(execution_from_env()),
        format_func=tag,
        help="When the books trade an evening's signals (LDTM_SIGNAL_EXECUTION): "
        + "; ".join(f"{k}: {v}" for k, v in RULES.items()),
    )
    start = st.date_input("from", value=None)
    end = st.date_input("to", value=None)

try:
    choice = RowChoice(mode, in_sample, ungated, False, start, end)
    report = signal_report(engine(), choice, cost, execution=execution)
except LDTMError as exc:
    st.error(str(exc))
    st.stop()

if not report.evenings:
    st.info(
        "No filled published rows yet: a book needs evenings whose entry and exit sessions have closed (by "
        "default the two sessions after the evening; same_close: the next one, filled back by `ldtm "
        "fillback`). Predictions of ungated candidates and in-sample replays count only when "
        "included in the sidebar."
    )
    st.stop()

st.info(report.headline())
st.caption(f"Execution {tag(report.execution)}: {RULES[report.execution]}. Every figure below is traded so.")
summary = report.summary()
ls = summary.set_index(["portfolio", "basis"]).loc[("long bullish / short bearish", "net")]
ic = report.ic.set_index("horizon").loc["next_day"]
a, b, c, d = st.columns(4)
a.metric("evenings", len(report.evenings))
b.metric("long/short Sharpe (net)", _f(ls["sharpe"]))
c.metric("DSR", _f(ls["dsr"], 3), help=f"{report.trials.n} recipe(s) tried: {report.trials.source}")
d.metric(
    "next-day mean IC",
    _f(ic["mean_ic"], 3),
    help=ic["untested"] or f"t {_f(ic['hac_t'])}, p {_f(ic['hac_p'], 3)}",
)

st.subheader("Equity curve against the equal-weight universe")
st.altair_chart(equity_chart(report.equity()), width="stretch")
st.subheader("Drawdown")
st.altair_chart(drawdown_chart(report.drawdowns()), width="stretch")
left, right = st.columns(2)
horizon = left.selectbox("horizon", [*HORIZONS, held_label(report.execution)], index=0)
left.subheader("Rank IC over time")
left.altair_chart(ic_chart(report.ic_daily[horizon]), width="stretch")
right.subheader("Quintile returns")
right.altair_chart(quintile_chart(report.quintiles, horizon), width="stretch")

st.subheader("Paper portfolios")
if len(report.evenings) < PERIODS_PER_YEAR:
    st.warning(
        f"Annualised from {len(report.evenings)} evenings, under a year ({PERIODS_PER_YEAR} sessions): the annual "
        "return, volatility, Sharpe and Sortino extrapolate a short record."
    )
st.dataframe(summary, hide_index=True, column_config=SUMMARY_CONFIG)
st.subheader("Rank IC per horizon")
P_CONFIG = {c: NUM(c, format="%.4f") for c in ("hac_p", "spread_hac_p")}
st.dataframe(report.ic, hide_index=True, column_config=P_CONFIG)
st.subheader("Residual IC and churn")
st.caption(
    "IC after each name's beta on the equal-weight universe, then after its sector's mean "
    "(ldtm_core/universe/sectors.csv); churn = 1 - rank correlation with the previous evening's predictions."
)
st.dataframe(report.residual, hide_index=True, column_config={"sector_hac_p": NUM("p", format="%.4f")})
st.subheader("Quintiles")
st.dataframe(report.quintiles, hide_index=True, column_config=P_CONFIG)
st.subheader("Per-ticker contributions (long/short)")
st.dataframe(
    report.portfolios["long_short"].contributions(),
    hide_index=True,
    column_config={
        "contribution": NUM("contribution", format="percent"),
        "hit_rate": NUM("hit rate", format="percent"),
    },
)
for note in report.notes:
    st.caption(note)

st.subheader("One evening")
evenings = report.evenings
day = st.selectbox("evening", list(reversed(evenings)), index=0, format_func=dt.date.isoformat)
table, totals = explain(engine(), day, choice, cost, execution)
st.dataframe(table, hide_index=True)
st.caption(
    ", ".join(f"{k.replace('_', ' ')} {v:.4%}" for k, v in totals.items() if k.endswith(("_gross", "_net")))
    + f"; equal-weight universe {totals['benchmark']:.4%}"
)
