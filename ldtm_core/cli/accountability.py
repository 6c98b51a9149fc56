"""Commands for the accountability loop: predict, fillback, leaderboard, audit."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from ldtm_core.cli.common import (
    app,
    console,
    err_console,
    fmt_num,
    fmt_pct,
    handle_errors,
    open_db,
    parse_date,
    settings,
)
from ldtm_core.errors import InputError

audit_app = typer.Typer(help="Check the snapshot hash chain.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")


def _tickers(values: list[str] | None) -> list[str] | None:
    from ldtm_core.data.universe import parse_ticker_list

    # Not given: None (every ticker); given but empty (`--tickers ""`): refused by parse_ticker_list.
    return parse_ticker_list(values) if values else None


@app.command("predict")
@handle_errors
def predict_cmd(
    run_date: str = typer.Option(
        None, "--run-date", help="Session to predict from (default: latest with prices)"
    ),
    tickers: Annotated[
        list[str] | None,
        typer.Option(
            "--tickers",
            "-t",
            help="Tickers (repeat or comma list); default: those of LDTM_UNIVERSE with a model",
        ),
    ] = None,
    mode: str = typer.Option(None, "--mode", help="live or replay (default: replay when later prices exist)"),
    neutral_band: float = typer.Option(
        None, "--neutral-band", help="Neutral band in % (default LDTM_NEUTRAL_BAND_PCT or 0.25)"
    ),
    start: str = typer.Option(
        None, "--start", help="Replay every session from this date (with --end; one process, one model load)"
    ),
    end: str = typer.Option(None, "--end", help="Last session of the --start range (inclusive)"),
) -> None:
    """Predict every horizon per ticker and record hash-chained snapshot rows (rerun = no-op)."""
    from ldtm_core.accountability.ledger.snapshots import predict
    from ldtm_core.config import SETTINGS
    from ldtm_core.errors import InputError

    cfg = settings()
    if neutral_band is not None:
        SETTINGS["LDTM_NEUTRAL_BAND_PCT"].check(neutral_band, "neutral band --neutral-band")
    chosen = _tickers(tickers)
    if start is not None or end is not None:
        if start is None or end is None or run_date is not None:
            raise InputError("--start and --end go together, and not with --run-date")
        from ldtm_core.accountability.ledger.replay import predict_range
        from ldtm_core.data.calendar import sessions_between
        from ldtm_core.progress import progress

        first, last = parse_date(start, "--start"), parse_date(end, "--end")
        engine = open_db(cfg)
        if chosen is None:
            chosen = _universe_with_models(engine, cfg)
        # A bar (or periodic lines when piped) instead of a report per evening; the range is checked
        # by predict_range before anything is written.
        with progress(
            "replay", max(1, len(sessions_between(first, last)) if first <= last else 1)
        ) as advance:
            results = predict_range(
                engine,
                cfg,
                first,
                last,
                chosen,
                mode,
                neutral_band,
                on_session=lambda r: advance(f"{r.run_date}: {r.rows_written} rows"),
            )
        written = sum(r.rows_written for r in results)
        cohort = {d: sum(r.cohort.get(d, 0) for r in results) for d in ("bullish", "neutral", "bearish")}
        console.print(
            f"replayed {len(results)} sessions {results[0].run_date}..{results[-1].run_date}: {written} rows written, "
            f"{sum(r.rows_existing for r in results)} already there; cohort "
            f"{cohort['bullish']} bullish / {cohort['neutral']} neutral / {cohort['bearish']} bearish"
        )
        skipped: dict[str, tuple[str, int]] = {}
        for r in results:  # each ticker's first reason, and on how many evenings it was skipped
            for ticker, why in r.skipped.items():
                skipped[ticker] = (skipped.get(ticker, (why, 0))[0], skipped.get(ticker, (why, 0))[1] + 1)
        for ticker, (why, n) in sorted(skipped.items()):
            err_console.print(
                f"[yellow]skipped {ticker} on {n} evening(s):[/] {why}", highlight=False, soft_wrap=True
            )
        outside: dict[str, list] = {}  # evenings on which a ticker was not a member (universe_membership)
        for r in results:
            for ticker in r.not_members:
                outside.setdefault(ticker, []).append(r.run_date)
        for ticker, days in sorted(outside.items()):
            console.print(
                f"not predicted on {len(days)} evening(s) ({days[0]}..{days[-1]}): {ticker} was not a member "
                "of the universe then (universe_membership)",
                highlight=False,
                soft_wrap=True,
            )
        _print_in_sample(
            sum(len(r.in_sample) for r in results), written + sum(r.rows_existing for r in results)
        )
        if all(r.skipped and not r.tickers_predicted for r in results):
            sys.exit(1)
        _exit_if_models_failed({t: why for r in results for t, why in r.failed.items()})
        return
    when = parse_date(run_date, "--run-date")
    engine = open_db(cfg)
    if chosen is None:
        chosen = _universe_with_models(engine, cfg)
    if when is not None:
        _check_run_date(engine, when, chosen)
    res = predict(engine, cfg, when, chosen, mode, neutral_band)
    _print_predict(res)
    if res.skipped and not res.tickers_predicted:
        sys.exit(1)
    _exit_if_models_failed(res.failed)


def _exit_if_models_failed(failed: dict[str, str]) -> None:
    """Exit 1, saying the run is partial, when a model failed to serve its ticker (the other rows stand):
    a failed model is a fault to fix, unlike a ticker the data left out."""
    if failed:
        err_console.print(
            f"[bold red]partial:[/] {len(failed)} ticker(s) not served because their model failed "
            f"({', '.join(sorted(failed))}); the other rows were written",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)


def _universe_with_models(engine, cfg) -> list[str]:
    """Without --tickers: the tickers of LDTM_UNIVERSE that have a model (not every model's ticker); the
    models outside the universe are named once."""
    from ldtm_core.data.universe import load_universe
    from ldtm_core.learning.registry import serving_models

    universe = load_universe(cfg.universe)
    models = serving_models(engine)
    outside = sorted(set(models) - set(universe))
    if outside:
        console.print(
            f"[yellow]not predicted, outside LDTM_UNIVERSE={cfg.universe}:[/] {' '.join(outside)} "
            "(name them with --tickers to predict them)",
            highlight=False,
            soft_wrap=True,
        )
    return [t for t in universe if t in models] or universe


def _print_predict(res) -> None:
    console.print(
        f"run {res.run_id} {res.run_date} ({res.mode}): {res.rows_written} rows written, "
        f"{res.rows_existing} already there; cohort "
        f"{res.cohort['bullish']} bullish / {res.cohort['neutral']} neutral / {res.cohort['bearish']} bearish"
    )
    console.print("phases: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in res.phases.items()))
    if res.used_candidate:
        # Their rows are ungated: outside the cohort above and the default leaderboard.
        console.print(
            f"[yellow]candidate models used (no active model; rows ungated, not in the cohort):[/] "
            f"{' '.join(res.used_candidate)}"
        )
    for t, why in sorted(res.skipped.items()):
        err_console.print(f"[yellow]skipped {t}:[/] {why}", highlight=False, soft_wrap=True)
    for _t, why in sorted(res.not_members.items()):
        console.print(f"not predicted, not a member: {why}", highlight=False, soft_wrap=True)
    _print_in_sample(len(res.in_sample), res.rows_written + res.rows_existing)


def _print_in_sample(in_sample: int, rows: int) -> None:
    """Say where the user looks that these rows (written now or already there) are off the default board."""
    if in_sample:
        console.print(
            f"[yellow]{in_sample} of {rows} rows in-sample[/] (the model's training data reaches their next-day "
            "target): the leaderboard leaves them out; `ldtm leaderboard --include-in-sample` shows them",
            highlight=False,
            soft_wrap=True,
        )


def _check_run_date(engine, when, tickers: list[str] | None) -> None:
    """Name the real problem with a --run-date: past the calendar's range, or before any stored close."""
    from ldtm_core.data.calendar import is_session, require_in_range
    from ldtm_core.data.prices import earliest_price_date

    require_in_range(when, "--run-date")
    if not is_session(when):
        return  # predict says it is not a session
    earliest = earliest_price_date(engine, tickers)
    if earliest is not None and when < earliest:
        raise InputError(
            f"run date {when} is outside the price data: it is before the earliest close ({earliest})"
        )


@app.command("fillback")
@handle_errors
def fillback_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="List pending fills and re-fills; write nothing"),
    refill_all: bool = typer.Option(
        False,
        "--refill",
        help="Re-fill every filled actual that today's prices contradict for a recorded reason (a revised "
        "bar, a corporate action recorded after the fill), also beyond the nightly's overlap window",
    ),
) -> None:
    """Fill actual closes into snapshot rows whose target dates now have prices.

    First, as the nightly does, actuals made stale by a revised bar inside the overlap window or by a late
    corporate action are re-filled (each logged in fill_revisions with its old value and reason)."""
    from ldtm_core.accountability.ledger.fillback import fillback
    from ldtm_core.accountability.ledger.refill import refill

    cfg = settings()
    engine = open_db(cfg)
    # Each row's direction is judged with the band stored with its prediction, not today's setting.
    redone = refill(engine, dry_run=dry_run, automatic=not refill_all)
    if redone.refilled:
        table = Table(
            "ticker",
            "run_date",
            "horizon",
            "old actual",
            "new actual",
            "reason",
            title=f"{len(redone.refilled)} {'pending ' if dry_run else ''}re-fills",
        )
        for st in redone.refilled:
            table.add_row(
                st.ticker,
                str(st.run_date),
                st.horizon,
                f"{st.old_actual:.4f}",
                f"{st.new_actual:.4f}",
                st.reason,
            )
        console.print(table)
    if redone.left:
        err_console.print(
            f"{len(redone.left)} stale actual(s) outside the overlap window (e.g. "
            f"{redone.left[0].describe()}): re-fill them with `ldtm fillback --refill`",
            highlight=False,
            soft_wrap=True,
        )
    res = fillback(engine, dry_run=dry_run)
    if dry_run:
        table = Table(
            "ticker",
            "run_date",
            "horizon",
            "target date",
            "actual",
            title=f"{len(res.pending)} pending fills",
        )
        for p in res.pending:
            table.add_row(p.ticker, str(p.run_date), p.horizon, str(p.target_date), f"{p.actual:.2f}")
        console.print(table)
        _print_unfillable(res.unfillable)
        console.print("dry run: nothing written")
        return
    console.print(
        "filled "
        + ", ".join(f"{h} {n}" for h, n in res.filled.items())
        + f"; re-filled {len(redone.refilled)}"
    )
    _print_unfillable(res.unfillable)


def _print_unfillable(marks) -> None:
    """The pending horizons that can never be filled (unfillable_actuals): one line per ticker."""
    by_ticker: dict[str, list] = {}
    for m in marks:
        by_ticker.setdefault(m.ticker, []).append(m)
    for ticker, items in sorted(by_ticker.items()):
        console.print(
            f"[yellow]{len(items)} actual(s) of {ticker} can never be filled (kept, unscored):[/] {items[0].reason}",
            highlight=False,
            soft_wrap=True,
        )


def _print_by_recipe(engine, mode: str, label: str, flags: dict) -> None:
    from rich.table import Table

    from ldtm_core.accountability.board.recipes import by_recipe

    table = Table(
        "recipe", "tickers", "models", "n", "dir acc", "always-up (same rows)", title=f"by recipe ({label})"
    )
    for r in by_recipe(engine, mode, **flags).itertuples():
        table.add_row(
            r.recipe,
            str(r.tickers),
            str(r.models),
            str(r.n),
            fmt_pct(r.direction_accuracy),
            fmt_pct(r.always_up_accuracy),
        )
    console.print(table)
    console.print(
        "[dim]Each recipe's models on their own rows of the window, summed: a description, not a paired test "
        "(`ldtm universe verdict` pairs two recipes on the same folds).[/]",
        highlight=False,
        soft_wrap=True,
    )


@app.command("leaderboard")
@handle_errors
def leaderboard_cmd(
    mode: str = typer.Option("all", "--mode", help="all, live or replay"),
    include_in_sample: bool = typer.Option(
        False,
        "--include-in-sample",
        help="Also score in-sample replays (evenings the model's training data already reached)",
    ),
    include_ungated: bool = typer.Option(
        False,
        "--include-ungated",
        help="Also score rows predicted by a candidate that never passed the gate (tickers with no "
        "active model); marked 'ungated'",
    ),
    by_model: bool = typer.Option(
        False, "--by-model", help="Per-model report: every model version on its own rows"
    ),
    shadow: bool = typer.Option(
        False, "--shadow", help="Also show each champion beside its shadow model on the same evenings"
    ),
    by_recipe: bool = typer.Option(
        False, "--by-recipe", help="Also show each recipe's rows summed: recipes side by side (a description)"
    ),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="Every column (each baseline's test, the errors); default: a table that fits 120 columns",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the board's rows as JSON (every column), nothing else"
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Also the method behind each answer, its power, and the rules of the labels"
    ),
    submitted: bool = typer.Option(
        False, "--submitted", help="Also each submitted model's live record (unpublished until promoted)"
    ),
) -> None:
    """30-day accuracy per ticker with Wilson interval, errors, and the board's baselines.

    Each evening counts once per ticker: its first recorded prediction (what was published). The
    next-day figures cover the 30 days ending at the newest filled evening; the next-Monday and one-month
    errors the 30 days ending at their own newest filled target date, with their counts in brackets."""
    from ldtm_core.accountability.board.leaderboard import (
        IN_SAMPLE_CAVEAT,
        in_sample_note,
        leaderboard,
        leaderboard_by_model,
        non_member_note,
        ungated_note,
        universe,
    )
    from ldtm_core.accountability.board.no_champion import without_champion
    from ldtm_core.accountability.board.record import evidence_rule, horizon_answers, record_answer
    from ldtm_core.scoring.board_stats import label_rule

    engine = open_db()
    label = ", with ".join(
        [mode]
        + (["in-sample replays"] if include_in_sample else [])
        + (["ungated candidates"] if include_ungated else [])
    )
    flags = {"include_in_sample": include_in_sample, "include_ungated": include_ungated}
    board = leaderboard_by_model(engine, mode, **flags) if by_model else leaderboard(engine, mode, **flags)
    if as_json:
        typer.echo(board.to_json(orient="records", date_format="iso", default_handler=str))
        return
    answers = []
    if not by_model:
        # One short answer per question first: the record's (the test), then the window's SPA (a description).
        caveat = IN_SAMPLE_CAVEAT if include_in_sample else ""
        tickers = sorted(board["ticker"])
        answers = [
            record_answer(board, caveat),
            *horizon_answers(engine, tickers, mode, **flags),
            universe(engine, board, mode, **flags),
        ]
        for answer in answers:
            console.print(answer.short(), highlight=False, soft_wrap=True)
        if caveat:
            console.print(f"[yellow]{caveat.strip()}[/]", highlight=False, soft_wrap=True)
    print_leaderboard(board, f"{label}, by model" if by_model else label, wide=wide, explain=explain)
    if by_recipe:
        _print_by_recipe(engine, mode, label, flags)
    if explain:  # each answer's method and power, then what the labels control
        for answer in answers:
            console.print(answer.describe(), highlight=False, soft_wrap=True)
        console.print(f"[dim]{evidence_rule(board)}[/]", highlight=False, soft_wrap=True)
        console.print(f"[dim]{label_rule(board)}[/]", highlight=False, soft_wrap=True)
    else:
        console.print("[dim]--explain: the method behind each answer, its power and the labels' rules[/]")
    missing = without_champion(engine)
    if missing:
        console.print(
            f"[yellow]No production model ({len(missing)}): predicted by an ungated candidate, out of every "
            "figure above[/]",
            highlight=False,
            soft_wrap=True,
        )
        for m in missing:
            console.print(f"  {m.ticker}: {m.reason}", highlight=False, soft_wrap=True)
    for note in (
        None if include_in_sample or by_model else in_sample_note(engine, mode),
        ungated_note(engine, include_ungated),
        non_member_note(engine, mode),
    ):
        if note:
            console.print(f"[yellow]{note}[/]", highlight=False, soft_wrap=True)
    _submitted_models(engine, submitted)
    from ldtm_core.learning.registry import shadow_models

    if shadow:
        from ldtm_core.accountability.shadow.shadow import side_by_side
        from ldtm_core.cli.shadow import print_side_by_side

        print_side_by_side(side_by_side(engine, settings()))
    elif in_shadow := sorted(shadow_models(engine)):
        console.print(
            f"[yellow]in shadow (never on this board): {', '.join(in_shadow)}; --shadow shows each "
            "champion beside its shadow[/]",
            highlight=False,
            soft_wrap=True,
        )


def _submitted_models(engine, show: bool) -> None:
    """Submitted models: their judgements (--submitted), or a note naming those the board leaves out."""
    from ldtm_core.accountability.submissions.external import names
    from ldtm_core.accountability.submissions.judge import judge
    from ldtm_core.cli.external import print_judgement

    registered = names(engine)
    if show:
        for name in registered:
            print_judgement(judge(engine, name))
    elif registered:
        console.print(
            f"[yellow]submitted models (on this board only where promoted): {', '.join(registered)}; "
            "--submitted shows each one's live record[/]",
            highlight=False,
            soft_wrap=True,
        )


@dataclass(frozen=True)
class BoardCell:
    """One column of the CLI's board: the display columns it shows (several joined into one cell where
    they read as one figure) and how a row reads there."""

    label: str
    columns: tuple[str, ...]
    render: Callable[[Any, Any], str]  # (row, the board's columns) -> the cell


# Display columns the table shows outside its cells: the window in the title.
TITLE_COLUMNS = ("window_start", "window_end")


def _ticker_cell(r, columns) -> str:
    name = f"{r.ticker} {r.model_version}" if "model_version" in columns else r.ticker
    if "gated" in columns and not r.gated:
        name += " [magenta](ungated)[/]"
    if "model_version" not in columns and r.stale:
        name += f" [yellow](stale, last filled {r.last_filled or 'never'})[/]"
    return name


def board_cells() -> list[BoardCell]:
    """The CLI board's columns, in the order of leaderboard.display_columns() (the one list the dashboard
    shows too): a cell comes where the first of its display columns is; a display column with no cell
    here (and not in the title) is an error, so a new display column is never silently left out."""
    from ldtm_core.accountability.board import leaderboard, record
    from ldtm_core.horizons import DIRECTION, ERROR_ONLY
    from ldtm_core.scoring.baselines import board_baselines

    cells = [
        BoardCell("ticker", ("ticker", "gated"), _ticker_cell),
        BoardCell("n", ("n",), lambda r, _: str(r.n)),
        BoardCell("dir acc", ("direction_accuracy",), lambda r, _: fmt_pct(r.direction_accuracy)),
        BoardCell(
            "95% Wilson",
            ("wilson_low", "wilson_high"),
            lambda r, _: f"{fmt_pct(r.wilson_low)}–{fmt_pct(r.wilson_high)}",
        ),
        # Each board baseline (scoring.baselines): its accuracy (with its own n where that differs),
        # then its exact test: model-only / baseline-only counts, p (BH q), the label.
        *(
            BoardCell(
                b.label,
                (b.column("accuracy"), b.column("n")),
                lambda r, _, b=b: _with_n(
                    fmt_pct(getattr(r, b.column("accuracy"))), getattr(r, b.column("n")), r.n
                ),
            )
            for b in board_baselines()
        ),
        *(
            cell
            for b in board_baselines()
            for cell in (
                BoardCell(
                    f"model/{b.short} only",
                    (b.column("model_only"), b.column("base_only")),
                    lambda r, _, b=b: (
                        f"{_count(getattr(r, b.column('model_only'), None))}/"
                        f"{_count(getattr(r, b.column('base_only'), None))}"
                    ),
                ),
                BoardCell(
                    f"p (q) vs {b.short}",
                    (b.column("p"), b.column("q")),
                    lambda r, _, b=b: _p_q(getattr(r, b.column("p")), getattr(r, b.column("q"), None)),
                ),
                BoardCell(
                    f"beats {b.short}",
                    (b.column("beats"),),
                    lambda r, _, b=b: "yes" if getattr(r, b.column("beats")) else "[red]no[/]",
                ),
            )
        ),
        BoardCell(
            f"|err| {DIRECTION.abbr}",
            (f"{DIRECTION.name}_mape",),
            lambda r, _: fmt_num(getattr(r, f"{DIRECTION.name}_mape")),
        ),
        *(
            BoardCell(
                f"|err| {h.abbr} (n, dates)",
                (f"{h.name}_mape", f"{h.name}_n", f"{h.name}_dates"),
                lambda r, _, h=h: _with_dates(
                    fmt_num(getattr(r, f"{h.name}_mape")),
                    getattr(r, f"{h.name}_n"),
                    getattr(r, f"{h.name}_dates", None),
                ),
            )
            for h in ERROR_ONLY
        ),
        BoardCell(
            f"no-change |err| {'/'.join(h.abbr for h in (DIRECTION, *ERROR_ONLY))}",
            tuple(leaderboard.naive_column(h.name) for h in (DIRECTION, *ERROR_ONLY)),
            lambda r, _: "/".join(
                fmt_num(getattr(r, leaderboard.naive_column(h.name), None)) for h in (DIRECTION, *ERROR_ONLY)
            ),
        ),
        # The whole record (accountability.board.record): the labels above and "shown" come from it.
        BoardCell(
            "record n: acc",
            ("record_n", "record_accuracy"),
            lambda r, _: (
                f"{_count(getattr(r, 'record_n', None))}: {fmt_pct(getattr(r, 'record_accuracy', None))}"
            ),
        ),
        BoardCell(
            f"e vs {'/'.join(['coin', *(b.short for b in board_baselines())])}",
            tuple(record.e_column(c) for c in record.comparisons()),
            lambda r, _: "/".join(_e(getattr(r, record.e_column(c), None)) for c in record.comparisons()),
        ),
        BoardCell(
            "shown (e)",
            ("shown_skill", "e_skill"),
            lambda r, _: (
                ("yes" if getattr(r, "shown_skill", False) else "[red]no[/]")
                + f" ({_e(getattr(r, 'e_skill', None))})"
            ),
        ),
    ]
    home = {c: cell for cell in cells for c in cell.columns}
    ordered: list[BoardCell] = []
    for column in leaderboard.display_columns():
        if column in TITLE_COLUMNS:
            continue
        if column not in home:  # a programming error: the new display column needs its cell
            raise KeyError(f"display column {column!r} has no cell in the CLI's board (cli.accountability)")
        if home[column] not in ordered:
            ordered.append(home[column])
    return ordered


def compact_cells() -> list[BoardCell]:
    """The default board, within 120 columns: the ticker's accuracy and interval, the best baseline, the
    baselines it beats this window, the whole record and its label. `--wide` shows every cell."""
    from ldtm_core.scoring.baselines import board_baselines

    full = {cell.label: cell for cell in board_cells()}
    baselines = board_baselines()

    def best(r, _) -> str:
        b = max(baselines, key=lambda b: _number(getattr(r, b.column("accuracy"), None)))
        return f"{b.short} {fmt_pct(getattr(r, b.column('accuracy'), None))}"

    def beaten(r, _) -> str:
        names = [b.short for b in baselines if getattr(r, b.column("beats"), False)]
        return ", ".join(names) if names else "[red]none[/]"

    return [
        *(full[label] for label in ("ticker", "n", "dir acc", "95% Wilson")),
        BoardCell("best baseline", tuple(b.column("accuracy") for b in baselines), best),
        BoardCell("beats", tuple(b.column("beats") for b in baselines), beaten),
        *(full[label] for label in ("record n: acc", "shown (e)")),
    ]


def _number(v) -> float:
    return float("-inf") if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def print_leaderboard(df, mode: str = "all", wide: bool = False, explain: bool = True) -> None:
    """The leaderboard as a table (also used by the Dagster demo): the compact columns (compact_cells), or
    with `wide` every one of leaderboard.display_columns() (board_cells); with `explain`, the verdict's
    sentence (the labels, their rule and power) after it."""
    from ldtm_core.accountability.board.leaderboard import UNGATED_LEGEND, verdict

    title = f"accuracy_30d ({mode})"
    if not df.empty:
        title += f", {df['window_start'].min()} .. {df['window_end'].max()}"
    cells = board_cells() if wide else compact_cells()
    table = Table(*(cell.label for cell in cells), title=title)
    for column, cell in zip(table.columns, cells, strict=True):
        column.no_wrap = cell.label == "ticker"  # a ticker (and its model version) on one line; figures wrap
    columns = df.columns
    for r in df.itertuples(index=False):
        table.add_row(*(cell.render(r, columns) for cell in cells))
    console.print(table)
    if not wide:
        console.print("[dim]--wide: every column (each baseline's test, the errors); --json: the rows[/]")
    if "gated" in df.columns and not df["gated"].all():
        console.print(UNGATED_LEGEND, highlight=False, soft_wrap=True)
    if explain:
        console.print(verdict(df))


def _e(e) -> str:
    """An e-value in three figures ('-': no record)."""
    return "-" if e is None or (isinstance(e, float) and math.isnan(e)) else f"{e:.3g}"


def _p_q(p, q) -> str:
    """Each ticker's own p and, in brackets, its BH q over the board (what the label reads)."""
    from ldtm_core.scoring.skill import format_p_value

    return f"{format_p_value(p)} ({format_p_value(q)})"


def _count(v) -> str:
    """A count, or a dash where the row has none."""
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v))


def _with_dates(value: str, n: int, dates: int | None) -> str:
    """A horizon's error with its rows and the distinct target dates they stand on."""
    return f"{value} ({n})" if dates is None else f"{value} ({n}, {dates})"


def _with_n(value: str, n: int, same_as: int | None = None) -> str:
    """A figure with the count it rests on, unless that is the row's n anyway."""
    return value if n == same_as else f"{value} ({n})"


@audit_app.command("verify")
@handle_errors
def audit_verify(
    tickers: Annotated[list[str] | None, typer.Option("--tickers", "-t", help="Only these tickers")] = None,
    incremental: Annotated[
        bool,
        typer.Option(
            "--incremental",
            help="Only what is new since the last passing audit's chain heads (what the nightly runs); "
            "without it every row is recomputed",
        ),
    ] = False,
) -> None:
    """Recompute every ticker's hash chain, compare it with the recorded chain heads and re-derive every
    filled actual from prices; exit 1 and list each problem if any. A passing audit of all tickers
    records the chain heads it verified (run_log, kind 'audit'): `--incremental` starts from there."""
    from ldtm_core.accountability.ledger.audit import verify

    mode = "incremental" if incremental else "full"
    report = verify(open_db(), _tickers(tickers), mode=mode, record=True)
    scope = (
        f"incremental since the audit of {report.since:%Y-%m-%d %H:%M} UTC"
        if report.mode == "incremental"
        else "full"
    )
    if report.tickers_without_rows:
        err_console.print(
            f"[bold red]audit: no snapshot rows for {', '.join(report.tickers_without_rows)}[/] "
            "(nothing was ever predicted for them, or their rows are gone)"
        )
    if report.ok and not report.tickers_without_rows:
        if report.rows_checked == 0 and report.mode == "full":
            console.print("audit: no snapshot rows yet, nothing to verify")
            return
        console.print(
            f"audit ok ({scope}): {report.rows_checked} rows, {report.tickers_checked} tickers, chain intact; "
            f"{report.anchors_checked} anchored chain heads match; {report.actuals_checked} filled actuals "
            "match prices or are stale for a recorded reason"
        )
        _print_refills(report)
        return
    _print_refills(report)
    if report.problems:
        table = Table(
            "ticker", "run_date", "model_version", "problem", title=f"{len(report.problems)} problems"
        )
        for p in report.problems:
            table.add_row(p.ticker, str(p.run_date or "-"), p.model_version, p.what)
        console.print(table)
        err_console.print(
            f"[bold red]audit FAILED[/] ({scope}): {len(report.problems)} problems in "
            f"{', '.join(report.bad_tickers)} ({report.rows_checked} rows checked)"
        )
    sys.exit(1)


def _print_refills(report) -> None:
    """Stale actuals waiting for a re-fill, and the re-fills done (old values stay visible)."""
    for st in report.stale:
        console.print(f"stale actual (re-filled by the next fillback): {st.describe()}", highlight=False)
    if report.revisions:
        table = Table(
            "ticker",
            "run_date",
            "horizon",
            "old",
            "new",
            "reason",
            "at",
            title=f"{len(report.revisions)} re-fills",
        )
        for r in report.revisions:
            table.add_row(
                r["ticker"],
                str(r["run_date"]),
                r["horizon"],
                f"{r['old_actual']:.4f}",
                f"{r['new_actual']:.4f}",
                r["reason"],
                str(r["revised_at"])[:19],
            )
        console.print(table)
