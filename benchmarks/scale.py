"""Benchmark: how the evening's costs grow with the universe (tickers) and the stored history (years).

    .venv/bin/python benchmarks/scale.py                      # 103/500/1,000 tickers x 1/5/10 years
    .venv/bin/python benchmarks/scale.py --tickers 103,1000 --years 1,10
    .venv/bin/python benchmarks/scale.py --quick              # smoke: 3 and 6 tickers, 0.1 and 0.2 years

For each universe size N a fresh PostgreSQL database `ldtm_scale_<N>_<pid>` is created on the server of
`--url` (dropped at the end): synthetic prices for every ticker (the project's COPY writer), an
UNTRAINED demo-profile checkpoint per ticker registered and promoted (never N trainings: inference cost
does not depend on the weights), then the stored evenings are added, newest year first, up to each
size of `--years`: one valid chained snapshot row per ticker per evening (hashes by `chain.row_hash`,
run_log anchors like a predict run's), actuals filled as the fillback computes them, the newest 250
evenings left pending. At each (N, years) cell one evening is timed, in the nightly's order:

  fillback   the 250 pending evenings of every ticker (N x 250 rows x 3 horizons), once per N
  ingest     one new session's bars for N tickers (`ingest_frame`)
  features   the incremental feature build of N tickers (`build_features`)
  predict    predict + chained write of N rows, models loaded cold (`snapshots.predict`)
  board      the leaderboard (`leaderboard`), its labels from each ticker's whole record included
  board: horizon answers  the next-Monday and one-month answers on the whole record (`horizon_answers`)
  audit full every row (`audit.verify`, mode full) -- what the nightly did before issue 31
  audit nightly  what is new since the last verified heads (mode incremental; one evening)
  decay      the decay check of every active model (`decay.check`)

and once, at the largest N, in a child process with `LDTM_UNIVERSE` a file of N synthetic tickers:
loading the Dagster definitions, one promotion-sensor tick, and launching an N-partition backfill
(`add_backfill` on an ephemeral instance: what the UI's launch does; the daemon is not involved).

It prints a Markdown table and each step's growth exponent: the slope of log(time) on log(tickers)
(at the smallest years) and on log(years) (at the largest N). 1 = linear; about 0 = flat.
A `sqlite://` URL runs the --quick smoke on a SQLite file (the Dagster part is skipped there).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sqlalchemy import insert, text, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch_db import is_sqlite, scratch_database  # noqa: E402

from ldtm_core.accountability.board.leaderboard import leaderboard  # noqa: E402
from ldtm_core.accountability.board.record import horizon_answers  # noqa: E402
from ldtm_core.accountability.decay import decay
from ldtm_core.accountability.ledger import audit, audit_anchor
from ldtm_core.accountability.ledger.chain import CHAIN_VERSION, chain_heads, row_hash  # noqa: E402
from ldtm_core.accountability.ledger.fillback import fillback  # noqa: E402
from ldtm_core.accountability.ledger.snapshots import predict  # noqa: E402
from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import target_dates  # noqa: E402
from ldtm_core.data.feature_store import build_features  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.db import get_engine, is_postgres, lift_append_only  # noqa: E402
from ldtm_core.learning import registry  # noqa: E402
from ldtm_core.learning.checkpoints import save_checkpoint  # noqa: E402
from ldtm_core.learning.inference import clear_model_cache  # noqa: E402
from ldtm_core.learning.model import LDTM, get_profile  # noqa: E402
from ldtm_core.learning.registry import register_candidate, serving_models  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import run_log, snapshots  # noqa: E402
from ldtm_core.scoring import baselines  # noqa: E402

SESSIONS_PER_YEAR = 252
PENDING = 250  # evenings left unfilled for the fillback step
BAND = 0.25
END = dt.date(2025, 12, 31)
HELD_BACK = 12  # sessions not ingested up front: each cell ingests and predicts the next one
# The ids were given by COPY: move each serial past them (constant statements).
RESET_SEQUENCES = (
    "SELECT setval(pg_get_serial_sequence('snapshots', 'id'), (SELECT max(id) FROM snapshots))",
    "SELECT setval(pg_get_serial_sequence('run_log', 'id'), (SELECT max(id) FROM run_log))",
)
DECAY_SAMPLE = 100
HORIZON_NAMES = ("next_day", "next_monday", "one_month")
TABLE_SIZES = "SELECT pg_total_relation_size('snapshots'), pg_total_relation_size('run_log')"
STEPS = (
    "fillback",
    "ingest",
    "features",
    "predict",
    "board",
    "board: horizon answers",
    "audit full",
    "audit nightly",
    "decay (per 100 tickers)",
)


def synthetic_tickers(n: int) -> list[str]:
    return [f"S{i:04d}" for i in range(n)]


def _copy(conn, table: str, frame: pd.DataFrame) -> None:
    """COPY a frame into `table` (PostgreSQL); executemany on SQLite."""
    if not is_postgres(conn):
        conn.execute(insert(snapshots if table == "snapshots" else run_log), frame.to_dict("records"))
        return
    buf = io.StringIO()
    frame.to_csv(buf, index=False, header=False, na_rep="\\N")
    buf.seek(0)
    cols = ", ".join(frame.columns)  # our own column names, never user input
    raw = conn.connection.dbapi_connection
    with raw.cursor() as cur:
        cur.copy_expert(f"COPY {table} ({cols}) FROM STDIN WITH (FORMAT csv, NULL '\\N')", buf)


class Store:
    """One database for N tickers: prices, models, and a growing store of evenings."""

    def __init__(self, url: str, home: Path, n: int, years_max: float):
        self.url, self.engine = url, get_engine(url)
        self.settings = Settings(home=home, database_url=url)
        self.settings.ensure_dirs()
        self.tickers = synthetic_tickers(n)
        history = int(round(years_max * SESSIONS_PER_YEAR))
        # prices reach back past the oldest evening by the window and one month of targets
        start = pd.Timestamp(END) - pd.Timedelta(days=int((history + HELD_BACK + 400) * 7 / 5 * 1.02))
        df = generate(self.tickers, start.date().isoformat(), END.isoformat(), seed=3)
        self.sessions = sorted(df["date"].unique())
        self.held = self.sessions[-HELD_BACK:]
        self.next_held = 0
        self.frame = df
        ingest_frame(self.engine, df[df["date"] < self.held[0]], "synthetic")
        closes = df.pivot(index="date", columns="ticker", values="close")
        self.closes = closes
        cfg = get_profile("demo")
        for i, t in enumerate(self.tickers):
            torch.manual_seed(i)
            path = self.settings.checkpoint_dir / "candidates" / f"{t}.pt"
            sha = save_checkpoint(path, LDTM(cfg).eval(), cfg, t, dt.date(2000, 1, 3), None)
            mid = register_candidate(
                self.engine, ticker=t, cfg=cfg, profile="demo", trained_on_date=dt.date(2000, 1, 3),
                checkpoint_path=str(path), checkpoint_sha256=sha, val_loss=None,
            )  # fmt: skip
            registry.promote(self.engine, mid, "benchmark", self.settings)
        self.models = serving_models(self.engine)
        build_features(self.engine, self.tickers)
        # Evening dates of the history, newest first; the oldest history evening needs a month of targets
        # inside the ingested prices, which the newest ones (pending) need not.
        self.history = [d for d in self.sessions[:-HELD_BACK] if d >= self.sessions[300]][::-1]
        self.stored = 0  # evenings stored so far (from the newest back)

    def add_evenings(self, upto: int) -> None:
        """Store evenings until `upto` of them exist (adding older ones), chained after the current heads."""
        days = self.history[self.stored : upto]
        if not days:
            return
        with self.engine.connect() as conn:
            heads = dict(
                conn.execute(
                    text(
                        "SELECT s.ticker, s.row_hash FROM snapshots s JOIN (SELECT ticker, max(id) AS id "
                        "FROM snapshots GROUP BY ticker) h ON h.id = s.id"
                    )
                ).all()
            )
            next_id = conn.execute(text("SELECT coalesce(max(id), 0) FROM snapshots")).scalar_one() + 1
            next_log = conn.execute(text("SELECT coalesce(max(id), 0) FROM run_log")).scalar_one() + 1
        days = sorted(days)  # within one batch, oldest first (ids rise with the date inside a batch)
        run_dates = np.array(days, dtype="datetime64[D]")
        nd, nm, om = (a.astype("datetime64[D]").astype(object) for a in target_dates(run_dates).values())
        pending_from = self.history[PENDING - 1] if len(self.history) >= PENDING else self.history[-1]
        position = {d: i for i, d in enumerate(self.sessions)}
        c = self.closes[self.tickers].to_numpy()  # sessions x tickers, looked up by row position
        row_of = {d: i for i, d in enumerate(self.closes.index)}
        # Each board baseline's call as predict records it with the row (chain version 3 hashes it).
        prev = np.vstack([np.full((1, c.shape[1]), np.nan), c[:-1]])
        at = np.arange(len(c))
        calls = [
            baselines.calls(c[:, j], prev[:, j], at, baselines.board_baselines()) for j in range(c.shape[1])
        ]
        rows, logs = [], []
        for k, d in enumerate(days):
            run_id = str(uuid.uuid4())
            created = dt.datetime.combine(d, dt.time(23, 0), tzinfo=dt.UTC)
            prev_day = self.sessions[position[d] - 1]
            today, before = c[row_of[d]], c[row_of[prev_day]]
            fill = d < pending_from  # the pending ones' targets may lie past the prices
            targets = (
                {h: c[row_of[day[k]]] for h, day in zip(HORIZON_NAMES, (nd, nm, om), strict=True)}
                if fill
                else {}
            )
            heads_json = {}
            for j, t in enumerate(self.tickers):
                rdc = float(today[j])
                m = self.models[t]
                r = {
                    "id": next_id, "ticker": t, "run_date": d, "run_date_close": rdc,
                    "prev_close": float(before[j]), "model_id": m.id, "model_version": m.snapshot_version,
                    "model_status": "active", "mode": "live", "next_day_pred": rdc * 1.001,
                    "next_monday_pred": rdc * 0.999, "one_month_pred": rdc * 1.01, "direction_pred": "neutral",
                    "in_sample": False, "neutral_band_pct": BAND, "next_day_date": nd[k],
                    "next_monday_date": nm[k], "one_month_date": om[k], "run_id": run_id, "created_at": created,
                    "chain_version": CHAIN_VERSION,
                    "baseline_calls": baselines.encode_calls({n: v[row_of[d]] for n, v in calls[j].items()}),
                }  # fmt: skip
                r["prev_hash"] = heads.get(t, "")
                r["row_hash"] = heads[t] = row_hash(r["prev_hash"], r)
                if fill:
                    self._fill(r, created, {h: float(v[j]) for h, v in targets.items()})
                heads_json[t] = [next_id, r["row_hash"], d.isoformat(), m.snapshot_version]
                rows.append(r)
                next_id += 1
            logs.append(
                {
                    "id": next_log,
                    "run_id": run_id,
                    "kind": "predict",
                    "started_at": created,
                    "finished_at": created,
                    "status": "ok",
                    "run_date": d,
                    "n_rows": len(self.tickers),
                    "chain_heads_json": json.dumps({"keyed": False, "heads": heads_json}),
                }  # fmt: skip
            )
            next_log += 1
        frame = pd.DataFrame(rows)
        with self.engine.begin() as conn:
            for start in range(0, len(frame), 200_000):
                _copy(conn, "snapshots", frame.iloc[start : start + 200_000])
            _copy(conn, "run_log", pd.DataFrame(logs))
            if is_postgres(conn):
                for stmt in RESET_SEQUENCES:
                    conn.execute(text(stmt))
                conn.execute(text("ANALYZE snapshots"))
        self.stored = upto

    def _fill(self, r: dict, when: dt.datetime, closes: dict[str, float]) -> None:
        """The actuals as the fillback writes them (audited in full mode: a mistake here fails the run)."""
        rdc = r["run_date_close"]
        for h in ("next_day", "next_monday", "one_month"):
            close = closes[h]
            r[f"{h}_actual"] = close
            r[f"{h}_pct_error"] = (r[f"{h}_pred"] - close) / close * 100.0
            r[f"{h}_filled_at"] = when
            if h == "next_day":
                move = (close - rdc) / rdc * 100.0
                r["next_day_direction_actual"] = (
                    "bullish" if move > BAND else ("bearish" if move < -BAND else "neutral")
                )
                r["next_day_direction_correct"] = (
                    None if close == rdc else bool(np.sign(r["next_day_pred"] - rdc) == np.sign(close - rdc))
                )
        r["filled_at"] = when

    def unfill_pending(self) -> None:
        """Empty the actuals of the newest PENDING stored evenings again (the fillback step refills them)."""
        cols = [
            col.name
            for col in snapshots.c
            if col.name.endswith(("_actual", "_pct_error", "_correct", "_filled_at"))
            or col.name == "filled_at"
        ]
        cutoff = self.history[min(PENDING, len(self.history)) - 1]
        lift_append_only(self.engine)  # a scratch record reset on purpose
        with self.engine.begin() as conn:
            conn.execute(update(snapshots).where(snapshots.c.run_date >= cutoff).values(dict.fromkeys(cols)))

    def age_fills(self) -> None:
        """Move the fill times back two days: history filled on earlier evenings (the nightly audit
        re-checks what was filled since the last verified audit, less a margin)."""
        cols = [col.name for col in snapshots.c if col.name.endswith("filled_at")]
        if not is_postgres(self.engine):
            return  # SQLite (the smoke run) stores timestamps as text: no interval arithmetic
        with self.engine.begin() as conn:
            conn.execute(
                update(snapshots)
                .where(snapshots.c.filled_at.is_not(None))
                .values({c: snapshots.c[c] - dt.timedelta(days=2) for c in cols})
            )

    def record_verified(self) -> None:
        """Record the current chain heads as verified, as last night's passing full audit would have
        (the history was written valid by `add_evenings`): where the timed nightly audit starts."""
        now = dt.datetime.now(dt.UTC)
        with self.engine.connect() as conn:
            max_id, run_log_from = audit_anchor.read_bounds(conn, now)
            heads = chain_heads(conn, self.tickers)
        audit_anchor.record(
            self.engine, full=True, ok=True, started=now, max_id=max_id, run_log_from=run_log_from,
            heads={t: audit_anchor.Head(h[0], h[1], False, CHAIN_VERSION) for t, h in heads.items()},
            previous=None, rows_checked=0, problems=0,
        )  # fmt: skip

    def next_session(self) -> dt.date:
        day = self.held[self.next_held]
        self.next_held += 1
        return day


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run_cell(store: Store, full_audit: bool) -> dict[str, float]:
    """Time one evening at the store's current size; returns {step: seconds}. Without `full_audit` the
    verified heads are recorded as a passing full audit would have recorded them (`record_verified`)."""
    eng, out = store.engine, {}
    day = store.next_session()
    bars = store.frame[store.frame["date"] == day]
    out["ingest"], _ = _timed(lambda: ingest_frame(eng, bars, "synthetic"))
    out["features"], _ = _timed(lambda: build_features(eng, store.tickers))
    # The verified heads the nightly starts from: a passing audit of the store as it was last night.
    if full_audit:
        out["audit full"], rep = _timed(lambda: audit.verify(eng, record=True))
        assert rep.ok, rep.problems[:5]
    else:
        store.record_verified()
    clear_model_cache()  # a fresh process: every checkpoint unpickled
    out["predict"], res = _timed(lambda: predict(eng, store.settings, run_date=day))
    assert res.rows_written == len(store.tickers), res.skipped
    fillback(eng)  # tonight's fills: the earlier evenings whose targets just arrived
    out["audit nightly"], rep = _timed(lambda: audit.verify(eng, mode="incremental", record=True))
    assert rep.ok and rep.mode == "incremental", rep.problems[:5]
    out["board"], board = _timed(lambda: leaderboard(eng))
    # The error horizons' answers on the whole record (the CLI, the asset and the dashboard show them).
    out["board: horizon answers"], _ = _timed(lambda: horizon_answers(eng, sorted(board["ticker"]), "all"))
    # The decay check costs ~0.7 s per ticker whatever the store (measured): timed on a fixed sample of
    # DECAY_SAMPLE tickers, so its years exponent is measured and the tickers one is not.
    out["decay (per 100 tickers)"], _ = _timed(lambda: decay.check(eng, store.tickers[:DECAY_SAMPLE]))
    return out


def dagster_child(n: int) -> None:
    """In a fresh process: definitions load, one sensor tick, an N-partition backfill launch (JSON out)."""
    out = {}
    t = time.perf_counter()
    import dagster  # noqa: F401  the libraries' import, apart from what our definitions add
    import torch as _torch  # noqa: F401

    out["import dagster+torch"] = time.perf_counter() - t
    t = time.perf_counter()
    from ldtm_dagster.definitions import defs

    repo = defs.get_repository_def()  # resolve everything, as the code server does
    out["definitions load"] = time.perf_counter() - t
    from dagster import DagsterInstance, build_sensor_context
    from dagster._core.execution.backfill import PartitionBackfill

    with DagsterInstance.ephemeral() as instance:
        sensor = repo.get_sensor_def("promotion_gate_sensor")
        t = time.perf_counter()
        ctx = build_sensor_context(
            instance=instance, repository_def=repo, resources=repo.get_top_level_resources()
        )
        sensor.evaluate_tick(ctx)
        out["sensor tick"] = time.perf_counter() - t
        from ldtm_dagster.partitions import ticker_partitions

        keys = ticker_partitions.get_partition_keys()
        assert len(keys) == n, len(keys)
        job = defs.get_job_def("retrain_job")
        t = time.perf_counter()
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id=uuid.uuid4().hex[:8], asset_graph=repo.asset_graph,
            partition_names=keys, asset_selection=list(job.asset_layer.executable_asset_keys),
            backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=False,
            title=None, description=None, run_config=None,
        )  # fmt: skip
        instance.add_backfill(backfill)
        out["backfill launch"] = time.perf_counter() - t
    print(json.dumps(out))


def run_dagster(n: int, url: str, home: Path) -> dict[str, float]:
    universe = home / f"universe_{n}.txt"
    universe.write_text("\n".join(synthetic_tickers(n)) + "\n")
    env = {
        **os.environ,
        "LDTM_UNIVERSE": str(universe),
        "LDTM_DATABASE_URL": url,
        "LDTM_HOME": str(home),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--dagster-child", str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"dagster child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slope(xs: list[float], ys: list[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if y and y > 0]
    if len(pts) < 2:
        return None
    return float(np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[0])


def report(results: dict[tuple[int, float], dict[str, float]], ns: list[int], years: list[float]) -> str:
    cells = sorted(results)
    lines = ["| step | " + " | ".join(f"{n} × {y:g} y" for n, y in cells) + " | exp. tickers | exp. years |"]
    lines.append("|---" * (len(cells) + 3) + "|")
    steps = [s for s in STEPS if any(s in r for r in results.values())]
    for s in steps:
        vals = [results[c].get(s) for c in cells]
        by_n = [(n, results[(n, years[0])].get(s)) for n in ns if (n, years[0]) in results]
        by_y = [(y, results[(ns[-1], y)].get(s)) for y in years if (ns[-1], y) in results]
        en = slope([a for a, b in by_n if b], [b for _, b in by_n if b]) if len(by_n) > 1 else None
        ey = slope([a for a, b in by_y if b], [b for _, b in by_y if b]) if len(by_y) > 1 else None
        shown = " | ".join("—" if v is None else f"{v:.2f} s" for v in vals)
        lines.append(
            f"| {s} | {shown} | {'—' if en is None else f'{en:.2f}'} | {'—' if ey is None else f'{ey:.2f}'} |"
        )
    return "\n".join(lines)


def _parse(text_: str, kind) -> list:
    return sorted({kind(x) for x in text_.split(",") if x.strip()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--tickers", default="103,500,1000", help="universe sizes (comma list)")
    ap.add_argument("--years", default="1,5,10", help="stored evenings, in years of 252 (comma list)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 and 6 tickers, 0.1 and 0.2 years")
    ap.add_argument("--no-dagster", action="store_true", help="skip the Dagster definitions/sensor/backfill")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument(
        "--full-audit-max-rows",
        type=int,
        default=None,
        help="skip the (linear, minutes-long) full audit above this many stored rows",
    )
    ap.add_argument("--dagster-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dagster_child:
        dagster_child(args.dagster_child)
        return 0
    ns, years = _parse(args.tickers, int), _parse(args.years, float)
    if args.quick:
        ns, years = [3, 6], [0.1, 0.2]
    torch.set_num_threads(1)
    sqlite = is_sqlite(args.url)
    results: dict[tuple[int, float], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for n in ns:
            with scratch_database(args.url, f"scale_{n}", Path(scratch), keep=args.keep) as url:
                upgrade(url)
                home = Path(scratch) / f"home_{n}"
                t, store = _timed(lambda url=url, home=home, n=n: Store(url, home, n, max(years)))
                print(
                    f"{n} tickers: prices ({len(store.sessions)} sessions) and {n} models in {t:.0f} s",
                    flush=True,
                )
                for y in years:
                    t, _ = _timed(
                        lambda y=y, store=store: store.add_evenings(int(round(y * SESSIONS_PER_YEAR)))
                    )
                    store.unfill_pending()
                    pending = min(PENDING, store.stored)
                    cell = {}
                    cell["fillback"], r = _timed(lambda store=store: fillback(store.engine))
                    store.age_fills()  # those fills belong to earlier evenings, not to tonight's audit
                    full = args.full_audit_max_rows is None or n * store.stored <= args.full_audit_max_rows
                    cell |= run_cell(store, full_audit=full)
                    results[(n, y)] = cell
                    if not sqlite:
                        with store.engine.connect() as conn:
                            size = conn.execute(text(TABLE_SIZES)).one()
                        print(
                            f"  sizes: snapshots {size[0] / 2**20:,.0f} MiB, run_log {size[1] / 2**20:,.0f} MiB"
                        )
                    print(
                        f"  {y:g} y ({store.stored} evenings, {n * store.stored:,} rows; built in {t:.0f} s; "
                        f"fillback filled {r.total_filled:,} of {n} x {pending} pending): "
                        + ", ".join(f"{k} {v:.2f} s" for k, v in cell.items()),
                        flush=True,
                    )
                if n == ns[-1] and not sqlite and not args.no_dagster:
                    d = run_dagster(n, url, home)
                    print(f"  dagster, {n} partitions: " + ", ".join(f"{k} {v:.2f} s" for k, v in d.items()))
        print()
        print(report(results, ns, years))
    return 0


if __name__ == "__main__":
    sys.exit(main())
