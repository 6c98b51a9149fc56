"""The promotion gate (SPEC §10): a candidate becomes active only when its newest backtest passes.

Only a backtest of the candidate's own config counts (its config signature is stored with every
fold): a backtest of another profile or override is refused with a message saying so.

Two named policies (LDTM_GATE_POLICY). `seed`: the seed's absolute criteria alone. `evidence` (the
default): the same, and first a minimum of evidence, test rows in all (LDTM_GATE_MIN_ROWS) and in every
fold (LDTM_GATE_MIN_FOLD_ROWS); below it the decision is "insufficient evidence": the champion stays,
the candidate stays candidate (two folds of one row, or 4 rows at p = 0.5, were promoted).
The defaults come from a power calculation (docs/architecture.md, *Promotion gate*). A candidate that
meets the minimum and the absolute bar is then paired with the champion on identical walk-forward rows
(`champion_challenger.judge`: a paired backtest of the two configs, stale vs refreshed weights for the
same recipe, or vs a coin and always-up when nothing serves yet); the report names the evidence it rests
on. Under the evidence policy every judgement goes into the trials ledger (`gate.ledger`): a
superiority claim is judged at alpha / (the judgements on overlapping folds), and the same evidence (the
same recipe on the same stored folds) is judged once, so next week's retrain is not re-promoted on it.

Seed criteria (overridable by env or arguments): folds >= 2, pooled next-day direction
accuracy >= 52 %, pooled mean |pct error| <= 5 %, leakage rows = 0, and optionally accuracy above
always-up by a margin or a p-value at most `max_p_value` in the exact test of "the model beats always-up"
(ldtm_core.scoring.skill). Every report states the accuracy beside always-up on the same folds, with that p-value.
Pass -> registry.promote. Fail -> the model stays candidate and a notification lists each failing
criterion with its value and threshold. Every decision is recorded with the backtest it judged
(`gate_decisions`); a backtest already judged is refused (`AlreadyJudgedError`) unless forced, so a
repeated gate run (the promotion sensor after a restart, `make dev` after `make demo`) neither flips
nor re-notifies anything.
"""

from __future__ import annotations

import datetime as dt
import json

from sqlalchemy import Connection, Engine, insert, select

from ldtm_core.accountability.alerts import notify
from ldtm_core.accountability.gate import champion_challenger
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.policy import (  # noqa: F401  (re-exported: gate.GateThresholds)
    BETTER,
    DEFAULT_MIN_FOLD_ROWS,
    DEFAULT_MIN_ROWS,
    EVIDENCE_CRITERIA,
    INSUFFICIENT,
    POLICIES,
    UNIVERSE_POLICY,
    Criterion,
    GateThresholds,
    _fmt,
)
from ldtm_core.accountability.gate.report import HELD, GateReport  # noqa: F401  (re-exported)
from ldtm_core.accountability.shadow import shadow
from ldtm_core.config import Settings
from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.registry import (
    _conn,
    active_model,
    get_model,
    lock_ticker,
    newest_candidate,
    record_event,
)
from ldtm_core.schema import backtest_fold_baselines, backtest_folds, gate_decisions
from ldtm_core.scoring import baselines
from ldtm_core.scoring.skill import SkillTest, pooled, pooled_direction


class AlreadyJudgedError(InputError):
    """The newest backtest of the candidate already has a gate decision (force to judge it again)."""


def evaluate(folds: list, thresholds: GateThresholds) -> tuple[dict, list[Criterion]]:
    """Pooled figures of the backtest folds and the criteria; pure, for tests and the sensor."""
    direction = pooled_direction(folds)  # over the decided rows: ties are nobody's hit or miss
    n, acc, up = direction.rows, direction.accuracy, direction.always_up
    err = sum(f["mean_abs_pct_error"] * f["n"] for f in folds) / n if n else float("inf")
    leak = int(sum(f["leakage_rows"] for f in folds))
    skill = pooled(
        [
            None if f.get("model_only_hits") is None else SkillTest(f["model_only_hits"], f["up_only_hits"])
            for f in folds
        ]
    )
    t = thresholds
    criteria = []
    if t.policy == "evidence":
        fold_rows = min((int(f["n"]) for f in folds), default=0)
        criteria += [
            Criterion("rows", int(n), ">=", t.min_rows, n >= t.min_rows),
            Criterion("fold_rows", fold_rows, ">=", t.min_fold_rows, fold_rows >= t.min_fold_rows),
        ]
    criteria += [
        Criterion("folds", len(folds), ">=", t.min_folds, len(folds) >= t.min_folds),
        Criterion("direction_accuracy", acc, ">=", t.min_direction_accuracy, acc >= t.min_direction_accuracy),
        Criterion("mean_abs_pct_error", err, "<=", t.max_mean_abs_pct_error, err <= t.max_mean_abs_pct_error),
        Criterion("leakage_rows", leak, "<=", t.max_leakage_rows, leak <= t.max_leakage_rows),
    ]
    if t.beat_always_up_margin is not None:
        margin = acc - up
        criteria.append(
            Criterion(
                "margin_over_always_up",
                margin,
                ">",
                t.beat_always_up_margin,
                margin > t.beat_always_up_margin,
            )
        )
    if t.max_p_value is not None:
        # Unknown (a backtest written before the counts were stored) fails: rerun the backtest.
        p = skill.p_value if skill else None
        criteria.append(
            Criterion(
                "skill_p_value",
                p if p is not None else "unknown",
                "<=",
                t.max_p_value,
                p is not None and p <= t.max_p_value,
            )
        )
    insufficient = any(not c.passed for c in criteria if c.name in EVIDENCE_CRITERIA)
    decision = (
        "insufficient evidence" if insufficient else ("pass" if all(c.passed for c in criteria) else "fail")
    )
    figures = {
        "decision": decision,
        "skill": skill,
        "baselines": baselines.pooled(folds) if folds else {},
        "n": n,
        "scored": direction.scored,
        "hits": direction.hits,
        "direction_accuracy": acc,
        "always_up_accuracy": up,
        "mean_abs_pct_error": err,
        "leakage": leak,
    }
    return figures, criteria


def newest_backtest(
    engine: Engine, model_id: int, config_signature: str | None = None
) -> tuple[str, list[dict]] | None:
    """The newest backtest of `model_id` (of that config signature, when given) and its folds."""
    stmt = select(backtest_folds.c.backtest_id).where(backtest_folds.c.model_id == model_id)
    if config_signature is not None:
        stmt = stmt.where(backtest_folds.c.config_signature == config_signature)
    with engine.connect() as conn:
        latest = conn.execute(stmt.order_by(backtest_folds.c.id.desc()).limit(1)).scalar()
        if latest is None:
            return None
        rows = conn.execute(
            select(backtest_folds)
            .where(backtest_folds.c.backtest_id == latest)
            .order_by(backtest_folds.c.fold)
        ).mappings()
        return latest, with_fold_baselines(conn, [dict(r) for r in rows])


def with_fold_baselines(conn: Connection, folds: list[dict]) -> list[dict]:
    """`folds` (backtest_folds rows) each with `baselines`: its backtest_fold_baselines rows by name
    (what scoring.baselines.from_fold reads)."""
    b = backtest_fold_baselines.c
    ids = sorted({f["backtest_id"] for f in folds})
    stored: dict[tuple, dict] = {}
    if ids:
        for row in conn.execute(select(backtest_fold_baselines).where(b.backtest_id.in_(ids))).mappings():
            stored.setdefault((row["backtest_id"], row["fold"]), {})[row["baseline"]] = dict(row)
    return [{**f, "baselines": stored.get((f["backtest_id"], f["fold"]), {})} for f in folds]


def judged_backtests(engine: Engine | Connection, backtest_ids) -> dict[str, bool]:
    """{backtest_id: passed} of the latest gate decision on each of `backtest_ids` that has one."""
    ids = sorted({str(b) for b in backtest_ids})
    if not ids:
        return {}
    with _conn(engine) as conn:
        rows = conn.execute(
            select(gate_decisions.c.backtest_id, gate_decisions.c.passed)
            .where(gate_decisions.c.backtest_id.in_(ids))
            .order_by(gate_decisions.c.id)
        ).all()
    return {b: bool(passed) for b, passed in rows}


def _already_judged(
    backtest_id: str, model_id: int, ticker: str, passed: bool, meanwhile: bool = False
) -> str:
    return (
        f"backtest {backtest_id} of model {model_id} ({ticker}) was already judged by the gate"
        + (" while this one ran" if meanwhile else "")
        + f": {'passed' if passed else 'failed'}; backtest the candidate again, or force (`ldtm gate --force`) "
        "to judge the same backtest again"
    )


def _decision(conn, report: GateReport, at: dt.datetime) -> None:
    conn.execute(
        insert(gate_decisions).values(
            backtest_id=report.backtest_id,
            model_id=report.model_id,
            ticker=report.ticker,
            passed=report.passed,
            decided_at=at,
            decision=report.decision,
            report_json=json.dumps(report.to_dict(), default=_json_default),
        )
    )


def _universe_decides(verdict, criteria: list[Criterion]):
    """(the decision, the criteria shown) when the universe verdict decides: better -> pass, not shown
    better -> fail, too few evenings -> insufficient evidence; a ticker whose folds leak fails whatever it
    says. The ticker's own criteria stay in the report as its evidence, marked as not deciding."""
    leak = next(c for c in criteria if c.name == "leakage_rows")  # evaluate's, under every policy
    said = Criterion(
        "universe_verdict",
        f"{verdict.decision} ({verdict.summary()})",
        "==",
        BETTER,
        verdict.decision == BETTER,
    )
    own = [
        Criterion(
            f"own {c.name} ({'met' if c.passed else 'not met'}; evidence, not deciding)",
            c.value,
            c.op,
            c.threshold,
            True,
        )
        for c in criteria
    ]
    if not leak.passed:
        return "fail", [leak, said, *own]
    decision = (
        "insufficient evidence" if verdict.decision == INSUFFICIENT else ("pass" if said.passed else "fail")
    )
    return decision, [said, leak, *own]


def _json_default(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def latest_reports(engine: Engine, tickers=None) -> dict[str, dict]:
    """{ticker: the latest recorded gate report (GateReport.to_dict) with its `decided_at`}; decisions
    recorded before revision 0023 have no report and are left out."""
    stmt = select(gate_decisions.c.ticker, gate_decisions.c.decided_at, gate_decisions.c.report_json).where(
        gate_decisions.c.report_json.is_not(None)
    )
    if tickers is not None:
        stmt = stmt.where(gate_decisions.c.ticker.in_(list(tickers)))
    out = {}
    with engine.connect() as conn:
        for row in conn.execute(stmt.order_by(gate_decisions.c.id)):
            out[row.ticker] = {**json.loads(row.report_json), "decided_at": str(row.decided_at)[:19]}
    return out


def run_gate(
    engine: Engine,
    settings: Settings,
    ticker: str,
    model_id: int | None = None,
    thresholds: GateThresholds | None = None,
    force: bool = False,
    forced_by: str | None = None,
    universe=None,
) -> GateReport:
    """Judge the candidate on its newest backtest of its own config; `force` judges a backtest that
    already has a decision again (otherwise AlreadyJudgedError), recorded as made by `forced_by`.
    `universe`: the universe verdict (`universe.UniverseVerdict`) on the candidate's global recipe, which
    then decides (the universe policy, `universe_decision`): the ticker's own figures are shown beside it."""
    ticker = validate_ticker(ticker)
    thresholds = thresholds or GateThresholds.from_env()
    if model_id is None:
        cand = newest_candidate(engine, ticker)
        if cand is None:
            raise NotFoundError(f"{ticker} has no candidate model to gate")
        model_id = cand.id
    rec = get_model(engine, model_id)
    if rec.ticker != ticker:
        raise InputError(f"model {model_id} belongs to {rec.ticker}, not {ticker}")
    if rec.status != "candidate":
        raise InputError(f"model {model_id} of {ticker} is {rec.status}; the gate only judges candidates")
    own = rec.recipe_signature
    found = newest_backtest(engine, model_id, own)
    if found is None:
        other = newest_backtest(engine, model_id)
        if other is None:
            raise NotFoundError(
                f"no backtest for model {model_id} of {ticker}: run `ldtm backtest --ticker {ticker}` first"
            )
        theirs = other[1][0].get("config_signature")
        raise InputError(
            f"gate refused for model {model_id} of {ticker}: its backtest {other[0]} ran "
            + (f"another config (signature {theirs[:12]}…)" if theirs else "with no recorded config")
            + f", not the candidate's own (profile {rec.profile}, signature {own[:12]}…); run "
            f"`ldtm backtest --ticker {ticker} --model-id {model_id}` without --profile to backtest this model"
        )
    backtest_id, folds = found
    previous = judged_backtests(engine, [backtest_id]).get(backtest_id)
    if previous is not None and not force:
        raise AlreadyJudgedError(_already_judged(backtest_id, model_id, ticker, previous))
    # A judged backtest judged again is a manual override: who forced it goes into the history.
    forced = f"; judged again by {forced_by or 'an operator'} (--force)" if previous is not None else ""
    # What serves now: a promotion must replace this model, not one an operator rolled back to meanwhile.
    judged_against = getattr(active_model(engine, ticker), "id", None)

    def recheck(conn: Connection, promoting: bool) -> None:
        """Under the ticker's lock, in the transaction that records the decision: nobody judged this
        backtest meanwhile (two gates at once), and what serves is what this gate judged against."""
        again = judged_backtests(conn, [backtest_id]).get(backtest_id)
        if again is not None and not force:
            raise AlreadyJudgedError(_already_judged(backtest_id, model_id, ticker, again, meanwhile=True))
        serving = getattr(active_model(conn, ticker), "id", None)
        if promoting and serving != judged_against:
            raise InputError(
                f"gate of model {model_id} ({ticker}) not applied: the champion changed while the gate ran: "
                f"model {judged_against} when it started, model {serving} now (a rollback or another "
                "promotion); run the gate again"
            )

    fig, criteria = evaluate(folds, thresholds)
    comparison, trials, evidence, kind = None, None, None, None
    if universe is not None:
        fig["decision"], criteria = _universe_decides(universe, criteria)
    elif thresholds.policy == "evidence":
        evidence = gate_ledger.evidence_of(engine, backtest_id, folds)
        champion = active_model(engine, ticker)
        kind = (
            gate_ledger.FIRST
            if champion is None
            else (gate_ledger.REFRESH if champion.recipe_signature == own else gate_ledger.RECIPE)
        )
        trials = gate_ledger.trials(engine, ticker, own, evidence, thresholds.alpha)
        prev = trials.previous
        if prev is not None and not force and fig["decision"] != "insufficient evidence":
            # Evidence judged once: the same recipe on the same stored folds (next week's retrain
            # before a new quarter completes) has nothing new to say; the champion stays.
            criteria = criteria + [
                Criterion(
                    "new_evidence",
                    f"the same folds judged backtest {prev['backtest_id']} of model {prev['model_id']} "
                    f"({prev['decision']}, {str(prev['judged_at'])[:19]})",
                    "==",
                    "folds not judged before for this recipe",
                    False,
                )
            ]
            fig["decision"] = "insufficient evidence"
        elif fig["decision"] == "pass":
            # Only a candidate that met the bar is paired with the champion: the decision of any other
            # is already made, and the champion's side can cost fits.
            comparison = champion_challenger.judge(
                engine,
                settings,
                rec,
                folds,
                fig["skill"],
                thresholds,
                hits=fig["hits"],
                n=fig["scored"],
                trials=trials.count if kind != gate_ledger.REFRESH else 1,
            )
            criteria = criteria + comparison.criteria
            fig["decision"] = comparison.decision
    report = GateReport(
        ticker=ticker,
        model_id=model_id,
        backtest_id=backtest_id,
        data_start=folds[0].get("data_start"),
        data_end=folds[0].get("data_end"),
        folds=len(folds),
        n=fig["n"],
        direction_accuracy=fig["direction_accuracy"],
        always_up_accuracy=fig["always_up_accuracy"],
        mean_abs_pct_error=fig["mean_abs_pct_error"],
        leakage_rows=fig["leakage"],
        skill=fig["skill"],
        baselines=fig["baselines"],
        criteria=criteria,
        decision=fig["decision"],
        comparison=comparison,
        policy=UNIVERSE_POLICY if universe is not None else thresholds.policy,
        passed=fig["decision"] == "pass",
        trials=trials if kind in gate_ledger.COUNTED else None,
        recipe=rec.recipe,
    )
    # A trial is a judgement that tested something: not a minimum-evidence refusal, not a repeat.
    ledgered = evidence is not None and (comparison is not None or report.decision == "fail")

    def ledger(conn, at) -> None:
        if ledgered:
            gate_ledger.record(
                conn,
                ticker=ticker,
                signature=own,
                evidence=evidence,
                kind=kind,
                backtest_id=backtest_id,
                model_id=model_id,
                trials_=trials,
                decision=report.decision,
                at=at,
            )

    if report.passed:
        # LDTM_SHADOW_SESSIONS > 0 with a champion: the pass puts the candidate in shadow instead.
        def passed(conn, promoted) -> None:
            # Inside the promotion's transaction, under the ticker's lock: the decision and the promotion
            # commit together, or neither does.
            report.promoted = promoted
            if promoted.held_by_shadow is not None:
                report.decision = HELD  # passed, but not promoted: stored and shown as held
            now = dt.datetime.now(dt.UTC)
            _decision(conn, report, now)
            ledger(conn, now)

        report.promoted = shadow.promote_or_shadow(
            engine,
            model_id,
            f"gate passed (backtest {backtest_id}){forced}",
            settings,
            guard=lambda conn: recheck(conn, promoting=True),
            within=passed,
        )
    else:
        now = dt.datetime.now(dt.UTC)

        def held(conn) -> None:
            lock_ticker(conn, ticker)
            recheck(conn, promoting=False)
            # Recorded in the model's history too (status unchanged), so `registry history` shows why.
            record_event(
                conn, model_id, ticker, "candidate", "candidate", (report.summary() + forced)[:2000], now
            )
            _decision(conn, report, now)
            ledger(conn, now)

        run_in_transaction(engine, held)
        report.notified = notify.send(report.to_dict(), settings.notify_webhook_url, text=report.summary())
    return report
