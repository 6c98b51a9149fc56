"""Decay alerts (issue 21): is each active model still delivering what its gate report promised?

Per ticker with an active model, every night:

- The live record: the model's own filled snapshot rows written while it was active (`model_status`
  'active', so since its promotion), out of sample (in-sample replays left out, as every production
  figure does), one per evening, in run-date order. Candidates' (ungated) rows never count.
- The promise: the pooled next-day direction accuracy of the backtest the gate passed it on
  (`gate_decisions` -> `backtest_folds`); a model promoted without a recorded decision falls back to its
  newest backtest of its own config, and the report says so.
- Chart 1, accuracy: a Bernoulli CUSUM (ldtm_core.accountability.cusum) on the nightly direction hits,
  in control p0 = promised accuracy, out of control p1 = p0 - delta.
- Chart 2, against always-up on the same evenings: only evenings where exactly one of the two was right
  carry evidence about the difference (the McNemar argument of skill.py). On those the model's win share
  was promised as q0 = model_only / (model_only + up_only) by the same backtest; the chart is the same
  Bernoulli CUSUM on the discordant evenings with q0 -> q0 - delta. Its run length counts discordant
  evenings, so its ARL is designed for ARL0_sessions x r0, r0 the promised share of discordant evenings.
- False alarms: with both charts each is designed for 2 x ARL0 sessions, so a ticker's false alarms
  (either chart) come at most once per ~ARL0 sessions (the per-session alarm rates add at most).
- A signal = a chart's statistic reaches its threshold; the chart restarts at 0 (the ARL0 counts these).
  Decaying = a chart signalled within the newest `hold` evenings of the record (a sustained drop keeps
  signalling: every ~81 sessions at a 15-point drop from 60 %); each signal is notified once.
- Feature drift beside it (ldtm_core.accountability.drift): PSI of the 11 model inputs, the last
  `psi_sessions` sessions after the model's data cutoff against everything up to the cutoff.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability import cusum, notify
from ldtm_core.accountability.drift import FeatureDrift, feature_drift, model_inputs
from ldtm_core.accountability.registry import ModelRecord, config_signature, serving_models
from ldtm_core.accountability.shadow import SHADOW_DECISION_PREFIX
from ldtm_core.config import env_number
from ldtm_core.errors import InputError
from ldtm_core.schema import backtest_folds, gate_decisions, snapshots

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
class Promise:
    """What the backtest behind the promotion said, pooled over its folds."""

    backtest_id: str
    source: str  # "gate decision" or "newest backtest (no passed gate decision recorded)"
    n: int
    accuracy: float
    always_up_accuracy: float
    model_only: int | None  # discordant rows vs always-up; None before revision 0013
    up_only: int | None


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
        """Names one alarm episode (ticker, model, start): notified once."""
        return f"{self.ticker}/{self.model_id}/{self.alarm_since}"

    @property
    def alarm_since(self) -> dt.date | None:
        """The earliest of the charts' last signals that keep the ticker in WARN."""
        return min((c.last_signal for c in self.charts if c.alarm), default=None)

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
            "promised_accuracy": self.promise.accuracy if self.promise else None,
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
            # Features beyond the PSI their own training window shows over stretches of this length.
            "psi_unusual": ", ".join(self.drift.unusual) if self.drift else "",
            "promise_source": self.promise.source if self.promise else None,
            "note": self.reason,
        }

    def describe(self) -> str:
        if not self.charts:
            return f"{self.ticker}: not checked ({self.reason})"
        label = {"accuracy": "CUSUM", "vs_always_up": "vs always-up"}
        head = (
            f"{self.ticker} model {self.model_id}: live {self.accuracy * 100:.1f}% on {self.n} evenings vs "
            f"promised {self.promise.accuracy * 100:.1f}% (always-up {self.always_up_accuracy * 100:.1f}% on the "
            "same evenings); "
            + ", ".join(f"{label[c.name]} {c.statistic:.2f} / h {c.h:.2f}" for c in self.charts)
        )
        if self.decaying:
            head += f" -> DECAYING: signal on {self.alarm_since}"
        if self.signals:
            head += f" ({self.signals} signal{'s' if self.signals > 1 else ''} since promotion)"
        return head + (f"; {self.drift.describe().split(': ', 1)[1]}" if self.drift else "")


# --- pure ------------------------------------------------------------------------------------------


def run_chart(
    name: str, design: cusum.CusumDesign, hits: np.ndarray, dates: list, recent_from: dt.date | None
) -> Chart:
    """The chart over `hits` (True = hit) in order; in alarm when its last signal is on or after
    `recent_from` (the first of the record's newest `hold` evenings)."""
    stat, signals = cusum.run(design, ~np.asarray(hits, dtype=bool))
    last = dates[signals[-1]] if signals else None
    return Chart(
        name,
        design.p0,
        design.p1,
        design.h,
        design.arl0,
        len(stat),
        float(stat[-1]) if len(stat) else 0.0,
        len(signals),
        last,
        last is not None and recent_from is not None and last >= recent_from,
    )


def charts_for(
    promise: Promise, model_hit: np.ndarray, up_hit: np.ndarray, dates: list, settings: DecaySettings
) -> list[Chart]:
    """Both charts for one live record (pure): accuracy, and the discordant evenings vs always-up."""
    model_hit, up_hit = np.asarray(model_hit, bool), np.asarray(up_hit, bool)
    p0 = float(np.clip(promise.accuracy, 0.02, 0.98))
    discordant = (promise.model_only or 0) + (promise.up_only or 0)
    q0 = promise.model_only / discordant if discordant else None
    two = q0 is not None and q0 - settings.delta > 0.01 and 0 < q0 < 0.99
    arl0 = settings.arl0 * (2 if two else 1)
    out = []
    recent_from = dates[-settings.hold] if len(dates) >= settings.hold else (dates[0] if dates else None)
    if p0 - settings.delta > 0.01:
        design = cusum.design(p0, p0 - settings.delta, arl0)
        out.append(run_chart("accuracy", design, model_hit, dates, recent_from))
    if two:
        rate = discordant / promise.n  # discordant evenings per session, as promised
        design = cusum.design(q0, q0 - settings.delta, max(arl0 * rate, 1.0))
        split = model_hit != up_hit
        kept = [d for d, s in zip(dates, split, strict=True) if s]
        out.append(run_chart("vs_always_up", design, model_hit[split], kept, recent_from))
    return out


# --- the database ----------------------------------------------------------------------------------


def promise_of(engine: Engine, model: ModelRecord) -> Promise | None:
    """The backtest the gate passed `model` on, pooled; else its newest own-config backtest; else None."""
    with engine.connect() as conn:
        passed = conn.execute(
            select(gate_decisions.c.backtest_id)
            .where(
                gate_decisions.c.model_id == model.id,
                gate_decisions.c.passed.is_(True),
                # a shadow conclusion (live evenings, no folds) is not the backtest that made the promise
                gate_decisions.c.backtest_id.not_like(f"{SHADOW_DECISION_PREFIX}%"),
            )
            .order_by(gate_decisions.c.id.desc())
            .limit(1)
        ).scalar()
        source = "gate decision"
        if passed is None:
            source = "newest backtest (no passed gate decision recorded)"
            passed = conn.execute(
                select(backtest_folds.c.backtest_id)
                .where(
                    backtest_folds.c.model_id == model.id,
                    backtest_folds.c.config_signature == config_signature(model.config),
                )
                .order_by(backtest_folds.c.id.desc())
                .limit(1)
            ).scalar()
        if passed is None:
            return None
        folds = (
            conn.execute(select(backtest_folds).where(backtest_folds.c.backtest_id == passed))
            .mappings()
            .all()
        )
    n = sum(int(f["n"]) for f in folds)
    if not n:
        return None
    known = all(f["model_only_hits"] is not None for f in folds)
    return Promise(
        backtest_id=str(passed),
        source=source,
        n=n,
        accuracy=sum(f["direction_accuracy"] * f["n"] for f in folds) / n,
        always_up_accuracy=sum(f["always_up_accuracy"] * f["n"] for f in folds) / n,
        model_only=sum(int(f["model_only_hits"]) for f in folds) if known else None,
        up_only=sum(int(f["up_only_hits"]) for f in folds) if known else None,
    )


def live_record(engine: Engine, model: ModelRecord, mode: str = "all") -> pd.DataFrame:
    """The model's filled, out-of-sample rows written while active: run_date, hit, up (one per evening)."""
    s = snapshots.c
    stmt = (
        select(s.run_date, s.next_day_direction_correct, s.next_day_actual, s.run_date_close)
        .where(
            s.model_id == model.id,
            s.model_status == "active",
            s.in_sample.is_(False),
            s.next_day_actual.is_not(None),
            s.next_day_actual != s.run_date_close,  # a tie (zero move) is nobody's hit or miss
        )
        .order_by(s.run_date, s.id)
    )
    if mode != "all":
        stmt = stmt.where(s.mode == mode)
    with engine.connect() as conn:
        rows = pd.DataFrame(conn.execute(stmt).all(), columns=["run_date", "hit", "actual", "close"])
    rows = rows.drop_duplicates("run_date", keep="first")
    rows["run_date"] = pd.to_datetime(rows["run_date"]).dt.date
    return pd.DataFrame(
        {
            "run_date": rows["run_date"].to_numpy(),
            "hit": rows["hit"].astype(bool).to_numpy(),
            "up": (rows["actual"].astype(float) > rows["close"].astype(float)).to_numpy(),
        }
    )


def drift_of(engine: Engine, model: ModelRecord, sessions: int) -> FeatureDrift:
    """PSI of the model inputs: the last `sessions` feature rows after the data cutoff vs those up to it."""
    from ldtm_core.data.feature_store import prices_and_features

    _, read = prices_and_features(engine, model.ticker)
    inputs = model_inputs(read.frame, model.config.window)
    cutoff = model.trained_on_date
    before = np.array([d <= cutoff for d in inputs.index], dtype=bool)
    return feature_drift(model.ticker, inputs[before], inputs[~before].tail(sessions))


def check_ticker(engine: Engine, model: ModelRecord, settings: DecaySettings) -> TickerDecay:
    out = TickerDecay(model.ticker, model.id, model.version, promise_of(engine, model))
    record = live_record(engine, model, settings.mode)
    out.n, out.hits, out.up_hits = len(record), int(record["hit"].sum()), int(record["up"].sum())
    if len(record):
        out.first_evening, out.last_evening = record["run_date"].iloc[0], record["run_date"].iloc[-1]
    if out.promise is None:
        out.reason = "no backtest behind this model: nothing was promised"
    elif not out.n:
        out.reason = "no filled out-of-sample evening since its promotion yet"
    else:
        out.charts = charts_for(out.promise, record["hit"], record["up"], list(record["run_date"]), settings)
        if not out.charts:
            out.reason = (
                f"promised accuracy {out.promise.accuracy:.3f} leaves no room for a drop of {settings.delta}"
            )
    out.drift = drift_of(engine, model, settings.psi_sessions)
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
            f"Bernoulli CUSUM, drop of {self.settings.delta * 100:g} points, designed false-alarm rate one per "
            f"{self.settings.arl0:g} sessions per ticker"
        )
        models = f"{len(self.tickers)} active model{'' if len(self.tickers) == 1 else 's'}"
        if not bad:
            return f"No decay: {models} checked ({rule})."
        return f"Decay in {len(bad)} of {models} ({rule}): " + "; ".join(t.describe() for t in bad)

    def payload(self, tickers: list[TickerDecay] | None = None) -> dict:
        chosen = self.decaying if tickers is None else tickers
        return {
            "event": "ldtm.decay",
            "decaying": [t.ticker for t in chosen],
            "rows": [t.row() for t in chosen],
            "delta": self.settings.delta,
            "arl0_sessions": self.settings.arl0,
            "summary": self.summary(),
        }


def check(
    engine: Engine, tickers: list[str] | None = None, settings: DecaySettings | None = None
) -> DecayReport:
    """The decay report of every active model (of `tickers`, when given)."""
    settings = settings or DecaySettings.from_env()
    serving = serving_models(engine, tickers)
    active = [m for _, m in sorted(serving.items()) if m.status == "active"]
    return DecayReport(
        [check_ticker(engine, m, settings) for m in active],
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
