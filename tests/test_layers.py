"""The layout's rules, read from the imports: the core never imports the shell or the dashboard, and
`data/` knows nothing of predictions or models (no import of `accountability/` or `learning/`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in sorted(_imports(path)):
            if name.startswith(forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


def test_the_core_never_imports_the_shell_or_the_dashboard():
    assert not _violations("ldtm_core", ("dagster", "ldtm_dagster", "ldtm_dashboard", "streamlit"))


def test_data_knows_nothing_of_predictions_or_models():
    forbidden = ("ldtm_core.accountability", "ldtm_core.learning", "ldtm_core.cli")
    assert not _violations("ldtm_core/data", forbidden)


def test_the_checker_sees_a_function_level_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ldtm_core.accountability.refill import refill\n")
    assert "ldtm_core.accountability.refill" in _imports(module)
