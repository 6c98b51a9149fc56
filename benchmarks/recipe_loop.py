"""Benchmark: a week of a ridge champion challenged by LightGBM, run from Dagster's schedule and sensor,
beside the LSTM's weekly loop on the same universe, in one run (issue 59).

    .venv/bin/python benchmarks/recipe_loop.py                     # the full universe (103 tickers)
    .venv/bin/python benchmarks/recipe_loop.py --tickers 6 --years 3   # a smoke run

Setup (untimed): synthetic prices of the first N tickers of `full`, a Dagster instance in a temp folder,
ridge fitted and backtested for week 0 from the schedule and decided from the sensor; where the
verdict did not deploy it, an operator promotes it, so ridge is the champion of every ticker.
Timed, week 1 (LDTM_CHALLENGER_RECIPES=lightgbm):
  recipe loop  `weekly_recipe_refit`'s tick -> `recipe_refit_job` per recipe (ridge refitted with its
               serving settings, LightGBM as challenger: recipe_fits -> recipe_backtests) ->
               `recipe_decision_sensor`'s tick -> `recipe_decisions` per recipe;
  nightly      the next evening's `snapshots`: each ticker served by the winner;
  LSTM loop    `retrain_job`'s assets for every ticker in one run (features -> checkpoints -> backtests,
               the --lstm-profile, demo by default) and `promotions` (what promotion_gate_sensor launches).
It prints a Markdown table of wall times, what the decisions did and which recipe served, and the CPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagster import DagsterInstance, build_schedule_context, build_sensor_context, materialize  # noqa: E402

from ldtm_core.data.calendar import latest_session_on_or_before  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.synthetic_market import generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.learning.registry import active_model, list_models, promote  # noqa: E402
from ldtm_core.learning.resume import backtested_since  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

NY = ZoneInfo("America/New_York")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tickers", type=int, default=103, help="the first N tickers of the full universe")
    ap.add_argument("--years", type=float, default=5, help="years of synthetic prices before week 1")
    ap.add_argument("--week", default="2024-06-01", help="week 1's Saturday (week 0 is the one before)")
    ap.add_argument("--lstm-profile", default="demo", help="the LSTM loop's training profile")
    ap.add_argument("--folds", type=int, default=3)
    args = ap.parse_args(argv)
    logging.getLogger("ldtm.notify").setLevel(
        logging.ERROR
    )  # every held candidate's notification (own process)
    week1 = dt.date.fromisoformat(args.week)
    week0 = week1 - dt.timedelta(days=7)
    tickers = load_universe("full")[: args.tickers]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(
            {"LDTM_UNIVERSE": ",".join(tickers), "LDTM_HOME": f"{tmp}/home", "DAGSTER_HOME": f"{tmp}/dagster"}
        )
        from ldtm_dagster import assets, defs  # the partitions read LDTM_UNIVERSE at import
        from ldtm_dagster.partitions import contiguous_ranges, range_tags
        from ldtm_dagster.resources import AppDatabase, ArtifactStore, GpuProbe, TrainingProfile
        from ldtm_dagster.schedules import weekly_recipe_refit
        from ldtm_dagster.sensors import recipe_decision_sensor

        url = f"sqlite:///{tmp}/ldtm.db"
        engine = upgrade(url)
        start = (week1 - dt.timedelta(days=int(365.25 * args.years))).isoformat()
        end = latest_session_on_or_before(
            week1 + dt.timedelta(days=10)
        )  # the nightly's evening and its answer
        ingest_frame(engine, generate(tickers, start, str(end), seed=0), "synthetic")
        universe = ",".join(tickers)
        resources = {
            "store": ArtifactStore(home=f"{tmp}/home", universe=universe),
            "database": AppDatabase(url=url),
            "training": TrainingProfile(profile=args.lstm_profile),
            "gpu": GpuProbe(),
        }
        Path(f"{tmp}/dagster").mkdir()
        instance = DagsterInstance.local_temp(f"{tmp}/dagster")
        folds = {"recipe_backtests": {"config": {"folds": args.folds}}}

        def loop(saturday: dt.date, cursor: str | None) -> tuple[str | None, list[str]]:
            """The schedule's tick, each run it asks for, the sensor's tick, each decision it asks for."""
            tick = weekly_recipe_refit.evaluate_tick(
                build_schedule_context(
                    instance=instance,
                    scheduled_execution_time=dt.datetime.combine(saturday, dt.time(2, 30), NY),
                    resources={k: resources[k] for k in ("store", "database")},
                    repository_def=defs.get_repository_def(),
                )
            )
            for request in tick.run_requests:
                run = materialize(
                    [assets.recipe_fits, assets.recipe_backtests],
                    partition_key=request.partition_key,
                    instance=instance,
                    resources=resources,
                    run_config={"ops": folds},
                )
                assert run.success, request.partition_key
            sensed = recipe_decision_sensor(build_sensor_context(instance=instance, cursor=cursor))
            said = []
            for request in sensed.run_requests:
                run = materialize(
                    [assets.recipe_decisions],
                    partition_key=request.partition_key,
                    instance=instance,
                    resources=resources,
                )
                assert run.success, request.partition_key
                meta = run.asset_materializations_for_node("recipe_decisions")[0].metadata
                said.append(f"{meta['recipe'].value}: {meta['promoted'].value} promoted")
            return sensed.cursor, said

        os.environ["LDTM_CHALLENGER_RECIPES"] = "ridge"
        cursor, setup = loop(week0 + dt.timedelta(days=7), None)
        for t in tickers:  # ridge serves every ticker it could fit: by the verdict, or by an operator
            ridge = [m.id for m in list_models(engine, t) if m.recipe == "ridge"]
            if active_model(engine, t) is None and ridge:
                promote(engine, max(ridge), reason="benchmark")
        os.environ["LDTM_CHALLENGER_RECIPES"] = "lightgbm"
        t0 = time.perf_counter()
        cursor, decided = loop(week1 + dt.timedelta(days=7), cursor)
        recipe_s = time.perf_counter() - t0
        serving = Counter(
            getattr(active_model(engine, t), "recipe", "none (too little history)") for t in tickers
        )

        print(f"recipe loop: {recipe_s:.1f} s; {'; '.join(decided)}; serving {dict(serving)}", flush=True)
        evening = latest_session_on_or_before(week1 + dt.timedelta(days=9))
        t1 = time.perf_counter()
        nightly = materialize(
            [assets.snapshots], partition_key=str(evening), instance=instance, resources=resources
        )
        nightly_s = time.perf_counter() - t1
        assert nightly.success
        rows = nightly.asset_materializations_for_node("snapshots")[0].metadata["rows_written"].value

        t2, started = time.perf_counter(), dt.datetime.now(dt.UTC)
        lstm = materialize(
            [assets.features, assets.checkpoints, assets.backtests],
            instance=instance,
            resources=resources,
            tags=range_tags(tickers),
            run_config={
                "ops": {
                    "checkpoints": {"config": {"as_of": str(week1 + dt.timedelta(days=6))}},
                    "backtests": {"config": {"folds": args.folds}},
                }
            },
            raise_on_error=False,  # a late listing too short for the folds fails its ticker, not the loop
        )
        # promotion_gate_sensor gates each ticker whose backtest landed: one run per contiguous range.
        landed = backtested_since(engine, tickers, started)
        for keys in contiguous_ranges(landed, tickers):
            gated = materialize(
                [assets.promotions], instance=instance, resources=resources, tags=range_tags(keys)
            )
            assert gated.success, keys
        lstm_s = time.perf_counter() - t2
        lstm_note = (
            ""
            if lstm.success
            else " (the backtests step failed naming its too-short tickers; the others ran)"
        )
    print(
        f"CPU: {describe_cpu()}; {len(tickers)} tickers, {args.years:g} years to week {week1}, {args.folds} folds"
    )
    print(f"week 0 (setup): {'; '.join(setup)}; ridge then served every ticker it could fit")
    print(f"week 1 decisions: {'; '.join(decided)}; serving after: {dict(serving)}; nightly rows {rows}\n")
    print("| step | wall |")
    print("|---|---|")
    print(
        f"| recipe loop: schedule -> ridge + LightGBM fits and folds -> sensor -> two decisions | {recipe_s:.1f} s |"
    )
    print(f"| the next evening's snapshots, served by the winners | {nightly_s:.1f} s |")
    print(
        f"| LSTM loop ({args.lstm_profile}): features -> checkpoints -> backtests -> promotions{lstm_note} "
        f"| {lstm_s:.1f} s |"
    )
    print(f"| ratio LSTM loop / recipe loop | {lstm_s / recipe_s:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
