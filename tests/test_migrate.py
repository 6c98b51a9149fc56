"""First-use migration: concurrent first commands on a fresh database all succeed (issue 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from ldtm_core.db import get_engine
from ldtm_core.migrate import current_revision, head_revision
from ldtm_core.schema import metadata

REPO = Path(__file__).resolve().parents[1]
# Each process imports first, then waits for the same instant, so the migrations really overlap.
RACER = """
import sys, time
from ldtm_core.migrate import upgrade, current_revision
go = float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))
upgrade(sys.argv[1])
print(current_revision(sys.argv[1]))
"""


def _race(url: str, n: int) -> list[subprocess.CompletedProcess]:
    go = time.time() + 4.0  # after every interpreter has imported alembic and sqlalchemy
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, str(go)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _assert_all_migrated(url: str, results: list[subprocess.CompletedProcess]) -> None:
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == head_revision(), r.stdout
    names = set(inspect(get_engine(url)).get_table_names())
    assert {t.name for t in metadata.sorted_tables} <= names
    assert current_revision(url) == head_revision()


def test_concurrent_first_migrations_on_a_fresh_sqlite_file_all_succeed(tmp_path):
    for trial in range(2):
        url = f"sqlite:///{tmp_path / f'trial{trial}' / 'ldtm.db'}"
        (tmp_path / f"trial{trial}").mkdir()
        _assert_all_migrated(url, _race(url, 3))


@pytest.mark.postgres
def test_concurrent_first_migrations_on_a_fresh_postgres_database_all_succeed(pg_server_url):
    admin = create_engine(make_url(pg_server_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = f"ldtm_test_migrate_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_server_url).set(database=name).render_as_string(hide_password=False)
    try:
        _assert_all_migrated(url, _race(url, 3))
    finally:
        get_engine(url).dispose()
        get_engine.cache_clear()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_two_first_cli_ingests_on_a_fresh_sqlite_home_both_succeed(tmp_path):
    """What the user ran: two `ldtm ingest csv` at once on a home that does not exist yet."""
    from test_ingest import frame, write_csv, yahoo

    home = tmp_path / "home"
    files = []
    for ticker in ("AAPL", "NVDA"):
        path = tmp_path / f"{ticker}.csv"
        write_csv(path, yahoo(frame(ticker, n=15)))
        files.append(path)
    env = {**os.environ, "LDTM_HOME": str(home), "LDTM_UNIVERSE": "demo"}
    env.pop("LDTM_DATABASE_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ldtm_core", "ingest", "csv", str(f)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in files
    ]
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
    with get_engine(f"sqlite:///{home / 'ldtm.db'}").connect() as conn:
        counts = dict(conn.execute(text("SELECT ticker, COUNT(*) FROM prices GROUP BY ticker")).all())
    assert counts == {"AAPL": 15, "NVDA": 15}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_database_newer_than_the_code_is_one_clear_error(tmp_path, backend, request):
    # Issue 38 D7: a database one revision newer than the code gave a 102-line alembic traceback.
    from ldtm_core.db import DatabaseError
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'ldtm.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = upgrade(url)
    head = current_revision(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_a_later_release'"))
    with pytest.raises(
        DatabaseError,
        match=rf"revision 9999_from_a_later_release.* newer than this code \(its newest: {head}\)",
    ):
        upgrade(url)
    r = subprocess.run(
        [sys.executable, "-m", "ldtm_core", "prices", "summary"],
        env={**os.environ, "LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "newer than this code" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3
    with engine.begin() as conn:  # nothing was changed
        assert (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            == "9999_from_a_later_release"
        )
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})


def test_db_upgrade_says_what_it_changes_and_dry_run_changes_nothing(tmp_path):
    # Issue 38: `ldtm db upgrade` said nothing of what changes (tie re-scoring, fold keys, legacy shadows).
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    upgrade(url, "0026")
    env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
    runner = CliRunner()
    dry = runner.invoke(app, ["db", "upgrade", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    for revision, words in (
        ("0027", "shadow_designs"),
        ("0028", "ix_snapshots_ticker_id"),
        ("0030", "fillfactor"),
    ):
        assert revision in dry.output and words in dry.output
    assert "nothing was changed" in dry.output and current_revision(url) == "0026"
    real = runner.invoke(app, ["db", "upgrade"], env=env)
    assert real.exit_code == 0 and "0027" in real.output and "shadow_designs" in real.output
    head = current_revision(url)
    assert head != "0026" and f"at revision {head}" in real.output
    again = runner.invoke(app, ["db", "upgrade", "--dry-run"], env=env)
    assert "already at the newest revision" in again.output


# The newest revision of the release before the fold baselines became rows of their own (0031).
RELEASED = "0030"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_db_upgrade_keeps_the_folds_baselines_of_a_store_written_by_the_current_release(
    tmp_path, backend, request
):
    """Issue 39 item 1: a store whose folds hold persistence_* / trend_* columns (revision 0020, as the
    current release writes them) reads the same baseline figures after `ldtm db upgrade` moves them
    into backtest_fold_baselines; a fold that predates them stays unknown, never zero."""
    import datetime as dt

    from migrate_helpers import fresh_database
    from sqlalchemy import MetaData, Table
    from typer.testing import CliRunner

    from ldtm_core.accountability.gate.gate import newest_backtest
    from ldtm_core.cli import app
    from ldtm_core.migrate import upgrade
    from ldtm_core.scoring import baselines

    with fresh_database(backend, tmp_path, request) as url:
        engine = upgrade(url, RELEASED)
        fold = {
            "backtest_id": "bt-released",
            "model_id": None,
            "ticker": "AAPL",
            "cutoff": dt.date(2024, 1, 2),
            "train_start": dt.date(2023, 1, 3),
            "train_end": dt.date(2023, 12, 29),
            "test_start": dt.date(2024, 1, 3),
            "test_end": dt.date(2024, 2, 1),
            "n": 22,
            "direction_accuracy": 0.6,
            "always_up_accuracy": 0.5,
            "mean_abs_pct_error": 1.0,
            "leakage_rows": 0,
            "created_at": dt.datetime(2024, 2, 2, tzinfo=dt.UTC),
            "model_only_hits": 5,
            "up_only_hits": 3,
            "ties": 2,
        }
        released = {
            "persistence_hits": 9,
            "persistence_model_only": 6,
            "persistence_only": 3,
            "trend_hits": 11,
            "trend_model_only": 4,
            "trend_only": 3,
        }
        rows = [
            {**fold, "fold": 1, **released},
            {**fold, "fold": 2, **released, "trend_hits": 12, "trend_only": 4},
            {**fold, "backtest_id": "bt-older", "fold": 1, **dict.fromkeys(released)},  # before 0020
        ]
        folds = Table("backtest_folds", MetaData(), autoload_with=engine)  # as the released schema has it
        with engine.begin() as conn:
            conn.execute(folds.insert(), rows)
        env = {"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
        out = CliRunner().invoke(app, ["db", "upgrade"], env=env)
        assert out.exit_code == 0, out.output
        assert current_revision(url) == head_revision()
        engine = get_engine(url)
        with engine.connect() as conn:
            stored = conn.execute(
                text(
                    "SELECT fold, baseline, n, hits, model_only, base_only FROM backtest_fold_baselines ORDER BY 1, 2"
                )
            ).all()
        assert [tuple(r) for r in stored] == [
            (1, "persistence", 20, 9, 6, 3),
            (1, "trend", 20, 11, 4, 3),
            (2, "persistence", 20, 9, 6, 3),
            (2, "trend", 20, 12, 4, 4),
        ]
        with engine.connect() as conn:
            from ldtm_core.accountability.gate.gate import with_fold_baselines

            read = with_fold_baselines(
                conn,
                [dict(r) for r in conn.execute(text("SELECT * FROM backtest_folds ORDER BY id")).mappings()],
            )
        got = baselines.pooled(read[:2])
        assert got["persistence"] == baselines.Paired("persistence", 40, 18, 12, 6)
        assert got["trend"] == baselines.Paired("trend", 40, 23, 8, 7)
        assert got["always_up"] == baselines.Paired("always_up", 40, 20, 10, 6)
        older = baselines.from_fold(read[2])
        assert older["persistence"] is None and older["trend"] is None
        assert newest_backtest(engine, 0) is None  # the readers run on the upgraded store
        get_engine.cache_clear()


def test_an_upgrade_that_waited_for_another_says_it_applied_nothing(tmp_path, monkeypatch):
    """Of two upgrades at once, the one that waited for the lock also printed "applying N revision(s)":
    it had read what was pending before the lock. It now reads it under the lock, after the other."""
    from typer.testing import CliRunner

    from ldtm_core import migrate
    from ldtm_core.cli import app

    url = f"sqlite:///{tmp_path / 'ldtm.db'}"
    migrate.upgrade(url, "0031")
    locked = migrate._under_the_migration_lock

    def the_other_upgrade_first(url, step):  # another process held the lock and upgraded meanwhile
        locked(url, lambda conn, cfg: migrate._run_upgrade(cfg, "head"))
        return locked(url, step)

    monkeypatch.setattr(migrate, "_under_the_migration_lock", the_other_upgrade_first)
    out = CliRunner().invoke(
        app, ["db", "upgrade"], env={"LDTM_DATABASE_URL": url, "LDTM_HOME": str(tmp_path)}
    )
    assert out.exit_code == 0, out.output
    assert "applying" not in out.output and "0032" not in out.output
    assert "nothing to apply (already at the newest revision)" in out.output
    assert f"at revision {migrate.head_revision()}" in out.output
