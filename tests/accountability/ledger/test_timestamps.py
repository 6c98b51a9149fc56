"""RFC 3161 timestamps of the receipts (ledger.timestamps): a token recorded from a real timestamp
authority verifies, and nothing else does; the nightly stamps each receipt through a local TSA (OpenSSL's
`ts -reply`, the reference implementation, behind HTTP on 127.0.0.1); the verifier holds the live rows to
the TSA's clock and names a token that does not belong to its receipt."""

from __future__ import annotations

import datetime as dt
import http.server
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from typer.testing import CliRunner

from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger import timestamps as ts
from ldtm_core.accountability.ledger.record_export import export_record
from ldtm_core.accountability.ledger.record_verify import assurance, late, verify_record
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.data.calendar import latest_closed_session
from ldtm_core.errors import ConfigError

RECORDED = Path(__file__).parents[2] / "fixtures" / "tsa" / "sigstage"
RECORDED_TIME = dt.datetime(2025, 5, 9, 11, 58, 55, tzinfo=dt.UTC)  # the TSA's, in its response
TSA_CONFIG = """[ tsa ]
default_tsa = tsa_config
[ tsa_config ]
serial = {dir}/serial
crypto_device = builtin
signer_cert = {dir}/tsa.crt
certs = {dir}/tsa.crt
signer_key = {dir}/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
other_policies = 1.2.3.4.2
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = no
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


def _recorded():
    return (RECORDED / "response-sha256.tsr").read_bytes(), ts.load_chain(RECORDED / "ts_chain.pem")


def _cert(subject: str, key, issuer: str, issuer_key, *, tsa: bool) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=not tsa, path_length=None), critical=True)
    )
    if tsa:  # RFC 3161 2.3: the TSA's certificate is for timestamping only, critically
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True
        )
    return builder.sign(issuer_key, hashes.SHA256())


class LocalTSA:
    """A timestamp authority on 127.0.0.1: OpenSSL answers each request with a token signed by a TSA
    certificate under its own root. `down` makes it answer 503, as a TSA in an outage does."""

    def __init__(self, directory: Path, *, self_signed: bool = False):
        self.dir, self.down, self.requests = directory, False, 0
        directory.mkdir(parents=True)
        root_key, tsa_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        root = _cert("LDTM test TSA root", root_key, "LDTM test TSA root", root_key, tsa=False)
        if self_signed:  # a forger's TSA: its own certificate is its root
            tsa = _cert("Forged TSA", tsa_key, "Forged TSA", tsa_key, tsa=True)
        else:
            tsa = _cert("LDTM test TSA", tsa_key, "LDTM test TSA root", root_key, tsa=True)
        pem = serialization.Encoding.PEM
        (directory / "tsa.crt").write_bytes(tsa.public_bytes(pem))
        (directory / "tsa.key").write_bytes(
            tsa_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        self.chain = directory / "chain.pem"
        self.chain.write_bytes(tsa.public_bytes(pem) + (b"" if self_signed else root.public_bytes(pem)))
        (directory / "serial").write_text("01\n")
        (directory / "tsa.cnf").write_text(TSA_CONFIG.format(dir=directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/tsa"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, query: bytes) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "q.tsq").write_bytes(query)
            subprocess.run(
                ["openssl", "ts", "-reply", "-config", str(self.dir / "tsa.cnf"), "-queryfile",
                 f"{tmp}/q.tsq", "-out", f"{tmp}/r.tsr"],
                check=True, capture_output=True,
            )  # fmt: skip
            return (Path(tmp) / "r.tsr").read_bytes()

    def _handler(self):
        tsa = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                query = self.rfile.read(int(self.headers["Content-Length"]))
                tsa.requests += 1
                if tsa.down or self.headers["Content-Type"] != "application/timestamp-query":
                    self.send_error(503)
                    return
                body = tsa.reply(query)
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def tsa(tmp_path):
    assert shutil.which("openssl"), "the local TSA is OpenSSL's `ts -reply`: install openssl"
    server = LocalTSA(tmp_path / "tsa")
    yield server
    server.server.shutdown()


@pytest.fixture
def stamped_record(engine, db_url, tmp_path, monkeypatch, keys, tsa):
    """Prices up to the last closed session; three evenings replayed, then that session predicted live
    (its targets not yet closed), each receipt timestamped by the local TSA."""
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    monkeypatch.setenv(ts.URL_ENV, tsa.url)
    settings = make_settings(tmp_path, db_url)
    last = latest_closed_session()
    df = ingest(
        engine, ["AAPL", "QQQ"], start=(last - dt.timedelta(days=500)).isoformat(), end=last.isoformat()
    )
    for i, t in enumerate(["AAPL", "QQQ"]):
        make_model(engine, settings, t, seed=i)
    dates = sorted(pd.Timestamp(d).date() for d in df["date"].unique())[-4:]
    assert dates[-1] == last
    for d in dates:
        predict(engine, settings, run_date=d)
    return dates


def _verify(engine, tmp_path, keys, chain=None, name="export"):
    export_record(engine, tmp_path / name)
    return verify_record(tmp_path / name, tmp_path / "receipts", rc.load_public_key(keys[1]), chain)


def test_a_token_recorded_from_a_real_tsa_verifies_for_its_bytes_only():
    token, chain = _recorded()
    assert ts.verify(token, b"hello", chain) == RECORDED_TIME
    with pytest.raises(ts.TimestampError, match="Mismatch between messages"):
        ts.verify(token, b"hello!", chain)
    flipped = bytearray(token)
    flipped[-20] ^= 0x01  # inside the signature
    with pytest.raises(ts.TimestampError):
        ts.verify(bytes(flipped), b"hello", chain)


def test_a_token_verifies_only_against_its_own_tsa(tmp_path):
    token, chain = _recorded()
    other = LocalTSA(tmp_path / "other")
    forger = LocalTSA(tmp_path / "forger", self_signed=True)
    try:
        with pytest.raises(ts.TimestampError):
            ts.verify(token, b"hello", ts.load_chain(other.chain))
        # A forger's TSA, its self-signed certificate carried in its own token, is no TSA the verifier named.
        forged = ts.fetch(forger.url, b"hello")
        assert ts.verify(forged, b"hello", ts.load_chain(forger.chain))  # genuine for its own root
        with pytest.raises(ts.TimestampError):
            ts.verify(forged, b"hello", chain)
    finally:
        other.server.shutdown()
        forger.server.shutdown()
    with pytest.raises(ConfigError, match="no self-signed root"):
        (tmp_path / "leaf.pem").write_bytes(chain[0].public_bytes(serialization.Encoding.PEM))
        ts.load_chain(tmp_path / "leaf.pem")


def test_a_live_row_is_early_by_the_tsa_time_only_before_its_targets_close():
    # The recorded token's time, 2025-05-09 11:58:55 UTC, a Friday; that session closes 20:00 UTC.
    assert not late({"next_day_date": dt.date(2025, 5, 9)}, RECORDED_TIME)
    assert late({"next_day_date": dt.date(2025, 5, 8)}, RECORDED_TIME)


def test_fetch_checks_the_answer_is_to_its_own_request(tsa, monkeypatch):
    token = ts.fetch(tsa.url, b"receipt bytes")
    assert ts.verify(token, b"receipt bytes", ts.load_chain(tsa.chain)) <= dt.datetime.now(dt.UTC)
    # A TSA replaying an old token (another request's nonce and imprint) is refused.
    monkeypatch.setattr(tsa, "reply", lambda query: token)
    with pytest.raises(ts.TimestampError, match="answers another request"):
        ts.fetch(tsa.url, b"receipt bytes")
    # "Granted with modifications" is refused here as the verifier (rfc3161-client) would refuse it.
    recorded, _ = _recorded()
    assert recorded[4:9] == bytes.fromhex("3003020100")  # PKIStatusInfo { status 0: granted }
    with_mods = recorded[:8] + b"\x01" + recorded[9:]
    monkeypatch.setattr(tsa, "reply", lambda query: with_mods)
    with pytest.raises(ts.TimestampError, match="refused the request"):
        ts.fetch(tsa.url, b"receipt bytes")
    monkeypatch.setenv(ts.URL_ENV, "file:///etc/passwd")
    with pytest.raises(ConfigError, match="over http"):
        ts.configured_url()


def test_the_nightly_stamps_each_receipt_and_the_verifier_holds_live_rows_to_the_tsa(
    engine, tmp_path, keys, tsa, stamped_record
):
    dates = stamped_record
    receipts = rc.read_receipts(tmp_path / "receipts")
    assert len(receipts) == len(dates) == tsa.requests
    assert all(ts.token_path(r.path).is_file() for r in receipts)
    chain = ts.load_chain(tsa.chain)
    report = _verify(engine, tmp_path, keys, chain)
    assert report.ok, report.findings
    # Three evenings replayed (6 rows), the last session live (2 rows, targets not yet closed).
    assert (report.stamped, report.covered, report.replay, report.tsa_early) == (4, 8, 6, 2)
    assert any(
        "2 of the 2 covered forecasts carry an RFC 3161 timestamp" in line for line in assurance(report)
    )
    # Without the TSA's certificates the tokens are counted, not trusted.
    unchecked = verify_record(tmp_path / "export", tmp_path / "receipts", rc.load_public_key(keys[1]))
    assert unchecked.ok and unchecked.unchecked_tokens == 4 and unchecked.tsa_early == 0
    assert any("pass --tsa-certs" in line for line in assurance(unchecked))
    # A token moved to another receipt (an operator passing a later evening off as timestamped) is named.
    ts.token_path(receipts[1].path).unlink()
    shutil.copy(ts.token_path(receipts[3].path), ts.token_path(receipts[1].path))
    moved = verify_record(tmp_path / "export", tmp_path / "receipts", rc.load_public_key(keys[1]), chain)
    assert [(f.kind, f.run_date) for f in moved.findings] == [("timestamp", dates[1].isoformat())]
    assert "Mismatch between messages" in moved.findings[0].detail


def test_a_tsa_outage_fails_the_evening_and_stamp_asks_again(
    engine, db_url, tmp_path, keys, tsa, monkeypatch
):
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    monkeypatch.setenv(ts.URL_ENV, tsa.url)
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    day = sorted(df["date"].unique())[-3]
    tsa.down = True
    with pytest.raises(rc.ReceiptError, match="receipt 1 is written but not timestamped .*503"):
        predict(engine, settings, run_date=day)
    (receipt,) = rc.read_receipts(tmp_path / "receipts")
    assert not ts.token_path(receipt.path).exists()
    tsa.down = False
    env = {"LDTM_DATABASE_URL": db_url, "LDTM_HOME": str(tmp_path)}
    out = CliRunner().invoke(app, ["receipts", "stamp"], env=env)
    assert out.exit_code == 0 and "receipt 1: timestamped" in out.output, out.output
    assert ts.verify(
        ts.token_path(receipt.path).read_bytes(), receipt.path.read_bytes(), ts.load_chain(tsa.chain)
    )
    again = CliRunner().invoke(app, ["receipts", "stamp"], env=env)
    assert "every receipt is timestamped already" in again.output
    # The CLI's verifier takes the TSA's chain.
    assert CliRunner().invoke(app, ["audit", "export", str(tmp_path / "x")], env=env).exit_code == 0
    checked = CliRunner().invoke(
        app,
        ["verify-record", str(tmp_path / "x"), str(tmp_path / "receipts"), "--public-key", str(keys[1]),
         "--tsa-certs", str(tsa.chain)],
        env=env,
    )  # fmt: skip
    assert checked.exit_code == 0 and "verify-record ok" in checked.output, checked.output
