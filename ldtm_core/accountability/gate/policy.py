"""Gate policies and thresholds: what the promotion gate requires, from env, CLI or config.

`seed`: the seed's absolute criteria alone. `evidence` (the default): a minimum of evidence first (test
rows over all folds and in every fold), then the same criteria, then the paired comparison with the
champion (`champion_challenger.py`). The gate itself is `gate.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ldtm_core.config import env_number, env_text
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.scoring.paired import DEFAULT_ERROR_MARGIN
from ldtm_core.scoring.skill import format_p_value

POLICIES = ("evidence", "seed")
# Which decision applies to a candidate: a per-ticker recipe's (the LSTM) is its ticker's gate under one
# of POLICIES; a global recipe's, fitted once for the universe, is one universe verdict applied to its
# member tickers (`universe_decision.decide`), recorded in each ticker's gate report under this name.
UNIVERSE_POLICY = "universe"
# The universe verdict's answers (`universe.py`), read by the gate when it decides (`gate.run_gate`).
BETTER, NOT_SHOWN, INSUFFICIENT = "better", "not shown better", "insufficient evidence"
# Criteria of the minimum evidence: failing one of them makes the decision "insufficient evidence".
EVIDENCE_CRITERIA = ("rows", "fold_rows")
# A one-sided exact test at alpha 0.05 with 80 % power needs ~1716 rows to see a 3-point edge over 50 %
# (docs/reading-the-figures.md); no backtest of a few years reaches that, so the default floor is 100 rows,
# where 80 % power needs a ~12-point edge: below it no plausible edge is distinguishable from a coin.
DEFAULT_MIN_ROWS = 100
# fold_spans' own smallest automatic test block: a fold of fewer rows is a hand-made `--test-sessions`.
DEFAULT_MIN_FOLD_ROWS = 10
# The one-sided significance level of the champion/challenger tests (LDTM_GATE_ALPHA): a challenger must
# beat the champion at p <= alpha, and is refused when the champion (or always-up) beats it at p <= alpha.
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class GateThresholds:
    min_folds: int = 2
    min_direction_accuracy: float = 0.52  # fraction
    max_mean_abs_pct_error: float = 5.0  # percent
    max_leakage_rows: int = 0
    beat_always_up_margin: float | None = None  # fraction; None = not required
    max_p_value: float | None = None  # exact skill test vs always-up; None = not required
    policy: str = "evidence"  # "seed": the absolute criteria only; "evidence": minimum evidence first
    min_rows: int = DEFAULT_MIN_ROWS  # test rows over all folds (evidence policy)
    min_fold_rows: int = DEFAULT_MIN_FOLD_ROWS  # test rows in every fold (evidence policy)
    # Significance of the paired tests vs the champion / stale weights / always-up (evidence policy)
    alpha: float = DEFAULT_ALPHA
    # The |error| tests' practical margin: a share of the champion's mean |error| (scoring.paired)
    error_margin: float = DEFAULT_ERROR_MARGIN

    def validate(self) -> GateThresholds:
        """Refuse thresholds no model could meet (or every model meets) when they come from a user:
        the CLI, the environment, Dagster config. Tests may still build impossible ones directly."""
        checks = [
            (self.min_folds >= 1, f"min folds must be >= 1, not {self.min_folds}"),
            (
                self.policy in POLICIES,
                f"gate policy must be one of {', '.join(POLICIES)}, not {self.policy!r}",
            ),
            (self.min_rows >= 1, f"min rows must be >= 1, not {self.min_rows}"),
            (self.min_fold_rows >= 1, f"min rows per fold must be >= 1, not {self.min_fold_rows}"),
            (0.0 < self.alpha < 1.0, f"gate alpha must be within (0, 1), not {self.alpha}"),
            (
                0.0 <= self.error_margin <= 1.0,
                f"the error margin must be within 0..100 % of the champion's error, not {self.error_margin * 100:g} %",
            ),
            # Above 100 % is allowed: it is how a test or an operator forces a candidate to fail.
            (
                self.min_direction_accuracy >= 0.0,
                f"min direction accuracy must be >= 0 %, not {self.min_direction_accuracy * 100:g} %",
            ),
            (
                self.max_mean_abs_pct_error >= 0,
                f"max mean |pct error| must be >= 0 %, not {self.max_mean_abs_pct_error:g}",
            ),
            (self.max_leakage_rows >= 0, f"max leakage rows must be >= 0, not {self.max_leakage_rows}"),
            (
                self.beat_always_up_margin is None or -1.0 <= self.beat_always_up_margin <= 1.0,
                f"always-up margin must be within -100..100 % points, not {self.beat_always_up_margin}",
            ),
            (
                self.max_p_value is None or 0.0 < self.max_p_value <= 1.0,
                f"max p-value must be within (0, 1], not {self.max_p_value}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(message)
        return self

    @classmethod
    def from_env(cls, **overrides) -> GateThresholds:
        """Thresholds from LDTM_GATE_* (checked by `config`), then `overrides` (already fractions).

        The accuracy and margin settings are percents, like `ldtm gate --min-accuracy 52`; the
        thresholds hold them as fractions.
        """
        env = {
            "min_folds": ("LDTM_GATE_MIN_FOLDS", 1),
            "min_direction_accuracy": ("LDTM_GATE_MIN_ACCURACY", 100),
            "max_mean_abs_pct_error": ("LDTM_GATE_MAX_ERROR_PCT", 1),
            "beat_always_up_margin": ("LDTM_GATE_BEAT_ALWAYS_UP", 100),
            "max_p_value": ("LDTM_GATE_MAX_P_VALUE", 1),
            "min_rows": ("LDTM_GATE_MIN_ROWS", 1),
            "min_fold_rows": ("LDTM_GATE_MIN_FOLD_ROWS", 1),
            "alpha": ("LDTM_GATE_ALPHA", 1),
            "error_margin": ("LDTM_GATE_ERROR_MARGIN_PCT", 100),
        }
        values = {}
        policy = env_text("LDTM_GATE_POLICY", "").strip().lower()
        if policy:
            if policy not in POLICIES:
                raise ConfigError(f"LDTM_GATE_POLICY must be one of {', '.join(POLICIES)}, not {policy!r}")
            values["policy"] = policy
        for name, (var, per_unit) in env.items():
            value = env_number(var)
            if value is not None:
                values[name] = value / per_unit if per_unit != 1 else value
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values).validate()


@dataclass
class Criterion:
    name: str
    value: float | int | str  # 'unknown' for a p-value the backtest did not record
    op: str  # '>=' or '<=' or '>'
    threshold: float | int
    passed: bool

    def describe(self) -> str:
        return (
            f"{self.name} = {_fmt(self.name, self.value)} (needs {self.op} {_fmt(self.name, self.threshold)})"
        )


def _fmt(name: str, v) -> str:
    if name == "skill_p_value" or name.endswith("_p"):
        return format_p_value(v) if isinstance(v, float) else "unknown"
    if isinstance(v, float) and ("accuracy" in name or "margin" in name):
        return f"{v * 100:.2f}%"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)
