"""The dashboard on a store an older release migrated (issue 38): the page says, in one line, to run
`ldtm db upgrade`, shows nothing else, raises nothing, and the store is left at its revision. An empty
database is created at the newest revision, so a fresh home still shows its empty state."""

from __future__ import annotations

import pytest
from migrate_helpers import OLDER, fresh_database, revision_of
from streamlit.testing.v1 import AppTest

from ldtm_core.migrate import head_revision, upgrade
from ldtm_dashboard import APP

PAGES = APP.parent / "views"
TIMEOUT = 120


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request, tmp_path, monkeypatch):
    with fresh_database(request.param, tmp_path, request) as url:
        monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("LDTM_DATABASE_URL", url)
        yield url


def test_the_dashboard_refuses_an_older_store_in_one_line(fresh_url):
    upgrade(fresh_url, OLDER)
    at = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = at.error
    assert "run `ldtm db upgrade`" in error.value and f"revision {OLDER}" in error.value
    assert len(error.value.strip().splitlines()) == 1
    assert not at.dataframe
    assert revision_of(fresh_url) == OLDER

    upgrade(fresh_url)  # `ldtm db upgrade`; the page then opens (the refusal was not cached)
    at = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=TIMEOUT).run()
    assert not at.exception and not at.error and at.info


def test_the_dashboard_creates_an_empty_database_at_the_newest_revision(fresh_url):
    at = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=TIMEOUT).run()
    assert not at.exception and at.info  # the empty state
    assert revision_of(fresh_url) == head_revision()
