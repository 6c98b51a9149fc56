"""Feature store benchmark: materialise the features of every ticker, table vs Parquet, side by side.

    .venv/bin/python benchmarks/features.py --database-url postgresql+psycopg2://postgres@127.0.0.1:5432/SCRATCH_DB

The database must already hold prices (e.g. `LDTM_DATABASE_URL=... ldtm ingest synthetic --tickers 103`
with the full universe, 20 years). Times, in one process, interleaved `--repeat` times:
  table    feature_store.build_features(force=True): one prices query, features, fingerprint, and per
           ticker one transaction that deletes the old rows, COPYs (PostgreSQL) the new ones and
           writes the fingerprint row
  parquet  the same prices query, features and fingerprint, then one Parquet file per ticker in a
           temporary artifact directory (temp file + rename, fingerprint in the file's metadata)
plus the no-op rebuild (every set current), the per-ticker read that training does, and the
window read that inference adds for every ticker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from ldtm_core import feature_store as fs  # noqa: E402
from ldtm_core.config import masked_url  # noqa: E402
from ldtm_core.features import WARMUP_ROWS, compute_features  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.prices import load_prices, price_summary  # noqa: E402
from ldtm_core.snapshots import RSI_SETTLE_ROWS, _load_price_arrays, _start_for  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


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
    engine = upgrade(args.database_url)
    summary = price_summary(engine)
    tickers = list(summary["ticker"])
    print(
        f"{masked_url(args.database_url)}: {len(tickers)} tickers, {int(summary['rows'].sum())} price rows, "
        f"{summary['first_date'].min()}..{summary['last_date'].max()}"
    )
    table_s, parquet_s, noop_s = [], [], []
    with tempfile.TemporaryDirectory(prefix="ldtm_features_") as tmp:
        root = Path(tmp)
        for _ in range(args.repeat):
            t, outcomes = timed(lambda: fs.build_features(engine, tickers, force=True))
            table_s.append(t)
            t, parquet_rows = timed(lambda: build_parquet(engine, tickers, root))
            parquet_s.append(t)
            t, again = timed(lambda: fs.build_features(engine, tickers))
            noop_s.append(t)
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
    arrays = _load_price_arrays(engine, tickers, _start_for(run_date, need), run_date)
    windows = dict.fromkeys(tickers, 30)
    t_windows = statistics.median(
        timed(lambda: fs.stored_windows(engine, arrays, run_date, windows))[0] for _ in range(args.repeat)
    )
    stored, why = fs.stored_windows(engine, arrays, run_date, windows)
    assert not why, why

    def med(xs):
        return f"{statistics.median(xs):.2f} s (runs: {', '.join(f'{x:.2f}' for x in xs)})"

    print(f"feature rows: {rows} ({len(tickers)} tickers); parquet on disk {size / 2**20:.1f} MiB")
    print(f"prices query alone                         {t_load:.2f} s")
    print(f"table   build (force, COPY per ticker)     {med(table_s)}")
    print(f"parquet build (file per ticker)            {med(parquet_s)}")
    print(
        f"ratio table / parquet                      {statistics.median(table_s) / statistics.median(parquet_s):.2f}"
    )
    print(f"no-op rebuild (all current)                {med(noop_s)}")
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
