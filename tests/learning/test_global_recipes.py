"""Global recipes (learning.recipes): one fit for every ticker, a candidate per ticker, served nightly
beside the per-ticker LSTMs through the same snapshots, hash chain, fillback and board."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select

from ldtm_core.accountability.board.leaderboard import leaderboard
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data import price_features
from ldtm_core.data.calendar import session_array
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes import LSTM, global_fit, recipe_of, serving, tabular
from ldtm_core.learning.recipes.artifacts import load
from ldtm_core.learning.registry import get_model, list_models, stored_config
from ldtm_core.schema import model_registry, registry_events, snapshots

TICKERS = ["AAPL", "MSFT", "NVDA"]
AS_OF = dt.date(2024, 3, 28)


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, TICKERS)
    serving.clear_cache()
    return engine, make_settings(tmp_path, db_url)


def _sessions(start: dt.date, end: dt.date) -> list[dt.date]:
    days = session_array()
    return [
        pd.Timestamp(d).date() for d in days[(days >= np.datetime64(start)) & (days <= np.datetime64(end))]
    ]


@pytest.mark.parametrize("recipe", ["ridge", "lightgbm"])
def test_a_global_recipe_fits_once_and_every_ticker_serves_it_through_the_record(store, recipe):
    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, recipe, TICKERS, as_of=AS_OF)

    assert [o.status for o in outcomes] == ["trained"] * 3, [o.reason for o in outcomes]
    recs = [get_model(engine, o.model_id) for o in outcomes]
    # One fit: every ticker's row points at the same verified artifact, named by its recipe.
    assert {(r.checkpoint_path, r.checkpoint_sha256) for r in recs} == {
        (recs[0].checkpoint_path, recs[0].checkpoint_sha256)
    }
    assert {r.recipe for r in recs} == {recipe} and {r.profile for r in recs} == {recipe}
    assert all(r.trained_on_date <= AS_OF for r in recs)  # nothing after as_of was read
    with pytest.raises(InputError, match=rf"is a {recipe} recipe"):
        _ = recs[0].config  # an LSTM-only step refuses it by name

    evenings = _sessions(dt.date(2024, 4, 1), dt.date(2024, 4, 30))
    for day in evenings:
        result = predict(engine, settings, run_date=day, mode="replay")
        assert result.tickers_predicted == TICKERS, result.skipped
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(select(snapshots)).mappings().all())
    assert len(rows) == 3 * len(evenings) and set(rows["model_status"]) == {"candidate"}

    # Each stored forecast is the artifact's own prediction from the ticker's bars up to that evening.
    model = load(recs[0].checkpoint_path, recs[0].checkpoint_sha256)
    bars = ingest_bars(engine, "MSFT")
    day = evenings[5]
    upto = bars[bars["date"] <= pd.Timestamp(day)]
    feats = price_features.compute(upto, "MSFT")[list(price_features.feature_names())].iloc[[-1]]
    want = upto["close"].iloc[-1] * np.exp(model.predict(feats)[0])
    got = rows[(rows["ticker"] == "MSFT") & (pd.to_datetime(rows["run_date"]) == pd.Timestamp(day))].iloc[0]
    np.testing.assert_allclose([got[h.col("pred")] for h in HORIZONS], want, rtol=1e-9)

    fillback(engine)
    board = leaderboard(engine, include_ungated=True)
    assert set(board["ticker"]) == set(TICKERS)
    assert (board.set_index("ticker").loc[TICKERS, "n"] > 0).all()
    assert verify(engine).ok


def _lstm_spans(engine, ticker: str) -> list[tuple]:
    from ldtm_core.data.feature_store import prices_and_features
    from ldtm_core.data.samples import build_samples
    from ldtm_core.learning.fold_calendar import fold_spans
    from ldtm_core.learning.model import get_profile

    cfg = get_profile("reference")
    prices, feats = prices_and_features(engine, ticker, features=cfg.features)
    samples = build_samples(prices, cfg.window, features=feats.frame, names=cfg.features)
    _, spans = fold_spans(samples, 2)
    day = lambda v: pd.Timestamp(v).date()  # noqa: E731
    return [
        (
            day(s.cutoff),
            day(samples.dates[s.test_idx[0]]),
            day(samples.dates[s.test_idx[-1]]),
            len(s.test_idx),
        )
        for s in spans
    ]


def ingest_bars(engine, ticker: str) -> pd.DataFrame:
    from ldtm_core.schema import prices

    with engine.connect() as conn:
        stmt = select(prices).where(prices.c.ticker == ticker).order_by(prices.c.date)
        frame = pd.DataFrame(conn.execute(stmt).mappings().all())
    frame["date"] = pd.to_datetime(frame["date"])
    return frame[["date", "open", "high", "low", "close", "volume"]].reset_index(drop=True)


def _count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def test_a_recipe_that_predicts_nan_is_refused_by_name_and_writes_nothing(store, monkeypatch):
    engine, settings = store
    real_fit = tabular.fit

    def diverged(x, y, cfg):
        model = real_fit(x, y, cfg)
        model.estimator.named_steps["ridge"].intercept_[:] = np.nan
        return model

    monkeypatch.setattr(tabular, "fit", diverged)
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=AS_OF)

    assert {o.status for o in outcomes} == {"failed"}
    assert all("recipe ridge" in o.reason and "non-finite" in o.reason for o in outcomes), outcomes[0].reason
    assert _count(engine, model_registry) == 0 and _count(engine, registry_events) == 0
    assert not list((settings.checkpoint_dir / "recipes").rglob("*.json"))


def test_a_tampered_artifact_costs_only_its_own_tickers_their_rows(store):
    engine, settings = store
    global_fit.train_global(engine, settings, "ridge", ["AAPL", "MSFT"], as_of=AS_OF)
    make_model(engine, settings, "NVDA")  # a per-ticker LSTM beside it
    path = list_models(engine, "AAPL")[0].checkpoint_path
    with open(path, "a") as f:
        f.write(" ")

    result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")

    assert result.tickers_predicted == ["NVDA"]
    for t in ("AAPL", "MSFT"):
        assert "recipe ridge" in result.skipped[t] and "does not match the registry" in result.skipped[t]


def test_too_little_history_and_non_members_are_skipped_with_the_reason(store):
    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=dt.date(2023, 4, 20))
    assert {o.status for o in outcomes} == {"skipped"}
    assert "too little history for ridge" in outcomes[0].reason
    assert _count(engine, model_registry) == 0


def test_rows_written_before_recipes_read_as_the_lstm_and_keep_their_config_json():
    from ldtm_core.learning.model import get_profile

    cfg = get_profile("demo")
    # The stored JSON of an LSTM row is byte for byte what the previous release wrote.
    assert stored_config(cfg) == json.dumps(cfg.to_dict(), sort_keys=True)
    assert recipe_of(stored_config(cfg)) == LSTM
    ridge = global_fit.recipe_config("ridge", {"alpha": 3.0})
    assert recipe_of(stored_config(ridge, "ridge")) == "ridge"


def test_recipe_settings_are_checked_before_anything_runs():
    with pytest.raises(InputError, match="recipe 'lstm2' is unknown; known: lstm, ridge, lightgbm"):
        global_fit.recipe_config("lstm2")
    with pytest.raises(InputError, match="not a global recipe"):
        global_fit.recipe_config("lstm")
    with pytest.raises(InputError, match="--set kind"):
        global_fit.recipe_config("ridge", {"kind": "lightgbm"})
    assert global_fit.recipe_config("lightgbm", {"n_estimators": 7}).n_estimators == 7


def test_a_global_fit_is_backtested_on_its_panel_once_per_fold_and_scored_per_ticker(store):
    from ldtm_core.accountability.gate.gate import newest_backtest
    from ldtm_core.learning import fold_cache
    from ldtm_core.learning.backtest import score
    from ldtm_core.learning.recipes.global_backtest import backtest_fit

    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS)
    bt = backtest_fit(engine, settings, outcomes[0].model_id, folds=2)

    assert sorted(bt.results) == TICKERS and bt.skipped == {} and bt.refit_folds == 2
    bars = ingest_bars(engine, "NVDA")
    for o in outcomes:
        rec = get_model(engine, o.model_id)
        _, folds = newest_backtest(engine, rec.id, rec.arch_signature)  # what the gate reads
        assert [f["fold"] for f in folds] == [1, 2] and all(f["leakage_rows"] == 0 for f in folds)
        # Where the per-ticker LSTM backtest puts this ticker's folds: same cutoffs, same test sessions.
        lstm = _lstm_spans(engine, rec.ticker)
        assert [(f["cutoff"], f["test_start"], f["test_end"], f["n"]) for f in folds] == lstm
    # NVDA's fold 2 scored from its stored predictions against its own closes.
    _, folds = newest_backtest(engine, outcomes[2].model_id)
    dates, pred = fold_cache.stored_predictions(engine, folds[1]["fold_key"])
    close = bars.set_index("date")["close"]
    now = close.loc[pd.DatetimeIndex(dates)].to_numpy()
    nxt = close.shift(-1).loc[pd.DatetimeIndex(dates)].to_numpy()
    hits, up, _, ties = score(pred[:, 0], nxt, now)
    assert folds[1]["n"] == len(dates) and folds[1]["ties"] == ties
    assert folds[1]["direction_accuracy"] == pytest.approx(hits / (len(dates) - ties))

    again = backtest_fit(engine, settings, outcomes[0].model_id, folds=2)
    assert (again.refit_folds, again.reused_folds) == (0, 2)  # every fold reused from the store
    for t in TICKERS:
        a = [f.scores for f in bt.results[t].folds]
        b = [f.scores for f in again.results[t].folds]
        assert a == b


def test_backtesting_many_tickers_fits_each_fold_of_a_global_fit_once(store):
    from ldtm_core.accountability.gate.backtest_pool import backtest_many

    engine, settings = store
    global_fit.train_global(engine, settings, "ridge", TICKERS)
    seen = []
    outcomes = backtest_many(settings, [*TICKERS, "TSLA"], folds=2, max_workers=1, on_outcome=seen.append)

    assert [o.ticker for o in outcomes] == [*TICKERS, "TSLA"] and len(seen) == 4
    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "no candidate"]
    # One fit per fold for the whole panel: one fold artifact each, every ticker's fold on it.
    from ldtm_core.learning import fold_cache

    assert len(list(fold_cache.weights_dir(settings).glob("recipe-ridge-*.json"))) == 2
    assert {o.result.model_id for o in outcomes[:3]} == {m.id for m in list_models(engine)}


def test_decay_and_shadow_read_a_global_recipe_as_its_own(store):
    """The decay monitor's drift reads the recipe's inputs (the price_features values), and a shadow of
    a recipe is not ended as if its artifact were an LSTM checkpoint that no longer loads."""
    from ldtm_core.accountability.decay.record import drift_of
    from ldtm_core.accountability.shadow.shadow import checkpoint_problem

    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=AS_OF)
    rec = get_model(engine, outcomes[0].model_id)

    drift = drift_of(engine, rec, 40)
    assert (
        set(drift.values) == set(price_features.feature_names())
        and drift.reference_end == rec.trained_on_date
    )
    assert checkpoint_problem(rec) is None
    with open(rec.checkpoint_path, "a") as f:
        f.write(" ")
    serving.clear_cache()
    assert "does not match the registry" in checkpoint_problem(rec)


def test_a_ticker_whose_prices_end_early_is_judged_on_the_folds_its_data_covers(engine, tmp_path, db_url):
    """Real daily files end on different dates: a ticker is tested on the folds its rows reach, and
    one whose rows reach no fold is skipped saying so (not every ticker refused for one fold)."""
    from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
    from ldtm_core.learning.recipes.global_backtest import backtest_fit

    ingest(engine, ["AAPL", "NVDA"])
    ingest(engine, ["MSFT"], end="2023-12-29")  # fold 3's quarter (2024 Q1) has no MSFT row
    ingest(engine, ["TSLA"], start="2022-06-01", end="2023-06-30")  # ends before fold 1's quarter
    settings = make_settings(tmp_path, db_url)
    outcomes = global_fit.train_global(engine, settings, "ridge", ["AAPL", "MSFT", "NVDA", "TSLA"])
    assert [o.status for o in outcomes] == ["trained"] * 4

    bt = backtest_fit(engine, settings, outcomes[0].model_id, folds=3)

    assert [f.fold for f in bt.results["AAPL"].folds] == [1, 2, 3]
    assert [f.fold for f in bt.results["MSFT"].folds] == [1, 2]  # the folds MSFT's data covers
    assert "TSLA" not in bt.results and "no testable rows in any of the 3 folds" in bt.skipped["TSLA"]
    assert "prices end 2023-06-30" in bt.skipped["TSLA"]
    assert backtest_candidate(engine, "MSFT", None, 1, settings=settings, folds=3).status == "ok"
