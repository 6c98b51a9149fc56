"""The whole graph for a small universe, through Dagster, on the embedded defaults; prints the leaderboard.

    python -m ldtm_dagster.demo            # demo universe, synthetic prices, demo profile

Steps (each a Dagster run on a persistent instance, so the `gpu` pool is enforced):
  1. prices                 synthetic market for the universe, and its dated membership (each ticker
                            from its first bar) imported as `ldtm universe import` would
  2. features, checkpoints, backtests
                            one single-run backfill over every ticker partition, trained on data up
                            to the replay start only, so the replayed evenings are out of sample
  3. promotions, onnx_exports  the gate per ticker (what promotion_gate_sensor launches)
  4. hpo_studies            a token Optuna search (2 one-epoch trials per ticker) so the asset shows
  5. snapshots              a single-run backfill of the last evenings: `replay` rows
  6. submissions            `demo-desk`, a submitted model (5-session momentum computed outside LDTM),
                            its file for the replayed evenings recorded late: replays, never scored live
  7. fillbacks, leaderboard, signal_performance, external_judgements
  8. recipe_fits, recipe_backtests, recipe_decisions
                            ridge fitted once for the universe for the week before the replay start, its
                            folds, and the universe decision on it, last, so every figure above is the LSTMs'

The app database is SQLite under LDTM_HOME (default ./.ldtm) unless LDTM_DATABASE_URL is set. The
Dagster instance is the persistent one in $DAGSTER_HOME (default `.dagster_home` in the repository, the
instance `make dev` serves), so every run, materialisation, check and plot shows in the UI afterwards.
The universe is `demo` unless --universe or LDTM_UNIVERSE says otherwise (the product default is `full`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from dagster import DagsterInstance, materialize

from ldtm_core.cli.accountability import print_leaderboard
from ldtm_core.config import env_text
from ldtm_core.data import calendar

from . import assets, checks
from .gpu_pool import GPU_RUN_TAGS, sync_pool_limit
from .partitions import evening_partitions, range_tags, recipe_week_key
from .resources import AppDatabase, ArtifactStore, GpuProbe, TrainingProfile

ALL_ASSETS = [getattr(assets, name) for name in assets.__all__]
REPO = Path(__file__).resolve().parent.parent
REPO_YAML = REPO / "dagster.yaml"


def dagster_home() -> Path:
    """$DAGSTER_HOME, else the repository's `.dagster_home`: the same default as `make dev`."""
    return Path(os.environ.get("DAGSTER_HOME") or REPO / ".dagster_home").resolve()


@contextmanager
def demo_instance():
    """The persistent instance `make dev` serves; a fresh home gets the repo's dagster.yaml (pools)."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():  # scripts/dagster_home.sh (make dev/demo) writes it too
        shutil.copy(REPO_YAML, home / "dagster.yaml")
    instance = DagsterInstance.from_config(str(home))
    try:
        yield instance
    finally:
        instance.dispose()


def demo_resources(universe: str = "demo", profile: str = "demo", max_epochs: int | None = None) -> dict:
    return {
        "store": ArtifactStore(home=env_text("LDTM_HOME", ".ldtm"), universe=universe),
        "database": AppDatabase(url=env_text("LDTM_DATABASE_URL", "")),
        "training": TrainingProfile(profile=profile, max_epochs=max_epochs),
        "gpu": GpuProbe(),
    }


def _import_membership(store: ArtifactStore, engine, tickers: list[str], start: str, log) -> None:
    """The synthetic market's dated universe (each ticker a member from its first bar: `start`, or its
    late listing), written as an instruments file and imported, as `ldtm universe import` would: the
    folds, the evenings and the fills read membership from it; it changes no figure of the demo."""
    from ldtm_core.data.membership import import_membership, write_membership_file
    from ldtm_core.data.sources import configured_spec
    from ldtm_core.data.synthetic_market import membership_spans

    if configured_spec().partition(":")[0].strip().lower() != "synthetic":
        log("[demo] universe membership: not the synthetic market, no history imported")
        return
    spans = membership_spans(tickers, start)
    path = write_membership_file(
        store.path / "universe_membership.txt",
        spans,
        header="the demo's synthetic universe (ldtm_dagster.demo)",
    )
    import_membership(engine, spans, str(path))
    log(f"[demo] universe membership: {len(spans)} spans imported from {path}")


DESK = "demo-desk"  # the demo's submitted model


def _desk_submission(engine, store: ArtifactStore, tickers: list[str], evenings: list[str]) -> Path:
    """The file a desk would submit for the replayed evenings: each horizon's expected log return is the
    mean daily log return of the 5 sessions up to the evening (registered once, as `ldtm models register`)."""
    import numpy as np

    from ldtm_core.accountability.submissions import external
    from ldtm_core.horizons import HORIZONS
    from ldtm_core.learning.price_windows import load_price_arrays

    if set(tickers) - set(external.models_of(engine, DESK)):
        external.register(engine, DESK, [t for t in tickers if t not in external.models_of(engine, DESK)])
    days = [dt.date.fromisoformat(e) for e in evenings]
    arrays = load_price_arrays(engine, tickers, days[0] - dt.timedelta(days=14), days[-1])
    rows = []
    for t, series in arrays.items():
        log_close = np.log(np.asarray(series["close"], dtype=np.float64))
        for day in days:
            at = int(np.searchsorted(series["date"], np.datetime64(day, "D"), side="right")) - 1
            if at >= 5 and series["date"][at] == np.datetime64(day, "D"):
                r = float((log_close[at] - log_close[at - 5]) / 5)
                rows += [(t, day.isoformat(), h.name, r) for h in HORIZONS]
    path = store.path / "submissions" / DESK / "replay.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=["ticker", "run_date", "horizon", "expected_return"])
    frame.to_csv(path, index=False, float_format="%.12g")  # the same bytes every run: a rerun is a no-op
    return path


def run_demo(
    instance: DagsterInstance,
    resources: dict,
    *,
    start: str = "2023-01-03",
    end: str = "2024-12-31",
    replay_sessions: int = 30,
    folds: int = 2,
    outcome_sessions: int = 0,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Materialise the whole graph (steps in the module doc); returns the leaderboard table."""
    store: ArtifactStore = resources["store"]
    tickers = store.tickers()
    end_day = calendar.latest_session_on_or_before(dt.date.fromisoformat(end))
    evenings = [
        k
        for k in evening_partitions.get_partition_keys(
            current_time=dt.datetime.combine(end_day, dt.time(23, 59))
        )
        if calendar.is_session(k)
    ][-replay_sessions:]
    replay_start = evenings[0]
    # Prices this many sessions past the last replayed evening let fillback reach every horizon
    # (one month = 21 sessions); with 0 the last evening is the newest data: a `live` row.
    prices_end = calendar.sessions_after(end_day, outcome_sessions) if outcome_sessions else end_day

    def run(step: str, selection: list, run_config: dict | None = None, **kw) -> None:
        log(f"[demo] {step}")
        # INFO keeps the assets' own messages (gate verdicts, skips) and drops Dagster's per-event DEBUG.
        run_config = {**(run_config or {}), "loggers": {"console": {"config": {"log_level": "INFO"}}}}
        result = materialize(
            ALL_ASSETS + checks.ALL_CHECKS,
            selection=selection,
            instance=instance,
            resources=resources,
            run_config=run_config,
            **kw,
        )
        assert result.success, f"demo step failed: {step}"

    plan = resources["gpu"].plan()
    before, after = sync_pool_limit(instance, plan)
    log(f"[demo] gpu pool limit {before} -> {after} ({plan.kind}): {plan.reason}")

    run(
        f"prices {start}..{prices_end}",
        [assets.prices],
        run_config={"ops": {"prices": {"config": {"start": start, "end": str(prices_end)}}}},
    )
    _import_membership(store, resources["database"].engine(store), tickers, start, log)
    run(
        f"features + checkpoints + backtests for {len(tickers)} tickers in one run (trained up to {replay_start})",
        [assets.features, assets.checkpoints, assets.backtests],
        tags={**range_tags(tickers), **GPU_RUN_TAGS},
        run_config={
            "ops": {
                "checkpoints": {"config": {"as_of": replay_start}},
                "backtests": {"config": {"folds": folds}},
            }
        },
    )
    run("promotion gate + ONNX export", [assets.promotions, assets.onnx_exports], tags=range_tags(tickers))
    # A token search so the UI shows the asset; real searches: `ldtm tune` or a backfill of hpo_studies.
    run(
        "hpo_studies: 2 one-epoch Optuna trials per ticker (a real search: ldtm tune)",
        [assets.hpo_studies],
        tags={**range_tags(tickers), **GPU_RUN_TAGS},
        run_config={
            "ops": {"hpo_studies": {"config": {"trials": 2, "fixed": ["max_epochs=1", "patience=1"]}}}
        },
    )
    run(
        f"snapshots: replay of {len(evenings)} evenings {evenings[0]}..{evenings[-1]}",
        [assets.snapshots],
        tags={**range_tags(evenings), **GPU_RUN_TAGS},
    )
    engine = resources["database"].engine(store)
    path = _desk_submission(engine, store, tickers, evenings)
    run(
        f"submissions: {DESK}'s file for the replayed evenings, recorded late (`ldtm submit {DESK} FILE --late`)",
        [assets.submissions],
        run_config={"ops": {"submissions": {"config": {"model": DESK, "path": str(path), "late": True}}}},
    )
    run(
        "fillbacks + leaderboard + signal_performance + external_judgements",
        [assets.fillbacks, assets.leaderboard, assets.signal_performance, assets.external_judgements],
    )
    # The newest week whose fit reads prices up to its Friday no later than the replay start.
    last = dt.date.fromisoformat(replay_start) - dt.timedelta(days=6)
    week = (last - dt.timedelta(days=(last.weekday() - 5) % 7)).isoformat()
    run(
        f"recipe_fits + recipe_backtests: ridge for the week of {week}, one fit for the universe",
        [assets.recipe_fits, assets.recipe_backtests],
        partition_key=recipe_week_key("ridge", week),
        run_config={"ops": {"recipe_backtests": {"config": {"folds": folds}}}},
    )
    run(
        "recipe_decisions: ridge decided once for the universe (what recipe_decision_sensor launches)",
        [assets.recipe_decisions],
        partition_key=recipe_week_key("ridge", week),
    )

    from ldtm_core.accountability.board.leaderboard import leaderboard

    return leaderboard(resources["database"].engine(store), mode="all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ldtm_dagster.demo", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--universe",
        default=env_text("LDTM_UNIVERSE", "demo"),
        help="tickers: 'demo' (6), 'full' (103), a comma list such as AAPL,NVDA, or a file "
        "(default: LDTM_UNIVERSE, else demo)",
    )
    parser.add_argument(
        "--profile",
        default="demo",
        help="model profile to train: demo (small, fast), reference, upgrade (default: demo)",
    )
    parser.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        help="cap on training epochs per model (default: the profile's own)",
    )
    parser.add_argument(
        "--start", default="2023-01-03", help="first date of the synthetic prices (default: 2023-01-03)"
    )
    parser.add_argument(
        "--end",
        default="2024-12-31",
        help="the last replayed evening; prices continue --outcome-sessions sessions after it "
        "(default: 2024-12-31)",
    )
    parser.add_argument(
        "--replay-sessions",
        type=int,
        default=30,
        help="evenings replayed into snapshots; models are trained on data before the first (default: 30)",
    )
    parser.add_argument(
        "--outcome-sessions",
        type=int,
        default=21,
        help="sessions of prices after the last replayed evening, so every horizon can be filled back "
        "(0: the last evening is the newest data and its row is live; default: 21)",
    )
    args = parser.parse_args(argv)
    resources = demo_resources(args.universe, args.profile, args.max_epochs)
    public_key = demo_receipts(resources["store"].path)
    with demo_instance() as instance:
        print(f"[demo] Dagster instance: {dagster_home()} (`make dev` shows these runs)")
        table = run_demo(
            instance,
            resources,
            start=args.start,
            end=args.end,
            replay_sessions=args.replay_sessions,
            outcome_sessions=args.outcome_sessions,
        )
    from ldtm_core.accountability.board.leaderboard import ungated_note
    from ldtm_core.accountability.board.record import record_answer

    print(record_answer(table).short())  # the answer first, then the table; the method: --explain
    print_leaderboard(table, explain=False)
    print("the method behind the labels, and every column: `ldtm leaderboard --explain --wide`")

    engine = resources["database"].engine(resources["store"])
    note = ungated_note(engine)
    if note:  # tickers whose candidate the gate held: not on the production board
        print(note)
    print_execution_costs(engine)
    print_track_record(engine, public_key)
    return 0


def demo_receipts(home: Path) -> Path | None:
    """Receipts for the demo's evenings, unless LDTM_RECEIPTS_DIR is set already (then yours, and None):
    a key made once under LDTM_HOME/keys and the receipts folder LDTM_HOME/receipts. Returns the public
    key's path."""
    from ldtm_core.accountability.ledger import receipts

    if env_text(receipts.DIR_ENV):
        return None
    private, public = home / "keys" / "receipts.pem", home / "keys" / "receipts.pub"
    if not private.exists():
        receipts.keygen(private, public)
    os.environ[receipts.DIR_ENV] = str(home / "receipts")
    os.environ[receipts.KEY_ENV] = str(private)
    return public


def print_track_record(engine, public_key: Path | None) -> None:
    """Export the record and check it against the receipts as an outsider would (no database, no key)."""
    import tempfile

    from ldtm_core.accountability.ledger.receipts import DIR_ENV, load_public_key
    from ldtm_core.accountability.ledger.record_export import export_record
    from ldtm_core.accountability.ledger.record_verify import verify_record

    sink = Path(env_text(DIR_ENV))
    if public_key is None:
        print(f"[demo] track record: receipts in your {sink}; check them with ldtm verify-record")
        return
    with tempfile.TemporaryDirectory() as tmp:
        export_record(engine, Path(tmp) / "export")
        report = verify_record(Path(tmp) / "export", sink, load_public_key(public_key))
    verdict = "ok" if report.ok else f"{len(report.findings)} finding(s), first: {report.findings[0]}"
    print(
        f"[demo] track record: {report.covered} of {report.rows} rows covered by {report.receipts} signed "
        f"receipts in {sink}: verify-record {verdict} (yourself: ldtm audit export OUT, then "
        f"ldtm verify-record OUT {sink} --public-key {public_key})"
    )


def print_execution_costs(engine) -> None:
    """The production book under each execution rule: a same-bar edge (SYNEDGE's) is not a tradable one."""
    from ldtm_core.accountability.signals.signals import execution_comparison

    table = execution_comparison(engine)
    if table.empty:
        return
    print(
        "[demo] signal_performance, long/short net of costs, by when the book trades (ldtm signals --execution):"
    )
    for r in table.itertuples(index=False):
        print(
            f"  {r.execution:<42} {r.evenings:>3} evenings  Sharpe {r.sharpe_net:6.2f}  "
            f"total {r.total_return_net * 100:6.2f}%  mean IC vs held return {r.mean_ic_held:6.3f}"
        )


if __name__ == "__main__":  # guard: the training pool spawns worker processes
    raise SystemExit(main())
