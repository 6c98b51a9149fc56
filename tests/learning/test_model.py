"""The LDTM module and its profiles: size, the one-change upgrade, overrides and refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ldtm_core.data.features import REFERENCE_FEATURES
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.model import LDTM, PROFILES, ModelConfig, get_profile
from ldtm_core.learning.training import parse_overrides


def test_reference_has_about_227k_parameters():
    n = sum(p.numel() for p in LDTM(get_profile("reference")).parameters())
    assert abs(n - 227_000) / 227_000 <= 0.02
    # Independent count from the SPEC §5 architecture: 2-layer LSTM(11 -> 128) + three 128-64-1 heads.
    h, i = 128, len(REFERENCE_FEATURES)
    lstm = 4 * h * (i + h + 2) + 4 * h * (h + h + 2)
    heads = 3 * ((h * 64 + 64) + (64 + 1))
    assert n == lstm + heads


def test_reference_matches_spec():
    cfg = PROFILES["reference"]
    assert (cfg.hidden_size, cfg.num_layers, cfg.window, cfg.dropout, cfg.input_size) == (128, 2, 30, 0.2, 11)
    assert (cfg.val_fraction, cfg.head_hidden) == (0.15, 64)
    # The departures, measured (docs/performance.md): patience 5 instead of the seed's 10 (issue 12), then
    # batch 128 at a 4x learning rate, the CPU dropout mask and patience 3 (issue 31) -- each within the
    # seed noise band of validation loss and backtest accuracy. The seed's recipe is one override away.
    assert (cfg.batch_size, cfg.lr, cfg.patience, cfg.fast_dropout) == (128, 4e-3, 3, True)
    seed = get_profile("reference", batch_size=32, lr=1e-3, patience=10, fast_dropout=False)
    assert (seed.batch_size, seed.lr, seed.patience, seed.fast_dropout) == (32, 1e-3, 10, False)
    assert seed.signature == cfg.signature  # the same architecture: checkpoints of either load alike


def test_recipe_before_issue_31_is_the_config_defaults_and_keeps_its_stored_form():
    before = ModelConfig()
    assert (before.batch_size, before.lr, before.patience, before.fast_dropout) == (32, 1e-3, 5, False)
    stored = before.to_dict()
    assert "fast_dropout" not in stored  # configs stored before the field existed: byte for byte
    assert ModelConfig.from_dict(stored) == before
    assert PROFILES["reference_b32"] == before  # the old recipe stays one profile name away
    assert ModelConfig.from_dict(PROFILES["reference"].to_dict()) == PROFILES["reference"]


def test_upgrade_is_one_change_of_architecture_only():
    ref, up = PROFILES["reference"], PROFILES["upgrade"]
    changed = {f.name for f in dataclasses.fields(ModelConfig) if getattr(ref, f.name) != getattr(up, f.name)}
    assert changed == {"hidden_size", "num_layers", "window", "dropout"}
    assert (up.hidden_size, up.num_layers, up.window, up.dropout) == (256, 3, 60, 0.3)
    assert up.signature != ref.signature
    out = LDTM(up)(torch.rand(4, up.window, up.input_size))
    assert out.shape == (4, len(HORIZONS))


def test_forward_shape_and_heads_are_separate():
    cfg = get_profile("demo")
    model = LDTM(cfg)
    assert len(model.heads) == len(HORIZONS)
    assert model.heads[0].net[0].weight.data_ptr() != model.heads[1].net[0].weight.data_ptr()
    assert model(torch.rand(5, cfg.window, cfg.input_size)).shape == (5, len(HORIZONS))


def test_every_field_overridable():
    cfg = get_profile("reference", hidden_size=64, window=20, lr=5e-4, amp="off", compile=True)
    assert (cfg.hidden_size, cfg.window, cfg.lr, cfg.amp, cfg.compile) == (64, 20, 5e-4, "off", True)
    assert PROFILES["reference"].hidden_size == 128  # the profile itself is untouched


@pytest.mark.parametrize(
    "overrides",
    [
        {"hidden_size": 0},
        {"dropout": 1.0},
        {"val_fraction": 0.0},
        {"amp": "fp8"},
        {"batch_size": -1},
        {"lr": 0},
    ],
)
def test_invalid_values_refused(overrides):
    with pytest.raises(InputError, match=next(iter(overrides))):
        get_profile("reference", **overrides)


def test_unknown_profile_and_field_refused():
    with pytest.raises(InputError, match="unknown profile"):
        get_profile("huge")
    with pytest.raises(InputError, match="hiden_size"):
        get_profile("reference", hiden_size=3)


def test_parse_overrides_types_and_errors():
    got = parse_overrides(["hidden_size=64", "lr=0.01", "compile=true", "amp=bf16", "max_epochs = 3"])
    assert got == {"hidden_size": 64, "lr": 0.01, "compile": True, "amp": "bf16", "max_epochs": 3}
    assert isinstance(got["hidden_size"], int) and isinstance(got["lr"], float)
    for bad, msg in [
        ("hidden_size", "key=value"),
        ("nope=1", "unknown"),
        ("hidden_size=abc", "int"),
        ("compile=maybe", "bool"),
    ]:
        with pytest.raises(InputError, match=msg):
            parse_overrides([bad])


def test_config_roundtrip_through_dict():
    cfg = get_profile("upgrade", seed=7)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_fixed_vocabulary_fields_are_refused_by_name():
    """Issue 10: `--set horizons=1` trained a 1-head model that predict could not use."""
    with pytest.raises(InputError, match=r"unknown horizon\(s\) '1'"):
        ModelConfig(horizons=("1",))
    with pytest.raises(InputError, match="horizons must be next_day,next_monday,one_month"):
        ModelConfig(horizons=("one_month", "next_day", "next_monday"))
    with pytest.raises(InputError, match="close is missing"):
        get_profile("demo", features=("open",))
    with pytest.raises(InputError, match="unknown feature\\(s\\) 'made_up'; registered: open,"):
        get_profile("demo", **parse_overrides(["features=close,rsi_14,made_up"]))
    with pytest.raises(InputError, match="listed twice"):
        ModelConfig(features=("close", "close"))
    with pytest.raises(InputError, match="input_size is not configurable"):
        get_profile("demo", input_size=12)
    with pytest.raises(InputError, match="--set input_size: not configurable"):
        parse_overrides(["input_size=12"])


def test_features_are_a_config_field_from_the_registry():
    cfg = get_profile("demo", **parse_overrides(["features=close,rsi_14,volume"]))
    assert cfg.features == ("close", "rsi_14", "volume") and cfg.input_size == 3
    assert cfg.to_dict()["features"] == ["close", "rsi_14", "volume"]
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.signature != get_profile("demo").signature  # other inputs, other architecture
    # The reference recipe's tuple is left out of the stored dict: configs stored before the field keep
    # their registry signature.
    assert "features" not in get_profile("demo").to_dict()


def test_configs_stored_with_the_features_list_still_load():
    stored = {**get_profile("upgrade").to_dict(), "features": list(REFERENCE_FEATURES)}
    assert ModelConfig.from_dict(stored) == get_profile("upgrade")
    with pytest.raises(InputError, match="unknown feature"):
        ModelConfig.from_dict({**stored, "features": ["close", "made_up"]})
    with pytest.raises(InputError, match="input_size=11 for 2 features"):
        ModelConfig.from_dict({**stored, "features": ["close", "open"]})


def _layerwise_reference(model: LDTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Two single-layer LSTMs carrying the stacked module's weights, `mask` (already scaled) between them."""
    cfg = model.cfg
    layers = [torch.nn.LSTM(cfg.input_size, cfg.hidden_size, batch_first=True)]
    layers.append(torch.nn.LSTM(cfg.hidden_size, cfg.hidden_size, batch_first=True))
    for i, layer in enumerate(layers):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(layer, f"{name}_l0").data.copy_(getattr(model.lstm, f"{name}_l{i}"))
    h, _ = layers[0](x)
    h, _ = layers[1](h * mask)
    return h


def test_fast_dropout_is_the_same_network_with_a_uniform_mask_between_layers(monkeypatch):
    cfg = get_profile("reference", fast_dropout=True)
    torch.manual_seed(0)
    model = LDTM(cfg).train()
    x = torch.randn(8, cfg.window, cfg.input_size)
    # The mask the layer-wise path draws: uniform < keep, scaled by 1/keep (inverted dropout).
    torch.manual_seed(1)
    uniform = torch.rand(8, cfg.window, cfg.hidden_size)
    mask = (uniform < 1 - cfg.dropout).float() / (1 - cfg.dropout)
    torch.manual_seed(1)
    got = model._lstm_layerwise(x)
    torch.testing.assert_close(got, _layerwise_reference(model, x, mask), atol=1e-5, rtol=1e-5)
    # Dropped units are exactly zero in layer 2's input, about `dropout` of them; gradients reach every weight.
    assert 0.15 < float((mask == 0).float().mean()) < 0.25
    model(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.lstm.parameters())


def test_fast_dropout_changes_training_only():
    torch.manual_seed(0)
    plain = LDTM(get_profile("reference")).eval()
    fast = LDTM(get_profile("reference", fast_dropout=True))
    fast.load_state_dict(plain.state_dict())  # same parameter names: checkpoints load either way
    fast.eval()
    x = torch.randn(4, 30, len(REFERENCE_FEATURES))
    torch.testing.assert_close(fast(x), plain(x), atol=0, rtol=0)
    # Without dropout there is nothing to draw: the layer-wise path is not taken and training is identical.
    torch.manual_seed(0)
    a = LDTM(get_profile("reference", dropout=0.0)).train()
    torch.manual_seed(0)
    b = LDTM(get_profile("reference", dropout=0.0, fast_dropout=True)).train()
    torch.testing.assert_close(a(x), b(x), atol=0, rtol=0)


def test_the_profile_setting_offers_every_profile():
    from ldtm_core.config import SETTINGS
    from ldtm_core.learning.tuning_store import TUNED

    assert set(SETTINGS["LDTM_PROFILE"].choices) == set(PROFILES) | {TUNED}
