"""Downgrading past a migration that rebuilds an earlier revision's views restores exactly the views
that revision had, and upgrading again restores the head's (issue 39 item 5).

0005, 0015, 0017 and 0021 recreate, on downgrade, the accuracy views of the revision below them from a
frozen copy of that revision's SQL. The reference for each is a fresh database migrated straight up to
that revision (the earlier migration's own upgrade); the view definitions must be identical, text for
text: sqlite_master.sql on SQLite, pg_views.definition on PostgreSQL. test_horizons pins the views at
0017, 0021, 0024 and 0026; this covers the revisions below (0004, 0014, 0016, 0018).

One known exception, pinned instead: PostgreSQL expands the views' `SELECT s.* FROM snapshots s` when a
view is created, so 0005's views rebuilt by 0017's downgrade (at 0016) also list snapshots.chain_version
(added by 0015), which the same views created by 0005 itself do not. The views return the same columns;
the pin is the definition the downgrade wrote before its SQL was frozen into it (issue 39).
"""

from __future__ import annotations

import hashlib
import json

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from migrate_helpers import fresh_database, revision_of
from sqlalchemy import text

from ldtm_core.db import get_engine
from ldtm_core.migrate import alembic_config, head_revision, upgrade

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

# The migrations whose downgrade recreates the views of the revision below them.
REBUILDS_VIEWS_ON_DOWNGRADE = ("0005", "0015", "0017", "0021")

# (dialect, revision) -> sha256 of the views after the downgrade, where they differ from a fresh
# database's (computed on the code before issue 39 froze the SQL into the migrations).
PINNED_NOT_FRESH = {
    ("postgresql", "0016"): "c6aaca50c704f6c68af55775eafcfb1d40c910c48027b9faccc13e6f4d0fd05e",
}


def _down_revision(revision: str) -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision).down_revision


def _views(url: str) -> list[tuple[str, str]]:
    engine = get_engine(url)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            q = "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public' ORDER BY viewname"
        else:
            q = "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name"
        return [tuple(row) for row in conn.execute(text(q)).all()]


def _digest(views: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps([list(v) for v in views]).encode()).hexdigest()


def _downgrade(url: str, revision: str) -> None:
    with get_engine(url).begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_downgrade_that_rebuilds_views_restores_the_earlier_revision_s_views(backend, tmp_path, request):
    targets = [_down_revision(rev) for rev in REBUILDS_VIEWS_ON_DOWNGRADE]
    assert targets == ["0004", "0014", "0016", "0018"]
    (tmp_path / "reference").mkdir()
    (tmp_path / "work").mkdir()
    with (
        fresh_database(backend, tmp_path / "reference", request) as reference,
        fresh_database(backend, tmp_path / "work", request) as url,
    ):
        expected = {}
        for target in targets:  # oldest first: one reference database walked up
            upgrade(reference, target)
            assert revision_of(reference) == target
            expected[target] = _views(reference)
            assert expected[target], f"no views at {target}"
        upgrade(reference)
        at_head = _views(reference)
        assert at_head != expected["0004"]

        upgrade(url)
        assert _views(url) == at_head
        for target in targets:
            _downgrade(url, target)
            assert revision_of(url) == target
            pinned = PINNED_NOT_FRESH.get((get_engine(url).dialect.name, target))
            if pinned is None:
                assert _views(url) == expected[target], f"views after downgrading to {target}"
            else:
                assert _views(url) != expected[target]
                assert _digest(_views(url)) == pinned, f"views after downgrading to {target}"
            upgrade(url)
            assert revision_of(url) == head_revision()
            assert _views(url) == at_head, f"views after upgrading again from {target}"
