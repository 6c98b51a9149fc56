"""Shared builders for the accountability tests: synthetic prices, untrained demo models, settings."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import torch
from sqlalchemy import insert, select, update

from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import LDTM, get_profile
from ldtm_core.learning.registry import register_candidate
from ldtm_core.schema import backtest_folds, fill_revisions, model_registry, snapshots


def make_settings(tmp_path: Path, url: str, **kw) -> Settings:
    s = Settings(home=tmp_path / "home", database_url=url, **kw)
    s.ensure_dirs()
    return s


def ingest(engine, tickers, start="2023-01-03", end="2024-06-28", seed=7):
    df = generate(tickers, start, end, seed=seed)
    ingest_frame(engine, df, "synthetic")
    return df


def make_model(
    engine,
    settings: Settings,
    ticker: str,
    *,
    seed: int = 0,
    trained_on: dt.date = dt.date(2024, 1, 2),
    cfg=None,
    profile: str = "demo",
) -> int:
    """An untrained (seeded) demo LDTM saved as a checkpoint and registered as a candidate."""
    cfg = cfg or get_profile("demo")
    torch.manual_seed(seed)
    model = LDTM(cfg).eval()
    path = settings.checkpoint_dir / f"{ticker}_cand_{seed}_{cfg.signature}.pt"
    sha = save_checkpoint(path, model, cfg, ticker, trained_on, 0.1)
    return register_candidate(
        engine,
        ticker=ticker,
        cfg=cfg,
        profile=profile,
        trained_on_date=trained_on,
        checkpoint_path=str(path),
        checkpoint_sha256=sha,
        val_loss=0.1,
    )


def add_backtest(engine, model_id, folds, ticker="AAPL", backtest_id=None, cfg=None):
    """Backtest rows as a backtest would write them; returns the backtest id.

    folds: list of (n, direction_accuracy, always_up_accuracy, mean_abs_pct_error, leakage_rows), each
    optionally followed by (model_only_hits, up_only_hits), the discordant rows of the skill test.
    cfg: the config the backtest ran (default: the model's own, as `ldtm backtest` without --profile).
    """
    from ldtm_core.learning.registry import config_signature, get_model

    signature = config_signature(cfg or get_model(engine, model_id).config)
    bid = backtest_id or str(uuid.uuid4())
    now = dt.datetime.now(dt.UTC)
    d = dt.date(2024, 1, 2)
    with engine.begin() as conn:
        conn.execute(
            insert(backtest_folds),
            [
                {
                    "backtest_id": bid,
                    "model_id": model_id,
                    "ticker": ticker,
                    "fold": i + 1,
                    "cutoff": d,
                    "train_start": d,
                    "train_end": d,
                    "test_start": d,
                    "test_end": d,
                    "n": n,
                    "direction_accuracy": acc,
                    "always_up_accuracy": up,
                    "mean_abs_pct_error": err,
                    "leakage_rows": leak,
                    "model_only_hits": skill[0] if skill else None,
                    "up_only_hits": skill[1] if skill else None,
                    "created_at": now,
                    "config_signature": signature,
                    "data_start": d,
                    "data_end": d,
                }
                for i, (n, acc, up, err, leak, *skill) in enumerate(folds)
            ],
        )
    return bid


def registry_row(conn, ticker: str, status: str = "candidate", trained_on=dt.date(2024, 1, 2)) -> int:
    """A bare model_registry row (no checkpoint behind it) for tests that read the registry only; inserted
    as a candidate, then set to `status` as the registry's transitions would."""
    now = dt.datetime.now(dt.UTC)
    mid = conn.execute(
        insert(model_registry)
        .values(
            ticker=ticker,
            status="candidate",
            profile="demo",
            arch_signature="sig",
            config_json="{}",
            trained_on_date=trained_on,
            checkpoint_path="x",
            checkpoint_sha256="0" * 64,
            created_at=now,
            updated_at=now,
        )  # fmt: skip
        .returning(model_registry.c.id)
    ).scalar_one()
    if status != "candidate":
        conn.execute(update(model_registry).where(model_registry.c.id == mid).values(status=status))
    return mid


def snapshot_row(model_id: int, ticker: str = "AAPL", day: dt.date = dt.date(2024, 3, 1)) -> dict:
    """A bare published snapshot row (every prediction 101.0 on a close of 100.0), not chained."""
    row = {
        "ticker": ticker,
        "run_date": day,
        "run_date_close": 100.0,
        "model_id": model_id,
        "model_version": "v1.2024-01-02",
        "model_status": "active",
        "mode": "live",
        "direction_pred": "bullish",
        "run_id": str(uuid.uuid4()),
        "created_at": dt.datetime.now(dt.UTC),
        "prev_hash": "",
        "row_hash": "0" * 64,
    }
    for h in HORIZONS:
        row[h.col("pred")] = 101.0
        row[h.col("date")] = day + dt.timedelta(days=3)
    return row


def refill_next_day(conn, snapshot_id: int, old: float, new: float, old_err: float, new_err: float) -> None:
    """The logged re-fill by hand, as refill writes it: the revision first, then the new answer."""
    row = conn.execute(
        select(snapshots.c.ticker, snapshots.c.run_date).where(snapshots.c.id == snapshot_id)
    ).one()
    conn.execute(
        insert(fill_revisions).values(
            snapshot_id=snapshot_id,
            ticker=row.ticker,
            run_date=row.run_date,
            horizon="next_day",
            old_actual=old,
            new_actual=new,
            old_pct_error=old_err,
            new_pct_error=new_err,
            reason="test",
            revised_at=dt.datetime.now(dt.UTC),
        )  # fmt: skip
    )
    conn.execute(
        update(snapshots)
        .where(snapshots.c.id == snapshot_id)
        .values(next_day_actual=new, next_day_pct_error=new_err)
    )
