"""Smoke test: dagster-webserver serves the code location; GraphQL lists the asset keys and the
checkpoints partitions."""

import os
import socket
import subprocess
import sys
import time

import pytest
import requests
from ldtm_dagster_helpers import REPO, dagster_cli_env, stop_group

from ldtm_dagster.partitions import ticker_partitions

QUERY = """
{
  assetNodes { assetKey { path } }
  assetNodeOrError(assetKey: {path: ["checkpoints"]}) { ... on AssetNode { partitionKeys } }
}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(180)
def test_webserver_serves_assets_and_partitions_over_graphql(tmp_path):
    port = _free_port()
    env = dagster_cli_env(tmp_path)
    exe = os.path.join(os.path.dirname(sys.executable), "dagster-webserver")
    proc = subprocess.Popen(
        [exe, "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/graphql"
        deadline, data = time.monotonic() + 150, None
        while time.monotonic() < deadline:
            assert proc.poll() is None, "dagster-webserver exited"
            try:
                resp = requests.post(url, json={"query": QUERY}, timeout=10)
                data = resp.json().get("data") if resp.ok else None
                if data and data["assetNodes"]:  # the code location has loaded
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        assert data, "no GraphQL answer"
        keys = {"/".join(n["assetKey"]["path"]) for n in data["assetNodes"]}
        assert {
            "prices",
            "checkpoints",
            "backtests",
            "promotions",
            "snapshots",
            "fillbacks",
            "leaderboard",
            "onnx_exports",
        } <= keys
        assert data["assetNodeOrError"]["partitionKeys"] == ticker_partitions.get_partition_keys()
    finally:
        stop_group(proc, 20)
