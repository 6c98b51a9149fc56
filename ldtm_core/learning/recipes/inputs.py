"""What a global recipe reads for each (ticker, evening): its inputs, one row of numbers per panel row.

`PRICE_FEATURES` (the `price_features` library of the row's own ticker) is what ridge and LightGBM read.
A family names other inputs with `Family.inputs`: the market's returns beside them (`market.py`), or a
window of the LSTM's normalised features (`global_lstm.py`). Inputs read only bars up to the row's date:
the row's own ticker's, and the `context` tickers' (the market), loaded beside the panel by whoever
builds it (training, the backtest's panel, the nightly predict, decay's drift). The library itself is
read from the store (`with_library`: the `features` asset writes it) while the bars still equal the
stored ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ldtm_core.data import price_features

RecipeConfig = Any  # a `family.RecipeConfig` (not imported: family imports this module)
Arrays = dict[str, dict[str, np.ndarray]]  # `price_windows.load_price_arrays`' {ticker: {field: values}}


@dataclass(frozen=True)
class Inputs:
    """A recipe's inputs. `compute(bars, cfg, context)` takes a panel of bars (ticker, date, open, high,
    low, close, volume; each ticker's rows in date order) and the context tickers' arrays, and returns
    float64 [rows, len(names(cfg))] row for row, NaN where a row's inputs are not all known yet."""

    name: str
    names: Callable[[RecipeConfig], tuple[str, ...]]
    compute: Callable[[pd.DataFrame, RecipeConfig, Arrays], np.ndarray]
    fingerprint: Callable[[RecipeConfig], str]  # part of the recipe's signature and of its artifact
    lookback: Callable[[RecipeConfig], int]  # bars ending on the row's date its inputs read
    context: Callable[[RecipeConfig], tuple[str, ...]] = lambda cfg: ()  # other tickers' bars read
    # Reads the `price_features` library: whoever builds the panel attaches its stored values
    # (`with_library`), and `compute` takes them instead of recomputing.
    library: bool = False

    def frame(self, bars: pd.DataFrame, cfg: RecipeConfig, context: Arrays | None = None) -> pd.DataFrame:
        """`compute` as a frame with the bars' index, one column per name."""
        values = self.compute(bars, cfg, context or {})
        return pd.DataFrame(values, index=bars.index, columns=list(self.names(cfg)), copy=False)


def library_names(cfg) -> tuple[str, ...]:
    """The `price_features` a recipe reads: its config's own list (`features`, recorded with the model, so
    a feature added to the library later is additive), or the whole library without a config."""
    return tuple(getattr(cfg, "features", None) or price_features.feature_names())


def _price_features(bars: pd.DataFrame, cfg, context: Arrays) -> np.ndarray:
    names = list(library_names(cfg))
    if set(names) <= set(bars.columns):  # read from the store beside the bars (`with_library`)
        return bars[names].to_numpy(dtype=np.float64)
    return price_features.compute_panel(bars)[names].to_numpy(dtype=np.float64)


def with_library(engine, bars: pd.DataFrame, inputs: Inputs) -> pd.DataFrame:
    """The panel `bars` with the `price_features` library's columns beside them when `inputs` read it:
    stored rows where they stand for a recomputation, computed otherwise (logged with why)."""
    from ldtm_core.data.feature_store import library_values
    from ldtm_core.data.feature_store.library import NAMES  # the columns the store holds

    if not inputs.library or engine is None or bars.empty:
        return bars
    values, _ = library_values(engine, bars)
    return pd.concat([bars, pd.DataFrame(values, index=bars.index, columns=list(NAMES))], axis=1)


PRICE_FEATURES = Inputs(
    "price_features",
    library_names,
    _price_features,
    lambda cfg: price_features.fingerprint(library_names(cfg)),
    lambda cfg: price_features.lookback(library_names(cfg)),
    library=True,
)
