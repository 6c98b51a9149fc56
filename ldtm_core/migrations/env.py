"""Alembic environment: the URL comes from the caller (ldtm db upgrade), never from a file."""

from alembic import context
from sqlalchemy import pool

from ldtm_core.db import get_engine
from ldtm_core.schema import metadata

config = context.config
target_metadata = metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = get_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


_ = pool
if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
