"""Racing runs on PostgreSQL: two real processes released at the same instant into the same critical
section; the end state must equal one clean run."""

from __future__ import annotations

import re

import pytest
from rel_helpers import (
    RUN_DATE,
    RUN_DATES,
    TICKERS,
    add_candidate,
    add_passing_backtest,
    build_world,
    cli_env,
    fillback_world,
    finish,
    pause_env,
    registry_state,
    release,
    snapshot_state,
    spawn_cli,
    wait_paused,
)

from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.db import get_engine
from ldtm_core.learning import registry

pytestmark = [pytest.mark.timeout(240), pytest.mark.postgres]


def _race(args: list[str], home, url, pause_dir, point: str) -> list[tuple[int, str, str]]:
    env = cli_env(home, url, **pause_env(pause_dir, point))
    procs = [spawn_cli(args, env) for _ in range(2)]
    wait_paused(pause_dir, procs)  # both hold their results and stand right before the contested write
    release(pause_dir)
    return [finish(p) for p in procs]


def test_two_predicts_for_the_same_evening_write_each_row_once(pg_url, tmp_path, pause_dir, twin_url):
    home = tmp_path / "home"
    build_world(pg_url, home)
    results = _race(
        ["predict", "--run-date", RUN_DATE.isoformat()], home, pg_url, pause_dir, "predict.before_write"
    )
    assert [rc for rc, _, _ in results] == [0, 0], results
    written = sorted(int(re.search(r"(\d+) rows written", out).group(1)) for _, out, _ in results)
    assert written == [0, len(TICKERS)]  # one run wrote everything, the other found it there

    twin = build_world(twin_url, tmp_path / "twin")
    predict(get_engine(twin_url), twin, RUN_DATE)
    assert snapshot_state(pg_url) == snapshot_state(twin_url)
    assert verify(get_engine(pg_url)).ok


def test_two_fillbacks_at_once_fill_each_value_once(pg_url, tmp_path, pause_dir, twin_url):
    home = tmp_path / "home"
    fillback_world(pg_url, home)
    results = _race(["fillback"], home, pg_url, pause_dir, "fillback.before_lock")
    assert [rc for rc, _, _ in results] == [0, 0], results
    totals = sorted(
        sum(int(n) for n in re.findall(r"(?:next_day|next_monday|one_month) (\d+)", out))
        for _, out, _ in results
    )

    fillback_world(twin_url, tmp_path / "twin")
    clean = fillback(get_engine(twin_url), neutral_band_pct=0.25).total_filled
    assert totals == [0, clean]  # serialised: the second run found nothing left to fill
    assert snapshot_state(pg_url) == snapshot_state(twin_url)
    assert len(snapshot_state(pg_url)) == len(TICKERS) * len(RUN_DATES)


def test_two_gates_for_the_same_ticker_promote_once(pg_url, tmp_path, pause_dir, twin_url):
    def world(url, home):
        settings = build_world(url, home, tickers=["AAPL"])
        new = add_candidate(url, settings, "AAPL", seed=7)
        add_passing_backtest(url, new, "AAPL")
        return settings, new

    home = tmp_path / "home"
    _, new = world(pg_url, home)
    # The seed policy: the race is on the promotion, and these hand-made folds have no per-row
    # predictions to pair with the champion (the evidence policy would keep it: insufficient evidence).
    results = _race(
        ["gate", "--ticker", "AAPL", "--policy", "seed"], home, pg_url, pause_dir, "promote.after_copy"
    )
    # One promotes; the other, under the ticker's lock, finds the backtest judged meanwhile (issue 38 D3:
    # both used to say "promoted" and record two pass decisions).
    assert sorted(rc for rc, _, _ in results) == [0, 2], results
    [(_, _, err)] = [r for r in results if r[0] == 2]
    assert "already judged by the gate while this one ran" in " ".join(err.split())

    twin_settings, twin_new = world(twin_url, tmp_path / "twin")
    run_gate(get_engine(twin_url), twin_settings, "AAPL", twin_new, thresholds=GateThresholds(policy="seed"))
    state, clean = registry_state(pg_url), registry_state(twin_url)
    assert state == clean
    models, events = state
    assert [m[0] for m in models if m[2] == "active"] == [new]
    assert events.count((new, "candidate", "active")) == 1
    assert registry.active_model(get_engine(pg_url), "AAPL").id == new
