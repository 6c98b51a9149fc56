"""Submitted forecasts from Dagster (issue 60): a file dropped in LDTM_SUBMISSIONS_DIR/<model>/ becomes one
`submission_job` run whose `submissions` materialization records it (once per file version), a bad file
fails that run naming the row with nothing written, and `external_judgements` judges every submitted model."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from dagster import build_sensor_context, materialize
from ldtm_dagster_helpers import tiny_resources
from sqlalchemy import func, select

from ldtm_core.accountability.submissions import external
from ldtm_core.data.calendar import session_close
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.horizons import HORIZONS
from ldtm_core.migrate import upgrade
from ldtm_core.schema import snapshots
from ldtm_dagster.assets import external_judgements, submissions
from ldtm_dagster.sensors import submission_sensor

DAY = dt.date(2023, 6, 1)


@pytest.fixture
def world(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    engine = upgrade(url)
    ingest_frame(engine, generate(["AAPL", "NVDA"], "2023-01-03", "2023-06-30", seed=7), "synthetic")
    external.register(engine, "desk", ["AAPL", "NVDA"])
    monkeypatch.setenv("LDTM_SUBMISSIONS_DIR", str(tmp_path / "drop"))
    (tmp_path / "drop" / "desk").mkdir(parents=True)
    return engine, tiny_resources(tmp_path / "home", url, universe="AAPL,NVDA"), tmp_path / "drop" / "desk"


def _write(path, tickers, r=0.01):
    rows = [
        {"ticker": t, "run_date": DAY.isoformat(), "horizon": h.name, "expected_return": r}
        for t in tickers
        for h in HORIZONS
    ]
    pd.DataFrame(rows).to_csv(path, index=False)


def _rows(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(snapshots)).scalar_one()


def test_a_dropped_file_is_submitted_once_and_a_bad_one_fails_alone(world, dagster_instance, monkeypatch):
    engine, resources, drop = world
    assert (
        "no submission file"
        in submission_sensor(build_sensor_context(instance=dagster_instance)).skip_message
    )
    _write(drop / "2023-06-01.csv", ["AAPL", "NVDA"])
    _write(drop / "bad.csv", ["AAPL", "MSFT"])
    requests = submission_sensor(build_sensor_context(instance=dagster_instance))
    assert sorted(r.run_config["ops"]["submissions"]["config"]["path"] for r in requests) == sorted(
        str(p) for p in (drop / "2023-06-01.csv", drop / "bad.csv")
    )
    # The arrival time is the run's: pin the clock to the evening, before the cut-off.
    monkeypatch.setattr(
        "ldtm_core.accountability.submissions.submit.now", lambda: session_close(DAY) + dt.timedelta(hours=1)
    )
    by_path = {r.run_config["ops"]["submissions"]["config"]["path"]: r for r in requests}
    good = materialize(
        [submissions], run_config=by_path[str(drop / "2023-06-01.csv")].run_config, instance=dagster_instance,
        resources=resources,
    )  # fmt: skip
    assert good.success and _rows(engine) == 2
    meta = good.asset_materializations_for_node("submissions")[0].metadata
    assert meta["rows_written"].value == 2 and meta["mode"].value == "live"
    bad = materialize(
        [submissions], run_config=by_path[str(drop / "bad.csv")].run_config, instance=dagster_instance,
        resources=resources, raise_on_error=False,
    )  # fmt: skip
    assert not bad.success and _rows(engine) == 2
    failure = next(e for e in bad.all_events if e.is_step_failure)
    assert "'MSFT' is not a ticker this model is registered for" in str(failure.event_specific_data.error)
    # The same file version has the same run key: a second tick asks for nothing new.
    again = submission_sensor(build_sensor_context(instance=dagster_instance))
    assert {r.run_key for r in again} == {r.run_key for r in requests}
    judged = materialize([external_judgements], instance=dagster_instance, resources=resources)
    meta = judged.asset_materializations_for_node("external_judgements")[0].metadata
    assert meta["models"].value == 1 and meta["desk"].value["tickers"] == 2
