"""The purged chronological train/validation split (SPEC §5), shared by training and backtests."""

from __future__ import annotations

import numpy as np

from ldtm_core.data.samples import SampleSet
from ldtm_core.errors import InputError


def purged_split(samples: SampleSet, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices into `samples` over its labeled rows, chronological.

    The last `val_fraction` of labeled rows is validation. A training row whose latest target date
    is on or after the first validation sample date is dropped: its answer lies inside validation.
    """
    if not 0.0 < val_fraction < 1.0:
        raise InputError(f"val_fraction must be in (0, 1), got {val_fraction}")
    labeled = np.flatnonzero(samples.labeled)
    if len(labeled) == 0:
        return labeled, labeled
    order = np.argsort(samples.dates[labeled], kind="stable")
    labeled = labeled[order]
    n_val = max(1, int(round(len(labeled) * val_fraction)))
    if n_val >= len(labeled):
        return labeled[:0], labeled
    val = labeled[-n_val:]
    first_val_date = samples.dates[val[0]]
    candidates = labeled[:-n_val]
    latest_target = samples.target_dates[candidates].max(axis=1)
    train = candidates[latest_target < first_val_date]
    return train, val
