"""Helpers for the reliability tests: deterministic worlds, real subprocesses, pause/kill, PG restarts."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from sqlalchemy import func, select, text

from ldtm_core.accountability.ledger.fillback import fillback as run_fillback
from ldtm_core.accountability.ledger.snapshots import predict as snapshots_predict
from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.learning import registry
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import LDTM, get_profile
from ldtm_core.learning.registry import register_candidate
from ldtm_core.migrate import upgrade
from ldtm_core.schema import metadata, snapshots

REPO = Path(__file__).resolve().parents[2]
TICKERS = ["AAPL", "NVDA", "TSLA", "QQQ"]
START, END = "2023-01-03", "2024-06-28"
RUN_DATE = dt.date(2024, 5, 1)  # every horizon's target date (<= 2024-06-03) has a price
# Columns that differ between two equivalent runs by construction (ids, run ids, wall-clock times, and
# since chain version 2 the hashes, which cover run_id and created_at; the tests verify each chain).
VOLATILE = {
    "id",
    "run_id",
    "created_at",
    "filled_at",
    "next_day_filled_at",
    "next_monday_filled_at",
    "one_month_filled_at",
    "prev_hash",
    "row_hash",
}


def make_settings(home: Path, url: str) -> Settings:
    s = Settings(home=home, database_url=url)
    s.ensure_dirs()
    return s


def build_world(
    url: str, home: Path, tickers=TICKERS, *, promote: bool = True, start=START, end=END
) -> Settings:
    """Prices + one seeded (untrained) demo model per ticker, registered and (optionally) promoted.

    Deterministic: two worlds built with the same arguments predict identical values.
    """
    upgrade(url)
    settings = make_settings(home, url)
    engine = get_engine(url)
    ingest_frame(engine, generate(list(tickers), start, end, seed=11), "synthetic")
    cfg = get_profile("demo")
    for i, t in enumerate(tickers):
        torch.manual_seed(100 + i)
        path = settings.checkpoint_dir / "candidates" / t / f"{t}_seed{i}.pt"
        sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, t, dt.date(2023, 12, 29), 0.1)
        mid = register_candidate(
            engine,
            ticker=t,
            cfg=cfg,
            profile="demo",
            trained_on_date=dt.date(2023, 12, 29),
            checkpoint_path=str(path),
            checkpoint_sha256=sha,
            val_loss=0.1,
        )
        if promote:
            registry.promote(engine, mid, "test world", settings)
    return settings


def table_counts(url: str) -> dict[str, int]:
    engine = get_engine(url)
    with engine.connect() as conn:
        return {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in metadata.sorted_tables
        }


def snapshot_state(url: str) -> list[tuple]:
    """Every snapshot row without the columns that legitimately differ between equivalent runs."""
    cols = [c for c in snapshots.c if c.name not in VOLATILE]
    with get_engine(url).connect() as conn:
        rows = conn.execute(select(*cols).order_by(snapshots.c.ticker, snapshots.c.run_date)).all()
    return [tuple(r) for r in rows]


# --- subprocesses -------------------------------------------------------------------------------


def cli_env(home: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDTM_")}
    env.update(
        LDTM_HOME=str(home),
        LDTM_DATABASE_URL=url,
        LDTM_UNIVERSE="demo",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
        COLUMNS="200",
    )
    env.update(extra)
    return env


def pause_env(pause_dir: Path, point: str) -> dict[str, str]:
    pause_dir.mkdir(parents=True, exist_ok=True)
    return {"LDTM_TEST_PAUSE_AT": point, "LDTM_TEST_PAUSE_DIR": str(pause_dir), "LDTM_TEST_PAUSE_S": "120"}


def spawn_cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ldtm_core", *args],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ldtm_core", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawn_python(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_paused(pause_dir: Path, procs: list[subprocess.Popen], n: int | None = None, timeout: float = 90):
    """Block until `n` (default: all) processes sit at their pause point; fail if one exits first."""
    n = len(procs) if n is None else n
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(pause_dir.glob("paused-*"))) >= n:
            return
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError(f"process exited ({p.returncode}) before its pause point:\n{out}\n{err}")
        time.sleep(0.05)
    for p in procs:
        p.kill()
    raise AssertionError(f"processes did not reach the pause point within {timeout}s")


def sigkill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def release(pause_dir: Path) -> None:
    (pause_dir / "release").write_text("go")


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# --- PostgreSQL server ----------------------------------------------------------------------------


def pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def pg_ready() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"]).returncode == 0


def pg_restart() -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", "restart"],
        check=True,
        capture_output=True,
        timeout=60,
    )


def pg_ensure_up(timeout: float = 60) -> None:
    """Start the cluster if it is down and wait until it accepts connections."""
    if not pg_ready():
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", "start"],
            capture_output=True,
            timeout=60,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pg_ready():
            return
        time.sleep(0.2)
    raise AssertionError("PostgreSQL did not come back up")


def pg_terminate_others(url: str) -> None:
    """Drop every other session on the test database (used to make pooled connections stale)."""
    with get_engine(url).connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )


# --- gate worlds ----------------------------------------------------------------------------------


def add_candidate(
    url: str, settings: Settings, ticker: str, seed: int, trained_on=dt.date(2024, 3, 1)
) -> int:
    cfg = get_profile("demo")
    torch.manual_seed(seed)
    path = settings.checkpoint_dir / "candidates" / ticker / f"{ticker}_new{seed}.pt"
    sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, ticker, trained_on, 0.05)
    return register_candidate(
        get_engine(url),
        ticker=ticker,
        cfg=cfg,
        profile="demo",
        trained_on_date=trained_on,
        checkpoint_path=str(path),
        checkpoint_sha256=sha,
        val_loss=0.05,
    )


def add_passing_backtest(url: str, model_id: int, ticker: str) -> None:
    """Two folds that pass the default gate (60 % accuracy, 1 % error, no leakage); a fixed backtest
    id so a clean run's registry reasons compare equal."""
    from accountability_helpers import add_backtest

    add_backtest(
        get_engine(url), model_id, [(50, 0.6, 0.5, 1.0, 0)] * 2, ticker, backtest_id=f"bt-{model_id}"
    )


def registry_state(url: str) -> tuple[list, list]:
    """(models, events) without ids of events, paths' directories or timestamps."""
    from ldtm_core.schema import model_registry, registry_events

    with get_engine(url).connect() as conn:
        models = [
            (r.id, r.ticker, r.status, r.version, Path(r.promoted_path).name if r.promoted_path else None)
            for r in conn.execute(select(model_registry).order_by(model_registry.c.id))
        ]
        events = [
            (r.model_id, r.from_status, r.to_status)
            for r in conn.execute(select(registry_events).order_by(registry_events.c.id))
        ]
    return models, events


# --- fillback worlds ------------------------------------------------------------------------------

RUN_DATES = [dt.date(2024, 4, 1), dt.date(2024, 4, 15), dt.date(2024, 5, 1)]


def fillback_world(url, home):
    """Predictions on 3 evenings, a first fillback with prices to mid-May, then the rest of the prices."""
    settings = build_world(url, home, end="2024-05-15")
    engine = get_engine(url)
    for d in RUN_DATES:
        snapshots_predict(engine, settings, d)
    first = run_fillback(engine, neutral_band_pct=0.25)
    ingest_frame(engine, generate(TICKERS, "2024-05-16", "2024-06-28", seed=11), "synthetic")
    return settings, first
