"""The fold store keeps one result per key with its own weights (issue 28 item 6), and the key names
what changes a fit's numbers on this host (issue 28 item 7)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings

from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import backtest as bt
from ldtm_core.learning import fold_cache, precision
from ldtm_core.learning.model import LDTM, get_profile

CFG = get_profile("demo", max_epochs=2, patience=1)
DATES = np.array(["2024-01-02", "2024-01-03"], dtype="datetime64[D]")


def _model(seed: int) -> LDTM:
    torch.manual_seed(seed)
    return LDTM(CFG)


def _store(engine, s, key, model, pred):
    return fold_cache.store(
        engine,
        s,
        key=key,
        ticker="AAPL",
        signature="sig",
        data_fingerprint="fp",
        cutoff=dt.date(2024, 1, 1),
        seed=0,
        parent=None,
        model=model,
        pred=pred,
        test_dates=DATES,
        epochs=2,
        best_epoch=1,
        val_loss=0.5,
    )


def _same(state_a, state_b) -> bool:
    return all(torch.equal(state_a[k], state_b[k]) for k in state_a)


@pytest.fixture
def store_world(engine, db_url, tmp_path):
    ingest(engine, ["AAPL"], start="2023-06-01", end="2023-07-31")
    return make_settings(tmp_path, db_url)


def test_an_existing_key_keeps_its_original_weights_and_result(engine, store_world):
    s, key = store_world, "k" * 64
    first, second = _model(1), _model(2)
    _store(engine, s, key, first, np.full((2, len(HORIZONS)), 1.0))
    kept = _store(engine, s, key, second, np.full((2, len(HORIZONS)), 2.0))
    got = fold_cache.load(engine, s, key)
    assert got.weights is not None, "the original weights no longer verify"
    assert _same(fold_cache.load_weights(got.weights), first.state_dict())
    assert (got.pred == 1.0).all() and (fold_cache.stored_predictions(engine, key)[1] == 1.0).all()
    assert (kept == 1.0).all()  # what is stored under the key is what the caller scores


def test_weights_lost_then_refit_replaces_row_and_file_together(engine, store_world):
    s, key = store_world, "p" * 64
    _store(engine, s, key, _model(1), np.full((2, len(HORIZONS)), 1.0))
    for f in fold_cache.weights_dir(s).glob("*.pt"):  # the prune
        f.unlink()
    assert fold_cache.load(engine, s, key).weights is None
    refit = _model(2)
    stored = _store(engine, s, key, refit, np.full((2, len(HORIZONS)), 2.0))
    got = fold_cache.load(engine, s, key)
    assert got.weights is not None, "a refit after a prune left the key without weights for good"
    assert _same(fold_cache.load_weights(got.weights), refit.state_dict())
    assert (got.pred == 2.0).all() and (fold_cache.stored_predictions(engine, key)[1] == 2.0).all()
    assert (stored == 2.0).all()


def test_prune_refit_load_through_the_backtest(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-06-01", end="2024-06-28")
    make_model(engine, s, "AAPL", cfg=CFG)
    first = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    for f in fold_cache.weights_dir(s).glob("*.pt"):
        f.unlink()
    again = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    assert again.reused_folds == 0  # no weights: refitted
    for fold in again.folds:
        got = fold_cache.load(engine, s, fold.fit.fold_key)
        assert got.weights is not None
    third = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    assert third.reused_folds == 2
    assert [f.scores.hits for f in third.folds] == [f.scores.hits for f in first.folds]


def _key(runtime):
    return fold_cache.fold_key("sig", "fp", dt.date(2024, 1, 1), 0, None, runtime)


def test_the_key_changes_with_precision_device_torch_and_learning_code():
    base = fold_cache.runtime(CFG, "cpu")
    assert fold_cache.runtime(CFG, "cpu") == base  # the same host twice: the same key
    assert _key(fold_cache.runtime(CFG, "cpu")) == _key(base)
    # The other precision than this host's (a CPU with native bf16 resolves `auto` to bf16).
    for field, other in (
        ("precision", "fp32" if base.precision == "bf16" else "bf16"),
        ("device", "cuda NVIDIA H100"),
        ("torch", "9.9.9"),
        ("code", "0" * 64),
    ):
        changed = base._replace(**{field: other})
        assert _key(changed) != _key(base), field


def test_the_runtime_resolves_auto_precision_as_training_does(monkeypatch):
    monkeypatch.setattr(precision, "cpu_can_run_bf16", lambda: True)  # a forced bf16 resolves where it runs
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cpu").precision == "bf16"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cpu").precision == "fp32"
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="bf16"), "cpu").precision == "bf16"
    assert fold_cache.runtime(CFG, "cpu").torch == torch.__version__


def test_the_code_hash_follows_the_learning_files(tmp_path, monkeypatch):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    monkeypatch.setattr(fold_cache, "LEARNING_CODE", (a,))
    before = fold_cache.code_hash.__wrapped__()
    a.write_text("x = 2\n")
    assert fold_cache.code_hash.__wrapped__() != before


def test_the_runtime_on_cuda_names_the_card_and_its_resolved_precision(monkeypatch):
    """No GPU here: the CUDA branch with the card's answers planted."""
    from ldtm_core.learning import training_loop

    monkeypatch.setattr(training_loop, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    from ldtm_core.learning import precision

    monkeypatch.setattr(precision, "cuda_amp_speedup", lambda device, dtype: 0.7)  # AMP slower here
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda").precision == "fp32"
    monkeypatch.setattr(precision, "cuda_amp_speedup", lambda device, dtype: 1.5)  # AMP faster here
    rt = fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda")
    assert (rt.precision, rt.device) == ("bf16", "cuda NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda").precision == "fp16"
    assert _key(rt) != _key(fold_cache.runtime(CFG, "cpu"))
