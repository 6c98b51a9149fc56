"""Dagster runs that used to accept what they should refuse, or fail with a traceback (issue 28 items 13-14)."""

from __future__ import annotations

import pytest
from dagster import DagsterInvalidConfigError, materialize

from ldtm_dagster.assets.accountability import snapshots
from ldtm_dagster.demo import demo_resources


def test_unknown_config_keys_on_the_snapshots_step_are_refused(ldtm_env):
    run_config = {"ops": {"snapshots": {"config": {"tickers": ["AAPL"]}}}}
    with pytest.raises(DagsterInvalidConfigError, match='unexpected config entry "tickers"'):
        materialize(
            [snapshots], resources=demo_resources(), run_config=run_config, partition_key="2024-03-28"
        )
