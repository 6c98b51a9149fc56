"""Signal performance (SPEC §15): what trading the published signals would have earned.

Ties the parts together: signal_rows (which rows, their returns, the benchmark), signal_ic (rank IC and
quintiles), signal_portfolios (the paper books), signal_execution (when the books trade: by default
entered at the close after the evening's, since a prediction is published after its own close),
signal_stats (Sharpe and friends, PSR, DSR). Everything is recomputable from stored rows and prices.
`ldtm signals`, the `signal_performance` asset and the dashboard's Signals page all read `signal_report`.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from sqlalchemy import Engine

from ldtm_core.accountability.signals import execution as signal_execution
from ldtm_core.accountability.signals import ic as signal_ic
from ldtm_core.accountability.signals import stats as signal_stats
from ldtm_core.accountability.signals.portfolios import LABELS, PORTFOLIOS, Portfolio, simulate
from ldtm_core.accountability.signals.residual import residual_summary
from ldtm_core.accountability.signals.rows import (
    PRODUCTION,
    RowChoice,
    Rows,
    load_rows,
)
from ldtm_core.accountability.signals.stats import Trials
from ldtm_core.config import NUMERIC_SETTINGS, env_number
from ldtm_core.errors import InputError
from ldtm_core.learning.fold_evidence import evenings_seen_by_folds

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
    benchmark: pd.Series  # per evening, the equal-weight universe held by the same execution rule
    universe: list[str]
    out_of_book: pd.DataFrame  # per evening: names in the book's universe without a scored row
    rows_used: int
    execution: str = signal_execution.DEFAULT_EXECUTION  # when the books trade (signals.execution)
    notes: list[str] = field(default_factory=list)
    residual: pd.DataFrame = field(default_factory=pd.DataFrame)  # per horizon (signals.residual)

    @property
    def evenings(self) -> list:
        first = next(iter(self.portfolios.values()), None)
        return list(first.daily["run_date"]) if first is not None else []

    def summary(self) -> pd.DataFrame:
        """One row per series: each portfolio gross and net of costs, and the benchmark."""
        out = []
        bench = self.benchmark
        rule = signal_execution.tag(self.execution)  # every row states how it was traded
        for name, p in self.portfolios.items():
            daily = p.daily.set_index("run_date")
            for basis in ("gross", "net"):
                row = {"portfolio": LABELS[name], "basis": basis, "execution": rule}
                row.update(signal_stats.summary(daily[basis], self.trials.n, bench))
                row["turnover"] = float(daily["turnover"].mean()) if len(daily) else math.nan
                row["net_exposure"] = float(daily["net_exposure"].mean()) if len(daily) else math.nan
                out.append(row)
        row = {"portfolio": LABELS["benchmark"], "basis": "gross", "execution": rule}
        row.update(signal_stats.summary(bench.dropna(), None))  # not selected among trials: no DSR
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

    def tickers_traded(self) -> list[str]:
        """The tickers either book held a position in at least once (the universe also counts tickers
        with rows that never entered a book: ungated, neutral every evening, or never filled)."""
        held: set[str] = set()
        for p in self.portfolios.values():
            held.update(str(t) for t in p.weights.columns[(p.weights != 0).any(axis=0).to_numpy()])
        return sorted(held)

    def _tickers_phrase(self) -> str:
        traded = len(self.tickers_traded())
        phrase = f"{traded} ticker{'s' * (traded != 1)} traded"
        return phrase if traded == len(self.universe) else f"{phrase} ({len(self.universe)} with rows)"

    def headline(self) -> str:
        """One plain sentence: the execution rule, the long/short book net of costs against the benchmark,
        the DSR, the forecast-time next-day IC and the IC against the return the books earn."""
        if not self.evenings:
            return "No filled published rows in the range: nothing to trade on yet."
        s = self.summary().set_index(["portfolio", "basis"])
        ls = s.loc[(LABELS["long_short"], "net")]
        bench = s.loc[(LABELS["benchmark"], "gross")]
        ic = self.ic.set_index("horizon").loc["next_day"]
        held = self.ic.set_index("horizon")["mean_ic"].get(signal_execution.held_label(self.execution))
        return (
            f"{len(self.evenings)} evenings, {self._tickers_phrase()}, books executed "
            f"{signal_execution.tag(self.execution)}: long/short net of "
            f"{self.cost_bp:g} bp Sharpe {_f(ls['sharpe'])} (benchmark {_f(bench['sharpe'])}), "
            f"DSR {_f(ls['dsr'])} after {self.trials.n} (ticker, recipe) trial(s); next-day mean IC "
            f"{_f(ic['mean_ic'], 3)} ({ic['untested'] or 't ' + _f(ic['hac_t']) + ', p ' + _f(ic['hac_p'], 3)})."
            f" Mean IC against the return the books held: {_f(held, 3)}."
        )


def _f(v, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def report_from_rows(
    rows: Rows,
    benchmark: pd.Series,
    cost_bp: float,
    trials: Trials,
    choice: RowChoice = PRODUCTION,
    execution: str = signal_execution.DEFAULT_EXECUTION,
) -> SignalReport:
    """The report on rows already chosen (pure: the simulations and tests call it on frames). The rows
    carry their held returns under `execution` (signal_execution.attach, with the benchmark held by the
    same rule); same_close ones, the rows' own filled-back returns, are added here when absent."""
    frame = rows.rows
    if "held_return" not in frame:
        frame = signal_execution.with_held(frame, execution)  # a lagged rule without prices: ValueError
    portfolios = {k: simulate(frame, k, cost_bp) for k in PORTFOLIOS}
    evenings = list(portfolios["long_short"].daily["run_date"])
    bench = benchmark.reindex(pd.Index(evenings)).astype(float) if evenings else pd.Series(dtype=float)
    held = portfolios["long_short"].returns.notna().sum(axis=1)
    out = pd.DataFrame(
        {"run_date": evenings, "scored": held.to_numpy(), "out": len(rows.universe) - held.to_numpy()}
    )
    ic_daily = {h: signal_ic.ic_series(frame, h) for h in signal_ic.HORIZONS}
    # Beside the forecast-time scores: the next-day prediction against the return the books held.
    label = signal_execution.held_label(execution)
    ic_daily[label], held_ic, held_q = signal_ic.held_summaries(frame, label)
    report = SignalReport(
        choice=choice,
        cost_bp=cost_bp,
        trials=trials,
        ic=pd.concat([signal_ic.ic_summary(frame, ic_daily), held_ic], ignore_index=True),
        ic_daily=ic_daily,
        quintiles=pd.concat([signal_ic.quintile_summary(frame), held_q], ignore_index=True),
        portfolios=portfolios,
        benchmark=bench,
        universe=rows.universe,
        out_of_book=out,
        rows_used=len(frame),
        execution=execution,
    )
    report.residual = residual_summary(frame)
    report.notes = _notes(rows, frame, report)
    return report


def _notes(rows: Rows, frame: pd.DataFrame, report: SignalReport) -> list[str]:
    notes = [f"Rows: {report.choice.describe()}."]
    if rows.hidden_in_sample:
        notes.append(f"{rows.hidden_in_sample} in-sample rows left out (--include-in-sample shows them).")
    if rows.hidden_ungated:
        notes.append(f"{rows.hidden_ungated} ungated rows left out (--include-ungated shows them).")
    if rows.hidden_mode:
        notes.append(f"{rows.hidden_mode} rows of the other mode left out.")
    notes.append(f"Universe: {rows.membership.rule()}.")
    if rows.hidden_non_member:
        notes.append(
            f"{rows.hidden_non_member} rows of evenings their ticker was not a member left out of the books."
        )
    out = report.out_of_book
    if len(out) and (flat := int((out["scored"] == 0).sum())):
        notes.append(
            f"{flat} session(s) with no published row: the books are flat then (sold, and bought back at a cost)."
        )
    if len(out) and out["out"].sum():
        notes.append(
            f"{int((out['out'] > 0).sum())} of {len(out)} evenings had tickers out of the book "
            f"({int(out['out'].sum())} ticker-evenings: no filled chosen row; never filled in with hindsight)."
        )
    pending = frame[~np.isfinite(frame["held_return"].to_numpy(dtype=float))]
    if len(pending) and report.execution == signal_execution.SAME_CLOSE:
        notes.append(f"{pending['run_date'].nunique()} evening(s) not yet filled are not scored.")
    elif len(pending):
        notes.append(
            f"{len(pending)} row(s) on {pending['run_date'].nunique()} evening(s) without both an entry and "
            "an exit price (the exit session not closed yet, or no bar) are not in the books."
        )
    notes.append(
        f"DSR: N = {report.trials.n} trials, {report.trials.source}; trial SR variance 1/(T_eff - 1). PSR, DSR "
        "and P(SR > bench) count serial correlation (HAC, as fewer effective sessions T_eff); P(SR > bench) "
        "tests the Sharpe difference with the benchmark's own noise (Ledoit-Wolf); the benchmark has no DSR."
    )
    if 0 < len(report.evenings) < signal_stats.PERIODS_PER_YEAR:
        notes.append(
            f"Short record: annualised figures (ann. return, ann. vol, Sharpe, Sortino) extrapolate "
            f"{len(report.evenings)} evenings to a year of {signal_stats.PERIODS_PER_YEAR} sessions; a "
            "compounded annual return from less than a year can be far from what a year earns."
        )
    rule = report.execution
    notes.append(
        f"Execution {signal_execution.tag(rule)}: {signal_execution.RULES[rule]}; costs {report.cost_bp:g} bp "
        "per unit of turnover, no other slippage; the benchmark holds every ticker equally by the same rule, "
        f"without costs. The IC row '{signal_execution.held_label(rule)}' ranks the next-day prediction against that held "
        "return; the horizon rows score the forecast from the evening's close, as the board does."
    )
    return notes


def signal_report(
    engine: Engine,
    choice: RowChoice = PRODUCTION,
    cost_bp: float | None = None,
    trials: Trials | None = None,
    execution: str | None = None,
) -> SignalReport:
    """The signal-performance report on the stored rows and prices, the books traded by `execution`
    (default LDTM_SIGNAL_EXECUTION: next_close)."""
    cost_bp = checked_cost(cost_bp)
    rule = signal_execution.checked_execution(execution)
    rows = load_rows(engine, choice)
    frame, bench = signal_execution.attach(engine, rows, rule)
    trials = trials or signal_stats.recipes_tried(engine, rows.universe or None)
    report = report_from_rows(replace(rows, rows=frame), bench, cost_bp, trials, choice, rule)
    if report.evenings:
        # A replayed evening the gate's folds had tested is not out of sample for the gate's choice.
        days = [pd.Timestamp(d).date() for d in report.evenings]
        seen = evenings_seen_by_folds(engine, rows.universe, min(days), max(days))
        report.notes.insert(1, f"Folds: {seen.note(tickers=len(rows.universe))}.")
    return report


def explain(
    engine: Engine,
    evening: dt.date,
    choice: RowChoice = PRODUCTION,
    cost_bp: float | None = None,
    execution: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """One evening's books: per ticker of the universe its published row (or why it is out), weights in
    both portfolios, predicted and realised next-day return, the return held under the execution rule
    (with its entry and exit sessions) and the contribution; and the evening's totals."""
    cost_bp = checked_cost(cost_bp)
    rule = signal_execution.checked_execution(execution)
    # The report's own rows (a 14-day window had another universe, so another benchmark, and
    # no book before a gap, so another turnover): the evening's figures are the full report's.
    rows = load_rows(engine, choice)
    when = pd.Timestamp(evening)
    if not (rows.rows["run_date"] == when).any() and not (rows.dropped["run_date"] == when).any():
        raise InputError(f"signals --explain: no published row on {evening}")
    frame, report_bench = signal_execution.attach(engine, rows, rule)
    day = frame[frame["run_date"] == when]
    books = {k: simulate(frame, k, cost_bp) for k in PORTFOLIOS}
    table = pd.DataFrame({"ticker": rows.universe})
    cols = ["ticker", "direction_pred", "model_version", "pred_next_day", "real_next_day", "next_day_date"]
    cols += ["held_return", "held_entry", "held_exit"]
    table = table.merge(day[cols], on="ticker", how="left")
    for c in ("next_day_date", "held_entry", "held_exit"):
        table[c] = [d.date() if isinstance(d, pd.Timestamp) and not pd.isna(d) else None for d in table[c]]
    dropped = rows.dropped[rows.dropped["run_date"] == when].set_index("ticker")["reason"]
    pending = (
        "not filled yet" if rule == signal_execution.SAME_CLOSE else "not held: no entry or exit price yet"
    )
    table["status"] = np.where(
        table["direction_pred"].notna(),
        np.where(np.isfinite(table["held_return"].astype(float)), "in", pending),
        [f"out: {dropped.get(t, 'no row that evening')}" for t in table["ticker"]],
    )
    totals: dict = {"evening": evening, "universe": len(rows.universe), "execution": rule}
    for k, p in books.items():
        w = p.weights.loc[evening] if evening in p.weights.index else pd.Series(dtype=float)
        table[f"w_{k}"] = table["ticker"].map(w).fillna(0.0)
        table[f"contrib_{k}"] = table[f"w_{k}"] * table["held_return"].astype(float).fillna(0.0)
        d = p.daily.set_index("run_date")
        if evening in d.index:
            for c in ("gross", "turnover", "cost", "net"):
                totals[f"{k}_{c}"] = float(d.loc[evening, c])
    totals["benchmark"] = float(report_bench.get(evening, math.nan))  # the report's benchmark that evening
    return table, totals


def execution_comparison(
    engine: Engine, choice: RowChoice = PRODUCTION, cost_bp: float | None = None
) -> pd.DataFrame:
    """Per execution rule: the evenings, the long/short book's net Sharpe and total return and the mean IC
    against the held return, on the same rows: what trading after publication costs (the demo prints it)."""
    out, trials = [], None
    for rule in signal_execution.EXECUTIONS:
        report = signal_report(engine, choice, cost_bp, trials, rule)
        trials = report.trials
        if not report.evenings:
            continue
        ls = report.summary().set_index(["portfolio", "basis"]).loc[(LABELS["long_short"], "net")]
        held = report.ic.set_index("horizon").loc[signal_execution.held_label(rule)]
        out.append(
            {
                "execution": signal_execution.tag(rule),
                "evenings": len(report.evenings),
                "sharpe_net": float(ls["sharpe"]),
                "total_return_net": float(ls["total_return"]),
                "mean_ic_held": float(held["mean_ic"]),
            }
        )
    return pd.DataFrame(
        out, columns=["execution", "evenings", "sharpe_net", "total_return_net", "mean_ic_held"]
    )
