"""Partitions, in one place: one per ticker of the universe, and one per trading evening.

The ticker partitions are read from `LDTM_UNIVERSE` when the code location loads (103 keys for
`full`, 6 for `demo`); change the variable and reload the location to change them.

Evening partitions follow the nightly cron (weekdays at LDTM_NIGHTLY_TIME, 18:15 America/New_York
by default). `end_offset=1` makes an evening's partition exist from that time that evening, so the
nightly tick targets the evening that just closed. Weekday holidays are partitions too: the snapshots asset records
"no session" for them and writes nothing.
"""

from __future__ import annotations

import datetime as dt

from dagster import (
    Failure,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

from ldtm_core.config import setting, setting_time
from ldtm_core.data import calendar
from ldtm_core.data.universe import load_universe
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.learning.recipes import global_recipes

MARKET_TZ = "America/New_York"
MARKET_CLOSE = dt.time(16, 0)


def nightly_time() -> dt.time:
    """LDTM_NIGHTLY_TIME, checked: after the close (a run before it would fetch an unfinished day), on a
    whole minute (a cron's step), and before LDTM_SNAPSHOT_DEADLINE (or every evening would alert)."""
    at, deadline = setting_time("LDTM_NIGHTLY_TIME"), setting_time("LDTM_SNAPSHOT_DEADLINE")
    if not MARKET_CLOSE < at < deadline or at.second or at.microsecond:
        raise ConfigError(
            f"LDTM_NIGHTLY_TIME={at:%H:%M:%S}: give a whole minute after the {MARKET_CLOSE:%H:%M} close and "
            f"before LDTM_SNAPSHOT_DEADLINE={deadline:%H:%M} (New York time)"
        )
    return at


NIGHTLY_TIME = nightly_time()
NIGHTLY_CRON = f"{NIGHTLY_TIME.minute} {NIGHTLY_TIME.hour} * * 1-5"
# The evening a nightly market run (prices -> features) is for; its `prices` step fetches up to it and
# sensors.nightly_after_market launches that evening's nightly_job.
EVENING_TAG = "ldtm/evening"
EVENINGS_START = "2020-01-01"

UNIVERSE_SPEC = setting("LDTM_UNIVERSE")


def _universe(spec: str) -> list[str]:
    try:
        return load_universe(spec)
    except InputError as exc:  # name the setting: at load time nothing else says where the spec came from
        raise ConfigError(f"LDTM_UNIVERSE={spec}: {exc}") from None


ticker_partitions = StaticPartitionsDefinition(_universe(UNIVERSE_SPEC))

evening_partitions = TimeWindowPartitionsDefinition(
    start=EVENINGS_START,
    cron_schedule=NIGHTLY_CRON,
    timezone=MARKET_TZ,
    fmt="%Y-%m-%d",
    end_offset=1,
)


# A global recipe's weekly loop (assets/recipes.py): one partition per (recipe, week). A week runs from
# Saturday 02:00 New York to the next; its fit reads prices up to the Friday it ends on, so a backfill of
# past weeks refits the recipe as it would have been fitted then.
RECIPES, WEEK = "recipe", "week"
WEEKS_START = "2024-01-06"
recipe_week_partitions = MultiPartitionsDefinition(
    {
        RECIPES: StaticPartitionsDefinition(global_recipes()),
        WEEK: WeeklyPartitionsDefinition(
            start_date=WEEKS_START, day_offset=6, hour_offset=2, timezone=MARKET_TZ, fmt="%Y-%m-%d"
        ),
    }
)


def recipe_week_key(recipe: str, week: str) -> MultiPartitionKey:
    return MultiPartitionKey({RECIPES: recipe, WEEK: week})


def recipe_and_as_of(key: MultiPartitionKey | str) -> tuple[str, dt.date]:
    """(the recipe, the last day of prices its fit reads: the Friday its week ends on) of a partition."""
    keys = recipe_week_partitions.get_partition_key_from_str(str(key)).keys_by_dimension
    return keys[RECIPES], dt.date.fromisoformat(keys[WEEK]) + dt.timedelta(days=6)


RANGE_START = ASSET_PARTITION_RANGE_START_TAG
RANGE_END = ASSET_PARTITION_RANGE_END_TAG


def range_tags(keys: list[str]) -> dict:
    """Run tags for one single-run backfill over keys[0]..keys[-1] (a contiguous partition range)."""
    return {RANGE_START: keys[0], RANGE_END: keys[-1]}


def contiguous_ranges(keys, order: list[str]) -> list[list[str]]:
    """`keys` cut into runs of consecutive keys in `order` (a static partition set's definition order):
    one Dagster run covers one contiguous range, so a scattered set needs one run per range."""
    wanted = set(keys)
    missing = wanted - set(order)
    if missing:
        raise ValueError(f"partition key(s) not in the partition set: {', '.join(sorted(missing))}")
    ranges: list[list[str]] = []
    previous = False
    for key in order:
        if key in wanted:
            if previous:
                ranges[-1].append(key)
            else:
                ranges.append([key])
        previous = key in wanted
    return ranges


def check_evening_keys(run_tags: dict, keys: list[str]) -> None:
    """Fail unless the run was launched for real evening partitions, every one inside the calendar.

    A run launched over GraphQL or with the partition tag set by hand is not checked by Dagster: a
    Saturday key resolves to the next window (Monday's evening would be predicted) and a key past the
    calendar's end to "no session" and success. Weekday holidays stay valid ("no session" by design).
    """
    asked = [
        run_tags[t]
        for t in (PARTITION_NAME_TAG, ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG)
        if run_tags.get(t)
    ]
    for key in asked:
        if evening_partitions.has_partition_key(key):
            continue
        try:
            why = calendar.closed_reason(dt.date.fromisoformat(key))
        except ValueError:
            why = "not a date (YYYY-MM-DD)"
        raise Failure(
            f"{key!r} is not an evening partition (weekday evenings from {EVENINGS_START} up to the latest "
            f"{NIGHTLY_TIME:%H:%M} New York): {why}; nothing was predicted",
            allow_retries=False,
        )
    for key in keys:
        problem = calendar.range_problem(dt.date.fromisoformat(key))
        if problem:
            raise Failure(f"evening {key}: {problem}; nothing was predicted", allow_retries=False)
