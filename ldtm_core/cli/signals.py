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
        None, "--cost-bp", help="Cost per unit of turnover in basis points (default LDTM_SIGNAL_COST_BP, 5)"
    ),
    explain_date: str | None = typer.Option(
        None, "--explain", help="List one evening's positions and returns (YYYY-MM-DD) instead"
    ),
    top: int = typer.Option(5, "--top", help="Tickers shown at each end of the contributions"),
) -> None:
    """Rank IC per horizon, quintile returns and paper portfolios (long bullish / short bearish,
    long-only bullish) net of costs against the equal-weight universe, from the published rows."""
    from ldtm_core.accountability.signals.rows import RowChoice
    from ldtm_core.accountability.signals.signals import explain, signal_report

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
        _print_explain(*explain(engine, parse_date(explain_date, "--explain"), choice, cost_bp))
        return
    report = signal_report(engine, choice, cost_bp)
    console.print(report.headline(), highlight=False, soft_wrap=True)
    if not report.evenings:
        for note in report.notes[:-2]:  # what the flags left out, the reason the range may be empty
            console.print(note, highlight=False, soft_wrap=True)
        return
    ic = Table(
        "horizon",
        "evenings",
        "target dates",
        "mean IC",
        "IC IR",
        "HAC t",
        "p",
        "lag",
        "names",
        title="rank IC (Spearman, predicted vs realised return)",
    )
    for r in report.ic.itertuples(index=False):
        ic.add_row(r.horizon, str(r.evenings), str(r.target_dates), fmt_num(r.mean_ic, 3), fmt_num(r.ic_ir, 3),
                   fmt_num(r.hac_t), fmt_num(r.hac_p, 3), str(r.hac_lag), fmt_num(r.names_per_evening, 1))  # fmt: skip
    console.print(ic)
    q = Table(
        "horizon",
        "q1 (lowest)",
        "q2",
        "q3",
        "q4",
        "q5 (highest)",
        "q5 - q1",
        "HAC t",
        title="mean realised return by quintile of predicted return",
    )
    for r in report.quintiles.itertuples(index=False):
        q.add_row(
            r.horizon,
            *(_pct(getattr(r, f"q{k}"), 3) for k in range(1, 6)),
            _pct(r.spread, 3),
            fmt_num(r.spread_hac_t),
        )
    console.print(q)
    books = Table(
        "portfolio", "basis", "evenings", "total", "ann. return", "ann. vol", "Sharpe", "Sortino", "max DD",
        "DD peak → trough (back)", "PSR vs 0", "PSR vs bench", "DSR", "turnover", "net exp.",
        title=f"paper portfolios: long/short = long bullish, short bearish; long-only = bullish; benchmark = "
        f"equal-weight universe (cost {report.cost_bp:g} bp per unit turnover)",
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
            fmt_num(r.psr_vs_0, 3), fmt_num(r.psr_vs_benchmark, 3), fmt_num(r.dsr, 3), fmt_num(r.turnover, 2),
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
    out = Table(
        "ticker", "status", "direction", "model", "pred 1d", "realised 1d", "target",
        "w long/short", "contrib", "w long-only", "contrib", title=f"evening {totals['evening']}",
    )  # fmt: skip
    for r in table.itertuples(index=False):
        out.add_row(
            r.ticker, r.status, r.direction_pred if isinstance(r.direction_pred, str) else "—",
            r.model_version if isinstance(r.model_version, str) else "—", _pct(r.pred_next_day), _pct(r.real_next_day),
            str(r.next_day_date) if r.next_day_date else "—",
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
