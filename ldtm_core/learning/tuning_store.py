"""Where the hyper-parameter search keeps its studies, and the `tuned` profile read back from them.

Optuna's RDB storage lives in the application's own database so several `ldtm tune` processes (or
machines) share one study. Its tables are kept apart from LDTM's: Optuna stamps its own Alembic
revision into a table named `alembic_version`, which would collide with LDTM's migrations. On
PostgreSQL they live in the schema `optuna` of the same database; SQLite has no schemas, so they go
to a sibling file (`ldtm.db` -> `ldtm.optuna.db`).

The `tuned` profile is not a copy: for each ticker it is the full config of the best finished trial
of the ticker's own study (else the newest shared study that covers it), read when training starts.
A ticker with no study trains with `reference`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from ldtm_core.config import engine_url, mask_secrets, masked_url
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning.model import ModelConfig, get_profile

TUNED = "tuned"
FALLBACK_PROFILE = "reference"
OPTUNA_SCHEMA = "optuna"
STUDY_PREFIX = "ldtm:"
# Study user attributes written by `tuning` and read here.
ATTR_TICKERS = "ldtm_tickers"
ATTR_HOLDOUT = "ldtm_holdout_cutoffs"  # {ticker: ISO date}: every trial's data ends before it
ATTR_FIXED = "ldtm_fixed"  # fields fixed for every trial (`--set`)
ATTR_BASE = "ldtm_base_profile"
ATTR_SEED = "ldtm_seed"
ATTR_FOLDS = "ldtm_backtest_folds"
# {ticker: ISO date}: the latest price date any trial's rows used (a target or an input). A backtest
# whose test rows reach back to it would test on data the search chose its settings on.
ATTR_LAST_DATE = "ldtm_last_data_date"
TRIAL_CONFIG = "ldtm_config"  # trial user attribute: the full ModelConfig the trial trained


def study_name(tickers: list[str]) -> str:
    """`ldtm:AAPL` for one ticker; `ldtm:shared:AAPL+MSFT` (sorted) for settings shared by several."""
    names = sorted({validate_ticker(t) for t in tickers})
    if not names:
        raise InputError("a study needs at least one ticker")
    return f"{STUDY_PREFIX}{names[0]}" if len(names) == 1 else f"{STUDY_PREFIX}shared:{'+'.join(names)}"


def optuna_url(database_url: str) -> str:
    """The URL Optuna's storage uses for the application database `database_url`.

    Resolved like the application's own engine (`config.engine_url`): a bare `postgresql://` names no
    driver, and Optuna's SQLAlchemy would otherwise pick one this project does not install.
    """
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":
        db = url.database
        if not db or db == ":memory:":
            raise InputError(
                "studies need a file or server database; an in-memory SQLite URL cannot hold one"
            )
        path = Path(db)
        return url.set(
            database=str(path.with_name(f"{path.stem}.optuna{path.suffix or '.db'}"))
        ).render_as_string(hide_password=False)
    if url.get_backend_name() != "postgresql":
        raise InputError(f"studies are stored on SQLite or PostgreSQL, not {url.get_backend_name()}")
    return url.render_as_string(hide_password=False)


def _engine_kwargs(database_url: str) -> dict:
    if make_url(database_url).get_backend_name() == "postgresql":
        # Unqualified names (Optuna's tables, its alembic_version) resolve in our schema only.
        return {"connect_args": {"options": f"-csearch_path={OPTUNA_SCHEMA}"}, "pool_pre_ping": True}
    return {"connect_args": {"timeout": 60}}


def studies_exist(database_url: str) -> bool:
    """Whether a study storage was ever created here (reading the tuned profile never creates one)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        db = url.database
        return bool(db) and db != ":memory:" and Path(make_url(optuna_url(database_url)).database).is_file()
    from ldtm_core.db import get_engine

    return OPTUNA_SCHEMA in inspect(get_engine(database_url)).get_schema_names()


_STORAGES: dict[str, object] = {}


def get_storage(database_url: str):
    """Optuna's RDB storage in the application database (created on first use; one per process)."""
    if database_url in _STORAGES:
        return _STORAGES[database_url]
    import optuna

    from ldtm_core.db import get_engine

    def create():
        return optuna.storages.RDBStorage(
            optuna_url(database_url), engine_kwargs=_engine_kwargs(database_url)
        )

    try:
        if make_url(database_url).get_backend_name() == "postgresql":
            # Two processes creating the storage at once would race on Optuna's CREATE TABLEs: a
            # session lock (held across the commit of the schema) makes the second wait for the first.
            with get_engine(database_url).connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(7400124)"))
                try:
                    conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{OPTUNA_SCHEMA}"'))
                    conn.commit()
                    storage = create()
                finally:
                    conn.rollback()
                    conn.execute(text("SELECT pg_advisory_unlock(7400124)"))
                    conn.commit()
        else:
            import fcntl

            # Same race on one SQLite file: serialise the first creation with a lock file beside it.
            db_path = Path(make_url(optuna_url(database_url)).database)
            with open(db_path.with_name(db_path.name + ".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                storage = create()
    except Exception as exc:  # noqa: BLE001 - the driver's message may carry the DSN
        raise InputError(
            f"cannot open the study storage on {masked_url(database_url)}: {type(exc).__name__}: "
            f"{mask_secrets(str(exc), database_url).splitlines()[0] if str(exc) else ''}"
        ) from exc
    _STORAGES[database_url] = storage
    return storage


def check_profile(profile: str, overrides: dict | None = None) -> ModelConfig:
    """Refuse a bad profile or override early; for `tuned` the reference config stands for the base."""
    return get_profile(FALLBACK_PROFILE if profile == TUNED else profile, **(overrides or {}))


@dataclass(frozen=True)
class TickerSettings:
    """What one ticker trains with: the config, the profile recorded, and where a tuned config came from."""

    cfg: ModelConfig
    profile: str
    provenance: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StudyInfo:
    name: str
    tickers: tuple[str, ...]
    started: dt.datetime | None
    n_trials: int
    best_value: float | None
    best_number: int | None
    best_config: dict | None
    holdout: dict
    last_date: dict = field(default_factory=dict)
    folds: int | None = None


def list_studies(database_url: str) -> list[StudyInfo]:
    """Every LDTM study in the storage with its best finished trial."""
    if not studies_exist(database_url):
        return []
    import optuna

    out = []
    for s in optuna.get_all_study_summaries(get_storage(database_url), include_best_trial=True):
        if not s.study_name.startswith(STUDY_PREFIX) or ATTR_TICKERS not in s.user_attrs:
            continue
        best = s.best_trial
        out.append(
            StudyInfo(
                name=s.study_name,
                tickers=tuple(s.user_attrs[ATTR_TICKERS]),
                started=s.datetime_start,
                n_trials=s.n_trials,
                best_value=best.value if best else None,
                best_number=best.number if best else None,
                best_config=best.user_attrs.get(TRIAL_CONFIG) if best else None,
                holdout=dict(s.user_attrs.get(ATTR_HOLDOUT, {})),
                last_date=dict(s.user_attrs.get(ATTR_LAST_DATE, {})),
                folds=s.user_attrs.get(ATTR_FOLDS),
            )
        )
    return out


def study_for(studies: list[StudyInfo], ticker: str) -> StudyInfo | None:
    """The study whose best trial defines `ticker`'s tuned settings: its own, else the newest shared one."""
    own = [s for s in studies if s.tickers == (ticker,) and s.best_config]
    if own:
        return own[0]
    shared = [s for s in studies if ticker in s.tickers and s.best_config]
    shared.sort(key=lambda s: s.started or dt.datetime.min)
    return shared[-1] if shared else None


def ticker_settings(
    database_url: str, tickers: list[str], profile: str, overrides: dict | None = None
) -> dict[str, TickerSettings]:
    """Per ticker: the config it trains with. Only `tuned` differs per ticker; `--set` overrides apply last."""
    overrides = dict(overrides or {})
    base = check_profile(profile, overrides)
    if profile != TUNED:
        return {t: TickerSettings(base, profile) for t in tickers}
    studies = list_studies(database_url)
    out = {}
    for t in tickers:
        study = study_for(studies, t)
        if study is None:
            out[t] = TickerSettings(base, FALLBACK_PROFILE, {"tuned_fallback": "no study for this ticker"})
            continue
        cfg = ModelConfig.from_dict({**study.best_config, **overrides})
        out[t] = TickerSettings(
            cfg,
            TUNED,
            {
                "tuned_study": study.name,
                "tuned_trial": study.best_number,
                "tuned_value": study.best_value,
                "tuning_holdout_cutoff": study.holdout.get(t, ""),
                # The backtest counts its test rows dated up to here as leakage (older studies:
                # before the hold-out cutoff).
                "tuning_last_date": study.last_date.get(t, ""),
                "tuning_folds": study.folds,
            },
        )
    return out


def load_study(database_url: str, ticker_or_name: str):
    """The Optuna study for a ticker (its own, else the newest shared one) or a full study name."""
    import optuna

    if ticker_or_name.startswith(STUDY_PREFIX):
        name = ticker_or_name
    else:
        ticker = validate_ticker(ticker_or_name)
        studies = list_studies(database_url)
        own = [s for s in studies if s.tickers == (ticker,)]
        shared = sorted(
            (s for s in studies if ticker in s.tickers), key=lambda s: s.started or dt.datetime.min
        )
        chosen = own[0] if own else (shared[-1] if shared else None)
        if chosen is None:
            raise NotFoundError(f"no study covers {ticker}; run `ldtm tune --tickers {ticker}` first")
        name = chosen.name
    if not studies_exist(database_url):
        raise NotFoundError(f"no study named {name}")
    try:
        return optuna.load_study(study_name=name, storage=get_storage(database_url))
    except KeyError:
        raise NotFoundError(f"no study named {name}") from None
