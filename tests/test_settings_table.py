"""One table of settings (issue 29): every LDTM_* variable is a row of config.SETTINGS, read only
through config's accessors, with the same defaults as the code that uses it and as
docs/operations.md's settings table."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from ldtm_core import config
from ldtm_core.config import SETTINGS, env_text, setting
from ldtm_core.errors import ConfigError

ROOT = Path(config.__file__).resolve().parents[1]
PRODUCT = ("ldtm_core", "ldtm_dagster", "ldtm_dashboard")
NAME = re.compile(r"LDTM_[A-Z0-9_]+")


def _product_files():
    for package in PRODUCT:
        yield from sorted((ROOT / package).rglob("*.py"))


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` assignments, to see through `os.environ.get(ENV_X)`."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def environment_reads(source: str) -> list[tuple[int, str | None]]:
    """(line, variable) of every read of the process environment in `source`: os.environ.get, os.getenv,
    os.environ[...] and `in os.environ`; the variable is None when it is not a constant. Writes
    (os.environ[...] = ..., setdefault for child processes) are not reads of a setting."""
    tree = ast.parse(source)
    constants = _constants(tree)

    def key(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    reads = []
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "get"
            and _is_environ(node.value)
            and id(node) not in called
        ):
            reads.append((node.lineno, None))  # `env = os.environ.get`: reads whatever it is called with
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            environ_get = f.attr in ("get", "__getitem__") and _is_environ(f.value)
            getenv = f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"
            if (environ_get or getenv) and node.args:
                reads.append((node.lineno, key(node.args[0])))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            reads.append((node.lineno, key(node.slice)))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            reads.append((node.lineno, key(node.left)))
    return sorted(reads, key=lambda r: r[0])


def settings_read_outside_config(files) -> list[str]:
    bad = []
    for path in files:
        if path == ROOT / "ldtm_core" / "config.py":
            continue
        for line, var in environment_reads(path.read_text()):
            # Not a user setting: Dagster's and the system's own variables (DAGSTER_HOME, COLUMNS, ...).
            if var is None or var.startswith("LDTM_"):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {var or 'a variable named at run time'}")
    return bad


def test_the_scanner_sees_every_way_of_reading_the_environment():
    source = """
import os
from os import environ
ENV = "LDTM_X"
a = os.environ.get("LDTM_A")
b = os.getenv("LDTM_B", "1")
c = os.environ["LDTM_C"]
d = "LDTM_D" in os.environ
e = environ.get(ENV)
f = os.environ.get(some_name)
os.environ["LDTM_WRITTEN"] = "1"
os.environ.setdefault("LDTM_CHILD", "1")
g = os.environ.get("DAGSTER_HOME")
env = os.environ.get
"""
    assert [v for _, v in environment_reads(source)] == [
        "LDTM_A",
        "LDTM_B",
        "LDTM_C",
        "LDTM_D",
        "LDTM_X",
        None,
        "DAGSTER_HOME",
        None,
    ]


def test_no_product_code_reads_an_ldtm_variable_outside_config():
    assert settings_read_outside_config(_product_files()) == []


def test_every_ldtm_name_in_the_product_is_a_row_of_the_table():
    named = set()
    for path in _product_files():
        named |= set(re.findall(r"[\"'](LDTM_[A-Z0-9_]+)[\"']", path.read_text()))
    assert named - set(SETTINGS) == set()


def test_every_row_carries_its_whole_kind():
    """Each row's kind is the one place that says how it is read: numbers with a type and a range, flags,
    choices with their vocabulary, text of a named sort; the defaults fit their kinds."""
    for row in SETTINGS.values():
        assert isinstance(row.kind, (config.Number, config.Flag, config.Choice, config.Text, config.Quantity))
        assert row.meaning and row.kind.name in (
            "number",
            "flag",
            "text",
            "path",
            "url",
            "secret",
            "time",
            "choice",
            "quantity",
        )
        if isinstance(row.kind, config.Number):
            assert row.kind.type in (int, float)
            assert row.default is None or isinstance(row.default, row.kind.type)
            assert row.default is None or row.check(row.default) == row.default
        if isinstance(row.kind, config.Flag):
            assert isinstance(row.default, bool)
        if isinstance(row.kind, config.Choice):
            assert row.choices and (row.default is None or row.default in row.choices)
        if isinstance(row.kind, (config.Text, config.Quantity)):
            assert row.default is None or isinstance(row.default, str)
    assert set(config.NUMERIC_SETTINGS) == {n for n, r in SETTINGS.items() if r.kind.name == "number"}
    assert set(config.SECRET_SETTINGS) == {n for n, r in SETTINGS.items() if r.kind.secret}


def _doc_table() -> dict[str, str]:
    """variable -> its default cell, from docs/operations.md's settings table."""
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("| variable | meaning | default |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = NAME.findall(cells[0])
        parts = [p.strip() for p in cells[-1].split(", ")]
        for i, name in enumerate(names):
            assert name not in rows, f"{name} is in the settings table twice"
            rows[name] = parts[i] if len(parts) == len(names) else cells[-1]
    return rows


def test_the_operations_table_lists_exactly_the_user_settings_with_their_defaults():
    documented = _doc_table()
    users = {name for name, row in SETTINGS.items() if not row.internal}
    assert set(documented) == users, (
        f"missing from docs/operations.md: {sorted(users - set(documented))}; "
        f"not settings: {sorted(set(documented) - users)}"
    )
    for name, cell in documented.items():
        shown, cell = SETTINGS[name].shown_default().replace("`", ""), cell.replace("`", "")
        assert cell == shown or cell.startswith(shown + " "), (name, cell, shown)


def test_the_table_defaults_are_the_ones_the_code_uses():
    from ldtm_core.accountability.decay.decay import DecaySettings
    from ldtm_core.accountability.gate.gate import GateThresholds
    from ldtm_core.accountability.signals import signals
    from ldtm_core.data import price_gaps, price_moves, sources
    from ldtm_core.data.sources.ib import IBSource
    from ldtm_core.learning import gpu_slots
    from ldtm_dagster import deployment

    d = {name: row.default for name, row in SETTINGS.items()}
    gate = GateThresholds()
    assert (gate.min_folds, gate.min_direction_accuracy * 100, gate.max_mean_abs_pct_error) == (
        d["LDTM_GATE_MIN_FOLDS"],
        pytest.approx(d["LDTM_GATE_MIN_ACCURACY"]),
        d["LDTM_GATE_MAX_ERROR_PCT"],
    )
    assert (gate.beat_always_up_margin, gate.max_p_value, gate.policy) == (
        d["LDTM_GATE_BEAT_ALWAYS_UP"],
        d["LDTM_GATE_MAX_P_VALUE"],
        d["LDTM_GATE_POLICY"],
    )
    assert (gate.min_rows, gate.min_fold_rows, gate.alpha) == (
        d["LDTM_GATE_MIN_ROWS"],
        d["LDTM_GATE_MIN_FOLD_ROWS"],
        d["LDTM_GATE_ALPHA"],
    )
    decay = DecaySettings()
    assert (decay.delta * 100, decay.arl0, decay.psi_sessions, decay.hold) == (
        pytest.approx(d["LDTM_DECAY_DELTA"]),
        d["LDTM_DECAY_ARL0"],
        d["LDTM_DECAY_PSI_SESSIONS"],
        d["LDTM_DECAY_HOLD_SESSIONS"],
    )
    fields = {f: p.default for f, p in inspect.signature(config.Settings).parameters.items()}
    assert (fields["universe"], fields["neutral_band_pct"], fields["backtest_reuse"]) == (
        d["LDTM_UNIVERSE"],
        d["LDTM_NEUTRAL_BAND_PCT"],
        d["LDTM_BACKTEST_REUSE"],
    )
    assert (fields["shadow_sessions"], fields["shadow_margin_points"], fields["shadow_power"]) == (
        d["LDTM_SHADOW_SESSIONS"],
        d["LDTM_SHADOW_MARGIN"],
        d["LDTM_SHADOW_POWER"],
    )
    assert (
        d["LDTM_GPU_PER_JOB_MIB"],
        d["LDTM_GPU_HEADROOM_MIB"],
    ) == (gpu_slots.DEFAULT_PER_JOB_MIB, gpu_slots.DEFAULT_HEADROOM_MIB)
    assert d["LDTM_MAX_DAILY_MOVE_PCT"] == price_moves.DEFAULT_MAX_MOVE_PCT
    assert d["LDTM_SIGNAL_COST_BP"] == signals.DEFAULT_COST_BP
    assert d["LDTM_MAX_GAP_SESSIONS"] == price_gaps.DEFAULT_MAX_GAP_SESSIONS
    assert d["LDTM_PRICE_SOURCE"] == sources.DEFAULT_SOURCE
    assert (
        d["LDTM_K8S_STEP_CPU"],
        d["LDTM_K8S_STEP_MEMORY"],
    ) == (deployment.DEFAULT_STEP_CPU, deployment.DEFAULT_STEP_MEMORY)
    ib = inspect.signature(IBSource).parameters
    assert (ib["host"].default, ib["port"].default, ib["client_id"].default) == (
        d["LDTM_IB_HOST"],
        d["LDTM_IB_PORT"],
        d["LDTM_IB_CLIENT_ID"],
    )
    assert (ib["what_to_show"].default, ib["timeout"].default) == (
        d["LDTM_IB_WHAT_TO_SHOW"],
        d["LDTM_IB_TIMEOUT"],
    )


def test_the_accessors(monkeypatch):
    monkeypatch.delenv("LDTM_YFINANCE_BATCH", raising=False)
    assert setting("LDTM_YFINANCE_BATCH") == 50  # the table's default
    monkeypatch.setenv("LDTM_YFINANCE_BATCH", "")
    assert setting("LDTM_YFINANCE_BATCH") == 50  # empty is unset
    monkeypatch.setenv("LDTM_YFINANCE_BATCH", "20")
    assert setting("LDTM_YFINANCE_BATCH") == 20
    monkeypatch.setenv("LDTM_YFINANCE_BATCH", "lots")
    with pytest.raises(ConfigError, match="LDTM_YFINANCE_BATCH='lots' is not a whole number"):
        setting("LDTM_YFINANCE_BATCH")
    monkeypatch.setenv("LDTM_FORCE_REINGEST", "maybe")
    with pytest.raises(ConfigError, match="LDTM_FORCE_REINGEST='maybe' is not a boolean"):
        setting("LDTM_FORCE_REINGEST")
    monkeypatch.setenv("LDTM_SNAPSHOT_DEADLINE", "20:30")
    assert setting("LDTM_SNAPSHOT_DEADLINE") == "20:30"
    with pytest.raises(KeyError, match="LDTM_NOT_A_SETTING is not in config.SETTINGS"):
        env_text("LDTM_NOT_A_SETTING")


def test_the_typed_accessors_check_the_kind(monkeypatch):
    for name in ("LDTM_IB_PORT", "LDTM_IB_TIMEOUT", "LDTM_BF16_PROBE", "LDTM_AMP", "LDTM_IB_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert config.setting_int("LDTM_IB_PORT") == 4002
    monkeypatch.setenv("LDTM_IB_TIMEOUT", "30")
    value = config.setting_float("LDTM_IB_TIMEOUT")
    assert value == 30.0 and isinstance(value, float)
    assert config.setting_flag("LDTM_BF16_PROBE") is True
    monkeypatch.setenv("LDTM_AMP", "BF16")
    assert config.setting_choice("LDTM_AMP") == "bf16"
    assert config.setting_text("LDTM_IB_HOST") == "127.0.0.1"
    # Reading a setting as another kind is a programming error, named with the setting's own kind.
    for read, name in [
        (config.setting_int, "LDTM_IB_TIMEOUT"),
        (config.setting_float, "LDTM_IB_PORT"),
        (config.setting_flag, "LDTM_IB_HOST"),
        (config.setting_choice, "LDTM_BF16_PROBE"),
        (config.setting_text, "LDTM_AMP"),
        (config.env_number, "LDTM_IB_HOST"),
        (config.setting_int, "LDTM_NOT_A_SETTING"),
    ]:
        with pytest.raises((TypeError, KeyError), match=name):
            read(name)


def test_a_bad_source_setting_is_one_error_naming_it(monkeypatch):
    """Read through config, a bad yfinance number is a ConfigError naming the variable and the unit
    (it was a bare ValueError from float())."""
    from ldtm_core.data.sources.yfinance import YFinanceSource

    monkeypatch.setenv("LDTM_YFINANCE_TIMEOUT", "ten")
    with pytest.raises(ConfigError, match="LDTM_YFINANCE_TIMEOUT='ten' is not a number: expected seconds"):
        YFinanceSource.from_env()


@pytest.mark.parametrize(
    "var, value, read",
    [
        ("LDTM_MAX_DAILY_MOVE_PCT", "forty", "ldtm_core.data.price_moves:threshold_from_env"),
        ("LDTM_SIGNAL_COST_BP", "five", "ldtm_core.accountability.signals.signals:cost_bp_from_env"),
    ],
)
def test_modules_check_their_numbers_through_config(monkeypatch, var, value, read):
    """The message names the variable and the unit from the table, as Settings.from_env's does."""
    import importlib

    module, func = read.split(":")
    monkeypatch.setenv(var, value)
    unit = re.escape(SETTINGS[var].kind.unit)
    with pytest.raises(ConfigError, match=f"{var}='{value}' is not a .*: expected {unit}"):
        getattr(importlib.import_module(module), func)()
