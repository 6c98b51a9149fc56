"""A benchmark's throw-away database: a SQLite file in a folder the benchmark owns, or a new PostgreSQL
database `ldtm_<tag>_<pid>` on the server of the URL given, dropped afterwards (its sessions closed
first) unless kept."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ldtm_core.db import get_engine


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


@contextmanager
def scratch_database(url: str, tag: str, folder: Path, *, keep: bool = False) -> Iterator[str]:
    """The URL of an empty database for `tag`, on SQLite (a file in `folder`) or on `url`'s server."""
    if is_sqlite(url):
        yield f"sqlite:///{folder}/{tag}.db"
        get_engine.cache_clear()
        return
    server = make_url(url)
    name = f"ldtm_{tag}_{os.getpid()}"  # from the tag and the pid only: safe inside the quotes
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        try:
            # Inside the `try`: a stop (SIGTERM as SystemExit) just after CREATE still drops it.
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            get_engine.cache_clear()
            if keep:
                print(f"kept database {name}")
            else:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
