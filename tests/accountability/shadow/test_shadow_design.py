"""The shadow's stated power is what its decision delivers (issue 27): the exact binomial power of the
McNemar test against a simulation of live evenings through `shadow.compare` (equal models, a 55/45 and a
60/40 difference), its false-retire rate for equal models at most alpha with both tests, and the design
arithmetic against scipy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom, binomtest

from ldtm_core import shadow_power
from ldtm_core.accountability.shadow import design as shadow_design
from ldtm_core.accountability.shadow import shadow

REPS = 600


def _retire_rate(n: int, pc: float, ps: float, rng, same_errors: bool = True) -> float:
    """Share of simulated shadows `shadow.compare` retires: n evenings, independent hits at pc / ps."""
    retired = 0
    dates = pd.date_range("2024-01-01", periods=n).date
    for _ in range(REPS):
        champ_err = rng.exponential(1.0, n)
        pairs = pd.DataFrame(
            {
                "run_date": dates,
                "champion_correct": rng.random(n) < pc,
                "shadow_correct": rng.random(n) < ps,
                "champion_nd_err": champ_err,
                # same_errors: only the direction test can retire (what the stated power is about)
                "shadow_nd_err": champ_err if same_errors else rng.exponential(1.0, n),
                "champion_nm_err": np.nan,
                "shadow_nm_err": np.nan,
                "champion_om_err": np.nan,
                "shadow_om_err": np.nan,
            }
        )
        cmp = shadow.compare(
            pairs, n, ticker="X", shadow_model_id=2, champion_model_id=1, champion_version="v"
        )
        retired += cmp.decision == "retire"
    return retired / REPS


@pytest.mark.parametrize(("pc", "ps"), [(0.5, 0.5), (0.55, 0.45), (0.60, 0.40)])
def test_stated_power_matches_a_simulation_through_compare(pc, ps):
    n = 107  # the default design: the fewest evenings with power 0.8 at a 20-point drop
    assert shadow_power.sessions_for_power(20, 0.8) == n
    stated = shadow_power.exact_power(n, pc, ps)
    simulated = _retire_rate(n, pc, ps, np.random.default_rng(int(pc * 100)))
    se = math.sqrt(max(stated * (1 - stated), 0.01) / REPS)
    assert abs(simulated - stated) < 4 * se, (pc, ps, stated, simulated)
    if pc == ps:
        assert stated <= shadow_power.ALPHA / shadow_power.TESTS  # the direction test's exact size
    elif pc == 0.60:
        assert stated >= 0.8


def test_equal_models_are_retired_at_most_alpha_with_both_tests():
    rate = _retire_rate(60, 0.52, 0.52, np.random.default_rng(7), same_errors=False)
    assert rate <= shadow_power.ALPHA + 4 * math.sqrt(0.05 * 0.95 / REPS)


def test_exact_power_is_the_binomial_sum_scipy_gives():
    n, pc, ps, alpha = 30, 0.6, 0.4, 0.025
    r, q = pc * (1 - ps) + ps * (1 - pc), pc * (1 - ps) / (pc * (1 - ps) + ps * (1 - pc))
    total = 0.0
    for d in range(n + 1):  # brute force: every discordant count and win count, scipy's exact p
        for x in range(d + 1):
            if d and binomtest(x, d, 0.5, alternative="greater").pvalue <= alpha:
                total += binom.pmf(d, n, r) * binom.pmf(x, d, q)
    assert shadow_power.exact_power(n, pc, ps, alpha) == pytest.approx(total, abs=1e-12)
    # 5 evenings can never reach p <= 0.025 (0.5**5 = 0.031): power 0 whatever the drop.
    assert shadow_power.exact_power(5, 1.0, 0.0) == 0.0
    assert shadow_power.exact_power(6, 1.0, 0.0) == pytest.approx(1.0)


def test_the_design_says_what_it_detects_and_refuses_what_it_cannot():
    design = shadow_design.ShadowDesign(107)
    text = design.describe()
    assert "a 5-point drop (52.5 % vs 47.5 %) with probability" in text
    assert f"a 20-point drop (60 % vs 40 %) with probability {design.detects()[20.0]:.2f}" in text
    assert design.max_evenings == 2 * 107 + 10
    why = shadow_power.check_design(20, 20, 0.8)
    assert why.startswith("20 shadow evenings detect a 20-point drop") and "at least 107" in why
    assert shadow_power.check_design(107, 20, 0.8) is None
    assert shadow_power.check_design(0, 20, 0.8) is None  # no shadow: nothing to size


def test_correlated_models_disagree_less_and_the_paired_test_gains_power():
    independent = shadow_power.exact_power(107, 0.6, 0.4)
    # independent hits disagree on 52 % of evenings; stated explicitly, the same figure
    assert shadow_power.exact_power(107, 0.6, 0.4, discordant=0.52) == pytest.approx(independent)
    # The same 5-point gap on 20 % discordant evenings (vs ~50 % for independent hits): more one-sided,
    # more power; the independent figure the design states is the conservative one.
    assert shadow_power.exact_power(107, 0.55, 0.50, discordant=0.2) > shadow_power.exact_power(
        107, 0.55, 0.50
    )
    with pytest.raises(ValueError, match="discordant share"):
        shadow_power.exact_power(50, 0.9, 0.1, discordant=0.2)
