"""Recipes as plugins (docs/bring-your-own-model.md, issue 60): a package installed beside LDTM registers
a recipe under the `ldtm.recipes` entry point group. The example package (examples/ldtm-recipe-knn) is
really installed, by pip into a folder on sys.path, and runs train -> backtest -> universe decision ->
predict -> board as ridge does; plugins that break the contract are refused alone, by name, with why,
while a good one beside them is accepted; a plugin whose predict goes wrong after its fit (NaN, the wrong
shape, an exception), or that is uninstalled or refused later, costs only its own tickers their row."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.metadata as md
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from accountability_helpers import ingest, make_model, make_settings
from typer.testing import CliRunner

from ldtm_core.accountability.gate.backtest_pool import backtest_candidate
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.db import get_engine
from ldtm_core.errors import InputError
from ldtm_core.learning.recipes import RECIPES, Recipe, challenger_recipes, get, global_fit, plugins, serving
from ldtm_core.learning.recipes.family import Family, RecipeConfig, family
from ldtm_core.learning.registry import list_models

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ldtm-recipe-knn"
TICKERS = ["AAPL", "MSFT", "NVDA"]
runner = CliRunner()


# --- the example package, installed ------------------------------------------------------------------


@pytest.fixture(scope="session")
def knn_site(tmp_path_factory) -> Path:
    """examples/ldtm-recipe-knn installed by pip into a folder of its own (offline; the venv's setuptools
    builds it), as `pip install` would install it beside LDTM: its module and its dist-info, whose
    entry_points.txt registers `knn`. Built from a copy, so the checkout gets no build/ or egg-info."""
    src = tmp_path_factory.mktemp("knn_src") / "ldtm-recipe-knn"
    shutil.copytree(
        EXAMPLE, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__")
    )
    site = tmp_path_factory.mktemp("knn_site")
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*pip, "--disable-pip-version-check", "--quiet", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def _forget(module: str) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(f"{module}.")]:
        del sys.modules[name]


@pytest.fixture
def knn(knn_site):
    """The example installed for this test: its folder on sys.path and the plugins found again; after
    it, neither (the plugins found again without it)."""
    sys.path.insert(0, str(knn_site))
    importlib.invalidate_caches()
    plugins.install()
    serving.clear_cache()
    yield RECIPES["knn"]
    sys.path.remove(str(knn_site))
    _forget("ldtm_recipe_knn")
    plugins.install()
    serving.clear_cache()


def test_the_installed_package_is_a_recipe_with_its_source(knn, monkeypatch):
    assert knn == Recipe(
        "knn",
        "global",
        "k-nearest neighbours (scikit-learn) on standardised price_features",
        "ldtm_recipe_knn:KNN",
        "ldtm-recipe-knn 0.1.0",
    )
    assert list(RECIPES)[-1] == "knn" and get("knn") is knn and "knn" not in plugins.refused()
    assert plugins.accepted() == {"knn": knn}
    assert family("knn") is importlib.import_module("ldtm_recipe_knn").KNN
    monkeypatch.setenv("LDTM_CHALLENGER_RECIPES", "knn")
    assert challenger_recipes() == ["knn"]

    listed = runner.invoke(app, ["recipes", "list"])
    assert listed.exit_code == 0, listed.output
    line = next(row for row in listed.output.splitlines() if "│ knn " in row)
    assert "global" in line and "ldtm-recipe-knn 0.1.0" in line and "k-nearest neighbours" in line
    assert "│ ridge " in listed.output and "│ ldtm " in listed.output  # the built-in ones, from ldtm


def test_a_fresh_process_with_the_package_installed_gives_it_dagster_partitions(knn_site):
    """What a code server or run worker sees: the package on its path, nothing else done (its module
    imported first, as a spawned fit's child does when it unpickles the config)."""
    code = (
        "import ldtm_recipe_knn;"  # the plugin's module first: it imports LDTM's before it is complete
        "from ldtm_dagster.partitions import recipe_week_partitions as p;"
        "from ldtm_dagster.assets.recipes import recipe_fits;"
        "from dagster import AssetKey; import json;"
        "print(json.dumps(p.get_partitions_def_for_dimension('recipe').get_partition_keys()));"
        "meta = recipe_fits.specs_by_key[AssetKey('recipe_fits')].metadata['recipes'];"
        "print(json.dumps([[r.data['recipe'], r.data['source']] for r in meta.records]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(knn_site), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    recipes, listed = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert recipes[-1] == "knn" and "ridge" in recipes
    assert ["knn", "ldtm-recipe-knn 0.1.0"] in listed and ["ridge", "ldtm"] in listed
    assert "refused" not in done.stderr  # found complete, though its module was imported first


@pytest.fixture
def knn_store(knn, tmp_path, sqlite_url, monkeypatch):
    engine = get_engine(sqlite_url)
    ingest(engine, TICKERS)
    settings = make_settings(tmp_path, sqlite_url)
    for name, value in (
        ("LDTM_HOME", str(settings.home)),
        ("LDTM_DATABASE_URL", sqlite_url),
        ("LDTM_UNIVERSE", ",".join(TICKERS)),
        ("LDTM_GATE_MIN_ROWS", "10"),
        ("LDTM_GATE_MIN_FOLD_ROWS", "5"),
    ):
        monkeypatch.setenv(name, value)
    return engine, settings


def _ok(args: list[str]) -> str:
    out = runner.invoke(app, args)
    assert out.exit_code == 0, f"ldtm {' '.join(args)}:\n{out.output}"
    return " ".join(out.output.split())


def test_knn_from_its_package_runs_train_backtest_decision_predict_and_board(knn_store):
    engine, settings = knn_store
    said = _ok(["train", "--tickers", "all", "--recipe", "knn", "--set", "k=20", "--as-of", "2024-03-28"])
    assert "knn (k=20): one fit" in said
    models = list_models(engine)
    assert {m.recipe for m in models} == {"knn"} and sorted(m.ticker for m in models) == TICKERS
    assert json.loads(models[0].config_json)["k"] == 20
    artifact = json.loads(Path(models[0].load_path).read_text())
    assert artifact["kind"] == "knn" and len(artifact["payload"]["rows"]) <= 5000  # data, not code

    said = _ok(["backtest", "--tickers", "all", "--recipe", "knn", "--folds", "2", "--end", "2024-03-28"])
    assert "the newest knn candidates" in said and "3 ok" in said
    said = _ok(["universe", "decide", "--recipe", "knn"])
    assert "universe verdict on recipe knn" in said and "universe decision: knn" in said

    said = _ok(["predict", "--start", "2024-04-01", "--end", "2024-04-30", "--mode", "replay"])
    _ok(["fillback"])
    board = json.loads(runner.invoke(app, ["leaderboard", "--include-ungated", "--json"]).output)
    rows = {r["ticker"]: r for r in board}
    assert sorted(rows) == TICKERS and all(r["n"] > 0 for r in rows.values())
    said = _ok(["leaderboard", "--include-ungated", "--by-recipe"])
    assert "│ knn │ 3 │ 3 │" in said  # the recipe's row: 3 tickers, 3 models


def test_knn_fits_in_a_budgeted_child_process_as_well(knn_store, monkeypatch):
    """The default: each fit in a spawned child within LDTM_RECIPE_FIT_TIMEOUT_S. The child imports the
    plugin's module from the parent's path (unpickling its config) and sends back the dump's JSON."""
    engine, settings = knn_store
    monkeypatch.setenv("LDTM_RECIPE_FIT_TIMEOUT_S", "120")
    outcomes = global_fit.train_global(engine, settings, "knn", TICKERS, as_of=dt.date(2024, 3, 28))
    assert {o.status for o in outcomes} == {"trained"}, outcomes


# --- plugins that break the contract -----------------------------------------------------------------


@dataclass(frozen=True)
class MeanConfig(RecipeConfig):
    kind: str = "mean"
    shrink: float = 1.0


BREAK = {"how": None}  # how the mean family's predict goes wrong once fitted (the runtime tests)


def _fit(x, y, cfg: MeanConfig) -> dict:
    return {"mean": (y.mean(axis=0) * cfg.shrink).tolist()}


def _predict(state: dict, x, cfg: MeanConfig):
    out = np.tile(np.asarray(state["mean"], float), (len(x), 1))
    if BREAK["how"] == "nan":
        out[:, 1] = np.nan
    elif BREAK["how"] == "shape":
        out = out[:, :2]
    elif BREAK["how"] == "raises":
        raise RuntimeError("the plugin's own bug")
    return out


PARTS = {"fit": _fit, "predict": _predict, "dump": lambda s: s, "load": lambda d, cfg, n: d}
GOOD = Family(MeanConfig, **PARTS, doc="each horizon's mean return")
UNDOCUMENTED = Family(MeanConfig, **PARTS)


class UndecoratedConfig(RecipeConfig):  # no @dataclass: `shrink` is no field of it
    shrink: float = 1.0


@dataclass(frozen=True, kw_only=True)
class BareConfig(RecipeConfig):
    shrink: float  # no default: `ldtm train --recipe R` could not build it


NOT_A_FAMILY = {"fit": _fit, "predict": _predict}
UNDECORATED = Family(UndecoratedConfig, **PARTS)
NO_DEFAULT = Family(BareConfig, **PARTS)
NOT_A_CONFIG = Family(dict, **PARTS)
FUTURE = Family(MeanConfig, **PARTS, api_version=2)
NOT_CALLABLE = Family(MeanConfig, **{**PARTS, "fit": "fit"})
BAD_INPUTS = Family(MeanConfig, **PARTS, inputs="price_features")
MISSING_LIBRARY = Family(MeanConfig, **PARTS, libraries=("no-such-distribution-ldtm",))


def _ep(name: str, value: str) -> md.EntryPoint:
    return md.EntryPoint(name, value, plugins.GROUP)


@pytest.fixture
def fake_plugins():
    """`use(entry points)` makes them the plugins; after the test, the installed ones are again."""
    yield lambda eps: plugins.install(eps)
    BREAK["how"] = None
    plugins.install()
    serving.clear_cache()


@pytest.fixture
def broken_modules(tmp_path, monkeypatch):
    (tmp_path / "ldtm_crashing_plugin.py").write_text('raise RuntimeError("it needs a GPU driver")\n')
    (tmp_path / "ldtm_exiting_plugin.py").write_text('import sys\nsys.exit("no licence")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    _forget("ldtm_crashing_plugin")
    _forget("ldtm_exiting_plugin")


REFUSALS = {
    "missing": (
        "ldtm_no_such_plugin:FAMILY",
        "cannot import ldtm_no_such_plugin:FAMILY: ModuleNotFoundError",
    ),
    "crashing": (
        "ldtm_crashing_plugin:FAMILY",
        "cannot import ldtm_crashing_plugin:FAMILY: RuntimeError: it needs",
    ),
    "exiting": ("ldtm_exiting_plugin:FAMILY", "SystemExit: no licence"),
    "no_attribute": ("{m}:NOWHERE", "AttributeError"),
    "ridge": ("{m}:GOOD", "its name 'ridge' is a built-in recipe's"),
    "lstm": ("{m}:GOOD", "its name 'lstm' is a built-in recipe's"),
    "not_family": ("{m}:NOT_A_FAMILY", "it names a dict, not a ldtm_core.learning.recipes.family.Family"),
    "undecorated": ("{m}:UNDECORATED", "config UndecoratedConfig is not a frozen dataclass"),
    "no_default": ("{m}:NO_DEFAULT", "config BareConfig has no default for field(s) shrink"),
    "not_config": ("{m}:NOT_A_CONFIG", "config <class 'dict'> is not a subclass of RecipeConfig"),
    "future": ("{m}:FUTURE", "it declares recipe API version 2; this LDTM speaks version 1"),
    "not_callable": ("{m}:NOT_CALLABLE", "its fit is a str, not callable"),
    "bad_inputs": ("{m}:BAD_INPUTS", "its inputs are a str, not a ldtm_core.learning.recipes.inputs.Inputs"),
    "no_library": ("{m}:MISSING_LIBRARY", "library 'no-such-distribution-ldtm', which is not installed"),
    "Bad-Name": ("{m}:GOOD", "its name 'Bad-Name' is not a recipe name"),
    "no_colon": ("{m}.GOOD", "is not 'module:attribute'"),
}


def test_each_bad_plugin_is_refused_alone_by_name_with_why_and_the_good_ones_go_on(
    fake_plugins, broken_modules, monkeypatch, caplog
):
    monkeypatch.setattr(plugins, "_warned", set())
    eps = [_ep(name, value.format(m=__name__)) for name, (value, _) in REFUSALS.items()]
    eps += [_ep("mean", f"{__name__}:GOOD"), _ep("undocumented", f"{__name__}:UNDOCUMENTED")]
    eps += [_ep("twice", f"{__name__}:GOOD"), _ep("twice", f"{__name__}:UNDOCUMENTED")]
    with caplog.at_level(logging.WARNING, logger=plugins.__name__):
        fake_plugins(eps)
        fake_plugins(eps)  # found again: the same refusals are not logged twice

    refused = plugins.refused()
    assert sorted(refused) == sorted([*REFUSALS, "twice"])
    for name, (_, why) in REFUSALS.items():
        assert refused[name].startswith("no distribution: ") and why in refused[name], (name, refused[name])
    assert "each registers recipe 'twice'; uninstall all but one" in refused["twice"]
    warned = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warned) == len(refused) and any("'future' refused" in w for w in warned)

    assert list(plugins.accepted()) == ["mean", "undocumented"]
    assert RECIPES["mean"] == Recipe(
        "mean", "global", "each horizon's mean return", f"{__name__}:GOOD", "no distribution"
    )
    assert RECIPES["undocumented"].doc == __doc__.splitlines()[0]  # the module docstring's first line
    assert RECIPES["ridge"].source == "ldtm" and RECIPES["lstm"].scope == "per ticker"  # untouched
    with pytest.raises(
        InputError, match="recipe 'future' is unknown; its plugin was refused: .*API version 2"
    ):
        get("future")

    listed = runner.invoke(app, ["recipes", "list"])
    assert listed.exit_code == 0, listed.output
    assert "recipe plugins refused" in listed.output and "│ mean " in listed.output
    assert all(name in listed.output for name in refused)
    trained = runner.invoke(app, ["train", "--tickers", "AAPL", "--recipe", "future"])
    assert trained.exit_code == 2 and "its plugin was refused" in " ".join(trained.output.split())


def test_the_plugins_are_found_once_per_process_at_the_first_read_and_again_only_when_asked(
    fake_plugins, monkeypatch
):
    calls = []
    monkeypatch.setattr(plugins, "entry_points", lambda: calls.append(1) or [_ep("mean", f"{__name__}:GOOD")])
    RECIPES.discover_with(plugins.install)  # as a fresh process stands after `import ldtm_core...`
    assert not calls  # importing finds nothing: a plugin's module imports LDTM before it is complete
    assert "mean" in RECIPES and calls == [1]  # the first read finds them
    assert list(RECIPES)[-1] == "mean" and plugins.refused() == {} and calls == [1]  # once
    fake_plugins(None)  # install(): the installed entry points read again
    assert calls == [1, 1]


# --- a plugin that goes wrong after its fit ----------------------------------------------------------


@pytest.fixture
def mean_store(fake_plugins, engine, tmp_path, db_url):
    """AAPL and MSFT served by the `mean` plugin's fit, NVDA by an LSTM."""
    fake_plugins([_ep("mean", f"{__name__}:GOOD")])
    ingest(engine, TICKERS)
    serving.clear_cache()
    settings = make_settings(tmp_path, db_url)
    outcomes = global_fit.train_global(engine, settings, "mean", ["AAPL", "MSFT"], as_of=dt.date(2024, 3, 28))
    assert {o.status for o in outcomes} == {"trained"}, outcomes
    make_model(engine, settings, "NVDA", trained_on=dt.date(2024, 3, 28))
    return engine, settings


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("nan", "mean predicted 1 non-finite value(s) (NaN/inf) of 3"),
        ("shape", "mean predicted shape (1, 2), expected (1, 3)"),
        ("raises", "mean predict raised RuntimeError: the plugin's own bug"),
    ],
)
def test_a_plugin_whose_predict_goes_wrong_fails_alone_naming_its_recipe(mean_store, how, said):
    engine, settings = mean_store
    assert predict(engine, settings, run_date=dt.date(2024, 4, 1), mode="replay").tickers_predicted == TICKERS
    BREAK["how"] = how

    result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")

    assert result.tickers_predicted == ["NVDA"]
    assert sorted(result.failed) == ["AAPL", "MSFT"]
    for t in ("AAPL", "MSFT"):
        assert f"({t}, recipe mean) cannot run" in result.failed[t] and said in result.failed[t], (
            result.failed
        )
    backtest = backtest_candidate(engine, "AAPL", None, 1, settings=settings, folds=2)
    assert backtest.status == "failed" and "mean predict" in backtest.reason, backtest.reason


@pytest.mark.parametrize("later", ["uninstalled", "refused"])
def test_a_plugin_uninstalled_or_refused_later_costs_only_its_own_tickers(mean_store, fake_plugins, later):
    engine, settings = mean_store
    fake_plugins([] if later == "uninstalled" else [_ep("mean", f"{__name__}:FUTURE")])
    serving.clear_cache()

    result = predict(engine, settings, run_date=dt.date(2024, 4, 2), mode="replay")

    assert result.tickers_predicted == ["NVDA"] and sorted(result.failed) == ["AAPL", "MSFT"]
    assert all("has unknown kind 'mean'" in why for why in result.failed.values()), result.failed
    if later == "refused":
        assert all(
            "its plugin was refused" in why and "API version 2" in why for why in result.failed.values()
        )
