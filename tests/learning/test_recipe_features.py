"""Each tabular model records the `price_features` it reads, so adding a feature to the library is
additive: a stored ridge, LightGBM or market model keeps its signature, keeps serving and keeps its fold
keys, and the next fit reads the new feature too (issue 59)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest
from accountability_helpers import ingest, make_settings

from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.data import price_features
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.recipes import global_backtest, global_fit, serving
from ldtm_core.learning.recipes.family import TARGET_DEFINITION, config_from
from ldtm_core.learning.recipes.tabular import TabularConfig
from ldtm_core.learning.registry import get_model

TICKERS = ["AAPL", "MSFT", "NVDA"]


def _signature_before_feature_lists(cfg: TabularConfig) -> str:
    """The signature as the release before feature lists computed it (the whole library's fingerprint)."""
    config = {k: v for k, v in cfg.to_dict().items() if k not in ("device", "features")}
    spec = {
        "config": config,
        "features_fingerprint": price_features.fingerprint(),
        "horizons": [h.name for h in HORIZONS],
        "targets": TARGET_DEFINITION,
    }
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def test_a_config_stored_without_features_reads_the_first_library_and_signs_as_before():
    stored = {"recipe": "ridge", "alpha": 2.0, "seed": 0, "kind": "ridge"}  # a row of the previous release
    cfg = config_from("ridge", stored)
    assert cfg.features == price_features.FIRST_LIBRARY == price_features.feature_names()
    assert cfg.signature == _signature_before_feature_lists(cfg)
    market = config_from("lightgbm_market", {"market": "QQQ"})
    assert market.features == price_features.FIRST_LIBRARY

    chosen = config_from("ridge", {**stored, "features": ["ret_1", "vol_20"]})
    assert chosen.features == ("ret_1", "vol_20") and chosen.signature != cfg.signature
    with pytest.raises(InputError, match="'ret_7' are not in the library"):
        config_from("ridge", {**stored, "features": ["ret_1", "ret_7"]})
    with pytest.raises(InputError, match="needs distinct feature names"):
        config_from("ridge", {**stored, "features": ["ret_1", "ret_1"]})


def _library_with_a_new_feature() -> tuple[str, tuple]:
    """price_features.py's source and FEATURES as an edit adding a feature would leave them: its own
    function, its entry, and a window added to a constant the entries read."""
    path = Path(price_features.__file__)
    source = path.read_text(encoding="utf-8")
    added = source.replace("RETURN_WINDOWS = (1, 5, 10, 20, 60)", "RETURN_WINDOWS = (1, 5, 10, 20, 60, 120)")
    added = added.replace(
        "def _range(b: Bars) -> pd.DataFrame:",
        "def _gap(b: Bars) -> pd.DataFrame:\n    return np.log(b.open / b.close.shift(1))\n\n\n"
        "def _range(b: Bars) -> pd.DataFrame:",
    )
    added = added.replace(
        '    Feature("range_1", 1, "(h_t - l_t) / c_t", _range),',
        '    Feature("range_1", 1, "(h_t - l_t) / c_t", _range),\n    Feature("gap_1", 2, "ln(o_t / c_{t-1})", _gap),',
    )
    assert added.count("_gap") == 2 and "120)" in added

    def _gap(b):
        return b.close

    _gap.__qualname__ = "_gap"  # as defined at the top of the edited module
    new = price_features.Feature("gap_1", 2, "ln(o_t / c_{t-1})", _gap)
    return added, (*price_features.FEATURES, new)


def test_adding_a_feature_leaves_the_code_of_every_other_list_unchanged():
    first = price_features.FIRST_LIBRARY
    source, features = _library_with_a_new_feature()
    assert price_features.code_for(first, source, features) == price_features.code_for(first)
    assert price_features.code_for(("ret_1",), source, features) == price_features.code_for(("ret_1",))
    assert price_features.code_for((*first, "gap_1"), source, features) != price_features.code_for(first)
    # An edit of a feature a model reads, or of the machinery every feature goes through, changes it.
    edited = source.replace("np.log(b.close / b.close.shift(k))", "np.log(b.close / b.close.shift(k + 1))")
    assert edited != source
    assert price_features.code_for(("ret_1",), edited, features) != price_features.code_for(("ret_1",))
    assert price_features.code_for(("vol_5",), edited, features) == price_features.code_for(("vol_5",))
    machinery = source.replace("return num / den.where(den > 0)", "return num / den.where(den >= 0)")
    assert machinery != source and price_features.code_for(
        ("ret_1",), machinery, features
    ) != price_features.code_for(("ret_1",))


@pytest.fixture
def store(engine, tmp_path, db_url):
    ingest(engine, TICKERS)
    serving.clear_cache()
    global_backtest._runtime.cache_clear()
    yield engine, make_settings(tmp_path, db_url)
    global_backtest._runtime.cache_clear()


def test_a_stored_model_keeps_serving_and_its_fold_keys_after_a_feature_is_added(store, monkeypatch):
    from ldtm_core.learning.recipes.global_backtest import backtest_fit

    engine, settings = store
    outcomes = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=dt.date(2024, 3, 28))
    before = backtest_fit(engine, settings, outcomes[0].model_id, folds=2)
    assert before.refit_folds == 2

    # The library grows by one feature (an existing function on another window).
    added = price_features.Feature("ret_2", 3, "ln(c_t / c_{t-2})", price_features._log_return(2))
    monkeypatch.setattr(price_features, "FEATURES", (*price_features.FEATURES, added))
    assert len(price_features.feature_names()) == len(price_features.FIRST_LIBRARY) + 1
    serving.clear_cache()
    global_backtest._runtime.cache_clear()

    stored = get_model(engine, outcomes[0].model_id)
    assert config_from("ridge", json.loads(stored.config_json)).features == price_features.FIRST_LIBRARY
    again = backtest_fit(engine, settings, outcomes[0].model_id, folds=2)
    assert (again.refit_folds, again.reused_folds) == (0, 2)  # the same fold keys: nothing refitted
    result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")
    assert result.tickers_predicted == TICKERS and not result.failed  # still serving

    # The next fit reads the library as it is now, and records it.
    refit = global_fit.train_global(engine, settings, "ridge", TICKERS, as_of=dt.date(2024, 3, 28))
    cfg = config_from("ridge", json.loads(get_model(engine, refit[0].model_id).config_json))
    assert cfg.features[-1] == "ret_2" and len(cfg.features) == len(price_features.FIRST_LIBRARY) + 1
