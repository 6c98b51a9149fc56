"""Benchmark: the nightly `signal_performance` report, and its figures on a no-skill and a planted-edge market.

    .venv/bin/python benchmarks/signals.py postgresql+psycopg2://postgres@127.0.0.1:5432/postgres

Creates a fresh database `ldtm_bench_signals_<tag>_<pid>` on that server (dropped at the end unless --keep); a
`sqlite://` URL runs on a SQLite file in a temporary directory (the smoke test's tiny run). Synthetic
prices for the first --tickers names of the full universe over --years, one active model per ticker and
one published row per (ticker, evening), filled back by the project's fillback. Predicted return per
horizon = --skill x the realised return + N(0, --noise) (skill 0: no skill).

cost     the whole report as the asset computes it (rows, benchmark, IC, quintiles, both books, stats,
         the summary table and the equity-curve PNG), median of --repeat, with the phases;
figures  on the `demo` universe's tickers over --figure-years: IC, quintile spread, Sharpe and DSR of the
         long/short book for each seed of no skill and of the planted edge (--edge).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch_db import is_sqlite, scratch_database  # noqa: E402

from ldtm_core.accountability.ledger.fillback import fillback  # noqa: E402
from ldtm_core.accountability.signals.execution import DEFAULT_EXECUTION, attach  # noqa: E402
from ldtm_core.accountability.signals.rows import load_rows  # noqa: E402
from ldtm_core.accountability.signals.signals import report_from_rows, signal_report  # noqa: E402
from ldtm_core.accountability.signals.stats import recipes_tried  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import model_registry, snapshots  # noqa: E402

END = dt.date(2025, 12, 31)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def seed(engine, tickers: list[str], years: float, skill: float, noise: float, seed_: int) -> int:
    """Prices, models and one row per (ticker, evening) with NULL actuals; filled back. Returns rows."""
    start = END - dt.timedelta(days=int(365.25 * years) + 40)
    df = generate(tickers, start, END, seed=seed_)
    ingest_frame(engine, df, "synthetic")
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        ids = {
            t: conn.execute(
                insert(model_registry).values(
                    ticker=t,
                    status="active",
                    profile="demo",
                    arch_signature="s",
                    config_json='{"hidden": 8}',
                    trained_on_date=start,
                    checkpoint_path=f"/b/{t}.pt",
                    checkpoint_sha256="0" * 64,
                    version="v1.bench",
                    created_at=now,
                    updated_at=now,
                )  # fmt: skip
            ).inserted_primary_key[0]
            for t in tickers
        }
    rng = np.random.default_rng(seed_)
    rows = []
    for t, g in df.groupby("ticker", sort=True):
        dates = list(pd.to_datetime(g["date"]).dt.date)
        close = g["close"].to_numpy(dtype=float)
        n = len(dates) - 21
        i = np.arange(n)
        steps = {"next_day": 1, "next_monday": 3, "one_month": 21}
        pred = {
            h: close[i] * (1 + skill * (close[i + k] / close[i] - 1) + noise * rng.standard_normal(n))
            for h, k in steps.items()
        }
        ret = pred["next_day"] / close[i] - 1
        direction = np.where(ret > 0.0025, "bullish", np.where(ret < -0.0025, "bearish", "neutral"))
        for j in range(n):
            rows.append(
                {
                    "ticker": t, "run_date": dates[j], "run_date_close": float(close[j]), "prev_close": None,
                    "model_id": ids[t], "model_version": "v1.bench", "model_status": "active", "mode": "replay",
                    "in_sample": False, "next_day_pred": float(pred["next_day"][j]),
                    "next_monday_pred": float(pred["next_monday"][j]), "one_month_pred": float(pred["one_month"][j]),
                    "direction_pred": str(direction[j]), "neutral_band_pct": 0.25,
                    "next_day_date": dates[j + 1], "next_monday_date": dates[j + 3], "one_month_date": dates[j + 21],
                    "run_id": "bench", "created_at": now, "prev_hash": f"{t}{dates[j]}", "row_hash": "h",
                    "chain_version": 2,
                }
            )  # fmt: skip
    with engine.begin() as conn:
        for k in range(0, len(rows), 10_000):
            conn.execute(insert(snapshots), rows[k : k + 10_000])
    fillback(engine)
    return len(rows)


def _backend_cpu(pid: int | None) -> float:
    """CPU seconds a PostgreSQL backend has used (utime + stime; the server runs on this machine)."""
    if pid is None:  # SQLite: in-process, counted in the client's CPU
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _backend_pid(engine) -> int | None:
    if engine.dialect.name != "postgresql":
        return None
    engine.dispose()  # one pooled connection from here on: the report's reads run one after another
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar())


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _phases(engine, plot) -> tuple[float, ...]:
    """The report's steps one by one: rows, benchmark prices, IC/quintiles/books, stats table, PNG."""
    marks = [time.perf_counter()]
    rows = load_rows(engine)
    marks.append(time.perf_counter())
    frame, bench = attach(engine, rows, DEFAULT_EXECUTION)  # the held returns and benchmark: prices read
    marks.append(time.perf_counter())
    report = report_from_rows(replace(rows, rows=frame), bench, 5.0, recipes_tried(engine, rows.universe))
    marks.append(time.perf_counter())
    report.summary()
    marks.append(time.perf_counter())
    plot(report)
    marks.append(time.perf_counter())
    return tuple(b - a for a, b in zip(marks[:-1], marks[1:], strict=True))


def cost(engine, repeat: int) -> None:
    from ldtm_dagster.signal_plots import equity_figure_markdown

    def nightly():
        report = signal_report(engine)
        report.summary()
        report.portfolios["long_short"].contributions()
        equity_figure_markdown(report)
        return report

    pid = _backend_pid(engine)
    nightly()  # warm-up: imports, matplotlib fonts, the calendar
    walls, cpus, phases = [], [], []
    for _ in range(repeat):
        c0, s0 = _own_cpu(), _backend_cpu(pid)
        report, wall = timed(nightly)
        walls.append(wall)
        cpus.append((_own_cpu() - c0, _backend_cpu(pid) - s0))
        phases.append(_phases(engine, equity_figure_markdown))
    med = statistics.median(walls)
    ph = [statistics.median(p[k] for p in phases) * 1000 for k in range(5)]
    print(
        f"\nnightly signal_performance: {len(report.universe)} tickers x {len(report.evenings)} evenings "
        f"({report.rows_used} rows)"
    )
    print(
        f"  wall (median of {repeat})      {med * 1000:8.0f} ms   runs: {', '.join(f'{w:.2f}' for w in walls)} s"
    )
    client, server = (statistics.median(c[k] for c in cpus) for k in (0, 1))
    print(
        f"  CPU (median): client {client * 1000:.0f} ms + PostgreSQL backend {server * 1000:.0f} ms = "
        f"{(client + server) * 1000:.0f} ms (wall beyond it is waiting for a core on a shared box)"
    )
    print(
        f"  phases: rows {ph[0]:.0f} ms, benchmark prices {ph[1]:.0f} ms, IC/quintiles/books {ph[2]:.0f} ms, "
        f"stats table {ph[3]:.0f} ms, equity PNG {ph[4]:.0f} ms"
    )


def figures(url_for, years: float, seeds: int, edge: float, noise: float) -> None:
    tickers = load_universe("demo")
    print(f"\nfigures on the demo universe ({', '.join(tickers)}), {years:g} years, noise {noise:g}")
    print(
        f"  {'market':<18}{'seed':>5}{'mean IC 1d':>12}{'HAC t':>8}{'q5-q1 1d':>11}{'Sharpe net':>12}{'DSR':>7}"
        f"{'same-bar Sharpe':>17}"
    )
    for label, skill in (("no skill", 0.0), (f"planted {edge:g}", edge)):
        for s in range(seeds):
            url = url_for(f"fig{int(skill * 1000)}_{s}")
            engine = upgrade(url)
            seed(engine, tickers, years, skill, noise, 100 + s)
            r = signal_report(engine)
            ic = r.ic.set_index("horizon").loc["next_day"]
            q = r.quintiles.set_index("horizon").loc["next_day"]
            ls = r.summary().set_index(["portfolio", "basis"]).loc[("long bullish / short bearish", "net")]
            # The books trade next_close; same_close (the evening's own close) is the untradable bound.
            same = signal_report(engine, execution="same_close").summary().set_index(["portfolio", "basis"])
            print(
                f"  {label:<18}{s:>5}{ic['mean_ic']:>12.3f}{ic['hac_t']:>8.2f}{q['spread'] * 100:>10.3f}%"
                f"{ls['sharpe']:>12.2f}{ls['dsr']:>7.3f}"
                f"{same.loc[('long bullish / short bearish', 'net'), 'sharpe']:>17.2f}"
            )
            engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "url", help="PostgreSQL URL of any database on the server (a fresh one is created), or sqlite://"
    )
    ap.add_argument("--tickers", type=int, default=103, help="first N tickers of the full universe")
    ap.add_argument("--years", type=float, default=5.0, help="years of evenings")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skill", type=float, default=0.0, help="planted skill of the cost run's rows")
    ap.add_argument(
        "--noise", type=float, default=0.01, help="prediction noise (standard deviation of returns)"
    )
    ap.add_argument("--figures", type=int, default=3, help="seeds of each market for the figures (0: none)")
    ap.add_argument("--figure-years", type=float, default=2.0)
    ap.add_argument("--edge", type=float, default=0.05, help="planted skill of the figures' edge market")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = ap.parse_args()

    print(
        f"machine: {cpu_name()}, {os.cpu_count()} cores; database {'SQLite' if is_sqlite(args.url) else 'PostgreSQL'}"
    )
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as databases:

        def url_for(tag: str) -> str:
            return databases.enter_context(
                scratch_database(args.url, f"bench_signals_{tag}", Path(scratch), keep=args.keep)
            )

        url = url_for("cost")
        engine = upgrade(url)
        tickers = load_universe("full")[: args.tickers]
        n, t_seed = timed(lambda: seed(engine, tickers, args.years, args.skill, args.noise, 1))
        print(
            f"setup: {len(tickers)} tickers, {args.years:g} years, {n} rows written and filled in {t_seed:.1f} s"
        )
        cost(engine, args.repeat)
        engine.dispose()
        if args.figures:
            figures(url_for, args.figure_years, args.figures, args.edge, args.noise)


if __name__ == "__main__":
    main()
