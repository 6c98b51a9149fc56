"""A bad model must not take the evening down (issue 10, item 6): per-model failure isolation in
`predict`, and config values with a fixed vocabulary refused before a model is ever trained."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import LDTM, get_profile
from ldtm_core.learning.registry import register_candidate
from ldtm_core.schema import model_registry, run_log, snapshots

RUN_DATE = dt.date(2024, 6, 28)


def _register(engine, settings, ticker: str, cfg, model) -> int:
    path = settings.checkpoint_dir / f"{ticker}_{cfg.signature}.pt"
    sha = save_checkpoint(path, model, cfg, ticker, dt.date(2024, 1, 2), 0.1)
    return register_candidate(
        engine,
        ticker=ticker,
        cfg=cfg,
        profile="demo",
        trained_on_date=dt.date(2024, 1, 2),
        checkpoint_path=str(path),
        checkpoint_sha256=sha,
        val_loss=0.1,
    )


def _one_head_model(engine, settings, ticker: str) -> int:
    """What `ldtm train --set horizons=1` registered before the vocabulary was checked."""
    cfg = get_profile("demo")
    object.__setattr__(cfg, "horizons", ("1",))  # bypasses the validation, as the old code did
    torch.manual_seed(3)
    return _register(engine, settings, ticker, cfg, LDTM(cfg).eval())


def _diverged_model(engine, settings, ticker: str) -> int:
    """Same architecture as the healthy demo models, but its weights are NaN (a diverged run)."""
    cfg = get_profile("demo")
    model = LDTM(cfg).eval()
    with torch.no_grad():
        model.heads[0].net[3].bias.fill_(float("nan"))
    return _register(engine, settings, ticker, cfg, model)


def _finished_run(engine) -> dict:
    with engine.connect() as conn:
        row = conn.execute(select(run_log).where(run_log.c.kind == "predict")).mappings().one()
    return dict(row)


@pytest.mark.parametrize("broken", [_one_head_model, _diverged_model], ids=["one_head", "nan_weights"])
def test_a_model_that_cannot_run_is_skipped_and_the_others_are_written(engine, db_url, tmp_path, broken):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "NVDA", "TSLA"])
    make_model(engine, settings, "AAPL", seed=1)
    make_model(engine, settings, "NVDA", seed=2)
    bad_id = broken(engine, settings, "TSLA")

    res = predict(engine, settings, RUN_DATE)

    assert res.tickers_predicted == ["AAPL", "NVDA"]
    assert res.rows_written == 2
    assert set(res.skipped) == {"TSLA"} and res.failed == res.skipped
    assert f"model {bad_id} (TSLA)" in res.skipped["TSLA"] or "checkpoint" in res.skipped["TSLA"]
    with engine.connect() as conn:
        written = sorted(conn.execute(select(snapshots.c.ticker)).scalars())
    assert written == ["AAPL", "NVDA"]
    run = _finished_run(engine)
    assert run["status"] == "partial" and run["n_rows"] == 2
    assert json.loads(run["summary_json"])["skipped"] == res.skipped


def test_nan_model_reason_names_the_model_and_the_problem(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "TSLA"])
    make_model(engine, settings, "AAPL", seed=1)
    bad_id = _diverged_model(engine, settings, "TSLA")
    res = predict(engine, settings, RUN_DATE)
    assert res.skipped == {"TSLA": f"model {bad_id} (TSLA) cannot run: ValueError: non-finite prediction"}


def test_cli_predict_reports_the_failed_model_as_partial_and_exits_1(ldtm_env, engine, tmp_path):
    settings = make_settings(tmp_path, ldtm_env["url"])
    object.__setattr__(settings, "home", ldtm_env["home"])
    ingest(engine, ["AAPL", "TSLA"])
    make_model(engine, settings, "AAPL", seed=1)
    _one_head_model(engine, settings, "TSLA")
    result = CliRunner().invoke(app, ["predict", "--run-date", str(RUN_DATE)])
    assert result.exit_code == 1, result.output  # the AAPL row stands, the run is partial
    assert "1 rows written" in result.output and "skipped TSLA" in result.output
    assert "partial: 1 ticker(s) not served because their model failed (TSLA)" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("horizons=1", "unknown horizon(s) '1'"),
        ("horizons=next_day", "horizons must be next_day,next_monday,one_month"),
        ("features=close,foo", "unknown feature(s) 'foo'; registered:"),
    ],
)
def test_train_refuses_fixed_vocabulary_overrides_before_touching_anything(
    ldtm_env, engine, override, fragment
):
    ingest(engine, ["AAPL"])
    result = CliRunner().invoke(
        app, ["train", "--tickers", "AAPL", "--profile", "demo", "--set", override, "--set", "max_epochs=1"]
    )
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(model_registry)).scalar_one() == 0


def test_an_interrupted_predict_leaves_a_run_log_message_that_says_so(engine, db_url, tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt, whose text is empty) must not leave 'failed' with an empty message."""
    from ldtm_core.accountability.ledger import snapshots as snapshots_module

    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshots_module, "write_rows_anchored", interrupted)
    with pytest.raises(KeyboardInterrupt):
        predict(engine, settings, run_date=RUN_DATE)
    run = _finished_run(engine)
    assert run["status"] == "failed"
    assert "interrupted" in (run["message"] or "") and "KeyboardInterrupt" in run["message"]


def test_a_partial_predict_says_which_tickers_were_skipped_and_why(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "QQQ"])
    make_model(engine, settings, "AAPL")
    res = predict(engine, settings, run_date=RUN_DATE, tickers=["AAPL", "QQQ"])
    run = _finished_run(engine)
    assert run["status"] == "partial" and res.skipped and not res.failed  # no model: not a model failure
    assert run["message"] == f"skipped 1 of 2 tickers: QQQ: {res.skipped['QQQ']}"
