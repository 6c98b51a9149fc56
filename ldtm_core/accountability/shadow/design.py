"""How many shadow evenings a live comparison needs, from exact binomial power: the design a
shadow stores when it starts (`ShadowDesign`), its timeout, and what it can detect.

The power itself (the exact one-sided McNemar test's, for a stated margin) is `ldtm_core.shadow_power`,
in the base so that the settings can refuse a shadow too short for the power they state.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ldtm_core.shadow_power import ALPHA, TESTS, power_for_margin

DEFAULT_MARGIN_POINTS = 20.0  # 60 % vs 40 %: the drop the default design must catch
DEFAULT_POWER = 0.80
REPORTED_MARGINS = (5.0, 10.0, 20.0)  # points: what the report says the shadow can detect


@dataclass(frozen=True)
class ShadowDesign:
    """A shadow's design, fixed (and stored) when the shadow starts: its evenings, the margin they
    were sized for and the stated power at it, the family alpha, and the timeout."""

    sessions: int
    margin_points: float = DEFAULT_MARGIN_POINTS
    power: float = DEFAULT_POWER  # the power the setting promised at margin_points
    alpha: float = ALPHA
    max_evenings: int = 0  # published evenings after which a shadow short of `sessions` pairs ends

    def __post_init__(self) -> None:
        if not self.max_evenings:
            object.__setattr__(self, "max_evenings", timeout_evenings(self.sessions))

    @property
    def test_alpha(self) -> float:
        return self.alpha / TESTS

    def detects(self, margins=REPORTED_MARGINS) -> dict[float, float]:
        """{margin in points: exact power} of this design."""
        return {m: power_for_margin(self.sessions, m, self.test_alpha) for m in margins}

    def describe(self) -> str:
        parts = ", ".join(
            f"a {m:g}-point drop ({50 + m / 2:g} % vs {50 - m / 2:g} %) with probability {p:.2f}"
            for m, p in self.detects().items()
        )
        return (
            f"{self.sessions} paired evenings detect {parts} (exact McNemar at alpha {self.test_alpha:g}, "
            f"independent hits; equal models are retired at most {self.alpha:g} of the time)"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["detects"] = {f"{m:g}": round(p, 4) for m, p in self.detects().items()}
        return d


def timeout_evenings(sessions: int) -> int:
    """Published evenings a shadow may take to collect its paired evenings: twice its need plus two
    trading weeks (missed evenings and fill lag); past that it ends and the champion stays."""
    return 2 * int(sessions) + 10


def is_finite_probability(x: float) -> bool:
    return math.isfinite(x) and 0 < x < 1
