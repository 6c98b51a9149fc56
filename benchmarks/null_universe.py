"""Benchmark: the statistics users read, at the scale they read them (issue 27).

    .venv/bin/python benchmarks/null_universe.py            # 103 tickers, 252 evenings, 52 retrains
    .venv/bin/python benchmarks/null_universe.py --quick    # a smoke run (seconds)
    .venv/bin/python benchmarks/null_universe.py --also record,decay,psi   # and the other nulls' tables

`--also` runs the nulls measured on their own models after this table, each through its own script
(quick with `--quick`): `record` the board's labels read every evening for five years in flat, rising,
falling and turning markets, and the evenings a lone edge needs (record_null.py); `decay` false decay
episodes per ticker-year with and without the shrunk promise, and the delay on a planted drop
(decay_null.py); `psi` drift flags on undrifted tickers and planted drifts (psi_null.py).

Two universes of models whose next-day direction is simulated, so the truth is known exactly:
  (a) no skill: every model's direction is a coin flip independent of the future;
  (b) a planted edge: 10 tickers right 56 % of the time, 10 others right 55 % until mid-year and 45 %
      after (a decay), the rest coins.
Prices are the synthetic market of the `full` universe (`ldtm_core.data.synthetic_market.generate`), so each
ticker has its own up-rate, regimes and baselines; only the model's calls are simulated.

Each figure goes through the project's own public function, behind one adapter per figure (the
`# --- adapters` section), so it can be re-pointed at a changed API in a few lines:
  board   `leaderboard.leaderboard` on snapshot rows written to a SQLite database evening by evening;
  gate    `gate.evaluate` + `champion_challenger.first_deployment` (first deployment), `paired.compare`
          + `champion_challenger.decide` (a recipe change; an equal refresh);
  shadow  `shadow.compare` on paired evenings; decay `decay.charts_for` on the live record the nightly
          check would chart (today: the current model's rows since its promotion).
Rows per judgement follow the backtest's geometry: 3 quarter folds (`fold_spans`), moving once a
quarter, so the 13 weekly retrains of a quarter are judged on the same fold outcomes (`fold_cache`).
It prints a Markdown table and the CPU (`lscpu` model name).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # --also: the sibling benchmarks

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from ldtm_core.accountability.board import leaderboard
from ldtm_core.accountability.decay import decay
from ldtm_core.accountability.gate import champion_challenger
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.gate import GateThresholds, evaluate
from ldtm_core.accountability.shadow import shadow
from ldtm_core.accountability.shadow.design import DEFAULT_MARGIN_POINTS, DEFAULT_POWER, ShadowDesign  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402
from ldtm_core.schema import model_registry, snapshots  # noqa: E402
from ldtm_core.scoring import paired
from ldtm_core.shadow_power import sessions_for_power  # noqa: E402

YEAR = 2025  # the evenings judged; the quarters before it feed the first backtests
FOLDS = 3  # DEFAULT_FOLDS: the backtest's quarters per judgement (~189 rows)
EDGE, DROP_BEFORE, DROP_AFTER = 0.56, 0.55, 0.45
PLANTED = 10  # tickers per planted case
ALSO = {"record": "record_null", "decay": "decay_null", "psi": "psi_null"}  # --also: the other nulls

# --- adapters: one per figure, each calling the project's public function -------------------------


def board_beats(engine) -> pd.DataFrame:
    """The board users read tonight: per ticker, is it shown as beating a baseline (any of them)?
    `beats_*` are Benjamini-Hochberg q <= alpha over the universe and both baselines (`board_stats`)."""
    board = leaderboard.leaderboard(engine)
    return pd.DataFrame(
        {"ticker": board["ticker"], "beats": board["beats_always_up"] | board["beats_persistence"]}
    )


class Ledger:
    """The trials ledger (`gate.ledger`) on a SQLite file: what the gate reads before each judgement
    and records after it."""

    def __init__(self, tmp: Path):
        self.engine = upgrade(f"sqlite:///{tmp / f'ledger_{time.monotonic_ns()}.db'}")
        now = dt.datetime(YEAR, 1, 1, tzinfo=dt.UTC)
        with self.engine.begin() as conn:  # the ledger names a model: one stands for every candidate
            conn.execute(
                insert(model_registry).values(
                    id=1, ticker="SIM", status="candidate", profile="bench", arch_signature="x",
                    config_json="{}", trained_on_date=dt.date(YEAR - 1, 1, 1), checkpoint_path="-",
                    checkpoint_sha256="-", version="v1", created_at=now, updated_at=now,
                )
            )  # fmt: skip

    def judge(self, ticker: str, signature: str, bid: str, folds: list[dict], kind: str, decide) -> str:
        """`decide(trials)` -> decision, unless this (recipe, evidence) was judged before: then the
        gate says "insufficient evidence" (evidence judged once) and nothing is recorded."""
        evidence = gate_ledger.evidence_of(self.engine, bid, folds)
        trials = gate_ledger.trials(self.engine, ticker, signature, evidence, GateThresholds().alpha)
        if trials.previous is not None:
            return "insufficient evidence"
        decision = decide(trials.count)
        with self.engine.begin() as conn:
            gate_ledger.record(
                conn, ticker=ticker, signature=signature, evidence=evidence, kind=kind,
                backtest_id=bid, model_id=1, trials_=trials, decision=decision,
            )  # fmt: skip
        return decision


def first_deployment_decision(ledger: Ledger, ticker: str, bid: str, folds: list[dict], thresholds) -> str:
    """A first deployment (no champion): the absolute criteria, then beat a coin and always-up at
    the ledger's level for the k-th try (`gate_ledger.spend`); a weekly retrain on folds already judged is not judged again."""

    def decide(k: int) -> str:
        fig, _ = evaluate(folds, thresholds)
        if fig["decision"] != "pass":
            return fig["decision"]
        hits = fig["hits"]
        return champion_challenger.first_deployment(fig["skill"], thresholds, hits, fig["scored"], k).decision

    return ledger.judge(ticker, "recipe", bid, folds, gate_ledger.FIRST, decide)


def recipe_change_passes(
    ledger: Ledger, ticker: str, recipe: str, folds: list[dict], challenger, champion, actual, close, fold,
    thresholds: GateThresholds,
) -> bool:  # fmt: skip
    """A recipe change judged on the champion's folds (paired backtest of configs) at the ledger's level
    for the k-th recipe it counts on those folds (`gate_ledger.spend`)."""
    cmp = paired.compare(challenger, champion, actual, close, fold=fold)

    def decide(k: int) -> str:
        a = gate_ledger.spend(thresholds.alpha, k)
        return champion_challenger.decide(champion_challenger.CONFIGS, cmp, thresholds, a)[0]

    return ledger.judge(ticker, recipe, recipe, folds, gate_ledger.RECIPE, decide) == "pass"


def refresh_refusal(refreshed, stale, actual, close, fold, thresholds: GateThresholds) -> tuple[bool, list]:
    """An equal refresh (stale vs refreshed weights): refused?, and which criteria tripped."""
    cmp = paired.compare(refreshed, stale, actual, close, fold=fold, labels=("refreshed", "stale"))
    decision, criteria = champion_challenger.decide(champion_challenger.REFRESH, cmp, thresholds)
    return decision == "fail", [c.name for c in criteria if not c.passed]


# The default shadow design: the evenings whose exact power reaches DEFAULT_POWER at the default margin.
SHADOW_DESIGN = ShadowDesign(sessions_for_power(DEFAULT_MARGIN_POINTS, DEFAULT_POWER))
SHADOW_EVENINGS = SHADOW_DESIGN.sessions


def shadow_retires(champion_hit, shadow_hit, champion_err, shadow_err) -> bool:
    """The live comparison after the design's paired evenings, at its per-test alpha: retired?"""
    n = len(champion_hit)
    pairs = pd.DataFrame(
        {
            "run_date": pd.date_range("2025-01-02", periods=n, freq="B").date,
            "champion_correct": champion_hit,
            "shadow_correct": shadow_hit,
            "champion_nd_err": champion_err,
            "shadow_nd_err": shadow_err,
            **{f"{side}_{h}_err": np.nan for side in ("champion", "shadow") for h in ("nm", "om")},
        }
    )
    ids = {"ticker": "SIM", "shadow_model_id": 2, "champion_model_id": 1, "champion_version": "v1"}
    return shadow.compare(pairs, SHADOW_EVENINGS, SHADOW_DESIGN.test_alpha, **ids).decision == "retire"


def decaying_tonight(promises: list, hits, up_hits, dates, settings) -> bool:
    """The nightly decay check on the newest evening: the ticker's whole published record, across
    promotions, each row judged against the promise of the model that made it (`decay.detect`)."""
    return decay.detect(promises, hits, up_hits, list(dates), settings).decaying


# --- the world ------------------------------------------------------------------------------------


def market(tickers: list[str], seed: int) -> pd.DataFrame:
    """Closes (sessions x tickers) from two years before YEAR (the first judgements' folds) to a month
    after it (the last evenings' answers)."""
    df = generate(tickers, f"{YEAR - 2}-01-02", f"{YEAR + 1}-01-30", seed=seed)
    return df.pivot(index="date", columns="ticker", values="close")[tickers]


def hit_rates(n_tickers: int, sessions: int, planted: bool) -> np.ndarray:
    """P(model right) per (session, ticker): 0.5 everywhere, or the planted cases in (b)."""
    p = np.full((sessions, n_tickers), 0.5)
    if planted:
        p[:, :PLANTED] = EDGE
        p[:, PLANTED : 2 * PLANTED] = DROP_BEFORE
    return p


def planted_drop(p: np.ndarray, dates: np.ndarray) -> int:
    """Apply the mid-year drop to tickers PLANTED..2*PLANTED; returns the first session after it."""
    mid = int(np.searchsorted(dates, np.datetime64(f"{YEAR}-07-01")))
    p[mid:, PLANTED : 2 * PLANTED] = DROP_AFTER
    return mid


def calls(closes: pd.DataFrame, p: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """(model right, actual up) per (session, ticker); the last session has no answer (False, False)."""
    c = closes.to_numpy(float)
    up = np.zeros_like(c, dtype=bool)
    up[:-1] = c[1:] > c[:-1]
    right = rng.random(c.shape) < p
    return right, up


# --- the board ------------------------------------------------------------------------------------


def board_year(closes: pd.DataFrame, right: np.ndarray, evenings: np.ndarray, warm: int, tmp: Path):
    """Write each evening's filled rows and read the board that evening; beats[evening, ticker]."""
    engine = upgrade(f"sqlite:///{tmp / f'board_{time.monotonic_ns()}.db'}")
    tickers = list(closes.columns)
    now = dt.datetime(YEAR, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        for i, t in enumerate(tickers):
            conn.execute(
                insert(model_registry).values(
                    id=i + 1, ticker=t, status="active", profile="bench", arch_signature="x",
                    config_json="{}", trained_on_date=dt.date(YEAR - 1, 1, 1), checkpoint_path="-",
                    checkpoint_sha256="-", version="v1", created_at=now, updated_at=now,
                )
            )  # fmt: skip
    c = closes.to_numpy(float)
    dates = closes.index.to_numpy()
    out = np.zeros((len(evenings), len(tickers)), dtype=bool)
    for e in range(evenings[0] - warm, evenings[-1] + 1):
        said_up = np.where(right[e], c[e + 1] > c[e], c[e + 1] <= c[e])
        rows = [
            {
                "ticker": t, "run_date": dates[e], "run_date_close": c[e, j], "prev_close": c[e - 1, j],
                "model_id": j + 1, "model_version": "v1", "model_status": "active", "mode": "replay",
                "next_day_pred": c[e, j] * (1.01 if said_up[j] else 0.99),
                "next_monday_pred": c[e, j], "one_month_pred": c[e, j],
                "direction_pred": "bullish" if said_up[j] else "bearish", "in_sample": False,
                "next_day_date": dates[e + 1], "next_monday_date": dates[e + 1],
                "one_month_date": dates[e + 1], "run_id": "bench", "created_at": now,
                "prev_hash": f"{t}{e}", "row_hash": f"{t}{e}h", "chain_version": 2,
                "next_day_actual": c[e + 1, j], "next_day_direction_correct": bool(right[e, j]),
                "next_day_pct_error": (c[e, j] * (1.01 if said_up[j] else 0.99) / c[e + 1, j] - 1) * 100,
            }
            for j, t in enumerate(tickers)
        ]  # fmt: skip
        with engine.begin() as conn:
            conn.execute(insert(snapshots), rows)
        if e >= evenings[0]:
            board = board_beats(engine).set_index("ticker")["beats"]
            out[e - evenings[0]] = board.reindex(tickers, fill_value=False).to_numpy()
    engine.dispose()
    return out


# --- the gate -------------------------------------------------------------------------------------


def quarter_folds(closes: pd.DataFrame, right: np.ndarray, up: np.ndarray, j: int) -> dict:
    """Per completed quarter: the fold a backtest of ticker j would store (its rows' counts)."""
    q = pd.PeriodIndex(pd.DatetimeIndex(closes.index), freq="Q")
    out = {}
    for period in q.unique()[:-1]:  # the last quarter is incomplete
        rows = np.flatnonzero(q == period)
        r, u = right[rows, j], up[rows, j]
        out[period] = {
            "n": len(rows),
            "direction_accuracy": r.mean(),
            "always_up_accuracy": u.mean(),
            "mean_abs_pct_error": 1.0,
            "leakage_rows": 0,
            "model_only_hits": int((r & ~u).sum()),
            "up_only_hits": int((~r & u).sum()),
            "cutoff": str(period.start_time.date()),
            "fold_key": f"{closes.columns[j]}/{period}",  # the recipe's rows of this quarter
        }
    return out


def judgements(closes: pd.DataFrame) -> list[tuple[pd.Period, int]]:
    """(the quarter judged in, how many of YEAR's weekly retrains fall in it): folds move 4x a year."""
    weeks = pd.date_range(f"{YEAR}-01-01", f"{YEAR}-12-31", freq="W-FRI")[:52]
    per = pd.PeriodIndex(weeks, freq="Q")
    return [(p, int((per == p).sum())) for p in per.unique()]


def gate_year(closes, right, up, thresholds, tickers_idx, tmp: Path) -> tuple[np.ndarray, np.ndarray]:
    """First-deployment passes per (ticker, judgement of new evidence) and whether each ticker passed in
    YEAR. Each weekly retrain goes to the gate; the ledger judges a quarter's folds once, so the 12
    retrains after the first of a quarter are "insufficient evidence" and only 4 judgements a year
    remain (at `gate_ledger.spend(alpha, k)`, k = the earlier judgements on overlapping folds plus one)."""
    judged = judgements(closes)
    ledger = Ledger(tmp)
    per_judgement, per_year = [], []
    for j in tickers_idx:
        folds = quarter_folds(closes, right, up, j)
        keys = list(folds)
        decided = []
        for period, weeks in judged:
            last = keys.index(period - 1)
            window = [folds[k] for k in keys[last - FOLDS + 1 : last + 1]]
            for week in range(weeks):
                d = first_deployment_decision(ledger, f"T{j}", f"{period}w{week}", window, thresholds)
                if d != "insufficient evidence" or week == 0:
                    decided.append(d == "pass")
            if any(decided):
                break  # deployed: later retrains are refreshes of a champion, not first deployments
        per_judgement.append(np.mean(decided))
        per_year.append(any(decided))
    ledger.engine.dispose()
    return np.array(per_judgement), np.array(per_year)


def paired_rows(closes: pd.DataFrame, j: int, rng, n: int):
    """n consecutive rows of ticker j: (actual [n, 3], close [n], fold [n]) with the three horizons."""
    c = closes.iloc[:, j].to_numpy(float)
    start = int(rng.integers(30, len(c) - n - 22))
    idx = np.arange(start, start + n)
    actual = np.stack([c[idx + 1], c[idx + 4], c[idx + 21]], axis=1)  # next day, ~next Monday, a month
    return actual, c[idx], np.arange(n) * FOLDS // n


def coin_predictor(actual, close, rng):
    """Direction a coin; |error| of the size a small model makes (~1 % a day, more per horizon)."""
    sign = np.where(rng.random(len(close)) < 0.5, 1.0, -1.0)
    nd = close * (1 + sign * np.abs(rng.normal(0, 0.01, len(close))))
    rest = actual[:, 1:] * (1 + rng.normal(0, [0.02, 0.05], (len(close), 2)))
    return np.column_stack([nd, rest])


# Consecutive evenings' targets share (h - 1) / h of an h-session window, so a predictor's pct errors
# persist about that much from one evening to the next: AR(1) with phi = 0 (next day), 0.8 (next Monday,
# up to 5 sessions) and 0.95 (one month, 21 sessions); sizes ~1 %, 2 %, 5 %.
ERROR_PHI = np.array([0.0, 0.8, 20 / 21])
ERROR_SD = np.array([0.01, 0.02, 0.05])


def ar1(rng, n: int, phi: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """[n, len(phi)] stationary AR(1) series, column k with persistence phi[k] and sd sd[k]."""
    e = np.empty((n, len(phi)))
    e[0] = rng.normal(0, sd)
    for t in range(1, n):
        e[t] = phi * e[t - 1] + rng.normal(0, sd * np.sqrt(1 - phi**2))
    return e


# --- shadow and decay -----------------------------------------------------------------------------


def shadow_rate(p_champion: float, p_shadow: float, sims: int, rng) -> float:
    """Share of `sims` shadows of the default design retired (champion right p_champion, shadow p_shadow)."""
    retired = 0
    for _ in range(sims):
        ch = rng.random(SHADOW_EVENINGS) < p_champion
        sh = rng.random(SHADOW_EVENINGS) < p_shadow
        err = lambda hit: np.abs(rng.normal(1.0, 0.5, SHADOW_EVENINGS)) + np.where(hit, 0.0, 0.5)  # noqa: E731
        retired += shadow_retires(ch, sh, err(ch), err(sh))
    return retired / sims


def promise_at(accuracy: float, backtest: str = "bench", n: int = 189) -> decay.Promise:
    """What a gate-passing backtest at this accuracy promises (always-up at 50 %, independent calls)."""
    model_only = round(n * accuracy * 0.5)
    up_only = round(n * (1 - accuracy) * 0.5)
    return decay.Promise(backtest, "gate decision", n, accuracy, 0.5, model_only, up_only)


def decay_delays(right, up, dates, drop: int, start: int, weekly: bool, settings) -> list[float]:
    """Evenings from the drop to the first decay alarm per dropped ticker (inf: none in the year); the
    published record starts at `start`, a new champion (its own promise, same backtest figures) every
    5 evenings when `weekly`."""
    out = []
    for j in range(PLANTED, 2 * PLANTED):
        delay = np.inf
        for e in range(drop, len(right)):
            promises = [
                promise_at(DROP_BEFORE, f"m{(i - start) // 5 if weekly else 0}") for i in range(start, e + 1)
            ]
            if decaying_tonight(
                promises, right[start : e + 1, j], up[start : e + 1, j], dates[start : e + 1], settings
            ):
                delay = e - drop
                break
        out.append(delay)
    return out


# --- the run --------------------------------------------------------------------------------------


def fmt(x: float) -> str:
    return f"{x * 100:.1f} %"


def universe_figures(case: str, closes, evenings, years: int, rng, thresholds, tmp: Path) -> list[tuple]:
    """Board, gate and decay figures of one universe: (a) no skill, (b) with the planted cases."""
    planted = case == "b"
    dates = closes.index.to_numpy().astype("datetime64[D]")
    n = closes.shape[1]
    p = hit_rates(n, len(closes), planted)
    drop = planted_drop(p, dates) if planted else None
    right, up = calls(closes, p, rng)
    beats = board_year(closes, right, evenings, warm=21, tmp=tmp)
    nulls = range(2 * PLANTED, n) if planted else range(n)
    nb = beats[:, list(nulls)]
    rows = [
        (case, "board: null tickers shown 'beats' per evening (mean)", f"{nb.sum(1).mean():.2f}"),
        (case, "board: evenings with any null 'beats'", fmt(nb.any(1).mean())),
        (case, "board: null tickers ever shown 'beats' in the year", f"{int(nb.any(0).sum())} of {nb.shape[1]}"),
    ]  # fmt: skip
    week, year_pass, power = [], [], []
    for y in range(years):
        r, u = (right, up) if y == 0 else calls(closes, p, rng)
        w, yr = gate_year(closes, r, u, thresholds, nulls, tmp)
        week.append(w.mean())
        year_pass.append(yr.mean())
        if planted:
            power.append(gate_year(closes, r, u, thresholds, range(PLANTED), tmp)[0].mean())
    rows += [
        (
            case,
            "gate: false first deployments per judgement (4 a year: a quarter's folds judged once, at the ledger's spent alpha)",
            fmt(float(np.mean(week))),
        ),
        (case, "gate: null tickers first-deployed within the year", fmt(float(np.mean(year_pass)))),
    ]
    if not planted:
        return rows
    edge = beats[:, :PLANTED]
    rows += [
        (case, f"board power: {EDGE:.0%} tickers shown 'beats' per evening", fmt(edge.mean())),
        (case, f"board power: {EDGE:.0%} tickers ever shown 'beats'", f"{int(edge.any(0).sum())} of {PLANTED}"),
        (case, f"gate power: {EDGE:.0%} tickers pass a first deployment, per judgement (until deployed)", fmt(float(np.mean(power)))),
    ]  # fmt: skip
    settings = decay.DecaySettings()
    for weekly, label in ((True, "a new champion weekly"), (False, "one champion all year")):
        d = np.array(decay_delays(right, up, dates, drop, evenings[0], weekly, settings))
        fired = np.isfinite(d)
        med = f", median delay {np.median(d[fired]):.0f} evenings" if fired.any() else ""
        figure = f"decay {DROP_BEFORE:.0%} → {DROP_AFTER:.0%} mid-year, {label} (whole published record): alarmed within the year{med}"
        rows.append((case, figure, f"{int(fired.sum())} of {PLANTED}"))
    return rows


def paired_figures(closes, sims: int, rng, thresholds) -> list[tuple]:
    """Recipe changes with k tries, equal refreshes and the shadow: pure functions on simulated rows."""
    rows, tries = [], (1, 3, 5, 20)
    # One search of up to 20 tries per simulation: a search of k tries promotes when one of its first k
    # challengers passes, so the index of the first pass answers every k (and the search stops there).
    first_pass = []
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp))
        for s in range(sims):
            actual, close, fold = paired_rows(closes, int(rng.integers(closes.shape[1])), rng, 189)
            champion = coin_predictor(actual, close, rng)
            folds = [{"cutoff": f"2025-0{q + 1}-01", "fold_key": f"sim{s}/{q}"} for q in range(FOLDS)]
            first = next(
                (i for i in range(max(tries))
                 if recipe_change_passes(ledger, f"S{s}", f"recipe{i}", folds, coin_predictor(actual, close, rng),
                                         champion, actual, close, fold, thresholds)),
                max(tries),
            )  # fmt: skip
            first_pass.append(first)
        ledger.engine.dispose()
    for k in tries:
        rate = float(np.mean(np.array(first_pass) < k))
        rows.append(
            (
                "a",
                f"gate: false recipe promotions, k = {k} tries on the same folds (i-th at the ledger's spent alpha)",
                fmt(rate),
            )
        )
    refused, tripped = 0, {}
    for _ in range(sims):
        actual, close, fold = paired_rows(closes, int(rng.integers(closes.shape[1])), rng, 189)
        refreshed = actual * (1 + ar1(rng, 189, ERROR_PHI, ERROR_SD))
        stale = actual * (1 + ar1(rng, 189, ERROR_PHI, ERROR_SD))
        bad, names = refresh_refusal(refreshed, stale, actual, close, fold, thresholds)
        refused += bad
        for name in names:
            tripped[name] = tripped.get(name, 0) + 1
    rows.append(
        ("a", "gate: equal refresh refused (AR(1) errors φ = 0 / 0.8 / 0.95, 189 rows)", fmt(refused / sims))
    )
    rows += [(("a", f"- of which {name} tripped", fmt(c / sims))) for name, c in sorted(tripped.items())]
    rows += [
        ("a", f"shadow (default design: {SHADOW_EVENINGS} evenings for 80 % at 60 vs 40 %): equal models, shadow retired", fmt(shadow_rate(0.5, 0.5, sims, rng))),
        ("b", f"shadow power: {DROP_BEFORE:.0%} champion vs {DROP_AFTER:.0%} shadow, retired", fmt(shadow_rate(DROP_BEFORE, DROP_AFTER, sims, rng))),
        ("b", "shadow power: 60 % champion vs 40 % shadow, retired", fmt(shadow_rate(0.60, 0.40, sims, rng))),
    ]  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 22 tickers, 20 evenings, 10 sims, 1 year"
    )
    ap.add_argument("--tickers", type=int, default=103, help="tickers of the full universe (103)")
    ap.add_argument("--evenings", type=int, default=252, help="evenings of the board's year (252)")
    ap.add_argument("--sims", type=int, default=400, help="simulations per paired figure (400)")
    ap.add_argument("--years", type=int, default=5, help="simulated years of the gate's rates (5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the market and of the model calls")
    ap.add_argument(
        "--also", default="", help=f"comma-separated, of {', '.join(ALSO)}: their tables after this one"
    )
    args = ap.parse_args(argv)
    also = [a for a in args.also.split(",") if a]
    if unknown := sorted(set(also) - set(ALSO)):
        ap.error(f"--also: unknown {', '.join(unknown)}; choose from {', '.join(ALSO)}")
    if args.quick:
        args.tickers, args.evenings, args.sims, args.years = 2 * PLANTED + 2, 20, 10, 1
    if args.tickers < 2 * PLANTED + 1:
        ap.error(f"--tickers must be at least {2 * PLANTED + 1}: the planted cases take {2 * PLANTED}")
    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    closes = market(load_universe("full")[: args.tickers], args.seed)
    dates = closes.index.to_numpy().astype("datetime64[D]")
    evenings = np.flatnonzero(dates >= np.datetime64(f"{YEAR}-01-01"))[: args.evenings]
    thresholds = GateThresholds()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for case in "ab" for r in universe_figures(case, closes, evenings, args.years, rng, thresholds, Path(tmp))]  # fmt: skip
    rows += paired_figures(closes, args.sims, rng, thresholds)
    print(
        f"# null universe: {closes.shape[1]} tickers, {len(evenings)} evenings of {YEAR}, {args.years} "
        f"simulated year(s) of 52 weekly judgements, {args.sims} sims per paired figure, seed {args.seed}"
    )
    print(f"machine: {describe_cpu()}")
    print("\n| case | figure | before | after |\n|---|---|---|---|")
    for case, figure, value in sorted(rows, key=lambda r: r[0]):
        print(f"| {case} | {figure} | {value} | |")
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    for name in also:
        print(f"\n## {name}: benchmarks/{ALSO[name]}.py{' --quick' if args.quick else ''}\n", flush=True)
        importlib.import_module(ALSO[name]).main(["--quick"] if args.quick else [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
