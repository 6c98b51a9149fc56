"""Registry: lifecycle, version majors, verified versioned copies, rollback, concurrent promotions."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from accountability_helpers import make_model, make_settings
from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.db import get_engine
from ldtm_core.errors import CheckpointError, InputError, NotFoundError
from ldtm_core.learning import registry
from ldtm_core.learning.checkpoints import sha256_file
from ldtm_core.learning.model import get_profile
from ldtm_core.schema import model_registry


def _statuses(engine, ticker):
    with engine.connect() as conn:
        rows = conn.execute(
            select(model_registry.c.id, model_registry.c.status)
            .where(model_registry.c.ticker == ticker)
            .order_by(model_registry.c.id)
        ).all()
    return dict(rows)


def test_version_major_per_signature_in_order_of_first_appearance(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    demo = get_profile("demo")
    assert registry.version_major(engine, demo.signature) == 1  # empty registry: the first major
    make_model(engine, s, "AAPL", cfg=demo)
    wider = get_profile("demo", hidden_size=48)
    deeper = get_profile("demo", num_layers=2)
    assert registry.version_major(engine, demo.signature) == 1
    assert registry.version_major(engine, wider.signature) == 2  # unseen: next major
    make_model(engine, s, "NVDA", cfg=wider)
    make_model(engine, s, "AAPL", cfg=demo, seed=5)  # same signature again: still major 1
    make_model(engine, s, "QQQ", cfg=deeper)
    assert registry.version_major(engine, demo.signature) == 1
    assert registry.version_major(engine, wider.signature) == 2
    assert registry.version_major(engine, deeper.signature) == 3
    # Training-only changes keep the signature and so the major.
    assert registry.version_major(engine, get_profile("demo", lr=0.1, max_epochs=2).signature) == 1


def test_promote_copies_verified_file_and_records_events(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    a = make_model(engine, s, "AAPL", seed=1)
    b = make_model(engine, s, "AAPL", seed=2, trained_on=registry.dt.date(2024, 2, 1))
    res = registry.promote(engine, a, "first", s)
    assert res.changed and res.version == "v1.2024-01-02" and res.retired_model_id is None
    path = Path(res.promoted_path)
    assert path.name == "AAPL_ldtm_v1.2024-01-02.pt" and path.parent == s.checkpoint_dir
    assert sha256_file(path) == registry.get_model(engine, a).checkpoint_sha256
    assert not list(s.checkpoint_dir.glob(".tmp-*"))
    res2 = registry.promote(engine, b, "better", s)
    assert res2.retired_model_id == a and res2.version == "v1.2024-02-01"
    assert _statuses(engine, "AAPL") == {a: "retired", b: "active"}
    assert registry.active_model(engine, "AAPL").id == b
    events = [(e.model_id, e.from_status, e.to_status) for e in registry.history(engine, "AAPL")]
    assert events == [
        (a, None, "candidate"),
        (b, None, "candidate"),
        (a, "candidate", "active"),
        (a, "active", "retired"),
        (b, "candidate", "active"),
    ]
    # Promoting the active one again changes nothing.
    assert not registry.promote(engine, b, "again", s).changed
    with pytest.raises(InputError, match="only a candidate"):
        registry.promote(engine, a, "retired one", s)


def test_same_day_same_architecture_gets_a_distinct_version(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    a = make_model(engine, s, "AAPL", seed=1)
    b = make_model(engine, s, "AAPL", seed=2)
    va = registry.promote(engine, a, "x", s).version
    vb = registry.promote(engine, b, "y", s).version
    assert va != vb and vb.startswith(va)
    assert Path(registry.get_model(engine, a).promoted_path).is_file()


def test_corrupt_checkpoint_is_not_promoted(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    a = make_model(engine, s, "AAPL")
    Path(registry.get_model(engine, a).checkpoint_path).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="sha256"):
        registry.promote(engine, a, "x", s)
    assert _statuses(engine, "AAPL") == {a: "candidate"}
    assert not list(s.checkpoint_dir.glob("AAPL_ldtm_*"))


def test_rollback_reactivates_the_most_recently_retired(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ids = [
        make_model(engine, s, "AAPL", seed=i, trained_on=registry.dt.date(2024, 1, 2 + i)) for i in range(3)
    ]
    with pytest.raises(NotFoundError, match="no earlier active model"):
        registry.rollback(engine, "AAPL", "nothing yet")
    for i in ids:
        registry.promote(engine, i, "next", s)
    res = registry.rollback(engine, "AAPL", "bad live numbers")
    assert res.reactivated_model_id == ids[1] and res.retired_model_id == ids[2]
    assert _statuses(engine, "AAPL") == {ids[0]: "retired", ids[1]: "active", ids[2]: "retired"}
    assert registry.history(engine, "AAPL")[-1].reason == "rollback: bad live numbers"


def test_each_rollback_goes_one_activation_further_back(engine, db_url, tmp_path):
    """Models 1, 4, 6 promoted in turn: rollback -> 4, again -> 1 (never 6, the one rolled back)."""
    s = make_settings(tmp_path, db_url)
    ids = [
        make_model(engine, s, "AAPL", seed=i, trained_on=registry.dt.date(2024, 1, 2 + i)) for i in range(3)
    ]
    make_model(engine, s, "NVDA", seed=9)  # another ticker's history must not interfere
    for i in ids:
        registry.promote(engine, i, "next", s)
    first = registry.rollback(engine, "AAPL", "bad live numbers")
    assert (first.reactivated_model_id, first.retired_model_id) == (ids[1], ids[2])
    second = registry.rollback(engine, "AAPL", "still bad")
    assert (second.reactivated_model_id, second.retired_model_id) == (ids[0], ids[1])
    assert _statuses(engine, "AAPL") == {ids[0]: "active", ids[1]: "retired", ids[2]: "retired"}
    with pytest.raises(NotFoundError, match="no earlier active model"):
        registry.rollback(engine, "AAPL", "nothing left")
    assert registry.active_model(engine, "AAPL").id == ids[0]
    # A model promoted after the rollbacks starts a new step: rolling it back returns to ids[0].
    newer = make_model(engine, s, "AAPL", seed=7, trained_on=registry.dt.date(2024, 2, 1))
    registry.promote(engine, newer, "retrained", s)
    assert registry.rollback(engine, "AAPL", "again").reactivated_model_id == ids[0]


def test_rollback_to_a_named_model(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ids = [
        make_model(engine, s, "AAPL", seed=i, trained_on=registry.dt.date(2024, 1, 2 + i)) for i in range(3)
    ]
    never = make_model(engine, s, "AAPL", seed=8, trained_on=registry.dt.date(2024, 1, 20))
    other = make_model(engine, s, "NVDA", seed=9)
    for i in ids:
        registry.promote(engine, i, "next", s)
    for bad, message in (
        (ids[2], "already active"),
        (never, "candidate"),
        (other, "belongs to NVDA"),
        (999, "not in the registry"),
    ):
        with pytest.raises((InputError, NotFoundError), match=message):
            registry.rollback(engine, "AAPL", "x", to_model_id=bad)
    assert _statuses(engine, "AAPL")[ids[2]] == "active"  # nothing changed by the refusals
    res = registry.rollback(engine, "AAPL", "straight to the first", to_model_id=ids[0])
    assert (res.reactivated_model_id, res.retired_model_id) == (ids[0], ids[2])
    # ids[1] was skipped over, so it is rolled back too: nothing earlier remains.
    with pytest.raises(NotFoundError, match="no earlier active model"):
        registry.rollback(engine, "AAPL", "nothing left")


def test_cli_rollback_to(ldtm_env, tmp_path):
    from ldtm_core.config import Settings

    s = Settings.from_env()
    s.ensure_dirs()
    engine = get_engine(ldtm_env["url"])
    ids = [
        make_model(engine, s, "AAPL", seed=i, trained_on=registry.dt.date(2024, 1, 2 + i)) for i in range(3)
    ]
    for i in ids:
        registry.promote(engine, i, "next", s)
    out = CliRunner().invoke(app, ["registry", "rollback", "AAPL", "--to", str(ids[0])])
    assert out.exit_code == 0, out.output
    assert f"model {ids[0]}" in out.output and registry.active_model(engine, "AAPL").id == ids[0]
    again = CliRunner().invoke(app, ["registry", "rollback", "AAPL"])
    assert again.exit_code == 2 and "no earlier active model" in again.output


def test_database_refuses_two_active_models(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    a, b = make_model(engine, s, "AAPL", seed=1), make_model(engine, s, "AAPL", seed=2)
    with engine.begin() as conn:
        conn.execute(update(model_registry).where(model_registry.c.id == a).values(status="active"))
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(update(model_registry).where(model_registry.c.id == b).values(status="active"))


def test_concurrent_promotions_leave_exactly_one_active(pg_url, tmp_path):
    engine = get_engine(pg_url)
    s = make_settings(tmp_path, pg_url)
    ids = [
        make_model(engine, s, "AAPL", seed=i, trained_on=registry.dt.date(2024, 1, 2 + i)) for i in range(6)
    ]
    barrier = threading.Barrier(len(ids))
    errors: list[BaseException] = []

    def go(model_id):
        try:
            barrier.wait()
            registry.promote(engine, model_id, "race", s)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    statuses = _statuses(engine, "AAPL")
    assert list(statuses.values()).count("active") == 1
    assert list(statuses.values()).count("retired") == len(ids) - 1
    with engine.connect() as conn:
        # Every retirement event names a model that was active before: the transitions form one line.
        n_retired_events = conn.execute(
            text("SELECT COUNT(*) FROM registry_events WHERE ticker = 'AAPL' AND to_status = 'retired'")
        ).scalar()
    assert n_retired_events == len(ids) - 1


def test_registry_cli(engine, db_url, tmp_path, ldtm_env):
    s = make_settings(tmp_path, db_url)
    a, b = make_model(engine, s, "AAPL", seed=1), make_model(engine, s, "AAPL", seed=2)
    registry.promote(engine, a, "x", s)
    registry.promote(engine, b, "y", s)
    runner = CliRunner()
    out = runner.invoke(app, ["registry", "list"])
    assert out.exit_code == 0 and "retired" in out.output and "active" in out.output
    out = runner.invoke(app, ["registry", "history", "AAPL"])
    assert out.exit_code == 0 and "candidate" in out.output
    out = runner.invoke(app, ["registry", "rollback", "AAPL", "--reason", "test"])
    assert out.exit_code == 0, out.output
    assert registry.active_model(engine, "AAPL").id == a
    out = runner.invoke(app, ["registry", "rollback", "TSLA"])
    assert out.exit_code == 2 and "no retired model" in out.output


def test_manual_overrides_record_who_made_them_and_notify(ldtm_env, monkeypatch):
    # Issue 38: manual gate overrides and rollbacks recorded no person.
    from test_gate import Hook

    from ldtm_core.config import Settings

    s = Settings.from_env()
    s.ensure_dirs()
    engine = get_engine(ldtm_env["url"])
    a = make_model(engine, s, "AAPL", seed=1, trained_on=registry.dt.date(2024, 1, 2))
    registry.promote(engine, a, "first", s)
    b = make_model(engine, s, "AAPL", seed=2, trained_on=registry.dt.date(2024, 1, 3))
    with Hook() as hook:
        monkeypatch.setenv("LDTM_NOTIFY_WEBHOOK_URL", hook.url)
        monkeypatch.setenv("LDTM_OPERATOR", "alice")
        out = CliRunner().invoke(
            app, ["registry", "promote", "AAPL", "--model-id", str(b), "--reason", "hunch"]
        )
        assert out.exit_code == 0, out.output
        out = CliRunner().invoke(app, ["registry", "rollback", "AAPL", "--by", "bob", "--reason", "bad week"])
        assert out.exit_code == 0, out.output
        reasons = [e.reason for e in registry.history(engine, "AAPL")]
        assert any("manual override of the gate by alice: hunch" in r for r in reasons)
        assert any("bad week (by bob)" in r for r in reasons)
        posted = [body for _type, body in hook.received]
        assert [(p["event"], p["by"], p["model_id"]) for p in posted] == [
            ("manual promotion", "alice", b),
            ("manual rollback", "bob", a),
        ]
    monkeypatch.setenv("LDTM_OPERATOR", " ")
    bad = CliRunner().invoke(app, ["registry", "rollback", "AAPL", "--by", "x" * 65])
    assert bad.exit_code == 2 and "--by" in bad.output
