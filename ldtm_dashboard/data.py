"""The dashboard's only door to the database: an engine for the configured URL, and friendly errors."""

from __future__ import annotations

import streamlit as st
from sqlalchemy import Engine

from ldtm_core.config import Settings, masked_url
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError
from ldtm_core.migrate import upgrade


@st.cache_resource(show_spinner=False)
def _engine(url: str) -> Engine:
    # Same as every `ldtm` command: an idempotent upgrade, so a fresh home shows an empty state.
    return upgrade(url)


def engine() -> Engine:
    """The engine for LDTM_DATABASE_URL (default SQLite under LDTM_HOME), read per rerun."""
    settings = Settings.from_env()
    return _engine(settings.database_url)


def database_caption() -> str:
    return f"database: {masked_url(Settings.from_env().database_url)}"


def ticker_from_query(default: str | None) -> str | None:
    """The `?ticker=` query parameter, validated; a hostile value stops the page with an error."""
    raw = st.query_params.get("ticker")
    if raw is None:
        return default
    try:
        return validate_ticker(raw)
    except InputError:
        # The raw value is not echoed: it could carry Markdown (links, images) into the page.
        st.error("Refused the ticker in the address: a ticker is 1-12 characters of A-Z, 0-9, '.', '-', '^'.")
        st.stop()
