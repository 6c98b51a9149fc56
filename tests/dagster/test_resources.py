"""Resources and run config: defaults from the environment, and bad values fail with a clear
message before anything is written."""

import pytest
from dagster import EnvVar, Failure, build_init_resource_context, materialize
from ldtm_dagster_helpers import tiny_resources
from sqlalchemy import func, select

from ldtm_core.db import get_engine
from ldtm_core.schema import model_registry, prices
from ldtm_dagster import assets
from ldtm_dagster.demo import ALL_ASSETS
from ldtm_dagster.resources import AppDatabase, ArtifactStore, TrainingProfile, resources_from_env


def _fail(resources, selection, run_config=None, **kw) -> str:
    result = materialize(
        ALL_ASSETS,
        selection=selection,
        resources=resources,
        run_config=run_config,
        raise_on_error=False,
        **kw,
    )
    assert not result.success
    messages = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:  # a Failure raised by a resource arrives wrapped
            messages.append(error.message)
            error = error.cause or error.context
    return "\n".join(messages)


def _count(url, table) -> int:
    with get_engine(url).connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar()


def test_environment_feeds_the_resources(monkeypatch):
    for var in (
        "LDTM_HOME",
        "LDTM_DATABASE_URL",
        "LDTM_UNIVERSE",
        "LDTM_PROFILE",
        "LDTM_MAX_EPOCHS",
        "LDTM_PATIENCE",
        "LDTM_AMP",
    ):
        monkeypatch.delenv(var, raising=False)
    defaults = resources_from_env()
    assert (defaults["store"].home, defaults["store"].universe) == (".ldtm", "full")
    assert defaults["database"].url == "" and defaults["training"].profile == "reference"
    assert defaults["training"].overrides() == {}
    monkeypatch.setenv("LDTM_DATABASE_URL", "postgresql+psycopg2://u:pw@db/ldtm")
    monkeypatch.setenv("LDTM_MAX_EPOCHS", "2")
    fed = resources_from_env()
    # EnvVar, not the value: the UI and run config show the variable's name, never the password.
    assert fed["database"].url == EnvVar("LDTM_DATABASE_URL")
    assert fed["training"].max_epochs == EnvVar.int("LDTM_MAX_EPOCHS")


def test_training_profile_passes_patience_and_precision_to_the_model_config():
    """Patience and precision are the weekly loop's speed levers; the UI can set them per run."""
    cfg = TrainingProfile(profile="reference", patience=10, amp="off").config()
    assert (cfg.patience, cfg.amp, cfg.batch_size) == (10, "off", 128)  # the rest is the profile's
    assert TrainingProfile().config().patience == 3  # the reference profile's (issue 31)
    old = TrainingProfile(profile="reference_b32").config()  # the recipe before it, one name away
    assert (old.batch_size, old.lr, old.patience, old.fast_dropout) == (32, 1e-3, 5, False)
    with pytest.raises(Failure, match="amp='fast'"):
        TrainingProfile(amp="fast").setup_for_execution(build_init_resource_context())


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"end": "2024-02-30"}, "end='2024-02-30' is not a date"),
        ({"start": "2024-06-01", "end": "2024-01-02"}, "must be before end"),
        ({"source": "files"}, "needs at least one path"),
        ({"tickers": ["AAPL", "../etc"]}, "invalid ticker"),
        ({"tickers": ["ZZZZ"]}, "not in the universe"),
    ],
)
def test_bad_prices_config_fails_clearly_and_writes_nothing(sqlite_url, tmp_path, config, expected):
    run_config = {"ops": {"prices": {"config": {"start": "2024-01-02", "end": "2024-03-28", **config}}}}
    message = _fail(tiny_resources(tmp_path, sqlite_url), [assets.prices], run_config)
    assert expected in message
    assert _count(sqlite_url, prices) == 0


def test_unknown_profile_fails_before_training(sqlite_url, tmp_path):
    resources = {**tiny_resources(tmp_path, sqlite_url), "training": TrainingProfile(profile="huge")}
    message = _fail(resources, [assets.checkpoints], partition_key="AAPL")
    assert "unknown profile 'huge'" in message
    assert _count(sqlite_url, model_registry) == 0


def test_bad_universe_and_database_url_are_refused_without_leaking_the_password(sqlite_url, tmp_path):
    resources = {
        **tiny_resources(tmp_path, sqlite_url),
        "store": ArtifactStore(home=str(tmp_path), universe="AAPL,b@d"),
    }
    assert "ArtifactStore.universe" in _fail(resources, [assets.prices])

    bad_url = "postgresql+psycopg2://ldtm:s3cret-pw@db:notaport/ldtm"
    resources = {**tiny_resources(tmp_path, sqlite_url), "database": AppDatabase(url=bad_url)}
    message = _fail(resources, [assets.prices])
    assert "AppDatabase.url" in message and "s3cret-pw" not in message


SECRET = "k3y-Of-The-Chain-9f2c"


@pytest.mark.parametrize(
    "resource",
    [
        lambda: ArtifactStore(universe=SECRET),
        lambda: AppDatabase(url=SECRET),
        lambda: TrainingProfile(profile=SECRET),
        lambda: TrainingProfile(amp=SECRET),
    ],
)
def test_a_secret_read_into_a_resource_field_never_reaches_its_error(monkeypatch, resource):
    # Issue 38 item 1: a run whose config read {env: LDTM_AUDIT_KEY} (or the database password) into a
    # resource field failed with the secret in its event log, readable by anyone over GraphQL.
    monkeypatch.setenv("LDTM_AUDIT_KEY", SECRET)
    with pytest.raises(Failure) as failed:
        resource().setup_for_execution(build_init_resource_context())
    assert SECRET not in str(failed.value) and "***" in str(failed.value)


def test_the_run_failure_webhook_text_masks_every_secret(monkeypatch):
    from ldtm_core.accountability.alerts.operator_alerts import scrub

    monkeypatch.setenv("LDTM_AUDIT_KEY", SECRET)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "pg-Pass-4471")
    text = scrub(f"universe {SECRET!r} is no keyword; password pg-Pass-4471 refused")
    assert SECRET not in text and "pg-Pass-4471" not in text and text.count("***") == 2
