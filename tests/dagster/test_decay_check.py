"""`leaderboard_decay` (issue 21): WARN naming the decaying ticker on a planted decay, each alarm posted to
the webhook once, and a pass where the active models hold what they promised."""

from __future__ import annotations

import numpy as np
from accountability_helpers import make_settings
from dagster import AssetCheckKey, AssetKey, materialize
from decay_helpers import PLANTED_PROMISE, planted_model, planted_record
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.db import get_engine
from ldtm_dagster import assets, checks

KEY = AssetCheckKey(AssetKey("leaderboard"), "leaderboard_decay")


def _run(instance, tmp_path, url, universe):
    result = materialize(
        [assets.leaderboard, checks.leaderboard_decay],
        instance=instance,
        resources=tiny_resources(tmp_path / "home", url, universe=universe),
    )
    assert result.success  # a warning never fails the nightly
    [check] = result.get_asset_check_evaluations()
    assert check.asset_check_key == KEY
    return check


def test_decay_warns_names_the_ticker_posts_once_and_passes_when_stable(
    dagster_instance, sqlite_url, tmp_path, webhook
):
    engine = get_engine(sqlite_url)
    settings = make_settings(tmp_path, sqlite_url)
    decaying = planted_model(engine, settings, "AAPL", seed=0)
    stable = planted_model(engine, settings, "NVDA", seed=1)
    planted_record(engine, "AAPL", decaying, n=400, decay_at=200, seed=1)
    planted_record(engine, "NVDA", stable, n=400, seed=2)

    check = _run(dagster_instance, tmp_path, sqlite_url, "AAPL,NVDA")
    assert not check.passed and check.severity.value == "WARN"
    assert check.metadata["decaying"].value == ["AAPL"] and check.metadata["checked"].value == 2
    rows = {r.data["ticker"]: r.data for r in check.metadata["table"].value.records}
    assert rows["AAPL"]["decaying"] and not rows["NVDA"]["decaying"]
    assert rows["AAPL"]["live_n"] > 200 and abs(rows["AAPL"]["backtest_accuracy"] - 0.60) < 1e-9
    # The chart's promise: the backtest's figure shrunk for the gate's selection, shown beside it.
    assert abs(rows["AAPL"]["promised_accuracy"] - PLANTED_PROMISE.promised) < 1e-4  # as tabled
    assert rows["AAPL"]["signals"] >= 1 and rows["AAPL"]["alarm_since"] == rows["AAPL"]["last_signal"]
    assert rows["AAPL"]["threshold"] > rows["AAPL"]["cusum"] >= 0  # restarted at 0 after the signal
    assert {"psi_max", "psi_feature", "live_accuracy", "alarm_since"} <= set(rows["AAPL"])
    assert "AAPL" in check.description and "NVDA" not in check.description
    assert [p["decaying"] for p in webhook] == [["AAPL"]] and webhook[0]["event"] == "ldtm.decay"

    # The next night, the same alarm: still a warning, not posted again.
    again = _run(dagster_instance, tmp_path, sqlite_url, "AAPL,NVDA")
    assert not again.passed and again.metadata["notified"].value == []
    assert len(webhook) == 1

    calm = _run(dagster_instance, tmp_path, sqlite_url, "NVDA")
    assert calm.passed and calm.metadata["decaying"].value == []


def _two_chart_episode():
    """A record whose vs-always-up chart signals on evening i and whose accuracy chart signals on j,
    i < j < i + hold: one unbroken WARN stretch from i, in which the first chart leaves its hold on
    evening i + hold while the second still holds it. Returns (hits, ups, i, j)."""
    from decay_helpers import evenings

    from ldtm_core.accountability.decay.decay import DecaySettings, charts_for

    promise = PLANTED_PROMISE  # what the reader makes of the planted model's gate backtest
    settings = DecaySettings()
    for seed in range(50):
        rng = np.random.default_rng(seed)
        hits, ups = list(rng.random(200) < 0.6), list(rng.random(200) < 0.52)

        def signals(name, hits=hits, ups=ups):
            charts = {c.name: c for c in charts_for(promise, hits, ups, evenings(len(hits)), settings)}
            return charts[name].signals if name in charts else 0

        if signals("vs_always_up") or signals("accuracy"):
            continue
        while not signals("vs_always_up"):  # discordant losses: both charts climb
            hits.append(False)
            ups.append(True)
        i = len(hits) - 1
        if signals("accuracy"):
            continue  # the accuracy chart signalled first or with it: not the case this test needs
        while not signals("accuracy"):  # concordant misses: only the accuracy chart climbs
            hits.append(False)
            ups.append(False)
        j = len(hits) - 1
        if i < j < i + settings.hold:
            break
    else:
        raise AssertionError("no seed gives the two-chart episode")
    hits += [True] * 10  # concordant hits: quiet
    ups += [True] * 10
    return hits, ups, i, j


def test_one_alarm_episode_is_notified_once_whichever_chart_keeps_it_going(
    dagster_instance, sqlite_url, tmp_path, webhook
):
    """Issue 28 item 9: the second chart signalling while the first holds the WARN is the same episode."""
    from decay_helpers import evenings, snapshot_row
    from sqlalchemy import insert

    from ldtm_core.schema import snapshots

    engine = get_engine(sqlite_url)
    settings = make_settings(tmp_path, sqlite_url)
    mid = planted_model(engine, settings, "AAPL", seed=0)
    hits, ups, i, j = _two_chart_episode()
    days = evenings(len(hits))
    rows = [snapshot_row("AAPL", mid, d, h, u) for d, h, u in zip(days, hits, ups, strict=True)]

    def publish(upto: int) -> None:
        with engine.begin() as conn:
            done = conn.execute(snapshots.select().where(snapshots.c.ticker == "AAPL")).all()
            conn.execute(insert(snapshots), rows[len(done) : upto + 1])

    publish(j)  # both charts have signalled: WARN since evening i
    first = _run(dagster_instance, tmp_path, sqlite_url, "AAPL")
    assert not first.passed and len(webhook) == 1
    publish(i + 5)  # the first chart's hold is over, the second's is not: still the same episode
    second = _run(dagster_instance, tmp_path, sqlite_url, "AAPL")
    assert not second.passed and second.metadata["notified"].value == []
    assert len(webhook) == 1
    assert first.metadata["alarm_keys"].value == second.metadata["alarm_keys"].value == [f"AAPL/{days[i]}"]
