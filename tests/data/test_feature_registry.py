"""Features from one registry, per model (issue 39 item 2): a store written before a feature is registered
(its reference-recipe models, checkpoints and stored feature rows) keeps loading, predicting and
exporting after one is added, and a new model trains on the longer tuple and records it."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import onnx
import pytest
import torch
from accountability_helpers import ingest, make_settings
from numpy.lib.stride_tricks import sliding_window_view
from sqlalchemy import select

from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data import feature_store
from ldtm_core.data.feature_store import FEATURE_DEFINITION, build_features, prices_and_features
from ldtm_core.data.features import FEATURES, REFERENCE_FEATURES, Bars, Feature, compute_features, warmup_rows
from ldtm_core.data.prices import load_ticker_prices
from ldtm_core.learning.checkpoints import load_checkpoint
from ldtm_core.learning.export import FEATURES_KEY, export_onnx
from ldtm_core.learning.inference import batched_forward
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.price_windows import (
    RSI_SETTLE_ROWS,
    build_windows,
    load_price_arrays,
    normalised_window,
    start_for,
)
from ldtm_core.learning.training import train_ticker
from ldtm_core.schema import FEATURE_COLUMNS, model_registry, snapshots

RUN_DATE = dt.date(2024, 6, 28)
ATR = "atr_14_close"
ATR_PERIOD = 14


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _atr_over_close(b: Bars) -> np.ndarray:
    """ATR-14 (simple mean of the true range) over the close: a 12th feature for the tests."""
    prev = np.concatenate([np.full((b.close.shape[0], 1), np.nan), b.close[:, :-1]], axis=1)
    true_range = np.maximum(b.high - b.low, np.maximum(np.abs(b.high - prev), np.abs(b.low - prev)))
    out = np.full_like(b.close, np.nan)
    if b.close.shape[1] > ATR_PERIOD:
        out[:, ATR_PERIOD:] = sliding_window_view(true_range[:, 1:], ATR_PERIOD, axis=1).mean(axis=-1)
    return out / b.close


def _demo(**kw):
    return get_profile("demo", max_epochs=1, **kw)


@pytest.fixture
def store(db_url, tmp_path):
    """A store as the release before the feature writes it: prices, stored features and a trained
    reference-recipe candidate (its checkpoint and registry row carry no feature list of their own)."""
    from ldtm_core.db import get_engine

    engine = get_engine(db_url)
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "NVDA"])
    build_features(engine, ["AAPL", "NVDA"])
    out = train_ticker(engine, settings, "AAPL", _demo(), "demo")
    assert out.status == "trained", out.reason
    with engine.connect() as conn:
        stored_config = json.loads(
            conn.execute(
                select(model_registry.c.config_json).where(model_registry.c.id == out.model_id)
            ).scalar()
        )
    assert "features" not in stored_config and stored_config["input_size"] == len(REFERENCE_FEATURES)
    return engine, settings, out


@pytest.fixture
def with_atr(monkeypatch):
    monkeypatch.setitem(FEATURES, ATR, Feature(_atr_over_close, ATR_PERIOD))
    return (*REFERENCE_FEATURES, ATR)


def test_stored_models_keep_loading_predicting_and_exporting_after_a_feature_is_added(
    store, with_atr, tmp_path
):
    engine, settings, old = store

    # The stored feature rows stay current: the new feature has no column, nothing to migrate or rebuild.
    assert ATR not in FEATURE_COLUMNS and ATR not in FEATURE_DEFINITION
    sets = feature_store.stored_sets(engine, ["AAPL"])
    prices = load_ticker_prices(engine, "AAPL")
    assert (
        feature_store.stale_reason(sets["AAPL"], feature_store.current_fingerprint(engine, "AAPL", prices))
        is None
    )

    ckpt = load_checkpoint(old.checkpoint_path)
    assert ckpt.config.features == REFERENCE_FEATURES and ckpt.config.input_size == len(REFERENCE_FEATURES)

    res = predict(engine, settings, RUN_DATE)
    assert res.tickers_predicted == ["AAPL"], res.skipped
    assert "AAPL" not in res.features_recomputed  # the stored rows served it

    exported = export_onnx(ckpt, tmp_path / "old.onnx")
    assert exported.features == REFERENCE_FEATURES
    props = {p.key: p.value for p in onnx.load(str(exported.path)).metadata_props}
    assert props[FEATURES_KEY] == ",".join(REFERENCE_FEATURES)


def test_a_new_model_trains_on_the_added_feature_and_records_it(store, with_atr, tmp_path):
    engine, settings, old = store
    cfg = _demo(features=with_atr)
    assert cfg.input_size == len(REFERENCE_FEATURES) + 1

    new = train_ticker(engine, settings, "AAPL", cfg, "demo")
    assert new.status == "trained", new.reason
    assert new.features == f"stored, {ATR} computed from prices"
    ckpt = load_checkpoint(new.checkpoint_path)
    assert ckpt.config.features == with_atr and ckpt.model.lstm.input_size == len(with_atr)
    with engine.connect() as conn:
        rows = dict(conn.execute(select(model_registry.c.id, model_registry.c.config_json)).all())
    assert json.loads(rows[new.model_id])["features"] == list(with_atr)
    assert "features" not in json.loads(rows[old.model_id])  # the stored row is untouched
    assert load_checkpoint(old.checkpoint_path).config.features == REFERENCE_FEATURES

    # The store's columns plus the computed feature equal a recomputation of the whole tuple.
    prices, read = prices_and_features(engine, "AAPL", features=with_atr)
    assert read.source == "store" and tuple(read.frame.columns) == with_atr
    np.testing.assert_array_equal(read.frame.to_numpy(), compute_features(prices, names=with_atr).to_numpy())

    exported = export_onnx(ckpt, tmp_path / "new.onnx")
    props = {p.key: p.value for p in onnx.load(str(exported.path)).metadata_props}
    assert props[FEATURES_KEY] == ",".join(with_atr)

    # Inference's windows for a 12-feature model: the batched pass and the store's read agree, and the
    # model runs on them.
    need = cfg.window + warmup_rows(with_atr) + RSI_SETTLE_ROWS
    arrays = load_price_arrays(engine, ["AAPL", "NVDA"], start_for(RUN_DATE, need), RUN_DATE)
    wanted, features = {"AAPL": cfg.window, "NVDA": cfg.window}, {"AAPL": with_atr}
    built, skipped = build_windows(arrays, wanted, RUN_DATE, need, features)
    assert not skipped and built["AAPL"][0].shape == (cfg.window, len(with_atr))
    assert built["NVDA"][0].shape == (cfg.window, len(REFERENCE_FEATURES))
    stored, why = feature_store.stored_windows(engine, arrays, RUN_DATE, wanted, features)
    assert not why and stored["AAPL"].shape == (cfg.window, len(with_atr))
    x, lo, hi = normalised_window(stored["AAPL"], with_atr.index("close"))
    np.testing.assert_allclose(x, built["AAPL"][0], atol=1e-6)
    assert (lo, hi) == pytest.approx(built["AAPL"][1:3])
    y = batched_forward([ckpt.model], torch.from_numpy(x[None]))
    assert y.shape == (1, 3) and torch.isfinite(y).all()

    # The nightly serves it: the newest candidate predicts on its own twelve inputs.
    res = predict(engine, settings, RUN_DATE)
    assert res.tickers_predicted == ["AAPL"], res.skipped
    with engine.connect() as conn:
        served = conn.execute(select(snapshots.c.model_version).where(snapshots.c.ticker == "AAPL")).scalar()
    assert served == f"cand-{new.model_id}"


def test_features_list_shows_the_registry(with_atr):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    result = CliRunner().invoke(app, ["features", "list"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│")}
    assert set(rows) == set(FEATURES)
    assert "computed from prices on read" in rows[ATR] and "stored" in rows["rsi_14"]


def test_samples_follow_the_models_tuple_wherever_close_is():
    from ldtm_core.data.samples import build_samples
    from ldtm_core.data.synthetic_market import generate

    px = generate(["AAPL"], "2023-01-03", "2024-06-28", seed=5).drop(columns="ticker")
    reference = build_samples(px, 30)
    short = build_samples(px, 30, names=("rsi_14", "close"))
    assert short.x.shape == (*reference.x.shape[:2], 2)
    np.testing.assert_array_equal(short.close_min, reference.close_min)
    np.testing.assert_array_equal(short.x[..., 1], reference.x[..., REFERENCE_FEATURES.index("close")])
    np.testing.assert_array_equal(short.y, reference.y)
