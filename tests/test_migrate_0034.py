"""Revision 0034: the accuracy views read the dated universe. A store written by the previous release
(0033) upgrades with every view row unchanged (no membership history: everyone counts, as before), a
history imported afterwards takes non-members' evenings out of the views, and the downgrade restores the
0026 views (test_horizons pins them)."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import registry_row
from migrate_helpers import fresh_database, upgrade_by_cli
from sqlalchemy import insert, text
from test_horizons import _downgrade
from test_leaderboard import _row

from ldtm_core.accuracy_views import VIEW_NAMES
from ldtm_core.data.membership import Span, import_membership
from ldtm_core.db import get_engine
from ldtm_core.migrate import upgrade
from ldtm_core.schema import snapshots

PREVIOUS = "0033"
DAYS = [dt.date(2024, 5, 1) + dt.timedelta(days=i) for i in range(20)]


def _store(engine) -> None:
    """Two tickers' filled evenings, a published (gated) row each, hits and misses mixed."""
    with engine.begin() as conn:
        ids = {t: registry_row(conn, t, status="active") for t in ("AAA", "BBB")}
        rows = []
        for t in ("AAA", "BBB"):
            for i, d in enumerate(DAYS):
                actual = 100.0 + (1 if (i * 7 + len(t)) % 3 else -1)
                rows.append(
                    _row(t, ids[t], d, 100.0, 99.0, 100.5 if i % 2 else 99.5, actual, "replay", 1.5, 2.5)
                )
        conn.execute(insert(snapshots), rows)


def _view_rows(engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        # Fixed view names from accuracy_views, no user text.
        return {v: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {v}")).all())) for v in VIEW_NAMES}  # noqa: S608


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_previous_release_store_upgrades_to_0034_with_every_view_row_unchanged(tmp_path, backend, request):
    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        _store(engine)
        before = _view_rows(engine)
        assert len(before["accuracy_30d"]) == 4  # two tickers x (replay, all)
        engine = upgrade_by_cli(url, tmp_path, "0034", "member")
        assert _view_rows(engine) == before  # no history: every figure as it was

        # A history where BBB left after its 10th evening: its later evenings leave every view.
        import_membership(engine, [Span("AAA", DAYS[0]), Span("BBB", DAYS[0], DAYS[9])], "test")
        after = _view_rows(engine)
        by_ticker = {(r[0], r[1]): r[2] for r in after["accuracy_30d"]}
        assert (
            by_ticker[("AAA", "all")] == {(r[0], r[1]): r[2] for r in before["accuracy_30d"]}[("AAA", "all")]
        )
        assert by_ticker[("BBB", "all")] == 10

        # And back: the 0026 views (test_horizons pins their definitions), every row and figure as before.
        _downgrade(url, PREVIOUS)
        with get_engine(url).begin() as conn:
            conn.execute(text("DELETE FROM universe_membership"))
        assert _view_rows(get_engine(url)) == before
