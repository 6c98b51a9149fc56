"""The backup/restore scripts' reading of a pg_dumpall file (deploy/scripts/dump_databases.awk): the
names restore.sh drops and backup.sh requires, whatever characters they hold (issue 38 D1, D10)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DUMP = """--
-- PostgreSQL database cluster dump
--
CREATE ROLE postgres;
CREATE DATABASE "dagster prod" WITH TEMPLATE = template0 ENCODING = 'UTF8' LOCALE_PROVIDER = libc;
CREATE DATABASE ldtm WITH TEMPLATE = template0 ENCODING = 'UTF8';
CREATE DATABASE "team reports" WITH TEMPLATE = template0 ENCODING = 'UTF8';
CREATE DATABASE "we""ird" WITH TEMPLATE = template0;
CREATE DATABASE ldtm_old WITH TEMPLATE = template0;
\\connect ldtm_old
-- CREATE DATABASE in a comment is not one
"""


def names(text: str) -> list[str]:
    out = subprocess.run(
        ["awk", "-f", str(ROOT / "deploy" / "scripts" / "dump_databases.awk")],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


def test_quoted_names_are_read_whole():
    # The sed before: "team reports" became `team` (an unrelated database dropped), "dagster prod" `dagster`.
    assert names(DUMP) == ["dagster prod", "ldtm", "team reports", 'we"ird', "ldtm_old"]


def test_a_dump_with_ldtm_old_but_no_ldtm_has_no_app_database():
    # backup.sh matched `\\connect.*ldtm`: a dump holding only ldtm_old passed as a backup of the app.
    only_old = DUMP.replace("CREATE DATABASE ldtm WITH TEMPLATE = template0 ENCODING = 'UTF8';\n", "")
    assert "ldtm" not in names(only_old) and "ldtm_old" in names(only_old)


def test_the_scripts_use_it():
    restore = (ROOT / "deploy" / "scripts" / "restore.sh").read_text()
    backup = (ROOT / "deploy" / "scripts" / "backup.sh").read_text()
    assert "dump_databases.awk" in restore and "dump_databases.awk" in backup
    assert "sed -n 's/^CREATE DATABASE" not in restore and "connect.*ldtm" not in backup
