"""Tabular recipes: panel targets by hand, ridge and LightGBM recovering planted relations, JSON artifacts
that round-trip exactly and refuse anything else, predictions checked by name, and LightGBM determinism."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pandas as pd
import pytest

from ldtm_core.data import price_features
from ldtm_core.data.calendar import sessions_between, target_dates
from ldtm_core.errors import CheckpointError, InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.checkpoints import sha256_file, write_atomic
from ldtm_core.learning.recipes.artifacts import load, save
from ldtm_core.learning.recipes.inputs import PRICE_FEATURES
from ldtm_core.learning.recipes.tabular import (
    TabularConfig,
    fit,
    panel_targets,
    target_columns,
    training_frame,
)

FEATURES = list(price_features.feature_names())
# Small and single-threaded: the suite shares the machine.
SMALL_LGBM = TabularConfig(kind="lightgbm", n_estimators=10, min_child_samples=20)


def bars_of(ticker: str, days: list, seed: int) -> pd.DataFrame:
    """Coherent random daily bars of one ticker on the given sessions."""
    rng = np.random.default_rng(seed)
    n = len(days)
    c = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    o = c * np.exp(rng.normal(0, 0.005, n))
    return pd.DataFrame(
        {
            "ticker": ticker,
            "date": pd.to_datetime(days),
            "open": o,
            "high": np.maximum(o, c) * (1 + rng.uniform(0, 0.02, n)),
            "low": np.minimum(o, c) * (1 - rng.uniform(0, 0.02, n)),
            "close": c,
            "volume": rng.integers(100_000, 5_000_000, n).astype(float),
        }
    )


def planted(n: int, seed: int, nonlinear: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Synthetic features and targets: next_day = 0.3 * ret_5 (linear) or 0.5 * sign(ret_5 * vol_20)
    (an interaction no linear model sees), the other horizons linear in other features; noise sd 0.3."""
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(rng.normal(size=(n, len(FEATURES))), columns=FEATURES)
    signal = {
        HORIZONS[0].name: 0.5 * np.sign(x["ret_5"] * x["vol_20"]) if nonlinear else 0.3 * x["ret_5"],
        HORIZONS[1].name: -0.3 * x["ma_ratio_20"],
        HORIZONS[2].name: 0.3 * x["dd_60"] + 0.2 * x["vratio_5"],
    }
    y = pd.DataFrame(
        {f"target_{h.name}": signal[h.name] + rng.normal(0, 0.3, n) for h in HORIZONS},
        columns=target_columns(),
    )
    return x, y


def r2(truth: np.ndarray, pred: np.ndarray) -> float:
    return 1.0 - float(((truth - pred) ** 2).sum() / ((truth - truth.mean()) ** 2).sum())


@pytest.fixture(scope="module")
def fitted():
    """Both recipes fitted on one planted nonlinear set, and its held-out rows."""
    x, y = planted(6_000, seed=1, nonlinear=True)
    x_test, y_test = planted(2_000, seed=2, nonlinear=True)
    models = {kind: fit(x, y, TabularConfig(kind=kind)) for kind in ("ridge", "lightgbm")}
    return models, x_test, y_test


# --- targets -------------------------------------------------------------------------------------------


def test_panel_targets_are_log_returns_to_the_same_tickers_target_dates():
    days = sessions_between("2024-01-02", "2024-03-28")
    a = bars_of("AAA", days, seed=1)
    # BBB stops earlier than AAA and misses one session in the middle, which AAA has.
    b = bars_of("BBB", days[:40], seed=2).drop(index=20).reset_index(drop=True)
    hole = pd.Timestamp(days[20])
    panel = pd.concat([a, b]).sample(frac=1.0, random_state=0)  # rows of both tickers interleaved

    got = panel_targets(panel)
    assert list(got.index) == list(panel.index)
    assert list(got.columns) == ["ticker", "date", *target_columns()]

    close = {
        (t, pd.Timestamp(d)): c for t, d, c in panel[["ticker", "date", "close"]].itertuples(index=False)
    }
    when = target_dates(panel["date"].to_numpy().astype("datetime64[D]"))
    for h in HORIZONS:
        expected = [
            math.log(close[(t, pd.Timestamp(w))] / c) if (t, pd.Timestamp(w)) in close else np.nan
            for t, c, w in zip(panel["ticker"], panel["close"], when[h.name], strict=True)
        ]
        np.testing.assert_allclose(got[f"target_{h.name}"].to_numpy(), expected, rtol=0, atol=1e-15)

    def row(ticker, day):
        return got[(got["ticker"] == ticker) & (got["date"] == pd.Timestamp(day))].iloc[0]

    # Friday 2024-01-12: Monday the 15th is a holiday, so both next day and next Monday are the 16th.
    aaa = a.set_index("date")["close"]
    for h in HORIZONS[:2]:
        assert row("AAA", "2024-01-12")[f"target_{h.name}"] == pytest.approx(
            math.log(aaa["2024-01-16"] / aaa["2024-01-12"]), abs=1e-15
        )
    # No cross-ticker lookup: BBB's next day after its last bar, and into its hole, is unknown though
    # AAA has bars there; so is every month target in each ticker's last 21 sessions (BBB's hole is one).
    assert np.isnan(row("BBB", days[39])[f"target_{HORIZONS[0].name}"])
    assert np.isnan(row("BBB", days[19])[f"target_{HORIZONS[0].name}"]) and hole not in set(b["date"])
    assert not np.isnan(row("AAA", days[19])[f"target_{HORIZONS[0].name}"])
    month = f"target_{HORIZONS[2].name}"
    assert got.loc[got["ticker"] == "AAA", month].isna().sum() == 21
    assert got.loc[got["ticker"] == "BBB", month].isna().sum() == 20


def test_panel_targets_refuse_duplicate_dates_and_bad_closes():
    bars = bars_of("AAA", sessions_between("2024-01-02", "2024-01-31"), seed=1)
    with pytest.raises(InputError, match=f"ticker 'AAA' has two bars on {bars['date'].iloc[3].date()}"):
        panel_targets(pd.concat([bars, bars.iloc[[3]]]))
    bars.loc[5, "close"] = 0.0
    with pytest.raises(InputError, match="'close' must hold positive"):
        panel_targets(bars)


def test_training_frame_joins_features_and_targets_row_for_row():
    days = sessions_between("2022-01-03", "2022-12-30")
    bars = pd.concat([bars_of(f"T{i}", days, seed=i) for i in range(3)], ignore_index=True)
    x, y, keys = training_frame(bars)
    assert list(x.columns) == FEATURES and list(y.columns) == target_columns()
    assert list(keys.columns) == ["ticker", "date"] and len(x) == len(y) == len(keys)
    assert np.isfinite(x.to_numpy()).all() and np.isfinite(y.to_numpy()).all()
    # Each ticker loses its warm-up (LOOKBACK - 1 rows) and its last month (no target yet).
    per_ticker = len(days) - (price_features.LOOKBACK - 1) - 21
    assert keys["ticker"].value_counts().to_dict() == {f"T{i}": per_ticker for i in range(3)}
    full = price_features.compute_panel(bars).merge(panel_targets(bars), on=["ticker", "date"])
    joined = keys.merge(full, on=["ticker", "date"], how="left")
    np.testing.assert_array_equal(joined[FEATURES].to_numpy(), x.to_numpy())
    np.testing.assert_array_equal(joined[target_columns()].to_numpy(), y.to_numpy())
    preds = fit(x, y, SMALL_LGBM).predict(x)
    assert preds.shape == (len(x), len(HORIZONS)) and np.isfinite(preds).all()


# --- fitting -------------------------------------------------------------------------------------------


def test_ridge_recovers_a_planted_linear_relation():
    x, y = planted(6_000, seed=3)
    x_test, y_test = planted(2_000, seed=4)
    model = fit(x, y, TabularConfig(kind="ridge"))
    pred = model.predict(x_test)
    assert pred.shape == (len(x_test), len(HORIZONS))
    for j, h in enumerate(HORIZONS):
        corr = np.corrcoef(pred[:, j], y_test.iloc[:, j])[0, 1]
        assert corr > 0.6, (h.name, corr)
    coef = model.estimator.named_steps["ridge"].coef_[0] / model.estimator.named_steps["scale"].scale_
    assert coef[FEATURES.index("ret_5")] == pytest.approx(0.3, abs=0.02)


def test_lightgbm_finds_a_nonlinear_relation_that_ridge_misses(fitted):
    models, x_test, y_test = fitted
    truth = y_test.iloc[:, 0].to_numpy()
    ridge_r2 = r2(truth, models["ridge"].predict(x_test)[:, 0])
    lgbm_r2 = r2(truth, models["lightgbm"].predict(x_test)[:, 0])
    assert ridge_r2 < 0.05 and lgbm_r2 > 0.5, (ridge_r2, lgbm_r2)


def test_two_lightgbm_fits_with_one_seed_agree_exactly():
    x, y = planted(2_000, seed=5, nonlinear=True)
    first, second = fit(x, y, SMALL_LGBM).predict(x), fit(x, y, SMALL_LGBM).predict(x)
    np.testing.assert_array_equal(first, second)
    other = TabularConfig(**{**SMALL_LGBM.to_dict(), "seed": 1})
    assert not np.array_equal(first, fit(x, y, other).predict(x))  # the seed does reach the bagging


def test_config_kind_and_signature():
    with pytest.raises(InputError, match="'xgboost' is not one of ridge, lightgbm"):
        TabularConfig(kind="xgboost")
    cfg = TabularConfig(kind="lightgbm")
    assert TabularConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.signature == TabularConfig(kind="lightgbm").signature
    assert cfg.signature != TabularConfig(kind="lightgbm", num_leaves=31).signature
    assert TabularConfig().signature != TabularConfig(alpha=2.0).signature


def test_signature_follows_the_feature_definitions(monkeypatch):
    before = TabularConfig().signature
    monkeypatch.setattr(price_features, "fingerprint", lambda names=None: "0" * 64)
    assert TabularConfig().signature != before


# --- predictions checked ---------------------------------------------------------------------------------


@pytest.fixture
def small_models():
    x, y = planted(500, seed=6)
    return {kind: fit(x, y, TabularConfig(kind=kind, n_estimators=5)) for kind in ("ridge", "lightgbm")}, x


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_predictions_are_refused_by_name(small_models, monkeypatch, bad):
    models, x = small_models
    monkeypatch.setattr(models["ridge"].estimator, "predict", lambda v: np.full((len(v), 3), bad))
    with pytest.raises(InputError, match=rf"ridge predicted {3 * len(x)} non-finite value\(s\)"):
        models["ridge"].predict(x)
    booster = models["lightgbm"].estimator[1]
    monkeypatch.setattr(booster, "predict", lambda v, **_: np.where(np.arange(len(v)) < 2, bad, 0.0))
    with pytest.raises(InputError, match=r"lightgbm predicted 2 non-finite value\(s\)"):
        models["lightgbm"].predict(x)


def test_wrongly_shaped_predictions_are_refused_by_name(small_models, monkeypatch):
    models, x = small_models
    n, h = len(x), len(HORIZONS)
    monkeypatch.setattr(models["ridge"].estimator, "predict", lambda v: np.zeros((len(v), h - 1)))
    with pytest.raises(InputError, match=rf"ridge predicted shape \({n}, {h - 1}\), expected \({n}, {h}\)"):
        models["ridge"].predict(x)
    monkeypatch.setattr(models["lightgbm"].estimator[0], "predict", lambda v, **_: np.zeros(len(v) + 1))
    with pytest.raises(InputError, match=rf"lightgbm predicted shape \({n + 1},\) for {HORIZONS[0].name}"):
        models["lightgbm"].predict(x)


def test_predict_refuses_missing_columns_and_non_finite_features(small_models):
    models, x = small_models
    with pytest.raises(InputError, match="ridge predict: X lacks column"):
        models["ridge"].predict(x.drop(columns=["ret_5"]))
    with pytest.raises(InputError, match=r"lightgbm predict: X holds 1 non-finite"):
        models["lightgbm"].predict(x.assign(ret_5=np.r_[np.nan, x["ret_5"].iloc[1:]]))
    assert models["ridge"].predict(x.iloc[:0]).shape == (0, len(HORIZONS))


# --- artifacts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ridge", "lightgbm"])
def test_save_load_round_trip_is_exact_json(fitted, tmp_path, kind):
    models, x_test, _ = fitted
    model = models[kind]
    path = tmp_path / f"{kind}.json"
    sha = save(model, path)
    assert sha == sha256_file(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left
    raw = path.read_bytes()
    doc = json.loads(raw.decode("ascii"))
    assert set(doc) == {
        "format",
        "version",
        "kind",
        "config",
        "features",
        "features_fingerprint",
        "horizons",
        "payload",
    }
    assert (doc["format"], doc["version"], doc["kind"]) == ("ldtm-tabular", 1, kind)
    assert doc["features"] == FEATURES and doc["horizons"] == [h.name for h in HORIZONS]
    assert doc["features_fingerprint"] == price_features.fingerprint()
    assert not raw.startswith(b"\x80") and b"pickle" not in raw and b"joblib" not in raw

    loaded = load(path, sha)
    assert loaded.signature == model.signature and loaded.config == model.config
    want, got = model.predict(x_test), loaded.predict(x_test)
    if kind == "ridge":
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert type(loaded.estimator) is type(model.estimator)  # scikit-learn's own Pipeline predicts
    else:
        np.testing.assert_array_equal(got, want)


@pytest.fixture
def saved(tmp_path):
    x, y = planted(300, seed=7)
    path = tmp_path / "ridge.json"
    return path, save(fit(x, y, TabularConfig()), path)


def rewrite(path, change) -> str:
    """Apply `change` to the saved document and write it back; returns the new sha256."""
    doc = json.loads(path.read_text())
    change(doc)
    return write_atomic(path, json.dumps(doc).encode())


def test_a_changed_byte_or_a_missing_file_is_refused_by_sha256(saved, tmp_path):
    path, sha = saved
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"tabular model {path} does not match the registry"):
        load(path, sha)
    with pytest.raises(CheckpointError, match=r"tabular model .*nothing\.json is missing"):
        load(tmp_path / "nothing.json", sha)


def test_a_pickle_with_the_right_sha256_is_refused_as_not_the_format(tmp_path):
    path = tmp_path / "model.json"
    sha = write_atomic(path, pickle.dumps({"format": "ldtm-tabular", "version": 1}))
    with pytest.raises(CheckpointError, match=r"is not an ldtm-tabular JSON file"):
        load(path, sha)
    sha = write_atomic(path, json.dumps({"format": "something-else"}).encode())
    with pytest.raises(CheckpointError, match=r"is not an ldtm-tabular file \(format 'something-else'\)"):
        load(path, sha)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=2), "has version 2; this code reads version 1"),
        (lambda d: d.update(kind="xgboost"), "has unknown kind 'xgboost'"),
        (lambda d: d["config"].update(kind="lightgbm"), "is inconsistent: its config says kind 'lightgbm'"),
        (lambda d: d["payload"]["ridge"].update(coef=[[0.0]]), "is inconsistent: ridge coef has shape"),
        (lambda d: d.update(horizons=["next_day"]), "predicts horizons"),
    ],
)
def test_unknown_or_inconsistent_documents_are_refused(saved, change, message):
    path, _ = saved
    with pytest.raises(CheckpointError, match=message):
        load(path, rewrite(path, change))


def test_a_model_fitted_on_other_feature_definitions_is_refused_as_stale(saved, monkeypatch):
    path, sha = saved
    monkeypatch.setattr(price_features, "fingerprint", lambda names=None: "f" * 64)
    assert PRICE_FEATURES.fingerprint(None) == "f" * 64  # what every tabular recipe reads
    with pytest.raises(CheckpointError, match="other feature definitions .*stale, refit it"):
        load(path, sha)


def test_nan_in_a_document_is_refused(saved):
    path, _ = saved
    text = path.read_text().replace('"alpha": 1.0', '"alpha": NaN', 1)
    sha = write_atomic(path, text.encode())
    with pytest.raises(CheckpointError, match="NaN is not a JSON number"):
        load(path, sha)
