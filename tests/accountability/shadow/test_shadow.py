"""Shadow evenings (issue 21): a gate-passed challenger predicts beside the champion on live evenings,
both rows chained, filled and scored on the same evenings; the shadow is never published; after N
filled evenings the paired comparison promotes a shadow that is not worse and retires a worse one."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from accountability_helpers import add_backtest, ingest, make_model, make_settings
from scipy.stats import binomtest
from sqlalchemy import select
from typer.testing import CliRunner

from ldtm_core.accountability.board.leaderboard import leaderboard, leaderboard_by_model
from ldtm_core.accountability.board.reads import recent_next_day
from ldtm_core.accountability.board.reports import evening_cohorts, latest_evening, ticker_predictions
from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.accountability.shadow import shadow
from ldtm_core.errors import InputError
from ldtm_core.horizons import ERROR_ONLY
from ldtm_core.learning import registry
from ldtm_core.learning.checkpoints import save_checkpoint
from ldtm_core.learning.model import LDTM, get_profile
from ldtm_core.schema import gate_decisions, snapshots
from ldtm_core.scoring import hac

EVENINGS = [dt.date(2024, 6, d) for d in (17, 18, 20, 21, 24, 25)]  # 19 June: Juneteenth


def crippled_model(engine, settings, ticker: str) -> int:
    """A candidate whose heads add a large constant: every prediction far above the price."""
    cfg = get_profile("demo")
    torch.manual_seed(3)
    model = LDTM(cfg).eval()
    with torch.no_grad():
        for head in model.heads:
            head.net[3].bias.fill_(5.0)
    path = settings.checkpoint_dir / f"{ticker}_crippled.pt"
    sha = save_checkpoint(path, model, cfg, ticker, dt.date(2024, 1, 2), 0.1)
    return registry.register_candidate(
        engine,
        ticker=ticker,
        cfg=cfg,
        profile="demo",
        trained_on_date=dt.date(2024, 1, 2),
        checkpoint_path=str(path),
        checkpoint_sha256=sha,
        val_loss=0.1,
    )


def run_evenings(engine, settings, evenings=EVENINGS):
    results = [predict(engine, settings, run_date=d) for d in evenings]
    fillback(engine)
    return results


@pytest.fixture
def s(tmp_path, db_url):
    return make_settings(tmp_path, db_url, shadow_sessions=5)


@pytest.fixture
def champion(engine, s):
    ingest(engine, ["AAPL"])
    mid = make_model(engine, s, "AAPL", seed=0)
    registry.promote(engine, mid, "first deployment", s)
    return registry.get_model(engine, mid)


def _rows(engine):
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all())


def test_shadow_rows_are_chained_filled_and_never_published(engine, s, champion):
    sid = make_model(engine, s, "AAPL", seed=1)
    started = shadow.promote_or_shadow(engine, sid, "gate passed (test)", s)
    assert started.shadow and registry.get_model(engine, sid).status == "shadow"
    assert registry.active_model(engine, "AAPL").id == champion.id  # the champion keeps serving

    results = run_evenings(engine, s)
    assert results[-1].shadow == {"AAPL": f"cand-{sid}"}
    assert results[-1].tickers_predicted == ["AAPL"] and results[-1].model_versions == {
        "AAPL": champion.version
    }
    assert sum(results[-1].cohort.values()) == 1 and sum(results[-1].cohort_ungated.values()) == 0

    rows = _rows(engine)
    assert len(rows) == 2 * len(EVENINGS)
    for _, day in rows.groupby("run_date"):
        # Per evening: the champion's row first, then the shadow's chained onto it, both filled.
        assert day["model_status"].tolist() == ["active", "shadow"]
        assert day["model_id"].tolist() == [champion.id, sid]
        assert day["next_day_actual"].notna().all() and day["next_day_direction_correct"].notna().all()
        assert day["prev_hash"].iloc[1] == day["row_hash"].iloc[0]
    report = verify(engine)
    assert report.ok, report.problems
    assert report.rows_checked == len(rows)

    # Production figures: the champion's rows only, on every board and report.
    champ = rows[rows["model_status"] == "active"]
    board = leaderboard(engine).set_index("ticker")
    assert board.loc["AAPL", "n"] == len(EVENINGS)
    assert board.loc["AAPL", "hits"] == int(champ["next_day_direction_correct"].astype(bool).sum())
    for flags in ({}, {"include_ungated": True, "include_in_sample": True}):
        assert leaderboard_by_model(engine, **flags)["model_version"].tolist() == [champion.version]
        assert leaderboard(engine, **flags).loc[0, "n"] == len(EVENINGS)
    assert (ticker_predictions(engine, "AAPL")["model_version"] == champion.version).all()
    assert evening_cohorts(engine, include_ungated=True)[["bullish", "neutral", "bearish"]].sum(
        axis=1
    ).tolist() == [1] * len(EVENINGS)
    assert latest_evening(engine)["ungated"] == []
    assert len(recent_next_day(engine, ["AAPL"])) == len(EVENINGS)

    # Side by side: both models on the same evenings, figures from their own rows.
    side = shadow.side_by_side(engine, s).set_index("ticker")
    sh = rows[rows["model_status"] == "shadow"]
    assert side.loc["AAPL", "evenings"] == len(EVENINGS) and side.loc["AAPL", "required"] == 5
    assert side.loc["AAPL", "champion_accuracy"] == pytest.approx(
        champ["next_day_direction_correct"].astype(bool).mean()
    )
    assert side.loc["AAPL", "shadow_accuracy"] == pytest.approx(
        sh["next_day_direction_correct"].astype(bool).mean()
    )
    assert side.loc["AAPL", "shadow_mae"] == pytest.approx(sh["next_day_pct_error"].abs().mean())
    assert side.loc["AAPL", "champion"] == champion.version

    # A rerun of an evening writes nothing, for neither model.
    again = predict(engine, s, run_date=EVENINGS[0])
    assert again.rows_written == 0 and again.rows_existing == 2


def test_compare_matches_scipy_on_the_discordant_evenings():
    rng = np.random.default_rng(4)
    n = 40
    pairs = pd.DataFrame(
        {
            "run_date": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(n)],
            "champion_correct": rng.random(n) < 0.7,
            "shadow_correct": rng.random(n) < 0.4,
            "champion_nd_err": rng.random(n),
            "shadow_nd_err": rng.random(n) + 0.3,
            **{f"{side}_{h.alias}_err": np.nan for h in ERROR_ONLY for side in ("champion", "shadow")},
        }
    )
    cmp = shadow.compare(pairs, 30, ticker="X", shadow_model_id=2, champion_model_id=1, champion_version="v1")
    c, sh = pairs["champion_correct"], pairs["shadow_correct"]
    assert cmp.champion_only == int((c & ~sh).sum()) and cmp.shadow_only == int((sh & ~c).sum())
    expected = binomtest(cmp.champion_only, cmp.champion_only + cmp.shadow_only, 0.5, alternative="greater")
    assert cmp.direction_p == pytest.approx(expected.pvalue)
    # The next-day |error| test is the gate's Diebold-Mariano, through the overlap-aware helper.
    d = (pairs["shadow_nd_err"] - pairs["champion_nd_err"]).to_numpy()
    # Worse beyond the practical margin: 1 % of the champion's mean |error| (scoring.paired).
    margin = 0.01 * pairs["champion_nd_err"].mean()
    assert cmp.error_p == pytest.approx(hac.mean_test(d - margin, 1).p_greater) and cmp.error_p < 1e-3
    assert cmp.decision == "retire"
    # Too few evenings: no decision, whatever the figures.
    assert (
        shadow.compare(
            pairs, n + 1, ticker="X", shadow_model_id=2, champion_model_id=1, champion_version="v1"
        ).decision
        == "pending"
    )
    # The same predictions on both sides: nothing discordant, p = 1, promoted.
    same = pairs.assign(shadow_correct=c, shadow_nd_err=pairs["champion_nd_err"])
    tie = shadow.compare(same, 30, ticker="X", shadow_model_id=2, champion_model_id=1, champion_version="v1")
    assert (tie.direction_p, tie.error_p, tie.decision) == (1.0, 1.0, "promote")


def test_conclusion_promotes_a_shadow_that_is_not_worse(engine, s, champion):
    # The same weights as the champion: identical predictions, so not worse on any evening.
    twin = make_model(engine, s, "AAPL", seed=0)
    shadow.promote_or_shadow(engine, twin, "gate passed (test)", s)
    run_evenings(engine, s, EVENINGS[:4])
    pending = shadow.conclude(engine, s, "AAPL")
    assert pending.comparison.decision == "pending" and pending.comparison.n == 4
    assert registry.get_model(engine, twin).status == "shadow"

    run_evenings(engine, s, EVENINGS[4:])
    out = shadow.conclude_all(engine, s)
    assert [o.comparison.decision for o in out] == ["promote"]
    assert out[0].comparison.n == len(EVENINGS) and out[0].comparison.direction_p == 1.0
    assert out[0].promoted.changed and out[0].notified.logged
    assert registry.active_model(engine, "AAPL").id == twin
    assert registry.get_model(engine, champion.id).status == "retired"
    events = registry.history(engine, "AAPL")
    assert events[-1].from_status == "shadow" and events[-1].to_status == "active"
    assert "McNemar" in events[-1].reason and f"{len(EVENINGS)} filled evenings" in events[-1].reason
    # "Promoted" says what it means (not shown worse, which is not shown better) and what it could detect.
    said = out[0].comparison.summary()
    assert "not shown worse, which is not shown better" in said and "detect" in said
    with engine.connect() as conn:
        decided = (
            conn.execute(select(gate_decisions).where(gate_decisions.c.model_id == twin)).mappings().one()
        )
    assert decided["backtest_id"] == f"shadow-{twin}" and decided["passed"]
    assert shadow.conclude_all(engine, s) == []  # nothing in shadow any more
    # The next evening is published by the promoted model, with no shadow row.
    nxt = predict(engine, s, run_date=dt.date(2024, 6, 26))
    assert nxt.shadow == {} and nxt.model_versions["AAPL"] == registry.active_model(engine, "AAPL").version


def test_conclusion_retires_a_significantly_worse_shadow(engine, s, champion):
    bad = crippled_model(engine, s, "AAPL")
    shadow.promote_or_shadow(engine, bad, "gate passed (test)", s)
    # The |error| test needs 10 independent evenings (scoring.hac): 6 would be "too short to test".
    evenings = [dt.date(2024, 6, d) for d in (7, 10, 11, 12, 13, 14)] + EVENINGS
    run_evenings(engine, s, evenings)
    out = shadow.conclude(engine, s, "AAPL")
    cmp = out.comparison
    assert cmp.decision == "retire" and cmp.n == len(evenings)
    assert cmp.shadow_mae > cmp.champion_mae and cmp.error_p <= shadow.SIGNIFICANCE
    assert registry.get_model(engine, bad).status == "retired"
    assert registry.active_model(engine, "AAPL").id == champion.id  # the champion stays
    assert "the champion stays" in registry.history(engine, "AAPL")[-1].reason
    with engine.connect() as conn:
        assert not conn.execute(
            select(gate_decisions.c.passed).where(gate_decisions.c.model_id == bad)
        ).scalar_one()
    # A retired shadow was never active: no rollback can bring it into production.
    with pytest.raises(InputError, match="never active"):
        registry.rollback(engine, "AAPL", "try", to_model_id=bad)
    assert predict(engine, s, run_date=dt.date(2024, 6, 26)).shadow == {}
    assert verify(engine).ok


def test_zero_sessions_or_no_champion_promotes_at_once(engine, tmp_path, db_url):
    ingest(engine, ["AAPL"])
    s0 = make_settings(tmp_path, db_url)  # default LDTM_SHADOW_SESSIONS = 0
    assert s0.shadow_sessions == 0
    first = make_model(engine, s0, "AAPL", seed=0)
    s5 = make_settings(tmp_path, db_url, shadow_sessions=5)
    res = shadow.promote_or_shadow(engine, first, "gate passed", s5)  # no champion: first deployment
    assert not res.shadow and registry.active_model(engine, "AAPL").id == first
    second = make_model(engine, s0, "AAPL", seed=1)
    res = shadow.promote_or_shadow(engine, second, "gate passed", s0)
    assert not res.shadow and res.retired_model_id == first
    assert registry.active_model(engine, "AAPL").id == second


def test_gate_pass_goes_to_shadow_and_a_newer_shadow_replaces_it(engine, s, champion):
    mid = make_model(engine, s, "AAPL", seed=2, trained_on=dt.date(2024, 3, 1))
    add_backtest(engine, mid, [(60, 0.55, 0.50, 1.5, 0), (40, 0.60, 0.45, 2.0, 0)])
    # The seed policy: this hand-made backtest has no per-row predictions to pair with the champion.
    report = run_gate(engine, s, "AAPL", thresholds=GateThresholds(policy="seed"))
    assert report.passed and report.promoted.shadow
    assert registry.get_model(engine, mid).status == "shadow"
    assert registry.active_model(engine, "AAPL").id == champion.id
    # Next week's refresh passes too: it waits, or a weekly retrain would restart the shadow every week
    # and no shadow of more than 4 evenings would ever conclude (benchmarks/gate_policies.py measured it).
    newer = make_model(engine, s, "AAPL", seed=3)
    res = shadow.promote_or_shadow(engine, newer, "gate passed", s)
    assert not res.shadow and not res.changed and res.held_by_shadow == mid
    assert registry.get_model(engine, mid).status == "shadow"
    assert registry.get_model(engine, newer).status == "candidate"
    assert f"shadow model {mid}" in registry.history(engine, "AAPL")[-1].reason
    assert registry.shadow_models(engine)["AAPL"].id == mid


def test_a_shadow_too_short_for_its_stated_power_is_refused(monkeypatch):
    """N evenings must reach LDTM_SHADOW_POWER at LDTM_SHADOW_MARGIN (exact binomial power, issue 27):
    5 evenings can never retire (0.5**5 > 0.025), and the refusal says what N the power needs."""
    from ldtm_core.config import Settings
    from ldtm_core.errors import ConfigError
    from ldtm_core.shadow_power import sessions_for_power

    need = sessions_for_power(20, 0.8)
    for n in (1, 5, need - 1):
        monkeypatch.setenv("LDTM_SHADOW_SESSIONS", str(n))
        with pytest.raises(ConfigError, match=rf"LDTM_SHADOW_SESSIONS={n}: .*20-point drop.*at least {need}"):
            Settings.from_env()
    for n in (0, need):
        monkeypatch.setenv("LDTM_SHADOW_SESSIONS", str(n))
        assert Settings.from_env().shadow_sessions == n
    # A larger stated margin or a lower stated power needs fewer evenings.
    monkeypatch.setenv("LDTM_SHADOW_SESSIONS", "6")
    monkeypatch.setenv("LDTM_SHADOW_MARGIN", "100")
    assert Settings.from_env().shadow_margin_points == 100
    monkeypatch.setenv("LDTM_SHADOW_POWER", "1")
    with pytest.raises(ConfigError, match="LDTM_SHADOW_POWER"):
        Settings.from_env()


def _short_shadow_env(monkeypatch) -> None:
    """6 evenings, stated for a 100-point margin (all 6 one way: p = 1/64): short enough for a test."""
    monkeypatch.setenv("LDTM_SHADOW_SESSIONS", "6")
    monkeypatch.setenv("LDTM_SHADOW_MARGIN", "100")


def test_cli_shows_champion_beside_shadow_and_ends_it_by_hand(ldtm_env, engine, tmp_path, monkeypatch):
    from ldtm_core.cli import app

    _short_shadow_env(monkeypatch)
    s = make_settings(tmp_path, ldtm_env["url"], shadow_sessions=6)
    ingest(engine, ["AAPL"])
    registry.promote(engine, make_model(engine, s, "AAPL", seed=0), "first", s)
    sid = make_model(engine, s, "AAPL", seed=1)
    shadow.promote_or_shadow(engine, sid, "gate passed", s)
    run_evenings(engine, s, EVENINGS[:3])
    runner = CliRunner()
    board = runner.invoke(app, ["leaderboard"])
    assert board.exit_code == 0, board.output
    assert "in shadow (never on this board): AAPL" in " ".join(board.output.split())
    side = runner.invoke(app, ["leaderboard", "--shadow"])
    text = " ".join(side.output.split())
    assert side.exit_code == 0, side.output
    assert "champion vs shadow" in text and f"model {sid}" in text and "3/6" in text and "pending" in text
    listed = runner.invoke(app, ["registry", "list"])
    assert "shadow" in listed.output
    refused = runner.invoke(app, ["shadow", "end", "AAPL", "--retire", "--reason", " "])
    assert refused.exit_code != 0
    ended = runner.invoke(app, ["shadow", "end", "AAPL", "--promote", "--reason", "urgent fix"])
    assert ended.exit_code == 0, ended.output
    assert registry.active_model(engine, "AAPL").id == sid
    assert "ended by hand: urgent fix" in registry.history(engine, "AAPL")[-1].reason


def test_dashboard_shows_champion_beside_shadow(engine, tmp_path, db_url, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ldtm_dashboard import APP

    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    _short_shadow_env(monkeypatch)
    s = make_settings(tmp_path, db_url, shadow_sessions=6)
    ingest(engine, ["AAPL"])
    champ = make_model(engine, s, "AAPL", seed=0)
    registry.promote(engine, champ, "first", s)
    sid = make_model(engine, s, "AAPL", seed=1)
    shadow.promote_or_shadow(engine, sid, "gate passed", s)
    run_evenings(engine, s, EVENINGS[:3])
    at = AppTest.from_file(str(APP.parent / "views" / "leaderboard.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    board = at.dataframe[0].value.set_index("ticker")
    assert list(board.index) == ["AAPL"] and board.loc["AAPL", "n"] == 3  # the champion's evenings only
    side = at.dataframe[1].value.set_index("ticker")
    assert side.loc["AAPL", "shadow_model_id"] == sid and side.loc["AAPL", "evenings"] == 3
    assert side.loc["AAPL", "decision"] == "pending"
    assert any("never published" in c.value for c in at.caption)


def test_a_decision_that_cannot_be_carried_out_is_reported_and_changes_nothing(
    engine, s, champion, monkeypatch
):
    twin = make_model(engine, s, "AAPL", seed=0)
    shadow.promote_or_shadow(engine, twin, "gate passed (test)", s)
    run_evenings(engine, s)

    def refuse(*args, **kwargs):
        raise InputError("the registry refused the promotion (test)")

    monkeypatch.setattr(shadow, "promote", refuse)
    [out] = shadow.conclude_all(engine, s)
    assert out.comparison.decision == "promote" and "refused the promotion" in out.error
    assert registry.get_model(engine, twin).status == "shadow"
    assert registry.active_model(engine, "AAPL").id == champion.id
