"""Stored fold outcomes reused instead of refitted: same key reused, a revised bar refits its fold and
the folds warm-started after it, a completed quarter refits only its new cold fold, another config
never reuses, a reuse equals a refit bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, update

from ldtm_core.learning import backtest as bt
from ldtm_core.learning import fold_cache, training_loop
from ldtm_core.learning.model import get_profile
from ldtm_core.schema import backtest_folds, prices

CFG = get_profile("demo", max_epochs=2, patience=1)
FOLDS, TEST_SESSIONS = 3, 10


@pytest.fixture
def fits(monkeypatch):
    """Count real fits (through the module, as the backtest calls it)."""
    calls = []
    real = training_loop.fit

    def counting(train, val, cfg, **kw):
        calls.append(train.dates.max())
        return real(train, val, cfg, **kw)

    monkeypatch.setattr(training_loop, "fit", counting)
    return calls


@pytest.fixture
def world(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-06-01", end="2024-06-28")
    make_model(engine, s, "AAPL", cfg=CFG)
    return s


def _run(engine, s, cfg=CFG, **kw):
    return bt.run_backtest(engine, s, "AAPL", cfg, folds=FOLDS, test_sessions=TEST_SESSIONS, **kw)


def _figures(res) -> list[dict]:
    """Everything a fold reports except how it was obtained (wall time, reused or not)."""
    unobtained = [
        dataclasses.replace(f, fit=dataclasses.replace(f.fit, fit_s=0.0, reused=False)) for f in res.folds
    ]
    return [dataclasses.asdict(f) for f in unobtained]


def test_nothing_changed_refits_nothing_and_reuse_equals_refit(engine, world, fits):
    first = _run(engine, world)
    assert len(fits) == FOLDS and (first.reused_folds, first.refit_folds) == (0, FOLDS)
    fits.clear()
    again = _run(engine, world)
    assert fits == [] and (again.reused_folds, again.refit_folds) == (FOLDS, 0)
    # Bit for bit: a refit with the same seed gives exactly what was stored and reused.
    forced = _run(engine, world, reuse=False)
    assert len(fits) == FOLDS and forced.reused_folds == 0
    assert _figures(again) == _figures(first) == _figures(forced)
    with engine.connect() as conn:
        rows = conn.execute(
            select(backtest_folds.c.backtest_id, backtest_folds.c.reused, backtest_folds.c.fold_key)
        ).all()
    assert sorted(r.reused for r in rows if r.backtest_id == again.backtest_id) == [True] * FOLDS
    assert {r.fold_key for r in rows} == {f.fit.fold_key for f in first.folds}
    # The per-row predictions a paired gate reads: one per test row, on the fold's test dates.
    dates, pred = fold_cache.stored_predictions(engine, first.folds[1].fit.fold_key)
    assert pred.shape == (TEST_SESSIONS, 3) and np.isfinite(pred).all()
    assert dates[0] == np.datetime64(first.folds[1].window.test_start) and dates[-1] == np.datetime64(
        first.folds[1].window.test_end
    )


def test_a_revised_bar_in_fold_2_refits_fold_2_and_the_folds_warm_started_after_it(engine, world, fits):
    first = _run(engine, world, warm_start=True)
    f2 = first.folds[1]
    revised = (
        f2.window.test_start + (f2.window.test_end - f2.window.test_start) / 2
    )  # inside fold 2's test rows
    with engine.begin() as conn:
        day = conn.execute(
            select(prices.c.date).where(prices.c.date >= revised).order_by(prices.c.date)
        ).first()
        conn.execute(
            update(prices)
            .where(prices.c.ticker == "AAPL", prices.c.date == day.date)
            .values(
                open=prices.c.open * 1.03,
                high=prices.c.high * 1.03,
                low=prices.c.low * 1.03,
                close=prices.c.close * 1.03,
                adj_close=prices.c.adj_close * 1.03,
            )
        )
    assert f2.window.test_start < day.date < f2.window.test_end
    fits.clear()
    second = _run(engine, world, warm_start=True)
    assert [f.fit.reused for f in second.folds] == [True, False, False]
    assert len(fits) == 2  # fold 2 (its rows changed) and fold 3 (trained on them, started from fold 2)
    assert second.folds[0].fit.fold_key == first.folds[0].fit.fold_key
    assert [
        f.fit.fold_key != g.fit.fold_key for f, g in zip(first.folds[1:], second.folds[1:], strict=True)
    ] == [
        True,
        True,
    ]


def test_a_completed_quarter_refits_only_its_new_fold_with_cold_folds_and_every_fold_when_chained(
    engine, world, fits
):
    """Why folds start cold by default: when a quarter completes, the folds shift by one quarter; cold
    folds keep their keys (only the new quarter's fold refits), a warm chain's fold 1 moves and every
    later key names its parent, so the whole chain refits."""
    chained = dataclasses.replace(CFG, seed=CFG.seed + 1)  # its own keys: no cold fold of `cold` to find
    cold = _run(engine, world)  # the default
    warm = _run(engine, world, chained, warm_start=True)
    assert [f.fit.warm_start for f in cold.folds] == [False] * FOLDS
    assert [f.fit.warm_start for f in warm.folds] == [False, True, True]
    ingest(engine, ["AAPL"], start="2022-06-01", end="2024-07-03")  # Q2 2024 completes
    fits.clear()
    cold_next = _run(engine, world)
    assert [f.window.test_start.month for f in cold_next.folds] == [10, 1, 4]  # Q4 2023, Q1 and Q2 2024
    assert [f.fit.reused for f in cold_next.folds] == [True, True, False] and len(fits) == 1
    assert [f.fit.fold_key for f in cold_next.folds[:2]] == [f.fit.fold_key for f in cold.folds[1:]]
    fits.clear()
    warm_next = _run(engine, world, chained, warm_start=True)
    assert warm_next.reused_folds == 0 and len(fits) == FOLDS


def test_a_different_config_never_reuses_another_configs_folds(engine, world, fits):
    _run(engine, world)
    for other in (
        dataclasses.replace(CFG, hidden_size=CFG.hidden_size + 8),
        dataclasses.replace(CFG, seed=CFG.seed + 1),
    ):
        fits.clear()
        res = _run(engine, world, other)
        assert res.reused_folds == 0 and len(fits) == FOLDS
        assert np.isfinite(res.direction_accuracy)


def test_cli_says_reused_and_no_reuse_refits_everything(engine, world, ldtm_env, fits, monkeypatch):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    def backtest(*extra):
        out = CliRunner().invoke(
            app, ["backtest", "--ticker", "AAPL", "--folds", "2", "--test-sessions", "5", *extra]
        )
        assert out.exit_code == 0, out.output
        return " ".join(out.output.split())

    assert "folds reused 0, refit 2" in backtest() and len(fits) == 2
    text = backtest()
    assert "folds reused 2, refit 0" in text and len(fits) == 2
    assert "covered live: 2024-" in text  # the sessions after the newest completed quarter's fold
    assert "folds reused 0, refit 2" in backtest("--no-reuse") and len(fits) == 4
    monkeypatch.setenv("LDTM_BACKTEST_REUSE", "0")
    assert "folds reused 0, refit 2" in backtest() and len(fits) == 6
