"""The exact one-sided test of "the model is right more often than always-up" (ldtm_core.scoring.skill)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from ldtm_core.learning.backtest import skill_test
from ldtm_core.scoring.skill import (
    SkillTest,
    discordant_counts,
    format_p_value,
    pooled,
    sign_test_p_value,
)


@pytest.mark.parametrize(
    ("model_only", "up_only"),
    [(0, 0), (1, 0), (0, 1), (3, 3), (7, 2), (2, 7), (30, 12), (12, 30), (260, 240), (1100, 1000)],
)
def test_p_value_matches_scipy_binomtest_on_the_discordant_rows(model_only, up_only):
    n = model_only + up_only
    expected = 1.0 if n == 0 else binomtest(model_only, n, 0.5, alternative="greater").pvalue
    assert sign_test_p_value(model_only, up_only) == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_hand_values():
    assert sign_test_p_value(2, 0) == 0.25  # both disagreements won: 1/4 by chance
    assert sign_test_p_value(0, 2) == 1.0  # both lost: no evidence at all
    assert sign_test_p_value(5, 5) == pytest.approx(638 / 1024)  # P(X >= 5), X ~ Bin(10, 1/2)
    with pytest.raises(ValueError):
        sign_test_p_value(-1, 3)


def test_counts_ignore_rows_where_model_and_always_up_agree():
    rng = np.random.default_rng(4)
    right = rng.random(500) < 0.55
    up = rng.random(500) < 0.52
    test = discordant_counts(right, up)
    assert test == SkillTest(int((right & ~up).sum()), int((~right & up).sum()))
    # Concordant rows change nothing: appending 100 rows where both are right leaves the test alone.
    more = discordant_counts(np.r_[right, np.ones(100, bool)], np.r_[up, np.ones(100, bool)])
    assert more == test and more.p_value == test.p_value


def test_backtest_skill_uses_the_same_direction_rule_as_its_accuracy():
    close = np.array([100.0, 100.0, 100.0, 100.0, 100.0])
    pred = np.array([101.0, 99.0, 99.0, 101.0, 99.0])
    actual = np.array([102.0, 98.0, 103.0, 97.0, 100.0])  # last: flat, both wrong
    # row 1 both right; row 2 model only; row 3 up only; row 4 both wrong; row 5 both wrong.
    assert skill_test(pred, actual, close) == SkillTest(model_only=1, up_only=1)


def test_pooled_and_format():
    assert pooled([SkillTest(1, 2), SkillTest(3, 4)]) == SkillTest(4, 6)
    assert pooled([SkillTest(1, 2), None]) is None
    assert format_p_value(0.0001) == "< 0.001" and format_p_value(0.25) == "0.250"
    assert format_p_value(None) == "—"
