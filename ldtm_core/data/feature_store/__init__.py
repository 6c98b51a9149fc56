"""Stored features (SPEC §3): the `features` table, the fingerprint of the prices they came from, and
the rule every reader follows.

One source of truth: each ticker's stored feature rows carry (in `feature_sets`) the fingerprint of the
prices they were computed from. A reader uses the stored rows only when that fingerprint equals the
fingerprint of the prices as they are now; otherwise it recomputes from prices and says why (the
`reason` of a FeatureRead, and the `ldtm.features` logger). `fingerprint()` and
`corporate_actions_applied()` are the one place that defines "the same prices": extend them there.

Storage is a table in the application database rather than Parquet in the artifact store: the rows and
their fingerprint are replaced in one transaction (a reader never sees half a rebuild), inference reads
every ticker's window with one query, and backups cover it. Measured in docs/performance.md.

Split on its seams: `fingerprint` (what "the same prices" means), `read_rule` (stored only while
current; training's and inference's reads), `bulk_read` (many tickers in one query), `binary_copy` (the
PostgreSQL binary COPY writer), `library` (the `price_features` library's stored rows, the tabular
recipes' inputs), `build` (the asset's incremental build) and `checks` (the asset's checks). The names below are the package's interface; callers import them from here.
"""

from __future__ import annotations

from ldtm_core.data.feature_store.build import BuildOutcome, build_features, feature_stats
from ldtm_core.data.feature_store.bulk_read import copy_out, load_prices_bulk, load_stored_bulk, read_stored
from ldtm_core.data.feature_store.checks import CheckResult, check_features
from ldtm_core.data.feature_store.fingerprint import (
    BAR_FIELDS,
    FEATURE_DEFINITION,
    NO_ACTIONS,
    PriceFingerprint,
    corporate_actions_applied,
    current_fingerprint,
    fingerprint,
)
from ldtm_core.data.feature_store.library import LIBRARY_DEFINITION, library_sets, library_values
from ldtm_core.data.feature_store.read_rule import (
    FeatureRead,
    StoredSet,
    prices_and_features,
    stale_reason,
    stored_sets,
    stored_windows,
)

__all__ = [
    "BAR_FIELDS",
    "FEATURE_DEFINITION",
    "LIBRARY_DEFINITION",
    "NO_ACTIONS",
    "BuildOutcome",
    "CheckResult",
    "FeatureRead",
    "PriceFingerprint",
    "StoredSet",
    "build_features",
    "check_features",
    "copy_out",
    "corporate_actions_applied",
    "current_fingerprint",
    "feature_stats",
    "fingerprint",
    "library_sets",
    "library_values",
    "load_prices_bulk",
    "load_stored_bulk",
    "prices_and_features",
    "read_stored",
    "stale_reason",
    "stored_sets",
    "stored_windows",
]
