"""Gate: criteria on the newest backtest, promotion on pass, notification (log + webhook) on fail."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from accountability_helpers import add_backtest, make_model, make_settings
from typer.testing import CliRunner

from ldtm_core.accountability.alerts.notify import send
from ldtm_core.accountability.gate import gate
from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.cli import app
from ldtm_core.errors import ConfigError, InputError, NotFoundError
from ldtm_core.learning import registry


class Hook:
    """A local webhook that records every POST."""

    def __init__(self, status=200):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.headers["Content-Type"], json.loads(body)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook?token=secret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def s(tmp_path, db_url):
    return make_settings(tmp_path, db_url)


def test_pass_promotes_and_pools_folds(engine, s):
    old = make_model(engine, s, "AAPL", seed=1)
    registry.promote(engine, old, "earlier", s)
    mid = make_model(engine, s, "AAPL", seed=2, trained_on=dt.date(2024, 3, 1))
    add_backtest(engine, mid, [(100, 0.40, 0.50, 9.0, 0), (100, 0.40, 0.5, 9.0, 0)])  # older, failing
    add_backtest(engine, mid, [(60, 0.55, 0.50, 1.5, 0), (40, 0.60, 0.45, 2.0, 0)])  # newest: used
    # Under the evidence policy these hand-made folds (no per-row predictions) cannot be paired with the
    # champion, so the champion stays: the next test. The seed policy judges the pooled figures alone.
    report = run_gate(engine, s, "AAPL", thresholds=GateThresholds(policy="seed"))
    assert report.passed and report.model_id == mid and report.folds == 2 and report.n == 100
    assert report.direction_accuracy == pytest.approx((0.55 * 60 + 0.60 * 40) / 100)
    assert report.always_up_accuracy == pytest.approx((0.50 * 60 + 0.45 * 40) / 100)
    assert report.mean_abs_pct_error == pytest.approx((1.5 * 60 + 2.0 * 40) / 100)
    assert "vs always-up" in report.summary()
    assert report.promoted.version == "v1.2024-03-01" and report.promoted.retired_model_id == old
    assert registry.active_model(engine, "AAPL").id == mid
    assert report.notified is None


def test_a_backtest_that_cannot_be_paired_with_the_champion_keeps_the_champion(engine, s):
    """Folds without stored per-row predictions (written before revision 0022) are no evidence that the
    candidate is better than what serves: insufficient evidence under the default policy."""
    old = make_model(engine, s, "AAPL", seed=1)
    registry.promote(engine, old, "earlier", s)
    mid = make_model(engine, s, "AAPL", seed=2)
    add_backtest(engine, mid, [(60, 0.55, 0.50, 1.5, 0, 10, 7), (40, 0.60, 0.45, 2.0, 0, 9, 5)])
    report = run_gate(engine, s, "AAPL")
    assert report.decision == "insufficient evidence" and not report.passed
    assert report.comparison.champion_model_id == old and "cannot be paired" in report.comparison.note
    assert registry.active_model(engine, "AAPL").id == old
    assert registry.get_model(engine, mid).status == "candidate"


@pytest.mark.parametrize(
    "folds, thresholds, failing",
    [
        ([(100, 0.60, 0.5, 1.0, 0)], GateThresholds(), {"folds"}),
        ([(50, 0.51, 0.5, 1.0, 0), (50, 0.52, 0.5, 1.0, 0)], GateThresholds(), {"direction_accuracy"}),
        ([(50, 0.60, 0.5, 5.5, 0), (50, 0.60, 0.5, 5.0, 0)], GateThresholds(), {"mean_abs_pct_error"}),
        ([(50, 0.60, 0.5, 1.0, 1), (50, 0.60, 0.5, 1.0, 0)], GateThresholds(), {"leakage_rows"}),
        (
            [(50, 0.56, 0.54, 1.0, 0), (50, 0.56, 0.54, 1.0, 0)],
            GateThresholds(beat_always_up_margin=0.03),
            {"margin_over_always_up"},
        ),
        (
            [(50, 0.50, 0.6, 6.0, 2), (50, 0.50, 0.6, 6.0, 0)],
            GateThresholds(beat_always_up_margin=0.0),
            {"direction_accuracy", "mean_abs_pct_error", "leakage_rows", "margin_over_always_up"},
        ),
    ],
)
def test_each_criterion_fails_alone(engine, s, folds, thresholds, failing):
    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, folds)
    report = run_gate(engine, s, "AAPL", thresholds=thresholds)
    assert not report.passed
    assert {c.name for c in report.failing} == failing
    assert registry.get_model(engine, mid).status == "candidate"
    assert registry.history(engine, "AAPL")[-1].reason.startswith("gate FAILED")


def test_fail_notifies_webhook_with_every_failing_criterion(engine, s, caplog):
    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, [(80, 0.50, 0.55, 6.25, 0), (80, 0.50, 0.55, 6.25, 0)])
    with Hook() as hook:
        s2 = make_settings(s.home.parent, s.database_url, notify_webhook_url=hook.url)
        with caplog.at_level(logging.WARNING, logger="ldtm.notify"):
            report = run_gate(engine, s2, "AAPL")
    assert not report.passed and report.notified.posted and report.notified.status == 200
    ctype, payload = hook.received[0]
    assert ctype == "application/json"
    assert payload["ticker"] == "AAPL" and payload["passed"] is False
    failing = {c["name"]: c for c in payload["failing"]}
    assert failing["direction_accuracy"]["value"] == pytest.approx(0.50)
    assert failing["direction_accuracy"]["threshold"] == 0.52
    assert failing["mean_abs_pct_error"]["value"] == pytest.approx(6.25)
    assert failing["mean_abs_pct_error"]["threshold"] == 5.0
    assert payload["always_up_accuracy"] == pytest.approx(0.55)
    assert "gate FAILED for AAPL" in caplog.text and "6.250" in caplog.text


def test_a_broken_webhook_never_breaks_the_gate(engine, s, caplog):
    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, [(10, 0.1, 0.5, 1, 0), (10, 0.1, 0.5, 1, 0)])
    with Hook(status=500) as hook:
        s500 = make_settings(s.home.parent, s.database_url, notify_webhook_url=hook.url)
        report = run_gate(engine, s500, "AAPL")
    assert not report.notified.posted and report.notified.status == 500
    # Nothing listening at all, then an unparsable URL: still a report, never an exception.
    for url in ("http://127.0.0.1:9/none", "not a url"):
        with caplog.at_level(logging.WARNING, logger="ldtm.notify"):
            res = send({"x": 1}, url, timeout=1.0)
        assert res.logged and not res.posted and res.error
    assert "secret" not in caplog.text


def test_a_backtest_already_judged_is_not_judged_again_unless_forced(engine, s):
    # `make dev` after `make demo`: the sensor re-launched the gate for every backtest the demo had
    # judged, and each failing candidate was failed (and notified) again (issue 20 item 17).
    mid = make_model(engine, s, "AAPL")
    first = add_backtest(engine, mid, [(80, 0.50, 0.55, 6.25, 0), (80, 0.50, 0.55, 6.25, 0)])
    with Hook() as hook:
        s2 = make_settings(s.home.parent, s.database_url, notify_webhook_url=hook.url)
        assert not run_gate(engine, s2, "AAPL").passed
        with pytest.raises(InputError, match=f"backtest {first} .* already judged.*failed.*force"):
            run_gate(engine, s2, "AAPL")
        assert len(hook.received) == 1  # no second notice
        again = run_gate(engine, s2, "AAPL", force=True)  # an operator's explicit re-judgement
        assert not again.passed and again.backtest_id == first and len(hook.received) == 2
        # A new backtest of the same candidate is judged as usual (and this one passes).
        second = add_backtest(engine, mid, [(100, 0.60, 0.50, 2.0, 0), (100, 0.60, 0.50, 2.0, 0)])
        report = run_gate(engine, s2, "AAPL")
        assert report.passed and report.backtest_id == second and len(hook.received) == 2
    assert gate.judged_backtests(engine, [first, second, "never-judged"]) == {first: False, second: True}


def test_gate_errors(engine, s):
    with pytest.raises(NotFoundError, match="no candidate"):
        run_gate(engine, s, "AAPL")
    mid = make_model(engine, s, "AAPL")
    with pytest.raises(NotFoundError, match="no backtest"):
        run_gate(engine, s, "AAPL")
    registry.promote(engine, mid, "x", s)
    with pytest.raises(InputError, match="only judges candidates"):
        run_gate(engine, s, "AAPL", model_id=mid)


def test_cli_gate_exit_codes_and_thresholds(engine, s, ldtm_env):
    mid = make_model(engine, s, "AAPL")
    # 120 of 200 rows: a first deployment must also beat a coin (p = 0.003) (issue 27)
    add_backtest(engine, mid, [(100, 0.60, 0.51, 2.0, 0), (100, 0.60, 0.51, 2.0, 0)])
    runner = CliRunner()
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--min-accuracy", "65"])
    assert out.exit_code == 1 and "direction_accuracy" in out.output and "65.00%" in out.output
    assert registry.get_model(engine, mid).status == "candidate"
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--max-p-value", "0.05"])
    assert out.exit_code == 2 and "already judged" in out.output  # the same backtest: --force to re-judge
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--max-p-value", "0.05", "--force"])
    assert out.exit_code == 1 and "skill_p_value" in out.output and "unknown" in out.output
    out = runner.invoke(
        app, ["gate", "--ticker", "AAPL", "--beat-always-up", "1", "--force", "--by", "carol"]
    )
    assert out.exit_code == 0, out.output
    assert (
        "always-up 51.00%" in " ".join(out.output.split())
        and registry.get_model(engine, mid).status == "active"
    )
    # Issue 38: a forced re-judgement is a manual override: it records who forced it.
    reasons = [e.reason for e in registry.history(engine, "AAPL")]
    assert any("judged again by carol (--force)" in r for r in reasons)
    assert sum("judged again by" in r for r in reasons) == 2  # the two --force runs


def test_skill_p_value_is_reported_and_can_be_required(engine, s, monkeypatch):
    """Pooled discordant rows 30 vs 18 of 48: p = P(X >= 30), X ~ Bin(48, 1/2) ~ 0.056."""
    from scipy.stats import binomtest

    folds = [(100, 0.56, 0.50, 1.0, 0, 16, 10), (100, 0.54, 0.52, 1.0, 0, 14, 8)]
    expected = binomtest(30, 48, 0.5, alternative="greater").pvalue
    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, folds)
    report = run_gate(engine, s, "AAPL", thresholds=GateThresholds(max_p_value=0.05))
    assert not report.passed and {c.name for c in report.failing} == {"skill_p_value"}
    assert report.skill.p_value == pytest.approx(expected)
    assert report.to_dict()["skill_p_value"] == pytest.approx(expected)
    assert "one-sided p = 0.056" in report.summary()
    # Off by default: the seed's gate promotes the same backtest (judged again: forced), and still
    # states the p-value. (The evidence policy's first deployment requires beating always-up and a coin
    # beyond noise: issue 27.)
    monkeypatch.delenv("LDTM_GATE_MAX_P_VALUE", raising=False)
    report = run_gate(engine, s, "AAPL", force=True, thresholds=GateThresholds.from_env(policy="seed"))
    assert report.passed and "p = 0.056" in report.summary()


def test_skill_p_value_from_the_environment_and_unknown_on_old_backtests(engine, s, monkeypatch):
    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, [(100, 0.60, 0.50, 1.0, 0, 20, 10), (100, 0.60, 0.50, 1.0, 0, 20, 10)])
    monkeypatch.setenv("LDTM_GATE_MAX_P_VALUE", "0.1")
    assert GateThresholds.from_env().max_p_value == 0.1
    assert run_gate(engine, s, "AAPL").passed  # 40 vs 20: p ~ 0.006
    other = make_model(engine, s, "NVDA")
    add_backtest(engine, other, [(100, 0.60, 0.50, 1.0, 0), (100, 0.60, 0.50, 1.0, 0)], ticker="NVDA")
    report = run_gate(engine, s, "NVDA")
    assert report.skill is None and not report.passed
    assert [c.describe() for c in report.failing] == ["skill_p_value = unknown (needs <= 0.100)"]
    for bad in ("0", "1.5", "x"):
        monkeypatch.setenv("LDTM_GATE_MAX_P_VALUE", bad)
        with pytest.raises(ConfigError, match="LDTM_GATE_MAX_P_VALUE"):
            GateThresholds.from_env()


def test_a_backtest_of_another_config_is_refused(engine, s):
    from ldtm_core.learning.model import get_profile

    mid = make_model(engine, s, "AAPL")  # the demo profile's config
    passing = [(100, 0.70, 0.50, 1.0, 0), (100, 0.70, 0.50, 1.0, 0)]
    add_backtest(engine, mid, passing, cfg=get_profile("reference"))  # `ldtm backtest --profile reference`
    with pytest.raises(InputError, match=r"gate refused for model .* ran another config .*\(profile demo"):
        run_gate(engine, s, "AAPL")
    assert registry.get_model(engine, mid).status == "candidate"
    # Its own (failing) backtest is judged even though the foreign passing one is newer.
    own = add_backtest(engine, mid, [(100, 0.40, 0.50, 1.0, 0)] * 2)
    add_backtest(
        engine, mid, passing, cfg=get_profile("demo", max_epochs=99)
    )  # same architecture, other training
    report = run_gate(engine, s, "AAPL")
    assert report.backtest_id == own and not report.passed
    assert registry.get_model(engine, mid).status == "candidate"


def test_a_backtest_without_a_recorded_config_is_refused(engine, s):
    from sqlalchemy import update

    from ldtm_core.schema import backtest_folds

    mid = make_model(engine, s, "AAPL")
    add_backtest(engine, mid, [(100, 0.70, 0.50, 1.0, 0)] * 2)
    with engine.begin() as conn:  # a backtest written before signatures were recorded
        conn.execute(update(backtest_folds).values(config_signature=None))
    with pytest.raises(InputError, match="with no recorded config"):
        run_gate(engine, s, "AAPL")
    out = CliRunner().invoke(app, ["gate", "--ticker", "AAPL"], env={"LDTM_DATABASE_URL": s.database_url})
    assert out.exit_code != 0 and "no recorded config" in " ".join(out.output.split())
    assert registry.get_model(engine, mid).status == "candidate"


def test_two_folds_of_one_row_are_insufficient_evidence():
    """Issue 21: `ldtm backtest --test-sessions 1 --folds 2` passed the seed's gate."""
    folds = [
        {
            "n": 1,
            "direction_accuracy": 1.0,
            "always_up_accuracy": 0.0,
            "mean_abs_pct_error": 1.0,
            "leakage_rows": 0,
        }
    ] * 2
    fig, criteria = gate.evaluate(folds, GateThresholds())
    assert fig["decision"] == "insufficient evidence"
    assert {c.name for c in criteria if not c.passed} == {"rows", "fold_rows"}
    # The seed's policy, named, still judges them as it always did.
    fig, criteria = gate.evaluate(folds, GateThresholds(policy="seed"))
    assert fig["decision"] == "pass" and all(c.passed for c in criteria)


def test_nvda_on_four_rows_is_held_and_keeps_the_champion(engine, s):
    """Issue 21: NVDA passed at 75 % vs always-up 50 % on 4 rows over 2 folds, p = 0.5, and was promoted."""
    champion = make_model(engine, s, "NVDA", seed=1)
    registry.promote(engine, champion, "earlier", s)
    mid = make_model(engine, s, "NVDA", seed=2)
    add_backtest(engine, mid, [(2, 1.0, 0.5, 1.0, 0, 1, 0), (2, 0.5, 0.5, 1.0, 0, 1, 1)], ticker="NVDA")
    report = run_gate(engine, s, "NVDA")
    assert report.skill.p_value == pytest.approx(0.5)
    assert not report.passed and report.decision == "insufficient evidence"
    assert report.summary().startswith("gate INSUFFICIENT EVIDENCE for NVDA")
    assert {c.name for c in report.failing} == {"rows", "fold_rows"}
    assert registry.active_model(engine, "NVDA").id == champion
    assert registry.get_model(engine, mid).status == "candidate"
    assert report.to_dict()["decision"] == "insufficient evidence"


def test_policy_and_minimum_evidence_from_the_environment_and_the_cli(engine, s, ldtm_env, monkeypatch):
    monkeypatch.setenv("LDTM_GATE_MIN_ROWS", "40")
    monkeypatch.setenv("LDTM_GATE_MIN_FOLD_ROWS", "20")
    t = GateThresholds.from_env()
    assert (t.policy, t.min_rows, t.min_fold_rows) == ("evidence", 40, 20)
    monkeypatch.setenv("LDTM_GATE_POLICY", "Seed")
    assert GateThresholds.from_env().policy == "seed"
    for var, bad in (
        ("LDTM_GATE_POLICY", "lenient"),
        ("LDTM_GATE_MIN_ROWS", "0"),
        ("LDTM_GATE_MIN_FOLD_ROWS", "x"),
    ):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ConfigError, match=var):
            GateThresholds.from_env()
        monkeypatch.delenv(var)
    monkeypatch.setenv("LDTM_GATE_MIN_ROWS", "40")
    monkeypatch.setenv("LDTM_GATE_MIN_FOLD_ROWS", "20")
    mid = make_model(engine, s, "AAPL")
    # 60 rows: enough for 40, not for 61; 40 hits beat a coin (p = 0.007), as a first deployment must
    add_backtest(engine, mid, [(30, 2 / 3, 0.50, 1.0, 0)] * 2)
    runner = CliRunner()
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--min-rows", "61"])
    assert out.exit_code == 1 and "INSUFFICIENT EVIDENCE" in out.output and "rows" in out.output
    flat = " ".join(out.output.split())
    # The baselines table: each on the same rows (unknown for folds written before revision 0020).
    assert "trailing-21 majority" in flat and "persistence" in flat and "backtest predates it" in flat
    assert registry.get_model(engine, mid).status == "candidate"
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--policy", "nonsense", "--force"])
    assert out.exit_code != 0 and "gate policy must be one of evidence, seed" in " ".join(out.output.split())
    out = runner.invoke(app, ["gate", "--ticker", "AAPL", "--force"])  # 60 >= 40 rows, 30 >= 20 per fold
    assert out.exit_code == 0, out.output
    assert registry.get_model(engine, mid).status == "active"


def test_every_gate_report_states_the_baselines_on_the_same_rows_with_p_values(engine, s):
    """Issue 21: the decision with its rule, the rows, the model beside always-up, persistence and the
    trailing majority, and a p-value beside every "beats"."""
    from sqlalchemy import insert

    from ldtm_core.schema import backtest_fold_baselines

    mid = make_model(engine, s, "AAPL")
    bid = add_backtest(engine, mid, [(60, 0.55, 0.50, 1.0, 0, 9, 6)] * 2)
    with engine.begin() as conn:  # per fold: persistence 30 hits (12 vs 9 disagreements), trend 36 (6 vs 9)
        conn.execute(
            insert(backtest_fold_baselines),
            [
                {"backtest_id": bid, "fold": fold, "baseline": name, "n": 60, **figures}
                for fold in (1, 2)
                for name, figures in (
                    ("persistence", {"hits": 30, "model_only": 12, "base_only": 9}),
                    ("trend", {"hits": 36, "model_only": 6, "base_only": 9}),
                )
            ],
        )
    report = run_gate(engine, s, "AAPL")
    # 66 of 120 rows beat neither a coin (p = 0.16) nor always-up (18 vs 12, p = 0.18) beyond noise: a
    # first deployment is held (issue 27), and its report still states every baseline.
    assert not report.passed and report.decision == "fail"
    assert {c.name for c in report.failing} == {"beats_coin_p", "beats_always_up_p"}
    b = report.baselines
    assert (b["persistence"].hits, b["persistence"].n) == (60, 120)
    assert (b["trend"].model_only, b["trend"].base_only) == (12, 18)
    text = report.summary()
    assert (
        "does not beat persistence (50.00%)" in text and "does not beat trailing-21 majority (60.00%)" in text
    )
    p = binomtest_p(24, 42)
    assert f"p = {p:.3f}" in text and "rule: evidence policy" in text and "on the same 120 rows" in text
    payload = report.to_dict()
    assert payload["baselines"]["trend"]["p_value"] == pytest.approx(binomtest_p(12, 30))
    assert payload["baselines"]["always_up"]["accuracy"] == pytest.approx(0.5)
    assert payload["rule"].startswith("evidence policy")


def binomtest_p(k, n):
    from scipy.stats import binomtest

    return binomtest(k, n, 0.5, alternative="greater").pvalue


PASSING = [(100, 0.60, 0.50, 2.0, 0), (100, 0.60, 0.50, 2.0, 0)]
SEED = GateThresholds(policy="seed")


def _decisions(engine) -> list[tuple[str, bool]]:
    from sqlalchemy import select

    from ldtm_core.schema import gate_decisions

    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(gate_decisions.c.backtest_id, gate_decisions.c.passed))]


def _meanwhile(monkeypatch, action):
    """Run `action` once, between a gate's judgement and its promotion (where a second gate or an operator
    can come in); then the real promotion."""
    real = gate.shadow.promote_or_shadow
    done = []

    def wrapper(*args, **kwargs):
        if not done:
            done.append(True)
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(gate.shadow, "promote_or_shadow", wrapper)


def test_two_gates_racing_on_one_backtest_make_one_decision(engine, s, monkeypatch):
    # Issue 38 D3: two concurrent `ldtm gate` runs for one ticker both judged the same backtest and both
    # said "promoted" (two pass rows). The second to reach the promotion now finds it judged, under the lock.
    mid = make_model(engine, s, "AAPL")
    bt = add_backtest(engine, mid, PASSING)
    other = []
    _meanwhile(monkeypatch, lambda: other.append(run_gate(engine, s, "AAPL", thresholds=SEED)))
    with pytest.raises(InputError, match=f"backtest {bt} .* already judged"):
        run_gate(engine, s, "AAPL", thresholds=SEED)
    assert other[0].passed and _decisions(engine) == [(bt, True)]
    assert registry.active_model(engine, "AAPL").id == mid


def test_a_rollback_while_a_gate_runs_is_not_undone_by_it(engine, s, monkeypatch):
    # Issue 38 D4: the gate compared with model 8, the operator rolled back to 6 meanwhile, and the gate
    # promoted over 6 anyway. It now refuses: what it judged against no longer serves.
    six = make_model(engine, s, "AAPL", seed=1)
    registry.promote(engine, six, "first", s)
    eight = make_model(engine, s, "AAPL", seed=2, trained_on=dt.date(2024, 2, 1))
    registry.promote(engine, eight, "second", s)
    nine = make_model(engine, s, "AAPL", seed=3, trained_on=dt.date(2024, 3, 1))
    add_backtest(engine, nine, PASSING)
    _meanwhile(monkeypatch, lambda: registry.rollback(engine, "AAPL", "operator: bad week"))
    with pytest.raises(
        InputError, match=rf"champion changed while the gate ran: model {eight} .* model {six}"
    ):
        run_gate(engine, s, "AAPL", thresholds=SEED)
    assert registry.active_model(engine, "AAPL").id == six
    assert registry.get_model(engine, nine).status == "candidate" and _decisions(engine) == []


def test_ties_are_out_of_the_gates_accuracy_and_its_coin_test():
    """A zero next-day move is nobody's hit or miss (the folds store accuracies over their decided rows):
    the pooled accuracy, always-up and the first deployment's coin test are over the decided rows; the
    evidence floor and the error still count every test row. Before, accuracies were weighted by all rows
    and the coin test got round(accuracy x rows) hits of all rows."""
    from ldtm_core.accountability.decay import record as decay_record

    base = {"mean_abs_pct_error": 1.0, "leakage_rows": 0, "model_only_hits": 10, "up_only_hits": 5}
    folds = [
        {"n": 63, "ties": 13, "direction_accuracy": 30 / 50, "always_up_accuracy": 25 / 50, **base},
        {"n": 63, "ties": 3, "direction_accuracy": 33 / 60, "always_up_accuracy": 30 / 60, **base},
        {"n": 63, "ties": None, "direction_accuracy": 36 / 63, "always_up_accuracy": 30 / 63, **base},
    ]
    fig, _ = gate.evaluate(folds, GateThresholds())
    assert (fig["scored"], fig["hits"], fig["n"]) == (173, 99, 189)  # a fold from before 0026: no ties known
    assert fig["direction_accuracy"] == pytest.approx(99 / 173)
    assert fig["always_up_accuracy"] == pytest.approx(85 / 173)
    import pandas as pd

    pooled = decay_record._pooled("b", pd.DataFrame(folds))
    assert pooled[:3] == (173, pytest.approx(99 / 173), pytest.approx(85 / 173))
