"""snapshots' append-only trigger reads only what it names: pinned search_path, qualified names

Revision 0037's trigger function named `fill_revisions`, `pg_roles` and `pg_class` without a schema and set
no `search_path`, so a role that may create temporary tables could shadow them for its own session: a
temporary `fill_revisions` holding a made-up log row let it change a filled answer, and a temporary
`pg_roles` made the trigger take it for a superuser and skip every rule. From this revision the function
runs with `search_path = pg_catalog, pg_temp` and names every table with its schema (the app's for
`fill_revisions`, `pg_catalog` for the catalogs), so no session can change what it reads. Its rules are
unchanged; no row changes. SQLite's triggers were not affected (the body of a trigger reads only tables
of the trigger's own database). The downgrade puts 0037's function back.

Revision ID: 0038
Revises: 0037
"""

from alembic import op

# ruff: noqa: S608 - the SQL below is built from this file's constant column names only

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None

# Copied from 0037 (a migration stands alone): its columns and rules, with the names made qualifiable.
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


def _horizon_checks(app: str) -> str:
    out = []
    for h, rest in ANSWERS.items():
        out.append(f"""
    IF OLD.{h}_actual IS NOT NULL AND NEW.{h}_actual IS DISTINCT FROM OLD.{h}_actual AND NOT EXISTS (
        SELECT 1 FROM {app}fill_revisions r WHERE r.snapshot_id = OLD.id AND r.horizon = '{h}'
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


def function(app: str = "", catalog: str = "", pinned: bool = False) -> str:
    """The trigger function: 0037's as written (the defaults), or with every table named with its schema
    (`app`, `catalog`: "schema." prefixes) and its search_path pinned."""
    path = "\nSET search_path = pg_catalog, pg_temp" if pinned else ""
    return f"""
CREATE OR REPLACE FUNCTION ldtm_snapshots_append_only() RETURNS trigger LANGUAGE plpgsql{path} AS $$
BEGIN
  -- The table's owner (migrations) and superusers are not held: they could drop this trigger anyway.
  IF {catalog}pg_has_role(current_user, (SELECT relowner FROM {catalog}pg_class WHERE oid = TG_RELID), 'MEMBER')
     OR (SELECT rolsuper FROM {catalog}pg_roles WHERE rolname = current_user) THEN
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
  END IF;{_horizon_checks(app)}
  RETURN NEW;
END $$;
"""


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    schema = bind.dialect.identifier_preparer.quote_identifier(
        bind.exec_driver_sql("SELECT current_schema()").scalar_one()
    )
    op.execute(function(app=f"{schema}.", catalog="pg_catalog.", pinned=True))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(function())
