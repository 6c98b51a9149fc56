"""Benchmark: what one evening's receipt costs at 103 and 1,000 tickers.

    .venv/bin/python benchmarks/receipts.py postgresql+psycopg2://postgres@127.0.0.1:5432/postgres
    .venv/bin/python benchmarks/receipts.py sqlite://          # a SQLite file in a temporary folder

Creates a fresh database `ldtm_bench_<pid>` on that server (dropped at the end), writes `--evenings`
evenings of chained snapshot rows for N tickers with the product's own writer (`chain.write_rows_anchored`),
and after each evening times, side by side: the chained write itself (the evening without receipts),
`receipts.issue` to a folder (read the evening's rows, hash each prediction, the Merkle root, the Ed25519
signature, the file) and the same to a git repository (plus its commit). Median over the evenings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import insert, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch_db import scratch_database  # noqa: E402

from ldtm_core.accountability.ledger import receipts  # noqa: E402
from ldtm_core.accountability.ledger.chain import write_rows_anchored  # noqa: E402
from ldtm_core.data.calendar import sessions_between  # noqa: E402
from ldtm_core.db import get_engine, lift_append_only  # noqa: E402
from ldtm_core.horizons import HORIZONS  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import model_registry  # noqa: E402


def evening_rows(tickers: list[str], model_id: int, run_date: dt.date, later: list[dt.date]) -> list[dict]:
    now, run_id = dt.datetime.now(dt.UTC), str(uuid.uuid4())
    return [
        {
            "ticker": t,
            "run_date": run_date,
            "run_date_close": 100.0 + i,
            "prev_close": 99.0 + i,
            "model_id": model_id,
            "model_version": "bench",
            "model_status": "candidate",
            "mode": "replay",
            **{h.col("pred"): 100.5 + i + k for k, h in enumerate(HORIZONS)},
            **{h.col("date"): later[k] for k, h in enumerate(HORIZONS)},
            "direction_pred": "bullish",
            "run_id": run_id,
            "created_at": now,
        }  # fmt: skip
        for i, t in enumerate(tickers)
    ]


def measure(engine, n: int, evenings: int, scratch: Path) -> dict[str, float]:
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        model_id = conn.execute(
            insert(model_registry)
            .values(
                ticker="BENCH",
                status="candidate",
                profile="demo",
                arch_signature="sig",
                config_json="{}",
                trained_on_date=dt.date(2024, 1, 2),
                checkpoint_path="x",
                checkpoint_sha256="0" * 64,
                created_at=now,
                updated_at=now,
            )  # fmt: skip
            .returning(model_registry.c.id)
        ).scalar_one()
    tickers = [f"T{i:04d}" for i in range(n)]
    days = sessions_between(dt.date(2024, 1, 2), dt.date(2024, 12, 31))
    key = Ed25519PrivateKey.generate()
    folder = receipts.Sink(scratch / f"dir_{n}")
    repo = scratch / f"git_{n}"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for k, v in (("user.email", "bench@localhost"), ("user.name", "bench")):
        subprocess.run(["git", "-C", str(repo), "config", k, v], check=True)
    git = receipts.Sink(repo, git=True)
    times: dict[str, list[float]] = {"write": [], "receipt (folder)": [], "receipt (git)": []}
    for e in range(evenings):
        rows = evening_rows(tickers, model_id, days[e], [days[e + 1], days[e + 5], days[e + 21]])
        t0 = time.perf_counter()
        write_rows_anchored(engine, rows)
        times["write"].append(time.perf_counter() - t0)
        for label, sink in (("receipt (folder)", folder), ("receipt (git)", git)):
            t0 = time.perf_counter()
            receipts.issue(engine, sink, key)
            times[label].append(time.perf_counter() - t0)
    lift_append_only(engine)  # a scratch record emptied on purpose
    with engine.begin() as conn:  # the next size starts from an empty record
        conn.execute(text("DELETE FROM snapshots"))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--sizes", default="103,1000", help="tickers per evening")
    ap.add_argument("--evenings", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch, scratch_database(args.url, "bench", Path(scratch)) as url:
        upgrade(url)
        engine = get_engine(url)
        print(
            f"CPU: {describe_cpu()}; {make_url(url).get_backend_name()}; median of {args.evenings} evenings\n"
        )
        print("| tickers | chained write ms | receipt to a folder ms | receipt to git ms | receipt / write |")
        print("|---:|---:|---:|---:|---:|")
        for n in (int(x) for x in args.sizes.split(",")):
            m = measure(engine, n, args.evenings, Path(scratch))
            ratio = m["receipt (folder)"] / m["write"]
            print(
                f"| {n:,} | {m['write']:.1f} | {m['receipt (folder)']:.1f} | {m['receipt (git)']:.1f} | {ratio:.2f}x |"
            )
        engine.dispose()


if __name__ == "__main__":
    main()
