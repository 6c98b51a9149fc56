"""Resources: the application database, the artifact store, the training profile and the GPU probe.

Each is a `ConfigurableResource` whose defaults need nothing; `definitions.py` feeds them from the
environment (`LDTM_DATABASE_URL`, `LDTM_HOME`, `LDTM_UNIVERSE`, `LDTM_PROFILE`, ...). Values are
checked in `setup_for_execution`, before any asset body runs, so a bad value fails the run with a
clear message and writes nothing, and the run is not retried (`config_failure`).
"""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource, EnvVar, Failure, InitResourceContext
from dagster._core.storage.tags import MAX_RETRIES_TAG
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from ldtm_core.config import (
    SETTINGS,
    Choice,
    Settings,
    env_is_set,
    masked_url,
    redact_secrets,
    setting_choice,
)
from ldtm_core.data.universe import load_universe
from ldtm_core.db import get_engine
from ldtm_core.errors import LDTMError
from ldtm_core.learning import gpu_slots
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.tuning_store import check_profile
from ldtm_core.migrate import open_database

_OPENED: set[str] = set()


# Dagster's run_retries (deploy/docker/dagster.yaml) skips only runs whose failure reason is STEP_FAILURE;
# a resource that fails in setup fails its run with RUN_EXCEPTION, which Dagster retries like a crashed
# run worker. The run's own `dagster/max_retries` tag wins over the instance's max_retries.
NO_RUN_RETRY_TAGS = {MAX_RETRIES_TAG: "0"}


def config_failure(context: InitResourceContext, message: str) -> Failure:
    """The Failure of a configured value that cannot be used. It fails the same way on every attempt, so
    the run is tagged `dagster/max_retries=0` first: run_retries does not re-execute it (and the failure
    alert posts once). Without a run (a sensor's or a test's resources) only the Failure is made.

    Note: a step with a RetryPolicy (`prices`) still retries a failed resource setup at step level under
    the multiprocess executor, which ignores `allow_retries` there; that costs time, not another run."""
    run, instance = context.dagster_run, context.instance
    if run is not None and instance is not None:
        instance.add_run_tags(run.run_id, NO_RUN_RETRY_TAGS)
        instance.report_engine_event(
            "A resource's configured value cannot be used: the run will not be retried "
            f"({MAX_RETRIES_TAG}=0).",
            run,
        )
    return Failure(redact_secrets(message), allow_retries=False)


class ArtifactStore(ConfigurableResource):
    """Where checkpoints, exports and the default SQLite database live, and which universe is served."""

    home: str = ".ldtm"
    universe: str = "full"

    def setup_for_execution(self, context: InitResourceContext) -> None:
        try:
            load_universe(self.universe)
        except LDTMError as exc:
            raise config_failure(context, f"ArtifactStore.universe: {exc}") from None

    @property
    def path(self) -> Path:
        return Path(self.home).expanduser().resolve()

    def tickers(self) -> list[str]:
        return load_universe(self.universe)


class AppDatabase(ConfigurableResource):
    """The application database (prices, registry, snapshots, ...): any SQLAlchemy URL.

    Empty `url` means SQLite at `{LDTM_HOME}/ldtm.db`. Opened once per process on first use: an empty
    database is created at the newest revision; one behind it fails the run, unchanged, with one line
    naming `ldtm db upgrade` (no Dagster step migrates).
    """

    url: str = ""

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.url:
            try:
                make_url(self.url)
            except Exception:  # noqa: BLE001 - SQLAlchemy's message would echo the URL, password included
                raise config_failure(
                    context, f"AppDatabase.url is not a valid SQLAlchemy URL: {masked_url(self.url)}"
                ) from None

    def resolved_url(self, store: ArtifactStore) -> str:
        return self.url or f"sqlite:///{store.path / 'ldtm.db'}"

    def engine(self, store: ArtifactStore) -> Engine:
        url = self.resolved_url(store)
        if url not in _OPENED:
            store.path.mkdir(parents=True, exist_ok=True)
            try:
                open_database(url)
            except LDTMError as exc:  # e.g. a store behind the newest revision: the same on every attempt
                raise Failure(redact_secrets(str(exc)), allow_retries=False) from None
            _OPENED.add(url)
        return get_engine(url)

    def settings(self, store: ArtifactStore) -> Settings:
        settings = Settings.from_env(
            home=str(store.path), database_url=self.resolved_url(store), universe=store.universe
        )
        settings.ensure_dirs()
        return settings


class TrainingProfile(ConfigurableResource):
    """The model profile (reference / reference_b32 / upgrade / demo / tuned) and optional overrides used for training.

    `tuned` trains each ticker with its study's best settings (`hpo_studies`), `reference` without one.
    """

    profile: str = "reference"
    max_epochs: int | None = None
    patience: int | None = None  # early-stopping patience; None: the profile's (reference: 3)
    amp: str | None = None  # training precision auto | bf16 | fp16 | off; None: the profile's (auto)
    max_workers: int | None = None

    def setup_for_execution(self, context: InitResourceContext) -> None:
        try:
            self.config()
        except LDTMError as exc:
            raise config_failure(context, f"TrainingProfile: {exc}") from None
        if self.max_workers is not None and self.max_workers < 1:
            raise config_failure(context, f"TrainingProfile.max_workers must be >= 1, got {self.max_workers}")

    def overrides(self) -> dict:
        """The fields set here, as ModelConfig overrides of the profile."""
        fields = (("max_epochs", self.max_epochs), ("patience", self.patience), ("amp", self.amp))
        return {k: v for k, v in fields if v is not None}

    def config(self) -> ModelConfig:
        return check_profile(self.profile, self.overrides())


class GpuProbe(ConfigurableResource):
    """NVML view of free VRAM -> the `gpu` pool size (SPEC §6). Unset fields use LDTM_GPU_* or defaults."""

    per_job_mib: int | None = None
    headroom_mib: int | None = None
    max_slots: int | None = None

    def nvml_module(self):
        """The NVML module to read; None means pynvml. Tests override this with a fake."""
        return None

    def plan(self) -> gpu_slots.SlotPlan:
        kw = {
            k: v
            for k, v in (
                ("per_job_mib", self.per_job_mib),
                ("headroom_mib", self.headroom_mib),
                ("max_total", self.max_slots),
            )
            if v is not None
        }
        try:
            return gpu_slots.current_plan(nvml=self.nvml_module(), **kw)
        except LDTMError as exc:
            raise Failure(redact_secrets(f"GpuProbe: {exc}")) from None


def _env(name: str, default):
    """EnvVar(name) when the variable is set (the UI shows its name, not its value), else the default.

    Dagster reads an EnvVar itself when it builds the resource: the only LDTM_* read outside config,
    kept so that secrets stay names in the UI; `name` is a row of config.SETTINGS like any other."""
    if env_is_set(name) and isinstance(SETTINGS[name].kind, Choice):
        return setting_choice(name)  # a vocabulary, not a secret: as the table spells it, in any case given
    if env_is_set(name):
        return (
            EnvVar.int(name) if isinstance(default, int) and not isinstance(default, bool) else EnvVar(name)
        )
    return default


def resources_from_env() -> dict:
    """The resources of the code location, fed by LDTM_* environment variables; defaults need nothing."""
    return {
        "store": ArtifactStore(home=_env("LDTM_HOME", ".ldtm"), universe=_env("LDTM_UNIVERSE", "full")),
        "database": AppDatabase(url=_env("LDTM_DATABASE_URL", "")),
        "training": TrainingProfile(
            profile=_env("LDTM_PROFILE", "reference"),
            max_epochs=EnvVar.int("LDTM_MAX_EPOCHS") if env_is_set("LDTM_MAX_EPOCHS") else None,
            patience=EnvVar.int("LDTM_PATIENCE") if env_is_set("LDTM_PATIENCE") else None,
            amp=_env("LDTM_AMP", None),
            max_workers=EnvVar.int("LDTM_MAX_WORKERS") if env_is_set("LDTM_MAX_WORKERS") else None,
        ),
        "gpu": GpuProbe(),
    }
