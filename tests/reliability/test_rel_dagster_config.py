"""Dagster config fields with wrong types / out-of-range values: a clear failure, nothing written.
Tests only; ldtm_dagster itself belongs to issue 5."""

from __future__ import annotations

import pytest
from dagster import DagsterInvalidConfigError, Failure, build_init_resource_context, materialize
from rel_helpers import table_counts

from ldtm_dagster.assets.market import prices
from ldtm_dagster.demo import demo_resources
from ldtm_dagster.resources import TrainingProfile

BAD = [
    ({"seed": "abc"}, DagsterInvalidConfigError, "seed"),
    ({"start": 20240101}, DagsterInvalidConfigError, "start"),
    ({"source": "ftp"}, None, "unknown price source 'ftp'"),
    ({"start": "2024-13-01", "end": "2024-02-01"}, None, "not a date"),
    ({"start": "2024-03-01", "end": "2024-02-01"}, None, "must be before end"),
    ({"tickers": ["../x"], "start": "2024-01-02", "end": "2024-02-01"}, None, "invalid ticker"),
    ({"tickers": ["AAPL'; DROP TABLE prices;--"], "end": "2024-02-01"}, None, "invalid ticker"),
    ({"tickers": ["ZZZZ"], "start": "2024-01-02", "end": "2024-02-01"}, None, "not in the universe"),
    ({"source": "files"}, None, "needs at least one path"),
]


@pytest.mark.parametrize("config,raises,message", BAD, ids=[str(c) for c, _, _ in BAD])
def test_bad_prices_config_fails_clearly_and_writes_nothing(ldtm_env, config, raises, message):
    before = table_counts(ldtm_env["url"])
    run_config = {"ops": {"prices": {"config": config}}}
    if raises is not None:
        with pytest.raises(raises, match=message):
            materialize([prices], resources=demo_resources(), run_config=run_config)
    else:
        result = materialize(
            [prices], resources=demo_resources(), run_config=run_config, raise_on_error=False
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert message in str(failure.step_failure_data.error.message)
    assert table_counts(ldtm_env["url"]) == before


@pytest.mark.parametrize(
    "kw,message", [({"max_workers": 0}, "max_workers"), ({"profile": "nope"}, "profile")]
)
def test_bad_training_resource_config_fails_at_setup(kw, message):
    with pytest.raises(Failure, match=message):
        TrainingProfile(**kw).setup_for_execution(build_init_resource_context())
