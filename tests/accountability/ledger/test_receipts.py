"""Receipts outside the database and the outsider's verifier (ledger.receipts, record_export,
record_verify): signed, chained receipts after each evening; an export checked with the public key
alone; and an attacker with full database access, the audit key and the anchors, caught by name."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from ldtm_core.accountability.ledger import receipt_sink as rs
from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import AUDIT_KEY_ENV, row_hash
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.record_export import export_record
from ldtm_core.accountability.ledger.record_verify import assurance, verify_record
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.db import lift_append_only
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.schema import run_log, snapshots

TICKERS = ["AAPL", "QQQ"]
AUDIT_KEY = "s3cret-audit-key"


@pytest.fixture
def record(engine, db_url, tmp_path, monkeypatch, keys):
    """Eight evenings of two tickers, predicted under the audit key with receipts, then filled back."""
    monkeypatch.setenv(AUDIT_KEY_ENV, AUDIT_KEY)
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, TICKERS)
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    dates = sorted(df["date"].unique())[-30:-22]  # later prices: every row fills
    for d in dates:
        assert predict(engine, settings, run_date=d).receipt is not None
    fillback(engine)
    return settings, dates


def _check(engine, tmp_path, keys, name="export"):
    out = tmp_path / name
    export_record(engine, out)
    return verify_record(out, tmp_path / "receipts", rc.load_public_key(keys[1]))


def _edit(factor: float) -> dict:
    """An edit of the one-month prediction, with the error an editor rewrites so the fills still agree."""
    c = snapshots.c
    pred = c.one_month_pred * factor
    return {
        "one_month_pred": pred,
        "one_month_pct_error": (pred - c.one_month_actual) / c.one_month_actual * 100.0,
    }


def _found(report) -> set[tuple[str, str, str]]:
    return {(f.kind, f.ticker, f.run_date) for f in report.findings}


def test_keygen_keeps_the_private_half_to_its_owner_and_never_overwrites(tmp_path, keys):
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert (
        rc.load_private_key(private).public_key().public_bytes_raw()
        == rc.load_public_key(public).public_bytes_raw()
    )
    with pytest.raises(ConfigError, match="is never overwritten"):
        rc.keygen(private, tmp_path / "other.pub")
    os.chmod(private, 0o644)
    with pytest.raises(ConfigError, match="readable by group or others"):
        rc.load_private_key(private)


def test_each_evening_gets_one_signed_receipt_chained_to_the_one_before(engine, tmp_path, keys, record):
    settings, dates = record
    receipts = rc.read_receipts(tmp_path / "receipts")
    assert [r.body["run_date"] for r in receipts] == [d.isoformat() for d in dates]
    public = rc.load_public_key(keys[1])
    assert all(r.verifies(public) for r in receipts)
    assert [r.body["previous"] for r in receipts] == ["", *(r.sha256 for r in receipts[:-1])]
    with engine.connect() as conn:
        rows = conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all()
    listed = [e for r in receipts for e in r.body["rows"]]
    assert [e[0] for e in listed] == [r["id"] for r in rows]  # every row once, in order
    assert all(e[4] == r["row_hash"] for e, r in zip(listed, rows, strict=True))
    assert receipts[0].body["merkle_root"] == rc.merkle_root(receipts[0].body["rows"])
    # A rerun of an evening writes no row, and no receipt.
    assert predict(engine, settings, run_date=dates[-1]).receipt is None
    assert len(rc.read_receipts(tmp_path / "receipts")) == len(dates)
    # A tampered receipt no longer verifies.
    doc = json.loads(receipts[2].path.read_text())
    doc["body"]["rows"][0][3] = "0" * 64
    receipts[2].path.write_text(json.dumps(doc))
    assert not rc.read_receipts(tmp_path / "receipts")[2].verifies(public)


def test_an_untouched_record_verifies_with_the_public_key_alone(engine, tmp_path, keys, record, monkeypatch):
    _, dates = record
    monkeypatch.delenv(AUDIT_KEY_ENV)  # the outsider has no secret
    report = _check(engine, tmp_path, keys)
    assert report.ok, report.findings
    assert report.rows == report.covered == report.replay == 2 * len(dates) and report.receipts == len(dates)
    board = report.board.set_index("ticker")
    with engine.connect() as conn:
        for t in TICKERS:
            hits = (
                conn.execute(select(snapshots.c.next_day_direction_correct).where(snapshots.c.ticker == t))
                .scalars()
                .all()
            )
            decided = [h for h in hits if h is not None]
            assert board.loc[t, "decided"] == len(decided) and board.loc[t, "right"] == sum(decided)
    assert any("Not proved" in line for line in assurance(report))


def test_an_attacker_with_the_database_and_the_audit_key_is_caught_by_name(engine, tmp_path, keys, record):
    _, dates = record
    gone, edited = dates[3], dates[5]
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        # 1. Delete a published evening and its anchors.
        ids = conn.execute(select(snapshots.c.id).where(snapshots.c.run_date == gone)).scalars().all()
        conn.execute(text("DELETE FROM snapshots WHERE run_date = :d"), {"d": gone})
        conn.execute(update(run_log).values(chain_heads_json=None))  # 4. wipe every anchor
        # 2. Edit one prediction (and its error, so the fills still agree).
        aapl = (snapshots.c.ticker == "AAPL", snapshots.c.run_date == edited)
        conn.execute(update(snapshots).where(*aapl).values(_edit(1.02)))
        # 3. Rewrite QQQ's whole chain with the audit key, so every hash and link is consistent again.
        conn.execute(update(snapshots).where(snapshots.c.ticker == "QQQ").values(_edit(1.1)))
        for ticker in TICKERS:
            prev = ""
            rows = conn.execute(
                select(snapshots).where(snapshots.c.ticker == ticker).order_by(snapshots.c.id)
            )
            for r in rows.mappings().all():
                h = row_hash(prev, r, AUDIT_KEY.encode())
                conn.execute(
                    update(snapshots).where(snapshots.c.id == r["id"]).values(prev_hash=prev, row_hash=h)
                )
                prev = h
    # The database's own audit passes: every check it has lives where the attacker was.
    assert verify(engine).ok
    report = _check(engine, tmp_path, keys)
    found = _found(report)
    assert {("removed", t, gone.isoformat()) for t in TICKERS} <= found
    assert ("edited", "AAPL", edited.isoformat()) in found
    assert {("edited", "QQQ", d.isoformat()) for d in dates if d != gone} <= found
    assert len(ids) == 2 and report.covered < report.rows
    assert not report.ok


def test_a_receipt_that_cannot_be_written_fails_the_evening_and_the_next_covers_it(
    engine, db_url, tmp_path, keys, monkeypatch
):
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    d1, d2 = sorted(df["date"].unique())[-5:-3]
    (tmp_path / "receipts").write_text("not a folder")  # the sink is broken
    with pytest.raises(rc.ReceiptError, match="cannot be written"):
        predict(engine, settings, run_date=d1)
    with engine.connect() as conn:
        status = conn.execute(select(run_log.c.status).where(run_log.c.kind == "predict")).scalar_one()
    assert status == "failed"  # loudly: the run failed, the alert says why
    (tmp_path / "receipts").unlink()
    receipt = predict(engine, settings, run_date=d2).receipt
    assert receipt.body["run_dates"] == [d1.isoformat(), d2.isoformat()] and len(receipt.body["rows"]) == 2


def test_rotation_and_a_key_nobody_introduced(engine, tmp_path, keys, record, monkeypatch):
    settings, dates = record
    sink = rc.Sink.configured()
    new_private, new_public = tmp_path / "keys" / "next.pem", tmp_path / "keys" / "next.pub"
    rc.keygen(new_private, new_public)
    rc.rotate(sink, rc.load_private_key(keys[0]), rc.load_private_key(new_private).public_key())
    monkeypatch.setenv(rc.KEY_ENV, str(new_private))
    later = sorted(d for d in ingest_dates(engine) if d > dates[-1])[0]
    receipt = predict(engine, settings, run_date=later).receipt
    assert receipt.body["key_id"] == rc.key_id(rc.load_public_key(new_public))
    report = _check(engine, tmp_path, keys, "after_rotation")
    assert report.ok, report.findings
    assert len(report.keys) == 2
    # A key no receipt introduced is refused before the evening writes; signed anyway (a patched copy of
    # the code), its receipts are findings, and their rows uncovered.
    rogue, rogue_public = tmp_path / "keys" / "rogue.pem", tmp_path / "keys" / "rogue.pub"
    rc.keygen(rogue, rogue_public)
    monkeypatch.setenv(rc.KEY_ENV, str(rogue))
    later2 = sorted(d for d in ingest_dates(engine) if d > later)[0]
    with pytest.raises(ConfigError, match="not the chain's current key"):
        predict(engine, settings, run_date=later2)
    monkeypatch.setattr(rc, "_check_current", lambda *_: None)
    predict(engine, settings, run_date=later2)
    report = _check(engine, tmp_path, keys, "rogue")
    assert ("receipt", "", later2.isoformat()) in _found(report)
    assert {("uncovered", t, later2.isoformat()) for t in TICKERS} <= _found(report)


def ingest_dates(engine):
    import pandas as pd

    with engine.connect() as conn:
        return [
            pd.Timestamp(d).date() for d in conn.execute(text("SELECT DISTINCT date FROM prices")).scalars()
        ]


def test_a_live_row_is_late_when_its_receipt_follows_its_first_target():
    import datetime as dt

    from ldtm_core.accountability.ledger.record_verify import late

    row = {"next_day_date": dt.date(2024, 4, 2)}  # a Tuesday: closes 20:00 UTC (16:00 New York, EDT)
    assert not late(row, dt.datetime(2024, 4, 2, 19, 59, tzinfo=dt.UTC))
    assert late(row, dt.datetime(2024, 4, 2, 20, 0, tzinfo=dt.UTC))


def test_a_lost_receipts_sink_leaves_the_chain_and_says_what_was_lost(engine, tmp_path, keys, record):
    out = tmp_path / "export"
    export_record(engine, out)
    with pytest.raises(InputError, match="nowhere: no such folder"):  # a mistyped folder is not "lost"
        verify_record(out, tmp_path / "nowhere", rc.load_public_key(keys[1]))
    (tmp_path / "nowhere").mkdir()
    report = verify_record(out, tmp_path / "nowhere", rc.load_public_key(keys[1]))
    assert report.receipts == 0 and {f.kind for f in report.findings} == {"uncovered"}
    assert any("Nothing outside the database" in line for line in assurance(report))
    assert verify(engine).ok  # the database alone still verifies its chain


def test_a_git_sink_commits_each_receipt(engine, db_url, tmp_path, keys, monkeypatch):
    repo = tmp_path / "receipts"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for k, v in (("user.email", "ldtm@localhost"), ("user.name", "ldtm")):
        subprocess.run(["git", "-C", str(repo), "config", k, v], check=True)
    monkeypatch.setenv(rc.DIR_ENV, str(repo))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    monkeypatch.setenv(rs.GIT_ENV, "true")
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    for d in sorted(df["date"].unique())[-4:-2]:
        predict(engine, settings, run_date=d)
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    assert log.stdout.splitlines() == [
        "receipt 2: evening " + str(sorted(df["date"].unique())[-3])[:10],
        "receipt 1: evening " + str(sorted(df["date"].unique())[-4])[:10],
    ]


def test_a_git_sink_pushes_each_commit_and_a_failed_push_fails_the_evening(
    engine, db_url, tmp_path, keys, monkeypatch
):
    repo, remote = tmp_path / "receipts", tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for k, v in (("user.email", "ldtm@localhost"), ("user.name", "ldtm")):
        subprocess.run(["git", "-C", str(repo), "config", k, v], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "witness", str(remote)], check=True)
    monkeypatch.setenv(rc.DIR_ENV, str(repo))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    monkeypatch.setenv(rs.GIT_ENV, "true")
    monkeypatch.setenv(rs.REMOTE_ENV, "witness")
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    days = sorted(df["date"].unique())[-5:-2]
    # A default bare remote takes `push -f`: the newest receipts could be replaced there. Refused before
    # the evening writes, naming the setting that fixes it.
    with pytest.raises(ConfigError, match="accepts forced pushes.*receive.denyNonFastForwards"):
        predict(engine, settings, run_date=days[0])
    assert not engine.connect().execute(select(snapshots.c.id)).first()
    subprocess.run(["git", "-C", str(remote), "config", "receive.denyNonFastForwards", "true"], check=True)
    predict(engine, settings, run_date=days[0])

    def pushed() -> list[str]:
        out = subprocess.run(
            ["git", "-C", str(remote), "log", "--format=%s"], capture_output=True, text=True, check=False
        )
        return out.stdout.splitlines()

    assert pushed() == ["receipt 1: evening " + str(days[0])[:10]]
    # The remote gone: the evening fails by name, its receipt committed here; the next push carries it.
    remote.rename(tmp_path / "away.git")
    with pytest.raises(rc.ReceiptError, match="committed but not pushed to witness"):
        predict(engine, settings, run_date=days[1])
    (tmp_path / "away.git").rename(remote)
    predict(engine, settings, run_date=days[2])
    assert [line.split(": ")[0] for line in pushed()] == ["receipt 3", "receipt 2", "receipt 1"]
    monkeypatch.delenv(rs.GIT_ENV)
    with pytest.raises(ConfigError, match="only a git sink is pushed"):
        rc.Sink.configured()


def test_the_cli_exports_and_verifies(engine, db_url, tmp_path, keys, record, monkeypatch):
    monkeypatch.delenv(AUDIT_KEY_ENV)
    env = {"LDTM_DATABASE_URL": db_url, "LDTM_HOME": str(tmp_path)}
    out = CliRunner().invoke(app, ["audit", "export", str(tmp_path / "cli_export")], env=env)
    assert out.exit_code == 0, out.output
    ok = CliRunner().invoke(
        app,
        [
            "verify-record",
            str(tmp_path / "cli_export"),
            str(tmp_path / "receipts"),
            "--public-key",
            str(keys[1]),
        ],
        env=env,
    )
    assert ok.exit_code == 0 and "verify-record ok" in ok.output, ok.output
    again = CliRunner().invoke(app, ["audit", "export", str(tmp_path / "cli_export")], env=env)
    assert again.exit_code != 0 and "is not empty" in again.output


def test_a_seed_in_the_environment_signs_like_a_key_file(engine, db_url, tmp_path, monkeypatch):
    seed = "correct horse battery staple, x 32+"
    monkeypatch.setenv(rc.SEED_ENV, seed)
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    env = {"LDTM_DATABASE_URL": db_url, "LDTM_HOME": str(tmp_path)}
    out = CliRunner().invoke(app, ["receipts", "public-key"], env=env)
    assert out.exit_code == 0, out.output
    (tmp_path / "seed.pub").write_text(out.output)
    public = rc.load_public_key(tmp_path / "seed.pub")
    assert rc.key_id(public) == rc.key_id(rc.key_from_seed(seed).public_key())
    assert rc.key_id(public) != rc.key_id(rc.key_from_seed(seed.replace("x", "y")).public_key())
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    receipt = predict(engine, settings, run_date=sorted(df["date"].unique())[-3]).receipt
    assert receipt is not None and receipt.verifies(public)
    # A short seed, 40 blanks (accepted before), a repeated character, or a seed and a key file at once,
    # is refused by name.
    for weak in ("short", " " * 40, "x" * 40):
        monkeypatch.setenv(rc.SEED_ENV, weak)
        with pytest.raises(ConfigError, match="LDTM_RECEIPT_KEY: 32 characters or more of random text"):
            rc.signing_key()
    monkeypatch.setenv(rc.SEED_ENV, seed)
    monkeypatch.setenv(rc.KEY_ENV, str(tmp_path / "any.pem"))
    with pytest.raises(ConfigError, match="not both"):
        rc.signing_key()


def test_rotation_to_a_seed_from_the_environment(engine, db_url, tmp_path, keys, record, monkeypatch):
    settings, dates = record
    env = {"LDTM_DATABASE_URL": db_url, "LDTM_HOME": str(tmp_path)}
    next_seed = "the next seed: n0t a real one, 32+ chars"
    monkeypatch.setenv("NEXT_SEED", next_seed)
    out = CliRunner().invoke(app, ["receipts", "rotate", "--new-seed-from", "NEXT_SEED"], env=env)
    assert out.exit_code == 0 and "set LDTM_RECEIPT_KEY to the value of NEXT_SEED" in out.output, out.output
    assert next_seed not in out.output  # the secret is never echoed
    monkeypatch.delenv(rc.KEY_ENV)
    monkeypatch.setenv(rc.SEED_ENV, next_seed)
    later = sorted(d for d in ingest_dates(engine) if d > dates[-1])[0]
    assert predict(engine, settings, run_date=later).receipt is not None
    report = _check(engine, tmp_path, keys, "after_seed_rotation")
    assert report.ok and len(report.keys) == 2, report.findings
    both = CliRunner().invoke(app, ["receipts", "rotate"], env=env)
    assert both.exit_code != 0 and "one of them" in both.output
    # Errors name the option that gave the next key, not the signing key's setting (as they did).
    monkeypatch.setenv("NEXT_SEED", " " * 40)
    for args, said in (
        (["--new-seed-from", "NEXT_SEED"], "--new-seed-from NEXT_SEED: 32 characters or more"),
        (["--new-key", str(tmp_path / "none.pem")], f"--new-key {tmp_path / 'none.pem'}: no such file"),
    ):
        out = CliRunner().invoke(app, ["receipts", "rotate", *args], env=env)
        assert out.exit_code == 2 and said in " ".join(out.output.split()), out.output


def test_a_ticker_filtered_export_verifies_as_partial_and_says_so(engine, tmp_path, keys, record):
    _, dates = record
    export_record(engine, tmp_path / "aapl", ["AAPL"])
    report = verify_record(tmp_path / "aapl", tmp_path / "receipts", rc.load_public_key(keys[1]))
    assert report.ok, report.findings  # on main: every QQQ row "removed"
    assert report.covered == len(dates) and report.not_exported == len(dates)
    assert any(
        "holds only AAPL" in line and f"{len(dates)} row(s) of other tickers" in line
        for line in assurance(report)
    )
    # Its AAPL rows are still checked: one removed from the export is found.
    lift_append_only(engine)
    with engine.begin() as conn:
        conn.execute(snapshots.delete().where(snapshots.c.ticker == "AAPL", snapshots.c.run_date == dates[2]))
    export_record(engine, tmp_path / "aapl2", ["AAPL"])
    report = verify_record(tmp_path / "aapl2", tmp_path / "receipts", rc.load_public_key(keys[1]))
    assert ("removed", "AAPL", dates[2].isoformat()) in _found(report)


def test_a_revised_close_and_re_fill_are_shown_and_without_their_log_are_findings(
    engine, tmp_path, keys, record
):
    """The app role's attack: revise a close an answer used, run the project's own re-fill. The signed
    evening close contradicts the export; the logged re-fill explains it and the revision is shown apart
    (accuracy on the original answers beside the revised ones); with the log deleted, it is a finding."""
    import datetime as dt

    from ldtm_core.accountability.ledger.refill import refill
    from ldtm_core.schema import fill_revisions, prices

    _, dates = record
    day = dates[4]  # an evening whose close is also the next-day target of dates[3]
    with engine.begin() as conn:
        signed = conn.execute(
            select(prices.c.close).where(prices.c.ticker == "AAPL", prices.c.date == day)
        ).scalar_one()
        conn.execute(
            update(prices)
            .where(prices.c.ticker == "AAPL", prices.c.date == day)
            .values(close=signed * 1.2, ingested_at=dt.datetime.now(dt.UTC))
        )
    assert refill(engine).refilled
    report = _check(engine, tmp_path, keys, "revised")
    assert report.ok, report.findings  # explained by its log: not a finding ...
    assert report.revised_closes == 1 and report.revised_answers >= 1  # ... but shown
    line = next(x for x in assurance(report) if x.startswith("Answers revised after publication"))
    assert f"{report.revised_answers}; next-day directions changed: {report.directions_changed}" in line
    aapl = report.board.set_index("ticker").loc["AAPL"]
    with engine.connect() as conn:
        old = conn.execute(
            select(fill_revisions.c.old_actual).where(fill_revisions.c.horizon == "next_day")
        ).scalar_one()
    assert old == pytest.approx(signed)  # the original answer was the signed close
    assert abs(aapl["right_original"] - aapl["right"]) == report.directions_changed  # one answer revised
    # Without the log, the same export is a finding naming ticker, evening and both closes.
    lift_append_only(engine)
    with engine.begin() as conn:
        conn.execute(fill_revisions.delete())
    report = _check(engine, tmp_path, keys, "unlogged")
    closes = [f for f in report.findings if f.kind == "close"]
    assert [(f.ticker, f.run_date) for f in closes] == [("AAPL", day.isoformat())], report.findings
    assert repr(signed * 1.2) in closes[0].detail and repr(signed) in closes[0].detail


def test_replays_written_after_the_live_evenings_are_named_and_kept_off_the_board(
    engine, db_url, tmp_path, keys, monkeypatch
):
    """The app role's attack: hindsight rows for past evenings, written with the project's own replay
    after three live evenings, which the next receipts sign. The verifier passes them (they are what
    they say), names each ticker's replayed evenings under `replay`, and scores the board on the live
    rows alone, as the leaderboard does; before, they counted in its accuracy."""
    import pandas as pd

    from ldtm_core.data.ingest import ingest_frame
    from ldtm_core.data.synthetic_market import generate
    from ldtm_core.schema import model_registry

    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    settings = make_settings(tmp_path, db_url)
    df = generate(TICKERS, "2024-01-02", "2024-06-28", seed=7)
    days = sorted(df["date"].unique())
    live, hindsight = days[-8:-5], days[-20:-14]
    ingest_frame(engine, df[df["date"] <= live[0]], "synthetic")
    for i, t in enumerate(TICKERS):
        make_model(engine, settings, t, seed=i)
    with engine.begin() as conn:  # gated: the board's rows
        conn.execute(update(model_registry).values(status="active"))
    for d in live:  # each evening predicted with no later price stored, its receipt issued that night
        ingest_frame(engine, df[df["date"] <= d], "synthetic")
        monkeypatch.setattr(rc, "_now", lambda d=d: f"{pd.Timestamp(d):%Y-%m-%d}T23:00:00.000000Z")
        assert predict(engine, settings, run_date=d).mode == "live"
    monkeypatch.undo()  # the replays are written, and receipted, today
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    ingest_frame(engine, df, "synthetic")
    for d in hindsight:
        assert predict(engine, settings, run_date=d).mode == "replay"
    fillback(engine)
    report = _check(engine, tmp_path, keys)
    assert report.ok and report.replay == len(TICKERS) * len(hindsight), report.findings
    board = report.board.set_index(["group", "ticker"])
    col = snapshots.c.next_day_direction_correct
    with engine.connect() as conn:
        for t in TICKERS:
            hits = conn.execute(
                select(col).where(snapshots.c.ticker == t, snapshots.c.mode == "live")
            ).scalars()
            decided = [h for h in hits if h is not None]
            assert (board.loc[("board", t), "decided"], board.loc[("board", t), "right"]) == (
                len(decided),
                sum(decided),
            )
            replay = board.loc[("replay", t)]
            assert (replay["rows"], replay["first"], replay["last"]) == (
                len(hindsight),
                hindsight[0],
                hindsight[-1],
            )
    code, out = _verify_cli(tmp_path, keys, tmp_path / "export")
    named = f"│ replay │ {TICKERS[0]} │ {hindsight[0]} – {hindsight[-1]} │ {len(hindsight)} │"
    assert code == 0 and named in out, out


def _verify_cli(tmp_path, keys, export, *more):
    args = ["verify-record", str(export), str(tmp_path / "receipts"), "--public-key", str(keys[1]), *more]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    return out.exit_code, " ".join(out.output.split())


def test_the_newest_evening_removed_is_caught_only_against_a_kept_checkpoint(engine, tmp_path, keys, record):
    settings, dates = record
    export_record(engine, tmp_path / "first")
    code, text = _verify_cli(tmp_path, keys, tmp_path / "first", "--checkpoint", str(tmp_path / "kept.json"))
    assert code == 0 and f"checkpoint: receipt {len(dates)} ({dates[-1]})" in text, text
    # The attack: the last evening's rows and its receipt file deleted.
    lift_append_only(engine)
    with engine.begin() as conn:
        conn.execute(snapshots.delete().where(snapshots.c.run_date == dates[-1]))
    sorted((tmp_path / "receipts").glob(f"*{rc.SUFFIX}"))[-1].unlink()
    export_record(engine, tmp_path / "cut")
    code, text = _verify_cli(tmp_path, keys, tmp_path / "cut")
    assert code == 0, text  # without a checkpoint nothing shows it, and the report says so:
    assert f"Not ruled out: evenings after receipt {len(dates) - 1} ({dates[-2]}) removed" in text
    kept = (tmp_path / "kept.json").read_text()
    code, text = _verify_cli(tmp_path, keys, tmp_path / "cut", "--checkpoint", str(tmp_path / "kept.json"))
    assert code == 1 and f"checkpoint: - {dates[-1]}: the checkpoint kept at receipt {len(dates)}" in text, (
        text
    )
    assert "evenings were removed" in text and (tmp_path / "kept.json").read_text() == kept  # not replaced


def test_a_checkpoint_moves_forward_with_each_evening_by_a_consistency_proof(engine, tmp_path, keys, record):
    settings, dates = record
    export_record(engine, tmp_path / "first")
    assert (
        _verify_cli(tmp_path, keys, tmp_path / "first", "--checkpoint", str(tmp_path / "kept.json"))[0] == 0
    )
    later = sorted(d for d in ingest_dates(engine) if d > dates[-1])[:2]
    for d in later:
        predict(engine, settings, run_date=d)
    export_record(engine, tmp_path / "next")
    code, text = _verify_cli(tmp_path, keys, tmp_path / "next", "--checkpoint", str(tmp_path / "kept.json"))
    assert code == 0 and f"extends the checkpoint kept at receipt {len(dates)}" in text, text
    assert f"checkpoint: receipt {len(dates) + 2} ({later[-1]})" in text
    receipts = rc.read_receipts(tmp_path / "receipts")
    assert [r.body["tree_size"] for r in receipts] == [2 * (i + 1) for i in range(len(dates) + 2)]
    # A chain begun before receipts carried tree heads: the tree is rebuilt from the rows, the same.
    legacy = rc.Receipt(
        receipts[-1].path, {k: v for k, v in receipts[-1].body.items() if k != "frontier"}, "", ""
    )
    assert rc.tree_after(tmp_path / "receipts", legacy).root().hex() == receipts[-1].body["tree_root"]
