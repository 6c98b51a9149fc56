"""Ungated rows: the accuracy_30d views leave out rows predicted by a model that never passed the gate

A ticker with no active model is predicted by its newest candidate (`snapshots.model_status` =
'candidate'). Those rows are ungated: the default views (accuracy_30d, accuracy_30d_with_in_sample,
accuracy_30d_by_model, accuracy_30d_by_model_with_in_sample) now score only rows predicted by an active
model. The `_with_ungated` / `_with_in_sample_and_ungated` variants keep them, and every view gets
`ungated_n`: the ungated rows among a board row's next-day rows (0 in the default views). No table
changes; the views are dropped and recreated (0017's definitions come back on downgrade).

Revision ID: 0021
Revises: 0018
"""

import importlib.util
from pathlib import Path

from alembic import op

from ldtm_core.accuracy_views import HORIZONS_0021, VIEW_NAMES, create_view_sql

revision = "0021"
down_revision = "0018"
branch_labels = None
depends_on = None

VERSION = "0021"  # the views' shape this revision creates (ldtm_core.accuracy_views)


def _drop_views() -> None:
    for name in VIEW_NAMES:
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    _drop_views()  # 0017's four names are among these
    dialect = op.get_bind().dialect.name
    for name in VIEW_NAMES:
        op.execute(create_view_sql(name, dialect, VERSION, HORIZONS_0021))


def downgrade() -> None:
    _drop_views()
    path = Path(__file__).with_name("0017_board_windows_and_band.py")
    spec = importlib.util.spec_from_file_location("ldtm_migration_0017", path)
    v17 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v17)
    dialect = op.get_bind().dialect.name
    for name in v17.VIEWS:
        op.execute(v17.create_view_sql(name, dialect))
