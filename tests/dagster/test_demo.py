"""`make demo` materialises into the persistent instance `make dev` serves, so the UI shows it all."""

from __future__ import annotations

import os
import re
import subprocess

from dagster import DagsterInstance
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from ldtm_dagster_helpers import REPO

from ldtm_dagster import defs, demo


def test_make_demo_and_make_dev_use_one_dagster_home(monkeypatch):
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "LDTM_UNIVERSE")}
    out = subprocess.run(["make", "-n", "demo", "dev"], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    homes = set(re.findall(r"DAGSTER_HOME=(\S+)", out.stdout))
    assert homes == {f"${{DAGSTER_HOME:-{REPO}/.dagster_home}}"}
    # Both targets serve the demo universe unless told otherwise (the product default is `full`).
    assert out.stdout.count("LDTM_UNIVERSE=${LDTM_UNIVERSE:-demo}") == 2
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert demo.dagster_home() == REPO / ".dagster_home"  # `python -m ldtm_dagster.demo` too


def test_the_demos_instance_holds_a_materialisation_of_every_asset(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "ldtm"))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    # One-epoch models of two coin-like tickers: the evidence gate rightly promotes neither, and this test
    # is about the instance holding every asset's metadata (a production board with its plot), so the seed
    # policy's absolute bar decides here. The demo's own promotion on evidence: SYNEDGE, docs/reading-the-figures.md.
    monkeypatch.setenv("LDTM_GATE_POLICY", "seed")
    args = ["--universe", "AAPL,NVDA", "--max-epochs", "1", "--replay-sessions", "3"]
    args += ["--end", "2024-06-28"]
    assert demo.main(args) == 0

    # What `make dev` opens afterwards: a new instance on the same directory.
    instance = DagsterInstance.from_config(str(home))
    try:
        graph = defs.resolve_asset_graph()
        for key in graph.get_all_asset_keys():
            records = instance.fetch_materializations(key, limit=1).records
            assert records, f"{key.to_user_string()}: no materialisation in the demo's instance"
            assert records[0].asset_materialization.metadata, key  # tables, verdicts, plots
        leaderboard = instance.fetch_materializations(
            next(k for k in graph.get_all_asset_keys() if k.to_user_string() == "leaderboard"), limit=1
        ).records[0]
        board = leaderboard.asset_materialization.metadata
        assert "plot" in board and "beats_always_up_p_le_0_05" in board
        assert {"skill_p_value", "q_vs_always_up"} <= {c.name for c in board["table"].schema.columns}
        assert "label_controls" in board and "after the search over" in board["universe_window"].value
        assert "on its whole published record" in board["universe"].value
        checks = list(graph.asset_check_keys)
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(checks)
        ran = {k for k, r in latest.items() if r.status == AssetCheckExecutionRecordStatus.SUCCEEDED}
        assert ran == set(checks), set(checks) - ran  # every check ran and passed
    finally:
        instance.dispose()


def test_every_demo_option_has_a_description(capsys):
    """`python -m ldtm_dagster.demo --help` listed options with no word on what they do (issue 20 item 18)."""
    import pytest

    with pytest.raises(SystemExit) as done:
        demo.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    options = text.split("options:", 1)[1]
    entries: list[list[str]] = []
    for line in options.splitlines():
        if re.match(r"^  -", line):
            entries.append([line])
        elif line.strip() and entries:
            entries[-1].append(line)
    names = [re.match(r"^\s+(-[-\w]+)", e[0]).group(1) for e in entries]
    assert {"--universe", "--profile", "--max-epochs", "--start", "--end", "--replay-sessions"} <= set(names)
    for entry in entries:
        # The first line is "  --opt METAVAR" then the description (same line or the next ones).
        head = re.sub(r"^\s+(-[-\w]+(?: [A-Z_]+)?)(, -[-\w]+(?: [A-Z_]+)?)*", "", entry[0])
        description = " ".join([head, *entry[1:]]).strip()
        assert len(description) > 10, f"{entry[0].strip()} has no description"
