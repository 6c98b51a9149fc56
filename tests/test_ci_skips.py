""".ci/check_skips.py: CI fails on any skipped test its allowlist does not name (issue 38 D12: 198 tests
skipped as "PostgreSQL unreachable" while CI stayed green)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = '<testcase classname="{cls}" name="{name}">{inner}</testcase>'


def report(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / f"junit{len(list(tmp_path.iterdir()))}.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return path


def check(*reports: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "check_skips.py"), str(ROOT / ".ci" / "expected_skips.tsv")]
        + [str(r) for r in reports],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_a_postgres_skip_in_a_test_without_postgres_in_its_name_fails(tmp_path):
    skipped = '<skipped message="PostgreSQL unreachable: server closed the connection unexpectedly"/>'
    r = check(
        report(tmp_path, CASE.format(cls="tests.test_gate", name="test_one", inner="")),
        report(tmp_path, CASE.format(cls="tests.dagster.test_definitions", name="test_jobs", inner=skipped)),
    )
    assert r.returncode == 1
    assert "tests/dagster/test_definitions.py::test_jobs: PostgreSQL unreachable" in r.stdout


def test_allowed_skips_pass_only_with_their_reason(tmp_path):
    bf16 = '<skipped message="this CPU has no bf16 kernels in oneDNN (AVX2 only)"/>'
    ok = report(tmp_path, CASE.format(cls="tests.learning.test_precision", name="test_fit[True]", inner=bf16))
    assert check(ok).returncode == 0
    other = '<skipped message="flaky today"/>'
    bad = report(
        tmp_path, CASE.format(cls="tests.learning.test_precision", name="test_fit[True]", inner=other)
    )
    assert check(bad).returncode == 1
    assert check(report(tmp_path)).returncode == 1  # a report with no test case is no evidence
