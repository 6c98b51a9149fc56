"""Soak on PostgreSQL: 250 replayed evenings x 103 tickers with demo models, fillback, leaderboard.

Prints time and peak memory (docs/reliability.md records the figures)."""

from __future__ import annotations

import math
import resource
import time

import numpy as np
import pandas as pd
import pytest
import torch
from rel_helpers import make_settings
from sqlalchemy import func, select

from ldtm_core import registry
from ldtm_core.calendar import session_array
from ldtm_core.checkpoints import save_checkpoint
from ldtm_core.db import get_engine
from ldtm_core.fillback import fillback
from ldtm_core.ingest import ingest_frame
from ldtm_core.leaderboard import leaderboard, wilson_interval
from ldtm_core.model import LDTM, get_profile
from ldtm_core.registry import register_candidate
from ldtm_core.schema import prices, snapshots
from ldtm_core.snapshots import predict
from ldtm_core.synthetic import generate
from ldtm_core.universe import load_universe

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(600)]
EVENINGS = 250


def _expected_leaderboard(engine) -> pd.DataFrame:
    """accuracy_30d for mode 'all', recomputed in pandas straight from the snapshot rows."""
    with engine.connect() as conn:
        df = pd.DataFrame(conn.execute(select(snapshots)).mappings().all())
    df = df[df.next_day_actual.notna()]
    latest = df.run_date.max()
    df = df[df.run_date >= latest - pd.Timedelta(days=29)]
    rows = []
    for t, g in df.groupby("ticker"):
        n, hits = len(g), int(g.next_day_direction_correct.astype(bool).sum())
        up = int((g.next_day_actual > g.run_date_close).sum())
        same = g.prev_close.notna() & (
            ((g.run_date_close > g.prev_close) & (g.next_day_actual > g.run_date_close))
            | ((g.run_date_close < g.prev_close) & (g.next_day_actual < g.run_date_close))
            | ((g.run_date_close == g.prev_close) & (g.next_day_actual == g.run_date_close))
        )
        lo, hi = wilson_interval(hits, n)
        rows.append(
            {
                "ticker": t,
                "n": n,
                "hits": hits,
                "direction_accuracy": hits / n,
                "wilson_low": lo,
                "wilson_high": hi,
                "always_up_accuracy": up / n,
                "persistence_accuracy": int(same.sum()) / n,
                **{
                    f"{h}_mape": g[f"{h}_pct_error"].abs().mean()
                    for h in ("next_day", "next_monday", "one_month")
                },
            }
        )
    return pd.DataFrame(rows).set_index("ticker").sort_index()


def test_soak_250_evenings_103_tickers(pg_url, tmp_path):
    torch.set_num_threads(1)
    tickers = load_universe("full")
    assert len(tickers) == 103
    t0 = time.perf_counter()
    settings = make_settings(tmp_path / "home", pg_url)
    engine = get_engine(pg_url)
    ingest_frame(engine, generate(tickers, "2022-01-03", "2024-12-31", seed=5), "synthetic")
    cfg = get_profile("demo")
    for i, t in enumerate(tickers):
        torch.manual_seed(i)
        path = settings.checkpoint_dir / "candidates" / f"{t}.pt"
        sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, t, pd.Timestamp("2023-06-01").date(), None)
        mid = register_candidate(
            engine,
            ticker=t,
            cfg=cfg,
            profile="demo",
            trained_on_date=pd.Timestamp("2023-06-01").date(),
            checkpoint_path=str(path),
            checkpoint_sha256=sha,
            val_loss=None,
        )
        registry.promote(engine, mid, "soak", settings)
    t_setup = time.perf_counter() - t0

    s = session_array()
    end = np.datetime64("2024-11-29", "D")
    days = [pd.Timestamp(d).date() for d in s[s <= end][-EVENINGS:]]
    t1 = time.perf_counter()
    written = skipped = 0
    reasons: set[str] = set()
    for d in days:
        res = predict(engine, settings, d)
        written += res.rows_written
        skipped += len(res.skipped)
        reasons.update(res.skipped.values())
    t_predict = time.perf_counter() - t1

    t2 = time.perf_counter()
    filled = fillback(engine, neutral_band_pct=0.25)
    t_fill = time.perf_counter() - t2
    t3 = time.perf_counter()
    board = leaderboard(engine, "all")
    t_board = time.perf_counter() - t3
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = time.perf_counter() - t0

    with engine.connect() as conn:
        n_rows = conn.execute(select(func.count()).select_from(snapshots)).scalar_one()
        distinct = conn.execute(
            select(func.count()).select_from(
                select(snapshots.c.ticker, snapshots.c.run_date).distinct().subquery()
            )
        ).scalar_one()
        last_price = conn.execute(select(func.max(prices.c.date))).scalar_one()
        unfilled_due = conn.execute(
            select(func.count())
            .select_from(snapshots)
            .where(snapshots.c.next_day_date <= last_price, snapshots.c.next_day_actual.is_(None))
        ).scalar_one()
    assert written == n_rows == distinct == len(tickers) * EVENINGS - skipped
    # Only synthetic late listings are skipped (too little history on their first evenings).
    assert skipped < len(tickers) * EVENINGS // 100
    assert all("window needs" in r or "no price for" in r for r in reasons), reasons
    assert filled.filled["next_day"] == n_rows  # every next-day target (<= 2024-12-02) has a price
    assert unfilled_due == 0

    expected = _expected_leaderboard(engine)
    got = board.set_index("ticker").sort_index()
    assert list(got.index) == list(expected.index) == sorted(tickers)
    for col in expected.columns:
        a, b = got[col].to_numpy(dtype=float), expected[col].to_numpy(dtype=float)
        assert np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True), col

    print(
        f"\nSOAK 103 tickers x {EVENINGS} evenings on PostgreSQL: {n_rows} rows ({skipped} skipped); setup {t_setup:.1f}s, "
        f"predict {t_predict:.1f}s ({t_predict / EVENINGS * 1000:.0f} ms/evening), fillback {t_fill:.2f}s "
        f"({filled.total_filled} values), leaderboard {t_board:.3f}s; total {total:.1f}s; "
        f"peak RSS {peak_mib:.0f} MiB"
    )
    assert math.isfinite(total)
