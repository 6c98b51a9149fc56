"""Receipt settings are checked before an evening writes anything, and only the chain's current key signs:
a wrong setting used to fail the run after its rows were written (left uncovered), and another key
signed the evening and broke the chain for every later check."""

from __future__ import annotations

import subprocess

import pytest
from accountability_helpers import ingest, make_model, make_settings
from sqlalchemy import func, select

from ldtm_core.accountability.ledger import receipt_sink as rs
from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger.record_export import export_record
from ldtm_core.accountability.ledger.record_verify import verify_record
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.accountability.ledger.timestamps import URL_ENV
from ldtm_core.errors import ConfigError
from ldtm_core.schema import run_log, snapshots

SEED = "a-seed-of-forty-characters-for-the-test-0"


def _counts(engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(snapshots)).scalar(),
            conn.execute(select(func.count()).select_from(run_log)).scalar(),
        )


@pytest.fixture
def evening(engine, db_url, tmp_path):
    """(settings, the evenings to predict) of one ticker with a model, receipts not configured yet."""
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    return settings, sorted(df["date"].unique())[-30:-26]


def _not_a_repo(tmp_path, mp):
    (tmp_path / "receipts").mkdir()
    mp.setenv(rs.GIT_ENV, "true")


def _no_git(tmp_path, mp):
    mp.setenv(rs.GIT_ENV, "true")
    mp.setenv("PATH", str(tmp_path / "empty_bin"))


# (what is wrong, how it is set, what the error names); each with LDTM_RECEIPTS_DIR set.
BAD = [
    ("no key", lambda tmp, mp: None, rc.KEY_ENV),
    ("a short seed", lambda tmp, mp: mp.setenv(rc.SEED_ENV, "short"), rc.SEED_ENV),
    ("both key settings", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), mp.setenv(rc.KEY_ENV, "k.pem")), "not both"),
    ("a missing key file", lambda tmp, mp: mp.setenv(rc.KEY_ENV, str(tmp / "nokey.pem")), "nokey.pem"),
    ("a remote without git", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), mp.setenv(rs.REMOTE_ENV, "origin")), rs.GIT_ENV),
    ("an ftp TSA", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), mp.setenv(URL_ENV, "ftp://tsa.example")), URL_ENV),
    ("a TSA without a host", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), mp.setenv(URL_ENV, "https://")), URL_ENV),
    ("a folder that is not a git repository", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), _not_a_repo(tmp, mp)), "not a git repository"),
    ("git not installed", lambda tmp, mp: (mp.setenv(rc.SEED_ENV, SEED), _no_git(tmp, mp)), "git"),
]  # fmt: skip


@pytest.mark.parametrize("name,setting,names", BAD, ids=[b[0] for b in BAD])
def test_a_wrong_receipt_setting_stops_the_evening_before_it_writes(
    engine, evening, tmp_path, monkeypatch, name, setting, names
):
    settings, days = evening
    for var in (rc.KEY_ENV, rc.SEED_ENV, rs.GIT_ENV, rs.REMOTE_ENV, URL_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    setting(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match=names):
        predict(engine, settings, run_date=days[0])
    assert _counts(engine) == (0, 0), f"{name}: the evening wrote before its receipt settings were checked"


def test_only_the_chains_current_key_signs_and_rotation_changes_it(
    engine, evening, tmp_path, monkeypatch, keys
):
    settings, days = evening
    sink = tmp_path / "receipts"
    monkeypatch.setenv(rc.DIR_ENV, str(sink))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    predict(engine, settings, run_date=days[0])
    written = _counts(engine)
    # Another key (a seed set by mistake instead of the file) is refused before a row is written.
    monkeypatch.delenv(rc.KEY_ENV)
    monkeypatch.setenv(rc.SEED_ENV, SEED)
    other = rc.key_id(rc.key_from_seed(SEED).public_key())
    with pytest.raises(
        ConfigError, match=f"{other}.*not the chain's current key {rc.key_id(rc.load_public_key(keys[1]))}"
    ):
        predict(engine, settings, run_date=days[1])
    assert _counts(engine) == written and len(rc.read_receipts(sink)) == 1
    with pytest.raises(ConfigError, match="not the chain's current key"):
        rc.issue(engine, rc.Sink.configured(), rc.key_from_seed(SEED))
    # Rotation by the current key makes the seed's key current: it then signs, and the record verifies.
    rc.rotate(rc.Sink(sink), rc.load_private_key(keys[0]), rc.key_from_seed(SEED).public_key())
    predict(engine, settings, run_date=days[1])
    export_record(engine, tmp_path / "export")
    report = verify_record(tmp_path / "export", sink, rc.load_public_key(keys[1]))
    assert report.receipts == 2 and not [f for f in report.findings if f.kind == "receipt"], report.findings


def test_keygen_refuses_one_path_for_both_halves_and_leaves_nothing_when_it_fails(tmp_path):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    same = CliRunner().invoke(
        app, ["receipts", "keygen", "--private", str(tmp_path / "k.pem"), "--public", str(tmp_path / "k.pem")]
    )
    assert same.exit_code == 2 and "the same file" in same.output and "keep it secret" not in same.output
    assert not (tmp_path / "k.pem").exists()
    (tmp_path / "locked").write_text("a file where a folder belongs (root writes anywhere else)\n")
    args = [
        "receipts",
        "keygen",
        "--private",
        str(tmp_path / "k.pem"),
        "--public",
        str(tmp_path / "locked" / "sub" / "k.pub"),
    ]
    failed = CliRunner().invoke(app, args)
    text = " ".join(failed.output.split())
    assert failed.exit_code == 2 and "locked/sub" in text and failed.exception.__class__ is SystemExit, text
    assert not (tmp_path / "k.pem").exists(), (
        "the private half was left behind: the same command cannot be retried"
    )
    (tmp_path / "locked").unlink()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "keep it secret" in again.output, again.output
    assert (
        rc.load_private_key(tmp_path / "k.pem").public_key().public_bytes_raw()
        == rc.load_public_key(tmp_path / "locked" / "sub" / "k.pub").public_bytes_raw()
    )


def test_receipts_check_says_what_it_checked(tmp_path, monkeypatch, keys):
    from typer.testing import CliRunner

    from ldtm_core.cli import app

    repo, remote = tmp_path / "receipts", tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "witness", str(remote)], check=True)
    env = {rc.DIR_ENV: str(repo), rc.KEY_ENV: str(keys[0]), rs.GIT_ENV: "true", rs.REMOTE_ENV: "witness"}
    out = CliRunner().invoke(app, ["receipts", "check"], env=env)
    assert out.exit_code == 2 and "accepts forced pushes" in " ".join(out.output.split()), out.output
    subprocess.run(["git", "-C", str(remote), "config", "receive.denyNonFastForwards", "true"], check=True)
    out = CliRunner().invoke(app, ["receipts", "check"], env=env)
    text = " ".join(out.output.split())
    assert out.exit_code == 0 and "refuses forced pushes" in text and "receipts: ok" in text, text


def test_a_mirror_holds_every_receipt_and_catches_up_after_a_failed_copy(
    engine, evening, tmp_path, monkeypatch, keys
):
    settings, days = evening
    sink, mirror = tmp_path / "receipts", tmp_path / "mirror"
    monkeypatch.setenv(rc.DIR_ENV, str(sink))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    monkeypatch.setenv(rs.MIRROR_ENV, str(mirror))
    predict(engine, settings, run_date=days[0])
    mirror.rename(tmp_path / "away")
    mirror.write_text("the mirror's disk is gone\n")  # a file where the folder belongs: the copy fails
    with pytest.raises(rc.ReceiptError, match="not mirrored to"):
        predict(engine, settings, run_date=days[1])
    mirror.unlink()
    (tmp_path / "away").rename(mirror)
    predict(engine, settings, run_date=days[2])  # carries the missed receipt over
    names = sorted(p.name for p in sink.iterdir())
    assert len(names) == 3 and sorted(p.name for p in mirror.iterdir()) == names
    assert all((sink / n).read_bytes() == (mirror / n).read_bytes() for n in names)
    export_record(engine, tmp_path / "export")
    assert verify_record(tmp_path / "export", mirror, rc.load_public_key(keys[1])).ok  # either copy verifies
    monkeypatch.setenv(rs.MIRROR_ENV, str(sink))
    with pytest.raises(ConfigError, match="a second, independent folder"):
        rc.Sink.configured()


def test_the_signer_alone_holds_the_key_and_signs_as_a_read_only_role(
    engine, db_url, evening, tmp_path, monkeypatch
):
    """Issue 61, finding 1: the key went to every process that writes rows. Now the writers record without
    it and `ldtm receipts watch` (the compose stack's ldtm_signer) signs what they committed, as a role that
    may only read (on PostgreSQL: SELECT alone), logging each signature; the export verifies."""
    import uuid

    from sqlalchemy import make_url, text
    from typer.testing import CliRunner

    from ldtm_core.cli import app
    from ldtm_core.db import get_engine

    settings, days = evening
    for var in (rc.KEY_ENV, rc.SEED_ENV, rc.DIR_ENV, URL_ENV):
        monkeypatch.delenv(var, raising=False)
    for day in days[:2]:
        predict(engine, settings, run_date=day)  # the writer: no receipt settings, no key
    rows = _counts(engine)[0]
    url = db_url
    if engine.dialect.name == "postgresql":  # the signer's role: it reads, nothing more
        role = f"signer_{uuid.uuid4().hex[:8]}"
        with engine.begin() as conn:
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
            conn.execute(text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
            conn.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"'))
        url = make_url(db_url).set(username=role).render_as_string(hide_password=False)
    env = {rc.DIR_ENV: str(tmp_path / "receipts"), rc.SEED_ENV: SEED, "LDTM_DATABASE_URL": url,
           "LDTM_HOME": str(tmp_path / "signer")}  # fmt: skip
    try:
        beat = tmp_path / "beat" / "signer.heartbeat"
        first = CliRunner().invoke(app, ["receipts", "watch", "--once", "--heartbeat", str(beat)], env=env)
        text_ = " ".join(first.output.split())
        assert first.exit_code == 0 and f"signed receipt 1 with key {rc.key_id(rc.key_from_seed(SEED).public_key())}" in text_, text_  # fmt: skip
        assert f"rows 1-{rows} ({rows})" in text_ and beat.exists()  # the healthcheck's file
        again = CliRunner().invoke(app, ["receipts", "watch", "--once"], env=env)
        assert again.exit_code == 0 and "signed receipt" not in again.output
        if engine.dialect.name == "postgresql":  # the role it signed as could not have written a row
            with get_engine(url).connect() as conn, pytest.raises(Exception, match="permission denied"):
                conn.execute(text("UPDATE snapshots SET row_hash = row_hash"))
    finally:
        if engine.dialect.name == "postgresql":
            get_engine(url).dispose()
            with engine.begin() as conn:
                conn.execute(text(f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{role}"'))
                conn.execute(text(f'REVOKE USAGE ON SCHEMA public FROM "{role}"'))
                conn.execute(text(f'DROP ROLE "{role}"'))
    export_record(engine, tmp_path / "export")
    monkeypatch.setenv(rc.SEED_ENV, SEED)
    public = rc.signing_key().public_key()
    report = verify_record(tmp_path / "export", tmp_path / "receipts", public)
    assert report.ok and report.rows == report.covered == rows, report.findings
