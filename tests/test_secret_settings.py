"""Every setting that can carry a credential is masked wherever LDTM prints it, by one rule
(config.masked_url / config.redact_secrets), and every secret setting refuses a placeholder or a short
value (issue 61, findings 4 and 5). The masking test sets a distinct secret into each such setting, in
each form it can take (a URL's user:password, a `?password=` query, a value that is no URL), drives the
paths that print it (the CLI's errors and its receipts status, the timestamp authority's errors, the
operator alert's text, the Dagster resources' error redaction) and searches stdout, stderr and the logs."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from ldtm_core import config
from ldtm_core.accountability.alerts.operator_alerts import scrub
from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger import timestamps
from ldtm_core.cli import app
from ldtm_core.errors import ConfigError

TOKENS = ["Zq7pass", "Zq7query", "Zq7plain", "Zq7tsa", "Zq7tsatok", "Zq7hook"]
# {setting: values that each carry a credential (one of TOKENS, 16+ characters, nothing a placeholder)}
CARRIERS = {
    "LDTM_DATABASE_URL": [
        "postgresql+psycopg2://ldtm:Zq7pass-0123456789@127.0.0.1:1/ldtm",
        "postgresql+psycopg2://ldtm@127.0.0.1:1/ldtm?password=Zq7query-0123456789",
        "Zq7plain-0123456789-not-a-url",
    ],
    "LDTM_TSA_URL": [
        "https://stamp:Zq7tsa-0123456789@127.0.0.1:9/tsr",
        "https://127.0.0.1:9/tsr?token=Zq7tsatok-0123456789",
    ],
    "LDTM_NOTIFY_WEBHOOK_URL": ["https://127.0.0.1:9/hooks/Zq7hook-0123456789"],
    "LDTM_HEARTBEAT_URL": ["https://127.0.0.1:9/ping/Zq7hook-0123456789"],
    "LDTM_AUDIT_KEY": ["Zq7plain-0123456789-audit"],
    "LDTM_RECEIPT_KEY": ["Zq7plain-0123456789-receipt-seed-of-32+"],
}


def test_every_credential_carrying_setting_is_a_secret_setting():
    assert set(CARRIERS) == set(config.SECRET_SETTINGS)


def _leaks(text: str) -> list[str]:
    return [t for t in TOKENS if t in text]


@pytest.mark.parametrize(
    ("name", "value"), [(n, v) for n, values in CARRIERS.items() for v in values], ids=lambda x: str(x)[:24]
)
def test_a_secret_in_any_setting_is_masked_in_every_output(name, value, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("LDTM_HOME", str(tmp_path))
    caplog.set_level(logging.DEBUG)
    said = []
    # The one rule, read directly: what may be shown of the value, and any text that holds it.
    said += [
        config.masked_url(value),
        config.redact_secrets(f"driver said: {value} / {value.split('//')[-1]}"),
    ]
    said.append(scrub(f"nightly failed: could not reach {value}"))
    # The CLI, as an operator runs it: an unreachable database, the receipts' status with the TSA set.
    runner = CliRunner()
    for argv in (["db", "upgrade", "--dry-run"], ["receipts", "check"], ["registry", "list"]):
        env = {"LDTM_HOME": str(tmp_path)}
        if name != "LDTM_DATABASE_URL":
            env["LDTM_DATABASE_URL"] = f"sqlite:///{tmp_path / 'ldtm.db'}"
        if argv[0] == "receipts":
            rc.keygen(tmp_path / "r.pem", tmp_path / "r.pub") if not (tmp_path / "r.pem").exists() else None
            env |= {rc.DIR_ENV: str(tmp_path / "receipts"), rc.KEY_ENV: str(tmp_path / "r.pem")}
            if name == "LDTM_RECEIPT_KEY":
                env[rc.KEY_ENV] = ""
        out = runner.invoke(app, argv, env=env)
        said += [out.output, str(out.exception or "")]
    # The timestamp authority's errors (an unreachable host; a URL of the wrong scheme).
    if name == "LDTM_TSA_URL":
        with pytest.raises(timestamps.TimestampError) as err:
            timestamps.fetch(value, b"request", timeout=0.5)
        said.append(str(err.value))
        monkeypatch.setenv(name, value.replace("https://", "ftp://"))
        with pytest.raises(ConfigError) as err:
            timestamps.configured_url()
        said.append(str(err.value))
    said.append(caplog.text)
    assert _leaks("\n".join(said)) == [], "\n".join(said)[-3000:]


def test_a_credential_query_or_a_non_url_is_masked_by_the_url_rule():
    assert config.masked_url("postgresql://u@h/db?password=abc&sslmode=require") == (
        "postgresql://u@h/db?password=***&sslmode=require"
    )
    assert config.masked_url("https://a:b@tsa.example:8443/x?token=t") == "https://tsa.example:8443/***"
    assert config.masked_url("not a url at all") == "***"
    assert config.masked_url("sqlite:///home/ldtm.db") == "sqlite:///home/ldtm.db"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LDTM_AUDIT_KEY", "change-me"),
        ("LDTM_AUDIT_KEY", "Change-Me"),
        ("LDTM_AUDIT_KEY", "short-key"),
        ("LDTM_RECEIPT_KEY", "password"),
        ("DAGSTER_PG_PASSWORD", "postgres"),
        ("DAGSTER_PG_PASSWORD", "change-me"),
        ("LDTM_DATABASE_URL", "postgresql+psycopg2://ldtm:change-me@db:5432/ldtm"),
        ("LDTM_DATABASE_URL", "postgresql+psycopg2://ldtm:ldtm@db:5432/ldtm"),
    ],
)
def test_placeholder_and_short_secrets_are_refused_in_every_secret_setting(name, value, monkeypatch):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"{name}: (it is|its password is) ") as err:
        config.check_environment()
    secret = value.rsplit(":", 1)[-1].split("@")[0] if "://" in value else value
    assert secret.lower() not in str(err.value).lower()


def test_real_secrets_pass_and_a_url_without_a_password_is_not_judged(monkeypatch):
    monkeypatch.setenv("LDTM_AUDIT_KEY", "k" * 12 + "-9f3a-real")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "x7Tq-2mP9-wL4s-Rb8n")
    monkeypatch.setenv("LDTM_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/ldtm")
    config.check_environment()
