"""The model registry: candidate -> active -> retired, every transition recorded (SPEC §10).

At most one active model per ticker is guaranteed by a partial unique index, not by this code.
"""

from __future__ import annotations

import datetime as dt
import json

from sqlalchemy import Connection, Engine, insert

from .db import run_in_transaction
from .model import ModelConfig
from .schema import model_registry, registry_events


def record_event(
    conn: Connection,
    model_id: int,
    ticker: str,
    from_status: str | None,
    to_status: str,
    reason: str,
    at: dt.datetime | None = None,
) -> None:
    conn.execute(
        insert(registry_events).values(
            model_id=model_id,
            ticker=ticker,
            at=at or dt.datetime.now(dt.UTC),
            from_status=from_status,
            to_status=to_status,
            reason=reason,
        )
    )


def register_candidate(
    engine: Engine,
    *,
    ticker: str,
    cfg: ModelConfig,
    profile: str,
    trained_on_date: dt.date,
    checkpoint_path: str,
    checkpoint_sha256: str,
    val_loss: float | None,
    epochs: int | None = None,
    device: str | None = None,
    duration_s: float | None = None,
    metrics: dict | None = None,
    reason: str = "trained",
) -> int:
    """Insert a `candidate` row and its creation event in one transaction; returns the model id."""
    now = dt.datetime.now(dt.UTC)

    def work(conn: Connection) -> int:
        model_id = conn.execute(
            insert(model_registry)
            .values(
                ticker=ticker,
                status="candidate",
                profile=profile,
                arch_signature=cfg.signature,
                config_json=json.dumps(cfg.to_dict(), sort_keys=True),
                trained_on_date=trained_on_date,
                val_loss=val_loss,
                epochs=epochs,
                device=device,
                duration_s=duration_s,
                metrics_json=json.dumps(metrics or {}, sort_keys=True),
                checkpoint_path=str(checkpoint_path),
                checkpoint_sha256=checkpoint_sha256,
                created_at=now,
                updated_at=now,
            )
            .returning(model_registry.c.id)
        ).scalar_one()
        record_event(conn, model_id, ticker, None, "candidate", reason, at=now)
        return model_id

    return run_in_transaction(engine, work)
