"""Tickers with no production model, and why: the board names them instead of leaving them out.

A ticker whose candidate the gate refused (or judged on too little evidence) has no active model: the
nightly still predicts it with the candidate (ungated rows, out of every production figure), and the
board, the CLI and the dashboard list it here with the latest gate decision's failing criteria.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import Engine

from ldtm_core.accountability.gate.gate import latest_reports
from ldtm_core.accountability.gate.policy import Criterion
from ldtm_core.learning.registry import serving_models


@dataclass(frozen=True)
class NoChampion:
    ticker: str
    model_id: int  # the candidate that predicts it now (ungated)
    decision: str | None  # the latest gate decision on this ticker (None: never judged)
    decided_at: str | None
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def _criterion(c: dict) -> str:
    """A stored failing criterion in the gate's own words (fields beyond the five known ones ignored)."""
    try:
        return Criterion(**{k: c.get(k) for k in ("name", "value", "op", "threshold", "passed")}).describe()
    except (TypeError, ValueError):
        return str(c.get("name", c))


def reason_of(report: dict | None) -> str:
    """Why the gate left the ticker without a champion, from its latest recorded report."""
    if report is None:
        return "no gate decision recorded yet (no backtest judged): `ldtm backtest` then `ldtm gate`"
    decision = report.get("decision") or ("pass" if report.get("passed") else "fail")
    failing = [_criterion(c) for c in report.get("failing") or []]
    comparison = report.get("comparison") or {}
    if failing:
        why = "; ".join(failing)
    elif comparison.get("rule"):
        why = str(comparison["rule"])
    else:
        why = str(report.get("rule") or report.get("summary") or "no failing criterion recorded")
    return f"gate {decision} on {report.get('decided_at', '?')} (model {report.get('model_id')}): {why}"


def without_champion(engine: Engine) -> list[NoChampion]:
    """Every ticker served by a candidate (no active model), with the reason, sorted by ticker."""
    serving = {t: rec for t, rec in serving_models(engine).items() if rec.status != "active"}
    if not serving:
        return []
    reports = latest_reports(engine, sorted(serving))
    out = []
    for t in sorted(serving):
        rep = reports.get(t)
        out.append(
            NoChampion(
                ticker=t,
                model_id=serving[t].id,
                decision=rep.get("decision") if rep else None,
                decided_at=rep.get("decided_at") if rep else None,
                reason=reason_of(rep),
            )
        )
    return out
