"""nightly_job for a key that is not an evening partition fails clearly (issue 20 item 16).

A run launched over GraphQL (or with the partition tag set by hand) is not checked against the
partitions definition by Dagster: a Saturday key resolves to the next window (Monday's evening) and a
key past the calendar's end to "no session". Both must fail the run and write nothing.
"""

from __future__ import annotations

import pytest
from dagster import AssetKey
from ldtm_dagster_helpers import tiny_resources

from ldtm_dagster import defs


@pytest.mark.parametrize(
    ("key", "why"),
    [("2024-11-23", "Saturday"), ("2099-01-02", "not an evening partition")],
)
def test_nightly_job_for_a_key_that_is_no_evening_fails_and_materialises_nothing(
    dagster_instance, sqlite_url, tmp_path, key, why
):
    result = defs.resolve_job_def("nightly_job").execute_in_process(
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", sqlite_url),
        tags={"dagster/partition": key},  # what a GraphQL launch sets; execute_in_process checks nothing
        raise_on_error=False,
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert key in message and why in message, message
    for asset in ("snapshots", "fillbacks", "leaderboard"):
        assert dagster_instance.fetch_materializations(AssetKey(asset), limit=1).records == []
