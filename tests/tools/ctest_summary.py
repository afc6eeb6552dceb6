#!/usr/bin/env python3
"""Summarises a ctest run from its JUnit file (`ctest --output-junit FILE`, CMake >= 3.21).

Prints how many tests ran, passed, failed and were skipped, then each skipped test with its reason (the
"KILN-SKIP <name>: <reason>" line tests/common/kiln/testing/skip.h prints, else ctest's own), each failed
test, and each passed test whose Catch2 report counts no assertion (it ran, but checked nothing: a skip
that returns instead of calling KILN_SKIP). Exits 1 when a test failed or the file cannot be read, 0
otherwise; `make test` calls it.
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET

SKIP_MARK = "KILN-SKIP "
# Catch2's closing line: "All tests passed (3 assertions in 1 test case)".
ASSERTIONS = re.compile(r"All tests passed \((\d+) assertions? in \d+ test cases?\)")


def skip_reason(case):
    out = case.findtext("system-out") or ""
    for line in out.splitlines():
        if line.startswith(SKIP_MARK):
            text = line[len(SKIP_MARK):]
            name = case.get("name", "")
            return text[len(name) + 2:] if text.startswith(name + ": ") else text
    skipped = case.find("skipped")
    if skipped is not None and skipped.get("message"):
        return skipped.get("message")
    return case.get("status", "not run")


def assertions(case):
    """The assertions Catch2 counted in a passed test, or None where its output does not say."""
    out = case.findtext("system-out") or ""
    if "assertions: - none -" in out:  # Catch2's totals for a test case that checked nothing
        return 0
    match = ASSERTIONS.search(out)
    return int(match.group(1)) if match else None


def classify(case):
    """'passed', 'failed' or 'skipped' for one <testcase> of ctest's JUnit file."""
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    status = case.get("status", "run")
    if case.find("skipped") is not None or status in ("notrun", "disabled"):
        return "skipped"
    return "failed" if status == "fail" else "passed"


def summarise(path):
    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    groups = {"passed": [], "failed": [], "skipped": []}
    for case in cases:
        groups[classify(case)].append(case)
    lines = []
    for case in groups["skipped"]:
        lines.append(f"  skipped: {case.get('name')}: {skip_reason(case)}")
    for case in groups["failed"]:
        lines.append(f"  FAILED: {case.get('name')}")
    # ctest keeps only the first KiB of a passed test's output, so a long one's count is unknown.
    unchecked = [c for c in groups["passed"] if assertions(c) == 0]
    for case in unchecked:
        lines.append(f"  passed with no assertion: {case.get('name')}")
    ran = len(groups["passed"]) + len(groups["failed"])
    lines.append(f"tests: {ran} ran, {len(groups['passed'])} passed, {len(groups['failed'])} failed, "
                 f"{len(groups['skipped'])} skipped (of {len(cases)}); "
                 f"{len(unchecked)} passed with no assertion")
    return lines, len(groups["failed"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="the file `ctest --output-junit` wrote")
    args = parser.parse_args()
    try:
        lines, failed = summarise(args.junit)
    except (OSError, ET.ParseError) as e:
        print(f"ctest_summary: cannot read {args.junit}: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
