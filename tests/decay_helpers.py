"""A planted live record for the decay tests: an active model promoted on a backtest that showed 60 %,
then filled evenings whose hits are drawn at 60 % and, when `decay_at` is given, at 45 % from there on.
The reader's promise is that figure shrunk for the gate's selection (`PLANTED_PROMISE`)."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pandas as pd
from accountability_helpers import add_backtest, make_model
from sqlalchemy import insert

from ldtm_core.accountability.decay import cusum, decay
from ldtm_core.accountability.decay.record import DEFAULT_LEVEL, Promise
from ldtm_core.learning import registry
from ldtm_core.schema import gate_decisions, snapshots

# 250 backtest rows at 60 %, always-up 52 %: discordant 60 won by the model vs 40 by always-up.
PROMISE = (250, 0.60, 0.52, 1.5, 0, 60, 40)
# What the reader makes of it: the gate decision stores no report, so the default first deployment's level.
PLANTED_PROMISE = Promise("b", "gate decision", 250, 0.60, 0.52, 60, 40, level=DEFAULT_LEVEL)


def evenings(n: int, start: str = "2023-02-01") -> list[dt.date]:
    return [d.date() for d in pd.bdate_range(start, periods=n)]


def planted_model(engine, settings, ticker: str, seed: int = 0, report: dict | None = None) -> int:
    """An active model whose passed gate decision points at a backtest that promised 60 % (discordant
    60 won of 100), the decision storing `report` (None: a decision recorded before reports were)."""
    model_id = make_model(engine, settings, ticker, seed=seed, trained_on=dt.date(2023, 1, 31))
    bid = add_backtest(engine, model_id, [PROMISE], ticker=ticker)
    registry.promote(engine, model_id, "test", settings)
    with engine.begin() as conn:
        conn.execute(
            insert(gate_decisions).values(
                backtest_id=bid,
                model_id=model_id,
                ticker=ticker,
                passed=True,
                decided_at=dt.datetime.now(dt.UTC),
                report_json=None if report is None else json.dumps(report),
            )
        )
    return model_id


def snapshot_row(ticker, model_id, day, hit, up, *, status="active", in_sample=False, version="v1") -> dict:
    close = 100.0
    actual = 101.0 if up else 99.0
    pred = actual if hit else (99.0 if up else 101.0)  # right or wrong direction as asked
    return {
        "ticker": ticker,
        "run_date": day,
        "run_date_close": close,
        "prev_close": close,
        "model_id": model_id,
        "model_version": version,
        "model_status": status,
        "mode": "replay",
        "in_sample": in_sample,
        "next_day_pred": pred,
        "next_monday_pred": pred,
        "one_month_pred": pred,
        "direction_pred": "bullish" if pred > close else "bearish",
        "next_day_date": day + dt.timedelta(days=1),
        "next_monday_date": day + dt.timedelta(days=3),
        "one_month_date": day + dt.timedelta(days=30),
        "run_id": "r",
        "created_at": dt.datetime.now(dt.UTC),
        "prev_hash": f"{ticker}{day}{version}",
        "row_hash": "h",
        "next_day_actual": actual,
        "next_day_pct_error": (pred - actual) / actual * 100,
        "next_day_direction_actual": "bullish" if up else "bearish",
        "next_day_direction_correct": bool(hit),
        "next_monday_actual": actual,
        "next_monday_pct_error": 1.0,
        "one_month_actual": actual,
        "one_month_pct_error": 1.0,
    }


def planted_record(engine, ticker, model_id, n=400, decay_at=None, seed=1) -> list[dict]:
    """n filled evenings of the active model (hits at 60 %, 45 % from `decay_at`; up on 52 %), plus rows
    that must not count: in-sample replays (all misses) and an ungated candidate's rows (all misses).

    With `decay_at`, the record ends on the evening the accuracy chart first signals after the drop: the
    night the check must warn (the chart the reader runs: `PLANTED_PROMISE`, ARL0 2 x 1000), drawn as far
    past `n` as that takes (the promise is the 60 % shrunk to ~54 % for the gate's selection, so a fall
    to 45 % takes ~190 evenings on average to signal)."""
    rng = np.random.default_rng(seed)
    if decay_at is not None:
        n = max(n, decay_at + 1000)
    rate = np.where(np.arange(n) < (decay_at if decay_at is not None else n), 0.60, 0.45)
    hits, ups = rng.random(n) < rate, rng.random(n) < 0.52
    if decay_at is not None:
        _, signals = cusum.run(decay.designs_of(PLANTED_PROMISE, decay.DecaySettings())[0], ~hits)
        n = next(i for i in signals if i >= decay_at) + 1
        hits, ups = hits[:n], ups[:n]
    days = evenings(n)
    rows = [snapshot_row(ticker, model_id, d, h, u) for d, h, u in zip(days, hits, ups, strict=True)]
    rows += [
        snapshot_row(ticker, model_id, d, False, True, in_sample=True, version="v1-in")
        for d in evenings(5, "2022-06-01")
    ]
    rows += [  # the same model's rows from before its promotion, while it was an ungated candidate
        snapshot_row(ticker, model_id, d, False, True, status="candidate", version=f"cand-{model_id}")
        for d in evenings(5, "2022-09-01")
    ]
    with engine.begin() as conn:
        conn.execute(insert(snapshots), rows)
    return rows


# Test oracles of the CUSUM design (not product code): the first signal per simulated record, the exact
# expected number of signals from the Markov chain, and the average run length at a hit rate.
def arl(design: cusum.CusumDesign, p: float) -> float:
    return cusum.average_run_length(design.a, design.b, design.steps, p)


def first_alarm(design: cusum.CusumDesign, misses: np.ndarray) -> np.ndarray:
    """Vectorised over rows: the index of the first signal per row of `misses` [N, T], -1 if none."""
    y = np.asarray(misses, dtype=np.int64)
    s = np.zeros(y.shape[0], dtype=np.int64)
    first = np.full(y.shape[0], -1, dtype=np.int64)
    up, down = design.b - design.a, design.a
    for t in range(y.shape[1]):
        s = np.where(y[:, t] == 1, s + up, np.maximum(0, s - down))
        first[(first < 0) & (s >= design.steps)] = t
    return first


def expected_alarms(design: cusum.CusumDesign, p: float, sessions: int) -> float:
    """Exact expected number of signals in `sessions` outcomes at hit rate p, restarting at 0 after each
    (the state distribution propagated through the chain): what `alarm_runs` should count on average."""
    steps, a, b = design.steps, design.a, design.b
    dist = np.zeros(steps)
    dist[0] = 1.0
    total = 0.0
    for _ in range(sessions):
        nxt = np.zeros(steps)
        idx = np.arange(steps)
        np.add.at(nxt, np.maximum(0, idx - a), dist * p)
        up = idx + b - a
        stay = up < steps
        np.add.at(nxt, up[stay], dist[stay] * (1 - p))
        signal = float(dist[~stay].sum() * (1 - p))
        total += signal
        nxt[0] += signal  # restart
        dist = nxt
    return total
