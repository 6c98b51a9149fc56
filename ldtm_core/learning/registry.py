"""The model registry: candidate -> active -> retired, every transition recorded (SPEC §10).

With LDTM_SHADOW_SESSIONS > 0 a candidate that passes the gate goes candidate -> shadow first, and
from there -> active or -> retired on its live record (accountability.shadow.shadow).

At most one active model per ticker is guaranteed by a partial unique index, not by this code.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, func, insert, select, update

from ldtm_core.config import Settings
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import is_postgres, run_in_transaction, write_lock
from ldtm_core.errors import CheckpointError, InputError, NotFoundError
from ldtm_core.faults import pause_point
from ldtm_core.learning.checkpoints import sha256_file, write_atomic
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.recipes import LSTM, RECIPE_KEY, recipe_of
from ldtm_core.schema import model_registry, registry_events

SHADOW = "shadow"  # registry status and snapshots.model_status of a shadow model and its rows
# A model LDTM cannot run, whose forecasts are submitted (accountability.submissions): its registry rows
# name this recipe, and its rows are recorded with this model_status until it is promoted to publish.
EXTERNAL = "external"
# snapshots.model_status values never published: the boards choose an evening's first row among the others.
UNPUBLISHED = (SHADOW, EXTERNAL)


def config_signature(cfg: ModelConfig) -> str:
    """sha256 of the whole model config (architecture and training settings alike), as the registry
    stores it: a backtest of another profile or override is a backtest of another model."""
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()


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


def stored_config(cfg, recipe: str = LSTM) -> str:
    """A registry row's config JSON: the recipe's config, naming the recipe unless it is the LSTM (so
    rows written before recipes existed and LSTM rows written now read alike)."""
    config = cfg.to_dict()
    return json.dumps(config if recipe == LSTM else {RECIPE_KEY: recipe, **config}, sort_keys=True)


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
    ids = register_candidates(
        engine,
        tickers=[ticker],
        cfg=cfg,
        profile=profile,
        trained_on_date=trained_on_date,
        checkpoint_path=checkpoint_path,
        checkpoint_sha256=checkpoint_sha256,
        val_loss=val_loss,
        epochs=epochs,
        device=device,
        duration_s=duration_s,
        metrics=metrics,
        reason=reason,
    )
    return ids[ticker]


def register_candidates(
    engine: Engine,
    *,
    tickers: Sequence[str],
    cfg,
    profile: str,
    trained_on_date: dt.date,
    checkpoint_path: str,
    checkpoint_sha256: str,
    val_loss: float | None,
    recipe: str = LSTM,
    epochs: int | None = None,
    device: str | None = None,
    duration_s: float | None = None,
    metrics: dict | None = None,
    reason: str = "trained",
) -> dict[str, int]:
    """One `candidate` row per ticker, all on one artifact (a global recipe's fit), and their creation
    events, in one transaction: {ticker: model id}. `cfg`: the recipe's config (`to_dict`, `signature`)."""
    now = dt.datetime.now(dt.UTC)
    values = {
        "status": "candidate",
        "profile": profile,
        "arch_signature": cfg.signature,
        "config_json": stored_config(cfg, recipe),
        "trained_on_date": trained_on_date,
        "val_loss": val_loss,
        "epochs": epochs,
        "device": device,
        "duration_s": duration_s,
        "metrics_json": json.dumps(metrics or {}, sort_keys=True),
        "checkpoint_path": str(checkpoint_path),
        "checkpoint_sha256": checkpoint_sha256,
        "created_at": now,
        "updated_at": now,
    }

    def work(conn: Connection) -> dict[str, int]:
        ids = {}
        for ticker in tickers:
            stmt = insert(model_registry).values(ticker=ticker, **values).returning(model_registry.c.id)
            ids[ticker] = conn.execute(stmt).scalar_one()
            record_event(conn, ids[ticker], ticker, None, "candidate", reason, at=now)
        return ids

    return run_in_transaction(engine, work)


# --- reading -------------------------------------------------------------------------------------


@dataclass
class ModelRecord:
    id: int
    ticker: str
    status: str
    profile: str
    arch_signature: str
    config_json: str
    trained_on_date: dt.date
    val_loss: float | None
    epochs: int | None
    checkpoint_path: str
    checkpoint_sha256: str
    version: str | None
    promoted_path: str | None
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def from_row(cls, row) -> ModelRecord:
        m = row._mapping if hasattr(row, "_mapping") else row
        return cls(**{f: m[f] for f in cls.__dataclass_fields__})

    @property
    def recipe(self) -> str:
        return recipe_of(self.config_json)

    @property
    def recipe_signature(self) -> str:
        """What makes two fits the same recipe (the gate's champion kinds, the trials ledger, the fold
        store): the LSTM's whole config (`config_signature`), another recipe's own signature (its config,
        feature definitions, horizons and target definition)."""
        return config_signature(self.config) if self.recipe == LSTM else self.arch_signature

    @property
    def config(self) -> ModelConfig:
        """The LSTM's config; InputError naming the model and its recipe for any other recipe (a step
        that only the per-ticker LSTM has must refuse another recipe by name, never misread it)."""
        if self.recipe != LSTM:
            raise InputError(
                f"model {self.id} ({self.ticker}) is a {self.recipe} recipe: this step runs the "
                f"per-ticker {LSTM} only"
            )
        return ModelConfig.from_dict(json.loads(self.config_json))

    @property
    def snapshot_version(self) -> str:
        """The model_version written into snapshots: the promoted version, or a candidate tag."""
        return self.version if self.status == "active" and self.version else f"cand-{self.id}"

    @property
    def load_path(self) -> str:
        return self.promoted_path or self.checkpoint_path


@dataclass
class RegistryEvent:
    id: int
    model_id: int
    ticker: str
    at: dt.datetime
    from_status: str | None
    to_status: str
    reason: str


_COLS = [model_registry.c[f] for f in ModelRecord.__dataclass_fields__]


@contextmanager
def _conn(conn_or_engine: Connection | Engine) -> Iterator[Connection]:
    if isinstance(conn_or_engine, Connection):
        yield conn_or_engine
    else:
        with conn_or_engine.connect() as conn:
            yield conn


def get_model(conn_or_engine: Connection | Engine, model_id: int) -> ModelRecord:
    with _conn(conn_or_engine) as conn:
        row = conn.execute(select(*_COLS).where(model_registry.c.id == model_id)).first()
    if row is None:
        raise NotFoundError(f"model {model_id} is not in the registry")
    return ModelRecord.from_row(row)


def active_model(conn_or_engine: Connection | Engine, ticker: str) -> ModelRecord | None:
    with _conn(conn_or_engine) as conn:
        row = conn.execute(
            select(*_COLS).where(model_registry.c.ticker == ticker, model_registry.c.status == "active")
        ).first()
    return ModelRecord.from_row(row) if row else None


def newest_candidate(
    conn_or_engine: Connection | Engine, ticker: str, recipe: str | None = None
) -> ModelRecord | None:
    """The ticker's newest candidate LDTM can run; with `recipe`, its newest candidate of that recipe
    (`EXTERNAL` names a submitted model's)."""
    stmt = (
        select(*_COLS)
        .where(model_registry.c.ticker == ticker, model_registry.c.status == "candidate")
        .order_by(model_registry.c.id.desc())
    )
    with _conn(conn_or_engine) as conn:
        # The recipe is named inside the config JSON: read newest first until one is this recipe's.
        for row in conn.execute(stmt):
            found = recipe_of(row.config_json)
            if found == recipe or (recipe is None and found != EXTERNAL):
                return ModelRecord.from_row(row)
    return None


def serving_models(
    conn_or_engine: Connection | Engine, tickers: Sequence[str] | None = None
) -> dict[str, ModelRecord]:
    """For each ticker: its active model, else its newest candidate LDTM can run (a submitted model's
    candidate rows serve nothing: its forecasts arrive by `submit`). One query."""
    stmt = select(*_COLS).where(model_registry.c.status.in_(["active", "candidate"]))
    if tickers is not None:
        stmt = stmt.where(model_registry.c.ticker.in_(list(tickers)))
    with _conn(conn_or_engine) as conn:
        rows = [ModelRecord.from_row(r) for r in conn.execute(stmt.order_by(model_registry.c.id))]
    out: dict[str, ModelRecord] = {}
    for rec in rows:  # id order: a later candidate replaces an earlier one; active always wins
        if rec.status == "candidate" and rec.recipe == EXTERNAL:
            continue
        cur = out.get(rec.ticker)
        if cur is None or rec.status == "active" or cur.status != "active":
            out[rec.ticker] = rec
    return out


def shadow_models(
    conn_or_engine: Connection | Engine, tickers: Sequence[str] | None = None
) -> dict[str, ModelRecord]:
    """{ticker: its shadow model} (at most one per ticker: a partial unique index, migration 0024)."""
    stmt = select(*_COLS).where(model_registry.c.status == SHADOW)
    if tickers is not None:
        stmt = stmt.where(model_registry.c.ticker.in_(list(tickers)))
    with _conn(conn_or_engine) as conn:
        return {r.ticker: r for r in (ModelRecord.from_row(x) for x in conn.execute(stmt))}


def models_on_artifact(conn_or_engine: Connection | Engine, checkpoint_path: str) -> list[ModelRecord]:
    """Every registry row trained into this artifact file, by ticker: a global recipe's fit registers one
    row per ticker on one file (its name is unique to the fit), so these rows are that fit's panel."""
    stmt = select(*_COLS).where(model_registry.c.checkpoint_path == checkpoint_path)
    with _conn(conn_or_engine) as conn:
        return [ModelRecord.from_row(r) for r in conn.execute(stmt.order_by(model_registry.c.ticker))]


def list_models(engine: Engine, ticker: str | None = None, profile: str | None = None) -> list[ModelRecord]:
    """The registry's rows by ticker, oldest first; of one ticker, or one profile (`EXTERNAL`), if given."""
    stmt = select(*_COLS).order_by(model_registry.c.ticker, model_registry.c.id)
    if ticker is not None:
        stmt = stmt.where(model_registry.c.ticker == validate_ticker(ticker))
    if profile is not None:
        stmt = stmt.where(model_registry.c.profile == profile)
    with engine.connect() as conn:
        return [ModelRecord.from_row(r) for r in conn.execute(stmt)]


def history(engine: Engine, ticker: str) -> list[RegistryEvent]:
    cols = [registry_events.c[f] for f in RegistryEvent.__dataclass_fields__]
    ticker = validate_ticker(ticker)
    with engine.connect() as conn:
        rows = conn.execute(
            select(*cols).where(registry_events.c.ticker == ticker).order_by(registry_events.c.id)
        )
        return [RegistryEvent(**r._mapping) for r in rows]


def version_major(conn: Connection | Engine, signature: str) -> int:
    """One major per distinct architecture signature, numbered by first appearance in the registry."""
    with _conn(conn) as c:
        rows = c.execute(
            select(model_registry.c.arch_signature, func.min(model_registry.c.id).label("first"))
            .group_by(model_registry.c.arch_signature)
            .order_by("first")
        ).all()
    order = [r.arch_signature for r in rows]
    return order.index(signature) + 1 if signature in order else len(order) + 1


# --- transitions ---------------------------------------------------------------------------------


@dataclass
class PromoteResult:
    ticker: str
    model_id: int
    version: str
    promoted_path: str
    retired_model_id: int | None
    changed: bool  # False when the model was already active
    shadow: bool = False  # True: the gate's pass put the model in shadow instead (accountability.shadow)
    held_by_shadow: int | None = None  # the running shadow a gate-passed candidate waits behind


def lock_ticker(conn: Connection, ticker: str) -> None:
    """Serialise transitions of one ticker: advisory lock + row locks on PostgreSQL, write lock on SQLite."""
    write_lock(conn, f"ldtm:registry:{ticker}")
    if is_postgres(conn):
        conn.execute(select(model_registry.c.id).where(model_registry.c.ticker == ticker).with_for_update())


# A transition's hooks, run in its transaction under the ticker's lock: a check before it, a record after.
Guard = Callable[[Connection], None]
Within = Callable[[Connection, PromoteResult], None]


def _guarded(
    conn: Connection,
    ticker: str,
    guard: Guard | None,
    within: Within | None,
    transition: Callable[[Connection], PromoteResult],
) -> PromoteResult:
    """Under the ticker's lock: guard(conn), the transition, within(conn, its result)."""
    lock_ticker(conn, ticker)
    if guard is not None:
        guard(conn)
    result = transition(conn)
    if within is not None:
        within(conn, result)
    return result


def _copy_verified(src: Path, dst: Path, expected_sha256: str, ticker: str = "") -> None:
    """Copy via temp file + rename, and check both ends against the registry's sha256."""
    who = f"checkpoint {src}" + (f" (ticker {ticker})" if ticker else "")
    data = src.read_bytes() if src.is_file() else None
    if data is None:
        raise CheckpointError(f"{who} is missing; cannot promote")
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise CheckpointError(f"{who} does not match the registry's sha256; refusing to promote it")
    if dst.is_file() and sha256_file(dst) == expected_sha256:
        return
    written = write_atomic(dst, data)
    if written != expected_sha256 or sha256_file(dst) != expected_sha256:
        raise CheckpointError(f"versioned copy {dst} does not match its source after writing")


def _version_for(conn: Connection, rec: ModelRecord) -> str:
    base = f"v{version_major(conn, rec.arch_signature)}.{rec.trained_on_date.isoformat()}"
    taken = conn.execute(
        select(model_registry.c.id).where(
            model_registry.c.ticker == rec.ticker,
            model_registry.c.version == base,
            model_registry.c.id != rec.id,
        )
    ).first()
    # Two models of one ticker trained the same day with the same architecture: keep versions unique,
    # because a snapshot's unique key includes the version.
    return base if taken is None else f"{base}-m{rec.id}"


def promote(
    engine: Engine,
    model_id: int,
    reason: str,
    settings: Settings | None = None,
    guard: Guard | None = None,
    within: Within | None = None,
) -> PromoteResult:
    """Make `model_id` the ticker's active model; retire the previous one. One transaction.

    Under the ticker's lock, in that transaction: `guard(conn)` first (raising aborts everything), then
    the transition, then `within(conn, result)`. The gate re-checks in the one and records its decision
    in the other, so a decision and its promotion commit together or not at all.
    The versioned checkpoint `{ticker}_ldtm_v{major}.{trained_on_date}.pt` is copied (verified) into
    the checkpoint directory before the transaction; a failed copy changes nothing in the database.
    """
    settings = settings or Settings.from_env()
    rec = get_model(engine, model_id)
    if rec.status == "active":
        done = PromoteResult(rec.ticker, rec.id, rec.version or "", rec.promoted_path or "", None, False)
        if guard is not None or within is not None:
            run_in_transaction(engine, lambda conn: _guarded(conn, rec.ticker, guard, within, lambda _: done))
        return done
    if rec.status not in ("candidate", SHADOW):
        raise InputError(
            f"model {model_id} of {rec.ticker} is {rec.status}; only a candidate (or a shadow) can be "
            "promoted (use rollback)"
        )
    with engine.connect() as conn:
        version = _version_for(conn, rec)
    if rec.recipe == EXTERNAL:  # no artifact to copy: its forecasts arrive as submissions
        dst, existed = Path(rec.checkpoint_path), True
    else:
        dst = Path(settings.checkpoint_dir) / f"{rec.ticker}_ldtm_{version}.pt"
        existed = dst.exists()
        _copy_verified(Path(rec.checkpoint_path), dst, rec.checkpoint_sha256, rec.ticker)

    def work(conn: Connection) -> PromoteResult:
        return _guarded(conn, rec.ticker, guard, within, transition)

    def transition(conn: Connection) -> PromoteResult:
        status = conn.execute(
            select(model_registry.c.status).where(model_registry.c.id == model_id)
        ).scalar_one()
        if status == "active":  # a concurrent promotion of this same model won
            cur = get_model(conn, model_id)
            return PromoteResult(
                rec.ticker, model_id, cur.version or "", cur.promoted_path or "", None, False
            )
        if status not in ("candidate", SHADOW):
            raise InputError(f"model {model_id} of {rec.ticker} became {status} meanwhile; not promoted")
        now = dt.datetime.now(dt.UTC)
        current = active_model(conn, rec.ticker)
        # Retire first, then activate: the partial unique index never sees two active rows.
        if current is not None:
            conn.execute(
                update(model_registry)
                .where(model_registry.c.id == current.id)
                .values(status="retired", updated_at=now)
            )
            record_event(
                conn,
                current.id,
                rec.ticker,
                "active",
                "retired",
                f"replaced by model {model_id}: {reason}",
                now,
            )
        pause_point("promote.after_retire")
        conn.execute(
            update(model_registry)
            .where(model_registry.c.id == model_id)
            .values(status="active", version=version, promoted_path=str(dst), updated_at=now)
        )
        record_event(conn, model_id, rec.ticker, status, "active", f"{reason} (version {version})", now)
        return PromoteResult(rec.ticker, model_id, version, str(dst), current.id if current else None, True)

    try:
        pause_point("promote.after_copy")
        return run_in_transaction(engine, work)
    except BaseException:
        # Ctrl-C or an error before the commit: the versioned copy this call made would point at nothing.
        if not existed and not _promoted_to(engine, model_id, dst):
            dst.unlink(missing_ok=True)
        raise


def _promoted_to(engine: Engine, model_id: int, dst: Path) -> bool:
    """Whether the registry serves `dst` for `model_id` (the commit may have landed as the interrupt came);
    True when that cannot be read: an orphan file is better than deleting a served checkpoint."""
    try:
        rec = get_model(engine, model_id)
    except BaseException:  # noqa: BLE001 - the database is unreachable, or a second Ctrl-C
        return True
    return rec.status == "active" and rec.promoted_path == str(dst)


@dataclass
class RollbackResult:
    ticker: str
    reactivated_model_id: int
    version: str | None
    retired_model_id: int | None


def activation_history(conn: Connection, ticker: str) -> list[int]:
    """The models `rollback` can walk back through, oldest first; the last is normally the active one.

    Built from the registry events: a promotion (candidate -> active) adds its model on top; a
    rollback (retired -> active) to a model still in the list removes every model above it, so a
    rolled-back model is never a rollback target again. A model brought back that is no longer in the
    list (an explicit `--to`, or a rollback recorded before this rule) is added on top, as a promotion.
    """
    rows = conn.execute(
        select(registry_events.c.model_id, registry_events.c.from_status)
        .where(registry_events.c.ticker == ticker, registry_events.c.to_status == "active")
        .order_by(registry_events.c.id)
    ).all()
    stack: list[int] = []
    for model_id, from_status in rows:
        if from_status == "retired" and model_id in stack:
            del stack[stack.index(model_id) + 1 :]
        else:
            if model_id in stack:
                stack.remove(model_id)
            stack.append(model_id)
    return stack


def _rollback_target(
    conn: Connection, ticker: str, current: ModelRecord | None, to_model_id: int | None
) -> int:
    if to_model_id is not None:
        rec = get_model(conn, to_model_id)
        if rec.ticker != ticker:
            raise InputError(f"model {to_model_id} belongs to {rec.ticker}, not {ticker}")
        if rec.status == "active":
            raise InputError(f"model {to_model_id} of {ticker} is already active")
        # A retired model was once active, unless it was a shadow its live record retired (no version).
        if rec.status != "retired" or rec.version is None:
            raise InputError(
                f"model {to_model_id} of {ticker} is {rec.status} and was never active: only a model "
                "that was active can be rolled back to (a candidate goes through the gate: ldtm gate)"
            )
        return rec.id
    stack = activation_history(conn, ticker)
    earlier = [m for m in stack if current is None or m != current.id]
    statuses = dict(
        conn.execute(
            select(model_registry.c.id, model_registry.c.status).where(model_registry.c.ticker == ticker)
        ).all()
    )
    earlier = [m for m in earlier if statuses.get(m) == "retired"]
    if not earlier:
        before = f" before model {current.id}" if current is not None else ""
        raise NotFoundError(
            f"{ticker} has no earlier active model to roll back to: no retired model was active{before} "
            "and not rolled back since (ldtm registry history shows them)"
        )
    return earlier[-1]


def rollback(engine: Engine, ticker: str, reason: str, to_model_id: int | None = None) -> RollbackResult:
    """Retire the active model of `ticker` and reactivate the one active before it.

    Each rollback goes one step further back through `activation_history` (a model rolled back is
    not brought back by the next rollback). `to_model_id` names the model to reactivate instead: any
    retired model of the ticker that was once active; the models active after it count as rolled back.
    """
    ticker = validate_ticker(ticker)

    def work(conn: Connection) -> RollbackResult:
        lock_ticker(conn, ticker)
        current = active_model(conn, ticker)
        target = _rollback_target(conn, ticker, current, to_model_id)
        now = dt.datetime.now(dt.UTC)
        if current is not None:
            conn.execute(
                update(model_registry)
                .where(model_registry.c.id == current.id)
                .values(status="retired", updated_at=now)
            )
            record_event(conn, current.id, ticker, "active", "retired", f"rollback: {reason}", now)
        conn.execute(
            update(model_registry)
            .where(model_registry.c.id == target)
            .values(status="active", updated_at=now)
        )
        record_event(conn, target, ticker, "retired", "active", f"rollback: {reason}", now)
        return RollbackResult(
            ticker, target, get_model(conn, target).version, current.id if current else None
        )

    return run_in_transaction(engine, work)
