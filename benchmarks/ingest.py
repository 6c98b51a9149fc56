"""Ingest and sample-building benchmark.

    .venv/bin/python benchmarks/ingest.py --database-url postgresql+psycopg2://postgres@127.0.0.1:5432/ldtm_bench_ingest

Times, on the given (scratch) database only:
  1. side by side on a subset of tickers: the generic multi-row INSERT ... ON CONFLICT upsert (db.upsert)
     vs what ingest uses (PostgreSQL: COPY to staging + one INSERT ... SELECT merge; SQLite: one
     prepared ON CONFLICT statement with executemany);
  2. synthetic generation of 103 tickers x 20 years (~480k rows);
  3. first ingest of all of it, an identical re-ingest (must write 0 rows), and an overlapping
     "newer file" where the last 20 sessions of every ticker changed;
  4. build_samples for one ticker with 20 years of history.
The prices table must be empty, or pass --reset to delete its rows first (scratch databases only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import delete, func, select  # noqa: E402

from ldtm_core.config import masked_url  # noqa: E402
from ldtm_core.data.price_validation import VALUE_COLUMNS, validate_prices  # noqa: E402
from ldtm_core.data.price_writer import _records, write_prices  # noqa: E402
from ldtm_core.data.samples import build_samples  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.db import is_postgres, run_in_transaction, upsert  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import prices  # noqa: E402

START, END = "2006-01-01", "2026-11-20"


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def count_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(prices)).scalar_one()


def clear(engine) -> None:
    run_in_transaction(engine, lambda conn: conn.execute(delete(prices)))


def executemany_upsert(engine, df) -> int:
    import datetime as dt

    records = _records(df, "synthetic", dt.datetime.now(dt.UTC))
    return run_in_transaction(
        engine,
        lambda conn: upsert(
            conn,
            prices,
            records,
            key=["ticker", "date"],
            update=[*VALUE_COLUMNS, "source", "ingested_at"],
            compare=VALUE_COLUMNS,
        ),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", required=True, help="scratch database (SQLAlchemy URL)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline-tickers", type=int, default=15, help="tickers for the side-by-side (0: skip)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of build_samples")
    ap.add_argument("--tickers", type=int, default=103, help="first N tickers of the full universe")
    ap.add_argument("--start", default=START, help="first synthetic day")
    ap.add_argument("--reset", action="store_true", help="delete existing rows of prices first")
    args = ap.parse_args()

    console = Console()
    engine = upgrade(args.database_url)
    if count_rows(engine):
        if not args.reset:
            console.print("prices is not empty: pass --reset to delete its rows (scratch databases only)")
            return 2
        clear(engine)
    universe = load_universe("full")[: args.tickers]
    rows: list[tuple[str, str, str, str, str]] = []  # phase, rows, written, seconds, rows/s

    def add(phase: str, n: int, written: int | str, seconds: float) -> None:
        rows.append(
            (
                phase,
                f"{n:,}",
                f"{written:,}" if isinstance(written, int) else written,
                f"{seconds:.2f}",
                f"{n / seconds:,.0f}",
            )
        )

    t_gen, df = timed(lambda: generate(universe, args.start, END, args.seed))
    add(f"generate {df['ticker'].nunique()} tickers {args.start}..{END}", len(df), "-", t_gen)
    t_val, clean = timed(lambda: validate_prices(df, "synthetic"))
    add("validate (vectorised checks)", len(clean), "-", t_val)

    fast = "COPY + merge" if is_postgres(engine) else "prepared ON CONFLICT executemany"
    if args.baseline_tickers:
        subset = clean[clean["ticker"].isin(universe[: args.baseline_tickers])].reset_index(drop=True)
        t_many, w_many = timed(lambda: executemany_upsert(engine, subset))
        add(
            f"side by side, {args.baseline_tickers} tickers: multi-row INSERT upsert",
            len(subset),
            w_many,
            t_many,
        )
        clear(engine)
        t_copy, w_copy = timed(
            lambda: run_in_transaction(engine, lambda c: write_prices(c, subset, "synthetic"))
        )
        add(f"side by side, {args.baseline_tickers} tickers: {fast}", len(subset), w_copy, t_copy)
        rows.append(
            ("  ratio (multi-row INSERT upsert / ingest path)", "", "", f"{t_many / t_copy:.1f}x", "")
        )
        clear(engine)

    def ingest(frame):
        return run_in_transaction(engine, lambda c: write_prices(c, frame, "synthetic"))

    t1, w1 = timed(lambda: ingest(clean))
    add("first ingest (empty table)", len(clean), w1, t1)
    t2, w2 = timed(lambda: ingest(clean))
    add("identical re-ingest", len(clean), w2, t2)
    newer = clean.copy()
    last20 = newer.groupby("ticker").cumcount(ascending=False) < 20
    newer.loc[last20, "volume"] += 1
    t3, w3 = timed(lambda: ingest(newer))
    add("overlapping newer data (last 20 sessions changed)", len(newer), w3, t3)
    add("generate + first ingest (end to end)", len(clean), w1, t_gen + t_val + t1)

    one = df[df["ticker"] == universe[0]].reset_index(drop=True)
    times = []
    for _ in range(args.repeats):
        t, s = timed(lambda: build_samples(one, 30))
        times.append(t)
    add(
        f"build_samples {universe[0]} ({len(one)} days) -> x {list(s.x.shape)}, median of {args.repeats}",
        len(s),
        "-",
        statistics.median(times),
    )

    table = Table(
        "phase",
        "rows",
        "written",
        "seconds",
        "rows/s",
        title=f"ingest benchmark on {masked_url(args.database_url)}",
    )
    for r in rows:
        table.add_row(*r)
    console.print(table)
    ok = w2 == 0 and w3 == 20 * clean["ticker"].nunique() and w1 == len(clean)
    console.print("written counts as expected" if ok else "[red]UNEXPECTED written counts[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
