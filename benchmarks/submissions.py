"""Benchmark: submitted forecasts through `ldtm submit`'s own function (issue 60).

    .venv/bin/python benchmarks/submissions.py --cost                    # one evening of 1,000 tickers
    .venv/bin/python benchmarks/submissions.py --null --models 103 --tickers 3 --evenings 1260
    .venv/bin/python benchmarks/submissions.py --null --models 4 --tickers 2 --evenings 60   # a smoke run

--cost: 1,000 synthetic tickers, one submitted model registered for all of them, receipts on (a fresh
Ed25519 key); the time of one evening's `submit` (read + check the 3,000-row file, write and chain the
1,000 rows, sign the receipt), median of --repeats evenings.
--null: --models coin-flip submitted models (each its own name, its own --tickers random-walk tickers), each
submitting every evening before the cut-off for --evenings sessions, plus one planted model right on 60 % of
its next-day calls; then fillback and `judge` / `promote`. A null model counts as a false discovery when any
of its tickers is shown or promoted; the rate must stay at or under alpha (0.05) (95 % Clopper-Pearson upper
bound beside it). The planted model's first evening shown (judged every 21 evenings) is set beside what its
judgement states it could detect.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import beta  # noqa: E402

from ldtm_core.accountability.ledger import receipts as rc  # noqa: E402
from ldtm_core.accountability.ledger.fillback import fillback  # noqa: E402
from ldtm_core.accountability.submissions import external, judge  # noqa: E402
from ldtm_core.accountability.submissions.submit import submit  # noqa: E402
from ldtm_core.config import Settings  # noqa: E402
from ldtm_core.data.calendar import session_array, session_close  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.horizons import HORIZONS  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

START = dt.date(2019, 1, 2)


def _walks(tickers: list[str], sessions: np.ndarray, seed: int) -> pd.DataFrame:
    """Random walks (no drift): nothing any model can know about the next close."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, (len(sessions), len(tickers))), axis=0))
    frames = [
        pd.DataFrame({"ticker": t, "date": pd.to_datetime(sessions), "open": c, "high": c * 1.01, "low": c * 0.99,
                      "close": c, "volume": 1_000_000})
        for t, c in zip(tickers, close.T, strict=True)
    ]  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def _file(folder: Path, day: dt.date, returns: dict[str, float]) -> Path:
    path = folder / f"{day}.csv"
    rows = [(t, day.isoformat(), h.name, r) for t, r in returns.items() for h in HORIZONS]
    pd.DataFrame(rows, columns=["ticker", "run_date", "horizon", "expected_return"]).to_csv(path, index=False)
    return path


def _evening(day: dt.date) -> dt.datetime:
    return session_close(day) + dt.timedelta(hours=1)


def _store(tmp: Path, tickers: list[str], n_sessions: int, seed: int):
    sessions = session_array()
    sessions = sessions[sessions >= np.datetime64(START)][: n_sessions + 2]
    engine = upgrade(f"sqlite:///{tmp / 'ldtm.db'}")
    ingest_frame(engine, _walks(tickers, sessions, seed), "synthetic")
    settings = Settings(home=tmp / "home", database_url=str(engine.url))
    settings.ensure_dirs()
    return engine, settings, [pd.Timestamp(d).date() for d in sessions]


def cost(repeats: int) -> None:
    import os

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tickers = [f"T{i:04d}" for i in range(1000)]
        engine, settings, days = _store(tmp, tickers, 40 + repeats, seed=1)
        external.register(engine, "desk", tickers)
        rc.keygen(tmp / "r.pem", tmp / "r.pub")
        os.environ[rc.DIR_ENV], os.environ[rc.KEY_ENV] = str(tmp / "receipts"), str(tmp / "r.pem")
        rng = np.random.default_rng(2)
        times = []
        for day in days[40 : 40 + repeats]:
            path = _file(tmp, day, dict(zip(tickers, rng.normal(0, 0.01, len(tickers)), strict=True)))
            t0 = time.perf_counter()
            res = submit(engine, settings, "desk", path, at=_evening(day))
            times.append(time.perf_counter() - t0)
            assert res.rows_written == 1000 and res.receipt is not None
        del os.environ[rc.DIR_ENV], os.environ[rc.KEY_ENV]
    print(f"CPU: {describe_cpu()}; SQLite")
    print("| tickers | rows in the file | evenings | median s | max s |")
    print("|---|---|---|---|---|")
    print(f"| 1,000 | 3,000 | {repeats} | {statistics.median(times):.2f} | {max(times):.2f} |")


def null(models: int, tickers: int, evenings: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        names = [f"coin{i:03d}" for i in range(models)] + ["planted"]
        owned = {
            n: [f"{n.upper()[:4]}{n[-3:] if n != 'planted' else 'PLT'}{j}" for j in range(tickers)]
            for n in names
        }
        every = [t for ts in owned.values() for t in ts]
        engine, settings, days = _store(tmp, every, evenings, seed)
        for n in names:
            external.register(engine, n, owned[n])
        close = pd.read_sql("SELECT ticker, date, close FROM prices", engine).pivot(
            index="date", columns="ticker", values="close"
        )
        close.index = pd.to_datetime(close.index)
        rng = np.random.default_rng(seed + 1)
        shown_at = None
        t0 = time.perf_counter()
        for i, day in enumerate(days[:evenings]):
            moves = np.sign(close.iloc[i + 1] - close.iloc[i])
            for n in names:
                if n == "planted":
                    right = rng.random(tickers) < 0.60
                    calls = np.where(right, moves[owned[n]].to_numpy(), -moves[owned[n]].to_numpy())
                else:
                    calls = rng.choice([-1.0, 1.0], tickers)
                submit(engine, settings, n, _file(tmp, day, dict(zip(owned[n], 0.01 * calls, strict=True))),
                       at=_evening(day))  # fmt: skip
            if (i + 1) % 21 == 0 and shown_at is None:
                fillback(engine)
                if judge.judge(engine, "planted").shown:
                    shown_at = i + 1
        fillback(engine)
        seconds = time.perf_counter() - t0
        verdicts = {n: judge.judge(engine, n) for n in names}
        false = sum(bool(verdicts[n].shown or verdicts[n].promotable) for n in names if n != "planted")
        promoted_false = sum(len(judge.promote(engine, n)) > 0 for n in names if n != "planted")
    upper = beta.ppf(0.975, false + 1, models - false) if false < models else 1.0
    planted = verdicts["planted"]
    print(f"CPU: {describe_cpu()}; SQLite; {models} coin-flip models + 1 planted (60 %), {tickers} tickers each, "
          f"{evenings} evenings; {seconds:.0f} s of submissions")  # fmt: skip
    print(
        "| null models | shown (any ticker) | promoted | rate | 95 % upper | planted shown after | planted stated |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {models} | {false} | {promoted_false} | {false / models:.3f} | {upper:.3f} | "
        f"{shown_at if shown_at else f'not within {evenings}'} evenings | {planted.detectable} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--null", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", type=int, default=103)
    ap.add_argument("--tickers", type=int, default=3)
    ap.add_argument("--evenings", type=int, default=1260)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    quiet, level = logging.getLogger("ldtm"), logging.getLogger("ldtm").level
    quiet.setLevel(logging.WARNING)
    try:
        if args.cost:
            cost(args.repeats)
        if args.null:
            null(args.models, args.tickers, args.evenings, args.seed)
    finally:
        quiet.setLevel(level)  # a test that calls main() keeps its logging as it was
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
