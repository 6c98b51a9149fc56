"""predict and backtest through the CLI: run dates and steps in the wrong order (issue 10)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from rich.table import Table
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.calendar import calendar_bounds
from ldtm_core.schema import backtest_folds, run_log, snapshots

runner = CliRunner()


def _count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


@pytest.fixture
def one_model(ldtm_env, engine, tmp_path):
    settings = make_settings(tmp_path, ldtm_env["url"])
    ingest(engine, ["AAPL"], start="2023-01-03", end="2024-06-28")
    make_model(engine, settings, "AAPL")
    return engine


def test_predict_beyond_the_calendar_says_so(one_model):
    last = calendar_bounds()[1]
    r = runner.invoke(app, ["predict", "--run-date", "2030-01-02"])
    assert r.exit_code == 2, r.output
    assert f"2030-01-02 is beyond the XNYS calendar's range, which ends at {last}" in " ".join(
        r.output.split()
    )
    assert "not an XNYS trading session" not in r.output
    assert _count(one_model, snapshots) == 0 and _count(one_model, run_log) == 0


def test_predict_before_the_data_quotes_the_earliest_close(one_model):
    r = runner.invoke(app, ["predict", "--run-date", "2022-06-01"])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert (
        "run date 2022-06-01 is outside the price data: it is before the earliest close (2023-01-03)" in msg
    )
    assert "latest close" not in msg
    assert _count(one_model, snapshots) == 0 and _count(one_model, run_log) == 0


def test_predict_range_starting_before_the_data_quotes_the_earliest_close(one_model, ldtm_env, tmp_path):
    """Issue 20 item 18: `predict --start 2015-12-01 …` said 'latest close …' when the problem was that
    the range starts before the first close."""
    r = runner.invoke(app, ["predict", "--start", "2015-12-01", "--end", "2023-01-10"])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert "--start 2015-12-01 is before the earliest close of the tickers with a model (2023-01-03)" in msg
    assert "latest close" not in msg
    assert _count(one_model, snapshots) == 0 and _count(one_model, run_log) == 0
    # The core says the same for one evening (the Dagster path has no CLI pre-check).
    from ldtm_core.accountability.ledger.snapshots import predict
    from ldtm_core.errors import InputError

    with pytest.raises(
        InputError, match=r"2015-12-01 is outside the price data: it is before the earliest close"
    ):
        predict(one_model, make_settings(tmp_path, ldtm_env["url"]), dt.date(2015, 12, 1))


def test_backtest_before_training_says_train_first(ldtm_env, engine):
    ingest(engine, ["AAPL"], start="2022-01-03", end="2024-06-28")
    r = runner.invoke(app, ["backtest", "--ticker", "AAPL", "--profile", "demo", "--folds", "2"])
    assert r.exit_code == 2, r.output
    assert "AAPL has no candidate model to backtest: train first" in r.output
    assert _count(engine, backtest_folds) == 0


@pytest.mark.parametrize("band", ["nan", "inf", "-1"])
def test_predict_refuses_a_neutral_band_that_is_no_percent(one_model, band):
    """A NaN band judged +1.16 % as 'neutral' and stored it in the hash-chained table (issue 20 item 15)."""
    r = runner.invoke(app, ["predict", "--run-date", "2024-06-03", "--neutral-band", band])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert f"--neutral-band={float(band)!r}" in msg and "a percent (0.25 for 0.25 %)" in msg, msg
    assert _count(one_model, snapshots) == 0 and _count(one_model, run_log) == 0


def test_an_all_in_sample_board_says_what_it_hides_and_how_to_show_it(
    ldtm_env, engine, tmp_path, monkeypatch
):
    """The first-use loop: replay evenings the model trained on, fill back, read the board."""
    import datetime as dt

    from ldtm_core.accountability.board.leaderboard import leaderboard

    settings = make_settings(tmp_path, ldtm_env["url"])
    ingest(engine, ["TSLA"], start="2023-01-03", end="2024-06-28")
    from ldtm_core.learning.registry import promote

    # Its data reaches every target; promoted, so its rows are gated (candidates' are hidden apart).
    promote(engine, make_model(engine, settings, "TSLA", trained_on=dt.date(2024, 6, 28)), "test", settings)
    r = runner.invoke(app, ["predict", "--start", "2024-05-01", "--end", "2024-06-14"])
    assert r.exit_code == 0, r.output
    written = _count(engine, snapshots)
    out = " ".join(r.output.split())
    assert f"{written} of {written} rows in-sample" in out and "ldtm leaderboard --include-in-sample" in out
    one = runner.invoke(app, ["predict", "--run-date", "2024-06-17"])
    assert one.exit_code == 0 and "1 of 1 rows in-sample" in " ".join(one.output.split()), one.output
    assert runner.invoke(app, ["fillback"]).exit_code == 0
    hidden = int(leaderboard(engine, include_in_sample=True)["n"].sum())
    assert hidden > 0
    board = " ".join(runner.invoke(app, ["leaderboard"]).output.split())
    assert f"{hidden} in-sample rows hidden; --include-in-sample shows them" in board
    shown = " ".join(runner.invoke(app, ["leaderboard", "--include-in-sample"]).output.split())
    assert re.search(rf"TSLA \W+ {hidden} \W", shown) and "in-sample rows hidden" not in shown
    # The default table fits 120 columns with every head whole (23 columns were cut to "tra…", "mod…").
    from ldtm_core.cli.common import console

    monkeypatch.setattr(console, "width", 120)
    compact = runner.invoke(app, ["leaderboard", "--include-in-sample"]).output
    table = [line for line in compact.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 120 and "…" not in "".join(table), compact
    assert "best baseline" in compact and "┃ beats " in compact and "--wide" in compact
    wide = runner.invoke(app, ["leaderboard", "--include-in-sample", "--wide"]).output
    from ldtm_core.cli.accountability import board_cells, compact_cells

    top = lambda out: next(line for line in out.splitlines() if line.startswith("┏"))  # noqa: E731
    assert top(wide).count("┳") + 1 == len(board_cells()) and "--wide:" not in wide
    assert top(compact).count("┳") + 1 == len(compact_cells()) == 8
    rows = json.loads(runner.invoke(app, ["leaderboard", "--include-in-sample", "--json"]).output)
    assert [(r["ticker"], r["n"]) for r in rows] == [("TSLA", hidden)] and "beats_persistence" in rows[0]
    by_model = " ".join(
        runner.invoke(app, ["leaderboard", "--by-model", "--include-in-sample"]).output.split()
    )
    assert "with in-sample replays" in by_model and "nothing to score" not in by_model
    assert re.search(rf"TSLA \S+ \W+ {hidden} \W", by_model), by_model


def _printed_board_header(monkeypatch, columns, wide=True) -> list[str]:
    """The header of the table `ldtm leaderboard` prints, for a one-row board with these columns."""
    from ldtm_core.cli import accountability as cli

    row = {c: 1 for c in columns} | {"ticker": "AAA", "gated": True, "stale": False}
    row |= {"window_start": dt.date(2024, 5, 1), "window_end": dt.date(2024, 5, 31), "last_filled": None}
    row |= {"beats_always_up": False, "beats_persistence": False, "direction_accuracy": 0.5}
    row |= {"always_up_accuracy": 0.5}
    printed = []
    monkeypatch.setattr(cli.console, "print", lambda *a, **k: printed.extend(a))
    cli.print_leaderboard(pd.DataFrame([row]), wide=wide)
    (table,) = [p for p in printed if isinstance(p, Table)]
    return [str(c.header) for c in table.columns]


def test_the_board_table_columns_are_the_display_columns(monkeypatch):
    """`ldtm leaderboard` prints DISPLAY_COLUMNS (issue 39): one cell per display column or joined group
    of them, in DISPLAY_COLUMNS' order; the window is in the title, "gated" beside the ticker. Each board
    baseline (scoring.baselines) adds its accuracy, then model/baseline-only counts, p (q) and the label."""
    from ldtm_core.accountability.board import leaderboard as lb
    from ldtm_core.cli.accountability import board_cells
    from ldtm_core.horizons import DIRECTION, ERROR_ONLY

    cells = board_cells()
    assert _printed_board_header(monkeypatch, lb.DISPLAY_COLUMNS) == [c.label for c in cells]
    assert [c.label for c in cells] == [
        "ticker",
        "n",
        "dir acc",
        "95% Wilson",
        "always-up",
        "persistence",
        "trailing-21 majority",
        "model/up only",
        "p (q) vs up",
        "beats up",
        "model/persist. only",
        "p (q) vs persist.",
        "beats persist.",
        "model/trend only",
        "p (q) vs trend",
        "beats trend",
        # The whole record's evidence: the labels come from it (accountability.board.record).
        "record n: acc",
        "e vs coin/up/persist./trend",
        "shown (e)",
        f"|err| {DIRECTION.abbr}",
        *(f"|err| {h.abbr} (n, dates)" for h in ERROR_ONLY),
        f"no-change |err| {'/'.join(h.abbr for h in (DIRECTION, *ERROR_ONLY))}",
    ]
    shown = [c for cell in cells for c in cell.columns]
    assert sorted(shown + ["window_start", "window_end"]) == sorted(lb.DISPLAY_COLUMNS)


def test_the_board_table_follows_a_change_of_the_display_columns(monkeypatch):
    from ldtm_core.accountability.board import leaderboard as lb

    every = list(lb.DISPLAY_COLUMNS)
    monkeypatch.setattr(lb, "display_columns", lambda: ["ticker", "beats_always_up", "n", "window_start"])
    assert _printed_board_header(monkeypatch, every) == ["ticker", "beats up", "n"]
