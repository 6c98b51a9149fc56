"""The `prices` asset on a configured source: per-ticker outcome table, retry policy, jump check."""

import datetime as dt

from dagster import AssetCheckKey, AssetKey, DagsterEventType, materialize
from ldtm_dagster_helpers import tiny_resources

from ldtm_core.data.sources import PriceSource
from ldtm_core.data.synthetic_market import generate
from ldtm_dagster import assets, checks, defs
from ldtm_dagster.assets import market


def test_outcome_table_names_the_refused_ticker_and_the_jump_check_warns(
    dagster_instance, sqlite_url, tmp_path
):
    drop = tmp_path / "drop"
    drop.mkdir()
    df = generate(["AAPL", "NVDA", "TSLA"], "2024-05-20", "2024-06-14", seed=2)
    split = (df["ticker"] == "NVDA") & (df["date"] >= dt.date(2024, 6, 10))
    df.loc[split, ["open", "high", "low", "close", "adj_close"]] /= 10.0
    df.loc[(df["ticker"] == "TSLA") & (df["date"] == dt.date(2024, 6, 3)), "close"] = float("nan")
    df.to_csv(drop / "week.csv", index=False)

    result = materialize(
        [assets.prices, checks.prices_no_unexplained_jumps],
        instance=dagster_instance,
        resources=tiny_resources(tmp_path / "home", sqlite_url),
        run_config={"ops": {"prices": {"config": {"source": f"files:{drop}", "end": "2024-06-14"}}}},
    )
    assert result.success  # one refused ticker does not fail the nightly
    meta = (
        dagster_instance.fetch_materializations(AssetKey("prices"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    rows = {r.data["ticker"]: r.data for r in meta["outcomes"].value.records}
    assert rows["AAPL"]["status"] == rows["NVDA"]["status"] == "ok"
    assert rows["TSLA"]["status"] == "failed" and "missing close" in rows["TSLA"]["reason"]
    assert "| TSLA" in meta["outcomes_md"].value and meta["tickers_failed"].value == 1
    [check] = result.get_asset_check_evaluations()
    assert check.asset_check_key == AssetCheckKey(AssetKey("prices"), "prices_no_unexplained_jumps")
    assert not check.passed and check.severity.value == "WARN"
    assert (
        check.metadata["flagged_moves"].value == 1 and "NVDA 2024-06-10" in check.metadata["moves"].value[0]
    )


def _retries(result) -> int:
    return sum(1 for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY)


def test_prices_retries_a_source_that_is_down_and_nothing_deterministic(
    dagster_instance, sqlite_url, tmp_path, monkeypatch
):
    # Issue 38: a step RetryPolicy retried every failure of the step, a refused resource setting too
    # (the probe's run config reading a secret into the database URL): 2 + 4 + 8 minutes, then failed.
    class Down(PriceSource):
        name = "down"

        def fetch(self, tickers, start, end):
            raise ConnectionError("connection refused")

    monkeypatch.setattr(market, "make_source", lambda spec, seed=None: Down())
    monkeypatch.setattr(market, "SOURCE_DOWN_WAIT_S", 0)
    resources = tiny_resources(tmp_path / "home", sqlite_url)
    config = {"ops": {"prices": {"config": {"start": "2024-05-01", "end": "2024-06-14"}}}}
    down = materialize(
        [assets.prices],
        instance=dagster_instance,
        resources=resources,
        run_config=config,
        raise_on_error=False,
    )
    assert not down.success and _retries(down) == market.SOURCE_DOWN_RETRIES == 3
    assert "source down unavailable" in str(down.get_step_failure_events()[0].step_failure_data.error.message)

    bad = {**resources, "database": type(resources["database"])(url="not-a-url")}
    refused = materialize(
        [assets.prices], instance=dagster_instance, resources=bad, run_config=config, raise_on_error=False
    )
    assert not refused.success and _retries(refused) == 0
    assert assets.prices.op.retry_policy is None
    for name in ("run_failure_alert", "snapshots_freshness_alert"):
        assert defs.resolve_sensor_def(name).name == name


def test_the_nightly_fetches_up_to_its_own_evening(dagster_instance, sqlite_url, tmp_path, monkeypatch):
    monkeypatch.delenv("LDTM_PRICE_SOURCE", raising=False)
    resources = tiny_resources(tmp_path / "home", sqlite_url)
    result = materialize(
        [assets.prices],
        instance=dagster_instance,
        resources=resources,
        run_config={"ops": {"prices": {"config": {"start": "2024-01-02"}}}},
        tags={"dagster/partition": "2024-03-08"},
    )
    assert result.success
    meta = (
        dagster_instance.fetch_materializations(AssetKey("prices"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    assert meta["source"].value == "synthetic seed=0"
    assert meta["end"].value == meta["last_date"].value == "2024-03-08"


def test_freshness_check_warns_and_names_the_ticker_without_the_latest_bar(
    dagster_instance, sqlite_url, tmp_path
):
    drop = tmp_path / "drop"
    drop.mkdir()
    df = generate(["AAPL", "NVDA"], "2024-05-20", "2024-06-14", seed=2)
    df = df[~((df["ticker"] == "NVDA") & (df["date"] > dt.date(2024, 6, 12)))]  # NVDA's bars stop early
    df.to_csv(drop / "week.csv", index=False)
    resources = tiny_resources(tmp_path / "home", sqlite_url, universe="AAPL,NVDA")
    result = materialize(
        [assets.prices, checks.prices_latest_session_complete],
        instance=dagster_instance,
        resources=resources,
        run_config={"ops": {"prices": {"config": {"source": f"files:{drop}", "end": "2024-06-14"}}}},
    )
    assert result.success  # a warning: the fresh tickers still go on to their snapshots
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity.value == "WARN"
    assert check.metadata["session"].value == "2024-06-14" and check.metadata["stale_tickers"].value == 1
    assert check.metadata["stale"].value == {"NVDA": "last bar 2024-06-12, 2 session(s) before 2024-06-14"}
