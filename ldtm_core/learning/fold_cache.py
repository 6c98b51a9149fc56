"""Stored fold outcomes of the walk-forward backtest, reused instead of refitted.

A fold's outcome is a pure function of: the config (its signature, seed included, and the seed again
explicitly), exactly the sample rows it trains, validates and tests on (`fingerprint`), its cutoff, the
weights it started from, and the runtime that does the arithmetic (`runtime`: the resolved training
precision, the device kind, the torch version and a hash of the learning code's syntax tree, docstrings
left out, so a comment, docstring or formatting edit keeps every key; `code_hash`). Folds start cold by
default (no parent), so when a quarter completes the older folds keep their keys and only the new one
refits; a warm-chained fold is named by the key of the fold it came from (`fold_key`'s `parent`): a
revised bar inside fold 2's rows changes fold 2's fingerprint, hence its key, hence the key of every fold
warm-started after it, and nothing before it. A store shared by hosts (the compose artifacts volume)
reuses a fold only where this host would compute the same numbers; elsewhere it refits once.

Each fitted fold's weights are kept as an artifact (atomic write, named by key and content hash, loaded
with weights_only=True) so a later fold that must refit can start from a predecessor that was reused
rather than refitting the chain. One key, one result: an existing row whose weights verify is kept as it
is (a racing writer's duplicate computes the same); a row whose weights are gone (pruned) is replaced,
row and file together, by the refit that found it so.
"""

from __future__ import annotations

import ast
import datetime as dt
import functools
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from ldtm_core.config import Settings
from ldtm_core.data import samples as samples_module
from ldtm_core.data.samples import SampleSet
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import model as model_module
from ldtm_core.learning import precision, split, training_loop
from ldtm_core.learning.checkpoints import sha256_file, write_atomic
from ldtm_core.learning.model import ModelConfig
from ldtm_core.schema import backtest_fold_results

# The source files whose change can change a fit's numbers (architecture, loop, split, windows and
# denormalisation): their hash replaces a manual format number in the key. Scoring is recomputed from
# the stored predictions, so the backtest's own module is not among them.
LEARNING_CODE = tuple(Path(m.__file__) for m in (model_module, training_loop, split, samples_module))


class Runtime(NamedTuple):
    """What does the arithmetic of a fit, beyond its inputs."""

    precision: str  # the resolved training precision: fp32 / bf16 / fp16 (amp="auto" decided here)
    device: str  # "cpu", or "cuda <card name>"
    torch: str
    code: str  # code_hash(): sha256 of LEARNING_CODE's syntax trees


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def code_digest(name: str, source: str) -> str:
    """sha256 of one file's syntax tree without its docstrings (`ast.dump`, no line numbers): comments,
    blank lines, quotes, wrapping and docstrings leave it unchanged; any other edit changes it, whether or
    not it changes a fit (a renamed local, a log message: a refit too many, never a stale reuse)."""
    tree = ast.parse(source, filename=name)
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
            # A body that was only a docstring still needs a statement; it did nothing either way.
            node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


@functools.cache
def code_hash() -> str:
    """sha256 over LEARNING_CODE's names and `code_digest`s. The dump's format follows the interpreter, so
    a Python upgrade may re-key every fold once (each refits once; the gate's ledger does not depend on
    the keys' code part)."""
    h = hashlib.sha256()
    for path in LEARNING_CODE:
        h.update(path.name.encode())
        h.update(code_digest(path.name, path.read_text(encoding="utf-8")).encode())
    return h.hexdigest()


def runtime(cfg: ModelConfig, device: str | None) -> Runtime:
    """This host's runtime for a fit of `cfg` on `device` (resolved exactly as training resolves it)."""
    dev = training_loop.resolve_device(device)
    kind = "cpu" if dev.type == "cpu" else f"{dev.type} {torch.cuda.get_device_name(dev)}"
    return Runtime(
        precision.precision_name(precision.amp_dtype(cfg, dev)), kind, torch.__version__, code_hash()
    )


def fingerprint(samples: SampleSet, fit_idx: np.ndarray, test_idx: np.ndarray) -> str:
    """sha256 of exactly what the fold consumes: the fitting rows' inputs and (all three) targets in
    order (their split follows from it), and the test rows' inputs, window ranges (denormalisation),
    close and next-day answer (what is scored). Prices/features outside these rows do not count."""
    h = hashlib.sha256()
    for arr in (
        samples.dates[fit_idx],
        samples.x[fit_idx],
        samples.y[fit_idx],
        samples.dates[test_idx],
        samples.x[test_idx],
        samples.close_min[test_idx],
        samples.close_max[test_idx],
        samples.close[test_idx],
        samples.target_close[test_idx, 0],
    ):
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 of starting weights that did not come from a stored fold (a planted start)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def fold_key(
    signature: str, data_fingerprint: str, cutoff: dt.date, seed: int, parent: str | None, rt: Runtime
) -> str:
    parts = [signature, data_fingerprint, cutoff.isoformat(), int(seed), parent or "", *rt]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass
class StoredFold:
    key: str
    pred: np.ndarray  # [n, H] denormalised predictions of the fold's test rows, one column per horizon
    epochs: int
    best_epoch: int
    val_loss: float
    weights: Path | None  # None when the artifact is gone or does not verify


def weights_dir(settings: Settings) -> Path:
    return settings.checkpoint_dir / "folds"


def load(engine: Engine, settings: Settings, key: str) -> StoredFold | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(backtest_fold_results.c.result_json).where(backtest_fold_results.c.fold_key == key)
        ).first()
    if row is None:
        return None
    r = json.loads(row.result_json)
    path = weights_dir(settings) / r["weights_file"]
    ok = verifies(path, r["weights_sha256"])
    return StoredFold(
        key,
        _pred_array(r["pred"], key),
        int(r["epochs"]),
        int(r["best_epoch"]),
        float(r["val_loss"]),
        path if ok else None,
    )


def verifies(path: Path, digest: str) -> bool:
    return path.is_file() and sha256_file(path) == digest


def stored_predictions(engine: Engine, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(test dates, [n, H] predictions) of the fold stored under `key` (backtest_folds.fold_key): what a
    paired comparison of two configs on the same rows reads."""
    with engine.connect() as conn:
        row = conn.execute(
            select(backtest_fold_results.c.result_json).where(backtest_fold_results.c.fold_key == key)
        ).first()
    if row is None:
        return None
    r = json.loads(row.result_json)
    return np.asarray(r["dates"], dtype="datetime64[D]"), _pred_array(r["pred"], key)


def _pred_array(pred, key: str) -> np.ndarray:
    """A stored fold's predictions as [n, len(HORIZONS)]: stored as rows of one value per horizon; a row
    of another width (a fold of another head set) is refused rather than silently reshaped."""
    a = np.asarray(pred, dtype=np.float64)
    if a.size == 0:
        return a.reshape(0, len(HORIZONS))
    if a.ndim != 2 or a.shape[1] != len(HORIZONS):
        raise ValueError(
            f"stored fold {key[:12]}: predictions of shape {a.shape}, expected [n, {len(HORIZONS)}]"
        )
    return a


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def store(
    engine: Engine,
    settings: Settings,
    *,
    key: str,
    ticker: str,
    signature: str,
    data_fingerprint: str,
    cutoff: dt.date,
    seed: int,
    parent: str | None,
    model: torch.nn.Module,
    pred: np.ndarray,
    test_dates: np.ndarray,
    epochs: int,
    best_epoch: int,
    val_loss: float,
) -> None:
    """Weights first (atomic, under a name of key and content hash, so no write ever changes a file a
    row points at), then the row. Returns the [n, H] predictions now stored under `key`: this fit's, or
    those of the existing row whose weights still verify (kept: one key, one result)."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    data = buffer.getvalue()
    name = f"{key}.{hashlib.sha256(data).hexdigest()[:16]}.pt"
    digest = write_atomic(weights_dir(settings) / name, data)
    pred = np.asarray(pred, dtype=np.float64)
    result = {
        "weights_file": name,
        "weights_sha256": digest,
        "dates": [str(d) for d in test_dates.astype("datetime64[D]")],
        "pred": pred.tolist(),  # float repr: exact round trip
        "epochs": int(epochs),
        "best_epoch": int(best_epoch),
        "val_loss": float(val_loss),
    }
    t = backtest_fold_results.c
    for _ in range(3):  # a racing writer can insert or replace between our read and our write
        with engine.connect() as conn:
            row = conn.execute(select(t.result_json).where(t.fold_key == key)).first()
        if row is None:
            try:
                with engine.begin() as conn:
                    conn.execute(
                        insert(backtest_fold_results).values(
                            fold_key=key,
                            ticker=ticker,
                            config_signature=signature,
                            data_fingerprint=data_fingerprint,
                            cutoff=cutoff,
                            seed=int(seed),
                            parent_key=parent,
                            weights_path=str(Path("folds") / name),
                            result_json=json.dumps(result),
                            created_at=dt.datetime.now(dt.UTC),
                        )
                    )
                return pred
            except IntegrityError:
                continue  # another backtest stored the key first: judge its row below
        old = json.loads(row.result_json)
        old_file = weights_dir(settings) / old["weights_file"]
        if verifies(old_file, old["weights_sha256"]):
            if old_file.name != name:
                (weights_dir(settings) / name).unlink(missing_ok=True)
            return _pred_array(old["pred"], key)
        # The row's weights are gone: this refit replaces the row, compared-and-swapped on its old text.
        with engine.begin() as conn:
            done = conn.execute(
                update(backtest_fold_results)
                .where(t.fold_key == key, t.result_json == row.result_json)
                .values(
                    weights_path=str(Path("folds") / name),
                    result_json=json.dumps(result),
                    created_at=dt.datetime.now(dt.UTC),
                )
            ).rowcount
        if done:
            if old_file.name != name:
                old_file.unlink(missing_ok=True)  # it no longer verifies: nothing reads it
            return pred
    raise RuntimeError(f"fold {key}: the stored row kept changing under three attempts to store it")
