"""The layout's rules, read from the imports (module-level and function-level alike, parsed with `ast`).

The layers, lowest first: the base (`ldtm_core/*.py`: config, db, schema, errors, horizons, migrate, ...),
`data/` (prices in, features out), `scoring/` (pure scoring functions: the skill test, the baselines),
`learning/` (models and their registry), `accountability/` (predictions, scores, promotion), then `cli/`.
`accountability/` is rooms, not flat modules, lowest first: `alerts/` (the webhook), `ledger/` (snapshots,
the chain, audit, fillback, refill, run log), `shadow/`, `gate/`, `board/`, `decay/`, `signals/`, `submissions/` (models LDTM does not run); a room
imports only the rooms before it.
A layer imports only the layers below it: the base nothing of the packages, `data/` nothing of scores,
predictions or models, `scoring/` only the base and `data/`, `learning/` nothing of `accountability/`.
The core never imports the shell or the dashboard, and no module of the core takes part in an import
cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "ldtm_core"
PACKAGES = (
    "ldtm_core.data",
    "ldtm_core.scoring",
    "ldtm_core.learning",
    "ldtm_core.accountability",
    "ldtm_core.cli",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _core_modules() -> dict[str, Path]:
    """Every module of `ldtm_core` by dotted name (the Alembic migrations are scripts, not modules)."""
    return {
        _module_name(p): p
        for p in sorted(CORE.rglob("*.py"))
        if "migrations" not in p.relative_to(CORE).parts
    }


def _import_nodes(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every absolute import of a file, at any depth (inside functions too): (line, module, names), the
    names being those of `from module import ...` (empty for `import module`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return sorted(found)


def _imports(path: Path) -> set[str]:
    """The modules a file imports from, at any depth."""
    return {module for _, module, _ in _import_nodes(path)}


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _violations(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in paths:
        for line, module, names in _import_nodes(path):
            if _in(module, forbidden):
                what = f"from {module} import {', '.join(names)}" if names else f"import {module}"
                bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    return bad


def _refuse(bad: list[str]) -> None:
    assert not bad, "imports across the layers:\n" + "\n".join(bad)


def _package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _base_files() -> list[Path]:
    # __main__.py is `python -m ldtm_core`, the command's entry point, not a base module.
    return [p for p in sorted(CORE.glob("*.py")) if p.name != "__main__.py"]


def _import_graph() -> dict[str, set[str]]:
    """module -> the core modules it imports, at any depth: `from package import name` is an edge to the
    submodule `package.name` where one exists, else to `package` itself."""
    modules = _core_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, module, names in _import_nodes(path):
            for submodule in [f"{module}.{n}" for n in names] or [module]:
                if submodule in modules:
                    targets.add(submodule)
                elif module in modules:
                    targets.add(module)
        targets.discard(name)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), as a path
    `a -> b -> ... -> a` through the component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest cycle through the component's first module, by breadth-first search."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def test_the_core_never_imports_the_shell_or_the_dashboard():
    _refuse(
        _violations(_package_files("ldtm_core"), ("dagster", "ldtm_dagster", "ldtm_dashboard", "streamlit"))
    )


def test_the_base_imports_none_of_the_packages():
    _refuse(_violations(_base_files(), PACKAGES))


def test_data_knows_nothing_of_predictions_or_models():
    forbidden = ("ldtm_core.scoring", "ldtm_core.accountability", "ldtm_core.learning", "ldtm_core.cli")
    _refuse(_violations(_package_files("ldtm_core/data"), forbidden))


def test_scoring_imports_only_the_base_and_data():
    forbidden = ("ldtm_core.learning", "ldtm_core.accountability", "ldtm_core.cli")
    _refuse(_violations(_package_files("ldtm_core/scoring"), forbidden))


def test_learning_knows_nothing_of_accountability():
    forbidden = ("ldtm_core.accountability", "ldtm_core.cli")
    _refuse(_violations(_package_files("ldtm_core/learning"), forbidden))


def test_accountability_never_imports_the_command_line():
    _refuse(_violations(_package_files("ldtm_core/accountability"), ("ldtm_core.cli",)))


ROOMS = ("alerts", "ledger", "shadow", "gate", "board", "decay", "signals", "submissions")


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["ldtm_core", "accountability"] and len(parts) > 3 else None


def test_accountability_is_rooms_not_flat_modules():
    flat = [p.name for p in (CORE / "accountability").glob("*.py") if p.name != "__init__.py"]
    assert not flat, f"modules directly in accountability/ (put each in its room): {flat}"
    rooms = sorted(p.name for p in (CORE / "accountability").iterdir() if (p / "__init__.py").exists())
    assert rooms == sorted(ROOMS)


def test_a_room_imports_only_the_rooms_before_it():
    bad = []
    for module, targets in _import_graph().items():
        if (room := _room(module)) is None:
            continue
        allowed = ROOMS[: ROOMS.index(room) + 1]
        bad += [f"{module} -> {t}" for t in sorted(targets) if (_room(t) or room) not in allowed]
    assert not bad, "imports of a later room:\n" + "\n".join(bad)


def test_no_import_cycle_in_the_core():
    cycles = [" -> ".join(cycle) for cycle in _cycles(_import_graph())]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_a_function_level_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ldtm_core.accountability.ledger.refill import refill\n")
    assert "ldtm_core.accountability.ledger.refill" in _imports(module)


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert not _cycles({"a": {"b"}, "b": set()})


SHELL_TESTS = ("dagster", "dashboard", "reliability", "fixtures")  # the shell's, and cross-cutting ones


def test_the_tests_mirror_the_core():
    """A test directory is named after the core package it tests (`tests/accountability/gate/` tests
    `ldtm_core/accountability/gate/`); the shell's, the dashboard's and the reliability probes sit apart."""
    tests = ROOT / "tests"
    stray = [
        str(d.relative_to(tests))
        for d in sorted(tests.rglob("*"))
        if d.is_dir()
        and d.name != "__pycache__"
        and d.relative_to(tests).parts[0] not in SHELL_TESTS
        and not (CORE / d.relative_to(tests) / "__init__.py").exists()
    ]
    assert not stray, f"test directories with no core package of that name: {stray}"
    flat = [p.name for p in (tests / "accountability").glob("test_*.py")]
    assert not flat, f"accountability tests outside a room: {flat}"
