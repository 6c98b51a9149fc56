"""Decay alerts: is each ticker's production record still delivering what was promised?

Per ticker with an active model, every night:

- The record (`decay.record.published_record`): the ticker's published production rows across model
  changes (per evening the first non-shadow row, written by an active model), filled and out of sample,
  one per evening in run-date order. A weekly promotion changes the model, not the record, so evidence
  of a drop keeps accumulating (a chart that restarted at every promotion needed 17-20 misses in a row
  within the ~5 evenings a weekly champion serves: it could never fire).
- The promise: per row, the pooled next-day direction accuracy of the backtest the gate passed the model
  that wrote it on (`decay.record.promises_of`), shrunk for selection: its exact one-sided lower
  confidence bound at the level the gate judged the model at (`Promise.promised`; a backtest kept because
  it passed overstates the model: charts against the raw figure alarmed ~5x the designed rate on
  unchanged gated true-55 % models, against the bound 0.5x; `benchmarks/decay_null.py`). Both figures
  are reported. Rows of a model with no promise are not judged.
- Chart 1, accuracy: a Bernoulli CUSUM (ldtm_core.accountability.decay.cusum) on the nightly direction hits,
  each row in control at its model's promised accuracy p0 and out of control at p0 - delta, each step in
  units of its own design's threshold (`cusum.run_normalised`: with one promise throughout this is the
  exactly designed chart; with promises changing weekly the false-alarm rate stays near the design,
  measured in tests/test_decay_record.py).
- Chart 2, against always-up on the same evenings: only evenings where exactly one of the two was right
  carry evidence about the difference (the McNemar argument of skill.py). On those the model's win share
  was promised as q0 by the same backtest (model_only / (model_only + up_only), shrunk the same way:
  `Promise.promised_vs_up`); the chart is the same Bernoulli CUSUM on the discordant evenings with
  q0 -> q0 - delta. Its run length counts discordant
  evenings, so its ARL is designed for ARL0_sessions x r0, r0 the promised share of discordant evenings.
- False alarms: with both charts each is designed for 2 x ARL0 sessions, so a ticker's false alarms
  (either chart) come at most once per ~ARL0 sessions (the per-session alarm rates add at most).
- A signal = a chart's statistic reaches its threshold; the chart restarts at 0 (the ARL0 counts these).
  Decaying = a chart signalled within the newest `hold` evenings of the record. An alarm episode is a
  stretch of evenings in WARN without a break, whichever chart signals; it is named by its first
  evening (`alarm_key`) and notified once.
- Feature drift beside it (`decay.record.drift_of`): PSI of the model's input features, the last
  `psi_sessions` sessions after the recipe's data cutoff against everything up to it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from sqlalchemy import Engine

from ldtm_core.accountability.alerts import notify
from ldtm_core.accountability.decay import cusum
from ldtm_core.accountability.decay.drift import FeatureDrift
from ldtm_core.accountability.decay.record import (
    Promise,
    drift_of,
    models_by_id,
    prior_of,
    promise_of,
    promises_of,
    published_record,
)
from ldtm_core.accountability.decay.selection import Prior
from ldtm_core.config import env_number
from ldtm_core.data.calendar import SESSIONS_PER_YEAR
from ldtm_core.errors import InputError
from ldtm_core.learning.registry import EXTERNAL, ModelRecord, serving_models

__all__ = ["Promise", "drift_of", "promise_of"]  # read through this module by older callers

MODES = ("all", "live", "replay")


@dataclass(frozen=True)
class DecaySettings:
    delta: float = 0.10  # the drop in hit rate the charts are tuned to detect (fraction)
    arl0: float = 1000.0  # designed sessions between false alarms per ticker (~4 years of sessions)
    psi_sessions: int = 63  # the recent window of the drift figures (~3 months)
    hold: int = 5  # evenings a signal keeps the ticker in WARN (a trading week)
    mode: str = "all"  # snapshot mode of the live record: all (live + out-of-sample replays), live, replay

    @classmethod
    def from_env(cls, **overrides) -> DecaySettings:
        """LDTM_DECAY_DELTA (percentage points), LDTM_DECAY_ARL0 (sessions), LDTM_DECAY_PSI_SESSIONS,
        LDTM_DECAY_HOLD_SESSIONS."""
        values = {}
        delta = env_number("LDTM_DECAY_DELTA")
        if delta is not None:
            values["delta"] = delta / 100
        for name, var in (
            ("arl0", "LDTM_DECAY_ARL0"),
            ("psi_sessions", "LDTM_DECAY_PSI_SESSIONS"),
            ("hold", "LDTM_DECAY_HOLD_SESSIONS"),
        ):
            value = env_number(var)
            if value is not None:
                values[name] = value
        values.update({k: v for k, v in overrides.items() if v is not None})
        out = cls(**values)
        if out.mode not in MODES:
            raise InputError(f"decay mode must be one of {', '.join(MODES)}, not {out.mode!r}")
        return out


@dataclass(frozen=True)
class Chart:
    name: str  # "accuracy" or "vs_always_up"
    p0: float
    p1: float
    h: float
    arl0: float  # the exact in-control ARL of the chart, in its own trials
    trials: int
    statistic: float  # S on the newest evening (restarted at 0 after each signal)
    signals: int  # since the model's promotion
    last_signal: dt.date | None
    alarm: bool  # the last signal is within the newest `hold` evenings
    signal_dates: tuple = ()  # every signal's evening, oldest first


@dataclass
class TickerDecay:
    ticker: str
    model_id: int
    version: str | None
    promise: Promise | None
    n: int = 0
    hits: int = 0
    up_hits: int = 0
    first_evening: dt.date | None = None
    last_evening: dt.date | None = None
    charts: list[Chart] = field(default_factory=list)
    drift: FeatureDrift | None = None
    reason: str = ""  # why no chart runs (no promise, no live rows)
    models: int = 0  # models whose published rows make up the record
    judged: int = 0  # rows whose model had a promise to judge them against
    promised: float | None = None  # the judged rows' mean promised accuracy (shrunk for selection)
    expected: float | None = None  # their mean expected accuracy after selection (empirical Bayes)
    backtest: float | None = None  # the judged rows' mean raw backtest accuracy, beside it
    dates: list = field(default_factory=list, repr=False)  # the record's evenings, for the episode
    hold: int = 5

    @property
    def accuracy(self) -> float | None:
        return self.hits / self.n if self.n else None

    @property
    def always_up_accuracy(self) -> float | None:
        return self.up_hits / self.n if self.n else None

    @property
    def decaying(self) -> bool:
        return any(c.alarm for c in self.charts)

    def chart(self, name: str) -> Chart | None:
        return next((c for c in self.charts if c.name == name), None)

    @property
    def alarm_key(self) -> str:
        """Names one alarm episode (ticker, its first evening in WARN): notified once, whichever chart
        keeps it going and whichever model serves meanwhile."""
        return f"{self.ticker}/{self.alarm_since}"

    @property
    def alarm_since(self) -> dt.date | None:
        """The first evening of the current unbroken WARN stretch (None: not in WARN)."""
        if not self.decaying:
            return None
        signals = [d for c in self.charts for d in c.signal_dates]
        if not self.dates or not signals:
            return min((c.last_signal for c in self.charts if c.alarm), default=None)
        return episode_start(self.dates, signals, self.hold)

    @property
    def signals(self) -> int:
        return sum(c.signals for c in self.charts)

    def row(self) -> dict:
        acc, up = self.chart("accuracy"), self.chart("vs_always_up")
        return {
            "ticker": self.ticker,
            "model_id": self.model_id,
            "version": self.version,
            "decaying": self.decaying,
            "live_n": self.n,
            "live_accuracy": self.accuracy,
            "live_models": self.models,
            "expected_accuracy": self.expected,
            "promised_accuracy": self.promised
            if self.promised is not None
            else (self.promise.promised if self.promise else None),
            "backtest_accuracy": self.backtest
            if self.backtest is not None
            else (self.promise.accuracy if self.promise else None),
            "promise_level": self.promise.level if self.promise else None,
            "always_up_accuracy": self.always_up_accuracy,
            "cusum": acc.statistic if acc else None,
            "threshold": acc.h if acc else None,
            "cusum_vs_up": up.statistic if up else None,
            "threshold_vs_up": up.h if up else None,
            "alarm_since": str(self.alarm_since) if self.decaying else None,
            "signals": self.signals,
            "last_signal": str(max(c.last_signal for c in self.charts if c.last_signal))
            if self.signals
            else None,
            "psi_max": self.drift.max_psi if self.drift else None,
            "psi_feature": self.drift.max_feature if self.drift else None,
            "psi_band": self.drift.band if self.drift else "unknown",
            # Features beyond their PSI limit: an unchanged ticker lists any at most 5 % of the time.
            "psi_unusual": ", ".join(self.drift.unusual) if self.drift else "",
            "promise_source": self.promise.source if self.promise else None,
            "note": self.reason,
        }

    def describe(self) -> str:
        if not self.charts:
            return f"{self.ticker}: not checked ({self.reason})"
        label = {"accuracy": "CUSUM", "vs_always_up": "vs always-up"}
        row = self.row()
        promised, backtest = row["promised_accuracy"], row["backtest_accuracy"]
        models = f" of {self.models} models" if self.models > 1 else ""
        why = (
            f" (backtest {backtest * 100:.1f}%, less the margin by which a backtest that passed the gate "
            "overstates it)"
            if backtest is not None and promised < backtest - 5e-4
            else ""
        )
        expected = (
            f"expected {self.expected * 100:.1f}% after the gate's selection; the charts watch for a drop "
            f"below the floor of "
            if self.expected is not None
            else "promised "
        )
        head = (
            f"{self.ticker} model {self.model_id}: live {self.accuracy * 100:.1f}% on {self.n} published "
            f"evenings{models} vs {expected}{promised * 100:.1f}%{why} (always-up "
            f"{self.always_up_accuracy * 100:.1f}% on the same evenings); "
            + ", ".join(f"{label[c.name]} {c.statistic:.2f} / h {c.h:.2f}" for c in self.charts)
        )
        if self.decaying:
            head += f" -> DECAYING: signal on {self.alarm_since}"
        if self.signals:
            head += f" ({self.signals} signal{'s' if self.signals > 1 else ''} on the record)"
        return head + (f"; {self.drift.describe().split(': ', 1)[1]}" if self.drift else "")


# --- pure ------------------------------------------------------------------------------------------

# The decay table's columns, in display order: one home for the Dagster check and the dashboard.
TABLE_COLUMNS = [
    "ticker",
    "decaying",
    "alarm_since",
    "signals",
    "last_signal",
    "live_n",
    "live_models",
    "live_accuracy",
    "expected_accuracy",
    "promised_accuracy",
    "backtest_accuracy",
    "always_up_accuracy",
    "cusum",
    "threshold",
    "cusum_vs_up",
    "threshold_vs_up",
    "psi_max",
    "psi_feature",
    "psi_band",
    "psi_unusual",
    "promise_source",
    "note",
]


def episode_start(dates: list, signal_dates: list, hold: int) -> dt.date | None:
    """The first evening of the unbroken WARN stretch that holds the newest evening of `dates` (None:
    not in WARN). A signal on evening i keeps evenings i .. i + hold - 1 in WARN; a signal on or before
    the evening after that continues the same stretch."""
    index = {d: i for i, d in enumerate(dates)}
    signals = sorted({index[d] for d in signal_dates if d in index})
    if not signals or len(dates) - 1 - signals[-1] >= hold:
        return None
    start = signals[-1]
    for i in reversed(signals[:-1]):
        if start - i > hold:
            break
        start = i
    return dates[start]


def episodes(dates: list, signal_dates, hold: int) -> list:
    """The first evening of every WARN episode on the record (the rule of `episode_start`): a signal more
    than `hold` evenings after the one before it starts a new episode. What a false-alarm rate counts."""
    index = {d: i for i, d in enumerate(dates)}
    out, last = [], None
    for i in sorted({index[d] for d in signal_dates if d in index}):
        if last is None or i - last > hold:
            out.append(dates[i])
        last = i
    return out


def run_chart(
    name: str,
    designs: list[cusum.CusumDesign] | cusum.CusumDesign,
    hits: np.ndarray,
    dates: list,
    recent_from: dt.date | None,
) -> Chart:
    """The chart over `hits` (True = hit) in order, each with its own design (or one for all); in alarm
    when its last signal is on or after `recent_from` (the first of the record's newest `hold` evenings)."""
    hits = np.asarray(hits, dtype=bool)
    if isinstance(designs, cusum.CusumDesign):
        designs = [designs] * len(hits)
    stat, signals = cusum.run_normalised(designs, ~hits)
    current = designs[-1] if designs else None
    last = dates[signals[-1]] if signals else None
    return Chart(
        name,
        current.p0 if current else float("nan"),
        current.p1 if current else float("nan"),
        current.h if current else float("nan"),
        current.arl0 if current else float("nan"),
        len(stat),
        float(stat[-1] * current.h) if len(stat) else 0.0,  # in units of the serving model's threshold
        len(signals),
        last,
        last is not None and recent_from is not None and last >= recent_from,
        tuple(dates[i] for i in signals),
    )


def designs_of(promise: Promise | None, settings: DecaySettings) -> tuple:
    """(accuracy design or None, vs-always-up design or None) for rows judged against `promise`: in
    control at what it promised (`Promise.promised`, `promised_vs_up`), not its raw backtest figures."""
    if promise is None:
        return None, None
    rate = promise.discordant / promise.n if promise.n else 1.0
    return _designs(float(promise.promised), promise.promised_vs_up, rate, settings.delta, settings.arl0)


# Designs on a grid: a chart's design costs ~0.1 s (an ARL bisection), and with weekly promotions every
# model's promise differs a little, so 103 tickers x a year of models would mean thousands of designs per
# night. Promises are floored to the point and the discordant rate raised to the 0.05: both conservative
# (in control the chart expects no more than was promised, and the vs-up chart's ARL0 target only grows).
ACCURACY_GRID = 100
RATE_GRID = 20


def _floor(x: float, grid: int) -> float:
    return math.floor(x * grid + 1e-9) / grid


def _designs(accuracy: float, share: float | None, rate: float, delta, arl0) -> tuple:
    p0 = _floor(float(np.clip(accuracy, 0.02, 0.98)), ACCURACY_GRID)
    q0 = None if share is None else _floor(float(share), ACCURACY_GRID)
    return _designs_on_grid(p0, q0, min(1.0, math.ceil(rate * RATE_GRID - 1e-9) / RATE_GRID), delta, arl0)


@lru_cache(maxsize=4096)
def _designs_on_grid(p0, q0, rate, delta, arl0) -> tuple:
    two = q0 is not None and q0 - delta > 0.01 and 0 < q0 < 0.99
    arl = arl0 * (2 if two else 1)
    acc = cusum.design(p0, p0 - delta, arl) if p0 - delta > 0.01 else None
    vs_up = cusum.design(q0, q0 - delta, max(arl * rate, 1.0)) if two else None
    return acc, vs_up


def charts_for_record(
    promises: list[Promise | None], model_hit, up_hit, dates: list, settings: DecaySettings
) -> list[Chart]:
    """Both charts over one published record (pure), each row judged against its own model's promise:
    accuracy, and the discordant evenings vs always-up. Rows without a design are not judged."""
    model_hit, up_hit = np.asarray(model_hit, bool), np.asarray(up_hit, bool)
    pairs = [designs_of(p, settings) for p in promises]
    recent_from = dates[-settings.hold] if len(dates) >= settings.hold else (dates[0] if dates else None)
    out = []
    keep = [i for i, (acc, _) in enumerate(pairs) if acc is not None]
    if keep:
        out.append(
            run_chart(
                "accuracy",
                [pairs[i][0] for i in keep],
                model_hit[keep],
                [dates[i] for i in keep],
                recent_from,
            )
        )
    split = model_hit != up_hit
    keep = [i for i, (_, up) in enumerate(pairs) if up is not None and split[i]]
    if keep:
        out.append(
            run_chart(
                "vs_always_up",
                [pairs[i][1] for i in keep],
                model_hit[keep],
                [dates[i] for i in keep],
                recent_from,
            )
        )
    return out


def charts_for(
    promise: Promise, model_hit: np.ndarray, up_hit: np.ndarray, dates: list, settings: DecaySettings
) -> list[Chart]:
    """Both charts for a record made under one promise (pure)."""
    return charts_for_record([promise] * len(dates), model_hit, up_hit, dates, settings)


def detect(
    promises: list[Promise | None], model_hit, up_hit, dates: list, settings: DecaySettings | None = None
) -> TickerDecay:
    """Decay on a record given in memory (for benchmarks): the same charts and episode as `check`."""
    settings = settings or DecaySettings()
    out = TickerDecay("?", 0, None, promises[-1] if promises else None, hold=settings.hold)
    _fill(out, promises, np.asarray(model_hit, bool), np.asarray(up_hit, bool), list(dates), settings)
    return out


def _fill(out: TickerDecay, promises, hits, ups, dates, settings: DecaySettings) -> None:
    out.n, out.hits, out.up_hits, out.dates = len(dates), int(hits.sum()), int(ups.sum()), dates
    if dates:
        out.first_evening, out.last_evening = dates[0], dates[-1]
    judged = [p for p in promises if p is not None]
    out.judged = len(judged)
    out.promised = float(np.mean([p.promised for p in judged])) if judged else None
    expected = [p.expected for p in judged if p.expected is not None]
    out.expected = float(np.mean(expected)) if expected else None
    out.backtest = float(np.mean([p.accuracy for p in judged])) if judged else None
    if not out.n:
        out.reason = "no filled out-of-sample published evening yet"
    elif not out.judged:
        out.reason = "no backtest behind the models of its record: nothing was promised"
    else:
        out.charts = charts_for_record(promises, hits, ups, dates, settings)
        if not out.charts:
            out.reason = f"promised accuracy {out.promised:.3f} leaves no room for a drop of {settings.delta}"


# --- the database ----------------------------------------------------------------------------------


def check_ticker(
    engine: Engine, model: ModelRecord, settings: DecaySettings, prior: Prior | None = None
) -> TickerDecay:
    """`model`'s ticker: its published record across model changes, each row against its model's promise
    (`prior`: the selection prior, read once by `check` for every ticker)."""
    record = published_record(engine, model.ticker, settings.mode)
    models = models_by_id(engine, {*record["model_id"].tolist(), model.id})
    promises = promises_of(engine, list(models.values()), prior)
    out = TickerDecay(model.ticker, model.id, model.version, promises.get(model.id), hold=settings.hold)
    out.models = int(record["model_id"].nunique())
    _fill(
        out,
        [promises.get(int(m)) for m in record["model_id"]],
        record["hit"].to_numpy(bool),
        record["up"].to_numpy(bool),
        list(record["run_date"]),
        settings,
    )
    out.drift = drift_of(engine, model, settings.psi_sessions)
    if model.recipe == EXTERNAL and out.judged == 0 and out.n:
        out.reason += " (a submitted model has no backtest: its live record is judged by `ldtm models judge`)"
    return out


@dataclass
class DecayReport:
    tickers: list[TickerDecay]
    settings: DecaySettings
    without_active: list[str] = field(default_factory=list)  # ungated tickers: nothing in production

    @property
    def decaying(self) -> list[TickerDecay]:
        return [t for t in self.tickers if t.decaying]

    def rows(self) -> list[dict]:
        return [t.row() for t in self.tickers]

    def summary(self) -> str:
        bad = self.decaying
        rule = (
            f"Bernoulli CUSUM on each ticker's published record across model changes, drop of "
            f"{self.settings.delta * 100:g} points, designed false-alarm rate one per "
            f"{self.settings.arl0:g} sessions per ticker; each promise is the exact lower confidence bound "
            "of its backtest accuracy at the level the gate judged it at, since a backtest kept because it "
            "passed overstates the model"
        )
        models = f"{len(self.tickers)} active model{'' if len(self.tickers) == 1 else 's'}"
        expect = (
            f" With no decay anywhere, expect about {self.expected_false_alarms_a_year:.2g} false alarms a "
            f"year across these {len(self.tickers)} tickers ({SESSIONS_PER_YEAR} sessions / "
            f"{self.settings.arl0:g} each)."
        )
        if not bad:
            return f"No decay: {models} checked ({rule}).{expect}"
        return (
            f"Decay in {len(bad)} of {models} ({rule}): "
            + "; ".join(t.describe() for t in bad)
            + "."
            + expect
        )

    @property
    def expected_false_alarms_a_year(self) -> float:
        """False alarms a year the designed charts give across the checked tickers with no decay at all:
        each ticker's charts alarm once per ARL0 sessions on average."""
        return len(self.tickers) * SESSIONS_PER_YEAR / self.settings.arl0

    def payload(self, tickers: list[TickerDecay] | None = None) -> dict:
        chosen = self.decaying if tickers is None else tickers
        return {
            "event": "ldtm.decay",
            "decaying": [t.ticker for t in chosen],
            "rows": [t.row() for t in chosen],
            "delta": self.settings.delta,
            "arl0_sessions": self.settings.arl0,
            "expected_false_alarms_a_year": self.expected_false_alarms_a_year,
            "summary": self.summary(),
        }


def check(
    engine: Engine, tickers: list[str] | None = None, settings: DecaySettings | None = None
) -> DecayReport:
    """The decay report of every active model (of `tickers`, when given)."""
    settings = settings or DecaySettings.from_env()
    serving = serving_models(engine, tickers)
    active = [m for _, m in sorted(serving.items()) if m.status == "active"]
    prior = prior_of(engine) if active else None  # every stored backtest, read and fitted once
    return DecayReport(
        [check_ticker(engine, m, settings, prior) for m in active],
        settings,
        sorted(t for t, m in serving.items() if m.status != "active"),
    )


def notify_decay(
    report: DecayReport, webhook_url: str | None, tickers: list[TickerDecay] | None = None
) -> notify.NotifyResult | None:
    """Post the decaying tickers (or `tickers`, e.g. only the new alarms); None when there are none."""
    chosen = report.decaying if tickers is None else tickers
    if not chosen:
        return None
    text = "decay alert: " + "; ".join(t.describe() for t in chosen)
    return notify.send(report.payload(chosen), webhook_url, text=text)
