"""Samples: windows, per-window normalisation, targets; properties checked with hypothesis."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from calendar_oracle import next_monday_session, next_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldtm_core.data.calendar import sessions_after, sessions_between
from ldtm_core.data.features import CLOSE_INDEX, REFERENCE_FEATURES, WARMUP_ROWS, compute_features
from ldtm_core.data.samples import build_samples, denormalise, normalise_targets
from ldtm_core.data.synthetic_market import generate
from ldtm_core.horizons import HORIZONS

SESSIONS = sessions_between("2015-01-01", "2016-12-31")
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COLUMNS = ["open", "high", "low", "close", "volume"]


def make_prices(closes, spreads, volumes) -> pd.DataFrame:
    c = np.asarray(closes, dtype=float)
    s = np.asarray(spreads, dtype=float)
    return pd.DataFrame(
        {
            "date": SESSIONS[: len(c)],
            "open": c * (1 + s / 2),
            "high": c * (1 + s),
            "low": c * (1 - s / 2),
            "close": c,
            "volume": np.asarray(volumes, dtype=np.int64),
        }
    )


@st.composite
def price_frames(draw, min_rows=45, max_rows=75):
    n = draw(st.integers(min_rows, max_rows))
    price = st.floats(1.0, 500.0, allow_nan=False, allow_infinity=False)
    closes = draw(st.lists(price, min_size=n, max_size=n))
    spreads = draw(st.lists(st.floats(0.0, 0.05), min_size=n, max_size=n))
    volumes = draw(st.lists(st.integers(1, 10**9), min_size=n, max_size=n))
    return make_prices(closes, spreads, volumes)


@PROPS
@given(
    px=price_frames(),
    window=st.sampled_from([5, 10, 20]),
    pick=st.floats(0, 1),
    col=st.sampled_from(COLUMNS),
    factor=st.floats(0.2, 5.0),
    data=st.data(),
)
def test_changing_prices_after_t_leaves_sample_t_unchanged(px, window, pick, col, factor, data):
    base = build_samples(px, window)
    if len(base) < 2:
        return
    i = int(pick * (len(base) - 2))  # a sample with at least one later row
    t = pd.Timestamp(base.dates[i]).date()
    later = [j for j, d in enumerate(px["date"]) if d > t]
    rows = data.draw(st.lists(st.sampled_from(later), min_size=1, max_size=len(later), unique=True))
    changed = px.copy()
    changed[col] = changed[col].astype(float)
    changed.loc[rows, col] = changed.loc[rows, col] * factor + (1 if col == "volume" else 0)
    after = build_samples(changed, window)
    assert after.dates[i] == base.dates[i]
    np.testing.assert_array_equal(after.x[: i + 1], base.x[: i + 1])
    np.testing.assert_array_equal(after.close_min[: i + 1], base.close_min[: i + 1])
    np.testing.assert_array_equal(after.close_max[: i + 1], base.close_max[: i + 1])


@PROPS
@given(px=price_frames(), window=st.sampled_from([5, 10, 30]))
def test_normalised_windows_lie_in_unit_interval_and_shapes(px, window):
    s = build_samples(px, window)
    n_feat_rows = len(px) - WARMUP_ROWS
    assert s.x.shape == (max(n_feat_rows - window + 1, 0), window, 11)
    assert s.x.dtype == np.float32 and s.y.shape == (len(s), len(HORIZONS))
    assert not np.isnan(s.x).any()
    assert (s.x >= 0).all() and (s.x <= 1).all()
    if len(s):
        # Each column of each window spans exactly [0, 1] unless it is constant (all zeros).
        lo, hi = s.x.min(axis=1), s.x.max(axis=1)
        assert np.all((lo == 0) & ((hi == 1) | (hi == 0)))


@PROPS
@given(
    y=st.lists(st.floats(0.5, 2000.0), min_size=3, max_size=3),
    lo=st.floats(0.5, 1000.0),
    span=st.one_of(st.just(0.0), st.floats(0.01, 1000.0)),
)
def test_denormalise_inverts_normalise_targets(y, lo, span):
    y = np.array([y])
    close_min, close_max = np.array([lo]), np.array([lo + span])
    back = denormalise(normalise_targets(y, close_min, close_max), close_min, close_max)
    np.testing.assert_allclose(back, y, rtol=1e-12, atol=1e-9)


def test_constant_column_gives_zeros_not_nan():
    n = 60
    closes = 50 + np.sin(np.arange(n))
    px = make_prices(closes, np.full(n, 0.01), np.full(n, 12345))  # constant volume
    s = build_samples(px, 10)
    assert not np.isnan(s.x).any()
    assert (s.x[:, :, 4] == 0).all()  # volume column
    flat = make_prices(np.full(n, 20.0), np.zeros(n), np.full(n, 100))  # nothing moves at all
    f = build_samples(flat, 10)
    assert len(f) > 0 and not np.isnan(f.x).any() and (f.x == 0).all()
    labeled = f.labeled
    assert labeled.any()
    # Flat window: targets are offsets from the window min, still invertible.
    known = f.subset(labeled)
    np.testing.assert_allclose(known.denormalise(known.y), known.target_close)


def test_targets_are_the_closes_of_the_target_dates():
    px = generate(["AAPL"], "2020-01-01", "2021-12-31", seed=4)
    s = build_samples(px, 30)
    close_by_date = dict(zip(px["date"], px["close"], strict=True))
    for i in [0, 100, 300]:
        t = pd.Timestamp(s.dates[i]).date()
        # Each horizon's rule through the calendar's scalar helpers (not the vectorised target_dates).
        expected_dates = [
            sessions_after(t, h.sessions) if h.sessions else next_monday_session(t) for h in HORIZONS
        ]
        assert expected_dates[0] == next_session(t)
        assert [pd.Timestamp(d).date() for d in s.target_dates[i]] == expected_dates
        np.testing.assert_allclose(s.target_close[i], [close_by_date[d] for d in expected_dates])
        np.testing.assert_allclose(s.subset([i]).denormalise(s.y[i : i + 1])[0], s.target_close[i], rtol=1e-6)
        window_close = compute_features(px)["close"].to_numpy()[i : i + 30]
        assert s.close_min[i] == window_close.min() and s.close_max[i] == window_close.max()
        assert s.close[i] == window_close[-1] == close_by_date[t]
        span = s.close_max[i] - s.close_min[i]
        assert s.x[i, -1, CLOSE_INDEX] == pytest.approx((s.close[i] - s.close_min[i]) / span, abs=1e-6)
    # The newest samples have no target yet: NaN, excluded from `labeled`.
    assert np.isnan(s.y[-1]).all() and not s.labeled[-1]
    assert s.labeled[:-21].all()


@pytest.mark.parametrize("window", [10, 30, 60])
def test_window_length_is_configurable(window):
    px = generate(["NVDA"], "2022-01-01", "2023-06-30", seed=1)
    s = build_samples(px, window)
    assert s.x.shape == (len(px) - WARMUP_ROWS - window + 1, window, len(REFERENCE_FEATURES))
    assert s.dates[0] == np.datetime64(px["date"].iloc[WARMUP_ROWS + window - 1], "D")


def test_denormalise_refuses_predictions_for_a_different_number_of_rows():
    days = sessions_between("2024-01-02", "2024-06-28")
    close = np.linspace(10.0, 20.0, len(days))
    prices = pd.DataFrame(
        {
            "date": days,
            "open": close,
            "high": close * 1.01,
            "low": close * 0.99,
            "close": close,
            "volume": 1000,
        }
    )
    s = build_samples(prices, window=10)
    assert s.denormalise(s.y).shape == s.y.shape
    with pytest.raises(ValueError, match="subset"):
        s.denormalise(s.y[:-1])
