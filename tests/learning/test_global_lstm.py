"""The global LSTM recipe (learning.recipes.global_lstm): its inputs are the per-ticker LSTM's normalised
windows, row for row; it fits reproducibly, stores itself as JSON data only, and runs train -> backtest
-> nightly predict like the other global recipes."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from accountability_helpers import ingest, make_settings
from sqlalchemy import select

from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data.features import REFERENCE_FEATURES, WARMUP_ROWS
from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic_market import generate
from ldtm_core.errors import CheckpointError, InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.checkpoints import write_atomic
from ldtm_core.learning.price_windows import window_from_frame
from ldtm_core.learning.recipes import RECIPES, artifacts, global_fit, serving, tabular
from ldtm_core.learning.recipes.family import family
from ldtm_core.learning.recipes.global_lstm import (
    GLOBAL_LSTM,
    WINDOWS,
    GlobalLSTMConfig,
    dump,
    load,
    window_names,
)
from ldtm_core.learning.registry import get_model
from ldtm_core.schema import snapshots

TICKERS = ["AAPL", "MSFT", "NVDA"]
AS_OF = dt.date(2024, 3, 28)
# Small enough that a fit takes well under a second; two layers, so the dropout path runs too.
SMALL = {"hidden": 8, "layers": 2, "epochs": 2, "epoch_rows": 1024, "batch_size": 128}
CFG = GlobalLSTMConfig(**SMALL)
BAR_COLUMNS = ["ticker", "date", "open", "high", "low", "close", "volume"]


def _bars(tickers=("AAPL", "NVDA"), start="2023-01-03", end="2024-06-28") -> pd.DataFrame:
    df = generate(list(tickers), start, end, seed=7)
    return df[BAR_COLUMNS].sort_values(["ticker", "date"]).reset_index(drop=True)


def _prices(bars: pd.DataFrame, ticker: str) -> pd.DataFrame:
    return bars[bars["ticker"] == ticker].drop(columns="ticker").reset_index(drop=True)


def _rows_at(bars: pd.DataFrame, ticker: str, dates: np.ndarray) -> np.ndarray:
    """The panel rows of `ticker` on `dates` (datetime64[D])."""
    days = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")
    mine = np.flatnonzero(bars["ticker"].to_numpy() == ticker)
    return mine[np.searchsorted(days[mine], dates)]


# --- the inputs ---------------------------------------------------------------------------------------


def test_the_inputs_are_the_per_ticker_lstms_normalised_windows_row_for_row():
    bars = _bars()
    cfg = GlobalLSTMConfig(window=30)
    x = WINDOWS.compute(bars, cfg, {})

    names = WINDOWS.names(cfg)
    assert x.shape == (len(bars), 30 * 11) and x.dtype == np.float64 and len(names) == x.shape[1]
    assert names[:2] == ("open@t-29", "high@t-29") and names[-1] == "close_sma_20@t-0"
    assert names[11 * 29 : 11 * 30] == tuple(f"{f}@t-0" for f in REFERENCE_FEATURES)
    for ticker in ("AAPL", "NVDA"):
        # The per-ticker LSTM's training windows: every one of them, on its own date, equal.
        samples = build_samples(_prices(bars, ticker), window=30)
        rows = _rows_at(bars, ticker, samples.dates)
        assert len(samples) > 200
        np.testing.assert_array_equal(x[rows], samples.x.reshape(len(samples), -1).astype(np.float64))
        # Warm-up: NaN until the window's first row is past the features' warm-up, known from then on.
        mine = np.flatnonzero(bars["ticker"].to_numpy() == ticker)
        first = WARMUP_ROWS + 30 - 1
        assert np.isnan(x[mine[:first]]).all() and np.isfinite(x[mine[first:]]).all()
        assert rows[0] == mine[first]

    # The per-ticker LSTM's serving window (the per-ticker path) on one evening: the same numbers.
    prices = _prices(bars, "NVDA")
    day = dt.date(2024, 2, 14)
    upto = prices[prices["date"] <= day]  # dates as the serving path holds them (datetime.date)
    served, *_ = window_from_frame("NVDA", upto, day, 30)
    row = _rows_at(bars, "NVDA", np.array([day], dtype="datetime64[D]"))[0]
    np.testing.assert_array_equal(x[row], served.reshape(-1).astype(np.float64))


def test_a_row_reads_no_later_bar_and_no_bar_of_another_ticker():
    bars = _bars()
    before = WINDOWS.compute(bars, CFG, {})
    changed = bars.copy()
    k = int(np.flatnonzero(changed["ticker"].to_numpy() == "AAPL")[200])
    changed.loc[k, ["close", "high"]] *= 1.5  # one AAPL bar in the middle of its history
    after = WINDOWS.compute(changed, CFG, {})

    aapl = changed["ticker"].to_numpy() == "AAPL"
    earlier = aapl & (np.arange(len(bars)) < k)
    np.testing.assert_array_equal(after[earlier], before[earlier])
    np.testing.assert_array_equal(after[~aapl], before[~aapl])  # NVDA's rows
    assert not np.array_equal(after[k], before[k])  # the changed bar is in its own row's window

    # Rows of tickers may interleave (date-major): each row still reads its own ticker's bars only.
    mixed = bars.sort_values(["date", "ticker"], kind="stable")
    np.testing.assert_array_equal(
        WINDOWS.frame(mixed, CFG).loc[bars.index].to_numpy(), WINDOWS.compute(bars, CFG, {})
    )


def test_a_window_never_reaches_back_across_a_long_hole_in_the_bars():
    bars = _bars(("AAPL",))
    dates = pd.to_datetime(bars["date"])
    hole = bars.index[(dates >= "2023-09-01") & (dates < "2023-10-02")]  # 20 sessions
    bars = bars.drop(hole).reset_index(drop=True)
    x = WINDOWS.compute(bars, CFG, {})

    samples = build_samples(_prices(bars, "AAPL"), window=CFG.window)
    rows = _rows_at(bars, "AAPL", samples.dates)
    np.testing.assert_array_equal(x[rows], samples.x.reshape(len(samples), -1).astype(np.float64))
    # After the hole the features restart: warm-up and a fresh window before the next known row.
    after = int(np.flatnonzero(pd.to_datetime(bars["date"]) >= "2023-10-02")[0])
    first_known = after + WARMUP_ROWS + CFG.window - 1
    assert np.isnan(x[after:first_known]).all() and np.isfinite(x[first_known]).all()
    assert np.isfinite(x).all(axis=1).sum() == len(samples)


def test_the_inputs_fingerprint_and_lookback_follow_the_window():
    a, b = GlobalLSTMConfig(), GlobalLSTMConfig(window=20)
    assert WINDOWS.fingerprint(a) == WINDOWS.fingerprint(GlobalLSTMConfig(hidden=8))  # the net: not inputs
    assert WINDOWS.fingerprint(a) != WINDOWS.fingerprint(b)
    assert len(WINDOWS.fingerprint(a)) == 64
    assert WINDOWS.lookback(a) == 30 + WARMUP_ROWS + 250
    assert a.signature != b.signature != GlobalLSTMConfig(seed=1).signature


def test_the_recipe_is_registered_and_its_settings_are_checked():
    assert RECIPES["global_lstm"].scope == "global" and family("global_lstm") is GLOBAL_LSTM
    cfg = global_fit.recipe_config("global_lstm", {"hidden": 16})
    assert isinstance(cfg, GlobalLSTMConfig) and cfg.hidden == 16 and cfg.kind == "global_lstm"
    for bad in ({"window": 1}, {"dropout": 1.0}, {"epochs": 0}, {"lr": 0.0}):
        with pytest.raises(InputError, match="global_lstm"):
            global_fit.recipe_config("global_lstm", bad)


# --- fit, predict, the artifact -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def frame():
    x, y, _ = tabular.training_frame(_bars(), CFG)
    return x, y


def test_a_fit_predicts_finite_log_returns_and_one_seed_gives_one_model(frame):
    x, y = frame
    threads, rng = torch.get_num_threads(), torch.random.get_rng_state()
    model = tabular.fit(x, y, CFG)

    pred = model.predict(x.iloc[:50])
    assert pred.shape == (50, len(HORIZONS)) and pred.dtype == np.float64 and np.isfinite(pred).all()
    assert 0 < np.abs(pred).max() < 1  # log returns, on Y's own scale (it was standardised and restored)
    np.testing.assert_allclose(model.estimator.y_scale, y.to_numpy().std(axis=0))
    # The fit leaves the process's torch settings and random state as it found them.
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), rng)

    again = tabular.fit(x, y, CFG)
    assert dump(again.estimator) == dump(model.estimator)  # same seed: the same weights, bit for bit
    other = tabular.fit(x, y, replace(CFG, seed=1))
    assert dump(other.estimator)["state"] != dump(model.estimator)["state"]


def test_the_artifact_is_json_data_that_predicts_identically_and_a_misshapen_tensor_is_refused(
    frame, tmp_path
):
    x, y = frame
    model = tabular.fit(x, y, CFG)
    path = tmp_path / "global_lstm.json"
    sha = artifacts.save(model, path)

    loaded = artifacts.load(path, sha)
    assert isinstance(loaded.config, GlobalLSTMConfig) and loaded.config == CFG
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    doc = json.loads(path.read_text())
    assert doc["kind"] == "global_lstm" and doc["features"] == list(WINDOWS.names(CFG))
    assert doc["payload"]["state"]["head.weight"]["shape"] == [len(HORIZONS), CFG.hidden]

    tensor = "lstm.weight_hh_l1"
    doc["payload"]["state"][tensor]["shape"] = [4 * CFG.hidden, CFG.hidden + 1]
    tampered = tmp_path / "tampered.json"
    with pytest.raises(CheckpointError, match=rf"is inconsistent: tensor {tensor} has shape"):
        artifacts.load(tampered, write_atomic(tampered, json.dumps(doc).encode()))

    payload = dump(model.estimator)
    with pytest.raises(ValueError, match="tensor lstm.bias_ih_l0 holds 3 values"):
        load(
            {**payload, "state": {**payload["state"], "lstm.bias_ih_l0": {"shape": [32], "values": [0] * 3}}},
            CFG,
            330,
        )
    with pytest.raises(ValueError, match="tensor head.bias is missing"):
        load({**payload, "state": {k: v for k, v in payload["state"].items() if k != "head.bias"}}, CFG, 330)
    with pytest.raises(ValueError, match="tensor extra.weight is not one of the network's"):
        load(
            {**payload, "state": {**payload["state"], "extra.weight": {"shape": [1], "values": [0]}}},
            CFG,
            330,
        )
    with pytest.raises(ValueError, match="329 inputs, expected window 30 x 11"):
        load(payload, CFG, 329)


def test_a_fit_within_a_budget_runs_in_a_child_and_gives_the_same_weights(frame):
    from ldtm_core.learning.recipes.budget import FitBudget
    from ldtm_core.learning.recipes.budget import fit as budget_fit

    x, y = frame
    in_child = budget_fit(x, y, CFG, FitBudget(timeout_s=120))  # the state crosses back as JSON data
    assert dump(in_child.estimator) == dump(tabular.fit(x, y, CFG).estimator)


# --- end to end: train, backtest, serve ---------------------------------------------------------------


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, TICKERS)
    serving.clear_cache()
    return engine, make_settings(tmp_path, db_url)


def test_a_global_lstm_trains_once_backtests_and_serves_every_ticker(store):
    from ldtm_core.accountability.gate.gate import newest_backtest
    from ldtm_core.learning.recipes.global_backtest import backtest_fit

    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, "global_lstm", TICKERS, as_of=AS_OF, overrides=SMALL)

    assert [o.status for o in outcomes] == ["trained"] * 3, [o.reason for o in outcomes]
    recs = [get_model(engine, o.model_id) for o in outcomes]
    assert {r.recipe for r in recs} == {"global_lstm"} and len({r.checkpoint_sha256 for r in recs}) == 1
    assert all(r.trained_on_date <= AS_OF for r in recs)
    assert all('"hidden": 8' in r.config_json for r in recs)

    bt = backtest_fit(engine, settings, outcomes[0].model_id, folds=2)
    assert sorted(bt.results) == TICKERS and bt.skipped == {} and bt.refit_folds == 2
    for rec in recs:
        _, folds = newest_backtest(engine, rec.id, rec.arch_signature)
        assert [f["fold"] for f in folds] == [1, 2] and all(
            f["n"] > 0 and f["leakage_rows"] == 0 for f in folds
        )

    day = dt.date(2024, 4, 2)
    result = predict(engine, settings, run_date=day, mode="replay")
    assert result.tickers_predicted == TICKERS, result.skipped
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(select(snapshots)).mappings().all())
    assert sorted(rows["ticker"]) == TICKERS and set(rows["model_status"]) == {"candidate"}

    # Served from a tail of `lookback` bars, the forecast is the model's on the full history's window.
    model = artifacts.load(recs[0].checkpoint_path, recs[0].checkpoint_sha256)
    bars = _bars(TICKERS, end=day.isoformat())
    x = WINDOWS.compute(bars, model.config, {})
    last = np.flatnonzero(bars["ticker"].to_numpy() == "MSFT")[-1]
    want = bars["close"].iloc[last] * np.exp(model.predict(x[[last]])[0])
    got = rows[rows["ticker"] == "MSFT"].iloc[0]
    np.testing.assert_allclose([got[h.col("pred")] for h in HORIZONS], want, rtol=1e-6)

    # Decay's drift reads the recipe's own inputs (its windows), up to its data cutoff and after.
    from ldtm_core.accountability.decay.record import drift_of

    drift = drift_of(engine, recs[0], 20)
    assert (
        set(drift.values) == set(window_names(model.config))
        and drift.reference_end == recs[0].trained_on_date
    )
