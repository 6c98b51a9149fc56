"""PostgreSQL restarted in the middle of a run (the real local server): the run recovers through
pre-ping + transient retry with backoff, exactly as a clean run; never partial or duplicate rows."""

from __future__ import annotations

import pytest
from rel_helpers import (
    RUN_DATE,
    TICKERS,
    build_world,
    cli_env,
    fillback_world,
    finish,
    pause_env,
    pg_ensure_up,
    pg_restart,
    release,
    snapshot_state,
    spawn_cli,
    wait_paused,
)
from sqlalchemy import select

from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.db import get_engine
from ldtm_core.schema import run_log

pytestmark = [pytest.mark.timeout(180), pytest.mark.postgres, pytest.mark.restarts_server]


def _restart_at(point, args, home, url, pause_dir):
    proc = spawn_cli(args, cli_env(home, url, **pause_env(pause_dir, point)))
    wait_paused(pause_dir, [proc])
    pg_restart()  # every open connection (idle in the pool, or mid-transaction) is cut
    pg_ensure_up()
    release(pause_dir)
    return finish(proc)


def test_restart_between_compute_and_write_predict_recovers_once(
    pg_url, pg_guard, tmp_path, pause_dir, twin_url
):
    home = tmp_path / "home"
    build_world(pg_url, home)
    rc, out, err = _restart_at(
        "predict.before_write", ["predict", "--run-date", RUN_DATE.isoformat()], home, pg_url, pause_dir
    )
    # The pooled connections are stale after the restart: pre-ping must replace them and the run
    # must complete (a clean error would be acceptable behaviour too, but it is not what this tests).
    assert rc == 0, (out, err)
    assert "Traceback" not in err
    assert f"{len(TICKERS)} rows written" in out
    assert len(snapshot_state(pg_url)) == len(TICKERS)
    with get_engine(pg_url).connect() as conn:
        assert [r.status for r in conn.execute(select(run_log.c.status))] == ["ok"]

    twin = build_world(twin_url, tmp_path / "twin")
    predict(get_engine(twin_url), twin, RUN_DATE)
    assert snapshot_state(pg_url) == snapshot_state(twin_url)


def test_restart_inside_the_fillback_transaction_is_retried(pg_url, pg_guard, tmp_path, pause_dir, twin_url):
    home = tmp_path / "home"
    fillback_world(pg_url, home)
    # '#1': pause only in the first attempt; the retried transaction runs straight through.
    rc, out, err = _restart_at("fillback.before_commit#1", ["fillback"], home, pg_url, pause_dir)
    assert rc == 0, (out, err)
    assert "Traceback" not in err

    fillback_world(twin_url, tmp_path / "twin")
    fillback(get_engine(twin_url), neutral_band_pct=0.25)
    assert snapshot_state(pg_url) == snapshot_state(twin_url)  # every value filled once, as a clean run
    assert fillback(get_engine(pg_url), neutral_band_pct=0.25).total_filled == 0
