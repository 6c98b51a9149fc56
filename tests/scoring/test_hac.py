"""The one overlap-aware test (scoring.hac): its variance against the cosine formula, its exact Student t
law on white noise, the floor below 10 independent target periods, and its size on overlapping,
persistent records through the figures that use it (signals IC, the gate's Diebold-Mariano) beside the
Newey-West rule main used (lag h - 1, normal critical values), which over-rejects there."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from ldtm_core.accountability.signals import ic as signal_ic
from ldtm_core.scoring import hac
from ldtm_core.scoring.paired import dm_error_test, dm_test


def test_ewc_variance_is_the_mean_square_of_the_cosine_projections():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(97).cumsum() * 0.1
    n, nu = len(y), 7
    t = np.arange(1, n + 1)
    u = y - y.mean()
    proj = [math.sqrt(2 / n) * float(np.cos(math.pi * j * (t - 0.5) / n) @ u) for j in range(1, nu + 1)]
    assert hac.ewc_long_run_variance(y, nu) == pytest.approx(np.mean(np.square(proj)), rel=1e-12)


def test_on_white_noise_the_statistic_is_student_t_with_its_degrees_of_freedom():
    """Gaussian white noise: the cosine projections are independent of the mean, so t ~ t(nu) exactly."""
    rng = np.random.default_rng(1)
    stat = [hac.mean_test(rng.standard_normal(60)).t for _ in range(3000)]
    nu = hac.ewc_dof(60, 1)
    assert stats.kstest(stat, stats.t(nu).cdf).pvalue > 0.01
    p = [hac.mean_test(rng.standard_normal(60)).p_two_sided for _ in range(2000)]
    assert 0.035 <= np.mean(np.array(p) <= 0.05) <= 0.065


def test_the_degrees_of_freedom_follow_llsw_and_the_overlap():
    assert hac.ewc_dof(750, 1) == int(0.3 * 750 ** (2 / 3)) == 24
    assert hac.ewc_dof(750, 21) == 750 // 42 == 17  # the cosines stay below the overlap's frequencies
    assert hac.ewc_dof(10, 1) == hac.MIN_DOF
    # A persistent series counts as fewer independent values: AR(1) 0.9 spans (1 + 0.9) / (1 - 0.9) = 19.
    rng = np.random.default_rng(5)
    ar = np.zeros(3000)
    for t in range(1, len(ar)):
        ar[t] = 0.9 * ar[t - 1] + rng.standard_normal()
    assert hac.persistence_span(ar, 1) == pytest.approx(19, rel=0.15)
    assert hac.persistence_span(rng.standard_normal(3000), 5) == 5.0  # the overlap when it is larger
    assert hac.mean_test(ar[:760]).dof == int(760 / (2 * hac.persistence_span(ar[:760])))


@pytest.mark.parametrize(("h", "n"), [(1, 9), (5, 49), (21, 209)])
def test_a_record_of_fewer_than_ten_independent_periods_is_not_tested(h, n):
    y = np.random.default_rng(h).standard_normal(n) + 1.0  # a large mean: untested all the same
    short = hac.mean_test(y, h)
    assert short.too_short and math.isnan(short.p_two_sided) and math.isnan(short.t)
    assert f"needs {10 * h}" in short.why_untested()
    assert short.mean == pytest.approx(y.mean())
    enough = hac.mean_test(np.append(y, 1.0), h)
    assert not enough.too_short and enough.p_two_sided < 0.05 and enough.why_untested() == ""
    # The gate's DM says "no evidence" rather than a p-value it cannot stand behind.
    dm = dm_error_test({1: "1d", 5: "monday", 21: "month"}[h], y + 5, np.zeros(n))
    assert dm.too_short and (dm.p_worse, dm.p_better) == (1.0, 1.0) and "too short" in dm.p_text(dm.p_worse)


def test_dm_goes_through_the_helper():
    d = np.random.default_rng(3).standard_normal(300) * 0.1 + 0.02
    t, m = dm_test(d, 5), hac.mean_test(d, 5)
    assert (t.statistic, t.p_greater, t.p_less, t.dof) == (m.t, m.p_greater, m.p_less, m.dof)
    assert t.p_greater + t.p_less == pytest.approx(1.0)


def _persistent_month_ics(rng, evenings: int, names: int = 30, phi: float = 0.9, edge: float = 0.0):
    """Daily ICs of persistent predictions (AR(1) phi per name) against one-month overlapping targets."""
    h = 21
    daily = rng.standard_normal((evenings + h, names))
    real = np.lib.stride_tricks.sliding_window_view(daily[1:], h, axis=0)[:evenings].sum(axis=-1)
    pred = np.empty((evenings, names))
    pred[0] = rng.standard_normal(names)
    for t in range(1, evenings):
        pred[t] = phi * pred[t - 1] + math.sqrt(1 - phi * phi) * rng.standard_normal(names)
    pred = math.sqrt(1 - edge * edge) * pred + edge * daily[1 : evenings + 1]
    days = np.repeat(np.arange(evenings), names)
    tick = np.tile(np.arange(names), evenings)
    rows = pd.DataFrame(
        {
            "run_date": pd.Timestamp("2024-01-01") + pd.to_timedelta(days, "D"),
            "ticker": [f"T{i}" for i in tick],
            "day_code": days,
            "name_code": tick,
            "pred_one_month": pred.ravel(),
            "real_one_month": real.ravel(),
        }
    )
    return signal_ic.ic_series(rows, "one_month")["ic"].to_numpy(float)


def test_month_ic_size_on_persistent_predictions_and_power_on_a_planted_edge():
    """Under no skill, 250 evenings of one-month ICs: main's rule (Newey-West lag 20, normal) rejects
    well above 5 %; the helper stays near it. A planted edge is found most of the time."""
    rng = np.random.default_rng(11)
    reps, old, new = 300, 0, 0
    for _ in range(reps):
        ic = _persistent_month_ics(rng, 250)
        fit = sm.OLS(ic, np.ones(len(ic))).fit(
            cov_type="HAC", cov_kwds={"maxlags": 20, "use_correction": True}
        )
        old += fit.pvalues[0] <= 0.05
        new += hac.mean_test(ic, 21).p_two_sided <= 0.05
    assert old / reps >= 0.09, old / reps  # main's rule over-rejects here
    assert new / reps <= 0.08, new / reps  # 5 % plus two Monte-Carlo standard errors (~1.3 %)
    # Loading 0.5 on the target's first session: a one-month IC of about 0.1 (measured 38 of 40).
    found = sum(
        hac.mean_test(_persistent_month_ics(rng, 250, edge=0.5), 21).p_greater <= 0.05 for _ in range(40)
    )
    assert found >= 30, found


def test_holm_matches_statsmodels_without_its_garbage_collection(monkeypatch):
    """statsmodels' Holm runs gc.collect() on every call: 0.2 s in a process holding torch and Dagster,
    paid on each gate decision and each report row (47 of the null-universe benchmark's 62 s)."""
    import gc

    from statsmodels.stats.multitest import multipletests

    from ldtm_core.scoring.paired import holm

    rng = np.random.default_rng(4)
    cases = [rng.uniform(size=k) for k in (1, 2, 3, 7)] + [np.array([0.01, 0.04, 0.03, 0.5, 0.01])]
    want = [multipletests(p, method="holm")[1] for p in cases]
    monkeypatch.setattr(gc, "collect", lambda *a: pytest.fail("holm called gc.collect"))
    for p, w in zip(cases, want, strict=True):
        assert holm(p) == pytest.approx(list(w), rel=1e-12)
    assert holm([]) == []
