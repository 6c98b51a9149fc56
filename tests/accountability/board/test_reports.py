"""ldtm_core.accountability.board.reports: the dashboard's read functions against hand computations on a small seeded DB."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import add_backtest, ingest, make_model, make_settings
from sqlalchemy import update

from ldtm_core.accountability.board import reports
from ldtm_core.accountability.gate.gate import run_gate
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.replay import predict_range
from ldtm_core.db import lift_append_only
from ldtm_core.errors import InputError
from ldtm_core.learning import registry
from ldtm_core.schema import snapshots
from ldtm_core.scoring.skill import discordant_counts

TICKERS = ["AAPL", "NVDA"]
START, END = dt.date(2024, 5, 1), dt.date(2024, 6, 14)


@pytest.fixture
def world(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, TICKERS)
    ids = {t: make_model(engine, settings, t, seed=i) for i, t in enumerate(TICKERS)}
    predict_range(engine, settings, START, END)
    fillback(engine)
    return settings, ids


def test_predictions_keep_the_published_row_and_rolling_accuracy_is_the_30_day_window(engine, world):
    settings, ids = world
    first = reports.ticker_predictions(engine, "AAPL")
    # A promotion followed by a rerun of the same evenings adds rows; the published (first) ones stay.
    newer = make_model(engine, settings, "AAPL", seed=9, trained_on=dt.date(2024, 2, 1))
    registry.promote(engine, newer, "test", settings)
    predict_range(engine, settings, END - dt.timedelta(days=3), END, tickers=["AAPL"])
    again = reports.ticker_predictions(engine, "AAPL")
    assert len(again) == len(first) and again["run_date"].is_unique
    assert again["next_day_pred"].tolist() == first["next_day_pred"].tolist()

    filled = first[first["next_day_actual"].notna()]
    rolling = reports.rolling_accuracy(first).set_index("run_date")
    for day in filled["run_date"]:
        inside = filled[(filled["run_date"] > day - dt.timedelta(days=30)) & (filled["run_date"] <= day)]
        assert rolling.loc[day, "n"] == len(inside)
        assert rolling.loc[day, "model"] == pytest.approx(inside["correct"].astype(bool).mean())
        assert rolling.loc[day, "always_up"] == pytest.approx(
            (inside["next_day_actual"] > inside["run_date_close"]).mean()
        )
    skill = reports.ticker_skill(first)
    assert skill == discordant_counts(
        filled["correct"].astype(bool).to_numpy(),
        (filled["next_day_actual"] > filled["run_date_close"]).to_numpy(),
    )
    with pytest.raises(InputError):
        reports.ticker_predictions(engine, "../etc")


def test_cohorts_runs_fills_and_audit(engine, world):
    # Both models are candidates: their evenings are ungated, out of the default (production) cohorts.
    assert reports.evening_cohorts(engine).empty
    cohorts = reports.evening_cohorts(engine, include_ungated=True)
    assert (cohorts[["bullish", "neutral", "bearish"]].sum(axis=1) == len(TICKERS)).all()
    assert cohorts["run_date"].min() == START
    evening = reports.latest_evening(engine)
    assert evening["run_date"] == END and evening["tickers"] == 2 and sum(evening["cohort"].values()) == 0
    assert evening["ungated"] == sorted(TICKERS)
    runs = reports.recent_runs(engine, limit=5)
    assert len(runs) == 5 and runs["run_date"].is_monotonic_decreasing and set(runs["kind"]) == {"predict"}
    ready, waiting = reports.pending_fillback(engine)
    assert ready.empty  # everything fillable was filled
    # The newest evenings still wait for their one-month close (prices end 2024-06-28).
    assert (waiting.set_index("ticker")["one_month"] > 0).all()
    assert (waiting.set_index("ticker")["next_day"] == 0).all()
    status = reports.audit_status(engine).set_index("ticker")
    assert set(status["chain"]) == {"intact"} and status["rows"].sum() == len(cohorts) * 2
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:  # an edited prediction is what the audit exists to notice
        conn.execute(
            update(snapshots)
            .where(snapshots.c.ticker == "NVDA", snapshots.c.run_date == START)
            .values(next_day_pred=1.0)
        )
    status = reports.audit_status(engine).set_index("ticker")
    assert status.loc["NVDA", "chain"] == "broken" and status.loc["AAPL", "chain"] == "intact"


def test_model_timeline_and_last_gate_report(engine, world):
    settings, ids = world
    assert reports.last_gate_report(engine, "AAPL") is None
    # 66 of 100 rows, 28 vs 12 against always-up: a first deployment beats both beyond noise (issue 27)
    add_backtest(engine, ids["AAPL"], [(50, 0.66, 0.5, 1.5, 0, 14, 6), (50, 0.66, 0.5, 1.5, 0, 14, 6)])
    run_gate(engine, settings, "AAPL")
    gate = reports.last_gate_report(engine, "AAPL")
    assert gate.model_id == ids["AAPL"] and gate.decision.startswith("gate passed")
    assert gate.figures["skill"].model_only == 28 and gate.figures["skill"].up_only == 12
    table = {row["criterion"]: row for row in gate.criteria_table()}
    assert table["direction_accuracy"]["value"] == "66.00%" and table["direction_accuracy"]["ok"]
    models, events = reports.model_timeline(engine, "AAPL")
    assert models["status"].tolist() == ["active"] and models["version"].iloc[0].startswith("v1.")
    assert events["to"].tolist()[-1] == "active" and events["at"].is_monotonic_increasing
