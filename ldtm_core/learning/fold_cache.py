"""Stored fold outcomes of the walk-forward backtest, reused instead of refitted (issue 22).

A fold's outcome is a pure function of: the config (its signature, seed included, and the seed again
explicitly), exactly the sample rows it trains, validates and tests on (`fingerprint`), its cutoff, and
the weights it started from. Folds start cold by default (no parent), so when a quarter completes the
older folds keep their keys and only the new one refits; a warm-chained fold is named by the key of the
fold it came from (`fold_key`'s `parent`): a revised bar inside fold 2's rows changes fold 2's
fingerprint, hence its key, hence the key of every fold warm-started after it, and nothing before it.

Each fitted fold's weights are kept as an artifact (atomic write, loaded with weights_only=True) so a
later fold that must refit can start from a predecessor that was reused rather than refitting the
chain. Rows of `backtest_fold_results` are immutable: one key, one result; a racing writer's duplicate
is the same result and is ignored.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from ldtm_core.config import Settings
from ldtm_core.data.samples import SampleSet
from ldtm_core.learning.checkpoints import sha256_file, write_atomic
from ldtm_core.schema import backtest_fold_results

KEY_FORMAT = 1  # bump when what a fold computes changes without its inputs changing


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


def fold_key(signature: str, data_fingerprint: str, cutoff: dt.date, seed: int, parent: str | None) -> str:
    parts = [KEY_FORMAT, signature, data_fingerprint, cutoff.isoformat(), int(seed), parent or ""]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass
class StoredFold:
    key: str
    pred: np.ndarray  # [n, 3] denormalised predictions of the fold's test rows (next day, Monday, month)
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
    ok = path.is_file() and sha256_file(path) == r["weights_sha256"]
    return StoredFold(
        key,
        np.asarray(r["pred"], dtype=np.float64).reshape(-1, 3),
        int(r["epochs"]),
        int(r["best_epoch"]),
        float(r["val_loss"]),
        path if ok else None,
    )


def stored_predictions(engine: Engine, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(test dates, [n, 3] predictions) of the fold stored under `key` (backtest_folds.fold_key): what a
    paired comparison of two configs on the same rows reads."""
    with engine.connect() as conn:
        row = conn.execute(
            select(backtest_fold_results.c.result_json).where(backtest_fold_results.c.fold_key == key)
        ).first()
    if row is None:
        return None
    r = json.loads(row.result_json)
    return np.asarray(r["dates"], dtype="datetime64[D]"), np.asarray(r["pred"], dtype=np.float64).reshape(
        -1, 3
    )


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
    """Weights first (atomic), then the row: a row never points at weights that were not written."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    name = f"{key}.pt"
    digest = write_atomic(weights_dir(settings) / name, buffer.getvalue())
    result = {
        "weights_file": name,
        "weights_sha256": digest,
        "dates": [str(d) for d in test_dates.astype("datetime64[D]")],
        "pred": np.asarray(pred, dtype=np.float64).tolist(),  # float repr: exact round trip
        "epochs": int(epochs),
        "best_epoch": int(best_epoch),
        "val_loss": float(val_loss),
    }
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
    except IntegrityError:
        pass  # another backtest stored the same key first: the same result by construction
