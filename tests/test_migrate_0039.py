"""Revision 0039: a submitted model's rows ('external') are never published. A store written by the previous
release (0038) upgrades with every accuracy view row unchanged, and afterwards an 'external' row recorded
first on an evening changes no view: the published row stays the first one that is neither shadow nor
external."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import registry_row
from migrate_helpers import fresh_database, upgrade_by_cli
from sqlalchemy import insert, text
from test_leaderboard import _row

from ldtm_core.accuracy_views import VIEW_NAMES
from ldtm_core.migrate import upgrade
from ldtm_core.schema import snapshots

PREVIOUS = "0038"
DAYS = [dt.date(2024, 5, 1) + dt.timedelta(days=i) for i in range(12)]


def _rows(ids, days, status="active", version="v1", pred=None):
    out = []
    for t in ("AAA", "BBB"):
        for i, d in enumerate(days):
            actual = 100.0 + (1 if (i * 7 + len(t)) % 3 else -1)
            p = pred if pred is not None else (100.5 if i % 2 else 99.5)
            r = _row(t, ids[t], d, 100.0, 99.0, p, actual, "replay", 1.5, 2.5)
            out.append(
                {**r, "model_status": status, "model_version": version, "prev_hash": r["prev_hash"] + version}
            )
    return out


def _view_rows(engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        # Fixed view names from accuracy_views, no user text.
        return {v: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {v}")).all())) for v in VIEW_NAMES}  # noqa: S608


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_previous_release_store_upgrades_to_0039_and_external_rows_are_never_published(
    tmp_path, backend, request
):
    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        with engine.begin() as conn:
            ids = {t: registry_row(conn, t, status="active") for t in ("AAA", "BBB")}
            conn.execute(insert(snapshots), _rows(ids, DAYS))
        before = _view_rows(engine)
        assert len(before["accuracy_30d"]) == 4  # two tickers x (replay, all)
        engine = upgrade_by_cli(url, tmp_path, "0039", "external")
        assert _view_rows(engine) == before  # no 'external' row yet: every figure as it was

        # Two new evenings: a submitted model's (always wrong) row recorded first, then the published one.
        later = [DAYS[-1] + dt.timedelta(days=i) for i in (1, 2)]
        with engine.begin() as conn:
            ext = {t: registry_row(conn, t) for t in ("AAA", "BBB")}
            conn.execute(insert(snapshots), _rows(ext, later, status="external", version="ext", pred=50.0))
        with engine.begin() as conn:
            conn.execute(insert(snapshots), _rows(ids, later))
        after = _view_rows(engine)
        with engine.begin() as conn:
            published_only = conn.execute(
                text(
                    "SELECT COUNT(*) FROM accuracy_30d_by_model_with_in_sample_and_ungated WHERE model_version = 'ext'"
                )
            ).scalar_one()
        assert published_only == 0
        n = {(r[0], r[1]): r[2] for r in after["accuracy_30d"]}
        assert n[("AAA", "all")] == n[("BBB", "all")] == len(DAYS) + 2  # the active rows of the new evenings
