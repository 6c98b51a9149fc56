"""A global recipe's weekly loop, one partition per (recipe, week), as the LSTM's is per ticker:

    recipe_fits ──> recipe_backtests ──(recipe_decision_sensor)──> recipe_decisions

`recipe_fits`: the recipe fitted once on the member universe with prices up to the Friday its week ends
on, a candidate registered per ticker (its settings: the `set` config, else those of the recipe's newest
serving model, else its defaults). `recipe_backtests`: that recipe's newest candidates' quarter folds,
one fit per fold for the whole panel, on prices up to the same Friday. `recipe_decisions`: the universe
policy (`universe_decision.decide`): one verdict, against the champions or on a first deployment against
every baseline, applied to each member ticker's gate. The weekly schedule launches the first two for
every recipe serving a ticker and every LDTM_CHALLENGER_RECIPES; a backfill of past weeks refits a
recipe as it would have been fitted then. A recipe from an installed package (`ldtm.recipes` entry
points, docs/bring-your-own-model.md) has its partitions too; each materialization says the recipe's
`source` (ldtm, or that package and its version), and `recipe_fits`' definition lists them all.
"""

import json

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from ldtm_core.accountability.gate.backtest_pool import backtest_many
from ldtm_core.accountability.gate.universe_decision import decide
from ldtm_core.errors import LDTMError
from ldtm_core.learning.backtest import DEFAULT_FOLDS
from ldtm_core.learning.recipes import RECIPES, get, plugins
from ldtm_core.learning.recipes.family import config_from, family
from ldtm_core.learning.recipes.global_fit import fit_pool, recipe_config, train_global
from ldtm_core.learning.registry import serving_models
from ldtm_core.learning.training import parse_overrides

from ..metadata import records_table
from ..partitions import recipe_and_as_of, recipe_week_partitions
from ..resources import AppDatabase, ArtifactStore

GROUP = "recipes"


def _source(recipe: str) -> str:
    """Where recipe `recipe` comes from: "ldtm", or its plugin's package and version."""
    return get(recipe).source


def _recipes_listed() -> MetadataValue:
    """Every global recipe with its source, then the plugins refused with why (the code location's view,
    as `ldtm recipes list` prints it)."""
    rows = [{"recipe": r.name, "source": r.source, "what": r.doc} for r in RECIPES.values() if r.family]
    rows += [{"recipe": name, "source": "refused", "what": why} for name, why in plugins.refused().items()]
    return records_table(rows)


class RecipeFitConfig(Config):
    set: list[str] = Field(
        default_factory=list,
        description="recipe settings, as in `ldtm train --recipe R --set key=value`; empty: those of the "
        "recipe's newest serving model, else its defaults",
    )


def serving_settings(engine, recipe: str, tickers: list[str]) -> dict:
    """The settings of recipe `recipe`'s newest model serving one of `tickers` (the champion it refits),
    less what a fit decides anew (its kind; the features: the library as it is now); {} when none serves."""
    serving = [
        m for m in serving_models(engine, tickers).values() if m.recipe == recipe and m.status == "active"
    ]
    if not serving:
        return {}
    newest = max(serving, key=lambda m: m.id)
    stored = config_from(recipe, json.loads(newest.config_json)).to_dict()
    return {k: v for k, v in stored.items() if k not in ("kind", "features")}


@asset(
    partitions_def=recipe_week_partitions,
    deps=[AssetDep("features", partition_mapping=AllPartitionMapping())],
    group_name=GROUP,
    kinds={"scikit-learn", "lightgbm", "pytorch"},
    metadata={"recipes": _recipes_listed()},
)
def recipe_fits(
    context: AssetExecutionContext, config: RecipeFitConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """A global recipe fitted once on the member universe for its week; a candidate registered per ticker."""
    recipe, as_of = recipe_and_as_of(context.partition_key)
    engine, settings = database.engine(store), database.settings(store)
    try:
        if config.set:
            overrides, source = parse_overrides(config.set, family(recipe).config), "the run's config"
        else:
            overrides = serving_settings(engine, recipe, store.tickers())
            source = "its serving model's" if overrides else "its defaults"
        recipe_config(recipe, overrides)  # a bad setting fails before any read
        outcomes = train_global(engine, settings, recipe, store.tickers(), as_of, overrides)
    except LDTMError as exc:
        raise Failure(f"recipe_fits {context.partition_key}: {exc}") from None
    rows = [
        {"ticker": o.ticker, "status": o.status, "model_id": o.model_id, "reason": o.reason} for o in outcomes
    ]
    counts = {s: sum(o.status == s for o in outcomes) for s in ("trained", "skipped", "failed")}
    if counts["failed"] or not counts["trained"]:
        first = next((o for o in outcomes if o.status != "trained"), None)
        raise Failure(
            f"recipe_fits ({recipe}, prices up to {as_of}): {counts['trained']} trained, {counts['failed']} failed"
            + (f"; {first.ticker}: {first.reason}" if first else ""),
            metadata={"summary": records_table(rows)},
        )
    trained = next(o for o in outcomes if o.model_id is not None)
    pool = fit_pool(engine, trained.model_id) or []
    context.log.info(f"{recipe} as of {as_of} ({source} settings): {counts}; pool of {len(pool)}")
    return MaterializeResult(
        metadata={
            "recipe": recipe,
            "source": _source(recipe),
            "as_of": str(as_of),
            "settings": MetadataValue.json({"from": source, **overrides}),
            "pool": ", ".join(pool),  # the tickers whose rows it fitted: the member universe then
            "duration_s": round(trained.duration_s, 2),
            **counts,
            "summary": records_table(rows),
        }
    )


class RecipeBacktestConfig(Config):
    folds: int = Field(DEFAULT_FOLDS, description="walk-forward folds (the gate needs at least 2)")


@asset(partitions_def=recipe_week_partitions, deps=[recipe_fits], group_name=GROUP)
def recipe_backtests(
    context: AssetExecutionContext, config: RecipeBacktestConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """The recipe's newest candidates backtested on their quarter folds (one fit per fold, every ticker
    scored), on prices up to the Friday its week ends on; `recipe_decision_sensor` decides when it lands."""
    recipe, as_of = recipe_and_as_of(context.partition_key)
    if config.folds < 2:
        raise Failure(f"recipe_backtests: folds must be at least 2 (the gate needs 2), not {config.folds}")
    settings = database.settings(store)
    database.engine(store)  # migrated before the worker pool opens its own connections
    outcomes = backtest_many(settings, store.tickers(), folds=config.folds, end=as_of, recipe=recipe)
    rows = [o.row() for o in outcomes]
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ok", "no candidate", "failed")}
    leakage = sum(o.result.leakage_rows for o in outcomes if o.result is not None)
    if not counts["ok"] or leakage:
        raise Failure(
            f"recipe_backtests ({recipe}): {counts['ok']} backtested, leakage rows {leakage}",
            metadata={"summary": records_table(rows)},
        )
    for o in outcomes:
        if o.status == "failed":
            context.log.warning(f"recipe_backtests {recipe} {o.ticker}: {o.reason}")
    return MaterializeResult(
        metadata={
            "recipe": recipe,
            "source": _source(recipe),
            "as_of": str(as_of),
            "leakage_rows": leakage,
            **counts,
            "summary": records_table(rows),
        }
    )


@asset(partitions_def=recipe_week_partitions, deps=[recipe_backtests], group_name=GROUP)
def recipe_decisions(
    context: AssetExecutionContext, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """The universe policy: one verdict on the recipe, against the champions or on a first deployment
    against every baseline, applied to every member ticker's gate; which recipe serves each ticker after."""
    recipe, _ = recipe_and_as_of(context.partition_key)
    engine, settings = database.engine(store), database.settings(store)
    try:
        d = decide(engine, settings, recipe, store.tickers())
    except LDTMError as exc:
        raise Failure(f"recipe_decisions {context.partition_key}: {exc}") from None
    for verdict in d.verdicts.values():
        context.log.info(verdict.summary())
    decisions = [
        {
            "ticker": t,
            "decision": r.decision,
            "model_id": r.model_id,
            "own_rows": r.n,
            "own_direction_accuracy": r.direction_accuracy,
            "always_up_accuracy": r.always_up_accuracy,
        }
        for t, r in sorted(d.reports.items())
    ] + [{"ticker": t, "decision": "not judged", "reason": why} for t, why in sorted(d.skipped.items())]
    serving = serving_models(engine, store.tickers())
    return MaterializeResult(
        metadata={
            "recipe": recipe,
            "source": _source(recipe),
            "verdicts": MetadataValue.md(
                "\n\n".join(v.summary() for v in d.verdicts.values()) or "no verdict"
            ),
            "decisions": records_table(decisions),
            "promoted": len(d.promoted),
            # Which recipe serves each ticker now (its active model, else its newest candidate).
            "serving": records_table(
                [
                    {"ticker": t, "recipe": m.recipe, "status": m.status, "model_id": m.id}
                    for t, m in sorted(serving.items())
                ]
            ),
        }
    )
