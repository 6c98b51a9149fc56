"""Where a global recipe fits (`--set device=...`): a GPU path where the library has one, untested here
(no GPU), refused by name where this host lacks it; never part of the signature, so stored models and
fold keys keep validating and a GPU fit shares its folds with the CPU fit of the same recipe."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import torch
from accountability_helpers import ingest, make_settings
from sqlalchemy import func, select

from ldtm_core.errors import InputError
from ldtm_core.learning.recipes import global_fit
from ldtm_core.learning.recipes.family import config_from
from ldtm_core.learning.recipes.global_lstm import GlobalLSTMConfig
from ldtm_core.learning.recipes.market import MarketConfig
from ldtm_core.learning.recipes.tabular import TabularConfig
from ldtm_core.schema import model_registry

AS_OF = dt.date(2024, 3, 28)
GPU = {"ridge": "gpu", "lightgbm": "gpu", "lightgbm_market": "cuda", "global_lstm": "cuda"}


@pytest.mark.parametrize("recipe", sorted(GPU))
def test_the_device_is_not_part_of_the_signature(recipe):
    cpu = global_fit.recipe_config(recipe)
    gpu = global_fit.recipe_config(recipe, {"device": GPU[recipe]})
    assert gpu.device == GPU[recipe] and cpu.device == "cpu"
    assert gpu.signature == cpu.signature
    # A row stored before the field existed reads back with the same signature.
    stored = {k: v for k, v in cpu.to_dict().items() if k != "device"}
    assert config_from(recipe, stored).signature == cpu.signature
    # What the fit is still is: another seed is another signature.
    assert global_fit.recipe_config(recipe, {"seed": 1}).signature != cpu.signature


def test_an_unknown_device_is_refused_by_name():
    with pytest.raises(InputError, match="lightgbm: device must be one of cpu, gpu, cuda, got 'tpu'"):
        TabularConfig(kind="lightgbm", device="tpu")
    with pytest.raises(InputError, match="ridge_market: device must be one of"):
        MarketConfig(device="metal")
    with pytest.raises(InputError, match="global_lstm: device must be cpu, cuda or cuda:N, got 'gpu'"):
        GlobalLSTMConfig(device="gpu")


def test_lightgbm_passes_its_device_to_the_booster_only_when_asked():
    assert "device_type" not in TabularConfig(kind="lightgbm").lightgbm_params()
    assert TabularConfig(kind="lightgbm", device="gpu").lightgbm_params()["device_type"] == "gpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU: the refusal cannot happen")
@pytest.mark.parametrize(
    ("recipe", "device", "why"),
    [
        ("global_lstm", "cuda", "global_lstm: device cuda is not available here"),
        ("lightgbm", "cuda", "CUDA Tree Learner was not enabled in this build"),
    ],
)
def test_a_gpu_fit_on_a_host_without_one_fails_every_ticker_by_name_and_writes_nothing(
    engine, tmp_path, db_url, recipe, device, why
):
    tickers = ["AAPL", "MSFT"]
    ingest(engine, tickers)
    settings = make_settings(tmp_path, db_url)
    outcomes = global_fit.train_global(
        engine, settings, recipe, tickers, as_of=AS_OF, overrides={"device": device}
    )
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert all(recipe in o.reason and why in o.reason for o in outcomes), [o.reason for o in outcomes]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(model_registry)).scalar_one() == 0
    assert not list((settings.checkpoint_dir / "recipes").rglob("*.json"))
    # The same recipe on the CPU trains, and its row records the device it ran on.
    done = global_fit.train_global(
        engine,
        settings,
        recipe,
        tickers,
        as_of=AS_OF,
        overrides={"epochs": 1} if recipe == "global_lstm" else None,
    )
    assert [o.status for o in done] == ["trained", "trained"], [o.reason for o in done]
    with engine.connect() as conn:
        config_json = conn.execute(select(model_registry.c.config_json)).first()[0]
    assert json.loads(config_json)["device"] == "cpu"
