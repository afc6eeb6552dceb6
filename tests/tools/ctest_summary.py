#!/usr/bin/env python3
"""Summarises a ctest run and checks that each pass it counts is a test that ran something.

Reads ctest's JUnit file (`ctest --output-junit FILE`) and, with --catch-xml, the Catch2 XML reports the
test processes wrote (tests/catch_main.cc, one file per ctest entry). Prints each skipped test with its
reason, each failed test, and a last line `tests: N ran, P passed, F failed, S skipped`.

The check (with --catch-xml): ctest's count of passes must equal the number of entries that executed
something, counted as
- a Catch2 entry: its test case in the Catch2 XML report, with at least one assertion executed (a test
  case that ran no assertion counts as not run: it fails the check, named);
- any other entry (the gates, the Python tests): its output's last `KILN-CHECKED <n> <what>` line, or
  Python unittest's `Ran <n> tests` followed by `OK`, with n >= 1: one entry, one test;
and every skipped entry must say why (a `KILN-SKIP <name>: <reason>` line, tests/common/kiln/testing/skip.h).
Exits 1 when a test failed, the check fails or a file cannot be read; 0 otherwise. `make test` calls it.
"""
import argparse
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

SKIP_MARK = "KILN-SKIP "
CHECKED = re.compile(r"^KILN-CHECKED (\d+)\b", re.M)
UNITTEST = re.compile(r"^Ran (\d+) tests? in [0-9.]+s\s+OK\b", re.M)


def output(case):
    return case.findtext("system-out") or ""


def skip_reason(case):
    """The reason a skipped entry gave, or None."""
    name = case.get("name", "")
    for line in output(case).splitlines():
        if line.startswith(SKIP_MARK):
            text = line[len(SKIP_MARK):]
            return text[len(name) + 2:] if text.startswith(name + ": ") else text
    return None


def classify(case):
    """'passed', 'failed' or 'skipped' for one <testcase> of ctest's JUnit file."""
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    status = case.get("status", "run")
    if status == "disabled":
        return "skipped"
    skipped = case.find("skipped")
    if skipped is not None or status == "notrun":
        # A test that asked to be skipped (SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION); any other "not run"
        # (an executable that was not built) is a failure, as ctest counts it.
        return "skipped" if skipped is not None and skipped.get("message", "").startswith("SKIP_") else "failed"
    return "failed" if status == "fail" else "passed"


def catch_reports(folder):
    """{test case name: assertions executed} from the Catch2 XML reports in folder. A report cut short
    (a process that skipped or died mid-run) is left out: such an entry did not pass."""
    reports = {}
    for path in sorted(pathlib.Path(folder).glob("*.xml")):
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        for group in root.iter("Group"):
            totals = group.find("OverallResults")
            if totals is None:
                continue
            # ctest runs one test case per process, so the run's totals are that test case's.
            count = sum(int(totals.get(k, "0")) for k in ("successes", "failures", "expectedFailures"))
            for case in group.findall("TestCase"):
                reports[case.get("name", "")] = count
    return reports


def other_checks(case):
    """The checks a non-Catch2 entry says it ran (its last KILN-CHECKED line, or unittest's), or 0."""
    text = output(case)
    found = CHECKED.findall(text) or UNITTEST.findall(text)
    return int(found[-1]) if found else 0


def cross_check(passed, skipped, reports):
    """Lines naming every pass that ran nothing and every skip without a reason; the count line last."""
    problems, catch_ran, other_ran = [], 0, 0
    for case in passed:
        name = case.get("name", "")
        if name in reports:
            if reports[name] > 0:
                catch_ran += 1
            else:
                problems.append(f"  CHECK: {name}: passed, but its Catch2 test case executed no assertion")
        elif other_checks(case) > 0:
            other_ran += 1
        else:
            problems.append(f"  CHECK: {name}: passed with no Catch2 report and no KILN-CHECKED or unittest "
                            "line: nothing shows that it ran")
    for case in skipped:
        if skip_reason(case) is None:
            problems.append(f"  CHECK: {case.get('name')}: skipped without a KILN-SKIP line saying why "
                            f"(ctest: {case.get('status', '?')})")
    failed = bool(problems)
    counts = f"{catch_ran} Catch2 test cases that executed assertions + {other_ran} other entries that ran checks"
    if failed:
        problems.append(f"check FAILS: {len(passed)} passed, but {counts}")
    else:
        problems.append(f"check holds: {len(passed)} passed = {counts}; {len(skipped)} skipped, each saying why")
    return problems, failed


def summarise(path, catch_xml):
    cases = list(ET.parse(path).getroot().iter("testcase"))
    groups = {"passed": [], "failed": [], "skipped": []}
    for case in cases:
        groups[classify(case)].append(case)
    lines = []
    for case in groups["skipped"]:
        lines.append(f"  skipped: {case.get('name')}: {skip_reason(case) or case.get('status', 'not run')}")
    for case in groups["failed"]:
        lines.append(f"  FAILED: {case.get('name')}")
    bad = False
    if catch_xml is not None:
        check_lines, bad = cross_check(groups["passed"], groups["skipped"], catch_reports(catch_xml))
        lines += check_lines
    ran = len(groups["passed"]) + len(groups["failed"])
    lines.append(f"tests: {ran} ran, {len(groups['passed'])} passed, {len(groups['failed'])} failed, "
                 f"{len(groups['skipped'])} skipped")
    return lines, bool(groups["failed"]) or bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="the file `ctest --output-junit` wrote")
    parser.add_argument("--catch-xml", metavar="DIR",
                        help="the folder of the run's Catch2 XML reports (<build>/catch-xml, emptied before "
                             "the run): check ctest's passes against them")
    args = parser.parse_args()
    if args.catch_xml is not None and not pathlib.Path(args.catch_xml).is_dir():
        print(f"ctest_summary: no folder {args.catch_xml}", file=sys.stderr)
        return 1
    try:
        lines, bad = summarise(args.junit, args.catch_xml)
    except (OSError, ET.ParseError) as e:
        print(f"ctest_summary: cannot read {args.junit}: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
