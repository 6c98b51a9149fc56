"""A submitted model in the registry: one row per ticker it forecasts, recipe `external`, no artifact.

Its rows stay `candidate` (registry) and its snapshot rows `external` (never published) until the gate
promotes it for a ticker on its live record (`judge.promote`); `registry.serving_models` never serves an
external candidate, so registering one changes nothing LDTM publishes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

from sqlalchemy import Engine, select

from ldtm_core.data.calendar import market_today
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.registry import EXTERNAL, ModelRecord, list_models, register_candidates
from ldtm_core.schema import model_registry

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")  # fits model_registry.profile and reads in every table


@dataclass(frozen=True)
class ExternalConfig:
    """What the registry stores of a submitted model: its name and what its owner says it is."""

    name: str
    description: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def signature(self) -> str:  # one per name: its evenings are one model's, whatever the description
        return hashlib.sha256(f"{EXTERNAL}:{self.name}".encode()).hexdigest()


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise InputError(
            f"external model name {name!r}: expected lower-case letters, digits, '_' or '-', starting with a "
            "letter, at most 31 characters"
        )
    return name


def name_of(rec: ModelRecord) -> str | None:
    """The submitted model's name of a registry row (None for a model LDTM runs)."""
    if rec.recipe != EXTERNAL:
        return None
    return str(json.loads(rec.config_json).get("name"))


def models_of(engine: Engine, name: str) -> dict[str, ModelRecord]:
    """{ticker: the registry row} of submitted model `name` (its newest row per ticker, retired rows too)."""
    out: dict[str, ModelRecord] = {}
    for rec in list_models(engine, profile=EXTERNAL):
        if name_of(rec) == name:
            out[rec.ticker] = rec
    return out


def names(engine: Engine, tickers: list[str] | None = None) -> list[str]:
    """Every registered submitted model's name (of any of `tickers`, if given), in registration order."""
    stmt = select(model_registry.c.config_json).where(model_registry.c.profile == EXTERNAL)
    if tickers is not None:
        stmt = stmt.where(model_registry.c.ticker.in_(tickers))
    with engine.connect() as conn:
        found = [
            json.loads(r.config_json).get("name") for r in conn.execute(stmt.order_by(model_registry.c.id))
        ]
    return list(dict.fromkeys(n for n in found if n))


def register(engine: Engine, name: str, tickers: list[str], description: str = "") -> dict[str, int]:
    """Register submitted model `name` for `tickers` (candidate rows, one per ticker): {ticker: model id}.
    A ticker it already has is left as it is; registering no new ticker is an InputError."""
    name = check_name(name)
    if not tickers:
        raise InputError(f"external model {name!r}: no ticker to register it for")
    tickers = list(dict.fromkeys(validate_ticker(t) for t in tickers))
    have = models_of(engine, name)
    new = [t for t in tickers if t not in have]
    if not new:
        raise InputError(f"external model {name!r} is already registered for {', '.join(tickers)}")
    cfg = ExternalConfig(name, description)
    return register_candidates(
        engine,
        tickers=new,
        cfg=cfg,
        profile=EXTERNAL,
        # Its data cutoff, for the in-sample flag: a model registered today saw at most today's closes.
        trained_on_date=market_today(),
        checkpoint_path=f"{EXTERNAL}:{name}",  # no artifact: its forecasts arrive as submissions
        checkpoint_sha256=cfg.signature,
        val_loss=None,
        recipe=EXTERNAL,
        reason=f"registered as submitted model {name!r}",
    )


def require(engine: Engine, name: str) -> dict[str, ModelRecord]:
    found = models_of(engine, check_name(name))
    if not found:
        raise NotFoundError(
            f"external model {name!r} is not registered: ldtm models register --external {name} --tickers …"
        )
    return found
