"""The board by recipe: each recipe's record side by side (`ldtm leaderboard --by-recipe`, the dashboard).

Every model version's own rows (`leaderboard_by_model`) summed per recipe: how many tickers and models,
the evenings scored, next-day accuracy and always-up's on those same rows. A description of the window,
not a test: two recipes that served on different evenings are not paired here (the universe verdict
pairs them on the same folds, `gate.universe`).
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability.board.leaderboard import leaderboard_by_model
from ldtm_core.learning.recipes import recipe_of
from ldtm_core.schema import model_registry

COLUMNS = ["recipe", "tickers", "models", "n", "direction_accuracy", "always_up_accuracy"]


def version_recipes(engine: Engine, tickers: list[str]) -> dict[tuple[str, str], str]:
    """{(ticker, model_version as snapshots write it): recipe} for every registry row of `tickers`."""
    r = model_registry.c
    stmt = select(r.id, r.ticker, r.version, r.config_json).where(r.ticker.in_(tickers))
    out = {}
    with engine.connect() as conn:
        for model_id, ticker, version, config_json in conn.execute(stmt):
            recipe = recipe_of(config_json)
            out[(ticker, f"cand-{model_id}")] = recipe
            if version:
                out[(ticker, version)] = recipe
    return out


def by_recipe(engine: Engine, mode: str = "all", **flags) -> pd.DataFrame:
    """One row per recipe with scored rows in the window (`flags`: leaderboard_by_model's)."""
    board = leaderboard_by_model(engine, mode, with_record=False, **flags)
    board = board[board["n"].fillna(0) > 0]
    if board.empty:
        return pd.DataFrame(columns=COLUMNS)
    names = version_recipes(engine, sorted(board["ticker"].unique()))
    board = board.assign(
        recipe=[
            names.get((t, v), "unknown") for t, v in zip(board["ticker"], board["model_version"], strict=True)
        ],
        up_hits=board["always_up_accuracy"] * board["always_up_n"],  # always-up on its own scored rows
    )
    out = board.groupby("recipe").agg(
        tickers=("ticker", "nunique"),
        models=("model_version", "size"),
        n=("n", "sum"),
        hits=("hits", "sum"),
        up=("up_hits", "sum"),
        up_n=("always_up_n", "sum"),
    )
    out["direction_accuracy"] = out["hits"] / out["n"]
    out["always_up_accuracy"] = out["up"] / out["up_n"]
    return out.reset_index()[COLUMNS]
