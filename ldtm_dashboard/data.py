"""The dashboard's only door to the database: an engine for the configured URL, and friendly errors."""

from __future__ import annotations

import streamlit as st
from sqlalchemy import Engine

from ldtm_core.config import Settings, env_text, masked_url
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, LDTMError
from ldtm_core.migrate import open_database


@st.cache_resource(show_spinner=False)
def _engine(url: str) -> Engine:
    # Same as every `ldtm` command: a fresh home is created at the newest revision and shows an empty
    # state; an older store is refused (not cached: the page opens once `ldtm db upgrade` has run).
    return open_database(url)


def engine() -> Engine:
    """The engine for LDTM_DATABASE_URL (default SQLite under LDTM_HOME), read per rerun; a database
    that cannot be opened as it is (e.g. behind the newest revision) stops the page with its one line."""
    settings = Settings.from_env()
    try:
        return _engine(settings.database_url)
    except LDTMError as exc:
        st.error(str(exc))
        st.stop()


# The compose and Kubernetes deployments set LDTM_DEPLOYMENT (docker-compose.yml, deploy/k8s/values.yaml):
# there `make demo` would write a SQLite file inside the container that this page never reads.
_FIRST_EVENING = {
    "local": "Run `make demo`, or `ldtm predict` and later `ldtm fillback`, then reload.",
    "deployed": (
        "In the Dagster UI (the webserver: port 3000 under Docker Compose): materialise `prices` and "
        "`features`, backfill `checkpoints` over the tickers, then the `nightly` schedule records each "
        'evening after the close and fills the earlier ones back (docs/operations.md, "Backfill a '
        'retrain" and "Run nightly"); reload here afterwards.'
    ),
}


def first_evening_hint() -> str:
    """How to get the first scored evening, in the deployment this dashboard runs in."""
    deployed = env_text("LDTM_DEPLOYMENT", "").strip().lower() in ("docker", "k8s")
    return _FIRST_EVENING["deployed" if deployed else "local"]


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
