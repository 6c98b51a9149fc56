"""Migrations run only from `ldtm db upgrade` (issue 38): every other entry point opens the database as it
is. An empty one is created at the newest revision (first use, the demo); one at the newest opens; one
behind it is refused in one line naming `ldtm db upgrade`, and is left exactly as it was, so the previous
release can still open it."""

from __future__ import annotations

import pytest
from migrate_helpers import OLDER, fresh_database, pending_after, revision_of
from sqlalchemy import inspect
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.db import DatabaseError, get_engine
from ldtm_core.migrate import head_revision, upgrade
from ldtm_core.schema import metadata

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
runner = CliRunner()


@pytest.fixture(params=BACKENDS)
def fresh_url(request, tmp_path):
    with fresh_database(request.param, tmp_path, request) as url:
        yield url


@pytest.fixture
def behind_url(fresh_url):
    """A store an older release migrated: at OLDER, some revisions behind this code's newest."""
    upgrade(fresh_url, OLDER)
    assert revision_of(fresh_url) == OLDER
    return fresh_url


def _env(url: str, tmp_path) -> dict[str, str]:
    return {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path / "home"), "LDTM_UNIVERSE": "demo"}


def _assert_the_refusal(message: str, url: str) -> None:
    head = head_revision()
    assert len(message.strip().splitlines()) == 1, message
    assert f"revision {OLDER}" in message and head in message, message
    assert f"{pending_after(OLDER)} revision(s) pending" in message, message
    assert "run `ldtm db upgrade` (`--dry-run` lists what changes)" in message, message
    assert "nothing was changed" in message and revision_of(url) == OLDER


def test_an_empty_database_is_created_at_the_newest_revision(fresh_url):
    from ldtm_core.migrate import open_database

    engine = open_database(fresh_url)
    assert revision_of(fresh_url) == head_revision()
    assert {t.name for t in metadata.sorted_tables} <= set(inspect(engine).get_table_names())
    assert open_database(fresh_url) is engine  # at the newest: it opens as it is


def test_a_database_behind_the_newest_revision_is_refused_and_left_as_it_is(behind_url):
    from ldtm_core.migrate import open_database

    with pytest.raises(DatabaseError) as refused:
        open_database(behind_url)
    _assert_the_refusal(str(refused.value), behind_url)
    assert "snapshot_chain_heads" not in str(refused.value)  # no alembic output, one line of ours
    assert "shadow_designs" not in set(inspect(get_engine(behind_url)).get_table_names())  # 0027's table


@pytest.mark.parametrize("command", [["prices", "summary"], ["leaderboard"], ["registry", "list"]])
def test_a_read_command_on_an_older_store_exits_2_with_one_line_and_changes_nothing(
    behind_url, tmp_path, command
):
    result = runner.invoke(app, command, env=_env(behind_url, tmp_path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    _assert_the_refusal(result.stderr.removeprefix("error: "), behind_url)


def test_ldtm_db_upgrade_migrates_an_older_store_and_the_command_then_works(behind_url, tmp_path):
    env = _env(behind_url, tmp_path)
    assert runner.invoke(app, ["prices", "summary"], env=env).exit_code == 2
    upgraded = runner.invoke(app, ["db", "upgrade"], env=env)
    assert upgraded.exit_code == 0, upgraded.output
    assert revision_of(behind_url) == head_revision()
    assert f"at revision {head_revision()}" in upgraded.output
    read = runner.invoke(app, ["prices", "summary"], env=env)
    assert read.exit_code == 0, read.output


def test_an_ordinary_command_on_an_empty_database_creates_it_at_the_newest_revision(fresh_url, tmp_path):
    # First use and the demo need no extra step: `ingest synthetic` then `prices summary` on nothing.
    env = _env(fresh_url, tmp_path)
    ingest = runner.invoke(
        app,
        ["ingest", "synthetic", "--tickers", "AAPL", "--start", "2024-01-02", "--end", "2024-02-01"],
        env=env,
    )
    assert ingest.exit_code == 0, ingest.output
    assert revision_of(fresh_url) == head_revision()
    summary = runner.invoke(app, ["prices", "summary"], env=env)
    assert summary.exit_code == 0 and "AAPL" in summary.output, summary.output


def test_db_upgrade_dry_run_on_an_older_store_still_lists_and_changes_nothing(behind_url, tmp_path):
    dry = runner.invoke(app, ["db", "upgrade", "--dry-run"], env=_env(behind_url, tmp_path))
    assert dry.exit_code == 0, dry.output
    assert f"would apply {pending_after(OLDER)} revision(s)" in dry.output
    assert revision_of(behind_url) == OLDER


def test_a_database_at_the_newest_revision_opens_without_the_lock_or_alembic(db_url, monkeypatch):
    """Every command and step opens a store already at the newest revision: one read of its revision,
    no migration lock, no run of alembic (which read and executed every revision file each time: about a
    tenth of the test suite's time). A first use and an older store still take the locked path."""
    from ldtm_core import migrate

    def forbidden(*_args, **_kwargs):
        raise AssertionError("the migration lock or alembic was used on a store at the newest revision")

    monkeypatch.setattr(migrate, "_under_the_migration_lock", forbidden)
    assert migrate.open_database(db_url) is get_engine(db_url)
    assert migrate.upgrade(db_url) is get_engine(db_url)
    with pytest.raises(AssertionError, match="migration lock"):
        migrate.upgrade(db_url, OLDER)  # any other target: the locked path
