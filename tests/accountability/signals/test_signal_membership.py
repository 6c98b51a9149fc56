"""The signal report reads the dated universe: a ticker is in a book and in the benchmark only on the
evenings it was a member; its rows stay in the record; the notes say the rule and which evenings the
gate's folds had already seen."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from signals_helpers import seed_market

from ldtm_core.accountability.signals.rows import load_rows
from ldtm_core.accountability.signals.signals import signal_report
from ldtm_core.data.membership import NO_HISTORY, Span, import_membership

TICKERS = ["AAPL", "MSFT", "NVDA", "TSLA"]
LEFT = dt.date(2023, 3, 15)  # TSLA's last evening as a member


@pytest.fixture
def market(engine):
    seed_market(engine, TICKERS, "2023-01-03", "2023-05-31", skill=0.3, noise=0.01, seed=5)
    return engine


@pytest.mark.parametrize("rule", ["next_close", "same_close"])
def test_a_ticker_is_held_and_benchmarked_only_while_a_member(market, rule):
    engine = market
    before = signal_report(engine, execution=rule)
    assert f"Universe: {NO_HISTORY}." in before.notes
    spans = [Span(t, dt.date(2020, 1, 2)) for t in TICKERS[:3]] + [Span("TSLA", dt.date(2020, 1, 2), LEFT)]
    import_membership(engine, spans, "test history")
    after = signal_report(engine, execution=rule)
    w = after.portfolios["long_short"].weights
    late = [d for d in w.index if d > LEFT]
    assert (
        late
        and (w.loc[late, "TSLA"] == 0).all()
        and (w.loc[[d for d in w.index if d <= LEFT], "TSLA"] != 0).any()
    )
    # The rows stay in the record; the notes count those left out of the books.
    rows = load_rows(engine)
    assert (
        rows.hidden_non_member == len(rows.dropped[rows.dropped["reason"].str.startswith("not a member")]) > 0
    )
    assert any("not a member left out of the books" in n for n in after.notes)
    assert any(n.startswith("Universe: members as of each evening") for n in after.notes)
    # The benchmark after TSLA left is the three members' mean: it changed where TSLA moved differently.
    b0, b1 = before.benchmark.reindex(late), after.benchmark.reindex(late)
    assert np.isfinite(b1).all() and not np.allclose(b0.to_numpy(), b1.to_numpy())
    early = [d for d in w.index if d < LEFT - dt.timedelta(days=7)]
    pd.testing.assert_series_equal(before.benchmark.reindex(early), after.benchmark.reindex(early))


def test_the_notes_say_the_evenings_stand_outside_any_judged_fold(market):
    report = signal_report(market)
    assert any(n.startswith("Folds: out of fold: none") for n in report.notes), report.notes
