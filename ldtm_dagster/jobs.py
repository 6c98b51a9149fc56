"""Jobs: what the schedules and sensors launch. Checks of the selected assets run with them.

The evening is two runs because one Dagster run covers one partition key or range of ONE partitions
definition: `features` is partitioned by ticker, `snapshots` by evening. The nightly schedule launches
`nightly_market_job` (prices, then the features of every ticker, one run), and its success launches
`nightly_job` for that evening (sensors.nightly_after_market), so features always sit between prices
and snapshots.
"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from .assets import (
    backtests,
    checkpoints,
    external_judgements,
    features,
    fillbacks,
    leaderboard,
    onnx_exports,
    prices,
    promotions,
    recipe_backtests,
    recipe_decisions,
    recipe_fits,
    signal_performance,
    snapshots,
    submissions,
)
from .gpu_pool import GPU_RUN_TAGS
from .partitions import evening_partitions, recipe_week_partitions, ticker_partitions

# A killed run of a chunked GPU job is retried (run_retries) with ALL_STEPS: its planning step re-plans
# and skips the tickers trained since; the default FROM_FAILURE reuses the dead plan and trains nothing.
RESUMABLE_GPU_RUN_TAGS = {**GPU_RUN_TAGS, "dagster/retry_strategy": "ALL_STEPS"}

nightly_market_job = define_asset_job(
    "nightly_market_job",
    selection=AssetSelection.assets(prices, features),
    partitions_def=ticker_partitions,
    description="Evening, first run: prices -> features of every ticker; its success launches nightly_job.",
)

nightly_job = define_asset_job(
    "nightly_job",
    selection=AssetSelection.assets(snapshots, fillbacks, leaderboard, signal_performance),
    partitions_def=evening_partitions,
    tags=GPU_RUN_TAGS,
    description="Evening, second run: snapshots for that evening -> fillbacks -> leaderboard, signal_performance.",
)

retrain_job = define_asset_job(
    "retrain_job",
    selection=AssetSelection.assets(features, checkpoints, backtests),
    partitions_def=ticker_partitions,
    tags=RESUMABLE_GPU_RUN_TAGS,
    description="Refresh features, train candidates and backtest them; each backtest partition fires the gate.",
)

promotion_job = define_asset_job(
    "promotion_job",
    selection=AssetSelection.assets(promotions, onnx_exports),
    partitions_def=ticker_partitions,
    description="Run the promotion gate for one ticker and export its active model to ONNX.",
)

backtests_job = define_asset_job(
    "backtests_job",
    selection=AssetSelection.assets(backtests),
    partitions_def=ticker_partitions,
    tags=RESUMABLE_GPU_RUN_TAGS,
    description="Backtest a range of tickers' newest candidates; launched for the tickers a failed retrain trained.",
)

recipe_refit_job = define_asset_job(
    "recipe_refit_job",
    selection=AssetSelection.assets(recipe_fits, recipe_backtests),
    partitions_def=recipe_week_partitions,
    description="Fit a global recipe for its week and backtest its candidates; recipe_decision_sensor decides.",
)

recipe_decision_job = define_asset_job(
    "recipe_decision_job",
    selection=AssetSelection.assets(recipe_decisions),
    partitions_def=recipe_week_partitions,
    description="The universe policy for a global recipe's week: one verdict applied to every member's gate.",
)

submission_job = define_asset_job(
    "submission_job",
    selection=AssetSelection.assets(submissions),
    description="Record one submitted model's file (run config: model, path); launched by submission_sensor.",
)

external_judgement_job = define_asset_job(
    "external_judgement_job",
    selection=AssetSelection.assets(external_judgements),
    description="Judge every submitted model's live record; launched after each nightly_job success.",
)
