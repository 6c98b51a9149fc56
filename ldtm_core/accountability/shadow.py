"""Shadow evenings (issue 21): a challenger that passed the gate earns promotion on live evenings.

With LDTM_SHADOW_SESSIONS = N > 0 and an active champion, the gate's pass puts the candidate in
registry status `shadow` instead of promoting it (`promote_or_shadow`; no champion, or N = 0:
promoted at once, as before). Every nightly then predicts with both (snapshots.predict): the
shadow's row is chained like any other, marked `model_status = 'shadow'`, never published and
left out of every production figure; fillback fills it like any row.

The live comparison pairs, per evening, the published row (the first non-shadow row, by an active
model) with the shadow's row, both filled and out of sample. After N such evenings `conclude`:
- direction: exact McNemar on the discordant evenings (champion right and shadow wrong vs the
  reverse), one-sided "the champion is better": scipy.stats.binomtest(champion_only,
  champion_only + shadow_only, 0.5, "greater");
- next-day |pct error|: one-sided Wilcoxon signed-rank on the paired errors, "the shadow's are larger".
The shadow is retired (the champion stays) when either p <= SIGNIFICANCE; otherwise, not shown
to be worse, it is promoted. The decision, with its figures, goes into the registry events, a
`gate_decisions` row (backtest_id `shadow-<model id>`) and a notification. `end_shadow` ends one by
hand (logged the same way).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

import pandas as pd
from sqlalchemy import Connection, Engine, insert, select, update

from ldtm_core.accountability import notify
from ldtm_core.accountability.paired import error_test, mcnemar_p
from ldtm_core.accountability.registry import (
    SHADOW,
    ModelRecord,
    PromoteResult,
    _lock_ticker,
    active_model,
    get_model,
    promote,
    record_event,
    shadow_models,
)
from ldtm_core.accountability.skill import format_p_value
from ldtm_core.config import Settings
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, LDTMError, NotFoundError
from ldtm_core.schema import gate_decisions, model_registry, snapshots

# gate_decisions rows of shadow conclusions: backtest_id is this prefix + the shadow model id (no folds).
SHADOW_DECISION_PREFIX = "shadow-"
SIGNIFICANCE = 0.05  # p at or below which the champion is judged better and the shadow retired
RULE = (
    "retire the shadow when the champion is significantly better on the same filled evenings "
    f"(exact McNemar on the direction discordants, or Wilcoxon on next-day |error|, one-sided, "
    f"p <= {SIGNIFICANCE:g}); otherwise promote it"
)


# --- entering shadow -------------------------------------------------------------------------------


def promote_or_shadow(
    engine: Engine, model_id: int, reason: str, settings: Settings | None = None
) -> PromoteResult:
    """What a gate pass does: promote at once (N = 0, or no champion: a first deployment), else shadow."""
    settings = settings or Settings.from_env()
    rec = get_model(engine, model_id)
    if settings.shadow_sessions <= 0 or rec.status != "candidate" or active_model(engine, rec.ticker) is None:
        return promote(engine, model_id, reason, settings)
    return start_shadow(engine, model_id, reason, settings.shadow_sessions)


def start_shadow(engine: Engine, model_id: int, reason: str, sessions: int) -> PromoteResult:
    """candidate -> shadow in one transaction. While the ticker already has a shadow the candidate stays
    a candidate (recorded): replacing it would restart the live evenings with every weekly retrain, so
    no shadow longer than a week of sessions could ever conclude. `ldtm shadow end` ends one by hand."""
    rec = get_model(engine, model_id)

    def work(conn: Connection) -> PromoteResult:
        _lock_ticker(conn, rec.ticker)
        status = conn.execute(
            select(model_registry.c.status).where(model_registry.c.id == model_id)
        ).scalar_one()
        if status != "candidate":
            raise InputError(
                f"model {model_id} of {rec.ticker} is {status}; only a candidate can enter shadow"
            )
        champion = active_model(conn, rec.ticker)
        if champion is None:
            raise InputError(f"{rec.ticker} has no active model for model {model_id} to shadow")
        now = dt.datetime.now(dt.UTC)
        running = shadow_models(conn, [rec.ticker]).get(rec.ticker)
        if running is not None:
            record_event(
                conn,
                model_id,
                rec.ticker,
                "candidate",
                "candidate",
                f"{reason}; waits: shadow model {running.id} of {rec.ticker} is still in its live evenings "
                "(the next retrain after it concludes is gated again)",
                now,
            )
            return PromoteResult(rec.ticker, model_id, "", "", None, False, held_by_shadow=running.id)
        conn.execute(
            update(model_registry)
            .where(model_registry.c.id == model_id)
            .values(status=SHADOW, updated_at=now)
        )
        record_event(
            conn,
            model_id,
            rec.ticker,
            "candidate",
            SHADOW,
            f"{reason}; in shadow beside champion model {champion.id} ({champion.version}) for {sessions} "
            "filled evenings before the live comparison",
            now,
        )
        return PromoteResult(rec.ticker, model_id, "", "", None, True, shadow=True)

    return run_in_transaction(engine, work)


def _set_status(conn: Connection, rec: ModelRecord, to: str, reason: str, now: dt.datetime) -> None:
    conn.execute(
        update(model_registry).where(model_registry.c.id == rec.id).values(status=to, updated_at=now)
    )
    record_event(conn, rec.id, rec.ticker, rec.status, to, reason[:2000], now)


# --- the paired live record ------------------------------------------------------------------------


def paired_evenings(engine: Engine, ticker: str, shadow_id: int) -> pd.DataFrame:
    """One row per evening where the published (active, first non-shadow) row and the shadow's row are
    both filled and out of sample: each side's direction hit and |pct error| per horizon."""
    s = snapshots.c
    cols = [
        s.id,
        s.run_date,
        s.model_id,
        s.model_version,
        s.model_status,
        s.in_sample,
        s.next_day_actual,
        s.run_date_close,
        s.next_day_direction_correct,
        s.next_day_pct_error,
        s.next_monday_pct_error,
        s.one_month_pct_error,
    ]
    with engine.connect() as conn:
        rows = pd.DataFrame(
            conn.execute(select(*cols).where(s.ticker == ticker).order_by(s.id)).mappings().all(),
            columns=[c.name for c in cols],
        )
    out_cols = ["run_date", "champion_version", "shadow_version", "went_up"] + [
        f"{side}_{m}" for side in ("champion", "shadow") for m in ("correct", "nd_err", "nm_err", "om_err")
    ]
    if rows.empty:
        return pd.DataFrame(columns=out_cols)
    published = rows[rows["model_status"] != SHADOW].drop_duplicates("run_date", keep="first")
    published = published[published["model_status"] == "active"]
    shadow = rows[rows["model_id"] == shadow_id]
    both = published.merge(shadow, on="run_date", suffixes=("_c", "_s"))
    both = both[
        both["next_day_actual_c"].notna()
        & both["next_day_actual_s"].notna()
        & ~both["in_sample_c"].astype(bool)
        & ~both["in_sample_s"].astype(bool)
    ]
    out = pd.DataFrame(
        {
            "run_date": pd.to_datetime(both["run_date"]).dt.date,
            "champion_version": both["model_version_c"],
            "shadow_version": both["model_version_s"],
            "went_up": both["next_day_actual_c"] > both["run_date_close_c"],
        }
    )
    for side, suf in (("champion", "_c"), ("shadow", "_s")):
        out[f"{side}_correct"] = both[f"next_day_direction_correct{suf}"].astype(bool)
        for short, col in (("nd", "next_day"), ("nm", "next_monday"), ("om", "one_month")):
            out[f"{side}_{short}_err"] = both[f"{col}_pct_error{suf}"].astype(float).abs()
    return out.sort_values("run_date").reset_index(drop=True)[out_cols]


@dataclass
class ShadowComparison:
    ticker: str
    shadow_model_id: int
    champion_model_id: int | None
    champion_version: str | None
    required: int
    n: int = 0
    champion_accuracy: float | None = None
    shadow_accuracy: float | None = None
    champion_only: int = 0  # evenings the champion was right and the shadow wrong
    shadow_only: int = 0
    direction_p: float = 1.0  # exact McNemar, one-sided: the champion is better
    champion_mae: float | None = None  # next-day mean |pct error| on the same evenings
    shadow_mae: float | None = None
    error_p: float = 1.0  # Wilcoxon signed-rank, one-sided: the shadow's errors are larger
    horizons: dict = field(default_factory=dict)  # next_monday / one_month: {n, champion_mae, shadow_mae}
    decision: str = "pending"  # pending | promote | retire (| promote by hand | retire by hand)
    rule: str = RULE
    first_evening: dt.date | None = None
    last_evening: dt.date | None = None

    def summary(self) -> str:
        head = f"shadow model {self.shadow_model_id} of {self.ticker} vs champion {self.champion_version}"
        if self.n == 0:
            return f"{head}: no paired filled evening yet (needs {self.required})"
        return (
            f"{head} on the same {self.n} filled evenings ({self.first_evening}..{self.last_evening}; "
            f"needs {self.required}): direction {self.shadow_accuracy:.1%} vs {self.champion_accuracy:.1%}, "
            f"discordant {self.shadow_only} shadow-only / {self.champion_only} champion-only, McNemar "
            f"p = {format_p_value(self.direction_p)}; next-day |error| {self.shadow_mae:.3f}% vs "
            f"{self.champion_mae:.3f}%, Wilcoxon p = {format_p_value(self.error_p)}; decision: {self.decision}"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("first_evening", "last_evening"):
            d[k] = d[k].isoformat() if d[k] else None
        d["summary"] = self.summary()
        return d


def compare(pairs: pd.DataFrame, required: int, alpha: float = SIGNIFICANCE, **ids) -> ShadowComparison:
    """The paired comparison and its decision (pure: the pairs come from `paired_evenings`)."""
    cmp = ShadowComparison(required=required, **ids)
    cmp.n = len(pairs)
    if cmp.n == 0:
        return cmp
    champ = pairs["champion_correct"].to_numpy(bool)
    shad = pairs["shadow_correct"].to_numpy(bool)
    cmp.champion_accuracy, cmp.shadow_accuracy = float(champ.mean()), float(shad.mean())
    cmp.champion_only = int((champ & ~shad).sum())
    cmp.shadow_only = int((shad & ~champ).sum())
    # The gate's paired tests, with the champion as the side that must prove itself better.
    cmp.direction_p = mcnemar_p(cmp.champion_only, cmp.shadow_only)
    ce, se = pairs["champion_nd_err"].to_numpy(float), pairs["shadow_nd_err"].to_numpy(float)
    cmp.champion_mae, cmp.shadow_mae = float(ce.mean()), float(se.mean())
    cmp.error_p = error_test("next_day", se, ce).p_worse
    for short, name in (("nm", "next_monday"), ("om", "one_month")):
        ok = pairs[f"champion_{short}_err"].notna() & pairs[f"shadow_{short}_err"].notna()
        cmp.horizons[name] = {
            "n": int(ok.sum()),
            "champion_mae": float(pairs.loc[ok, f"champion_{short}_err"].mean()) if ok.any() else None,
            "shadow_mae": float(pairs.loc[ok, f"shadow_{short}_err"].mean()) if ok.any() else None,
        }
    cmp.first_evening, cmp.last_evening = pairs["run_date"].min(), pairs["run_date"].max()
    if cmp.n >= required:
        worse = cmp.direction_p <= alpha or cmp.error_p <= alpha
        cmp.decision = "retire" if worse else "promote"
    return cmp


def required_sessions(settings: Settings) -> int:
    # A shadow left over after the setting went back to 0 still needs one paired evening.
    return max(int(settings.shadow_sessions), 1)


def comparison(engine: Engine, settings: Settings, ticker: str) -> ShadowComparison | None:
    """The live comparison so far for `ticker`'s shadow (None: the ticker has no shadow)."""
    rec = shadow_models(engine, [ticker]).get(ticker)
    if rec is None:
        return None
    champion = active_model(engine, ticker)
    return compare(
        paired_evenings(engine, ticker, rec.id),
        required_sessions(settings),
        ticker=ticker,
        shadow_model_id=rec.id,
        champion_model_id=champion.id if champion else None,
        champion_version=champion.version if champion else None,
    )


def side_by_side(engine: Engine, settings: Settings) -> pd.DataFrame:
    """Champion vs shadow per ticker in shadow, on the same filled evenings (the board's shadow table)."""
    rows = []
    for ticker in sorted(shadow_models(engine)):
        c = comparison(engine, settings, ticker)
        rows.append(
            {
                "ticker": ticker,
                "champion": c.champion_version,
                "shadow_model_id": c.shadow_model_id,
                "evenings": c.n,
                "required": c.required,
                "champion_accuracy": c.champion_accuracy,
                "shadow_accuracy": c.shadow_accuracy,
                "champion_only": c.champion_only,
                "shadow_only": c.shadow_only,
                "direction_p": c.direction_p,
                "champion_mae": c.champion_mae,
                "shadow_mae": c.shadow_mae,
                "error_p": c.error_p,
                "decision": c.decision,
            }
        )
    return pd.DataFrame(rows, columns=SIDE_BY_SIDE_COLUMNS)


SIDE_BY_SIDE_COLUMNS = [
    "ticker",
    "champion",
    "shadow_model_id",
    "evenings",
    "required",
    "champion_accuracy",
    "shadow_accuracy",
    "champion_only",
    "shadow_only",
    "direction_p",
    "champion_mae",
    "shadow_mae",
    "error_p",
    "decision",
]


# --- concluding ------------------------------------------------------------------------------------


@dataclass
class ShadowOutcome:
    comparison: ShadowComparison
    promoted: PromoteResult | None = None
    notified: notify.NotifyResult | None = None
    error: str | None = None  # the decision could not be carried out (e.g. the checkpoint is missing)


def conclude(engine: Engine, settings: Settings, ticker: str) -> ShadowOutcome | None:
    """Act on `ticker`'s shadow once its paired evenings reach the requirement (else only report)."""
    cmp = comparison(engine, settings, validate_ticker(ticker))
    if cmp is None:
        return None
    if cmp.decision == "pending":
        return ShadowOutcome(cmp)
    return _act(engine, settings, cmp, cmp.decision, "live comparison")


def conclude_all(engine: Engine, settings: Settings) -> list[ShadowOutcome]:
    """`conclude` for every ticker in shadow (the nightly calls this after fillback). One ticker whose
    decision cannot be carried out is reported with its error; the others still conclude."""
    out = []
    for t in sorted(shadow_models(engine)):
        try:
            outcome = conclude(engine, settings, t)
        except LDTMError as exc:
            cmp = comparison(engine, settings, t)
            if cmp is None:  # concluded meanwhile by another run
                continue
            outcome = ShadowOutcome(cmp, error=f"{t}: {exc}")
        if outcome is not None:
            out.append(outcome)
    return out


def end_shadow(engine: Engine, settings: Settings, ticker: str, action: str, reason: str) -> ShadowOutcome:
    """End `ticker`'s shadow by hand: `promote` or `retire` now, whatever the evidence (logged with it)."""
    if action not in ("promote", "retire"):
        raise InputError(f"action must be 'promote' or 'retire', not {action!r}")
    if not reason or not reason.strip():
        raise InputError("ending a shadow by hand needs a reason (it is logged)")
    ticker = validate_ticker(ticker)
    cmp = comparison(engine, settings, ticker)
    if cmp is None:
        raise NotFoundError(f"{ticker} has no model in shadow (ldtm shadow status lists them)")
    cmp.decision = f"{action} by hand"
    return _act(engine, settings, cmp, action, f"ended by hand: {reason.strip()}")


def _act(engine: Engine, settings: Settings, cmp: ShadowComparison, action: str, why: str) -> ShadowOutcome:
    out = ShadowOutcome(cmp)
    text = f"shadow {why}: {cmp.summary()}"
    if action == "promote":
        out.promoted = promote(engine, cmp.shadow_model_id, text[:1500], settings)
        run_in_transaction(engine, lambda conn: _decision(conn, cmp, True))
    else:
        rec = get_model(engine, cmp.shadow_model_id)

        def retire(conn: Connection) -> None:
            _lock_ticker(conn, rec.ticker)
            cur = get_model(conn, rec.id)
            if cur.status != SHADOW:
                raise InputError(f"model {rec.id} of {rec.ticker} is {cur.status} now, no longer in shadow")
            _set_status(conn, cur, "retired", f"{text}; the champion stays", dt.datetime.now(dt.UTC))
            _decision(conn, cmp, False)

        run_in_transaction(engine, retire)
    payload = {"kind": "shadow decision", "action": action, "why": why, **cmp.to_dict()}
    out.notified = notify.send(payload, settings.notify_webhook_url, text=text)
    return out


def _decision(conn: Connection, cmp: ShadowComparison, passed: bool) -> None:
    conn.execute(
        insert(gate_decisions).values(
            backtest_id=f"{SHADOW_DECISION_PREFIX}{cmp.shadow_model_id}",
            decision="shadow promoted" if passed else "shadow retired",
            model_id=cmp.shadow_model_id,
            ticker=cmp.ticker,
            passed=passed,
            decided_at=dt.datetime.now(dt.UTC),
        )
    )
