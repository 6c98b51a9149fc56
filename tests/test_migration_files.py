"""The migration files say true things about themselves and stand alone (issue 39 item 5).

- Each docstring's "Revision ID:" / "Revises:" lines agree with the module's `revision` /
  `down_revision` (Alembic reads only the variables; the docstring is what a reader trusts).
- The revisions form one linear chain from one base to one head.
- No migration loads another migration module (importlib, runpy, an import of
  ldtm_core.migrations...): a migration is frozen as written, so what it needs from an earlier
  revision (a view's old definition) is copied into it.

The files are read as source (ast), never imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

VERSIONS = Path(__file__).resolve().parents[1] / "ldtm_core" / "migrations" / "versions"
FILES = sorted(VERSIONS.glob("*.py"))

# Modules through which a file can load another file as code.
LOADERS = {"importlib", "runpy", "imp", "pkgutil", "zipimport"}


@dataclass(frozen=True)
class Migration:
    path: Path
    tree: ast.Module
    revision: str | None
    down_revision: str | None
    doc_revision: str | None  # "Revision ID: X" -> "X"; None when the line is missing
    doc_revises: str | None  # "Revises: X" -> "X", "Revises:" -> ""; None when the line is missing


def _assigned(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no module-level `{name} = ...`")


def _doc_line(doc: str, label: str) -> str | None:
    found = re.findall(rf"^{re.escape(label)}:[ \t]*(\S*)[ \t]*$", doc, flags=re.MULTILINE)
    assert len(found) <= 1, f"{label!r} appears {len(found)} times in the docstring"
    return found[0] if found else None


def _load(path: Path) -> Migration:
    tree = ast.parse(path.read_text(), filename=str(path))
    doc = ast.get_docstring(tree, clean=False) or ""
    return Migration(
        path=path,
        tree=tree,
        revision=_assigned(tree, "revision"),
        down_revision=_assigned(tree, "down_revision"),
        doc_revision=_doc_line(doc, "Revision ID"),
        doc_revises=_doc_line(doc, "Revises"),
    )


MIGRATIONS = [_load(p) for p in FILES]
IDS = [p.name for p in FILES]


def test_there_are_migrations_to_check():
    assert len(MIGRATIONS) >= 20


@pytest.mark.parametrize("m", MIGRATIONS, ids=IDS)
def test_the_docstring_names_the_module_s_own_revisions(m: Migration):
    assert m.doc_revision is not None, f"{m.path.name}: no 'Revision ID:' line in the docstring"
    assert m.doc_revises is not None, f"{m.path.name}: no 'Revises:' line in the docstring"
    assert m.doc_revision == m.revision, (
        f"{m.path.name}: docstring 'Revision ID: {m.doc_revision}', module revision = {m.revision!r}"
    )
    assert m.doc_revises == (m.down_revision or ""), (
        f"{m.path.name}: docstring 'Revises: {m.doc_revises}', module down_revision = {m.down_revision!r}"
    )


@pytest.mark.parametrize("m", MIGRATIONS, ids=IDS)
def test_the_file_name_starts_with_the_revision(m: Migration):
    assert m.path.name.startswith(f"{m.revision}_"), m.path.name


def test_the_revisions_form_one_linear_chain_from_base_to_head():
    by_revision = {m.revision: m for m in MIGRATIONS}
    assert len(by_revision) == len(MIGRATIONS), "a revision identifier is used twice"
    assert all(isinstance(m.down_revision, str | None) for m in MIGRATIONS), "a merge or tuple down_revision"
    bases = [m.revision for m in MIGRATIONS if m.down_revision is None]
    assert len(bases) == 1, f"bases: {bases}"
    children: dict[str, list[str]] = {}
    for m in MIGRATIONS:
        if m.down_revision is not None:
            assert m.down_revision in by_revision, f"{m.path.name}: down_revision {m.down_revision} unknown"
            children.setdefault(m.down_revision, []).append(m.revision)
    branches = {rev: kids for rev, kids in children.items() if len(kids) > 1}
    assert branches == {}, f"revisions with more than one child: {branches}"
    chain = [bases[0]]
    while chain[-1] in children:
        chain.append(children[chain[-1]][0])
    assert sorted(chain) == sorted(by_revision), f"not reached from the base: {set(by_revision) - set(chain)}"
    heads = [rev for rev in by_revision if rev not in children]
    assert heads == [chain[-1]]
    for previous, current in zip(chain, chain[1:], strict=False):
        assert by_revision[current].down_revision == previous


def test_alembic_sees_the_same_single_head():
    from alembic.script import ScriptDirectory

    from ldtm_core.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    named = {m.down_revision for m in MIGRATIONS}
    assert script.get_heads() == [m.revision for m in MIGRATIONS if m.revision not in named]
    assert {rev.revision for rev in script.walk_revisions()} == {m.revision for m in MIGRATIONS}


def _loads_another_module(m: Migration) -> list[str]:
    """Where `m` could load another migration (or any file) as code: `line: what`."""
    others = {p.stem for p in FILES if p != m.path}
    found = []
    for node in ast.walk(m.tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LOADERS or "migrations" in alias.name:
                    found.append(f"{line}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] in LOADERS or "migrations" in module:
                found.append(f"{line}: from {'.' * node.level}{module} import ...")
        elif isinstance(node, ast.Name) and node.id in {"__import__", "exec", "eval", "compile"}:
            found.append(f"{line}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in {
            "spec_from_file_location",
            "module_from_spec",
            "exec_module",
            "import_module",
            "run_path",
        }:
            found.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = sorted(stem for stem in others if stem in node.value)
            if named:
                found.append(f"{line}: names {', '.join(named)}")
    return found


@pytest.mark.parametrize("m", MIGRATIONS, ids=IDS)
def test_no_migration_loads_another_migration_module(m: Migration):
    found = _loads_another_module(m)
    assert not found, f"{m.path.name} loads another module: " + "; ".join(found)
