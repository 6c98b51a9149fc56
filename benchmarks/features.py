"""Feature store benchmark: materialise the features of every ticker, table vs Parquet, side by side.

    .venv/bin/python benchmarks/features.py --database-url postgresql+psycopg2://postgres@127.0.0.1:5432/SCRATCH_DB

The database must already hold prices (e.g. `LDTM_DATABASE_URL=... ldtm ingest synthetic --tickers 103`
with the full universe, 20 years). It DELETES the stored features of that database: use a scratch one.
Times, in one process, interleaved `--repeat` times:
  first    feature_store.build_features into an empty store (the first materialisation): one prices
           read, features, fingerprints, and one transaction that COPYs (binary, PostgreSQL) every
           row and writes the fingerprint rows
  rebuild  the same with force=True (every set deleted and rewritten)
  parquet  the same prices read, features and fingerprints, then one Parquet file per ticker in a
           temporary artifact directory (temp file + rename, fingerprint in the file's metadata)
  no-op    build_features when every set is current (what a nightly costs before its new rows)
then the per-ticker read that training does and the window read that inference adds for every ticker.

The box is shared, so next to wall time each build reports the CPU seconds it cost: this process
(getrusage) plus its PostgreSQL backend (/proc/<pid>/stat of the one pooled connection; the server must
run on this host). On an idle machine the wall time of this sequential work is about their sum.
On SQLite (the smoke test's tiny run) the database works inside this process: server CPU reads 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.pool import StaticPool  # noqa: E402

from ldtm_core.config import masked_url  # noqa: E402
from ldtm_core.data import feature_store as fs  # noqa: E402
from ldtm_core.data.features import WARMUP_ROWS, compute_features  # noqa: E402
from ldtm_core.data.prices import load_prices, price_summary  # noqa: E402
from ldtm_core.learning.price_windows import RSI_SETTLE_ROWS, load_price_arrays, start_for  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _backend_cpu(pid: int | None) -> float:
    if pid is None:  # SQLite: in-process, counted in the client's CPU
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def costed(fn, backend_pid: int | None):
    """(wall s, client CPU s, server CPU s, result)."""
    c0, s0, t0 = _own_cpu(), _backend_cpu(backend_pid), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, _own_cpu() - c0, _backend_cpu(backend_pid) - s0, out


def build_parquet(engine, tickers: list[str], root: Path) -> int:
    rows = 0
    for t, prices in fs.load_prices_bulk(engine, tickers).items():
        frame = compute_features(prices)
        fp = fs.fingerprint(prices, fs.corporate_actions_applied(engine, t))
        table = pa.Table.from_pandas(frame.reset_index(), preserve_index=False)
        table = table.replace_schema_metadata(
            {"ldtm_fingerprint": fp.token, "ldtm_definition": fs.FEATURE_DEFINITION}
        )
        tmp = root / f".{t}.parquet.tmp"
        pq.write_table(table, tmp)
        tmp.replace(root / f"{t}.parquet")
        rows += len(frame)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    upgrade(args.database_url)
    # One connection for everything, so its server process's CPU time is the whole server-side cost.
    engine = create_engine(args.database_url, poolclass=StaticPool)
    pid = None
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    summary = price_summary(engine)
    tickers = list(summary["ticker"])
    print(
        f"{masked_url(args.database_url)}: {len(tickers)} tickers, {int(summary['rows'].sum())} price rows, "
        f"{summary['first_date'].min()}..{summary['last_date'].max()}; load {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    costs: dict[str, list[tuple[float, float, float]]] = {"first": [], "table": [], "parquet": [], "noop": []}
    with tempfile.TemporaryDirectory(prefix="ldtm_features_") as tmp:
        root = Path(tmp)
        for _ in range(args.repeat):
            with engine.begin() as conn:  # an empty store: the first materialisation
                conn.execute(text("DELETE FROM features"))
                conn.execute(text("DELETE FROM feature_sets"))
            *c, outcomes = costed(lambda: fs.build_features(engine, tickers), pid)
            costs["first"].append(tuple(c))
            *c, _ = costed(lambda: fs.build_features(engine, tickers, force=True), pid)
            costs["table"].append(tuple(c))
            *c, parquet_rows = costed(lambda: build_parquet(engine, tickers, root), pid)
            costs["parquet"].append(tuple(c))
            *c, again = costed(lambda: fs.build_features(engine, tickers), pid)
            costs["noop"].append(tuple(c))
        size = sum(p.stat().st_size for p in root.glob("*.parquet"))
    rows = sum(o.rows for o in outcomes)
    assert rows == parquet_rows and {o.status for o in again} == {"current"}
    t_load, _ = timed(lambda: fs.load_prices_bulk(engine, tickers))

    # Reader costs: training's per-ticker read (stored) vs recomputing from the same prices.
    t_read = statistics.median(timed(lambda t=t: fs.prices_and_features(engine, t))[0] for t in tickers[:20])
    t_recompute = statistics.median(
        timed(lambda t=t: compute_features(load_prices(engine, [t])[t]))[0] for t in tickers[:20]
    )
    # Inference: the window check + read it adds for all tickers on the latest evening.
    run_date = summary["last_date"].max()
    need = 30 + WARMUP_ROWS + RSI_SETTLE_ROWS
    arrays = load_price_arrays(engine, tickers, start_for(run_date, need), run_date)
    windows = dict.fromkeys(tickers, 30)
    t_windows = statistics.median(
        timed(lambda: fs.stored_windows(engine, arrays, run_date, windows))[0] for _ in range(args.repeat)
    )
    stored, why = fs.stored_windows(engine, arrays, run_date, windows)
    assert not why, why

    def med(name: str) -> str:
        wall, cpu, server = (statistics.median(x[i] for x in costs[name]) for i in range(3))
        return (
            f"wall {wall:6.2f} s | CPU client {cpu:5.2f} s + server {server:5.2f} s = {cpu + server:5.2f} s"
        )

    def cpu_total(name: str) -> float:
        return statistics.median(x[1] + x[2] for x in costs[name])

    print(f"feature rows: {rows} ({len(tickers)} tickers); parquet on disk {size / 2**20:.1f} MiB")
    print(f"prices read alone (COPY)                     {t_load:.2f} s")
    print(f"table   first build (empty store)            {med('first')}")
    print(f"table   rebuild (force: delete + COPY)       {med('table')}")
    print(f"parquet build (file per ticker)              {med('parquet')}")
    print(f"no-op rebuild (every set current)            {med('noop')}")
    print(f"CPU ratio table first build / parquet        {cpu_total('first') / cpu_total('parquet'):.2f}")
    print(
        f"training read, stored, per ticker          {t_read * 1000:.1f} ms (recompute: {t_recompute * 1000:.1f} ms)"
    )
    print(f"inference window check + read, {len(stored)} tickers {t_windows * 1000:.1f} ms")
    print(
        f"measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; numpy {np.__version__}, pyarrow {pa.__version__}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
