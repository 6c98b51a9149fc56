"""Least-privilege PostgreSQL roles: the one home of the privilege policy.

Three roles share the app database. The owner runs `ldtm db upgrade` and owns every table; the
application role (Dagster's runs, the `ldtm` commands) reads and writes rows but runs no DDL; the reader
role (the dashboard) only reads. `grant()`, run by the owner after every `ldtm db upgrade` (`ldtm db
grant`), brings the two roles' privileges on schema `public` to exactly this policy, whatever they held
before: it is idempotent.

- Every table, view and sequence: SELECT for both roles (the views are owner-rights: they read for them).
- An ordinary table: INSERT, UPDATE, DELETE for the application role as well.
- An append-only table (APPEND_ONLY): INSERT, never DELETE; UPDATE of only the columns the code writes
  after the insert (a snapshot's answers, a run's outcome), so a published prediction, its hash chain and
  every audit row stay as written. A changed record needs the owner. On `snapshots` a trigger (revision
  0037) also refuses a filled answer changed outside its logged re-fill, for every role but the owner.
- READ_ONLY_FOR_APP (the migration stamp): SELECT only.
- Sequences: USAGE, SELECT for the application role (ids of the rows it inserts).
- Views: never written through (an auto-updatable view would write with its owner's rights).
- Schema `public`: USAGE for both roles, CREATE for nobody but its owner.
- Default privileges of the owner: a table a later migration creates is read and written by the
  application role and read by the reader at once. An append-only one gets its rule when `grant()` runs
  again (after every upgrade).

SQLite has no roles: `grant()` says so. Role names are checked against ROLE_NAME and always quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection

from ldtm_core.errors import ConfigError, InputError
from ldtm_core.horizons import DIRECTION, HORIZONS

SCHEMA = "public"

# The columns fillback (accountability.ledger.fillback._fill, _fill_rebased) and refill (refill._rewrite) set on
# a published snapshot: each horizon's answer, its error and fill time, the direction's outcome and the
# row's last fill time. No column of the prediction or of its hash (chain.canonical) is among them.
SNAPSHOT_FILL_COLUMNS: tuple[str, ...] = (
    *(h.col(c) for h in HORIZONS for c in ("actual", "pct_error", "filled_at")),
    DIRECTION.col("direction_actual"),
    DIRECTION.col("direction_correct"),
    "filled_at",
)

# The columns runlog.finish and the chain anchor (chain._anchor) set on a run's row after runlog.start
# inserted it. The run's id, kind and start stay as inserted.
RUN_OUTCOME_COLUMNS: tuple[str, ...] = (
    "finished_at",
    "status",
    "message",
    "n_rows",
    "phases_json",
    "summary_json",
    "tickers",
    "run_date",
    "chain_heads_json",
)


@dataclass(frozen=True)
class AppendOnly:
    """A table the application role reads and inserts into but never deletes from. It may UPDATE only
    `updatable`: the columns the code fills in after the insert (empty: none)."""

    why: str
    updatable: tuple[str, ...] = ()


# Each entry: the code's only writes to the table are INSERTs (ON CONFLICT DO NOTHING at most), plus
# UPDATEs of `updatable` alone; no code path deletes from it. tests/test_db_roles.py runs the pipeline's
# writes as the application role under this policy.
APPEND_ONLY: dict[str, AppendOnly] = {
    "snapshots": AppendOnly(
        "the published evening predictions and their hash chain: written once (chain._write), then only "
        "their answers are filled in (fillback, refill)",
        SNAPSHOT_FILL_COLUMNS,
    ),
    "run_log": AppendOnly(
        "every run and the chain heads each predict anchored: a run's row is closed (runlog.finish, "
        "chain._anchor), never removed",
        RUN_OUTCOME_COLUMNS,
    ),
    "fill_revisions": AppendOnly("every re-fill of an answer with the value it replaced (refill._rewrite)"),
    "registry_events": AppendOnly("every status change of a model: the registry's history (registry)"),
    "gate_decisions": AppendOnly("each promotion-gate judgement of a backtest (gate, shadow)"),
    "gate_trials": AppendOnly(
        "the trials ledger the adjusted alpha counts: a dropped trial would inflate significance (gate_ledger)"
    ),
    "backtest_folds": AppendOnly("the backtest evidence the gate judges (learning.backtest)"),
    "backtest_fold_baselines": AppendOnly("each fold's baselines beside the model (learning.backtest)"),
    "shadow_designs": AppendOnly("a shadow's design, fixed when it starts (shadow)"),
    "corporate_actions": AppendOnly(
        "recorded splits and dividends, kept as first recorded; fills and re-fills rebase on them "
        "(data.corporate_actions.record_actions: ON CONFLICT DO NOTHING)"
    ),
}

# Tables the application role only reads.
READ_ONLY_FOR_APP: dict[str, str] = {
    "alembic_version": "the migration stamp: only the owner's `ldtm db upgrade` moves it",
}

# A role name this command accepts: an unquoted PostgreSQL identifier as the server folds it (lower case),
# at most 63 bytes. It is still always quoted in the SQL.
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
RESERVED = ("public", "none", "current_user", "session_user", "current_role")

# Relation kinds in pg_class: tables (plain, partitioned), views, materialized views, foreign tables.
TABLE_KINDS = ("r", "p")
READ_KINDS = ("v", "m", "f")


def check_role_name(name: str, option: str = "role") -> str:
    """`name` if it can name a role here; an InputError otherwise."""
    if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
        raise InputError(
            f"{option}: {name!r} is not a role name this command accepts: 1-63 lower-case letters, digits "
            "or underscores, not starting with a digit; nothing was granted"
        )
    if name in RESERVED or name.startswith("pg_"):
        raise InputError(f"{option}: {name!r} is reserved by PostgreSQL; nothing was granted")
    return name


def require_postgres(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        raise ConfigError(
            f"database roles do not exist on {engine.dialect.name}: least-privilege roles are a PostgreSQL "
            "feature (whoever can open a SQLite file can change it); nothing was granted"
        )


def require_head(url: str) -> str:
    """The database's revision when it is the newest; a ConfigError saying to upgrade first otherwise."""
    from ldtm_core.config import masked_url
    from ldtm_core.migrate import current_revision, head_revision

    now, head = current_revision(url), head_revision()
    if now != head:
        raise ConfigError(
            f"database {masked_url(url)} is at revision {now or '(none: no tables yet)'}, not the newest "
            f"({head}): run `ldtm db upgrade` (as the owner role) first, then `ldtm db grant`; nothing was granted"
        )
    return now


@dataclass(frozen=True)
class Granted:
    """What `grant()` left the two roles holding."""

    app_role: str
    reader_role: str
    owner: str
    tables: tuple[str, ...]  # the application role's ordinary tables: full row access
    append_only: tuple[str, ...]
    read_only: tuple[str, ...]
    views: tuple[str, ...]
    sequences: tuple[str, ...]

    def lines(self) -> list[str]:
        """One line per role, for `ldtm db grant`."""
        updates = "; ".join(
            f"UPDATE of {len(APPEND_ONLY[t].updatable)} columns of {t}"
            for t in self.append_only
            if APPEND_ONLY[t].updatable
        )
        every = len(self.tables) + len(self.append_only) + len(self.read_only)
        return [
            f"app role {self.app_role}: SELECT, INSERT, UPDATE, DELETE on {len(self.tables)} tables "
            f"({', '.join(self.tables)}); SELECT, INSERT on {len(self.append_only)} append-only tables "
            f"({', '.join(self.append_only)}), never DELETE, {updates or 'no UPDATE'}; SELECT on "
            f"{', '.join(self.read_only) or 'no read-only table'} and {len(self.views)} views; USAGE, SELECT "
            f"on {len(self.sequences)} sequences; no CREATE, no DDL",
            f"reader role {self.reader_role}: SELECT on {every} tables and {len(self.views)} views; nothing else",
        ]


def grant(engine: Engine, app_role: str, reader_role: str) -> Granted:
    """Bring `app_role` and `reader_role` to the policy on schema public; run as the owner of its tables
    (the role that runs `ldtm db upgrade`), after every upgrade. Idempotent; one transaction."""
    app = check_role_name(app_role, "--app")
    reader = check_role_name(reader_role, "--reader")
    if app == reader:
        raise InputError(f"--app and --reader are both {app!r}: the reader must be a role of its own")
    require_postgres(engine)
    with engine.begin() as conn:
        # The migration lock (ldtm_core.migrate.upgrade): never beside an upgrade, nor a second grant.
        conn.execute(text("SELECT pg_advisory_xact_lock(7400123)"))
        owner = conn.execute(text("SELECT current_user")).scalar_one()
        kinds = _relations(conn, owner)  # first: the runner must own the tables the roles are checked against
        _check_roles(conn, owner, {"--app": app, "--reader": reader})
        tables = sorted(n for n, k in kinds.items() if k in TABLE_KINDS)
        views = sorted(n for n, k in kinds.items() if k in READ_KINDS)
        sequences = sorted(n for n, k in kinds.items() if k == "S")
        _check_policy(conn, set(tables))
        q = conn.dialect.identifier_preparer.quote_identifier
        a, r, s = q(app), q(reader), q(SCHEMA)
        full = [t for t in tables if t not in APPEND_ONLY and t not in READ_ONLY_FOR_APP]
        statements = [
            f"REVOKE CREATE ON SCHEMA {s} FROM PUBLIC",
            f"GRANT USAGE ON SCHEMA {s} TO {a}, {r}",
            # From a clean slate, so the result is the policy whatever was granted before.
            f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {a}, {r}",
            f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {a}, {r}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {a}, {r}",
            *(f"GRANT INSERT, UPDATE, DELETE ON {s}.{q(t)} TO {a}" for t in full),
            *(f"GRANT INSERT ON {s}.{q(t)} TO {a}" for t in APPEND_ONLY),
            *(
                f"GRANT UPDATE ({', '.join(q(c) for c in rule.updatable)}) ON {s}.{q(t)} TO {a}"
                for t, rule in APPEND_ONLY.items()
                if rule.updatable
            ),
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {a}",
            # Objects the owner (current_user) creates later: the same, without re-running this.
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {a}",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {r}",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT USAGE, SELECT ON SEQUENCES TO {a}",
        ]
        for statement in statements:
            conn.exec_driver_sql(statement)
        _check_no_create(conn, (app, reader))
    return Granted(
        app_role=app,
        reader_role=reader,
        owner=owner,
        tables=tuple(full),
        append_only=tuple(sorted(APPEND_ONLY)),
        read_only=tuple(t for t in sorted(READ_ONLY_FOR_APP) if t in tables),
        views=tuple(views),
        sequences=tuple(sequences),
    )


def _check_roles(conn: Connection, owner: str, roles: dict[str, str]) -> None:
    """Each role exists, is not the owner, not a superuser and does not inherit the owner's rights."""
    for option, role in roles.items():
        row = conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).one_or_none()
        if row is None:
            raise ConfigError(
                f"{option}: role {role!r} does not exist: create it first (CREATE ROLE {role} LOGIN PASSWORD "
                "'...'), as a superuser or a role with CREATEROLE; nothing was granted"
            )
        if role == owner:
            raise ConfigError(
                f"{option}: {role!r} is the role running this command, the owner of the tables: the "
                "application and reader roles must be others; nothing was granted"
            )
        if row.rolsuper:
            raise ConfigError(
                f"{option}: {role!r} is a superuser: no privilege binds it; nothing was granted"
            )
        member = conn.execute(
            text("SELECT pg_has_role(:r, :o, 'MEMBER')"), {"r": role, "o": owner}
        ).scalar_one()
        if member:
            raise ConfigError(
                f"{option}: {role!r} is a member of the owner role {owner!r}, so it holds the owner's "
                "rights (DDL included): use a role outside it; nothing was granted"
            )


def _relations(conn: Connection, owner: str) -> dict[str, str]:
    """{name: relkind} of the tables, views and sequences in schema public, all owned by `owner`."""
    rows = conn.execute(
        text(
            "SELECT c.relname, c.relkind, pg_get_userbyid(c.relowner) AS relowner FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')"
        ),
        {"s": SCHEMA},
    ).all()
    others = sorted({(r.relowner, r.relname) for r in rows if r.relowner != owner})
    if others:
        who = sorted({o for o, _ in others})
        raise ConfigError(
            f"run `ldtm db grant` as the role that owns the tables (the one that runs `ldtm db upgrade`): "
            f"{len(others)} relations of schema {SCHEMA} belong to {', '.join(who)}, not to {owner} "
            f"(e.g. {others[0][1]}); nothing was granted"
        )
    return {r.relname: r.relkind for r in rows}


def _check_policy(conn: Connection, tables: set[str]) -> None:
    """Every table and column the policy names is in the database (else it is not at this code's head)."""
    missing = sorted(set(APPEND_ONLY) - tables)
    if missing:
        raise ConfigError(
            f"the privilege policy names tables the database lacks ({', '.join(missing)}): run `ldtm db "
            "upgrade` first; nothing was granted"
        )
    for table, rule in APPEND_ONLY.items():
        if not rule.updatable:
            continue
        have = set(
            conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = :s AND table_name = :t"
                ),
                {"s": SCHEMA, "t": table},
            ).scalars()
        )
        lacking = sorted(set(rule.updatable) - have)
        if lacking:
            raise ConfigError(
                f"the privilege policy names columns {table} lacks ({', '.join(lacking)}): run `ldtm db "
                "upgrade` first; nothing was granted"
            )


def _check_no_create(conn: Connection, roles: tuple[str, ...]) -> None:
    """After the REVOKE: neither role may create in schema public (before PostgreSQL 15 the schema
    belongs to the bootstrap superuser, and only it can take CREATE from PUBLIC)."""
    for role in roles:
        if conn.execute(
            text("SELECT has_schema_privilege(:r, :s, 'CREATE')"), {"r": role, "s": SCHEMA}
        ).scalar_one():
            raise ConfigError(
                f"role {role!r} can still CREATE in schema {SCHEMA} (the schema is not this owner's: "
                f"PostgreSQL before 15, or a grant to the role): as a superuser run `REVOKE CREATE ON SCHEMA "
                f"{SCHEMA} FROM PUBLIC` (and from {role}), then `ldtm db grant` again; nothing was granted"
            )
