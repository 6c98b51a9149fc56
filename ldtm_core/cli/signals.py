"""`ldtm signals`: what trading the published signals would have earned (SPEC §15)."""

from __future__ import annotations

import math

import typer
from rich.table import Table

from ldtm_core.cli.common import app, console, fmt_num, fmt_pct, handle_errors, open_db, parse_date

SHORT = {
    "long bullish / short bearish": "long/short",
    "long-only bullish": "long-only",
    "equal-weight universe": "benchmark",
}


def _pct(v, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v * 100:.{digits}f}%"


def _p_or_why(p: float, periods: float) -> str:
    """A p-value, or "too short" when the record spans too few independent target periods to test."""
    # Imported here: scipy.stats, which hac needs, is ~1 s of every CLI start.
    from ldtm_core.scoring.hac import MIN_INDEPENDENT_PERIODS

    return "too short" if periods < MIN_INDEPENDENT_PERIODS else fmt_num(p, 3)


@app.command("signals")
@handle_errors
def signals_cmd(
    start: str | None = typer.Option(None, "--start", help="First evening (YYYY-MM-DD)"),
    end: str | None = typer.Option(None, "--end", help="Last evening (YYYY-MM-DD)"),
    mode: str = typer.Option("all", "--mode", help="Snapshots used: all, live or replay"),
    include_in_sample: bool = typer.Option(
        False, "--include-in-sample", help="Also trade in-sample replays (the model saw the answer)"
    ),
    include_ungated: bool = typer.Option(
        False,
        "--include-ungated",
        help="Also trade evenings predicted by a candidate that never passed the gate",
    ),
    shadow: bool = typer.Option(
        False,
        "--shadow",
        help="What-if: a shadow model's row in place of the published one where it predicted",
    ),
    cost_bp: float | None = typer.Option(
        None,
        "--cost-bp",
        help="Cost per unit of turnover in basis points, 0 to 10000 (default LDTM_SIGNAL_COST_BP, 5); a "
        "cost never takes more than the book's wealth: at worst an evening's net is -100 %, never below",
    ),
    execution: str | None = typer.Option(
        None,
        "--execution",
        help="When the books trade: next_close (enter at the close after the evening's, exit at the next "
        "close), next_open (open to open), same_close (the evening's own close: not tradable, an upper "
        "bound); default LDTM_SIGNAL_EXECUTION, next_close",
    ),
    explain_date: str | None = typer.Option(
        None, "--explain", help="List one evening's positions and returns (YYYY-MM-DD) instead"
    ),
    top: int = typer.Option(5, "--top", help="Tickers shown at each end of the contributions"),
) -> None:
    """Rank IC per horizon, quintile returns and paper portfolios (long bullish / short bearish,
    long-only bullish) net of costs against the equal-weight universe, from the published rows."""
    from ldtm_core.accountability.signals.execution import RULES, tag
    from ldtm_core.accountability.signals.rows import RowChoice
    from ldtm_core.accountability.signals.signals import explain, signal_report
    from ldtm_core.accountability.signals.stats import PERIODS_PER_YEAR

    choice = RowChoice(
        mode,
        include_in_sample,
        include_ungated,
        shadow,
        parse_date(start, "--start"),
        parse_date(end, "--end"),
    )
    engine = open_db()
    if explain_date is not None:
        _print_explain(*explain(engine, parse_date(explain_date, "--explain"), choice, cost_bp, execution))
        return
    report = signal_report(engine, choice, cost_bp, execution=execution)
    console.print(report.headline(), highlight=False, soft_wrap=True)
    if not report.evenings:
        for note in report.notes[:-2]:  # what the flags left out, the reason the range may be empty
            console.print(note, highlight=False, soft_wrap=True)
        return
    ic = Table(
        "horizon",
        "evenings",
        "target dates",
        "independent",
        "mean IC",
        "IC IR",
        "t",
        "p",
        "names",
        title="rank IC (Spearman, predicted vs realised return); t: overlap-aware (EWC HAC, Student t)",
    )
    for r in report.ic.itertuples(index=False):
        ic.add_row(r.horizon, str(r.evenings), str(r.target_dates), fmt_num(r.periods, 1), fmt_num(r.mean_ic, 3),
                   fmt_num(r.ic_ir, 3), fmt_num(r.hac_t), _p_or_why(r.hac_p, r.periods),
                   fmt_num(r.names_per_evening, 1))  # fmt: skip
    console.print(ic)
    for r in report.ic.itertuples(index=False):
        if r.untested:
            console.print(f"{r.horizon} IC: {r.untested}.", highlight=False, soft_wrap=True)
    q = Table(
        "horizon",
        "q1 (lowest)",
        "q2",
        "q3",
        "q4",
        "q5 (highest)",
        "q5 - q1",
        "t",
        "p",
        title="mean realised return by quintile of predicted return",
    )
    for r in report.quintiles.itertuples(index=False):
        q.add_row(
            r.horizon,
            *(_pct(getattr(r, f"q{k}"), 3) for k in range(1, 6)),
            _pct(r.spread, 3),
            fmt_num(r.spread_hac_t),
            _p_or_why(r.spread_hac_p, r.spread_periods),
        )
    console.print(q)
    res = Table(
        "horizon", "mean IC after market", "after market + sector", "t", "p", "churn",
        title="residual IC (betas on the equal-weight universe, then sector means; signals/residual.py) and "
        "churn (1 - rank correlation with the previous evening's predictions)",
    )  # fmt: skip
    for r in report.residual.itertuples(index=False):
        res.add_row(r.horizon, fmt_num(r.mean_ic_market, 3), fmt_num(r.mean_ic_sector, 3),
                    fmt_num(r.sector_hac_t), _p_or_why(r.sector_hac_p, r.sector_periods), fmt_num(r.mean_churn, 3))  # fmt: skip
    console.print(res)
    books = Table(
        "portfolio", "basis", "evenings", "total", "ann. return", "ann. vol", "Sharpe", "Sortino", "max DD",
        "DD peak → trough (back)", "PSR vs 0", "P(SR > bench)", "DSR", "turnover", "net exp.",
        title=f"paper portfolios executed {tag(report.execution)}: {RULES[report.execution]}; long/short = "
        f"long bullish, short bearish; long-only = bullish; benchmark = equal-weight universe held the same "
        f"way (cost {report.cost_bp:g} bp per unit turnover)"
        + (f"; annualised from {len(report.evenings)} evenings, under a year: see the note"
           if len(report.evenings) < PERIODS_PER_YEAR else ""),
    )  # fmt: skip
    for r in report.summary().itertuples(index=False):
        dd = (
            "—"
            if r.drawdown_trough is None
            else f"{r.drawdown_peak} → {r.drawdown_trough} ({r.drawdown_recovered or 'not yet'})"
        )
        books.add_row(
            SHORT.get(r.portfolio, r.portfolio), r.basis, str(r.evenings), _pct(r.total_return, 1), _pct(r.annual_return, 1),
            _pct(r.annual_vol, 1), fmt_num(r.sharpe), fmt_num(r.sortino), _pct(r.max_drawdown, 1), dd,
            fmt_num(r.psr_vs_0, 3), fmt_num(r.p_sharpe_above_benchmark, 3), fmt_num(r.dsr, 3), fmt_num(r.turnover, 2),
            fmt_num(r.net_exposure, 2),
        )  # fmt: skip
    console.print(books)
    contrib = report.portfolios["long_short"].contributions()
    shown = (
        contrib
        if len(contrib) <= 2 * top
        else contrib.iloc[list(range(top)) + list(range(len(contrib) - top, len(contrib)))]
    )
    table = Table(
        "ticker",
        "contribution",
        "evenings long",
        "evenings short",
        "hit rate",
        title="long/short: per-ticker contributions (sum of weight x return)",
    )
    for r in shown.itertuples(index=False):
        table.add_row(
            r.ticker, _pct(r.contribution), str(r.evenings_long), str(r.evenings_short), fmt_pct(r.hit_rate)
        )
    console.print(table)
    for note in report.notes:
        console.print(note, highlight=False, soft_wrap=True)


def _print_explain(table, totals: dict) -> None:
    from ldtm_core.accountability.signals.execution import tag

    out = Table(
        "ticker", "status", "direction", "model", "pred 1d", "realised 1d", "target", "held", "entry → exit",
        "w long/short", "contrib", "w long-only", "contrib",
        title=f"evening {totals['evening']}, executed {tag(totals['execution'])}",
    )  # fmt: skip
    for r in table.itertuples(index=False):
        out.add_row(
            r.ticker, r.status, r.direction_pred if isinstance(r.direction_pred, str) else "—",
            r.model_version if isinstance(r.model_version, str) else "—", _pct(r.pred_next_day), _pct(r.real_next_day),
            str(r.next_day_date) if r.next_day_date else "—", _pct(r.held_return),
            f"{r.held_entry} → {r.held_exit}" if r.held_entry and r.held_exit else "—",
            fmt_num(r.w_long_short, 4), _pct(r.contrib_long_short, 3), fmt_num(r.w_long_only, 4),
            _pct(r.contrib_long_only, 3),
        )  # fmt: skip
    console.print(out)
    for k in ("long_short", "long_only"):
        if f"{k}_gross" in totals:
            console.print(
                f"{k}: gross {_pct(totals[f'{k}_gross'], 3)}, turnover {totals[f'{k}_turnover']:.3f}, "
                f"cost {_pct(totals[f'{k}_cost'], 4)}, net {_pct(totals[f'{k}_net'], 3)}",
                highlight=False,
            )
    console.print(
        f"equal-weight universe ({totals['universe']} tickers): {_pct(totals['benchmark'], 3)}",
        highlight=False,
    )
