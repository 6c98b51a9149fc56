"""Benchmark: every recipe on the same folds, side by side.

    .venv/bin/python benchmarks/recipes.py                      # full universe + SYNEDGE, 8 years, 3 folds
    .venv/bin/python benchmarks/recipes.py --quick              # 12 tickers, 3 years, 2 folds (seconds)
    .venv/bin/python benchmarks/recipes.py --csv-dir ~/bars     # your own daily bars instead

Rows: `lstm` per ticker, the product's per-ticker recipe as `ldtm train` fits it (`--lstm-profile`,
reference by default: `build_samples`, the purged train/validation split, `training_loop.fit` with
early stopping, prices denormalised back to log returns): the seed's "an expert per ticker", the
reference every other row is judged against; `global_lstm` (one network fitted once on every ticker's
windows of the same features); ridge and
LightGBM (`recipes/tabular.py`) fitted globally and per ticker, so their rows answer "pooled or per
ticker?"; and ridge_market and lightgbm_market (`recipes/market.py`: each ticker's price features plus
the market's returns and the ticker's lead-lag beta to it), left out when the market (`--market`, QQQ)
is not in the data. Each recipe reads its own inputs (`Family.inputs`), targets are each horizon's log
return (`tabular.panel_targets`), and every row of the table is scored on the same rows: those where
every recipe has its inputs and every target is known.

Folds are walk-forward: the last `--folds` blocks of 63 evenings (a quarter) of the rows whose every
target is known (so the last month of bars only serves as targets), each fold's model fitted on every
row whose latest target date is before the fold's first evening (purged: no training row's target
reaches into the test quarter). Per ticker, a ticker with fewer than MIN_TICKER_ROWS training rows in a
fold gets no model there (counted below the table), and its test rows are left out of every variant's
score, so all rows of the table stand on the same rows. LightGBM per ticker grows fewer trees than the
global fit (the table says how many): one fit per ticker, fold and horizon is the cost.

Columns: fit s is the wall time of one fold's fit(s) for all tickers (mean over folds); predict ms of one
evening of all tickers (the fold's last evening, median of 5, mean over folds; per ticker: one predict
call per ticker); memory is the peak resident set during the fit above the RSS before it (VmHWM reset
through /proc/self/clear_refs; where Linux does not allow that, tracemalloc's peak, which misses
LightGBM's own C++ allocations: the line above the table says which). Direction is the sign of the
predicted next-day log return against the realised one, ties (no move) out, beside always-up and a
coin on the same rows. Its p's: over the universe, one-sided tests over evenings of each evening's mean
of (model right - baseline right), clustered by date because tickers move together on an evening
(`scoring.hac.mean_test`); for SYNEDGE alone, the one-sided exact sign test (`scoring.baselines.score`,
`skill`), pooled over the folds. IC is the mean per-evening cross-sectional Spearman rank IC of each horizon's predicted
vs realised log return (`signals.ic.rowwise_pearson` on ranks, 3+ names an evening) with the t of the
overlap-aware EWC test the signal report uses (`scoring.hac.mean_test`, overlap = the horizon's
sessions; "–": fewer than 10 independent target periods, too short to test). The SYNEDGE columns are
the planted ticker alone (`synthetic_market.PLANTED`: a known per-ticker edge, ~70 % next-day direction
to a model that finds it). The verdict column is the gate's universe verdict (`gate.universe.
clustered`: paired next-day hits, standard error clustered by evening, one-sided) of the row against
the per-ticker `lstm` on the same decided rows, at level 0.05 with no trials spent (a report, not a
promotion): the difference in points, its p, and the smallest difference these rows could detect.
The planted-families table scores each family of `synthetic_market.PLANTED_FAMILIES` alone: pooled
(an edge only pooled rows reveal), own_sign (each ticker's own sign: a per-ticker model's), and
lagged_factor (the market a session late: only a recipe reading the market can see it).

`--csv-dir DIR` reads every `*.csv` and `*.parquet` in DIR instead of the synthetic market, as `ldtm
ingest` reads price files (`data.price_files`): one file per ticker (ticker = the file's stem) or a long
file with a ticker column, a header with date, open, high, low, close, volume (any case; Yahoo's
headers too), all on one split/dividend basis. A bad file or row is an error naming the file, its line
and date, e.g.

    .venv/bin/python benchmarks/recipes.py --csv-dir ~/bars --years 10

(`--years` keeps the last N years; without it every bar is used). It prints a Markdown table and the CPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from ldtm_core.accountability.gate.universe import clustered  # noqa: E402
from ldtm_core.accountability.signals.execution import RULES  # noqa: E402
from ldtm_core.accountability.signals.ic import rowwise_pearson  # noqa: E402
from ldtm_core.data.calendar import target_dates  # noqa: E402
from ldtm_core.data.price_files import expand_paths, read_price_file  # noqa: E402
from ldtm_core.data.samples import SampleSet, build_samples  # noqa: E402
from ldtm_core.data.synthetic_market import FAMILY_OF, PLANTED, PLANTED_FAMILIES, generate  # noqa: E402
from ldtm_core.data.universe import load_universe  # noqa: E402
from ldtm_core.errors import InputError  # noqa: E402
from ldtm_core.horizons import DIRECTION, HORIZONS  # noqa: E402
from ldtm_core.learning import training_loop  # noqa: E402
from ldtm_core.learning.backtest import predict_prices  # noqa: E402
from ldtm_core.learning.model import ModelConfig, get_profile  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.learning.recipes.family import RecipeConfig, inputs_of  # noqa: E402
from ldtm_core.learning.recipes.global_lstm import GlobalLSTMConfig  # noqa: E402
from ldtm_core.learning.recipes.market import MarketConfig  # noqa: E402
from ldtm_core.learning.recipes.tabular import TabularConfig, fit, panel_targets, target_columns  # noqa: E402
from ldtm_core.learning.split import purged_split  # noqa: E402
from ldtm_core.scoring import baselines, hac  # noqa: E402
from ldtm_core.scoring.skill import format_p_value, sign_test_p_value  # noqa: E402

END = dt.date(2025, 12, 31)  # the synthetic market's last session asked for (fixed: reproducible figures)
FOLD_SESSIONS = 63  # a quarter of evenings per fold
MIN_TICKER_ROWS = 252  # a year of training rows, or that ticker gets no per-ticker model in the fold
PLANTED_TICKER = next(iter(PLANTED))  # SYNEDGE
QUICK_TICKERS = 12
BAR_COLUMNS = ["ticker", "date", "open", "high", "low", "close", "volume"]
PREDICT_REPEATS = 5
TRADED = "next_close"  # signals.execution's default rule: enter at T+1's close, exit at T+2's
VERDICT_LEVEL = 0.05  # one comparison per row, reported, not a gate's decision: no trials spent


@dataclass(frozen=True)
class Variant:
    """A recipe and how it is fitted: once on all tickers' rows, or once per ticker on its own."""

    label: str
    cfg: RecipeConfig | ModelConfig  # a ModelConfig: the product's per-ticker LSTM
    per_ticker: bool


REFERENCE = "lstm, per ticker"  # the product's recipe: every other row is judged against it (verdict)


def variants(args, with_market: bool) -> list[Variant]:
    ridge = TabularConfig(kind="ridge")
    lgbm = TabularConfig(kind="lightgbm", seed=args.seed, num_threads=args.threads)
    lstm = GlobalLSTMConfig(seed=args.seed, num_threads=args.threads, epochs=args.lstm_epochs)
    out = [
        Variant(REFERENCE, get_profile(args.lstm_profile, seed=args.seed), True),
        Variant("global_lstm", lstm, False),
        Variant("ridge, global", ridge, False),
        Variant("ridge, per ticker", ridge, True),
        Variant(f"lightgbm, global ({args.trees} trees)", replace(lgbm, n_estimators=args.trees), False),
        Variant(
            f"lightgbm, per ticker ({args.ticker_trees} trees)",
            replace(lgbm, n_estimators=args.ticker_trees),
            True,
        ),
    ]
    if with_market:
        market = MarketConfig(kind="ridge_market", market=args.market)
        out += [
            Variant("ridge_market, global", market, False),
            Variant(
                f"lightgbm_market, global ({args.trees} trees)",
                MarketConfig(
                    kind="lightgbm_market",
                    seed=args.seed,
                    num_threads=args.threads,
                    n_estimators=args.trees,
                    market=args.market,
                ),
                False,
            ),
        ]
    return out


def is_lstm(v: Variant) -> bool:
    return isinstance(v.cfg, ModelConfig)


def warm_config(cfg: RecipeConfig) -> RecipeConfig:
    """`cfg` at its cheapest: a fit that only imports and sets up what the timed fits will use."""
    cheap = {"n_estimators": 2, "epochs": 1, "epoch_rows": 256}
    return replace(cfg, **{k: v for k, v in cheap.items() if hasattr(cfg, k)})


def inputs_key(cfg: RecipeConfig) -> tuple:
    inputs = inputs_of(cfg)
    return inputs.name, inputs.fingerprint(cfg)


def bar_arrays(bars: pd.DataFrame, tickers: tuple[str, ...]) -> dict:
    """{ticker: arrays} of `tickers`' bars, as `load_price_arrays` gives them (an input's context)."""
    out = {}
    for t in tickers:
        mine = bars[bars["ticker"] == t]
        if len(mine):
            out[t] = {"date": pd.to_datetime(mine["date"]).to_numpy().astype("datetime64[D]")}
            out[t].update({f: mine[f].to_numpy(np.float64) for f in BAR_COLUMNS[2:]})
    return out


# --- data ----------------------------------------------------------------------------------------------


def read_csv_dir(directory: Path, limit: int | None = None) -> pd.DataFrame:
    """Every price file in `directory` (sorted by name; the first `limit`) as one panel of bars, read and
    validated as `ldtm ingest` reads files (`data.price_files`: errors name the file, line and date)."""
    if not directory.is_dir():
        raise InputError(f"--csv-dir {directory}: not a directory")
    paths = expand_paths([directory])[:limit]
    seen: dict[str, Path] = {}
    frames = []
    for path in paths:
        frame = read_price_file(path)
        for ticker in frame["ticker"].unique():
            if ticker in seen:
                raise InputError(f"{path}: ticker {ticker} again (also {seen[ticker].name})")
            seen[ticker] = path
        frames.append(frame)
    bars = pd.concat(frames, ignore_index=True)
    bars["date"] = bars["date"].dt.date
    return bars[BAR_COLUMNS]


def trim_years(bars: pd.DataFrame, years: float) -> pd.DataFrame:
    last = pd.Timestamp(max(bars["date"]))
    first = (last - pd.Timedelta(days=round(365.25 * years))).date()
    return bars[bars["date"] >= first].reset_index(drop=True)


def synthetic_bars(universe: str, years: float, seed: int, quick: bool, market: str) -> pd.DataFrame:
    tickers = [t for t in load_universe(universe) if t not in (PLANTED_TICKER, market)]
    if quick:
        tickers = tickers[: QUICK_TICKERS - 2]
    tickers += [PLANTED_TICKER, market]  # the market: what the lagged_factor family follows
    for family in PLANTED_FAMILIES.values():  # quick: the first 4 of each family
        tickers += list(family["members"][: 4 if quick else None])
    start = END - dt.timedelta(days=round(365.25 * years))
    bars = generate(tickers, start, END, seed=seed)
    return bars[BAR_COLUMNS]


# --- measuring -----------------------------------------------------------------------------------------


def _status_kib(key: str) -> int:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith(key + ":"):
            return int(row.split()[1])
    raise OSError(f"no {key} in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset VmHWM to the current RSS (Linux >= 4.0)
        return _status_kib("VmHWM") <= _status_kib("VmRSS") + 1024
    except OSError:
        return False


MEMORY_BY_RSS = _reset_peak_rss()
MEMORY_KIND = (
    "peak RSS during the fit above the RSS before it (VmHWM reset through /proc/self/clear_refs)"
    if MEMORY_BY_RSS
    else "tracemalloc's peak during the fit (Python and numpy allocations; LightGBM's C++ heap not seen)"
)


@contextmanager
def peak_memory(into: list[float]):
    """Appends the fit's peak memory in MiB (MEMORY_KIND) to `into`."""
    if MEMORY_BY_RSS:
        _reset_peak_rss()
        before = _status_kib("VmRSS")
        yield
        into.append((_status_kib("VmHWM") - before) / 1024)
    else:
        tracemalloc.start()
        try:
            yield
            into.append(tracemalloc.get_traced_memory()[1] / 2**20)
        finally:
            tracemalloc.stop()


# --- the run -------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """One variant's figures over the folds; `pred` [rows, horizons], NaN where it predicted nothing."""

    pred: np.ndarray
    fit_s: list[float] = field(default_factory=list)
    predict_s: list[float] = field(default_factory=list)
    memory_mib: list[float] = field(default_factory=list)
    fitted: int = 0  # per ticker: ticker-folds with a model
    skipped: int = 0  # per ticker: ticker-folds with test rows but too few training rows


def fold_evenings(dates: np.ndarray, folds: int) -> list[np.ndarray]:
    """The test evenings of each fold: the last `folds` blocks of FOLD_SESSIONS evenings, oldest first."""
    evenings = np.unique(dates)
    need = folds * FOLD_SESSIONS
    if len(evenings) < need + MIN_TICKER_ROWS:
        raise InputError(
            f"{len(evenings)} evenings with every target known: {folds} folds of {FOLD_SESSIONS} need "
            f"{need} plus at least {MIN_TICKER_ROWS} to train on (more --years, or fewer --folds)"
        )
    tail = evenings[len(evenings) - need :]
    return [tail[k * FOLD_SESSIONS : (k + 1) * FOLD_SESSIONS] for k in range(folds)]


def _timed_predict(predict: Callable[[], object]) -> float:
    times = []
    for _ in range(PREDICT_REPEATS):
        t0 = time.perf_counter()
        predict()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_fold(
    v: Variant, tally: Tally, x: np.ndarray, y: np.ndarray, tickers: np.ndarray, train, test, evening
):
    """Fit `v` on the `train` rows, predict the `test` rows into `tally.pred`, time one `evening`."""
    if not v.per_ticker:
        with peak_memory(tally.memory_mib):
            t0 = time.perf_counter()
            model = fit(x[train], y[train], v.cfg)
            tally.fit_s.append(time.perf_counter() - t0)
        rows = np.flatnonzero(test)
        tally.pred[rows] = model.predict(x[rows])
        one = np.flatnonzero(evening)
        tally.predict_s.append(_timed_predict(lambda: model.predict(x[one])))
        return
    models = {}
    names = np.unique(tickers[test])
    with peak_memory(tally.memory_mib):
        t0 = time.perf_counter()
        for name in names:
            mine = train & (tickers == name)
            if mine.sum() < MIN_TICKER_ROWS:
                tally.skipped += 1
                continue
            models[name] = fit(x[mine], y[mine], v.cfg)
        tally.fit_s.append(time.perf_counter() - t0)
    tally.fitted += len(models)
    for name, model in models.items():
        rows = np.flatnonzero(test & (tickers == name))
        tally.pred[rows] = model.predict(x[rows])
    at = {name: np.flatnonzero(evening & (tickers == name)) for name in models}
    at = {k: r for k, r in at.items() if len(r)}
    tally.predict_s.append(_timed_predict(lambda: [models[k].predict(x[r]) for k, r in at.items()]))


def lstm_samples(bars: pd.DataFrame, cfg: ModelConfig) -> dict[str, tuple[SampleSet, np.ndarray]]:
    """{ticker: (its samples as `ldtm train` builds them, each sample's row of `bars`)}."""
    out = {}
    for name, g in bars.groupby("ticker", sort=False):
        samples = build_samples(g[BAR_COLUMNS[1:]].reset_index(drop=True), cfg.window, names=cfg.features)
        days = pd.to_datetime(g["date"]).to_numpy().astype("datetime64[D]")
        out[str(name)] = (samples, g.index.to_numpy()[np.searchsorted(days, samples.dates)])
    return out


def run_lstm_fold(v: Variant, tally: Tally, sets: dict, train, test, evening, threads: int) -> None:
    """The product's LSTM per ticker on the fold: each ticker's training rows split as `ldtm train`
    splits them (purged, the profile's validation share), fitted with early stopping, and its test
    rows' predicted prices back to log returns. `sets` rows index the scored rows (-1: not scored)."""
    models = {}
    with peak_memory(tally.memory_mib):
        t0 = time.perf_counter()
        for name, (samples, rows) in sets.items():
            scored = rows >= 0
            at = np.maximum(rows, 0)
            if not (scored & test[at]).any():
                continue
            mine = samples.subset(np.flatnonzero(scored & train[at]))
            if len(mine) < MIN_TICKER_ROWS:
                tally.skipped += 1
                continue
            fit_idx, val_idx = purged_split(mine, v.cfg.val_fraction)
            result = training_loop.fit(mine.subset(fit_idx), mine.subset(val_idx), v.cfg, "cpu", threads)
            models[name] = result.model.eval()
        tally.fit_s.append(time.perf_counter() - t0)
    tally.fitted += len(models)

    def log_returns(name: str, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        samples, rows = sets[name]
        at = np.flatnonzero((rows >= 0) & where[np.maximum(rows, 0)])
        part = samples.subset(at)
        return rows[at], np.log(predict_prices(models[name], part) / part.close[:, None])

    for name in models:
        rows, pred = log_returns(name, test)
        tally.pred[rows] = pred
    tally.predict_s.append(_timed_predict(lambda: [log_returns(name, evening) for name in models]))


def evening_ic(dates: np.ndarray, tickers: np.ndarray, pred: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per evening (in date order): the Spearman rank IC across tickers (NaN below 3 names)."""
    _, day = np.unique(dates, return_inverse=True)
    name, _ = pd.factorize(tickers)
    shape = (int(day.max()) + 1, int(name.max()) + 1)
    p, r = np.full(shape, np.nan), np.full(shape, np.nan)
    p[day, name], r[day, name] = pred, real
    return rowwise_pearson(pd.DataFrame(p).rank(axis=1).to_numpy(), pd.DataFrame(r).rank(axis=1).to_numpy())


def pct(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x * 100:.1f} %"


def direction(
    pred_next: np.ndarray, real_next: np.ndarray, dates: np.ndarray | None = None
) -> tuple[float, float, int, str, str]:
    """(model accuracy, always-up's, scored rows, p vs always-up, p vs a coin) on these rows, ties out.

    One ticker's rows (`dates` None): the exact one-sided sign tests. Many tickers' rows (`dates` given):
    tickers move together on one evening, so rows are not independent draws; the p's are then one-sided
    t-tests over evenings (clustered by date) of each evening's mean of (model right - baseline right),
    through the overlap-aware `hac.mean_test` at the next-day horizon."""
    if not len(real_next):
        return np.nan, np.nan, 0, "–", "–"
    right = np.sign(pred_next) == np.sign(real_next)
    up = baselines.by_name("always_up")
    calls = {up.name: up.call(np.zeros(0), np.zeros(0), np.arange(len(real_next)))}
    # score() reads sign(actual - close): the realised log return against 0 is the same sign.
    paired = baselines.score(right, real_next, np.zeros(len(real_next)), calls)[up.name]
    decided = real_next != 0
    hits = int(right[decided].sum())
    n = paired.n
    acc = hits / n if n else np.nan
    if dates is None:
        return (
            acc,
            paired.accuracy,
            n,
            format_p_value(paired.p_value),
            format_p_value(sign_test_p_value(hits, n - hits)),
        )
    frame = pd.DataFrame(
        {"date": dates[decided], "model": right[decided], "up": real_next[decided] > 0}
    ).groupby("date", sort=True)
    by_evening = frame.mean()
    vs_up = hac.mean_test((by_evening["model"] - by_evening["up"]).to_numpy(float), DIRECTION.overlap)
    vs_coin = hac.mean_test((by_evening["model"] - 0.5).to_numpy(float), DIRECTION.overlap)
    return acc, paired.accuracy, n, format_p_value(vs_up.p_greater), format_p_value(vs_coin.p_greater)


def ic_cell(dates, tickers, pred, real, overlap: int, with_ir: bool = False) -> str:
    """Mean per-evening rank IC (its overlap-aware t); with_ir: and its ICIR, mean / std of the evenings'
    ICs (per evening, not annualised)."""
    ic = evening_ic(dates, tickers, pred, real)
    test = hac.mean_test(ic, overlap)
    if not np.isfinite(test.mean):
        return "–"
    t = f"{test.t:.2f}" if np.isfinite(test.t) else "–"
    if not with_ir:
        return f"{test.mean:.3f} ({t})"
    return f"{test.mean:.3f} ({t}; {np.nanmean(ic) / np.nanstd(ic, ddof=1):.2f})"


def verdict_cell(v: Variant, pred_next, real_next, reference_right, dates) -> str:
    """The universe verdict's figures (`gate.universe.clustered`, the gate's own) of `v` against the
    reference on the same decided rows: difference in points (one-sided p; smallest detectable)."""
    if v.label == REFERENCE:
        return "reference"
    f = clustered(np.sign(pred_next) == np.sign(real_next), reference_right, dates, VERDICT_LEVEL)
    if not np.isfinite(f.p_value):
        return f"{f.difference * 100:+.1f} pts (–)"
    return f"{f.difference * 100:+.1f} pts (p {format_p_value(f.p_value)}; detects {f.detectable * 100:.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--universe", default="full", help="synthetic tickers (SYNEDGE is always added)")
    ap.add_argument("--years", type=float, default=None, help="history (default 8; --csv-dir: all of it)")
    ap.add_argument("--seed", type=int, default=0, help="the synthetic market's and LightGBM's seed")
    ap.add_argument("--csv-dir", type=Path, default=None, help="daily bars, one CSV per ticker (see above)")
    ap.add_argument("--folds", type=int, default=3, help=f"walk-forward folds of {FOLD_SESSIONS} evenings")
    ap.add_argument("--trees", type=int, default=200, help="LightGBM global: boosting rounds per horizon")
    ap.add_argument("--ticker-trees", type=int, default=100, help="LightGBM per ticker: rounds per horizon")
    ap.add_argument("--lstm-epochs", type=int, default=None, help="global_lstm's epochs (its default)")
    ap.add_argument(
        "--lstm-profile",
        default=None,
        help="the per-ticker lstm's profile (`ldtm train`'s; default reference, --quick demo)",
    )
    ap.add_argument("--market", default="QQQ", help="the market the market recipes read (left out if absent)")
    ap.add_argument("--threads", type=int, default=1, help="LightGBM's, torch's and BLAS's threads")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_TICKERS} tickers, 3 years, 2 folds, 50/20 trees, global_lstm of 1 epoch, lstm's demo profile",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.years, args.folds, args.trees, args.ticker_trees = args.years or 3, 2, 50, 20
        args.lstm_epochs, args.lstm_profile = 1, args.lstm_profile or "demo"
    args.lstm_epochs = args.lstm_epochs or GlobalLSTMConfig().epochs
    args.lstm_profile = args.lstm_profile or "reference"
    try:
        return _run(args)
    except InputError as e:
        print(f"recipes: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    t_start = time.perf_counter()
    if args.folds < 1:
        raise InputError(f"--folds {args.folds}: need at least 1")
    if args.csv_dir is not None:
        bars = read_csv_dir(args.csv_dir.expanduser(), QUICK_TICKERS if args.quick else None)
        if args.years:
            bars = trim_years(bars, args.years)
        source = f"CSV bars from {args.csv_dir}"
    else:
        years = args.years or 8
        bars = synthetic_bars(args.universe, years, args.seed, args.quick, args.market)
        source = f"synthetic market (seed {args.seed}), universe {args.universe} + {PLANTED_TICKER}, {years:g} years to {END}"
    bars = bars.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True)
    with_market = bool((bars["ticker"] == args.market).any())
    runs = variants(args, with_market)
    # Each recipe's own inputs; scored only on rows where every recipe has its inputs and every target
    # is known, so all rows of the table stand on the same rows.
    targets = panel_targets(bars)[target_columns()].to_numpy(np.float64)
    # What the signal report's default book earns on the evening's call (signals.execution, next_close):
    # the ticker's next-day return one session later, close T+1 to close T+2 (NaN where unknown).
    same_ticker_next = np.r_[bars["ticker"].to_numpy()[1:] == bars["ticker"].to_numpy()[:-1], False]
    d = target_columns().index(f"target_{DIRECTION.name}")  # the direction horizon's column
    traded = np.where(same_ticker_next, np.r_[targets[1:, d], np.nan], np.nan)
    full = {}
    for v in runs:
        if is_lstm(v):
            continue
        if (key := inputs_key(v.cfg)) not in full:
            inputs = inputs_of(v.cfg)
            full[key] = inputs.compute(bars, v.cfg, bar_arrays(bars, inputs.context(v.cfg)))
    complete = np.isfinite(targets).all(axis=1)
    for values in full.values():
        complete &= np.isfinite(values).all(axis=1)
    # The product's LSTM reads its own samples: a row counts only where it has one too.
    lstm_sets = {v.label: lstm_samples(bars, v.cfg) for v in runs if is_lstm(v)}
    for sets in lstm_sets.values():
        has = np.zeros(len(bars), dtype=bool)
        for _, rows in sets.values():
            has[rows] = True
        complete &= has
    scored_row = np.where(complete, np.cumsum(complete) - 1, -1)
    lstm_sets = {
        label: {t: (samples, scored_row[rows]) for t, (samples, rows) in sets.items()}
        for label, sets in lstm_sets.items()
    }
    xs = {key: values[complete] for key, values in full.items()}
    del full
    y = targets[complete]
    traded = traded[complete]
    tickers = bars["ticker"].astype(str).to_numpy()[complete]
    dates = pd.to_datetime(bars["date"]).to_numpy().astype("datetime64[D]")[complete]
    # A row trains a fold only when its latest target date is before the fold's first evening (purge).
    last_target = np.max(np.column_stack(list(target_dates(dates).values())), axis=1)
    folds = fold_evenings(dates, args.folds)
    t_data = time.perf_counter() - t_start

    print(f"CPU: {describe_cpu()}; threads: {args.threads} (LightGBM's, and BLAS's through threadpoolctl)")
    print(
        f"{source}: {bars['ticker'].nunique()} tickers, {len(bars):,} bars, {len(y):,} rows with every "
        f"recipe's inputs and every target; {args.folds} folds of {FOLD_SESSIONS} evenings from {folds[0][0]} to "
        f"{folds[-1][-1]} (data {t_data:.0f} s)"
    )
    print(f"memory: {MEMORY_KIND}")
    print(f"IC at {TRADED}: the next-day call scored on what its book earns: {RULES[TRADED]}")
    if not with_market:
        print(f"market recipes left out: the market {args.market} is not in this data (--market)")
    print()

    tallies = {v.label: Tally(np.full((len(y), len(HORIZONS)), np.nan)) for v in runs}
    for v in runs:  # imports and first-call set-up outside the timed, measured fits
        if is_lstm(v):
            samples = next(iter(lstm_sets[v.label].values()))[0].subset(slice(0, MIN_TICKER_ROWS))
            fit_idx, val_idx = purged_split(samples, v.cfg.val_fraction)
            warm = replace(v.cfg, max_epochs=1)
            training_loop.fit(samples.subset(fit_idx), samples.subset(val_idx), warm, "cpu", args.threads)
            continue
        x = xs[inputs_key(v.cfg)]
        fit(x[:MIN_TICKER_ROWS], y[:MIN_TICKER_ROWS], warm_config(v.cfg)).predict(x[:1])
    tested = np.zeros(len(y), dtype=bool)
    # BLAS (ridge) on as many threads as LightGBM: otherwise its spare threads time the machine's load.
    with threadpool_limits(limits=args.threads):
        for evenings in folds:
            train = last_target < evenings[0]
            test = np.isin(dates, evenings)
            tested |= test
            evening = dates == evenings[-1]
            for v in runs:
                if is_lstm(v):
                    run_lstm_fold(v, tallies[v.label], lstm_sets[v.label], train, test, evening, args.threads)
                    continue
                run_fold(v, tallies[v.label], xs[inputs_key(v.cfg)], y, tickers, train, test, evening)

    # Every variant on the same rows: those every variant predicted (per ticker skips a few tickers).
    scored = tested & np.all([np.isfinite(t.pred).all(axis=1) for t in tallies.values()], axis=0)
    left_out = int(tested.sum() - scored.sum())
    real = y[scored]
    planted = tickers[scored] == PLANTED_TICKER

    heads = [f"IC {h.abbr} (t)" for h in HORIZONS] + [f"IC {DIRECTION.abbr} at {TRADED} (t; ICIR)"]
    print(
        "| recipe | fit s (all tickers) | predict ms (1 evening) | fit memory MiB | rows | next-day direction "
        "| always-up | coin | p vs always-up | p vs coin | "
        + " | ".join(heads)
        + f" | verdict vs {REFERENCE} | {PLANTED_TICKER} direction "
        f"| {PLANTED_TICKER} always-up | {PLANTED_TICKER} p vs always-up |"
    )
    print("|---|" + "---:|" * (14 + len(HORIZONS)))
    decided = real[:, d] != 0
    reference = np.sign(tallies[REFERENCE].pred[scored][decided, d]) == np.sign(real[decided, d])
    for v in runs:
        t = tallies[v.label]
        pred = t.pred[scored]
        acc, up, n, p_up, p_coin = direction(pred[:, d], real[:, d], dates[scored])
        ics = [
            ic_cell(dates[scored], tickers[scored], pred[:, j], real[:, j], h.overlap)
            for j, h in enumerate(HORIZONS)
        ]
        at = np.isfinite(traded[scored])  # the last evening's trade is not closed yet
        ics.append(
            ic_cell(dates[scored][at], tickers[scored][at], pred[at, d], traded[scored][at], 1, with_ir=True)
        )
        s_acc, s_up, _, s_p, _ = direction(pred[planted, d], real[planted, d])
        print(
            f"| {v.label} | {statistics.fmean(t.fit_s):.3f} | {statistics.fmean(t.predict_s) * 1e3:.2f} "
            f"| {max(t.memory_mib):.1f} | {n:,} | {pct(acc)} | {pct(up)} | 50.0 % | {p_up} | {p_coin} | "
            + " | ".join(ics)
            + f" | {verdict_cell(v, pred[decided, d], real[decided, d], reference, dates[scored][decided])}"
            + f" | {pct(s_acc)} | {pct(s_up)} | {s_p} |"
        )
    family = np.array([FAMILY_OF.get(t, "") for t in tickers[scored]])
    if (family != "").any():
        # The planted families alone: an edge only pooled rows reveal, and one whose sign is each ticker's.
        names = [n for n in PLANTED_FAMILIES if (family == n).any()]
        print("\n| recipe | " + " | ".join(f"{n}: next-day direction | {n}: IC 1d (t)" for n in names) + " |")
        print("|---|" + "---:|---:|" * len(names))
        for v in runs:
            pred = tallies[v.label].pred[scored]
            cells = []
            for n in names:
                rows = family == n
                acc = direction(pred[rows, d], real[rows, d], dates[scored][rows])[0]
                ic = ic_cell(dates[scored][rows], tickers[scored][rows], pred[rows, d], real[rows, d], 1)
                cells += [pct(acc), ic]
            print(f"| {v.label} | " + " | ".join(cells) + " |")
    per = next(t for v, t in zip(runs, tallies.values(), strict=True) if v.per_ticker)
    print(
        f"\nper ticker: {per.fitted} ticker-folds fitted, {per.skipped} skipped (< {MIN_TICKER_ROWS} training "
        f"rows); {left_out:,} test rows of skipped tickers left out of every row above "
        f"({int(scored.sum()):,} scored, ties out of direction). {PLANTED_TICKER}: "
        f"{int(planted.sum())} rows{'' if planted.any() else ' (not in this data)'}."
    )
    print(f"\n{time.perf_counter() - t_start:.0f} s on {describe_cpu()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
