"""What the decay monitor reads: a ticker's published production record across model changes,
the promise of each model that made a row of it, and the feature drift since the recipe's data cutoff.

- The record: per evening the published row (the first non-shadow row of the evening, in id order) when
  an active model wrote it, filled and out of sample, in run-date order, whichever model wrote it. A weekly
  promotion changes the model, not the record: the evidence of a drop keeps accumulating.
- The promise of a model: the backtest the gate passed it on (`gate_decisions` -> `backtest_folds`; a
  shadow's conclusion, with no folds, is not that backtest), pooled over its folds; a model promoted
  without a recorded decision falls back to its newest backtest of its own config, and the report says
  so. Each row is judged against the promise of the model that wrote it.
- The promise is shrunk for selection (`Promise.promised`): only backtests that passed the gate are
  charted, so their accuracy overstates the model (true-55 % models that passed the first-deployment
  test showed 60 % on average, and charts against that alarmed ~5x the designed rate:
  `benchmarks/decay_null.py`). The chart expects the exact one-sided (Clopper-Pearson) lower confidence
  bound of the backtest's hit rate at the level the gate judged the model at (read from its stored
  report, `judged_level`): by test-interval duality every accuracy below it is rejected by the gate's own
  exact test at that level, so a model that barely beat a coin promises a coin, and a clear winner keeps
  most of its edge. The vs-always-up share gets the same bound (the gate's McNemar test is the same exact
  test on the discordant rows). The raw backtest figure (`Promise.accuracy`) is kept and shown beside it.
- Drift: PSI of the model's input features, the last `psi_sessions` sessions after the recipe's data cutoff (the
  earliest data cutoff of the ticker's models with the serving model's config signature) against
  everything up to it. A weekly retrain of one recipe moves the model's own cutoff every week, which left
  fewer than the 20 sessions PSI needs after it: the recipe's is what the promise was made on.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.stats import binomtest
from sqlalchemy import Engine, select

from ldtm_core.accountability.decay.drift import FeatureDrift, feature_drift, model_inputs
from ldtm_core.accountability.decay.selection import Prior, fit_prior
from ldtm_core.accountability.gate.ledger import spend
from ldtm_core.accountability.gate.policy import DEFAULT_ALPHA
from ldtm_core.accountability.shadow.shadow import SHADOW_DECISION_PREFIX
from ldtm_core.learning.recipes import LSTM
from ldtm_core.learning.registry import EXTERNAL, UNPUBLISHED, ModelRecord, list_models
from ldtm_core.schema import backtest_folds, gate_decisions, model_registry, snapshots
from ldtm_core.scoring.skill import pooled_direction

RECORD_COLUMNS = ["run_date", "model_id", "hit", "up"]

# For a promise whose gate report is not stored (a decision before revision 0023, or no decision): the
# level of a first deployment's claims at the default alpha, one trial (what every ticker's first model faced).
DEFAULT_LEVEL = spend(DEFAULT_ALPHA, 1)


@lru_cache(maxsize=65536)
def lower_bound(hits: int, n: int, level: float) -> float:
    """The exact one-sided (Clopper-Pearson) lower confidence bound of a hit rate, at confidence 1 - level:
    every rate below it is rejected by the exact binomial test at `level`."""
    if n <= 0:
        return float("nan")
    ci = binomtest(int(hits), int(n), alternative="greater").proportion_ci(1.0 - level, method="exact")
    return float(ci.low)


@dataclass(frozen=True)
class Promise:
    """What the backtest behind the promotion said, pooled over its folds, and what the chart expects of it.

    `accuracy` and the discordant counts are the backtest's own figures. `level` is the one-sided level the
    gate judged the model's claims at; the chart runs against `promised` / `promised_vs_up`, their exact
    lower bounds at that level (the backtest figure overstates a model that was kept because it passed).
    `level` None: a promise known without selection (a simulation's truth), taken as it is."""

    backtest_id: str
    source: str  # "gate decision" or "newest backtest (no passed gate decision recorded)"
    n: int
    accuracy: float
    always_up_accuracy: float
    model_only: int | None  # discordant rows vs always-up; None before revision 0013
    up_only: int | None
    level: float | None = None
    # The best estimate of the model's accuracy after the gate's selection (`selection`: empirical Bayes
    # over every stored backtest); None where no prior was given. Reported; the charts expect `promised`.
    expected: float | None = None

    @property
    def hits(self) -> int:
        return int(round(self.accuracy * self.n))

    @property
    def discordant(self) -> int:
        return (self.model_only or 0) + (self.up_only or 0)

    @property
    def share_vs_up(self) -> float | None:
        """The backtest's share of the discordant rows the model won (None: no counts or none)."""
        return self.model_only / self.discordant if self.discordant else None

    @property
    def promised(self) -> float:
        """The accuracy the accuracy chart expects in control."""
        if self.level is None:
            return float(self.accuracy)
        return lower_bound(self.hits, self.n, self.level)

    @property
    def promised_vs_up(self) -> float | None:
        """The share of the discordant evenings the vs-always-up chart expects the model to win."""
        if self.level is None or not self.discordant:
            return self.share_vs_up
        return lower_bound(int(self.model_only), self.discordant, self.level)


def judged_level(report: dict | None) -> float:
    """The one-sided level the gate judged a model's claims at, from its stored report (`GateReport.to_dict`):
    the comparison's adjusted alpha (a superiority claim, spent by the trials ledger), else its alpha (a
    refresh's non-inferiority, the absolute rule); DEFAULT_LEVEL when the report or its comparison is missing
    (the seed policy, a decision before revision 0023, no decision)."""
    comparison = (report or {}).get("comparison")
    if not isinstance(comparison, dict):
        comparison = {}
    for key in ("alpha_adjusted", "alpha"):
        value = comparison.get(key)
        if isinstance(value, int | float) and 0.0 < value < 1.0 and math.isfinite(value):
            return float(value)
    return DEFAULT_LEVEL


def _report(text: str | None) -> dict | None:
    try:
        out = json.loads(text) if text else None
    except ValueError:  # a damaged report: the default level, not a failed check
        return None
    return out if isinstance(out, dict) else None


def promise_from(
    backtest_id: str, source: str, folds, report: dict | None = None, prior: Prior | None = None
) -> Promise | None:
    """The promise of the backtest `folds` (backtest_folds rows: a DataFrame or records), judged at the level
    of `report` (the gate's stored report, `judged_level`), its expected accuracy under `prior`; None when
    the folds decided no row."""
    frame = folds if isinstance(folds, pd.DataFrame) else pd.DataFrame(list(folds))
    pooled = _pooled(backtest_id, frame)
    if pooled is None:
        return None
    return _with_expected(Promise(backtest_id, source, *pooled, level=judged_level(report)), prior)


def _with_expected(p: Promise, prior: Prior | None) -> Promise:
    return p if prior is None else replace(p, expected=prior.expected(p.hits, p.n))


def prior_of(engine: Engine) -> Prior:
    """The selection prior fitted to every stored backtest's pooled next-day hits (`selection.fit_prior`)."""
    c = backtest_folds.c
    with engine.connect() as conn:
        folds = pd.DataFrame(
            conn.execute(
                select(c.backtest_id, c.n, c.ties, c.direction_accuracy, c.always_up_accuracy)
            ).all(),
            columns=["backtest_id", "n", "ties", "direction_accuracy", "always_up_accuracy"],
        )
    pooled = [pooled_direction(f.to_dict("records")) for _, f in folds.groupby("backtest_id")]
    pooled = [p for p in pooled if p.scored]
    return fit_prior([p.hits for p in pooled], [p.scored for p in pooled])


def promises_of(
    engine: Engine, models: list[ModelRecord], prior: Prior | None = None
) -> dict[int, Promise | None]:
    """{model id: its promise or None}, in three queries whatever the number of models; each promise's
    expected accuracy under `prior` (default: `prior_of`, read here; a caller judging many tickers reads
    it once and passes it)."""
    ids = [m.id for m in models]
    if not ids:
        return {}
    with engine.connect() as conn:
        passed = conn.execute(
            select(gate_decisions.c.model_id, gate_decisions.c.backtest_id, gate_decisions.c.report_json)
            .where(
                gate_decisions.c.model_id.in_(ids),
                gate_decisions.c.passed.is_(True),
                gate_decisions.c.backtest_id.not_like(f"{SHADOW_DECISION_PREFIX}%"),
            )
            .order_by(gate_decisions.c.id)
        ).all()
        chosen = {mid: (str(bid), "gate decision", text) for mid, bid, text in passed}  # the newest wins
        missing = [m for m in models if m.id not in chosen]
        if missing:
            own = conn.execute(
                select(
                    backtest_folds.c.model_id, backtest_folds.c.backtest_id, backtest_folds.c.config_signature
                )
                .where(backtest_folds.c.model_id.in_([m.id for m in missing]))
                .order_by(backtest_folds.c.id)
            ).all()
            wanted = {m.id: m.recipe_signature for m in missing}
            for mid, bid, sig in own:
                if sig == wanted[mid]:
                    chosen[mid] = (str(bid), "newest backtest (no passed gate decision recorded)", None)
        bids = sorted({b for b, _, _ in chosen.values()})
        folds = (
            pd.DataFrame(
                conn.execute(select(backtest_folds).where(backtest_folds.c.backtest_id.in_(bids)))
                .mappings()
                .all()
            )
            if bids
            else pd.DataFrame()
        )
    by_backtest = {bid: _pooled(bid, folds[folds["backtest_id"] == bid]) for bid in bids}
    if prior is None and by_backtest:
        prior = prior_of(engine)
    out: dict[int, Promise | None] = {}
    for m in models:
        if m.id not in chosen:
            out[m.id] = None
            continue
        bid, source, text = chosen[m.id]
        p = by_backtest.get(bid)
        promise = None if p is None else Promise(bid, source, *p, level=judged_level(_report(text)))
        out[m.id] = None if promise is None else _with_expected(promise, prior)
    return out


def _pooled(bid: str, folds: pd.DataFrame) -> tuple | None:
    if folds.empty:
        return None
    direction = pooled_direction(folds.to_dict("records"))  # ties out of the promise
    if not direction.scored:
        return None
    known = "model_only_hits" in folds and folds["model_only_hits"].notna().all()
    return (
        direction.scored,
        direction.accuracy,
        direction.always_up,
        int(folds["model_only_hits"].sum()) if known else None,
        int(folds["up_only_hits"].sum()) if known else None,
    )


def promise_of(engine: Engine, model: ModelRecord) -> Promise | None:
    """The backtest the gate passed `model` on, pooled; else its newest own-config backtest; else None."""
    return promises_of(engine, [model])[model.id]


def published_record(engine: Engine, ticker: str, mode: str = "all") -> pd.DataFrame:
    """The ticker's published production rows, filled and out of sample, one per evening in run-date
    order, across every model that served: run_date, model_id, hit, up (the stock went up)."""
    s = snapshots.c
    cols = [s.id, s.run_date, s.model_id, s.model_status, s.mode, s.in_sample]
    cols += [s.next_day_direction_correct, s.next_day_actual, s.run_date_close]
    with engine.connect() as conn:
        rows = pd.DataFrame(
            conn.execute(select(*cols).where(s.ticker == ticker).order_by(s.run_date, s.id)).all(),
            columns=[c.name for c in cols],
        )
    rows = rows[~rows["model_status"].isin(UNPUBLISHED)].drop_duplicates(
        "run_date", keep="first"
    )  # what was published
    rows = rows[
        (rows["model_status"] == "active")
        & ~rows["in_sample"].astype(bool)
        & rows["next_day_actual"].notna()
        & rows["next_day_direction_correct"].notna()
    ]
    if mode != "all":
        rows = rows[rows["mode"] == mode]
    return pd.DataFrame(
        {
            "run_date": pd.to_datetime(rows["run_date"]).dt.date.to_numpy(),
            "model_id": rows["model_id"].astype(int).to_numpy(),
            "hit": rows["next_day_direction_correct"].astype(bool).to_numpy(),
            "up": (rows["next_day_actual"].astype(float) > rows["run_date_close"].astype(float)).to_numpy(),
        },
        columns=RECORD_COLUMNS,
    )


def models_by_id(engine: Engine, ids) -> dict[int, ModelRecord]:
    from ldtm_core.learning.registry import _COLS

    ids = sorted({int(i) for i in ids})
    if not ids:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(*_COLS).where(model_registry.c.id.in_(ids))).all()
    return {r.id: ModelRecord.from_row(r) for r in rows}


def recipe_cutoff(engine: Engine, model: ModelRecord) -> dt.date:
    """The earliest data cutoff among the ticker's models of `model`'s config signature (its recipe)."""
    sig = model.recipe_signature
    same = [m.trained_on_date for m in list_models(engine, model.ticker) if m.recipe_signature == sig]
    return min([*same, model.trained_on_date])


def drift_of(engine: Engine, model: ModelRecord, sessions: int) -> FeatureDrift:
    """PSI of the model inputs: the last `sessions` feature rows after the recipe's data cutoff vs the
    rows up to it."""
    from ldtm_core.data.feature_store import prices_and_features

    if model.recipe == EXTERNAL:  # its inputs live in the desk's own system, not in LDTM's store
        return FeatureDrift(model.ticker, {}, 0, 0, reason="a submitted model: LDTM does not know its inputs")
    if model.recipe == LSTM:
        _, read = prices_and_features(engine, model.ticker, features=model.config.features)
        inputs = model_inputs(read.frame, model.config.window)
    else:  # a global recipe reads its inputs' values as they are
        from ldtm_core.learning.recipes.global_fit import ticker_inputs

        inputs = ticker_inputs(engine, model)
    cutoff = recipe_cutoff(engine, model)
    before = np.array([d <= cutoff for d in inputs.index], dtype=bool)
    return replace(
        feature_drift(model.ticker, inputs[before], inputs[~before].tail(sessions)), reference_end=cutoff
    )
