"""`recipe_fits`: a global recipe (ridge, LightGBM, the global LSTM, …) fitted once for the whole universe.

One step, not partitioned: the fit reads every member ticker's rows, so it cannot be split by ticker. It
registers a candidate per ticker, so the registry still says per ticker which model serves; the
`backtests` and `promotions` partitions then judge each ticker's candidate as they judge an LSTM's.
"""

from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, asset
from pydantic import Field

from ldtm_core.errors import LDTMError
from ldtm_core.learning.recipes import RECIPES
from ldtm_core.learning.recipes.family import family
from ldtm_core.learning.recipes.global_fit import recipe_config, train_global
from ldtm_core.learning.training import parse_overrides

from ..metadata import records_table
from ..resources import AppDatabase, ArtifactStore
from .checkpoints import _as_of


class RecipeFitConfig(Config):
    recipe: str = Field(
        "ridge",
        description="the global recipe to fit: "
        + " | ".join(r.name for r in RECIPES.values() if r.scope == "global"),
    )
    as_of: str = Field("", description="fit only on prices up to this date (YYYY-MM-DD); empty: today")
    set: list[str] = Field(
        default_factory=list, description="recipe settings, as in `ldtm train --recipe R --set key=value`"
    )


@asset(deps=["prices"], group_name="models", kinds={"scikit-learn", "lightgbm", "pytorch"})
def recipe_fits(
    context: AssetExecutionContext, config: RecipeFitConfig, store: ArtifactStore, database: AppDatabase
) -> MaterializeResult:
    """A global recipe fitted once on every member ticker's rows; a candidate registered per ticker."""
    try:
        overrides = parse_overrides(config.set, family(config.recipe).config)
        recipe_config(config.recipe, overrides)  # a bad recipe or setting fails before any read
        engine, settings = database.engine(store), database.settings(store)
        outcomes = train_global(
            engine, settings, config.recipe, store.tickers(), _as_of(config.as_of), overrides
        )
    except LDTMError as exc:
        raise Failure(f"recipe_fits: {exc}") from None
    rows = [
        {"ticker": o.ticker, "status": o.status, "model_id": o.model_id, "reason": o.reason} for o in outcomes
    ]
    counts = {s: sum(o.status == s for o in outcomes) for s in ("trained", "skipped", "failed")}
    context.log.info(f"{config.recipe}: {counts}")
    if counts["failed"] or not counts["trained"]:
        first = next((o for o in outcomes if o.status != "trained"), None)
        raise Failure(
            f"recipe_fits ({config.recipe}): {counts['trained']} trained, {counts['failed']} failed"
            + (f"; {first.ticker}: {first.reason}" if first else ""),
            metadata={"summary": records_table(rows)},
        )
    return MaterializeResult(metadata={"recipe": config.recipe, **counts, "summary": records_table(rows)})
