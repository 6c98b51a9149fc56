"""Runtime settings, read from the environment with defaults that need nothing.

`LDTM_HOME` holds artifacts (checkpoints, exports, the default SQLite database),
`LDTM_DATABASE_URL` is any SQLAlchemy URL, `LDTM_UNIVERSE` picks the tickers.
Secrets only ever come from the environment; `masked_url` is what logs and errors show.

`SETTINGS` is the one table of settings: every `LDTM_*` variable the product reads is a row (name,
default, meaning, and its kind: a `Number` with its type, unit and sane range, a `Flag`, a `Choice` with
its vocabulary, `Text`, a k8s `Quantity`), read only through the accessors here (`setting`, the typed
`setting_int` / `setting_float` / `setting_flag` / `setting_choice` / `setting_text`, and `env_number` /
`env_flag` / `env_text` where the caller's default rules); docs/operations.md's settings table is checked
against it (tests/test_settings_table.py). `Settings.from_env` checks every setting that is set, so a bad
one is one ConfigError before any work.
Percentages are typed as percents everywhere (52 means 52 %), like the CLI options.
"""

from __future__ import annotations

import contextlib
import datetime as dt
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


# --- kinds: how a setting is read from the environment, checked and described ----------------------


class Kind:
    """The kind of a setting: `name` as the table says it (text, path, url, secret, time, quantity, number,
    flag, choice), `describe()` its unit or vocabulary, `check` a value of it. `secret`: masked in every
    message and passed only to the containers that need it. `blank_is_unset`: blank reads as unset (empty
    always does)."""

    name = "text"
    secret = False
    blank_is_unset = False

    def describe(self) -> str:
        return self.name

    def check(self, value, label: str):
        """`value` (a string from the environment, or a value given another way) as this kind, or a
        ConfigError naming `label`."""
        return value


@dataclass(frozen=True)
class Text(Kind):
    """Free text, read as typed; `name` says what it holds: text, path, url, secret or time."""

    name: str = "text"
    secret: bool = False


# A Kubernetes resource quantity: 1, 0.5, 500m, 2Gi, 512M.
K8S_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


@dataclass(frozen=True)
class Quantity(Kind):
    """A Kubernetes resource quantity (K8S_QUANTITY), kept as typed."""

    name = "quantity"

    def check(self, value, label: str):
        if not K8S_QUANTITY.match(str(value).strip()):
            raise ConfigError(f"{label}={value!r}: expected a Kubernetes quantity such as 1, 500m, 2Gi")
        return value


# Flags: one vocabulary (case-insensitive), anything else a ConfigError.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Flag(Kind):
    """On or off: TRUE_WORDS or FALSE_WORDS in any case."""

    name = "flag"
    blank_is_unset = True

    def describe(self) -> str:
        return "a flag: 1/0, true/false, yes/no, on/off"

    def check(self, value, label: str) -> bool:
        if isinstance(value, bool):
            return value
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ConfigError(
            f"{label}={value.strip()!r} is not a boolean (expected 1/0, true/false, yes/no or on/off)"
        )


@dataclass(frozen=True)
class Choice(Kind):
    """One of `choices`, given in any case, read as the table spells it."""

    choices: tuple[str, ...]
    name = "choice"

    def describe(self) -> str:
        return " | ".join(self.choices)

    def check(self, value, label: str) -> str:
        found = next((c for c in self.choices if c.lower() == value.strip().lower()), None)
        if found is None:
            raise ConfigError(f"{label}={value!r}: expected one of {', '.join(self.choices)}")
        return found


@dataclass(frozen=True)
class Number(Kind):
    """A number of `type` (int or float) within its sane range; `unit` is how messages name what to type."""

    type: type  # int or float
    low: float
    high: float
    unit: str
    low_open: bool = False  # `low` itself is refused
    high_open: bool = False  # `high` itself is refused
    refuse_fraction: bool = False  # a percent: 0 < value < 1 is refused as a fraction typed for it
    name = "number"
    blank_is_unset = True

    def expected(self) -> str:
        low = f"above {_num(self.low)}" if self.low_open else f"from {_num(self.low)}"
        high = f"below {_num(self.high)}" if self.high_open else f"to {_num(self.high)}"
        return f"expected {self.unit}, {low} {'and ' if self.high_open else ''}{high}"

    def describe(self) -> str:
        return self.expected().removeprefix("expected ")

    def check(self, value, label: str) -> int | float:
        shown = repr(value.strip()) if isinstance(value, str) else repr(value)
        try:
            number = self.type(value.strip()) if isinstance(value, str) else value
        except ValueError:
            what = "a whole number" if self.type is int else "a number"
            raise ConfigError(f"{label}={shown} is not {what}: {self.expected()}") from None
        if self.type is int and isinstance(number, float) and not number.is_integer():
            raise ConfigError(f"{label}={shown} is not a whole number: {self.expected()}")
        if not math.isfinite(number):
            raise ConfigError(f"{label}={shown} is not a finite number: {self.expected()}")
        number = self.type(number)
        low_ok = number > self.low if self.low_open else number >= self.low
        high_ok = number < self.high if self.high_open else number <= self.high
        if not (low_ok and high_ok):
            raise ConfigError(f"{label}={shown} is out of range: {self.expected()}")
        if self.refuse_fraction and 0 < number < 1:
            raise ConfigError(
                f"{label}={shown} looks like a fraction: {self.expected()}; 0 switches the criterion off"
            )
        return number


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_TABLE_DEFAULT = object()  # Setting.read's default: the row's own


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: the one home of a variable's kind (how it is read, checked and
    described), default and meaning. `shown` is the default as docs/operations.md's table writes it."""

    name: str
    default: object  # the value when unset or empty; None: no value (off, or the caller's default decides)
    meaning: str
    kind: Kind
    shown: str | None = None
    internal: bool = False  # a test hook, not a user setting: not in the operations table

    @property
    def choices(self) -> tuple[str, ...]:
        return self.kind.choices if isinstance(self.kind, Choice) else ()

    @property
    def unit(self) -> str:
        return self.kind.describe()

    def check(self, value, label: str | None = None):
        """`value` (from the environment, or given another way: an option) as this setting's kind, or a
        ConfigError naming `label` (the variable unless told), the value and what was expected."""
        return self.kind.check(value, label or self.name)

    def read(self, default: object = _TABLE_DEFAULT):
        """The setting from the environment, checked; `default` (the table's unless told) when unset or
        empty."""
        raw = os.environ.get(self.name)
        if not raw or (self.kind.blank_is_unset and not raw.strip()):
            return self.default if default is _TABLE_DEFAULT else default
        return self.check(raw)

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


MIN_DECAY_ARL0 = 20  # sessions: about a trading month
SESSIONS = "a whole number of sessions"
PERCENT_POINTS = "percentage points"

# THE settings table: every LDTM_* variable the product reads is a row here, with its kind, and is read
# through the accessors below (tests/test_settings_table.py checks the code and docs/operations.md's
# table against it). Defaults that live in a dataclass (the gate's, decay's) are the same numbers, in the
# setting's unit (tested).
SETTINGS: dict[str, Setting] = _table(
    # Where things are.
    Setting(
        "LDTM_HOME", "./.ldtm", "artifacts: checkpoints, exports, the default SQLite database", Text("path")
    ),
    Setting(
        "LDTM_DATABASE_URL",
        None,
        "the application database: a SQLite or PostgreSQL SQLAlchemy URL (may hold a password)",
        Text("secret", secret=True),
        shown="`sqlite:///$LDTM_HOME/ldtm.db`",
    ),
    Setting("LDTM_UNIVERSE", "full", "the tickers: demo, full, AAPL,NVDA or a file", Text(), shown="`full`"),
    Setting(
        "LDTM_PROFILE",
        "reference",
        "model profile of the checkpoints asset",
        Choice(("reference", "reference_b32", "upgrade", "demo", "tuned")),
    ),
    Setting(
        "LDTM_CACHE_DIR",
        None,
        "where the bf16 probe's answer is cached",
        Text("path"),
        shown="`~/.cache/ldtm`",
    ),
    # Training overrides of the Dagster `training` resource (none: the profile's value).
    Setting("LDTM_MAX_EPOCHS", None, "epochs cap", Number(int, 1, 1e5, "a whole number of epochs")),
    Setting(
        "LDTM_PATIENCE", None, "early-stopping patience", Number(int, 1, 1e5, "a whole number of epochs")
    ),
    Setting("LDTM_AMP", None, "training precision", Choice(("auto", "fp16", "bf16", "off"))),
    Setting(
        "LDTM_MAX_WORKERS",
        None,
        "training workers (none: the slot plan)",
        Number(int, 1, 1024, "a whole number of workers"),
    ),
    Setting("LDTM_BF16_PROBE", True, "measure bf16 against fp32 on this CPU before using it", Flag()),
    Setting(
        "LDTM_TRAINING_MALLOC",
        True,
        "a CPU training process keeps its freed buffers (glibc mallopt) instead of mapping them anew each step",
        Flag(),
    ),
    Setting(
        "LDTM_BACKTEST_REUSE", True, "backtests reuse stored fold outcomes whose key is unchanged", Flag()
    ),
    # The weekly loop (ldtm_dagster): global recipes refitted each week beside those serving a ticker.
    Setting(
        "LDTM_CHALLENGER_RECIPES",
        None,
        "global recipes the weekly loop fits and decides each week as challengers (comma list), beside the "
        "recipes serving a ticker",
        Text("text"),
    ),
    # A global recipe's fit (learning.recipes.budget): in a child process within an hour by default, so
    # a slow recipe is refused by name instead of hanging the run; 0 (and no memory limit): in-process.
    Setting(
        "LDTM_RECIPE_FIT_TIMEOUT_S",
        3600.0,
        "wall time a global recipe's fit may take (in a child process), else refused by name; 0: no limit",
        Number(float, 0, 1e6, "seconds"),
    ),
    Setting(
        "LDTM_RECIPE_FIT_MEMORY_MIB",
        None,
        "memory a global recipe's fit may allocate (RLIMIT_DATA of its child process), else refused by name",
        Number(int, 256, 1e7, "a whole number of MiB"),
    ),
    # GPU slots (SPEC §6).
    Setting(
        "LDTM_GPU_PER_JOB_MIB",
        600,
        "VRAM one training job needs",
        Number(int, 1, 1e7, "a whole number of MiB"),
    ),
    Setting(
        "LDTM_GPU_HEADROOM_MIB",
        1024,
        "VRAM left free on every GPU",
        Number(int, 0, 1e7, "a whole number of MiB"),
    ),
    Setting(
        "LDTM_GPU_MAX_SLOTS", None, "cap on the pool's slots", Number(int, 0, 1e5, "a whole number of slots")
    ),
    Setting(
        "LDTM_GPU_POOL_ID",
        None,
        "marks the gpu pool's own processes (their VRAM counts as the pool's)",
        Text(),
        shown="set by the code location to `gpu@$DAGSTER_HOME`",
    ),
    # Prices.
    Setting(
        "LDTM_PRICE_SOURCE", "synthetic", "where bars come from: synthetic, files:<dir>, yfinance, ib", Text()
    ),
    Setting(
        "LDTM_SYNTHETIC_SPLITS",
        "",
        "splits planted in the synthetic market: TICKER:DATE:RATIO,...",
        Text(),
        shown="none",
    ),
    Setting("LDTM_FORCE_REINGEST", False, "ingest again what was refused or already ingested", Flag()),
    Setting(
        "LDTM_SOURCE_ATTEMPTS",
        3,
        "attempts per request of a network source",
        Number(int, 1, 100, "a whole number of attempts"),
    ),
    Setting(
        "LDTM_YFINANCE_TIMEOUT",
        10.0,
        "HTTP timeout of one yfinance request",
        Number(float, 0, 3600, "seconds", low_open=True),
    ),
    Setting(
        "LDTM_YFINANCE_BATCH",
        50,
        "tickers per yfinance request",
        Number(int, 1, 1000, "a whole number of tickers per request"),
    ),
    Setting("LDTM_YFINANCE_AUTO_ADJUST", False, "store yfinance's back-adjusted OHLC instead of raw", Flag()),
    Setting("LDTM_IB_HOST", "127.0.0.1", "IB Gateway / TWS host", Text()),
    Setting(
        "LDTM_IB_PORT",
        4002,
        "IB Gateway / TWS port (4002 paper, 4001 live)",
        Number(int, 1, 65535, "a whole number (a TCP port)"),
    ),
    Setting(
        "LDTM_IB_CLIENT_ID",
        17,
        "IB API client id, unique per connection",
        Number(int, 0, 2**31 - 1, "a whole number (the IB API client id)"),
    ),
    Setting("LDTM_IB_WHAT_TO_SHOW", "ADJUSTED_LAST", "IB bar basis", Choice(("ADJUSTED_LAST", "TRADES"))),
    Setting(
        "LDTM_IB_TIMEOUT", 60.0, "seconds per IB request", Number(float, 0, 3600, "seconds", low_open=True)
    ),
    Setting(
        "LDTM_MAX_DAILY_MOVE_PCT",
        40.0,
        "a one-day close move beyond this is flagged",
        Number(float, 0, 1e4, "a percent (40 for 40 %)", low_open=True),
    ),
    Setting(
        "LDTM_MAX_GAP_SESSIONS",
        5,
        "the longest hole in a ticker's bars features may look back across",
        Number(int, 0, 1e5, SESSIONS),
    ),
    # Predictions, alerts.
    Setting(
        "LDTM_NEUTRAL_BAND_PCT",
        0.25,
        "moves within +- this percent are neutral",
        Number(float, 0, 100, "a percent (0.25 for 0.25 %)"),
    ),
    Setting("LDTM_AUDIT_KEY", None, "HMAC key of the prediction chain", Text("secret", secret=True)),
    Setting(
        "LDTM_RECEIPTS_DIR",
        None,
        "where each evening's signed receipt is written (a folder the database role cannot touch)",
        Text("path"),
        shown="none (no receipts)",
    ),
    Setting(
        "LDTM_RECEIPT_KEY_FILE",
        None,
        "the Ed25519 private key (PEM, mode 600) that signs the receipts (`ldtm receipts keygen`)",
        Text("path"),
        shown="none",
    ),
    Setting(
        "LDTM_RECEIPT_KEY",
        None,
        "instead of a key file: a secret seed (32+ characters) the Ed25519 signing key is derived from",
        Text("secret", secret=True),
    ),
    Setting(
        "LDTM_RECEIPTS_GIT", False, "commit each receipt to the git repository at LDTM_RECEIPTS_DIR", Flag()
    ),
    Setting(
        "LDTM_RECEIPTS_GIT_REMOTE",
        None,
        "push each receipt's commit to this remote of that repository (its name, e.g. origin)",
        Text(),
        shown="none (no push)",
    ),
    Setting(
        "LDTM_RECEIPTS_MIRROR",
        None,
        "a second, independent folder every receipt (and token) is also written to (another disk or host)",
        Text("path"),
        shown="none (one copy)",
    ),
    Setting(
        "LDTM_TSA_URL",
        None,
        "an RFC 3161 timestamp authority that timestamps each receipt (http(s) URL; may hold user:password)",
        Text("url", secret=True),  # the URL may carry its credentials
        shown="none (no timestamps)",
    ),
    Setting(
        "LDTM_NOTIFY_WEBHOOK_URL",
        None,
        "webhook of alerts (JSON POST)",
        Text("url", secret=True),  # the URL carries its token
        shown="none (log only)",
    ),
    Setting(
        "LDTM_HEARTBEAT_URL",
        None,
        "pinged (HTTP GET) each evening the nightly lands; an outside monitor (healthchecks.io, Uptime Kuma...) "
        "alerts when the pings stop",
        Text("url", secret=True),  # the URL carries its token
        shown="none",
    ),
    Setting(
        "LDTM_OPERATOR",
        None,
        "who makes manual overrides (`registry promote`/`rollback`, `gate --force`): recorded and notified with them",
        Text(),
        shown="the login name",
    ),
    Setting(
        "LDTM_NIGHTLY_TIME",
        "18:15",
        "New York time the nightly schedule starts, after the close",
        Text("time"),
    ),
    Setting("LDTM_SNAPSHOT_DEADLINE", "21:00", "New York time by which snapshots must exist", Text("time")),
    # The gate (GateThresholds: the same defaults, stored as fractions where typed as percents).
    Setting("LDTM_GATE_POLICY", "evidence", "the gate's policy", Choice(("evidence", "seed"))),
    Setting(
        "LDTM_GATE_MIN_FOLDS", 2, "backtest folds needed", Number(int, 1, 1000, "a whole number of folds")
    ),
    Setting(
        "LDTM_GATE_MIN_ACCURACY",
        52.0,
        "direction accuracy needed",
        Number(float, 0, 100, "a percent (52 for 52 %)", refuse_fraction=True),
    ),
    Setting(
        "LDTM_GATE_MAX_ERROR_PCT",
        5.0,
        "mean |pct error| allowed",
        Number(float, 0, 1e6, "a percent (5 for 5 %)"),
    ),
    Setting(
        "LDTM_GATE_BEAT_ALWAYS_UP",
        None,
        "accuracy margin over always-up needed",
        Number(float, -100, 100, f"{PERCENT_POINTS} of accuracy above always-up (2 for 2 points)"),
        shown="off",
    ),
    Setting(
        "LDTM_GATE_MAX_P_VALUE",
        None,
        "skill test p-value needed",
        Number(float, 0, 1, "a probability (0.05)", low_open=True),
        shown="off",
    ),
    Setting(
        "LDTM_GATE_MIN_ROWS",
        100,
        "evidence policy: test rows over all folds",
        Number(int, 1, 1e7, "a whole number of backtest test rows"),
    ),
    Setting(
        "LDTM_GATE_MIN_FOLD_ROWS",
        10,
        "evidence policy: test rows in every fold",
        Number(int, 1, 1e6, "a whole number of test rows per fold"),
    ),
    Setting(
        "LDTM_GATE_ALPHA",
        0.05,
        "evidence policy: significance of the paired tests",
        # The gate refuses alpha 1 (every challenger "significant"): (0, 1) open at both ends.
        Number(float, 0, 1, "a probability (0.05)", low_open=True, high_open=True),
    ),
    Setting(
        "LDTM_GATE_ERROR_MARGIN_PCT",
        1.0,
        "evidence policy: |error| difference that counts, as a percent of the champion's mean |error|",
        Number(float, 0, 100, "a percent of the champion's mean |error| (1 for 1 %)"),
    ),
    # Shadow evenings (Settings: the same defaults).
    Setting(
        "LDTM_SHADOW_SESSIONS",
        0,
        "shadow evenings before the live comparison (0: promote at once)",
        Number(int, 0, 1e4, f"{SESSIONS} (0: promote at once)"),
    ),
    # The drop the shadow evenings must detect, and with what probability (shadow_power.py).
    Setting(
        "LDTM_SHADOW_MARGIN",
        20.0,
        "the drop the shadow evenings must detect",
        Number(float, 0, 100, f"{PERCENT_POINTS} (20 for 60 % vs 40 %)", low_open=True),
    ),
    Setting(
        "LDTM_SHADOW_POWER",
        0.8,
        "the probability they must detect it with",
        Number(float, 0, 1, "a probability below 1 (0.8)", low_open=True),
    ),
    # Decay (DecaySettings: the same defaults, delta stored as a fraction).
    Setting(
        "LDTM_DECAY_DELTA",
        10.0,
        "the accuracy drop the CUSUM is tuned to",
        Number(float, 0, 100, f"{PERCENT_POINTS} (10 for 10 points)", low_open=True),
    ),
    Setting(
        "LDTM_DECAY_ARL0",
        1000.0,
        "designed sessions between false alarms per ticker",
        # A stable model is in WARN on ~hold/ARL0 of nights: below a month of sessions (a quarter of
        # nights at the default hold of 5) the alarm says nothing.
        Number(float, MIN_DECAY_ARL0, 1e7, "sessions between false alarms per ticker"),
    ),
    Setting("LDTM_DECAY_PSI_SESSIONS", 63, "the recent window of the PSI", Number(int, 2, 1e5, SESSIONS)),
    Setting(
        "LDTM_DECAY_HOLD_SESSIONS",
        5,
        "evenings a signal keeps the ticker in WARN",
        Number(int, 1, 1e5, SESSIONS),
    ),
    # Signal performance (accountability.signals.signals).
    Setting(
        "LDTM_SIGNAL_COST_BP",
        5.0,
        "the paper books' cost per unit of turnover",
        Number(float, 0, 10_000, "basis points per unit of turnover (5 for 0.05 %)"),
    ),
    Setting(
        "LDTM_SIGNAL_EXECUTION",
        "next_close",
        "when the paper books trade an evening's signals",
        Choice(("next_close", "next_open", "same_close")),
    ),
    # Submitted forecasts (accountability.submissions).
    Setting(
        "LDTM_SUBMISSION_CUTOFF_MIN",
        0,
        "minutes before the open of the session after the run date when a live submission closes",
        Number(int, 0, 1_000, "minutes"),
    ),
    Setting(
        "LDTM_SUBMISSIONS_DIR",
        None,
        "drop folder the submission sensor reads: <dir>/<model name>/<file>.csv or .parquet (unset: off)",
        Text("path"),
    ),
    # Deployment (ldtm_dagster/deployment.py).
    Setting("LDTM_DEPLOYMENT", "local", "where the code location runs", Choice(("local", "docker", "k8s"))),
    Setting("LDTM_K8S_GPU_PER_STEP", True, "a gpu pool step's pod requests one GPU", Flag()),
    Setting("LDTM_K8S_STEP_CPU", "1", "CPU request of a gpu pool step's pod (a k8s quantity)", Quantity()),
    Setting(
        "LDTM_K8S_STEP_MEMORY", "2Gi", "memory request of a gpu pool step's pod (a k8s quantity)", Quantity()
    ),
    # Test hooks (faults.pause_point): a process pauses at a named point so a test can kill it there.
    Setting("LDTM_TEST_PAUSE_AT", None, "pause at this point (name#n)", Text(), internal=True),
    Setting("LDTM_TEST_PAUSE_DIR", ".", "where the paused process signals", Text("path"), internal=True),
    Setting(
        "LDTM_TEST_PAUSE_S",
        300.0,
        "the longest pause",
        Number(float, 0, 1e6, "seconds", low_open=True),
        internal=True,
    ),
)
# Derived from the rows, for the callers that check a number given another way (an option) against a
# setting's range: name -> its Number.
NUMERIC_SETTINGS: dict[str, Number] = {
    n: row.kind for n, row in SETTINGS.items() if isinstance(row.kind, Number)
}


# --- accessors: the only readers of LDTM_* variables ---------------------------------------------------


def _setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:  # a programming error: a new variable needs its row first
        raise KeyError(f"{name} is not in config.SETTINGS: add its row to the settings table") from None


def _typed(name: str, wanted: str, fits) -> Setting:
    """The row of `name`, whose kind must fit the accessor (a programming error otherwise)."""
    row = _setting(name)
    if not fits(row.kind):
        raise TypeError(f"{name} is a {row.kind.name} setting ({row.unit}), not {wanted}")
    return row


def setting(name: str):
    """The setting `name` as its kind reads it (a checked number or flag, a choice as the table spells it,
    the text); the table's default when unset or empty."""
    return _setting(name).read()


def setting_int(name: str) -> int | None:
    """The whole-number setting `name`, checked; the table's default when unset or empty."""
    return _typed(name, "a whole number", lambda k: isinstance(k, Number) and k.type is int).read()


def setting_float(name: str) -> float | None:
    """The (non-whole) number setting `name`, checked; the table's default when unset or empty."""
    value = _typed(name, "a number", lambda k: isinstance(k, Number) and k.type is float).read()
    return None if value is None else float(value)


def setting_flag(name: str) -> bool:
    """The flag `name`, checked; the table's default when unset or empty."""
    return _typed(name, "a flag", lambda k: isinstance(k, Flag)).read()


def setting_choice(name: str) -> str | None:
    """The choice `name` as the table spells it, given in any case; the table's default when unset."""
    return _typed(name, "a choice", lambda k: isinstance(k, Choice)).read()


def setting_text(name: str) -> str | None:
    """The text setting `name` (text, path, url, secret, time, quantity) as typed; the table's default
    when unset or empty."""
    return _typed(name, "text", lambda k: isinstance(k, (Text, Quantity))).read()


def setting_time(name: str) -> dt.time:
    """The time-of-day setting `name`: a New York wall-clock time (HH:MM), no offset; the table's default
    when unset or empty."""
    raw = _typed(name, "a time of day", lambda k: isinstance(k, Text) and k.name == "time").read()
    try:
        value = dt.time.fromisoformat(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a time of day (HH:MM, New York)") from None
    if value.tzinfo is not None:  # compared with New York wall-clock times: an offset has no meaning
        raise ConfigError(f"{name}={raw!r}: give a New York time of day without an offset (HH:MM)")
    return value


def env_text(name: str, default: str | None = None) -> str | None:
    """The raw value of the setting `name`, or `default` when unset or empty (not otherwise checked:
    the caller parses it and names the variable in its error)."""
    _setting(name)
    return os.environ.get(name) or default


def env_named(name: str) -> str | None:
    """A variable the user names at run time, not a setting (a secret passed by name to keep its value off
    the command line): its value, or None when unset or empty."""
    if name in SETTINGS:
        raise ConfigError(f"{name} is a setting: name another variable")
    return os.environ.get(name) or None


def env_is_set(name: str) -> bool:
    """Whether the setting `name` is set to something non-empty."""
    return env_text(name) is not None


def env_number(name: str, default: int | float | None = None) -> int | float | None:
    """The numeric setting `name` from the environment (checked), or `default` when unset or empty."""
    return _typed(name, "a number", lambda k: isinstance(k, Number)).read(default)


def env_flag(name: str, default: bool) -> bool:
    """The flag `name` from the environment (checked), or `default` when unset or empty."""
    return _typed(name, "a flag", lambda k: isinstance(k, Flag)).read(default)


def check_number(name: str, value, spec: Number | None = None) -> int | float:
    """`value` (a string from the environment, or a number from an option) as the setting's kind,
    or a ConfigError naming `name`, the value and the unit expected (`spec`: another setting's)."""
    return (spec or _typed(name, "a number", lambda k: isinstance(k, Number)).kind).check(value, name)


def check_environment() -> None:
    """Check every setting that is set (numbers, flags, choices, quantities); one ConfigError lists each bad one."""
    problems = []
    for row in SETTINGS.values():
        try:
            row.read()
        except ConfigError as exc:
            problems.append(str(exc))
    problems += _placeholder_passwords()
    if problems:
        raise ConfigError("; ".join(problems))


# Secrets of templates, examples and defaults (compared case-insensitively): a deployment still using one
# is refused before it serves; so is any secret shorter than MIN_SECRET_LENGTH (new_env.sh makes 32).
PLACEHOLDER_PASSWORDS = frozenset(
    {
        "change-me", "changeme", "change_me", "change-it", "changeit", "replace-me", "replaceme", "todo",
        "password", "passw0rd", "password1", "secret", "s3cret", "admin", "root", "postgres", "dagster", "ldtm",
        "test", "example", "default", "letmein", "qwerty", "12345678", "123456789", "1234567890",
        "your-secret-here", "your-password-here", "xxxxxxxx", "<secret>", "<password>",
    }
)  # fmt: skip
MIN_SECRET_LENGTH = 16


def weak_secret(value: str) -> str | None:
    """Why `value` is no secret (a known placeholder, or too short), or None; never quotes the value."""
    if value.strip().lower() in PLACEHOLDER_PASSWORDS:
        return "a template's or default placeholder"
    if len(value) < MIN_SECRET_LENGTH:
        return f"shorter than {MIN_SECRET_LENGTH} characters"
    return None


def _placeholder_passwords() -> list[str]:
    """Every secret setting that holds a password or key (the database URL's password, the audit and
    receipt keys, the deployment's passwords) checked by `weak_secret`. URL settings whose secret is a
    token in the path (webhooks) are the service's to issue, and not judged here."""
    found = []
    with contextlib.suppress(Exception):  # a malformed URL is named by the code that connects
        password = make_url(os.environ.get("LDTM_DATABASE_URL") or "sqlite://").password
        if password is not None:
            found.append(("LDTM_DATABASE_URL", "its password is", weak_secret(str(password))))
    keys = [n for n in SECRET_SETTINGS if SETTINGS[n].kind.name == "secret" and n != "LDTM_DATABASE_URL"]
    for name in (*keys, *DEPLOYMENT_SECRETS):
        value = os.environ.get(name)
        if value:
            found.append((name, "it is", weak_secret(value)))
    return [
        f"{name}: {it} {why}: set a real secret (deploy/scripts/new_env.sh makes random ones)"
        for name, it, why in found
        if why
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
        SETTINGS["LDTM_NEUTRAL_BAND_PCT"].check(self.neutral_band_pct, "neutral_band_pct")

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
        band = setting_float("LDTM_NEUTRAL_BAND_PCT")
        shadow_sessions = setting_int("LDTM_SHADOW_SESSIONS")
        margin = setting_float("LDTM_SHADOW_MARGIN")
        power = setting_float("LDTM_SHADOW_POWER")
        if power >= 1:
            raise ConfigError(f"LDTM_SHADOW_POWER={power:g}: no finite shadow has power 1 (0.8 is usual)")
        if shadow_sessions > 0:
            from ldtm_core.shadow_power import check_design

            # A shadow too short for the power it states would promote a worse model.
            why = check_design(shadow_sessions, margin, power)
            if why:
                raise ConfigError(f"LDTM_SHADOW_SESSIONS={shadow_sessions}: {why}")
        return cls(
            home=home,
            database_url=url,
            universe=universe,
            notify_webhook_url=setting_text("LDTM_NOTIFY_WEBHOOK_URL"),
            neutral_band_pct=overrides.pop("neutral_band_pct", band),
            shadow_sessions=overrides.pop("shadow_sessions", shadow_sessions),
            shadow_margin_points=overrides.pop("shadow_margin_points", margin),
            shadow_power=overrides.pop("shadow_power", power),
            backtest_reuse=overrides.pop("backtest_reuse", setting_flag("LDTM_BACKTEST_REUSE")),
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


# Query parameters that carry a credential (libpq's `?password=`, a token or key in a service's URL).
CREDENTIAL_PARAMS = re.compile(
    r"^(password|passwd|pwd|pass|sslpassword|secret|token|access_token|auth|api[_-]?key|key|sig|signature)$",
    re.I,
)


def masked_url(url: str) -> str:
    """What a log, metadata or error may show of a URL that can carry a credential (the one rule): its
    password and every credential query value (CREDENTIAL_PARAMS) as ***; an http(s) URL (a webhook, a
    timestamp authority: the token may be its path) only as its origin; a value that is not a URL, ***."""
    if url.lower().startswith(("http://", "https://")):
        return url_origin(url)
    try:
        parsed = make_url(url)
    except Exception:  # not a URL: nothing of it is known to be safe to show
        if "@" in url and "://" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1].split('?')[0]}"
        return "***"
    masked = {k: ("***" if CREDENTIAL_PARAMS.match(k) else v) for k, v in parsed.query.items()}
    return parsed.set(query=masked).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def credentials_in(value: str) -> list[str]:
    """The credential parts of a setting's value, each to be masked wherever it appears: the whole value,
    and where it is a URL its password and credential query values (drivers and servers echo them)."""
    out = [value]
    with contextlib.suppress(Exception):
        parsed = make_url(value)
        out.append(parsed.password or "")
        for k, v in parsed.query.items():
            if CREDENTIAL_PARAMS.match(k):
                out += [v] if isinstance(v, str) else list(v)
    with contextlib.suppress(Exception):
        parts = urlsplit(value)
        out.append(parts.password or "")
        if parts.scheme in ("http", "https") and len(parts.path) >= 8:  # a webhook's token is its path
            out += [parts.netloc + parts.path, parts.path]
    return [v for v in out if v]


def url_origin(url: str) -> str:
    """Scheme, host and port of a webhook-style URL, the rest (path, query: where its token lives) as ***."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port: nothing of it is safe to show
        return "***"
    return f"{parts.scheme}://{parts.hostname}{port}/***" if parts.scheme and parts.hostname else "***"


# The settings whose values are secrets (their rows' kinds say so): masked in every message, and compose
# passes them only to the containers that need them (deploy/scripts/sync_settings.py).
SECRET_SETTINGS = tuple(name for name, row in SETTINGS.items() if row.kind.secret)

# The receipts' settings: on the compose stack only the signer (`ldtm receipts watch`) reads them, so the
# signing key never reaches the processes that write the record (deploy/scripts/sync_settings.py).
SIGNER_SETTINGS = (
    "LDTM_RECEIPTS_DIR",
    "LDTM_RECEIPT_KEY_FILE",
    "LDTM_RECEIPT_KEY",
    "LDTM_RECEIPTS_GIT",
    "LDTM_RECEIPTS_GIT_REMOTE",
    "LDTM_RECEIPTS_MIRROR",
    "LDTM_TSA_URL",
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
            values += credentials_in(value)  # a URL's password alone too, as drivers echo it
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
