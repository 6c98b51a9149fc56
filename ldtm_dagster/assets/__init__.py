"""Software-defined assets, by area: market data, models, accountability."""

from .accountability import fillbacks, leaderboard, snapshots
from .backtests import backtests
from .checkpoints import checkpoints
from .market import features, prices
from .models import onnx_exports, promotions
from .recipes import recipe_backtests, recipe_decisions, recipe_fits
from .signals import signal_performance
from .submissions import external_judgements, submissions
from .tuning import hpo_studies

__all__ = [
    "prices",
    "features",
    "checkpoints",
    "recipe_fits",
    "recipe_backtests",
    "recipe_decisions",
    "backtests",
    "promotions",
    "onnx_exports",
    "snapshots",
    "fillbacks",
    "leaderboard",
    "signal_performance",
    "submissions",
    "external_judgements",
    "hpo_studies",
]
