"""Shadow evenings: a challenger that passed the gate earns promotion on live evenings.

With LDTM_SHADOW_SESSIONS = N > 0 and an active champion, the gate's pass puts the candidate in
registry status `shadow` instead of promoting it (`promote_or_shadow`; no champion, or N = 0:
promoted at once, as before). Every nightly then predicts with both (snapshots.predict): the
shadow's row is chained like any other, marked `model_status = 'shadow'`, never published and
left out of every production figure; fillback fills it like any row.

The design (`shadow.design`): N follows from exact binomial power for a stated margin
(LDTM_SHADOW_MARGIN points, LDTM_SHADOW_POWER), a setting that cannot reach it is refused, and the
design is stored when the shadow starts (`shadow_designs`): changing the settings
during a shadow changes nothing.

The live comparison pairs, per evening, the published row of the champion the shadow started beside
(the first non-shadow row, by that active model) with the shadow's row, both filled and out of
sample. After N such evenings `conclude`:
- direction: exact McNemar on the discordant evenings (champion right and shadow wrong vs the
  reverse), one-sided "the champion is better": scipy.stats.binomtest(champion_only,
  champion_only + shadow_only, 0.5, "greater");
- next-day |pct error|: one-sided Diebold-Mariano on the paired errors (scoring.hac), "the shadow's are larger"
  (next-day targets of different evenings do not overlap).
The shadow is retired (the champion stays) when either p <= alpha / 2 (Bonferroni: equal models are
retired at most alpha of the time); otherwise, not shown to be worse, it is promoted.

A shadow cannot hold its ticker forever: it ends, retired with the reason, when its
checkpoint no longer loads, when the champion it is compared with stopped serving (a rollback), or
when it has not collected its N paired evenings after `max_evenings` published evenings. Each decision,
with its figures, goes into the registry events, a `gate_decisions` row (backtest_id `shadow-<model
id>`) and a notification. `end_shadow` ends one by hand (logged the same way).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import Connection, Engine, func, insert, select, update

from ldtm_core.accountability.alerts import notify
from ldtm_core.accountability.shadow.compare import (  # noqa: F401 - re-exported: callers read them here
    RULE,
    SIGNIFICANCE,
    ShadowComparison,
    compare,
    paired_evenings,
)
from ldtm_core.accountability.shadow.design import ShadowDesign
from ldtm_core.config import Settings
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, LDTMError, NotFoundError
from ldtm_core.learning.registry import (
    SHADOW,
    Guard,
    ModelRecord,
    PromoteResult,
    Within,
    _conn,
    _guarded,
    active_model,
    get_model,
    lock_ticker,
    promote,
    record_event,
    shadow_models,
)
from ldtm_core.schema import gate_decisions, model_registry, registry_events, shadow_designs, snapshots
from ldtm_core.shadow_power import TESTS

# gate_decisions rows of shadow conclusions: backtest_id is this prefix + the shadow model id (no folds).
SHADOW_DECISION_PREFIX = "shadow-"


# --- entering shadow -------------------------------------------------------------------------------


def design_for(settings: Settings) -> ShadowDesign:
    """The design a shadow started now gets (sessions at least 1: a shadow left after the setting went
    back to 0 still needs one paired evening)."""
    return ShadowDesign(
        max(int(settings.shadow_sessions), 1), settings.shadow_margin_points, settings.shadow_power
    )


def promote_or_shadow(
    engine: Engine,
    model_id: int,
    reason: str,
    settings: Settings | None = None,
    guard: Guard | None = None,
    within: Within | None = None,
) -> PromoteResult:
    """What a gate pass does: promote at once (N = 0, or no champion: a first deployment), else shadow.
    `guard` and `within` run in the transition's transaction, under the ticker's lock (registry.promote)."""
    settings = settings or Settings.from_env()
    rec = get_model(engine, model_id)
    if settings.shadow_sessions <= 0 or rec.status != "candidate" or active_model(engine, rec.ticker) is None:
        return promote(engine, model_id, reason, settings, guard=guard, within=within)
    return start_shadow(engine, model_id, reason, design_for(settings), guard=guard, within=within)


def start_shadow(
    engine: Engine,
    model_id: int,
    reason: str,
    design: ShadowDesign | int,
    guard: Guard | None = None,
    within: Within | None = None,
) -> PromoteResult:
    """candidate -> shadow in one transaction, its design stored with it. While the ticker already has a
    shadow the candidate stays a candidate (recorded): replacing it would restart the live evenings with
    every weekly retrain, so no shadow longer than a week of sessions could ever conclude. `ldtm shadow
    end` ends one by hand."""
    design = design if isinstance(design, ShadowDesign) else ShadowDesign(max(int(design), 1))
    rec = get_model(engine, model_id)

    def work(conn: Connection) -> PromoteResult:
        return _guarded(conn, rec.ticker, guard, within, transition)

    def transition(conn: Connection) -> PromoteResult:
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
        conn.execute(
            insert(shadow_designs).values(
                model_id=model_id,
                ticker=rec.ticker,
                champion_model_id=champion.id,
                sessions=design.sessions,
                margin_points=design.margin_points,
                power=design.power,
                alpha=design.alpha,
                max_evenings=design.max_evenings,
                after_snapshot_id=conn.execute(select(func.max(snapshots.c.id))).scalar() or 0,
                started_at=now,
            )
        )
        record_event(
            conn,
            model_id,
            rec.ticker,
            "candidate",
            SHADOW,
            f"{reason}; in shadow beside champion model {champion.id} ({champion.version}) for "
            f"{design.sessions} filled evenings before the live comparison (ends retired if they are not "
            f"collected within {design.max_evenings} published evenings); {design.describe()}",
            now,
        )
        return PromoteResult(rec.ticker, model_id, "", "", None, True, shadow=True)

    return run_in_transaction(engine, work)


@dataclass(frozen=True)
class StoredDesign:
    """A running shadow's design as stored when it started (`stored` False: started before revision
    0027, so read from the current settings and its champion taken to be today's)."""

    design: ShadowDesign
    champion_model_id: int | None
    after_snapshot_id: int
    stored: bool
    from_start_event: bool = False  # not stored, but its entry event recorded the evenings it needs


def stored_design(conn_or_engine, shadow_id: int, settings: Settings) -> StoredDesign:
    with _connect(conn_or_engine) as conn:
        row = (
            conn.execute(select(shadow_designs).where(shadow_designs.c.model_id == shadow_id))
            .mappings()
            .first()
        )
    if row is None:
        today = design_for(settings)
        started = _legacy_sessions(conn_or_engine, shadow_id)
        design = ShadowDesign(started, today.margin_points, today.power) if started else today
        return StoredDesign(design, None, 0, False, from_start_event=started is not None)
    design = ShadowDesign(
        int(row["sessions"]),
        float(row["margin_points"]),
        float(row["power"]),
        float(row["alpha"]),
        int(row["max_evenings"]),
    )
    return StoredDesign(design, int(row["champion_model_id"]), int(row["after_snapshot_id"] or 0), True)


# How the release before revision 0027 recorded a shadow's start (its design was not stored then).
_LEGACY_START = re.compile(r"in shadow beside champion model \d+ \(.*?\) for (\d+) filled evenings")


def _legacy_sessions(conn_or_engine, shadow_id: int) -> int | None:
    """The evenings a shadow started before revision 0027 needs, as its entry event recorded them: the
    bar it started with, not today's setting (an upgrade made one need 1 instead of 6)."""
    with _connect(conn_or_engine) as conn:
        reason = conn.execute(
            select(registry_events.c.reason)
            .where(registry_events.c.model_id == shadow_id, registry_events.c.to_status == SHADOW)
            .order_by(registry_events.c.id.desc())
        ).scalar()
    found = _LEGACY_START.search(reason or "")
    return int(found.group(1)) if found else None


def _connect(conn_or_engine):
    return _conn(conn_or_engine)


def _set_status(conn: Connection, rec: ModelRecord, to: str, reason: str, now: dt.datetime) -> None:
    conn.execute(
        update(model_registry).where(model_registry.c.id == rec.id).values(status=to, updated_at=now)
    )
    record_event(conn, rec.id, rec.ticker, rec.status, to, reason[:2000], now)


def required_sessions(settings: Settings) -> int:
    """The evenings a shadow started now would need (a running shadow's are stored with it)."""
    return design_for(settings).sessions


def _published_since(engine: Engine, ticker: str, after_id: int) -> int:
    """Evenings `ticker` published (a non-shadow row by an active model) in snapshots after `after_id`."""
    s = snapshots.c
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count(func.distinct(s.run_date))).where(
                    s.ticker == ticker, s.id > after_id, s.model_status == "active"
                )
            ).scalar()
            or 0
        )


def comparison(engine: Engine, settings: Settings, ticker: str) -> ShadowComparison | None:
    """The live comparison so far for `ticker`'s shadow (None: the ticker has no shadow), on the
    design stored when it started."""
    rec = shadow_models(engine, [ticker]).get(ticker)
    if rec is None:
        return None
    stored = stored_design(engine, rec.id, settings)
    champion = active_model(engine, ticker)
    started_beside = stored.champion_model_id if stored.stored else (champion.id if champion else None)
    cmp = compare(
        paired_evenings(engine, ticker, rec.id, started_beside),
        stored.design.sessions,
        stored.design.alpha / TESTS,
        ticker=ticker,
        shadow_model_id=rec.id,
        champion_model_id=started_beside,
        champion_version=champion.version if champion and champion.id == started_beside else None,
    )
    cmp.design = (
        stored.design.describe()
        if stored.stored
        else f"started before its design was stored: {stored.design.sessions} evenings, "
        + ("as its start recorded" if stored.from_start_event else "from today's settings")
    )
    after = stored.after_snapshot_id
    if not stored.stored:  # its timeout counts from the shadow's own first row
        with engine.connect() as conn:
            first = conn.execute(
                select(func.min(snapshots.c.id)).where(snapshots.c.model_id == rec.id)
            ).scalar()
        after = (first - 1) if first is not None else 1 << 62
    cmp.published_evenings = _published_since(engine, ticker, after)
    cmp.max_evenings = stored.design.max_evenings
    if champion is None or champion.id != started_beside:
        now = f"model {champion.id} serves now" if champion else "no model serves now"
        cmp.ended = (
            f"champion model {started_beside}, the one this shadow was compared with, stopped serving "
            f"({now}: a rollback or a promotion by hand); its live record no longer answers the question"
        )
    elif cmp.decision == "pending" and cmp.published_evenings >= cmp.max_evenings:
        cmp.ended = (
            f"timed out: {cmp.n} of {cmp.required} paired evenings after {cmp.published_evenings} published "
            f"evenings (limit {cmp.max_evenings}); its rows were missing or unfilled"
        )
    if cmp.ended:
        cmp.decision = "ended"
    return cmp


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
                "published_evenings": c.published_evenings,
                "max_evenings": c.max_evenings,
                "note": c.ended or c.design,
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
    "published_evenings",
    "max_evenings",
    "note",  # why it ends early, or what its design detects
]


# --- concluding ------------------------------------------------------------------------------------


@dataclass
class ShadowOutcome:
    comparison: ShadowComparison
    promoted: PromoteResult | None = None
    notified: notify.NotifyResult | None = None
    error: str | None = None  # the decision could not be carried out (e.g. the checkpoint is missing)


def checkpoint_problem(rec: ModelRecord) -> str | None:
    """Why the shadow's checkpoint cannot be loaded now (the nightly skips such a shadow), or None."""
    from ldtm_core.learning.inference import load_verified_model
    from ldtm_core.learning.recipes import LSTM, serving

    try:
        load_verified_model(rec, rec.ticker) if rec.recipe == LSTM else serving.load_verified(rec)
    except Exception as exc:  # noqa: BLE001 - any reason a nightly would skip it ends the shadow
        return f"{type(exc).__name__}: {exc}"
    return None


def conclude(engine: Engine, settings: Settings, ticker: str) -> ShadowOutcome | None:
    """Act on `ticker`'s shadow once its paired evenings reach the requirement (else only report); end
    it, retired with the reason, when it can no longer reach them."""
    cmp = comparison(engine, settings, validate_ticker(ticker))
    if cmp is None:
        return None
    if not cmp.ended:
        broken = checkpoint_problem(get_model(engine, cmp.shadow_model_id))
        if broken:
            cmp.ended, cmp.decision = f"its checkpoint no longer loads ({broken})", "ended"
    if cmp.ended:
        return _act(engine, settings, cmp, "retire", f"ended ({cmp.ended})")
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
            lock_ticker(conn, rec.ticker)
            cur = get_model(conn, rec.id)
            if cur.status != SHADOW:
                raise InputError(f"model {rec.id} of {rec.ticker} is {cur.status} now, no longer in shadow")
            stays = "the model serving now stays" if cmp.ended else "the champion stays"
            _set_status(conn, cur, "retired", f"{text}; {stays}", dt.datetime.now(dt.UTC))
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
