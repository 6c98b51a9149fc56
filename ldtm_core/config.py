"""Runtime settings, read from the environment with defaults that need nothing.

`LDTM_HOME` holds artifacts (checkpoints, exports, the default SQLite database),
`LDTM_DATABASE_URL` is any SQLAlchemy URL, `LDTM_UNIVERSE` picks the tickers.
Secrets only ever come from the environment; `masked_url` is what logs and errors show.

`SETTINGS` is the one table of settings: every `LDTM_*` variable the product reads is a row (kind,
unit or vocabulary, default, meaning), read only through `setting` / `env_number` / `env_flag` /
`env_text` here; docs/operations.md's settings table is checked against it (tests/test_settings_table.py).
Every numeric `LDTM_*` setting has its unit and sane range in `NUMERIC_SETTINGS`, checked here
(`Settings.from_env` checks all that are set, so a bad one is one ConfigError before any work).
Percentages are typed as percents everywhere (52 means 52 %), like the CLI options.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ldtm_core.errors import ConfigError

# The databases LDTM's schema, upserts and locks are written for.
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
# PostgreSQL drivers in order of preference when a URL names none (`postgresql://`, what everyone types):
# SQLAlchemy 2.1 would pick psycopg (3), which this project does not install.
POSTGRES_DRIVERS = ("psycopg2", "psycopg")
# The pip package that provides a DB-API module, for the message when it is missing.
DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg",
    "asyncpg": "asyncpg",
    "pg8000": "pg8000",
    "MySQLdb": "mysqlclient",
    "pymysql": "PyMySQL",
    "mysql": "mysql-connector-python",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
    "oracledb": "oracledb",
    "cx_Oracle": "cx_Oracle",
    "aiosqlite": "aiosqlite",
}

_MKDIR_REASONS = {
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied (read-only?)",
    errno.EPERM: "permission denied (read-only?)",
}


@dataclass(frozen=True)
class NumberSetting:
    """The unit and sane range of one numeric setting; `unit` is how the message names what to type."""

    kind: type  # int or float
    low: float
    high: float
    unit: str
    low_open: bool = False  # `low` itself is refused
    high_open: bool = False  # `high` itself is refused

    def expected(self) -> str:
        low = f"above {_num(self.low)}" if self.low_open else f"from {_num(self.low)}"
        high = f"below {_num(self.high)}" if self.high_open else f"to {_num(self.high)}"
        return f"expected {self.unit}, {low} {'and ' if self.high_open else ''}{high}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


MIN_DECAY_ARL0 = 20  # sessions: about a trading month

NUMERIC_SETTINGS: dict[str, NumberSetting] = {
    "LDTM_NEUTRAL_BAND_PCT": NumberSetting(float, 0, 100, "a percent (0.25 for 0.25 %)"),
    "LDTM_GATE_MIN_FOLDS": NumberSetting(int, 1, 1000, "a whole number of folds"),
    "LDTM_GATE_MIN_ACCURACY": NumberSetting(float, 0, 100, "a percent (52 for 52 %)"),
    "LDTM_GATE_MAX_ERROR_PCT": NumberSetting(float, 0, 1e6, "a percent (5 for 5 %)"),
    "LDTM_GATE_BEAT_ALWAYS_UP": NumberSetting(
        float, -100, 100, "percentage points of accuracy above always-up (2 for 2 points)"
    ),
    "LDTM_GATE_MAX_P_VALUE": NumberSetting(float, 0, 1, "a probability (0.05)", low_open=True),
    "LDTM_GATE_MIN_ROWS": NumberSetting(int, 1, 1e7, "a whole number of backtest test rows"),
    "LDTM_GATE_MIN_FOLD_ROWS": NumberSetting(int, 1, 1e6, "a whole number of test rows per fold"),
    # The gate refuses alpha 1 (every challenger "significant"): (0, 1) open at both ends.
    "LDTM_GATE_ALPHA": NumberSetting(float, 0, 1, "a probability (0.05)", low_open=True, high_open=True),
    "LDTM_DECAY_DELTA": NumberSetting(float, 0, 100, "percentage points (10 for 10 points)", low_open=True),
    # A stable model is in WARN on ~hold/ARL0 of nights: below a month of sessions (a quarter of nights
    # at the default hold of 5) the alarm says nothing.
    "LDTM_DECAY_ARL0": NumberSetting(float, MIN_DECAY_ARL0, 1e7, "sessions between false alarms per ticker"),
    "LDTM_DECAY_PSI_SESSIONS": NumberSetting(int, 2, 1e5, "a whole number of sessions"),
    "LDTM_DECAY_HOLD_SESSIONS": NumberSetting(int, 1, 1e5, "a whole number of sessions"),
    # Evenings a gate-passed challenger predicts beside the champion before the live comparison (0: none).
    "LDTM_SHADOW_SESSIONS": NumberSetting(int, 0, 1e4, "a whole number of sessions (0: promote at once)"),
    # The drop the shadow evenings must detect, and with what probability (shadow_power.py, issue 27).
    "LDTM_SHADOW_MARGIN": NumberSetting(
        float, 0, 100, "percentage points (20 for 60 % vs 40 %)", low_open=True
    ),
    "LDTM_SHADOW_POWER": NumberSetting(float, 0, 1, "a probability below 1 (0.8)", low_open=True),
    # The longest hole in a ticker's bars (missing sessions) features may look back across (price_gaps).
    "LDTM_MAX_GAP_SESSIONS": NumberSetting(int, 0, 1e5, "a whole number of sessions"),
    # Signal performance (accountability.signals): the paper books' cost per unit of turnover.
    "LDTM_SIGNAL_COST_BP": NumberSetting(
        float, 0, 10_000, "basis points per unit of turnover (5 for 0.05 %)"
    ),
    "LDTM_MAX_DAILY_MOVE_PCT": NumberSetting(float, 0, 1e4, "a percent (40 for 40 %)", low_open=True),
    "LDTM_GPU_PER_JOB_MIB": NumberSetting(int, 1, 1e7, "a whole number of MiB"),
    "LDTM_GPU_HEADROOM_MIB": NumberSetting(int, 0, 1e7, "a whole number of MiB"),
    "LDTM_GPU_MAX_SLOTS": NumberSetting(int, 0, 1e5, "a whole number of slots"),
    "LDTM_SOURCE_ATTEMPTS": NumberSetting(int, 1, 100, "a whole number of attempts"),
    "LDTM_YFINANCE_TIMEOUT": NumberSetting(float, 0, 3600, "seconds", low_open=True),
    "LDTM_YFINANCE_BATCH": NumberSetting(int, 1, 1000, "a whole number of tickers per request"),
    "LDTM_IB_PORT": NumberSetting(int, 1, 65535, "a whole number (a TCP port)"),
    "LDTM_IB_CLIENT_ID": NumberSetting(int, 0, 2**31 - 1, "a whole number (the IB API client id)"),
    "LDTM_IB_TIMEOUT": NumberSetting(float, 0, 3600, "seconds", low_open=True),
    "LDTM_MAX_EPOCHS": NumberSetting(int, 1, 1e5, "a whole number of epochs"),
    "LDTM_PATIENCE": NumberSetting(int, 1, 1e5, "a whole number of epochs"),
    "LDTM_MAX_WORKERS": NumberSetting(int, 1, 1024, "a whole number of workers"),
    "LDTM_TEST_PAUSE_S": NumberSetting(float, 0, 1e6, "seconds", low_open=True),
}
# Flags: read by `env_flag` only, one vocabulary (case-insensitive), anything else a ConfigError.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
BOOLEAN_SETTINGS = (
    "LDTM_BACKTEST_REUSE",  # default on
    "LDTM_FORCE_REINGEST",  # default off
    "LDTM_YFINANCE_AUTO_ADJUST",  # default off
    "LDTM_BF16_PROBE",  # default on
    "LDTM_K8S_GPU_PER_STEP",  # default on
    "LDTM_TRAINING_MALLOC",  # default on
)
# The other settings the code reads (text, paths, URLs): listed so that a test can tell a new
# numeric setting that was never given a range here.
OTHER_SETTINGS = (
    "LDTM_HOME",
    "LDTM_DATABASE_URL",
    "LDTM_UNIVERSE",
    "LDTM_PROFILE",
    "LDTM_GATE_POLICY",  # evidence | seed, checked by GateThresholds.from_env
    "LDTM_AMP",
    "LDTM_PRICE_SOURCE",
    "LDTM_AUDIT_KEY",
    "LDTM_NOTIFY_WEBHOOK_URL",
    "LDTM_HEARTBEAT_URL",
    "LDTM_OPERATOR",
    "LDTM_SNAPSHOT_DEADLINE",
    "LDTM_SYNTHETIC_SPLITS",
    "LDTM_IB_HOST",
    "LDTM_IB_WHAT_TO_SHOW",
    "LDTM_CACHE_DIR",
    "LDTM_TEST_PAUSE_AT",
    "LDTM_TEST_PAUSE_DIR",
    # Kubernetes deployment switches (ldtm_dagster/deployment.py checks them): a mode, k8s quantities.
    "LDTM_DEPLOYMENT",
    # Set by the code location for its own processes (gpu_slots: the pool's own VRAM).
    "LDTM_GPU_POOL_ID",
    "LDTM_K8S_STEP_CPU",
    "LDTM_K8S_STEP_MEMORY",
) + BOOLEAN_SETTINGS


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: the one home of a variable's default, meaning and check.

    Numbers take their unit and range from NUMERIC_SETTINGS and flags their vocabulary from
    BOOLEAN_SETTINGS; text settings with a vocabulary (`choices`) are checked where they are parsed,
    with a message naming the variable. `shown` is the default as docs/operations.md's table writes it.
    """

    name: str
    default: object  # the value when unset or empty; None: no value (off, or the caller's default decides)
    meaning: str
    kind: str = "text"  # text | path | url | secret | time | choice | quantity (number, flag: `kind_of`)
    choices: tuple[str, ...] = ()
    shown: str | None = None
    internal: bool = False  # a test hook, not a user setting: not in the operations table

    @property
    def kind_of(self) -> str:
        if self.name in NUMERIC_SETTINGS:
            return "number"
        return "flag" if self.name in BOOLEAN_SETTINGS else self.kind

    @property
    def unit(self) -> str:
        if self.name in NUMERIC_SETTINGS:
            return NUMERIC_SETTINGS[self.name].expected().removeprefix("expected ")
        if self.name in BOOLEAN_SETTINGS:
            return "a flag: 1/0, true/false, yes/no, on/off"
        return " | ".join(self.choices) if self.choices else self.kind

    def shown_default(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, (int, float)):
            return _num(self.default)
        return f"`{self.default}`"


def _table(*rows: Setting) -> dict[str, Setting]:
    return {row.name: row for row in rows}


# THE settings table: every LDTM_* variable the product reads is a row here and is read through
# `setting` / `env_number` / `env_flag` / `env_text` below (tests/test_settings_table.py checks the
# code and docs/operations.md's table against it). Defaults that live in a dataclass (the gate's,
# decay's) are the same numbers, in the setting's unit (tested).
SETTINGS: dict[str, Setting] = _table(
    # Where things are.
    Setting("LDTM_HOME", "./.ldtm", "artifacts: checkpoints, exports, the default SQLite database", "path"),
    Setting(
        "LDTM_DATABASE_URL",
        None,
        "the application database: a SQLite or PostgreSQL SQLAlchemy URL (may hold a password)",
        "secret",
        shown="`sqlite:///$LDTM_HOME/ldtm.db`",
    ),
    Setting("LDTM_UNIVERSE", "full", "the tickers: demo, full, AAPL,NVDA or a file", shown="`full`"),
    Setting(
        "LDTM_PROFILE",
        "reference",
        "model profile of the checkpoints asset",
        "choice",
        ("reference", "reference_b32", "upgrade", "demo", "tuned"),
    ),
    Setting(
        "LDTM_CACHE_DIR", None, "where the bf16 probe's answer is cached", "path", shown="`~/.cache/ldtm`"
    ),
    # Training overrides of the Dagster `training` resource (none: the profile's value).
    Setting("LDTM_MAX_EPOCHS", None, "epochs cap"),
    Setting("LDTM_PATIENCE", None, "early-stopping patience"),
    Setting("LDTM_AMP", None, "training precision", "choice", ("auto", "fp16", "bf16", "off")),
    Setting("LDTM_MAX_WORKERS", None, "training workers (none: the slot plan)"),
    Setting("LDTM_BF16_PROBE", True, "measure bf16 against fp32 on this CPU before using it"),
    Setting(
        "LDTM_TRAINING_MALLOC",
        True,
        "a CPU training process keeps its freed buffers (glibc mallopt) instead of mapping them anew each step",
    ),
    Setting("LDTM_BACKTEST_REUSE", True, "backtests reuse stored fold outcomes whose key is unchanged"),
    # GPU slots (SPEC §6).
    Setting("LDTM_GPU_PER_JOB_MIB", 600, "VRAM one training job needs"),
    Setting("LDTM_GPU_HEADROOM_MIB", 1024, "VRAM left free on every GPU"),
    Setting("LDTM_GPU_MAX_SLOTS", None, "cap on the pool's slots"),
    Setting(
        "LDTM_GPU_POOL_ID",
        None,
        "marks the gpu pool's own processes (their VRAM counts as the pool's)",
        shown="set by the code location to `gpu@$DAGSTER_HOME`",
    ),
    # Prices.
    Setting("LDTM_PRICE_SOURCE", "synthetic", "where bars come from: synthetic, files:<dir>, yfinance, ib"),
    Setting(
        "LDTM_SYNTHETIC_SPLITS",
        "",
        "splits planted in the synthetic market: TICKER:DATE:RATIO,...",
        shown="none",
    ),
    Setting("LDTM_FORCE_REINGEST", False, "ingest again what was refused or already ingested"),
    Setting("LDTM_SOURCE_ATTEMPTS", 3, "attempts per request of a network source"),
    Setting("LDTM_YFINANCE_TIMEOUT", 10.0, "HTTP timeout of one yfinance request"),
    Setting("LDTM_YFINANCE_BATCH", 50, "tickers per yfinance request"),
    Setting("LDTM_YFINANCE_AUTO_ADJUST", False, "store yfinance's back-adjusted OHLC instead of raw"),
    Setting("LDTM_IB_HOST", "127.0.0.1", "IB Gateway / TWS host"),
    Setting("LDTM_IB_PORT", 4002, "IB Gateway / TWS port (4002 paper, 4001 live)"),
    Setting("LDTM_IB_CLIENT_ID", 17, "IB API client id, unique per connection"),
    Setting("LDTM_IB_WHAT_TO_SHOW", "ADJUSTED_LAST", "IB bar basis", "choice", ("ADJUSTED_LAST", "TRADES")),
    Setting("LDTM_IB_TIMEOUT", 60.0, "seconds per IB request"),
    Setting("LDTM_MAX_DAILY_MOVE_PCT", 40.0, "a one-day close move beyond this is flagged"),
    Setting("LDTM_MAX_GAP_SESSIONS", 5, "the longest hole in a ticker's bars features may look back across"),
    # Predictions, alerts.
    Setting("LDTM_NEUTRAL_BAND_PCT", 0.25, "moves within +- this percent are neutral"),
    Setting("LDTM_AUDIT_KEY", None, "HMAC key of the prediction chain", "secret"),
    Setting("LDTM_NOTIFY_WEBHOOK_URL", None, "webhook of alerts (JSON POST)", "url", shown="none (log only)"),
    Setting(
        "LDTM_HEARTBEAT_URL",
        None,
        "pinged (HTTP GET) each evening the nightly lands; an outside monitor (healthchecks.io, Uptime Kuma...) "
        "alerts when the pings stop",
        "url",
        shown="none",
    ),
    Setting(
        "LDTM_OPERATOR",
        None,
        "who makes manual overrides (`registry promote`/`rollback`, `gate --force`): recorded and notified with them",
        shown="the login name",
    ),
    Setting("LDTM_SNAPSHOT_DEADLINE", "21:00", "New York time by which snapshots must exist", "time"),
    # The gate (GateThresholds: the same defaults, stored as fractions where typed as percents).
    Setting("LDTM_GATE_POLICY", "evidence", "the gate's policy", "choice", ("evidence", "seed")),
    Setting("LDTM_GATE_MIN_FOLDS", 2, "backtest folds needed"),
    Setting("LDTM_GATE_MIN_ACCURACY", 52.0, "direction accuracy needed"),
    Setting("LDTM_GATE_MAX_ERROR_PCT", 5.0, "mean |pct error| allowed"),
    Setting("LDTM_GATE_BEAT_ALWAYS_UP", None, "accuracy margin over always-up needed", shown="off"),
    Setting("LDTM_GATE_MAX_P_VALUE", None, "skill test p-value needed", shown="off"),
    Setting("LDTM_GATE_MIN_ROWS", 100, "evidence policy: test rows over all folds"),
    Setting("LDTM_GATE_MIN_FOLD_ROWS", 10, "evidence policy: test rows in every fold"),
    Setting("LDTM_GATE_ALPHA", 0.05, "evidence policy: significance of the paired tests"),
    # Shadow evenings (Settings: the same defaults).
    Setting("LDTM_SHADOW_SESSIONS", 0, "shadow evenings before the live comparison (0: promote at once)"),
    Setting("LDTM_SHADOW_MARGIN", 20.0, "the drop the shadow evenings must detect"),
    Setting("LDTM_SHADOW_POWER", 0.8, "the probability they must detect it with"),
    # Decay (DecaySettings: the same defaults, delta stored as a fraction).
    Setting("LDTM_DECAY_DELTA", 10.0, "the accuracy drop the CUSUM is tuned to"),
    Setting("LDTM_DECAY_ARL0", 1000.0, "designed sessions between false alarms per ticker"),
    Setting("LDTM_DECAY_PSI_SESSIONS", 63, "the recent window of the PSI"),
    Setting("LDTM_DECAY_HOLD_SESSIONS", 5, "evenings a signal keeps the ticker in WARN"),
    # Signal performance (signals.py).
    Setting("LDTM_SIGNAL_COST_BP", 5.0, "the paper books' cost per unit of turnover"),
    # Deployment (ldtm_dagster/deployment.py).
    Setting("LDTM_DEPLOYMENT", "local", "where the code location runs", "choice", ("local", "docker", "k8s")),
    Setting("LDTM_K8S_GPU_PER_STEP", True, "a gpu pool step's pod requests one GPU"),
    Setting("LDTM_K8S_STEP_CPU", "1", "CPU request of a gpu pool step's pod (a k8s quantity)", "quantity"),
    Setting(
        "LDTM_K8S_STEP_MEMORY", "2Gi", "memory request of a gpu pool step's pod (a k8s quantity)", "quantity"
    ),
    # Test hooks (faults.pause_point): a process pauses at a named point so a test can kill it there.
    Setting("LDTM_TEST_PAUSE_AT", None, "pause at this point (name#n)", internal=True),
    Setting("LDTM_TEST_PAUSE_DIR", ".", "where the paused process signals", "path", internal=True),
    Setting("LDTM_TEST_PAUSE_S", 300.0, "the longest pause", internal=True),
)


def _setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:  # a programming error: a new variable needs its row first
        raise KeyError(f"{name} is not in config.SETTINGS: add its row to the settings table") from None


def env_text(name: str, default: str | None = None) -> str | None:
    """The raw value of the setting `name`, or `default` when unset or empty (not otherwise checked:
    the caller parses it and names the variable in its error)."""
    _setting(name)
    return os.environ.get(name) or default


def env_is_set(name: str) -> bool:
    """Whether the setting `name` is set to something non-empty."""
    return env_text(name) is not None


def setting(name: str):
    """The setting `name`: a checked number or flag, or the text; the table's default when unset or empty."""
    row = _setting(name)
    kind = row.kind_of
    if kind == "number":
        return env_number(name, row.default)
    if kind == "flag":
        return env_flag(name, row.default)
    if kind == "choice":
        return env_choice(name) or row.default
    return env_text(name, row.default)


# A Kubernetes resource quantity: 1, 0.5, 500m, 2Gi, 512M.
K8S_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def env_choice(name: str) -> str | None:
    """A choice setting as its table spells it, whatever case it was given in; None when unset; a
    ConfigError naming the variable and the choices otherwise."""
    raw = env_text(name)
    if raw is None:
        return None
    choices = _setting(name).choices
    found = next((c for c in choices if c.lower() == raw.strip().lower()), None)
    if found is None:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return found


def _check_text(name: str, row: Setting) -> None:
    """The vocabulary of a choice and the form of a quantity, where set."""
    if row.kind == "choice":
        env_choice(name)
    elif (
        row.kind == "quantity" and (raw := env_text(name)) is not None and not K8S_QUANTITY.match(raw.strip())
    ):
        raise ConfigError(f"{name}={raw!r}: expected a Kubernetes quantity such as 1, 500m, 2Gi")


def check_number(name: str, value, spec: NumberSetting | None = None) -> int | float:
    """`value` (a string from the environment, or a number from an option) as the setting's kind,
    or a ConfigError naming the setting, the value and the unit expected."""
    spec = spec or NUMERIC_SETTINGS[name]
    shown = repr(value.strip()) if isinstance(value, str) else repr(value)
    try:
        number = spec.kind(value.strip()) if isinstance(value, str) else value
    except ValueError:
        what = "a whole number" if spec.kind is int else "a number"
        raise ConfigError(f"{name}={shown} is not {what}: {spec.expected()}") from None
    if spec.kind is int and isinstance(number, float) and not number.is_integer():
        raise ConfigError(f"{name}={shown} is not a whole number: {spec.expected()}")
    if not math.isfinite(number):
        raise ConfigError(f"{name}={shown} is not a finite number: {spec.expected()}")
    number = spec.kind(number)
    low_ok = number > spec.low if spec.low_open else number >= spec.low
    high_ok = number < spec.high if spec.high_open else number <= spec.high
    if not (low_ok and high_ok):
        raise ConfigError(f"{name}={shown} is out of range: {spec.expected()}")
    if name == "LDTM_GATE_MIN_ACCURACY" and 0 < number < 1:
        # Read as a fraction before issue 20: 0.52 would now silently ask for 0.52 % accuracy.
        raise ConfigError(
            f"{name}={shown} looks like a fraction: {spec.expected()}; 0 switches the criterion off"
        )
    return number


def env_number(name: str, default: int | float | None = None) -> int | float | None:
    """The numeric setting `name` from the environment (checked), or `default` when unset or empty."""
    _setting(name)
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return check_number(name, raw)


def check_flag(name: str, value: str) -> bool:
    """`value` read as a flag: 1/0, true/false, yes/no, on/off in any case; else a ConfigError naming it."""
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(
        f"{name}={value.strip()!r} is not a boolean (expected 1/0, true/false, yes/no or on/off)"
    )


def env_flag(name: str, default: bool) -> bool:
    """The flag `name` from the environment (checked), or `default` when unset or empty."""
    _setting(name)
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return check_flag(name, raw)


def check_environment() -> None:
    """Check every numeric setting, flag, choice and quantity that is set; one ConfigError lists each bad one."""
    problems = []
    for name in NUMERIC_SETTINGS:
        try:
            env_number(name)
        except ConfigError as exc:
            problems.append(str(exc))
    for name in BOOLEAN_SETTINGS:
        try:
            env_flag(name, False)
        except ConfigError as exc:
            problems.append(str(exc))
    for name, row in SETTINGS.items():
        try:
            _check_text(name, row)
        except ConfigError as exc:
            problems.append(str(exc))
    problems += _placeholder_passwords()
    if problems:
        raise ConfigError("; ".join(problems))


# Passwords of templates and examples: a deployment still using one is refused before it serves.
PLACEHOLDER_PASSWORDS = frozenset({"change-me", "changeme", "change_me"})


def _placeholder_passwords() -> list[str]:
    found = []
    with contextlib.suppress(Exception):  # a malformed URL is named by the code that connects
        if make_url(os.environ.get("LDTM_DATABASE_URL") or "sqlite://").password in PLACEHOLDER_PASSWORDS:
            found.append("LDTM_DATABASE_URL")
    found += [name for name in DEPLOYMENT_SECRETS if os.environ.get(name) in PLACEHOLDER_PASSWORDS]
    return [
        f"{name}: the template's placeholder password; set a real one (deploy/scripts/new_env.sh)"
        for name in found
    ]


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    universe: str = "full"  # the 103 tickers; the demo and the tests choose `demo` explicitly
    notify_webhook_url: str | None = None
    neutral_band_pct: float = 0.25
    # Backtests reuse stored fold outcomes whose key is unchanged (LDTM_BACKTEST_REUSE=0 refits all).
    backtest_reuse: bool = True
    # >0: a challenger that passes the gate serves in shadow for this many filled evenings (shadow.py).
    shadow_sessions: int = 0
    # The drop (points) those evenings are sized to detect and the power promised at it (shadow_power).
    shadow_margin_points: float = 20.0
    shadow_power: float = 0.8
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A NaN band judges every move "neutral" into the hash-chained table: refuse it however given.
        check_number("neutral_band_pct", self.neutral_band_pct, NUMERIC_SETTINGS["LDTM_NEUTRAL_BAND_PCT"])

    @property
    def checkpoint_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def export_dir(self) -> Path:
        return self.home / "exports"

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        home = Path(overrides.pop("home", None) or setting("LDTM_HOME")).resolve()
        url = overrides.pop("database_url", None) or setting("LDTM_DATABASE_URL")
        if not url:
            url = f"sqlite:///{home / 'ldtm.db'}"
        universe = overrides.pop("universe", None) or setting("LDTM_UNIVERSE")
        check_environment()
        band = setting("LDTM_NEUTRAL_BAND_PCT")
        shadow_sessions = int(setting("LDTM_SHADOW_SESSIONS"))
        margin = float(setting("LDTM_SHADOW_MARGIN"))
        power = float(setting("LDTM_SHADOW_POWER"))
        if power >= 1:
            raise ConfigError(f"LDTM_SHADOW_POWER={power:g}: no finite shadow has power 1 (0.8 is usual)")
        if shadow_sessions > 0:
            from ldtm_core.shadow_power import check_design

            # A shadow too short for the power it states would promote a worse model (issue 27).
            why = check_design(shadow_sessions, margin, power)
            if why:
                raise ConfigError(f"LDTM_SHADOW_SESSIONS={shadow_sessions}: {why}")
        return cls(
            home=home,
            database_url=url,
            universe=universe,
            notify_webhook_url=setting("LDTM_NOTIFY_WEBHOOK_URL"),
            neutral_band_pct=overrides.pop("neutral_band_pct", band),
            shadow_sessions=overrides.pop("shadow_sessions", shadow_sessions),
            shadow_margin_points=overrides.pop("shadow_margin_points", margin),
            shadow_power=overrides.pop("shadow_power", power),
            backtest_reuse=overrides.pop("backtest_reuse", setting("LDTM_BACKTEST_REUSE")),
            **overrides,
        )

    def ensure_dirs(self) -> None:
        """Create the home and its folders, or raise one ConfigError saying why they cannot be.

        Folders that already exist are left alone, so a read-only home whose folders exist still serves
        commands that only read (a PostgreSQL database); what needs to write then fails with 'read-only'.
        """
        home = self.home
        if home.exists() and not home.is_dir():
            raise ConfigError(f"LDTM_HOME {home} is a file, not a directory: point LDTM_HOME at a directory")
        for d in (home, self.checkpoint_dir, self.export_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise ConfigError(
                    f"LDTM_HOME {home} cannot be created: a part of the path is a file, not a directory"
                ) from None
            except OSError as exc:
                why = _MKDIR_REASONS.get(exc.errno, exc.strerror or type(exc).__name__)
                raise ConfigError(f"LDTM_HOME {home}: {d} cannot be created: {why}") from None

    def require_writable(self, folder: Path, what: str) -> None:
        """Refuse, naming the folder, before work whose result could not be stored there (a read-only
        LDTM_HOME whose folders exist passes ensure_dirs): `ldtm train` used to train, then fail to save."""
        reason = None
        if not os.access(folder, os.W_OK):
            reason = "permission denied (read-only?)"
        else:
            try:  # the mount may be read-only although the bits allow writing (and root ignores the bits)
                fd, probe = tempfile.mkstemp(prefix=".ldtm-write-probe-", dir=folder)
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                reason = _MKDIR_REASONS.get(exc.errno, exc.strerror or type(exc).__name__)
        if reason is not None:
            raise ConfigError(
                f"LDTM_HOME {self.home}: {folder} is not writable ({reason}); {what} cannot be stored there: "
                "point LDTM_HOME at a writable folder"
            )

    def require_writable_sqlite(self) -> None:
        """A SQLite database needs its folder writable (its journal files live beside it), even to read."""
        url = engine_url(self.database_url)
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return
        folder = Path(url.database).resolve().parent
        if folder.is_dir() and not os.access(folder, os.W_OK):
            where = f"LDTM_HOME {folder}" if folder == self.home else f"the folder {folder}"
            raise ConfigError(
                f"{where} is read-only: the SQLite database {url.database} needs a writable folder, even "
                "to read (point LDTM_HOME elsewhere, or use a PostgreSQL LDTM_DATABASE_URL)"
            )


def masked_url(url: str) -> str:
    """The URL with any password replaced by ***, safe for logs, metadata and errors."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL must still never leak what follows '://user:'
        if "@" in url and "://" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url


def url_origin(url: str) -> str:
    """Scheme, host and port of a webhook-style URL, the rest (path, query: where its token lives) as ***."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port: nothing of it is safe to show
        return "***"
    return f"{parts.scheme}://{parts.hostname}{port}/***" if parts.scheme and parts.hostname else "***"


# The settings whose values are secrets (the webhook and heartbeat URLs carry their tokens): masked in every
# message, and compose passes them only to the containers that need them (deploy/scripts/sync_settings.py).
SECRET_SETTINGS = tuple(
    name
    for name, row in SETTINGS.items()
    if row.kind == "secret" or name in ("LDTM_NOTIFY_WEBHOOK_URL", "LDTM_HEARTBEAT_URL")
)

# The deployment's own secrets (compose passes them to the containers that need them): masked like ours.
DEPLOYMENT_SECRETS = ("DAGSTER_PG_PASSWORD", "POSTGRES_PASSWORD")


def redact_secrets(text: str) -> str:
    """`text` with the current value of every secret setting (the database URL's password, the audit key,
    the webhook URL) and of the deployment's passwords replaced by ***: for any message a run config could
    have filled with them (a resource's error lands in the event log, readable by whoever reaches the UI)."""
    values = []
    for name in SECRET_SETTINGS:
        value = os.environ.get(name)
        if value:
            values.append(value)
            with contextlib.suppress(Exception):  # a URL's password alone too, as drivers echo it
                values.append(make_url(value).password or "")
    values += [os.environ.get(name) or "" for name in DEPLOYMENT_SECRETS]
    for value in sorted({v for v in values if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def mask_secrets(text: str, url: str) -> str:
    """Remove the password of `url` from an arbitrary message (driver errors echo DSNs)."""
    try:
        password = make_url(url).password
    except Exception:
        return text
    return text.replace(str(password), "***") if password else text


def _import_dbapi(dialect_cls) -> str | None:
    """None when the dialect's DB-API module imports; else the name of the missing module."""
    try:
        dialect_cls.import_dbapi()
    except ImportError as exc:
        return exc.name or str(exc)
    return None


def _module_installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def engine_url(url: str | URL) -> URL:
    """The URL to open: a bare `postgresql://` gets the installed driver, and a URL LDTM cannot open
    (unparsable, another database, a driver that is not installed) raises one ConfigError naming it."""
    shown = masked_url(str(url)) if isinstance(url, str) else url.render_as_string(hide_password=True)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"database URL {shown!r} is not a URL (expected sqlite:///path/to/ldtm.db or "
            "postgresql://user@host:5432/dbname)"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        driver = next((d for d in POSTGRES_DRIVERS if _module_installed(d)), None)
        if driver is None:
            raise ConfigError(
                f"database URL {shown}: no PostgreSQL driver is installed (pip install psycopg2-binary)"
            )
        parsed = parsed.set(drivername=f"postgresql+{driver}")
    try:
        dialect_cls = parsed.get_dialect()
    except NoSuchModuleError:
        raise ConfigError(
            f"database URL {shown}: unknown database kind {parsed.drivername!r} "
            f"(LDTM runs on {' or '.join(SUPPORTED_BACKENDS)})"
        ) from None
    missing = _import_dbapi(dialect_cls)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        also = (
            f"; its driver package {DRIVER_PACKAGES.get(missing, missing)} is not installed either"
            if missing
            else ""
        )
        raise ConfigError(
            f"database URL {shown}: {backend} is not supported (LDTM runs on {' or '.join(SUPPORTED_BACKENDS)}){also}"
        )
    if missing:
        package = DRIVER_PACKAGES.get(missing, missing)
        raise ConfigError(
            f"database URL {shown} needs the Python package {package} (module {missing}), which is not "
            f"installed: pip install {package}, or use postgresql:// to pick the installed driver"
        )
    return parsed
