"""The Dagster side of issue 38: the `database` resource every asset, check and sensor uses opens the
database as it is. It creates an empty one at the newest revision, and refuses an older store in one line
naming `ldtm db upgrade`; it never migrates (no Dagster step does: `ldtm db upgrade` is the one that does)."""

from __future__ import annotations

import pytest
from dagster import DagsterEventType, Failure, materialize
from ldtm_dagster_helpers import tiny_resources
from migrate_helpers import OLDER, fresh_database, revision_of

from ldtm_core.migrate import head_revision, upgrade
from ldtm_dagster import assets
from ldtm_dagster.demo import ALL_ASSETS
from ldtm_dagster.resources import AppDatabase, ArtifactStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request, tmp_path):
    with fresh_database(request.param, tmp_path, request) as url:
        yield url


def test_the_database_resource_creates_an_empty_database_at_the_newest_revision(fresh_url, tmp_path):
    AppDatabase(url=fresh_url).engine(ArtifactStore(home=str(tmp_path / "home")))
    assert revision_of(fresh_url) == head_revision()


def test_the_database_resource_refuses_an_older_store_and_changes_nothing(fresh_url, tmp_path):
    upgrade(fresh_url, OLDER)
    store = ArtifactStore(home=str(tmp_path / "home"))
    with pytest.raises(Failure, match=r"run `ldtm db upgrade`") as refused:
        AppDatabase(url=fresh_url).engine(store)
    assert f"revision {OLDER}" in str(refused.value) and head_revision() in str(refused.value)
    assert revision_of(fresh_url) == OLDER

    # An asset run fails with that line in its event log, not retried (it fails the same way every time),
    # and the store stays where it was.
    result = materialize(
        ALL_ASSETS,
        selection=[assets.prices],
        resources=tiny_resources(tmp_path / "home", fresh_url),
        run_config={"ops": {"prices": {"config": {"start": "2024-01-02", "end": "2024-03-28"}}}},
        raise_on_error=False,
    )
    assert not result.success
    messages = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:
            messages.append(error.message)
            error = error.cause or error.context
    assert any("run `ldtm db upgrade`" in m for m in messages), messages
    assert not [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert revision_of(fresh_url) == OLDER

    upgrade(fresh_url)  # what `ldtm db upgrade` does: then the resource opens it
    AppDatabase(url=fresh_url).engine(store)
    assert revision_of(fresh_url) == head_revision()
