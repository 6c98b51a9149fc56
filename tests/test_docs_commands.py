"""Every `ldtm …`, `dagster …` and `make …` command in README.md and docs/*.md exists as written.

Commands are taken from fenced code blocks and from inline code spans. For each one the test checks
that the command path resolves in the real CLI (`ldtm`: the Typer app; `dagster`: Dagster's own click
CLI), that every option it passes is an option of that command, and for Dagster that the named job,
the selected assets and partition keys exist and that `--config-json` validates against the config
schema of the job it would launch. Upper-case words (`TICKER`, `FILES_OR_DIRS`) and `…` are
placeholders and pass as positional arguments. A `--config-json` outside a command is refused: the
reader could not tell which job's schema it belongs to.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = ("ldtm", "dagster", "make")
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[,/][A-Z0-9_]+)*|\.\.\.|…|<[^>]*>|\[.*\])$")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {' '.join(self.argv)}"


def _fenced_lines(text: str):
    """(line number, line) of every line inside a fenced block, backslash continuations joined."""
    inside, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def _inline_spans(text: str):
    inside_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            inside_fence = not inside_fence
            continue
        if not inside_fence:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def _segments(line: str) -> list[list[str]]:
    """Shell words of each simple command on a line (comments dropped; split at && ; | and $( )."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return []
    segments, current = [], []
    for word in words:
        if word in ("&&", "||", ";", "|") or word.endswith(";"):
            if word.endswith(";") and word != ";":
                current.append(word[:-1])
            segments.append(current)
            current = []
        else:
            current.append(word)
    segments.append(current)
    out = []
    for seg in segments:
        while seg and (
            ENV_ASSIGNMENT.match(seg[0]) or seg[0] in ("time", "sudo", "exec", "do", "then", "else")
        ):
            seg = seg[1:]
        if seg:
            seg = [seg[0].rsplit("/", 1)[-1] if seg[0].endswith(("/ldtm", "/dagster")) else seg[0], *seg[1:]]
            out.append(seg)
    return out


def doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOC_FILES:
        text = path.read_text()
        sources = [*_fenced_lines(text), *_inline_spans(text)]
        for number, line in sources:
            for seg in _segments(line):
                if seg[0] in PROGRAMS and len(seg) > 1:
                    found.append(DocCommand(f"{path.relative_to(ROOT)}:{number}", tuple(seg)))
    return found


def bare_config_json() -> list[str]:
    """Inline `--config-json …` spans that name no command."""
    bad = []
    for path in DOC_FILES:
        for number, span in _inline_spans(path.read_text()):
            if span.lstrip().startswith("--config-json"):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {span}")
    return bad


def _options_of(command) -> dict[str, object]:
    opts = {"--help": None}
    for param in command.params:
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if name.startswith("-"):
                opts[name] = param
    return opts


def resolve(group, argv: list[str]) -> tuple[object, list[str], dict[str, list[str]]]:
    """Walk `argv` through the click tree: the command reached, its path, and the options given
    (name → values). Raises AssertionError naming what does not exist."""
    command, path, i = group, [], 0
    # Duck-typed: Typer vendors its own click, so its groups are not `click.Group` instances.
    while hasattr(command, "commands") and i < len(argv):
        word = argv[i]
        if word.startswith("-"):
            break
        if PLACEHOLDER.match(word):  # `ldtm COMMAND --help`: any command
            return command, path, {}
        sub = command.commands.get(word)
        assert sub is not None, f"no command {' '.join([*path, word])!r}"
        command, path, i = sub, [*path, word], i + 1
    known = _options_of(command)
    passes_through = bool(getattr(command, "context_settings", {}).get("ignore_unknown_options"))
    given: dict[str, list[str]] = {}
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--") or re.match(r"^-\d", word):
            continue
        name, _, inline = word.partition("=")
        if passes_through and name not in known:  # `ldtm dashboard --server.port 8600`: Streamlit's flags
            continue
        assert name in known, f"{' '.join(path) or 'command'} has no option {name}"
        param = known[name]
        is_option = getattr(param, "param_type_name", "") == "option"
        takes_value = is_option and not param.is_flag and not getattr(param, "count", False)
        if inline:
            given.setdefault(name, []).append(inline)
        elif takes_value and i < len(argv):
            given.setdefault(name, []).append(argv[i])
            i += 1
        else:
            given.setdefault(name, [])
    return command, path, given


@pytest.fixture(scope="module")
def ldtm_cli():
    import typer

    from ldtm_core.cli import app

    return typer.main.get_command(app)


@pytest.fixture(scope="module")
def dagster_cli():
    from dagster._cli import create_dagster_cli

    return create_dagster_cli()


@pytest.fixture(scope="module")
def defs():
    from ldtm_dagster.definitions import defs

    return defs


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


COMMANDS = doc_commands()


def test_the_docs_name_commands_at_all():
    programs = {c.argv[0] for c in COMMANDS}
    assert programs == set(PROGRAMS), programs
    assert len(COMMANDS) > 100


def test_no_config_json_outside_a_command():
    assert not bare_config_json(), "say which job each config belongs to:\n" + "\n".join(bare_config_json())


def test_every_make_target_exists():
    targets = make_targets()
    missing = [
        str(c)
        for c in COMMANDS
        if c.argv[0] == "make" and not c.argv[1].startswith("-") and c.argv[1] not in targets
    ]
    # `make test PYTEST_ARGS=…` style variables are fine; only the target must exist.
    assert not missing, "\n".join(missing)


def test_every_ldtm_command_and_option_exists(ldtm_cli):
    failures = []
    for cmd in (c for c in COMMANDS if c.argv[0] == "ldtm"):
        try:
            resolve(ldtm_cli, list(cmd.argv[1:]))
        except AssertionError as exc:
            failures.append(f"{cmd}\n    -> {exc}")
    assert not failures, "\n".join(failures)


def _asset_keys(defs) -> set[str]:
    return {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}


def _job_for(defs, path: list[str], given: dict[str, list[str]]):
    from dagster import AssetKey

    if given.get("-j") or given.get("--job"):
        return defs.resolve_job_def((given.get("-j") or given["--job"])[0])
    selection = (given.get("--select") or [None])[0]
    if selection:
        return defs.resolve_implicit_job_def_def_for_assets([AssetKey(k) for k in selection.split(",")])
    return None


def _check_dagster(defs, path: list[str], given: dict[str, list[str]]) -> None:
    from dagster import validate_run_config

    jobs = {job.name for job in defs.resolve_all_job_defs()}
    assets = _asset_keys(defs)
    for name in given.get("-j", []) + given.get("--job", []):
        assert name in jobs, f"no job {name!r} (jobs: {sorted(jobs)})"
    for selection in given.get("--select", []):
        for key in selection.split(","):
            assert PLACEHOLDER.match(key) or key in assets, f"no asset {key!r}"
    for tags in given.get("--tags", []):
        json.loads(tags)
    job = _job_for(defs, path, given)
    for spec in given.get("--partition-range", []):
        first, _, last = spec.partition("...")
        assert first and last, f"--partition-range {spec!r} is not FIRST...LAST"
        if job is not None and job.partitions_def is not None:
            keys = set(job.partitions_def.get_partition_keys())
            for key in (first, last):
                assert PLACEHOLDER.match(key) or key in keys, f"{key!r} is not a partition of {job.name}"
    for config in given.get("--config-json", []):
        assert job is not None, "--config-json without a job or an asset selection"
        result = validate_run_config(job, json.loads(config))
        assert result is not None


def test_every_dagster_command_option_job_asset_and_config_exists(dagster_cli, defs):
    failures = []
    for cmd in (c for c in COMMANDS if c.argv[0] == "dagster"):
        try:
            _, path, given = resolve(dagster_cli, list(cmd.argv[1:]))
            _check_dagster(defs, path, given)
        except Exception as exc:  # an invalid config raises DagsterInvalidConfigError
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failures.append(f"{cmd}\n    -> {type(exc).__name__}: {first}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["ldtm", "leaderbord"], "no command"),
        (["ldtm", "gate", "--tickr", "AAPL"], "no option"),
    ],
)
def test_the_checker_refuses_what_does_not_exist(ldtm_cli, argv, problem):
    with pytest.raises(AssertionError, match=problem):
        resolve(ldtm_cli, argv[1:])


def test_the_checker_refuses_a_config_the_job_rejects(dagster_cli, defs):
    # The defect issue 29 found: `prices` is not in nightly_job, so this config must not validate.
    _, path, given = resolve(
        dagster_cli,
        [
            "job",
            "launch",
            "-m",
            "ldtm_dagster",
            "-j",
            "nightly_job",
            "--config-json",
            '{"ops": {"prices": {"config": {"source": "files:/data/drop"}}}}',
        ],
    )
    with pytest.raises(Exception, match="prices"):
        _check_dagster(defs, path, given)
