"""Revision 0040: a horizon's predicted price may be NULL (a direction-only submitted forecast). A store
written by the previous release (0039), with submitted and filled rows and a logged re-fill, upgrades with
every row, hash and view figure unchanged and its chain verifying; afterwards a direction-only submission is
recorded and scored, the append-only rules still hold (SQLite's triggers survive the in-place edit), and the
downgrade refuses while a NULL prediction is stored."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from alembic import command
from migrate_helpers import fresh_database, upgrade_by_cli
from sqlalchemy import insert, select, text, update

from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.submissions import external
from ldtm_core.accountability.submissions.submit import submit
from ldtm_core.accuracy_views import VIEW_NAMES
from ldtm_core.data.calendar import session_close
from ldtm_core.horizons import HORIZONS
from ldtm_core.migrate import alembic_config, current_revision, head_revision, upgrade
from ldtm_core.schema import fill_revisions, snapshots
from tests.accountability_helpers import ingest, make_settings

PREVIOUS = "0039"
TICKERS = ["AAA", "BBB"]


def _evening(day: dt.date) -> dt.datetime:
    return session_close(day) + dt.timedelta(hours=1)


def _submit(engine, settings, tmp_path, day, column, values) -> None:
    horizons = HORIZONS if column == "expected_return" else HORIZONS[:1]
    rows = [{"ticker": t, "run_date": day.isoformat(), "horizon": h.name, column: v} for t, v in values.items() for h in horizons]  # fmt: skip
    path = tmp_path / f"{day}-{column}.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    submit(engine, settings, "desk", path, at=_evening(day))


def _revisions(engine) -> list:
    with engine.connect() as conn:
        return sorted(map(tuple, conn.execute(select(fill_revisions)).all()))


def _state(engine) -> tuple[list, dict]:
    with engine.connect() as conn:
        rows = sorted(map(tuple, conn.execute(select(snapshots)).all()))
        views = {v: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {v}")).all())) for v in VIEW_NAMES}  # noqa: S608
    return rows, views


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_previous_release_store_upgrades_to_0040_and_holds_direction_only_rows(
    tmp_path, backend, request, monkeypatch
):
    monkeypatch.delenv("LDTM_SUBMISSION_CUTOFF_MIN", raising=False)
    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, PREVIOUS)
        ingest(engine, TICKERS, start="2023-01-03", end="2023-08-31")
        settings = make_settings(tmp_path, url)
        external.register(engine, "desk", TICKERS)
        for day in (dt.date(2023, 6, 1), dt.date(2023, 6, 2)):
            _submit(engine, settings, tmp_path, day, "expected_return", {"AAA": 0.01, "BBB": -0.01})
        fillback(engine)
        with engine.begin() as conn:  # a logged revision row (the table 0040 edits beside snapshots)
            sid, old = conn.execute(select(snapshots.c.id, snapshots.c.next_day_actual).limit(1)).one()
            conn.execute(
                insert(fill_revisions).values(
                    snapshot_id=sid, ticker="AAA", run_date=dt.date(2023, 6, 1), horizon="next_day",
                    old_actual=old, new_actual=old, new_pct_error=0.0, reason="test",
                    revised_at=dt.datetime.now(dt.UTC),
                )
            )  # fmt: skip
        before = _state(engine), _revisions(engine)
        engine = upgrade_by_cli(url, tmp_path, "0040", "direction-only")
        assert (_state(engine), _revisions(engine)) == before
        assert verify(engine).ok

        _submit(
            engine, settings, tmp_path, dt.date(2023, 6, 5), "direction", {"AAA": "bullish", "BBB": "bearish"}
        )
        fillback(engine)
        with engine.connect() as conn:
            new = conn.execute(select(snapshots).where(snapshots.c.run_date == dt.date(2023, 6, 5))).all()
        assert len(new) == 2 and all(r.next_day_pred is None and r.next_day_actual is not None for r in new)
        assert all(r.next_day_direction_correct is not None for r in new)
        assert verify(engine).ok
        if backend == "sqlite":  # PostgreSQL's owner (this test's role) is not held by its trigger
            with pytest.raises(Exception, match="a prediction cannot be changed"), engine.begin() as conn:
                conn.execute(update(snapshots).where(snapshots.c.id == new[0].id).values(next_day_pred=1.0))
            with pytest.raises(Exception, match="a row cannot be deleted"), engine.begin() as conn:
                conn.execute(text("DELETE FROM snapshots"))
            with engine.connect() as conn:
                assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
        with pytest.raises(Exception, match="2 snapshot row\\(s\\) hold a direction-only"):
            command.downgrade(alembic_config(url), PREVIOUS)
        assert current_revision(url) == head_revision()
