"""The knn family on its own (no database): it keeps LDTM's recipe contract, fits and predicts finite
log returns of the right shape, stores JSON data only and predicts the same after a reload, and refuses a
bad setting by name. Runs installed (`pip install ./examples/ldtm-recipe-knn`) or from the checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import ldtm_recipe_knn
except ImportError:  # run from the checkout, not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import ldtm_recipe_knn

from ldtm_recipe_knn import KNN, KNNConfig, sample

from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes import plugins

H = len(HORIZONS)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    cfg = KNNConfig()
    x = rng.normal(size=(600, len(cfg.features))) * rng.uniform(0.1, 10, len(cfg.features))
    y = 0.01 * np.tanh(x[:, :H]) + rng.normal(scale=0.001, size=(600, H))
    return x, y


def test_the_family_keeps_the_recipe_contract():
    assert plugins.problem("knn", KNN) is None
    assert KNN.doc and KNN.inputs.name == "price_features"
    assert ldtm_recipe_knn.__doc__.splitlines()[0].startswith("k-nearest neighbours")


def test_it_predicts_finite_log_returns_and_the_same_after_a_reload(data):
    x, y = data
    cfg = KNNConfig(k=10, max_rows=400)
    state = KNN.fit(x, y, cfg)
    out = KNN.predict(state, x[:50], cfg)
    assert out.shape == (50, H) and np.isfinite(out).all()
    assert np.corrcoef(out[:, 0], y[:50, 0])[0, 1] > 0.5  # it learns the planted relation

    text = json.dumps(KNN.dump(state), allow_nan=False)  # JSON data, nothing else
    again = KNN.load(json.loads(text), cfg, x.shape[1])
    np.testing.assert_array_equal(KNN.predict(again, x[:50], cfg), out)
    assert len(again.rows) == 400  # max_rows kept


def test_the_rows_kept_are_drawn_with_the_seed():
    assert sample(10, KNNConfig(max_rows=20)).tolist() == list(range(10))
    a, b = sample(1000, KNNConfig(max_rows=100, seed=1)), sample(1000, KNNConfig(max_rows=100, seed=1))
    assert (a == b).all() and len(set(a)) == 100 and (np.diff(a) > 0).all()
    assert (sample(1000, KNNConfig(max_rows=100, seed=2)) != a).any()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"k": 0}, "--set k must be a whole number >= 1"),
        ({"weights": "gaussian"}, "--set weights must be one of uniform, distance"),
        ({"features": ("ret_1", "no_such_feature")}, "no_such_feature"),
    ],
)
def test_a_bad_setting_is_refused_by_name(setting, message):
    with pytest.raises(InputError, match=message):
        KNNConfig(**setting)


def test_a_tampered_artifact_does_not_load(data):
    x, y = data
    cfg = KNNConfig(k=5)
    doc = KNN.dump(KNN.fit(x[:100], y[:100], cfg))
    with pytest.raises(ValueError, match="rows has shape"):
        KNN.load({**doc, "rows": [r[:-1] for r in doc["rows"]]}, cfg, x.shape[1])
