"""Fail when a JUnit report holds a skipped test that the allowlist does not expect (issue 38 D12).

    python3 .ci/check_skips.py .ci/expected_skips.tsv REPORT.xml [REPORT.xml ...]

The allowlist's lines are `node-id glob <TAB> text the skip reason must contain <TAB> why`.
"""

from __future__ import annotations

import fnmatch
import sys
import xml.etree.ElementTree as ET


def allowlist(path: str) -> list[tuple[str, str]]:
    rules = []
    with open(path) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        if line.strip() and not line.startswith("#"):
            pattern, reason, _why = line.split("\t")
            rules.append((pattern, reason))
    return rules


def unexpected_skips(rules: list[tuple[str, str]], reports: list[str]) -> tuple[int, list[str]]:
    """(test cases read, ['node: reason' of every skip no rule allows])."""
    found, ran = [], 0
    for path in reports:
        for case in ET.parse(path).getroot().iter("testcase"):
            ran += 1
            skipped = case.find("skipped")
            if skipped is None:
                continue
            node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            text = (skipped.get("message") or "") + (skipped.text or "")
            if not any(fnmatch.fnmatch(node, p) and r in text for p, r in rules):
                found.append(f"{node}: {text.strip()[:200]}")
    return ran, found


def main(argv: list[str]) -> int:
    ran, found = unexpected_skips(allowlist(argv[0]), argv[1:])
    if found:
        print(
            "FAIL: tests were skipped that .ci/expected_skips.tsv does not expect:\n  " + "\n  ".join(found)
        )
        return 1
    if ran == 0:
        print("FAIL: the reports hold no test case")
        return 1
    print(f"{ran} test cases in the reports; no unexpected skip")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
