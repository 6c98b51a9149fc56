"""Apply the Alembic migrations (idempotent): `ldtm db upgrade` and every entry point call this."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from .db import get_engine


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("ldtm_core").joinpath("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> Engine:
    """Bring the database at `url` to `revision` and return its engine."""
    engine = get_engine(url)
    cfg = alembic_config(url)
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two processes upgrading one fresh database at once would race on CREATE TABLE.
            from sqlalchemy import text

            conn.execute(text("SELECT pg_advisory_xact_lock(7400123)"))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return engine


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
