"""snapshots append-only in the database: triggers beside the application role's privileges

The application role already may not DELETE a snapshot or UPDATE a prediction column (`ldtm db grant`);
it may UPDATE the fill columns. From this revision triggers also refuse a DELETE (or TRUNCATE); a change
of any prediction or chain column; and a change of an answer already filled, unless the change is the
logged re-fill, whose `fill_revisions` row (old and new actual) is written first in the same
transaction. Fillback's first fill of an empty horizon is unchanged. On PostgreSQL the table's owner
(migrations) and superusers are not held (they could drop the trigger anyway); SQLite has no roles, so
its triggers hold every writer (whoever opens the file can still drop them: receipts are the witness
there). No row changes.

Revision ID: 0037
Revises: 0036
"""

from alembic import op

# ruff: noqa: S608 - the SQL below is built from this file's constant column names only

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

# The columns as of this revision: a prediction (and its chain) never changes; each horizon's answer.
PREDICTION = (
    "id", "ticker", "run_date", "run_date_close", "prev_close", "model_id", "model_version", "model_status",
    "mode", "next_day_pred", "next_monday_pred", "one_month_pred", "direction_pred", "in_sample",
    "neutral_band_pct", "next_day_date", "next_monday_date", "one_month_date", "run_id", "created_at",
    "prev_hash", "row_hash", "chain_version", "baseline_calls",
)  # fmt: skip
ANSWERS = {
    "next_day": ("next_day_pct_error", "next_day_filled_at", "next_day_direction_actual", "next_day_direction_correct"),
    "next_monday": ("next_monday_pct_error", "next_monday_filled_at"),
    "one_month": ("one_month_pct_error", "one_month_filled_at"),
}  # fmt: skip


def _row(prefix: str, columns) -> str:
    return "ROW(" + ", ".join(f"{prefix}.{c}" for c in columns) + ")"


def _horizon_checks() -> str:
    out = []
    for h, rest in ANSWERS.items():
        out.append(f"""
    IF OLD.{h}_actual IS NOT NULL AND NEW.{h}_actual IS DISTINCT FROM OLD.{h}_actual AND NOT EXISTS (
        SELECT 1 FROM fill_revisions r WHERE r.snapshot_id = OLD.id AND r.horizon = '{h}'
        AND r.old_actual = OLD.{h}_actual AND r.new_actual = NEW.{h}_actual) THEN
      RAISE EXCEPTION 'snapshots are append-only: the filled {h} actual of row % (% %) changes only through a logged re-fill (fill_revisions)',
        OLD.id, OLD.ticker, OLD.run_date USING ERRCODE = '42501';
    END IF;
    IF OLD.{h}_actual IS NOT NULL AND NEW.{h}_actual IS NOT DISTINCT FROM OLD.{h}_actual
       AND {_row("NEW", rest)} IS DISTINCT FROM {_row("OLD", rest)} THEN
      RAISE EXCEPTION 'snapshots are append-only: the filled {h} answer of row % (% %) changes only with its actual, through a logged re-fill',
        OLD.id, OLD.ticker, OLD.run_date USING ERRCODE = '42501';
    END IF;""")
    return "".join(out)


FUNCTION = f"""
CREATE OR REPLACE FUNCTION ldtm_snapshots_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- The table's owner (migrations) and superusers are not held: they could drop this trigger anyway.
  IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER')
     OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; ELSIF TG_OP = 'UPDATE' THEN RETURN NEW; ELSE RETURN NULL; END IF;
  END IF;
  IF TG_OP = 'TRUNCATE' THEN
    RAISE EXCEPTION 'snapshots are append-only: the table cannot be truncated' USING ERRCODE = '42501';
  END IF;
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'snapshots are append-only: row % (% %) cannot be deleted', OLD.id, OLD.ticker, OLD.run_date
      USING ERRCODE = '42501';
  END IF;
  IF {_row("NEW", PREDICTION)} IS DISTINCT FROM {_row("OLD", PREDICTION)} THEN
    RAISE EXCEPTION 'snapshots are append-only: the prediction of row % (% %) cannot be changed', OLD.id,
      OLD.ticker, OLD.run_date USING ERRCODE = '42501';
  END IF;{_horizon_checks()}
  RETURN NEW;
END $$;
"""


def _sqlite_triggers() -> dict[str, str]:
    """{name: CREATE TRIGGER} of the same rules on SQLite (RAISE takes a constant message there)."""
    changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in PREDICTION)
    out = {
        "ldtm_snapshots_no_delete": "BEFORE DELETE ON snapshots BEGIN SELECT RAISE(ABORT, "
        "'snapshots are append-only: a row cannot be deleted'); END",
        "ldtm_snapshots_no_rewrite": f"BEFORE UPDATE ON snapshots WHEN {changed} BEGIN SELECT RAISE(ABORT, "
        "'snapshots are append-only: a prediction cannot be changed'); END",
    }
    for h, rest in ANSWERS.items():
        logged = (
            f"EXISTS (SELECT 1 FROM fill_revisions r WHERE r.snapshot_id = OLD.id AND r.horizon = '{h}' "
            f"AND r.old_actual = OLD.{h}_actual AND r.new_actual = NEW.{h}_actual)"
        )
        out[f"ldtm_snapshots_refill_{h}"] = (
            f"BEFORE UPDATE ON snapshots WHEN OLD.{h}_actual IS NOT NULL AND NEW.{h}_actual IS NOT "
            f"OLD.{h}_actual AND NOT {logged} BEGIN SELECT RAISE(ABORT, 'snapshots are append-only: the "
            f"filled {h} actual changes only through a logged re-fill (fill_revisions)'); END"
        )
        others = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in rest)
        out[f"ldtm_snapshots_answer_{h}"] = (
            f"BEFORE UPDATE ON snapshots WHEN OLD.{h}_actual IS NOT NULL AND NEW.{h}_actual IS "
            f"OLD.{h}_actual AND ({others}) BEGIN SELECT RAISE(ABORT, 'snapshots are append-only: the "
            f"filled {h} answer changes only with its actual, through a logged re-fill'); END"
        )
    return out


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name, body in _sqlite_triggers().items():
            op.execute(f"CREATE TRIGGER {name} {body}")
        return
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    op.execute(
        "CREATE TRIGGER ldtm_snapshots_append_only BEFORE UPDATE OR DELETE ON snapshots "
        "FOR EACH ROW EXECUTE FUNCTION ldtm_snapshots_append_only()"
    )
    op.execute(
        "CREATE TRIGGER ldtm_snapshots_no_truncate BEFORE TRUNCATE ON snapshots "
        "FOR EACH STATEMENT EXECUTE FUNCTION ldtm_snapshots_append_only()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in _sqlite_triggers():
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        return
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS ldtm_snapshots_no_truncate ON snapshots")
    op.execute("DROP TRIGGER IF EXISTS ldtm_snapshots_append_only ON snapshots")
    op.execute("DROP FUNCTION IF EXISTS ldtm_snapshots_append_only()")
