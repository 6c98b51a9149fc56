"""The LDTM network (SPEC §5): a stacked LSTM over a normalised window and three separate heads.

Read top-down: the config, the profiles, the module. Nothing here knows about data or databases.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace

import torch
from torch import nn

from ldtm_core.data.features import FEATURES, REFERENCE_FEATURES, unknown_features
from ldtm_core.errors import InputError
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.learning.cells import CELLS

LR_SCHEDULES = ("cosine", "cosine_expected", "plateau")

# Field -> the value configs stored before the field existed trained with (see ModelConfig.to_dict);
# lr_decay_epochs means nothing to their cosine schedule, so its default stands for them too. A config
# stored without `features` was trained on the reference recipe's.
LEGACY_VALUES: dict[str, object] = {
    "lr_schedule": "cosine",
    "lr_decay_epochs": 15,
    "fast_dropout": False,
    "features": REFERENCE_FEATURES,
    "cell": "lstm",
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture and training hyper-parameters. Every field can be overridden by name.

    The defaults are the recipe every config stored before the faster recipe trained with (batch 32, lr 1e-3,
    patience 5, torch's dropout); the `reference` profile below trains faster (REFERENCE).

    The inputs are `features`, names from the registry (`data.features.FEATURES`) in input order, the
    reference recipe's by default; `input_size` follows from them. The heads are always the horizons of
    `ldtm_core.horizons`, because every snapshot row records all of them; `horizons` is kept as a field so
    that a value outside that vocabulary is refused by name instead of training a model predict cannot use.
    """

    features: tuple[str, ...] = REFERENCE_FEATURES
    cell: str = "lstm"  # the recurrent layer: a kind of `learning.cells.CELLS`
    input_size: int = field(init=False)  # len(features): stored configs carry it, nobody sets it
    hidden_size: int = 128
    num_layers: int = 2
    dropout: float = 0.2
    window: int = 30
    head_hidden: int = 64
    horizons: tuple[str, ...] = HORIZONS
    # training
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-2
    max_epochs: int = 100
    # SPEC §5 / the seed: 10. Measured side by side (docs/performance.md, benchmarks/recipe.py): 5 gives
    # the same validation loss (+0.08 %) and backtest accuracy for 1.5x less training, so 5.
    patience: int = 5
    # The learning-rate schedule (training_loop.make_scheduler). "cosine", the seed's: T_max =
    # max_epochs = 100, so a 10-epoch fit keeps ~98 % of the rate. "cosine_expected": cosine over
    # `lr_decay_epochs` (about where fits stop: median 9-10 epochs at patience 5), then a 5 % floor.
    # "plateau": halved when validation stalls. Measured side by side (docs/performance.md,
    # benchmarks/lr_schedule.py): neither alternative saved epochs or moved quality beyond noise, so
    # the default stays cosine and every stored config keeps its signature.
    lr_schedule: str = "cosine"
    lr_decay_epochs: int = 15
    val_fraction: float = 0.15
    grad_accum_steps: int = 1
    # On a CPU, train the stacked LSTM one layer at a time with the dropout mask between layers drawn
    # from uniform noise: torch's own inter-layer dropout (bernoulli_) was 11-13 % of a reference step
    # and a uniform mask costs 2.5x less (docs/performance.md). Same distribution, other random draws;
    # inference, CUDA (cuDNN drops out inside its kernel) and the weights' layout are unchanged.
    fast_dropout: bool = False
    amp: str = "auto"  # auto (CUDA: bf16/fp16; CPU: bf16 where native, else fp32) | fp16 | bf16 | off
    compile: bool = False
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "input_size", len(self.features))
        self._check_features()
        self._check_cell()
        checks = {
            "hidden_size": self.hidden_size >= 1,
            "num_layers": self.num_layers >= 1,
            "window": self.window >= 2,
            "head_hidden": self.head_hidden >= 1,
            "batch_size": self.batch_size >= 1,
            "max_epochs": self.max_epochs >= 1,
            "patience": self.patience >= 1,
            "grad_accum_steps": self.grad_accum_steps >= 1,
            "dropout": 0.0 <= self.dropout < 1.0,
            "val_fraction": 0.0 < self.val_fraction < 0.9,
            "lr": self.lr > 0,
            "amp": self.amp in ("auto", "fp16", "bf16", "off"),
            "lr_schedule": self.lr_schedule in LR_SCHEDULES,
            "lr_decay_epochs": self.lr_decay_epochs >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InputError(f"invalid model config: {', '.join(f'{b}={getattr(self, b)!r}' for b in bad)}")
        if tuple(self.horizons) != HORIZONS:
            unknown = [h for h in self.horizons if h not in HORIZONS]
            what = f"unknown horizon(s) {', '.join(map(repr, unknown))}; " if unknown else ""
            raise InputError(
                f"invalid model config: horizons={','.join(map(str, self.horizons)) or '(none)'}: {what}"
                f"horizons must be {','.join(HORIZONS)} (every snapshot records all of them)"
            )

    def _check_cell(self) -> None:
        if self.cell not in CELLS:
            raise InputError(f"invalid model config: cell={self.cell!r}: choose one of {', '.join(CELLS)}")

    def _check_features(self) -> None:
        unknown = unknown_features(self.features)
        problems = [
            (
                unknown,
                f"unknown feature(s) {', '.join(map(repr, unknown))}; registered: {', '.join(FEATURES)}",
            ),
            (len(set(self.features)) != len(self.features), "a feature is listed twice"),
            (
                "close" not in self.features,
                "close is missing (targets are scaled by the window's close range)",
            ),
        ]
        for failed, what in problems:
            if failed:
                shown = ",".join(self.features) or "(none)"
                raise InputError(f"invalid model config: features={shown}: {what}")

    @property
    def architecture(self) -> dict:
        """What a checkpoint's weights depend on; a change here means a new version major."""
        return {
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "window": self.window,
            "input_size": self.input_size,
            "head_hidden": self.head_hidden,
            "features": list(self.features),
            "horizons": list(self.horizons),
            # an LSTM's signature predates the choice of cell, so it names only other kinds
            **({"cell": self.cell} if self.cell != LEGACY_VALUES["cell"] else {}),
        }

    @property
    def signature(self) -> str:
        blob = json.dumps(self.architecture, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict:
        d = asdict(self)
        # Fields added after configs were first stored are left out at the value every older config
        # trained with, so those configs keep their registry signature (and their stored folds).
        for name, legacy in LEGACY_VALUES.items():
            if d[name] == legacy:
                del d[name]
        d["horizons"] = list(self.horizons)
        if "features" in d:
            d["features"] = list(self.features)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        d = dict(d)
        # Stored configs carry input_size; it must agree with their features.
        stored_size = d.pop("input_size", None)
        _refuse_unknown(d)
        for name in ("horizons", "features"):
            if name in d:
                d[name] = tuple(d[name])
        # Absent means stored before the field existed (or left out by to_dict): the legacy value,
        # not today's default, which may differ.
        cfg = cls(**{**LEGACY_VALUES, **d})
        if stored_size is not None and stored_size != cfg.input_size:
            raise InputError(
                f"invalid model config: input_size={stored_size!r} for {cfg.input_size} features "
                f"({', '.join(cfg.features)})"
            )
        return cfg


# The seed's production model (~229K parameters), trained with the faster recipe (docs/performance.md, "A fit twice as fast on CPU")
# (docs/performance.md, benchmarks/recipe.py): batch 128 with the learning rate scaled linearly (4 x 1e-3),
# the cheaper CPU dropout mask, and patience 3: 1.55-2.0x less fit time (by CPU), for 0.5-0.9 % more
# validation loss (mostly patience 3; measured paired over 52-103 tickers). The recipe before it is
# ModelConfig()'s defaults, kept as the `reference_b32` profile.
REFERENCE = ModelConfig(batch_size=128, lr=4e-3, patience=3, fast_dropout=True)

PROFILES: dict[str, ModelConfig] = {
    "reference": REFERENCE,
    # The same model as trained before the faster recipe (batch 32, lr 1e-3, patience 5, torch's dropout): a
    # deployment whose champions came from it keeps their recipe (a new recipe must pass the gate's
    # recipe-change test to replace them).
    "reference_b32": ModelConfig(),
    # The performance guide's recommended upgrade: one config change away.
    "upgrade": replace(REFERENCE, hidden_size=256, num_layers=3, window=60, dropout=0.3),
    # Small enough that one ticker trains in a few seconds on a 2-core CPU.
    "demo": ModelConfig(
        hidden_size=32,
        num_layers=1,
        dropout=0.0,
        head_hidden=16,
        max_epochs=8,
        patience=3,
        batch_size=64,
        lr=3e-3,
    ),
}


def _refuse_unknown(values: dict) -> None:
    if "input_size" in values:
        raise InputError("input_size is not configurable: it is the number of features (set features)")
    unknown = set(values) - {f.name for f in fields(ModelConfig)}
    if unknown:
        raise InputError(f"unknown model config field(s): {', '.join(sorted(unknown))}")


def get_profile(name: str, **overrides) -> ModelConfig:
    if name not in PROFILES:
        raise InputError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    _refuse_unknown(overrides)
    return replace(PROFILES[name], **overrides)


class Head(nn.Module):
    """One horizon's tower: hidden -> head_hidden -> 1."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.hidden_size, cfg.head_hidden),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.head_hidden, 1),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class LDTM(nn.Module):
    """x [batch, window, features] -> normalised closes [batch, horizons]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        # Named `lstm` whatever its kind: the state_dict keys of every stored checkpoint.
        self.lstm = CELLS[cfg.cell].module(
            input_size=cfg.input_size,
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers,
            batch_first=True,
            dropout=cfg.dropout if cfg.num_layers > 1 else 0.0,
        )
        # Separate towers: each horizon weights the shared state differently (seed write-up).
        self.heads = nn.ModuleList(Head(cfg) for _ in cfg.horizons)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layerwise = isinstance(self.lstm, nn.LSTM) and self.lstm.dropout > 0  # torch.lstm's own fast path
        if self.training and self.cfg.fast_dropout and x.device.type == "cpu" and layerwise:
            out = self._lstm_layerwise(x)
        else:
            out, _ = self.lstm(x)
        last = out[:, -1, :]
        return torch.cat([head(last) for head in self.heads], dim=1)

    def _lstm_layerwise(self, x: torch.Tensor) -> torch.Tensor:
        """self.lstm in training mode, layer by layer (the same oneDNN kernel, the same parameters), with
        inverted dropout between layers from a uniform mask. x [batch, window, in] -> [batch, window, hidden]."""
        lstm, keep = self.lstm, 1.0 - self.lstm.dropout
        zeros = x.new_zeros(1, x.shape[0], lstm.hidden_size)
        h = x
        for layer in range(lstm.num_layers):
            weights = [
                getattr(lstm, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            ]
            # torch.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
            h, _, _ = torch.lstm(h, (zeros, zeros), weights, True, 1, 0.0, True, False, True)
            if layer < lstm.num_layers - 1:
                h = h * ((torch.rand(h.shape, device=h.device) < keep).to(h.dtype) / keep)
        return h
