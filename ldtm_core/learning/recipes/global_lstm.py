"""The global LSTM: one LSTM network fitted once over every ticker's windows, predicting each horizon's
log return (Y, HORIZONS order), as the tabular recipes do.

Its inputs (`WINDOWS`) are what the per-ticker LSTM reads: the 11 reference features
(`data.features.REFERENCE_FEATURES`) of the row's own ticker over the `window` sessions ending on the
row's date, each window min-max normalised per feature (`samples.normalise_windows`), flattened oldest
step first. A row reads no bar after its date, and no bar before a hole longer than
LDTM_MAX_GAP_SESSIONS (features restart there, as the per-ticker LSTM's do).

torch is imported only inside the functions that fit, predict or rebuild the network: the registry and
the Dagster code server import this module without it. The artifact is JSON data (every tensor of the
state dict as its shape and flat values), never a pickle or `torch.load`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ldtm_core.data.features import REFERENCE_FEATURES, WARMUP_ROWS, feature_array
from ldtm_core.data.price_gaps import segment_ids
from ldtm_core.data.samples import normalise_windows
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.allocator import keep_freed_buffers
from ldtm_core.learning.price_windows import PRICE_FIELDS, RSI_SETTLE_ROWS
from ldtm_core.learning.recipes.family import Family, RecipeConfig
from ldtm_core.learning.recipes.inputs import Inputs

KIND = "global_lstm"
N_FEATURES = len(REFERENCE_FEATURES)
# Bump when what a window holds changes but its names and window do not (a feature's formula, the
# normalisation, the segment rule): the fingerprint, hence every stored fit's signature, changes with it.
WINDOWS_VERSION = 1
NORMALISATION = (
    "per window, per feature min-max to [0, 1], 0 where constant (samples.normalise_windows), float32; "
    "features restart after a hole longer than LDTM_MAX_GAP_SESSIONS (price_gaps.segment_ids)"
)
PREDICT_CHUNK = 8192  # rows per forward pass: bounds the activations' memory on a large panel


@dataclass(frozen=True)
class GlobalLSTMConfig(RecipeConfig):
    """The global LSTM's settings. The defaults fit 103 tickers x 5 years of synthetic bars (119k rows)
    in 54 s on one thread of a 2-core AMD EPYC (2 threads: 48 s), where the per-ticker LSTMs of the same
    universe take 186 s on both cores; 103 evenings' forecasts take ~3 ms."""

    kind: str = KIND
    window: int = 30  # sessions per window, the per-ticker LSTM's
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.1  # between the LSTM layers (torch's); none with one layer
    epochs: int = 4  # ~13 s each at the defaults above: a backtest refits once per fold
    # Rows drawn (without replacement) per epoch: at most this many, so a fit's time stops growing with
    # the universe; overlapping windows of one ticker are near-duplicates, so a sample loses little.
    epoch_rows: int = 131_072
    batch_size: int = 128
    lr: float = 3e-3  # AdamW, cosine-annealed to 5 % over the fit
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    num_threads: int = 1
    # Where the fit runs: "cuda" (or "cuda:N") trains on a GPU, not bit-reproducible there and not
    # tested here (no GPU); the artifact and every forecast are computed on the CPU either way.
    device: str = "cpu"

    def __post_init__(self):
        if self.kind != KIND:
            raise InputError(f"global LSTM recipe kind {self.kind!r} is not {KIND!r}")
        positive = ("window", "hidden", "layers", "epochs", "epoch_rows", "batch_size", "num_threads")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{KIND}: {name} must be a positive integer, got {value!r}")
        if self.window < 2:
            raise InputError(f"{KIND}: window must be at least 2 sessions, got {self.window}")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"{KIND}: dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise InputError(f"{KIND}: {name} must be positive, got {getattr(self, name)!r}")
        if not self.weight_decay >= 0:
            raise InputError(f"{KIND}: weight_decay must be non-negative, got {self.weight_decay!r}")
        if self.device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", self.device):
            raise InputError(f"{KIND}: device must be cpu, cuda or cuda:N, got {self.device!r}")


def fit_device(cfg: GlobalLSTMConfig):
    """The torch device a fit of `cfg` runs on; InputError naming it where this torch has no such GPU."""
    import torch

    device = torch.device(cfg.device)
    if device.type == "cuda":
        index = device.index or 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise InputError(
                f"{KIND}: device {cfg.device} is not available here (torch {torch.__version__}, "
                f"{torch.cuda.device_count()} CUDA device(s))"
            )
    return device


# --- the inputs: the per-ticker LSTM's normalised windows, one row per (ticker, evening) ----------------


def window_names(cfg: GlobalLSTMConfig) -> tuple[str, ...]:
    """`feature@t-k` for k from window - 1 (oldest) to 0 (the row's date), REFERENCE_FEATURES within."""
    return tuple(f"{f}@t-{k}" for k in range(cfg.window - 1, -1, -1) for f in REFERENCE_FEATURES)


def _segment_windows(values: dict[str, np.ndarray], window: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows relative to the segment, [m, window * 11] normalised windows) for one gap-free run of one
    ticker's bars: the features as `compute_features` makes them (warm-up rows dropped), each window of
    `window` consecutive feature rows normalised as `build_samples` normalises it."""
    feats = feature_array(*(values[f][None, :] for f in PRICE_FIELDS))[0, WARMUP_ROWS:]  # [L - warm-up, 11]
    if len(feats) < window:
        return np.empty(0, dtype=np.intp), np.empty((0, window * N_FEATURES))
    windows = sliding_window_view(feats, window, axis=0).transpose(0, 2, 1)  # [m, window, 11]
    # A bad bar (NaN, zero close) leaves its window unknown: it is not skipped over as a missing row.
    ok = np.isfinite(windows).all(axis=(1, 2))
    x, _, _ = normalise_windows(windows[ok])
    rows = WARMUP_ROWS + window - 1 + np.flatnonzero(ok)
    return rows, x.reshape(len(x), -1).astype(np.float64)


def compute_windows(bars: pd.DataFrame, cfg: GlobalLSTMConfig, context: dict) -> np.ndarray:
    """float64 [rows, window * 11]: each row's normalised window (`window_names` order), NaN until the
    ticker (or its segment after a long hole) has `WARMUP_ROWS + window` bars."""
    out = np.full((len(bars), cfg.window * N_FEATURES), np.nan)
    if not len(bars):
        return out
    codes, _ = pd.factorize(bars["ticker"].to_numpy(dtype=object), use_na_sentinel=False)
    # Ticker by ticker, each in the order given (its dates increasing): rows of tickers may interleave.
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    days = pd.DatetimeIndex(pd.to_datetime(bars["date"])).values.astype("datetime64[D]")[order]
    values = {
        f: pd.to_numeric(bars[f], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)[order]
        for f in PRICE_FIELDS
    }
    need = WARMUP_ROWS + cfg.window
    for lo, hi in zip(starts, np.r_[starts[1:], len(order)], strict=True):
        segments = segment_ids(days[lo:hi])
        cuts = lo + np.flatnonzero(np.r_[True, segments[1:] != segments[:-1]])
        for a, b in zip(cuts, np.r_[cuts[1:], hi], strict=True):
            if b - a < need:
                continue
            rows, x = _segment_windows({f: v[a:b] for f, v in values.items()}, cfg.window)
            out[order[a + rows]] = x
    return out


def windows_fingerprint(cfg: GlobalLSTMConfig) -> str:
    """sha256 of what a window holds, as canonical JSON: the features, the window, the normalisation."""
    spec = {
        "version": WINDOWS_VERSION,
        "features": list(REFERENCE_FEATURES),
        "warmup_rows": WARMUP_ROWS,
        "window": cfg.window,
        "normalisation": NORMALISATION,
    }
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def windows_lookback(cfg: GlobalLSTMConfig) -> int:
    # RSI is Wilder-recursive from the series' start: RSI_SETTLE_ROWS more bars make a tail's RSI agree
    # with the full history's to ~1e-8 (price_windows), so serving reads what training read.
    return cfg.window + WARMUP_ROWS + RSI_SETTLE_ROWS


WINDOWS = Inputs("lstm_windows", window_names, compute_windows, windows_fingerprint, windows_lookback)


# --- the network --------------------------------------------------------------------------------------


@dataclass
class GlobalLSTMState:
    """A fitted global LSTM: the network (a torch ModuleDict: `lstm`, `head`) and each horizon's Y
    scale (the network predicts Y / y_scale)."""

    net: Any
    y_scale: np.ndarray  # [len(HORIZONS)] float64


def _network(cfg: GlobalLSTMConfig):
    from torch import nn

    return nn.ModuleDict(
        {
            "lstm": nn.LSTM(
                N_FEATURES,
                cfg.hidden,
                cfg.layers,
                batch_first=True,
                dropout=cfg.dropout if cfg.layers > 1 else 0.0,
            ),
            "head": nn.Linear(cfg.hidden, len(HORIZONS)),
        }
    )


def _forward(net, x):
    out, _ = net["lstm"](x)
    return net["head"](out[:, -1])  # the last step's state: the window up to the row's date


@contextmanager
def _torch_threads(n: int):
    """torch on `n` intra-op threads for the block, the process's setting restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _windows_tensor(xs: np.ndarray, cfg: GlobalLSTMConfig, what: str):
    import torch

    xs = np.asarray(xs)
    width = cfg.window * N_FEATURES
    if xs.ndim != 2 or xs.shape[1] != width:
        raise InputError(f"{KIND} {what}: X has shape {xs.shape}, expected (n, {width})")
    # The windows were float32 before they were float64 (normalise_windows): this cast is exact.
    return torch.from_numpy(
        np.ascontiguousarray(xs, dtype=np.float32).reshape(len(xs), cfg.window, N_FEATURES)
    )


def fit(xs: np.ndarray, ys: np.ndarray, cfg: GlobalLSTMConfig) -> GlobalLSTMState:
    """One network over every row: AdamW on the MSE of Y / its per-horizon std, seeded and on the CPU, so
    one seed gives one set of weights."""
    import torch

    x = _windows_tensor(xs, cfg, "fit")
    ys = np.asarray(ys, dtype=np.float64)
    if ys.shape != (len(x), len(HORIZONS)):
        raise InputError(f"{KIND} fit: Y has shape {ys.shape}, expected ({len(x)}, {len(HORIZONS)})")
    std = ys.std(axis=0)
    # Daily log returns are ~1e-2: scaled to unit variance, the loss and its gradients are well sized.
    y_scale = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    y = torch.from_numpy((ys / y_scale).astype(np.float32))
    # Each step frees and re-allocates the same MiB of gates and gathered rows: kept in the heap, not
    # page-faulted in again (allocator; 94 s -> 54 s for 103 tickers x 5 years, measured).
    keep_freed_buffers()
    n = len(x)
    per_epoch = min(n, cfg.epoch_rows)
    steps_per_epoch = math.ceil(per_epoch / cfg.batch_size)
    device = fit_device(cfg)
    on_gpu = device.type == "cuda"
    x, y = (x.to(device), y.to(device)) if on_gpu else (x, y)
    # fork_rng: the seed governs this fit only; the caller's random state is left as it was.
    rng_devices = [device.index or 0] if on_gpu else []
    with _torch_threads(cfg.num_threads), torch.random.fork_rng(devices=rng_devices):
        deterministic = torch.are_deterministic_algorithms_enabled()
        # Bit-reproducible on the CPU; cuDNN's LSTM has no deterministic kernel to ask for.
        torch.use_deterministic_algorithms(not on_gpu)
        try:
            torch.manual_seed(cfg.seed)
            net = _network(cfg).to(device)
            net.train()
            opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=cfg.epochs * steps_per_epoch, eta_min=cfg.lr * 0.05
            )
            for _ in range(cfg.epochs):
                order = torch.randperm(n)[:per_epoch]
                for i in range(0, per_epoch, cfg.batch_size):
                    idx = order[i : i + cfg.batch_size].to(device)
                    loss = torch.nn.functional.mse_loss(_forward(net, x[idx]), y[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
                    opt.step()
                    sched.step()
        finally:
            torch.use_deterministic_algorithms(deterministic)
    net = net.cpu()  # the artifact and every forecast: on the CPU
    net.eval()
    return GlobalLSTMState(net, y_scale.astype(np.float64))


def predict(state: GlobalLSTMState, xs: np.ndarray, cfg: GlobalLSTMConfig) -> np.ndarray:
    """Log returns [n, len(HORIZONS)], float64."""
    import torch

    x = _windows_tensor(xs, cfg, "predict")
    state.net.eval()
    with _torch_threads(cfg.num_threads), torch.no_grad():
        chunks = [_forward(state.net, x[i : i + PREDICT_CHUNK]) for i in range(0, len(x), PREDICT_CHUNK)]
    out = torch.cat(chunks).numpy() if chunks else np.empty((0, len(HORIZONS)), np.float32)
    return out.astype(np.float64) * state.y_scale


def dump(state: GlobalLSTMState) -> dict[str, Any]:
    """JSON data: every tensor of the state dict as its shape and flat values (float32 values as exact
    doubles), and the Y scale."""
    return {
        "state": {
            name: {"shape": list(t.shape), "values": t.detach().double().flatten().tolist()}
            for name, t in state.net.state_dict().items()
        },
        "y_scale": [float(v) for v in state.y_scale],
    }


def load(payload: dict, cfg: GlobalLSTMConfig, n_features: int) -> GlobalLSTMState:
    """The network of `payload` (`dump`), rebuilt from `cfg`. ValueError naming what does not fit: the
    inputs' width, a missing, extra or misshapen tensor, a Y scale that is not positive numbers."""
    import torch

    if n_features != cfg.window * N_FEATURES:
        raise ValueError(f"{n_features} inputs, expected window {cfg.window} x {N_FEATURES} features")
    if not isinstance(payload, dict) or not isinstance(payload.get("state"), dict):
        raise ValueError("the payload holds no state dict")
    tensors = payload["state"]
    net = _network(cfg)
    expected = net.state_dict()
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ValueError(f"tensor {extra[0]} is not one of the network's")
    state = {}
    for name, want in expected.items():
        entry = tensors.get(name)
        if not isinstance(entry, dict):
            raise ValueError(f"tensor {name} is missing")
        shape = entry.get("shape")
        if shape != list(want.shape):
            raise ValueError(f"tensor {name} has shape {shape}, expected {list(want.shape)}")
        values = np.asarray(entry.get("values"), dtype=np.float64)
        if values.shape != (want.numel(),):
            raise ValueError(f"tensor {name} holds {values.size} values, expected {want.numel()}")
        state[name] = torch.from_numpy(values.astype(np.float32).reshape(want.shape))
    net.load_state_dict(state, strict=True)
    net.eval()
    y_scale = np.asarray(payload.get("y_scale"), dtype=np.float64)
    if y_scale.shape != (len(HORIZONS),) or not (np.isfinite(y_scale) & (y_scale > 0)).all():
        raise ValueError(f"y_scale must be {len(HORIZONS)} positive numbers, got {payload.get('y_scale')!r}")
    return GlobalLSTMState(net, y_scale)


GLOBAL_LSTM = Family(GlobalLSTMConfig, fit, predict, dump, load, libraries=("torch",), inputs=WINDOWS)
