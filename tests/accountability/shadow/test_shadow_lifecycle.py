"""A shadow cannot hold a ticker forever, and its bar is fixed when it starts (issue 28 item 8): a shadow
whose checkpoint no longer loads ends, retired with the reason, and the next candidate can enter; one
that misses its evenings ends at its timeout; changing LDTM_SHADOW_SESSIONS mid-shadow changes nothing;
a rollback of the champion it is compared with ends it instead of re-pointing the comparison."""

from __future__ import annotations

import datetime as dt

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, update

from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.accountability.shadow import shadow
from ldtm_core.learning import registry
from ldtm_core.schema import gate_decisions, model_registry

EVENINGS = [dt.date(2024, 6, d) for d in (17, 18, 20, 21, 24, 25)]  # 19 June: Juneteenth


@pytest.fixture
def s(tmp_path, db_url):
    return make_settings(tmp_path, db_url, shadow_sessions=6)


@pytest.fixture
def champion(engine, s):
    ingest(engine, ["AAPL"])
    mid = make_model(engine, s, "AAPL", seed=0)
    registry.promote(engine, mid, "first deployment", s)
    return mid


def run_evenings(engine, settings, evenings, fill=True):
    for d in evenings:
        predict(engine, settings, run_date=d)
    if fill:
        fillback(engine)


def test_a_shadow_whose_checkpoint_no_longer_loads_ends_and_frees_the_ticker(engine, s, champion):
    sid = make_model(engine, s, "AAPL", seed=1)
    shadow.promote_or_shadow(engine, sid, "gate passed (test)", s)
    run_evenings(engine, s, EVENINGS[:2])
    with engine.begin() as conn:  # the shadow's checkpoint is gone: every nightly skips it
        conn.execute(
            update(model_registry).where(model_registry.c.id == sid).values(checkpoint_path="/gone.pt")
        )
    result = predict(engine, s, run_date=EVENINGS[2])
    assert "AAPL" in result.shadow_skipped and result.tickers_predicted == ["AAPL"]

    [out] = shadow.conclude_all(engine, s)
    assert registry.get_model(engine, sid).status == "retired"
    assert registry.active_model(engine, "AAPL").id == champion  # the champion stays
    reason = registry.history(engine, "AAPL")[-1].reason
    assert "checkpoint no longer loads" in reason and "/gone.pt" in reason
    with engine.connect() as conn:
        assert (
            conn.execute(select(gate_decisions.c.passed).where(gate_decisions.c.model_id == sid)).scalar_one()
            is False
        )
    # The ticker is free: the next gate-passed candidate enters shadow instead of waiting behind it.
    nxt = make_model(engine, s, "AAPL", seed=2)
    assert shadow.promote_or_shadow(engine, nxt, "gate passed (test)", s).shadow


def test_a_shadow_that_misses_its_evenings_ends_at_its_timeout(engine, s, champion):
    sid = make_model(engine, s, "AAPL", seed=1)
    shadow.start_shadow(engine, sid, "gate passed (test)", shadow.ShadowDesign(6, max_evenings=3))
    run_evenings(engine, s, EVENINGS[:2], fill=False)  # published, never filled: no paired evening
    assert shadow.conclude(engine, s, "AAPL").comparison.decision == "pending"
    run_evenings(engine, s, EVENINGS[2:3], fill=False)
    out = shadow.conclude(engine, s, "AAPL")
    assert out.comparison.decision == "ended" and "timed out" in out.comparison.ended
    assert "0 of 6 paired evenings after 3 published evenings" in out.comparison.ended
    assert registry.get_model(engine, sid).status == "retired"
    assert registry.active_model(engine, "AAPL").id == champion


def test_the_evenings_a_shadow_needs_are_fixed_when_it_starts(engine, s, champion, tmp_path, db_url):
    twin = make_model(engine, s, "AAPL", seed=0)  # same weights: never worse
    shadow.promote_or_shadow(engine, twin, "gate passed (test)", s)  # started with 6 evenings
    run_evenings(engine, s, EVENINGS[:3])
    # The operator lowers the setting mid-shadow (0 or any other): the running shadow keeps its 6.
    for later in (make_settings(tmp_path, db_url), make_settings(tmp_path, db_url, shadow_sessions=2)):
        out = shadow.conclude(engine, later, "AAPL")
        assert out.comparison.decision == "pending" and out.comparison.required == 6
        assert registry.get_model(engine, twin).status == "shadow"
    run_evenings(engine, s, EVENINGS[3:])
    out = shadow.conclude(engine, make_settings(tmp_path, db_url), "AAPL")
    assert out.comparison.decision == "promote" and out.comparison.n == 6
    assert registry.active_model(engine, "AAPL").id == twin


def test_a_rollback_during_a_shadow_ends_it_rather_than_re_pointing_it(engine, s, champion):
    second = make_model(engine, s, "AAPL", seed=3)
    registry.promote(engine, second, "a later champion", s)
    sid = make_model(engine, s, "AAPL", seed=1)
    shadow.promote_or_shadow(engine, sid, "gate passed (test)", s)  # beside `second`
    run_evenings(engine, s, EVENINGS[:2])
    registry.rollback(engine, "AAPL", "bad week")  # `champion` serves again
    run_evenings(engine, s, EVENINGS[2:])
    cmp = shadow.comparison(engine, s, "AAPL")
    # Only the evenings of the champion it started beside count; the comparison says it ends.
    assert cmp.n == 2 and cmp.decision == "ended"
    assert f"champion model {second}" in cmp.ended and "stopped serving" in cmp.ended
    [out] = shadow.conclude_all(engine, s)
    assert out.comparison.decision == "ended" and registry.get_model(engine, sid).status == "retired"
    assert registry.active_model(engine, "AAPL").id == champion
    assert "stopped serving" in registry.history(engine, "AAPL")[-1].reason


def test_a_shadow_the_previous_release_started_keeps_the_bar_it_started_with(
    engine, s, champion, tmp_path, db_url
):
    # Issue 38 D5: a shadow started before revision 0027 (no stored design) needing 6 evenings was
    # concluded on today's settings after the upgrade: with LDTM_SHADOW_SESSIONS unset, "needs 1", and
    # promoted on fewer evenings than it started with. Its entry event says how many it needs.
    from sqlalchemy import delete

    from ldtm_core.schema import registry_events, shadow_designs

    twin = make_model(engine, s, "AAPL", seed=0)
    shadow.promote_or_shadow(engine, twin, "gate passed (test)", s)
    with engine.begin() as conn:  # as the previous release left it: no design row, its own event text
        conn.execute(delete(shadow_designs).where(shadow_designs.c.model_id == twin))
        conn.execute(
            update(registry_events)
            .where(registry_events.c.model_id == twin, registry_events.c.to_status == "shadow")
            .values(
                reason=f"gate passed (test); in shadow beside champion model {champion} (v1.2024-01-02) for 6 "
                "filled evenings before the live comparison"
            )
        )
    run_evenings(engine, s, EVENINGS[:4])
    out = shadow.conclude(engine, make_settings(tmp_path, db_url), "AAPL")  # LDTM_SHADOW_SESSIONS unset
    assert out.comparison.decision == "pending" and out.comparison.required == 6
    assert registry.get_model(engine, twin).status == "shadow"
