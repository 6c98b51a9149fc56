"""Signal performance (SPEC §15): what trading the published signals would have earned.

Ties the parts together: signal_rows (which rows, their returns, the benchmark), signal_ic (rank IC and
quintiles), signal_portfolios (the paper books), signal_stats (Sharpe and friends, PSR, DSR). Everything
is recomputable from stored rows and prices; no position uses a price after its evening's close.
`ldtm signals`, the `signal_performance` asset and the dashboard's Signals page all read `signal_report`.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from ldtm_core.accountability.signals import ic as signal_ic
from ldtm_core.accountability.signals import stats as signal_stats
from ldtm_core.accountability.signals.portfolios import LABELS, PORTFOLIOS, Portfolio, simulate
from ldtm_core.accountability.signals.rows import (
    PRODUCTION,
    RowChoice,
    Rows,
    as_dates,
    benchmark_returns,
    load_rows,
)
from ldtm_core.accountability.signals.stats import Trials
from ldtm_core.config import NUMERIC_SETTINGS, env_number
from ldtm_core.errors import InputError

COST_SETTING = "LDTM_SIGNAL_COST_BP"
DEFAULT_COST_BP = 5.0


def cost_bp_from_env() -> float:
    """Cost in basis points per unit of turnover (LDTM_SIGNAL_COST_BP, default 5)."""
    return float(env_number(COST_SETTING, DEFAULT_COST_BP))


def checked_cost(cost_bp: float | None) -> float:
    """`--cost-bp` (or LDTM_SIGNAL_COST_BP) within the setting's own bounds: one rule for both."""
    cost_bp = cost_bp_from_env() if cost_bp is None else float(cost_bp)
    spec = NUMERIC_SETTINGS[COST_SETTING]
    if not math.isfinite(cost_bp) or not spec.low <= cost_bp <= spec.high:
        raise InputError(
            f"signals: the cost must be a number of basis points from {spec.low:g} to {spec.high:g} "
            f"(10000: the whole turnover), not {cost_bp!r}"
        )
    return cost_bp


@dataclass
class SignalReport:
    choice: RowChoice
    cost_bp: float
    trials: Trials
    ic: pd.DataFrame  # per horizon (signal_ic.ic_summary)
    ic_daily: dict[str, pd.DataFrame]  # per horizon: run_date, ic, names
    quintiles: pd.DataFrame  # per horizon (signal_ic.quintile_summary)
    portfolios: dict[str, Portfolio]
    benchmark: pd.Series  # per evening, the equal-weight universe's next-session return
    universe: list[str]
    out_of_book: pd.DataFrame  # per evening: names in the book's universe without a scored row
    rows_used: int
    notes: list[str] = field(default_factory=list)

    @property
    def evenings(self) -> list:
        first = next(iter(self.portfolios.values()), None)
        return list(first.daily["run_date"]) if first is not None else []

    def summary(self) -> pd.DataFrame:
        """One row per series: each portfolio gross and net of costs, and the benchmark."""
        out = []
        bench = self.benchmark
        for name, p in self.portfolios.items():
            daily = p.daily.set_index("run_date")
            for basis in ("gross", "net"):
                row = {"portfolio": LABELS[name], "basis": basis}
                row.update(signal_stats.summary(daily[basis], self.trials.n, bench))
                row["turnover"] = float(daily["turnover"].mean()) if len(daily) else math.nan
                row["net_exposure"] = float(daily["net_exposure"].mean()) if len(daily) else math.nan
                out.append(row)
        row = {"portfolio": LABELS["benchmark"], "basis": "gross"}
        row.update(signal_stats.summary(bench.dropna(), self.trials.n))
        row["psr_vs_benchmark"] = math.nan
        row["turnover"], row["net_exposure"] = math.nan, 1.0
        out.append(row)
        return pd.DataFrame(out)

    def equity(self) -> pd.DataFrame:
        """Per evening, growth of 1 in each net portfolio and the benchmark (long format for charts)."""
        parts = []
        for name, p in self.portfolios.items():
            s = p.daily.set_index("run_date")["net"]
            parts.append(
                pd.DataFrame({"run_date": s.index, "series": LABELS[name], "value": (1 + s).cumprod()})
            )
        b = self.benchmark.dropna()
        parts.append(
            pd.DataFrame({"run_date": b.index, "series": LABELS["benchmark"], "value": (1 + b).cumprod()})
        )
        return (
            pd.concat(parts, ignore_index=True)
            if parts
            else pd.DataFrame(columns=["run_date", "series", "value"])
        )

    def drawdowns(self) -> pd.DataFrame:
        parts = []
        for name, p in self.portfolios.items():
            s = p.daily.set_index("run_date")["net"]
            dd = signal_stats.drawdown_series(s)
            parts.append(
                pd.DataFrame({"run_date": dd.index, "series": LABELS[name], "drawdown": dd.to_numpy()})
            )
        b = signal_stats.drawdown_series(self.benchmark.dropna())
        parts.append(
            pd.DataFrame({"run_date": b.index, "series": LABELS["benchmark"], "drawdown": b.to_numpy()})
        )
        return pd.concat(parts, ignore_index=True)

    def headline(self) -> str:
        """One plain sentence: the long/short book net of costs against the benchmark, and the DSR."""
        if not self.evenings:
            return "No filled published rows in the range: nothing to trade on yet."
        s = self.summary().set_index(["portfolio", "basis"])
        ls = s.loc[(LABELS["long_short"], "net")]
        bench = s.loc[(LABELS["benchmark"], "gross")]
        ic = self.ic.set_index("horizon").loc["next_day"]
        return (
            f"{len(self.evenings)} evenings, {len(self.universe)} tickers: long/short net of "
            f"{self.cost_bp:g} bp Sharpe {_f(ls['sharpe'])} (benchmark {_f(bench['sharpe'])}), "
            f"DSR {_f(ls['dsr'])} after {self.trials.n} recipe(s) tried; next-day mean IC "
            f"{_f(ic['mean_ic'], 3)} (HAC t {_f(ic['hac_t'])})."
        )


def _f(v, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def report_from_rows(
    rows: Rows, benchmark: pd.Series, cost_bp: float, trials: Trials, choice: RowChoice = PRODUCTION
) -> SignalReport:
    """The report on rows already chosen (pure: the simulations and tests call it on frames)."""
    frame = rows.rows
    portfolios = {k: simulate(frame, k, cost_bp) for k in PORTFOLIOS}
    evenings = list(portfolios["long_short"].daily["run_date"])
    bench = benchmark.reindex(pd.Index(evenings)).astype(float) if evenings else pd.Series(dtype=float)
    held = portfolios["long_short"].returns.notna().sum(axis=1)
    out = pd.DataFrame(
        {"run_date": evenings, "scored": held.to_numpy(), "out": len(rows.universe) - held.to_numpy()}
    )
    ic_daily = {h: signal_ic.ic_series(frame, h) for h in signal_ic.HORIZONS}
    report = SignalReport(
        choice=choice,
        cost_bp=cost_bp,
        trials=trials,
        ic=signal_ic.ic_summary(frame, ic_daily),
        ic_daily=ic_daily,
        quintiles=signal_ic.quintile_summary(frame),
        portfolios=portfolios,
        benchmark=bench,
        universe=rows.universe,
        out_of_book=out,
        rows_used=len(frame),
    )
    report.notes = _notes(rows, report)
    return report


def _notes(rows: Rows, report: SignalReport) -> list[str]:
    notes = [f"Rows: {report.choice.describe()}."]
    if rows.hidden_in_sample:
        notes.append(f"{rows.hidden_in_sample} in-sample rows left out (--include-in-sample shows them).")
    if rows.hidden_ungated:
        notes.append(f"{rows.hidden_ungated} ungated rows left out (--include-ungated shows them).")
    if rows.hidden_mode:
        notes.append(f"{rows.hidden_mode} rows of the other mode left out.")
    out = report.out_of_book
    if len(out) and out["out"].sum():
        notes.append(
            f"{int((out['out'] > 0).sum())} of {len(out)} evenings had tickers out of the book "
            f"({int(out['out'].sum())} ticker-evenings: no filled chosen row; never filled in with hindsight)."
        )
    pending = rows.rows[~np.isfinite(rows.rows["real_next_day"].to_numpy(dtype=float))]
    if len(pending):
        notes.append(f"{pending['run_date'].nunique()} evening(s) not yet filled are not scored.")
    notes.append(
        f"DSR: {report.trials.n} recipe(s) tried ({report.trials.source}); trial SR variance 1/(T-1)."
    )
    notes.append(
        f"Fills at the close of each evening and of the next session; costs {report.cost_bp:g} bp per unit "
        "of turnover, no other slippage; the benchmark holds every ticker equally, without costs."
    )
    return notes


def signal_report(
    engine: Engine,
    choice: RowChoice = PRODUCTION,
    cost_bp: float | None = None,
    trials: Trials | None = None,
) -> SignalReport:
    """The signal-performance report on the stored rows and prices."""
    cost_bp = checked_cost(cost_bp)
    rows = load_rows(engine, choice)
    scored = rows.rows[np.isfinite(rows.rows["real_next_day"].to_numpy(dtype=float))]
    bench = benchmark_returns(engine, rows.universe, as_dates(sorted(scored["run_date"].unique())))
    trials = trials or signal_stats.recipes_tried(engine, rows.universe or None)
    return report_from_rows(rows, bench, cost_bp, trials, choice)


def explain(
    engine: Engine, evening: dt.date, choice: RowChoice = PRODUCTION, cost_bp: float | None = None
) -> tuple[pd.DataFrame, dict]:
    """One evening's books: per ticker of the universe its published row (or why it is out), weights in
    both portfolios, predicted and realised next-day return and contribution; and the evening's totals."""
    window = RowChoice(
        choice.mode, choice.include_in_sample, choice.include_ungated, choice.shadow,
        evening - dt.timedelta(days=14), evening,
    )  # fmt: skip
    cost_bp = checked_cost(cost_bp)
    rows = load_rows(engine, window)
    when = pd.Timestamp(evening)
    day = rows.rows[rows.rows["run_date"] == when]
    if day.empty and not (rows.dropped["run_date"] == when).any():
        raise InputError(f"signals --explain: no published row on {evening}")
    books = {k: simulate(rows.rows, k, cost_bp) for k in PORTFOLIOS}
    table = pd.DataFrame({"ticker": rows.universe})
    cols = ["ticker", "direction_pred", "model_version", "pred_next_day", "real_next_day", "next_day_date"]
    table = table.merge(day[cols], on="ticker", how="left")
    table["next_day_date"] = [
        d.date() if isinstance(d, pd.Timestamp) else None for d in table["next_day_date"]
    ]
    dropped = rows.dropped[rows.dropped["run_date"] == when].set_index("ticker")["reason"]
    table["status"] = np.where(
        table["direction_pred"].notna(),
        np.where(np.isfinite(table["real_next_day"].astype(float)), "in", "not filled yet"),
        [f"out: {dropped.get(t, 'no row that evening')}" for t in table["ticker"]],
    )
    totals: dict = {"evening": evening, "universe": len(rows.universe)}
    for k, p in books.items():
        w = p.weights.loc[evening] if evening in p.weights.index else pd.Series(dtype=float)
        table[f"w_{k}"] = table["ticker"].map(w).fillna(0.0)
        table[f"contrib_{k}"] = table[f"w_{k}"] * table["real_next_day"].astype(float).fillna(0.0)
        d = p.daily.set_index("run_date")
        if evening in d.index:
            for c in ("gross", "turnover", "cost", "net"):
                totals[f"{k}_{c}"] = float(d.loc[evening, c])
    bench = benchmark_returns(engine, rows.universe, [evening])
    totals["benchmark"] = float(bench.iloc[0]) if len(bench) else math.nan
    return table, totals
