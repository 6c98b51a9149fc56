"""Jobs: what the schedules and sensors launch. Checks of the selected assets run with them."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from .assets import (
    backtests,
    checkpoints,
    fillbacks,
    leaderboard,
    onnx_exports,
    prices,
    promotions,
    snapshots,
)
from .partitions import evening_partitions, ticker_partitions
from .pool import GPU_RUN_TAGS

nightly_job = define_asset_job(
    "nightly_job",
    selection=AssetSelection.assets(prices, snapshots, fillbacks, leaderboard),
    partitions_def=evening_partitions,
    tags=GPU_RUN_TAGS,
    description="Evening run: prices -> snapshots for that evening -> fillbacks -> leaderboard.",
)

retrain_job = define_asset_job(
    "retrain_job",
    selection=AssetSelection.assets(checkpoints, backtests),
    partitions_def=ticker_partitions,
    tags=GPU_RUN_TAGS,
    description="Train candidates and backtest them; each backtest partition fires the promotion gate.",
)

promotion_job = define_asset_job(
    "promotion_job",
    selection=AssetSelection.assets(promotions, onnx_exports),
    partitions_def=ticker_partitions,
    description="Run the promotion gate for one ticker and export its active model to ONNX.",
)
