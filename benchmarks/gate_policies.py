"""Benchmark: weekly retrains judged by the old gate (`seed`) and the default one (`evidence`), side by side.

    .venv/bin/python benchmarks/gate_policies.py --tickers 8 --weeks 12 [--real sp500,nasdaq]

Each policy runs its own throw-away SQLite database and model registry; both see the same prices.
Week by week (every `--step` sessions), on the same core functions as the pipeline:
  1. ingest   the prices up to this week's last session (`ingest_frame`), then `build_features`;
  2. nightly  each evening since the last retrain: predicted by what each registry serves
              (`snapshots.predict`, mode replay: the champion, or an ungated candidate where none is
              active yet, and a shadow if any), filled back (`fillback`), shadows concluded
              (`shadow.conclude_all`), as the nightly assets do: the champion's live record;
  3. retrain  a candidate trained on the data up to this week (`train_ticker`, what the `checkpoints`
              asset calls), backtested as the `backtests` asset does (`backtest_candidate`: its
              quarter-anchored folds, reused via fold_cache, and the champion's side where the gate
              pairs them) and gated (`run_gate` with GateThresholds(policy=...)).
Promotions are counted from each registry's history (a gate pass, or a shadow promoted later).
After the last retrain its evenings are predicted and filled too. Retrains start cold by default
(`warm_start.DEFAULT_WARM_START`), so a week's candidate does not depend on the champion: it is trained
once and registered in both registries; with `--warm-start` each registry trains its own.

Data: the first N tickers of the full universe as synthetic prices (seeded), and `--real` daily series
shipped by the PyPI package `arch` (`pip install '.[bench]'`): sp500 -> SPX, nasdaq -> IXIC, ingested
from a CSV file through `read_price_file` like `ldtm ingest files`.
Live accuracy: next-day direction (the sign of predicted vs actual move, as the gate's backtest scores
it) of the rows written by an active model, with a 95 % Wilson interval; always-up on the same rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from ldtm_core.accountability.alerts import notify
from ldtm_core.accountability.board.leaderboard import wilson_interval  # noqa: E402
from ldtm_core.accountability.gate.backtest_pool import backtest_candidate  # noqa: E402
from ldtm_core.accountability.gate.gate import GateThresholds, run_gate  # noqa: E402
from ldtm_core.accountability.ledger.fillback import fillback  # noqa: E402
from ldtm_core.accountability.ledger.snapshots import predict  # noqa: E402
from ldtm_core.accountability.shadow import shadow
from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import calendar_bounds, sessions_between  # noqa: E402
from ldtm_core.data.feature_store import build_features  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.price_files import read_price_file  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.errors import InputError, LDTMError  # noqa: E402
from ldtm_core.learning.backtest import DEFAULT_FOLDS  # noqa: E402
from ldtm_core.learning.model import get_profile  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.learning.registry import SHADOW, get_model, register_candidate  # noqa: E402
from ldtm_core.learning.training import train_ticker  # noqa: E402
from ldtm_core.learning.warm_start import DEFAULT_WARM_START  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import model_registry, registry_events, snapshots  # noqa: E402

POLICIES = ("seed", "evidence")
# arch's bundled daily series and the ticker each is ingested as.
REAL_SERIES = {"sp500": "SPX", "nasdaq": "IXIC"}


@dataclass
class Registry:
    """One policy's world: its database, artifacts and what its gate decided."""

    policy: str
    settings: Settings
    engine: object
    decisions: dict[str, int] = field(default_factory=dict)  # decision -> count
    errors: list[str] = field(default_factory=list)

    def promotions(self) -> dict[str, int]:
        """{ticker: models made active}, from the registry's history: whatever path promoted them."""
        e = registry_events.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(e.ticker, func.count()).where(e.to_status == "active").group_by(e.ticker)
            ).all()
        return {t: int(n) for t, n in rows}


def synthetic_market(n: int, years: float, weeks: int, step: int, seed: int) -> pd.DataFrame:
    tickers = load_universe("full")[:n]
    _, last = calendar_bounds()
    end = min(last, dt.date.today())
    start = end - dt.timedelta(days=round(365.25 * years + weeks * step * 7 / 5))
    return generate(tickers, start, end, seed=seed)


def real_market(names: list[str], home: Path, years: float, weeks: int, step: int) -> pd.DataFrame:
    """arch's series written as `<TICKER>.csv` (Yahoo headers) and read back by the product's reader."""
    try:
        import arch.data  # noqa: F401
    except ImportError:
        raise SystemExit(
            "--real needs the PyPI package `arch` (it ships the daily series): "
            "pip install arch  (or pip install '.[bench]')"
        ) from None
    import importlib

    frames = []
    for name in names:
        if name not in REAL_SERIES:
            raise SystemExit(f"--real {name}: unknown series; choose from {', '.join(REAL_SERIES)}")
        raw = importlib.import_module(f"arch.data.{name}").load()
        keep = round(252 * years) + weeks * step + 2
        path = home / f"{REAL_SERIES[name]}.csv"
        raw.tail(keep).rename_axis("Date").to_csv(path)
        frames.append(read_price_file(path))
    return pd.concat(frames, ignore_index=True)


def open_registry(policy: str, root: Path, shadow_sessions: int) -> Registry:
    home = root / policy
    url = f"sqlite:///{home}/ldtm.db"
    home.mkdir(parents=True)
    settings = Settings(home=home, database_url=url, shadow_sessions=shadow_sessions)
    settings.ensure_dirs()
    return Registry(policy, settings, upgrade(url))


def ingest_until(regs: list[Registry], market: pd.DataFrame, after, until, tickers: list[str]) -> None:
    dates = pd.to_datetime(market["date"])
    part = (
        market[(dates > pd.Timestamp(after)) & (dates <= pd.Timestamp(until))]
        if after
        else market[dates <= pd.Timestamp(until)]
    )
    for reg in regs:
        ingest_frame(reg.engine, part, "bench")
        build_features(reg.engine, tickers)


def nightly(regs: list[Registry], first, last) -> None:
    """Each evening `first..last` as the nightly runs it: predict with what each registry serves (mode
    replay), fill back what the prices answer, conclude the shadows that have their evenings."""
    for day in sessions_between(first, last):
        for reg in regs:
            predict(reg.engine, reg.settings, day, mode="replay")
            fillback(reg.engine)
            for outcome in shadow.conclude_all(reg.engine, reg.settings):
                if outcome.error:
                    reg.errors.append(f"shadow {day}: {outcome.error}")


def _candidate_row(engine, model_id: int) -> dict:
    """What `register_candidate` needs to register the same checkpoint in another registry."""
    rec = get_model(engine, model_id)
    with engine.connect() as conn:
        metrics = conn.execute(
            select(model_registry.c.metrics_json).where(model_registry.c.id == model_id)
        ).scalar_one()
    return {
        "ticker": rec.ticker,
        "cfg": rec.config,
        "profile": rec.profile,
        "trained_on_date": rec.trained_on_date,
        "checkpoint_path": rec.checkpoint_path,
        "checkpoint_sha256": rec.checkpoint_sha256,
        "val_loss": rec.val_loss,
        "epochs": rec.epochs,
        "metrics": json.loads(metrics or "{}"),
    }


def retrain(regs: list[Registry], ticker: str, cfg, profile: str, as_of, folds: int, warm: bool) -> None:
    """Train (once, or per registry with a warm start), backtest and gate the candidate in each registry."""
    shared = None
    for reg in regs:
        if shared is None or warm:
            out = train_ticker(
                reg.engine, reg.settings, ticker, cfg, profile, as_of=as_of, threads=1, warm_start=warm
            )
            if out.status != "trained":
                reg.errors.append(f"{ticker} {as_of}: train {out.status} {out.reason}")
                continue
            model_id, shared = out.model_id, _candidate_row(reg.engine, out.model_id)
        else:
            model_id = register_candidate(reg.engine, **shared)
        try:
            bt = backtest_candidate(reg.engine, ticker, None, 1, settings=reg.settings, folds=folds)
            if bt.status != "ok":
                raise InputError(f"backtest {bt.status}: {bt.reason}")
            report = run_gate(
                reg.engine,
                reg.settings,
                ticker,
                model_id=model_id,
                thresholds=GateThresholds.from_env(policy=reg.policy),
            )
        except LDTMError as exc:
            reg.errors.append(f"{ticker} {as_of}: {exc}")
            continue
        reg.decisions[report.decision] = reg.decisions.get(report.decision, 0) + 1


@dataclass
class Record:
    """Filled next-day rows: direction hits (sign rule), always-up hits on the same rows, sum |error| %."""

    n: int = 0
    hits: int = 0
    up_hits: int = 0
    abs_err: float = 0.0
    in_sample: int = 0  # rows whose answer the model may have trained on: 0 in a sound walk

    def add(self, r) -> None:
        self.n += 1
        self.hits += bool(r.next_day_direction_correct)
        self.up_hits += r.next_day_actual > r.run_date_close
        self.abs_err += abs(r.next_day_pct_error)
        self.in_sample += bool(r.in_sample)

    def accuracy(self) -> str:
        if not self.n:
            return "n=0"
        lo, hi = wilson_interval(self.hits, self.n)
        return f"{self.hits / self.n * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}] (n={self.n})"

    def always_up(self) -> str:
        return f"{self.up_hits / self.n * 100:.1f}%" if self.n else "-"

    def error(self) -> str:
        return f"{self.abs_err / self.n:.2f}%" if self.n else "-"


def live_record(reg: Registry, first, last) -> tuple[Record, Record]:
    """(the champion's rows: written by an active model, every row the nightly served) of the walk."""
    s = snapshots.c
    with reg.engine.connect() as conn:
        rows = conn.execute(
            select(
                s.model_status,
                s.run_date_close,
                s.next_day_actual,
                s.next_day_pct_error,
                s.next_day_direction_correct,
                s.in_sample,
            ).where(s.run_date >= first, s.run_date <= last, s.next_day_actual.is_not(None))
        ).all()
    champion, served = Record(), Record()
    for r in rows:
        if r.model_status == SHADOW:  # never published: not what the policy served
            continue
        served.add(r)
        if r.model_status == "active":
            champion.add(r)
    return champion, served


def walk(
    name: str, market: pd.DataFrame, root: Path, args
) -> dict[str, tuple[Registry, tuple[Record, Record]]]:
    """Run the weekly walk on one dataset; returns {policy: (registry, live record)}."""
    tickers = sorted(market["ticker"].unique())
    sessions = sorted(pd.to_datetime(market["date"]).dt.date.unique())
    # Week w retrains at ends[w]; its evenings are the `step` sessions after it, and the last one's
    # next-day answer is one more session: the walk needs weeks * step + 1 sessions after ends[0].
    first_end = len(sessions) - 2 - args.weeks * args.step
    ends = [sessions[first_end + w * args.step] for w in range(args.weeks)]
    regs = [open_registry(p, root, args.shadow_sessions) for p in args.policies]
    cfg = get_profile(args.profile, **({"max_epochs": args.max_epochs} if args.max_epochs else {}))
    print(
        f"{name}: {len(tickers)} tickers ({', '.join(tickers)}), prices {sessions[0]}..{sessions[-1]}, "
        f"{args.weeks} weekly retrains {ends[0]}..{ends[-1]} every {args.step} sessions",
        flush=True,
    )
    t0, previous = time.perf_counter(), None
    for w, end in enumerate(ends):
        ingest_until(regs, market, previous, end, tickers)
        if previous is not None:
            nightly(regs, sessions[sessions.index(previous) + 1], end)
        for ticker in tickers:
            retrain(regs, ticker, cfg, args.profile, end, args.folds, args.warm_start)
        previous = end
        done = "; ".join(f"{r.policy} {dict(sorted(r.decisions.items()))}" for r in regs)
        print(
            f"  week {w + 1}/{args.weeks} ({end}): so far {done}; {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    last_evening = sessions[sessions.index(previous) + args.step]
    ingest_until(regs, market, previous, sessions[sessions.index(last_evening) + 1], tickers)
    nightly(regs, sessions[sessions.index(previous) + 1], last_evening)
    first_evening = sessions[sessions.index(ends[0]) + 1]
    return {r.policy: (r, live_record(r, first_evening, last_evening)) for r in regs}


def table(name: str, results: dict, retrains: int) -> str:
    lines = [
        f"### {name}",
        "",
        "| policy | retrains | promoted | failed | insufficient evidence | other decisions | errors | champion "
        "live accuracy [95 % Wilson] | always-up, same rows | champion mean abs error | all served rows "
        "(champion or ungated candidate) | always-up, same rows |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, (reg, (champ, served)) in results.items():
        d = dict(reg.decisions)
        known = [d.pop(k, 0) for k in ("fail", "insufficient evidence")]
        d.pop("pass", None)  # counted as promotions from the registry's history
        other = ", ".join(f"{k} {n}" for k, n in sorted(d.items())) or "0"
        lines.append(
            f"| {policy} | {retrains} | {sum(reg.promotions().values())} | {known[0]} | {known[1]} | {other} | "
            f"{len(reg.errors)} | {champ.accuracy()} | {champ.always_up()} | {champ.error()} | "
            f"{served.accuracy()} | {served.always_up()} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tickers", type=int, default=8, help="synthetic: first N tickers of the full universe (0: none)"
    )
    ap.add_argument("--weeks", type=int, default=12, help="weekly retrains to walk")
    ap.add_argument("--real", default="", help=f"comma list of arch's daily series: {', '.join(REAL_SERIES)}")
    ap.add_argument("--years", type=float, default=6, help="history before the first retrain")
    ap.add_argument("--step", type=int, default=5, help="sessions between retrains")
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--max-epochs", type=int, default=None, help="cap epochs (default: the profile's)")
    ap.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="backtest folds (default: the asset's)")
    ap.add_argument(
        "--warm-start", action="store_true", default=DEFAULT_WARM_START, help="retrain from the champion"
    )
    ap.add_argument(
        "--shadow-sessions", type=int, default=0, help="LDTM_SHADOW_SESSIONS of both registries (default 0)"
    )
    ap.add_argument("--seed", type=int, default=0, help="synthetic market seed")
    ap.add_argument("--policies", default=",".join(POLICIES), help="gate policies, one registry each")
    args = ap.parse_args()
    args.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in args.policies:
        GateThresholds(policy=p).validate()
    real = [r.strip() for r in args.real.split(",") if r.strip()]
    import torch

    torch.set_num_threads(1)
    # Each failed gate logs its report at WARNING (the notification): the table below counts them.
    notify.log.setLevel(logging.ERROR)
    print(
        f"machine: {describe_cpu()}, {os.cpu_count()} cores; torch {torch.__version__}; "
        f"profile {args.profile}, {args.folds} folds, warm start {args.warm_start}, shadow sessions "
        f"{args.shadow_sessions}; policies {', '.join(args.policies)}; "
        f"thresholds from the environment (LDTM_GATE_*) as the gate reads them",
        flush=True,
    )
    out = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        datasets = []
        if args.tickers:
            datasets.append(
                ("synthetic", synthetic_market(args.tickers, args.years, args.weeks, args.step, args.seed))
            )
        if real:
            (root / "csv").mkdir()
        for series in real:  # one walk each: a table per series
            market = real_market([series], root / "csv", args.years, args.weeks, args.step)
            datasets.append((f"{series} ({REAL_SERIES[series]}, arch)", market))
        for i, (name, market) in enumerate(datasets):
            results = walk(name, market, root / f"d{i}", args)
            retrains = args.weeks * market["ticker"].nunique()
            out.append(table(name, results, retrains))
            for reg, (_, served) in results.values():
                print(f"  {reg.policy}: in-sample rows among the served ones: {served.in_sample}")
                who = ", ".join(f"{t} {n}" for t, n in sorted(reg.promotions().items())) or "none"
                print(f"  {reg.policy}: promotions per ticker: {who}")
                for e in reg.errors:
                    print(f"  {reg.policy}: {e}")
    print(f"\nwall {time.perf_counter() - t0:.0f} s\n")
    print("\n\n".join(out))


if __name__ == "__main__":  # guard: training may spawn worker processes
    main()
