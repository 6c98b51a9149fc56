"""A gate decision as reported: the figures it judged, the criteria, the paired
evidence and the trials ledger's count, in words (`summary`), as Markdown and as the JSON that
`gate_decisions.report_json`, the webhook and the dashboard carry. The gate itself is `gate.py`."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

from ldtm_core.accountability.alerts import notify
from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate import markdown as gate_markdown
from ldtm_core.accountability.gate.champion_challenger import Comparison
from ldtm_core.accountability.gate.policy import UNIVERSE_POLICY, Criterion
from ldtm_core.learning.registry import PromoteResult
from ldtm_core.scoring import baselines
from ldtm_core.scoring.skill import SkillTest

HELD = "held by shadow"  # passed, but a running shadow holds the ticker: the candidate waits


@dataclass
class GateReport:
    ticker: str
    model_id: int
    backtest_id: str
    folds: int
    n: int
    direction_accuracy: float
    always_up_accuracy: float
    mean_abs_pct_error: float
    leakage_rows: int
    # "pass", "fail", "insufficient evidence", or "held by shadow" (passed, but a running shadow holds it)
    decision: str = "fail"
    policy: str = "evidence"
    skill: SkillTest | None = None  # None: a fold predates the discordant counts (revision 0013)
    data_start: dt.date | None = None  # the price range the backtest read
    data_end: dt.date | None = None
    # always-up, persistence, trailing majority on the same rows with their paired tests (None: unknown)
    baselines: dict = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)
    # The paired evidence vs the champion (evidence policy, once the absolute bar is met); None: not run
    comparison: Comparison | None = None
    passed: bool = False
    promoted: PromoteResult | None = None
    notified: notify.NotifyResult | None = None
    trials: gate_ledger.Trials | None = None  # the trials ledger's count (evidence policy)
    recipe: str = ""  # the candidate's recipe (learning.recipes): lstm, ridge, lightgbm, ...

    @property
    def failing(self) -> list[Criterion]:
        return [c for c in self.criteria if not c.passed]

    @property
    def rule(self) -> str:
        """The decision rule, in words, for every report."""
        # The rule as it reads before any figure: "each must be met", never a claim that they were.
        if self.policy == "seed":
            return "seed policy: the absolute criteria below, each must be met"
        if self.policy == UNIVERSE_POLICY:
            return (
                "universe policy (a global recipe): the universe verdict decides for every member ticker, "
                "date-clustered over the universe against the champions or, on a first deployment, against "
                "every baseline; no leakage; this ticker's own figures are its evidence beside it"
            )
        head = (
            "evidence policy: enough test rows in all and in every fold (else insufficient evidence, the "
            "champion stays), then the seed's absolute criteria (each must be met)"
        )
        if self.comparison is None:
            return head + ", then the paired comparison with the champion (not reached)"
        return f"{head}, then {self.comparison.evidence}: {self.comparison.rule}"

    @property
    def evidence(self) -> str:
        """What the decision rests on, in words."""
        if self.policy == "seed":
            return "absolute criteria (seed policy)"
        if self.comparison is None:
            return "own backtest (minimum evidence, absolute criteria)"
        return self.comparison.evidence

    def markdown(self) -> str:
        return gate_markdown.markdown(self)

    def baseline_lines(self) -> list[str]:
        """Each baseline beside the model on the same rows, 'beats' only with its exact test and p."""
        out = []
        for name in baselines.BASELINES:
            b = self.baselines.get(name)
            label = baselines.LABELS[name]
            out.append(
                f"model {b.verdict()}" if b else f"{label}: unknown (backtest predates it; run it again)"
            )
        return out

    def summary(self) -> str:
        word = {
            "pass": "PASSED",
            "insufficient evidence": "INSUFFICIENT EVIDENCE",
            HELD: "HELD",
        }.get(self.decision, "FAILED")
        recipe = f"recipe {self.recipe}, " if self.recipe else ""
        head = f"gate {word} for {self.ticker} model {self.model_id} ({recipe}{self.policy} policy)"
        p = self.promoted
        if self.decision == HELD and p is not None:
            head += (
                f": passed, but not promoted: shadow model {p.held_by_shadow} is still in its live evenings "
                "and this candidate waits as a candidate"
            )
        elif p is not None and p.shadow:
            champion = f" (model {self.champion_id})" if self.champion_id is not None else ""
            head += f": passed, in shadow beside the champion{champion}"
        base = (
            f"next-day direction accuracy {self.direction_accuracy * 100:.2f}% vs always-up "
            f"{self.always_up_accuracy * 100:.2f}% on the same {self.n} rows over {self.folds} folds; "
            + (self.skill.describe() if self.skill else "skill test unknown (backtest predates it)")
            + "".join(f"; {line}" for line in self.baseline_lines()[1:])
            + (f"; {self.comparison.describe()}" if self.comparison else "")
            + (f"; {self.trials.describe()}" if self.trials else "")
            + f"; rule: {self.rule}"
        )
        if self.passed:
            return f"{head}: {base}"
        return f"{head}: {base}; failing: " + "; ".join(c.describe() for c in self.failing)

    @property
    def champion_id(self) -> int | None:
        return self.comparison.champion_model_id if self.comparison else None

    def to_dict(self) -> dict:
        return {
            "event": "ldtm.gate",
            "trials": self.trials.to_dict() if self.trials else None,
            "ticker": self.ticker,
            "model_id": self.model_id,
            "recipe": self.recipe,
            "backtest_id": self.backtest_id,
            "passed": self.passed,
            "decision": self.decision,
            "policy": self.policy,
            "folds": self.folds,
            "n": self.n,
            "direction_accuracy": self.direction_accuracy,
            "always_up_accuracy": self.always_up_accuracy,
            "mean_abs_pct_error": self.mean_abs_pct_error,
            "leakage_rows": self.leakage_rows,
            "skill_model_only": self.skill.model_only if self.skill else None,
            "skill_up_only": self.skill.up_only if self.skill else None,
            "skill_p_value": self.skill.p_value if self.skill else None,
            "rule": self.rule,
            "evidence": self.evidence,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "baselines": {
                name: None
                if (b := self.baselines.get(name)) is None
                else {
                    "accuracy": b.accuracy,
                    "hits": b.hits,
                    "model_only": b.model_only,
                    "baseline_only": b.base_only,
                    "p_value": b.p_value,
                }
                for name in baselines.BASELINES
            },
            "data_start": str(self.data_start) if self.data_start else None,
            "data_end": str(self.data_end) if self.data_end else None,
            "criteria": [asdict(c) for c in self.criteria],
            "failing": [asdict(c) for c in self.failing],
            "summary": self.summary(),
            "markdown": self.markdown(),
        }
