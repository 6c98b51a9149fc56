"""The learning-rate schedule is a config choice, applied as configured, and old configs keep their
registry signature (stored folds stay reusable, the gate keeps accepting their backtests)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic_market import generate
from ldtm_core.errors import InputError
from ldtm_core.learning import training_loop
from ldtm_core.learning.model import LEGACY_VALUES, ModelConfig, get_profile
from ldtm_core.learning.registry import config_signature
from ldtm_core.learning.split import purged_split
from ldtm_core.learning.training import parse_overrides

LR = 3e-3  # the demo profile's


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def split():
    df = generate(["AAPL"], "2023-01-03", "2023-12-29", seed=3)
    s = build_samples(df.drop(columns="ticker"), 20)
    tr, va = purged_split(s, 0.15)
    return s.subset(tr), s.subset(va)


def _cfg(**kw) -> ModelConfig:
    return get_profile("demo", window=20, hidden_size=8, head_hidden=4, **kw)


def test_cosine_anneals_over_max_epochs(split):
    fit = training_loop.fit(*split, _cfg(max_epochs=4, patience=10, lr_schedule="cosine"))
    expected = [LR * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert fit.lrs == pytest.approx(expected, rel=1e-9)


def test_cosine_expected_anneals_over_its_length_then_holds_the_floor(split):
    cfg = _cfg(max_epochs=6, patience=10, lr_schedule="cosine_expected", lr_decay_epochs=3)
    fit = training_loop.fit(*split, cfg)
    floor = training_loop.LR_FLOOR
    cosine = [floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * k / 3)) for k in range(4)]
    assert fit.epochs == 6
    assert fit.lrs == pytest.approx([LR * f for f in cosine + [floor, floor]], rel=1e-9)


def test_cosine_expected_length_is_capped_by_max_epochs():
    assert training_loop.decay_epochs(get_profile("reference", lr_schedule="cosine_expected")) == 15
    assert training_loop.decay_epochs(_cfg(max_epochs=8)) == 8  # the demo profile: over all its epochs
    assert training_loop.decay_epochs(_cfg(lr_decay_epochs=5)) == 5


def test_plateau_halves_the_rate_after_epochs_without_improvement():
    cfg = _cfg(lr_schedule="plateau", patience=6)  # halves after patience // 3 = 2 stale epochs
    opt = torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), lr=LR)
    sched = training_loop.make_scheduler(opt, cfg)
    lrs = []
    for val_loss in [1.0, 0.9, 0.9, 0.95, 0.91, 0.8, 0.85, 0.85, 0.85]:
        training_loop.step_scheduler(sched, val_loss)
        lrs.append(opt.param_groups[0]["lr"])
    # A new best resets the count; the third epoch without one (> 2) halves the rate.
    assert lrs == pytest.approx([LR] * 4 + [LR / 2] * 4 + [LR / 4], rel=1e-9)


def test_plateau_in_a_fit_lowers_the_rate_only_after_validation_stalls(split):
    lr = 0.1  # high enough that validation stalls within a few epochs
    fit = training_loop.fit(*split, _cfg(max_epochs=12, patience=3, lr_schedule="plateau", lr=lr))
    # Replayed from the fit's own validation losses: halve after 2 epochs (> patience // 3) without a
    # new best, the count restarting after each cut or new best.
    expected, best, bad = [], math.inf, 0
    for _, val_loss in fit.history:
        expected.append(lr)
        best, bad = (val_loss, 0) if val_loss < best else (best, bad + 1)
        if bad > 1:
            lr, bad = lr / 2, 0
    assert fit.lrs == pytest.approx(expected, rel=1e-12)
    if fit.epochs < 12:  # early stopping needs 3 stale epochs, so the rate was cut before it
        assert min(fit.lrs) < fit.lrs[0]


def test_unknown_schedule_is_refused_by_name():
    with pytest.raises(InputError, match="lr_schedule='linear'"):
        _cfg(lr_schedule="linear")
    with pytest.raises(InputError, match="lr_decay_epochs=0"):
        _cfg(lr_decay_epochs=0)
    assert parse_overrides(["lr_schedule=plateau", "lr_decay_epochs=12"]) == {
        "lr_schedule": "plateau",
        "lr_decay_epochs": 12,
    }


def test_configs_stored_before_the_schedule_existed_keep_their_signature_and_schedule():
    legacy = ModelConfig()  # the recipe stored configs trained with; its schedule: cosine over max_epochs
    assert legacy.lr_schedule == "cosine"
    stored = legacy.to_dict()
    assert not set(LEGACY_VALUES) & set(stored)  # the pre-schedule dict, byte for byte
    old_signature = hashlib.sha256(json.dumps(stored, sort_keys=True).encode()).hexdigest()
    assert config_signature(legacy) == old_signature
    # Read back as cosine, whatever the default may become.
    assert ModelConfig.from_dict(stored).lr_schedule == "cosine"
    assert ModelConfig.from_dict(stored) == legacy
    # Another schedule or length is another model: another signature (its folds are its own).
    expected = replace(legacy, lr_schedule="cosine_expected")
    shorter = replace(legacy, lr_schedule="cosine_expected", lr_decay_epochs=10)
    signatures = {config_signature(c) for c in (legacy, expected, shorter)}
    assert len(signatures) == 3
    for cfg in (expected, shorter):
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg
        assert cfg.signature == legacy.signature  # the architecture (version major) is unchanged


def test_fit_is_still_deterministic_per_schedule(split):
    for schedule in ("cosine_expected", "plateau"):
        a = training_loop.fit(*split, _cfg(max_epochs=2, lr_schedule=schedule))
        b = training_loop.fit(*split, _cfg(max_epochs=2, lr_schedule=schedule))
        assert a.lrs == b.lrs and a.val_loss == b.val_loss
        for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
            assert np.array_equal(pa.detach().numpy(), pb.detach().numpy())
