"""The paired live record of a shadow and its statistics (pure once read): per evening the published row
of the champion the shadow started beside and the shadow's own row, both filled and out of sample; the
exact McNemar test on the direction discordants and the Diebold-Mariano test on next-day |error|, each at
alpha / 2 (shadow_power says what N evenings can detect)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.horizons import DIRECTION, HORIZONS
from ldtm_core.learning.registry import UNPUBLISHED
from ldtm_core.schema import snapshots
from ldtm_core.scoring.paired import dm_error_test, mcnemar_p
from ldtm_core.scoring.skill import format_p_value
from ldtm_core.shadow_power import ALPHA, TESTS

SIGNIFICANCE = ALPHA / TESTS  # each test's p at or below which the shadow is retired (Bonferroni)
RULE = (
    "retire the shadow when the champion is significantly better on the same filled evenings "
    f"(exact McNemar on the direction discordants, or Diebold-Mariano on next-day |error|, one-sided, each at "
    f"p <= {SIGNIFICANCE:g}: equal models are retired at most {ALPHA:g} of the time); otherwise promote it; "
    "a shadow whose checkpoint no longer loads, whose champion stopped serving, or that misses its "
    "evenings past its timeout ends retired"
)


# --- the paired live record ------------------------------------------------------------------------


def paired_evenings(
    engine: Engine, ticker: str, shadow_id: int, champion_id: int | None = None
) -> pd.DataFrame:
    """One row per evening where the published (active, first non-shadow) row and the shadow's row are
    both filled and out of sample: each side's direction hit and |pct error| per horizon. With
    `champion_id`, only evenings that champion published (after a rollback the restored model's
    evenings are not the comparison the shadow started)."""
    s = snapshots.c
    cols = [
        s.id,
        s.run_date,
        s.model_id,
        s.model_version,
        s.model_status,
        s.in_sample,
        s.next_day_actual,
        s.run_date_close,
        s.next_day_direction_correct,
        *(s[h.col("pct_error")] for h in HORIZONS),
    ]
    with engine.connect() as conn:
        rows = pd.DataFrame(
            conn.execute(select(*cols).where(s.ticker == ticker).order_by(s.id)).mappings().all(),
            columns=[c.name for c in cols],
        )
    out_cols = ["run_date", "champion_version", "shadow_version", "went_up"] + [
        f"{side}_{m}"
        for side in ("champion", "shadow")
        for m in ("correct", *(f"{h.alias}_err" for h in HORIZONS))
    ]
    if rows.empty:
        return pd.DataFrame(columns=out_cols)
    published = rows[~rows["model_status"].isin(UNPUBLISHED)].drop_duplicates("run_date", keep="first")
    published = published[published["model_status"] == "active"]
    if champion_id is not None:
        published = published[published["model_id"] == champion_id]
    shadow = rows[rows["model_id"] == shadow_id]
    both = published.merge(shadow, on="run_date", suffixes=("_c", "_s"))
    both = both[
        both["next_day_actual_c"].notna()
        & both["next_day_actual_s"].notna()
        & ~both["in_sample_c"].astype(bool)
        & ~both["in_sample_s"].astype(bool)
    ]
    out = pd.DataFrame(
        {
            "run_date": pd.to_datetime(both["run_date"]).dt.date,
            "champion_version": both["model_version_c"],
            "shadow_version": both["model_version_s"],
            "went_up": both["next_day_actual_c"] > both["run_date_close_c"],
        }
    )
    for side, suf in (("champion", "_c"), ("shadow", "_s")):
        out[f"{side}_correct"] = both[f"next_day_direction_correct{suf}"].astype(bool)
        for h in HORIZONS:
            out[f"{side}_{h.alias}_err"] = both[f"{h.col('pct_error')}{suf}"].astype(float).abs()
    return out.sort_values("run_date").reset_index(drop=True)[out_cols]


# What a "promote" decision claims, said with it: the shadow was not shown worse on its evenings.
PROMOTE_MEANS = " (not shown worse, which is not shown better: {design})"


@dataclass
class ShadowComparison:
    ticker: str
    shadow_model_id: int
    champion_model_id: int | None
    champion_version: str | None
    required: int
    n: int = 0
    champion_accuracy: float | None = None
    shadow_accuracy: float | None = None
    champion_only: int = 0  # evenings the champion was right and the shadow wrong
    shadow_only: int = 0
    direction_p: float = 1.0  # exact McNemar, one-sided: the champion is better
    champion_mae: float | None = None  # next-day mean |pct error| on the same evenings
    shadow_mae: float | None = None
    error_p: float = 1.0  # Diebold-Mariano (scoring.hac), one-sided: the shadow's errors are larger
    horizons: dict = field(default_factory=dict)  # each other horizon: {n, champion_mae, shadow_mae}
    decision: str = "pending"  # pending | promote | retire | ended (| promote by hand | retire by hand)
    rule: str = RULE
    first_evening: dt.date | None = None
    last_evening: dt.date | None = None
    design: str = ""  # what the stored design detects, or that it predates revision 0027
    published_evenings: int = 0  # evenings published since the shadow started (its timeout counts these)
    max_evenings: int = 0
    ended: str = ""  # why the shadow ends without its evidence (champion gone, checkpoint, timeout)

    def summary(self) -> str:
        head = f"shadow model {self.shadow_model_id} of {self.ticker} vs champion {self.champion_version}"
        end = f"; ENDS: {self.ended}" if self.ended else ""
        if self.n == 0:
            return f"{head}: no paired filled evening yet (needs {self.required}){end}; decision: {self.decision}"
        return (
            f"{head} on the same {self.n} filled evenings ({self.first_evening}..{self.last_evening}; "
            f"needs {self.required}): direction {self.shadow_accuracy:.1%} vs {self.champion_accuracy:.1%}, "
            f"discordant {self.shadow_only} shadow-only / {self.champion_only} champion-only, McNemar "
            f"p = {format_p_value(self.direction_p)}; next-day |error| {self.shadow_mae:.3f}% vs "
            f"{self.champion_mae:.3f}%, DM p = {format_p_value(self.error_p)}{end}; decision: "
            f"{self.decision}"
            + (
                PROMOTE_MEANS.format(design=self.design or "its design is unknown")
                if self.decision == "promote"
                else ""
            )
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("first_evening", "last_evening"):
            d[k] = d[k].isoformat() if d[k] else None
        d["summary"] = self.summary()
        return d


def compare(pairs: pd.DataFrame, required: int, alpha: float = SIGNIFICANCE, **ids) -> ShadowComparison:
    """The paired comparison and its decision (pure: the pairs come from `paired_evenings`)."""
    cmp = ShadowComparison(required=required, **ids)
    cmp.n = len(pairs)
    if cmp.n == 0:
        return cmp
    champ = pairs["champion_correct"].to_numpy(bool)
    shad = pairs["shadow_correct"].to_numpy(bool)
    cmp.champion_accuracy, cmp.shadow_accuracy = float(champ.mean()), float(shad.mean())
    cmp.champion_only = int((champ & ~shad).sum())
    cmp.shadow_only = int((shad & ~champ).sum())
    # The gate's paired tests, with the champion as the side that must prove itself better.
    cmp.direction_p = mcnemar_p(cmp.champion_only, cmp.shadow_only)
    d = DIRECTION.alias
    ce, se = pairs[f"champion_{d}_err"].to_numpy(float), pairs[f"shadow_{d}_err"].to_numpy(float)
    cmp.champion_mae, cmp.shadow_mae = float(ce.mean()), float(se.mean())
    cmp.error_p = dm_error_test(DIRECTION.name, se, ce).p_worse
    for short, name in ((h.alias, h.name) for h in HORIZONS if h != DIRECTION):
        ok = pairs[f"champion_{short}_err"].notna() & pairs[f"shadow_{short}_err"].notna()
        cmp.horizons[name] = {
            "n": int(ok.sum()),
            "champion_mae": float(pairs.loc[ok, f"champion_{short}_err"].mean()) if ok.any() else None,
            "shadow_mae": float(pairs.loc[ok, f"shadow_{short}_err"].mean()) if ok.any() else None,
        }
    cmp.first_evening, cmp.last_evening = pairs["run_date"].min(), pairs["run_date"].max()
    if cmp.n >= required:
        worse = cmp.direction_p <= alpha or cmp.error_p <= alpha
        cmp.decision = "retire" if worse else "promote"
    return cmp
