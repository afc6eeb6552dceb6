#!/usr/bin/env python3
"""tests/tools/ctest_summary.py on made-up runs: the check holds only when every pass ran something and every
skip says why."""
import os
import sys
import tempfile
import unittest
from xml.sax.saxutils import escape, quoteattr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctest_summary  # noqa: E402


def junit_case(name, status="run", out="", skipped=False, failed=False):
    inner = ""
    if skipped:
        inner += '<skipped message="SKIP_RETURN_CODE=77" />'
    if failed:
        inner += '<failure message="Failed" />'
    inner += f"<system-out>{escape(out)}</system-out>"
    return f'<testcase name={quoteattr(name)} classname={quoteattr(name)} time="0.1" status="{status}">{inner}</testcase>'


def catch_report(name, successes, failures=0):
    """What Catch2 v2's XML reporter writes for a run of one test case."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Catch name="test_x"><Group name="test_x">'
            f'<TestCase name={quoteattr(name)} filename="x.cc" line="1">'
            f'<OverallResult success="{"true" if not failures else "false"}"/></TestCase>'
            f'<OverallResults successes="{successes}" failures="{failures}" expectedFailures="0"/>'
            f'<OverallResultsCases successes="1" failures="0" expectedFailures="0"/></Group>'
            f'<OverallResults successes="{successes}" failures="{failures}" expectedFailures="0"/></Catch>\n')


class Check(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.xml_dir = os.path.join(self.tmp.name, "catch-xml")
        os.makedirs(self.xml_dir)

    def tearDown(self):
        self.tmp.cleanup()

    def summarise(self, cases, reports):
        for i, (name, successes) in enumerate(reports.items()):
            with open(os.path.join(self.xml_dir, f"test_x.{i}.xml"), "w") as f:
                f.write(catch_report(name, successes))
        junit = os.path.join(self.tmp.name, "junit.xml")
        with open(junit, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="x">' + "".join(cases) + "</testsuite>\n")
        return ctest_summary.summarise(junit, self.xml_dir)

    def good_cases(self):
        return [junit_case("a [x] test; with, punctuation"),
                junit_case("gate_layering", out="KILN-CHECKED 164 library files\n"),
                junit_case("swarm_stack", out="...\nRan 7 tests in 0.5s\n\nOK\n"),
                junit_case("needs a GPU", status="notrun", skipped=True,
                           out="KILN-SKIP needs a GPU: KILN_GPU_TESTS is not 1\n")]

    def test_every_pass_ran_something(self):
        lines, bad = self.summarise(self.good_cases(), {"a [x] test; with, punctuation": 3})
        self.assertFalse(bad, lines)
        self.assertIn("check holds: 3 passed = 1 Catch2 test cases that executed assertions + 2 other entries "
                      "that ran checks; 1 skipped, each saying why", lines)
        self.assertEqual(lines[-1], "tests: 3 ran, 3 passed, 0 failed, 1 skipped")
        self.assertIn("  skipped: needs a GPU: KILN_GPU_TESTS is not 1", lines)

    def test_a_test_case_without_an_assertion_fails_the_check_by_name(self):
        lines, bad = self.summarise(self.good_cases(), {"a [x] test; with, punctuation": 0})
        self.assertTrue(bad)
        self.assertIn("  CHECK: a [x] test; with, punctuation: passed, but its Catch2 test case executed no "
                      "assertion", lines)

    def test_a_pass_without_a_report_or_a_count_fails_the_check(self):
        cases = self.good_cases() + [junit_case("quiet_script", out="all fine\n")]
        lines, bad = self.summarise(cases, {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)
        self.assertTrue(any(line.startswith("  CHECK: quiet_script: passed with no Catch2 report") for line in lines))

    def test_a_count_of_zero_is_no_test(self):
        cases = self.good_cases() + [junit_case("gate_empty", out="KILN-CHECKED 0 files\n")]
        _, bad = self.summarise(cases, {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)

    def test_a_skip_without_a_reason_fails_the_check(self):
        cases = self.good_cases() + [junit_case("skips quietly", status="notrun", skipped=True, out="")]
        lines, bad = self.summarise(cases, {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)
        self.assertTrue(any(line.startswith("  CHECK: skips quietly: skipped without a KILN-SKIP line") for line in lines))

    def test_a_cut_short_report_counts_nothing(self):
        with open(os.path.join(self.xml_dir, "cut.xml"), "w") as f:
            f.write('<?xml version="1.0"?><Catch name="t"><Group name="t"><TestCase name="cut"')
        cases = self.good_cases() + [junit_case("cut")]
        _, bad = self.summarise(cases, {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)

    def test_an_executable_not_built_is_a_failure_not_a_skip(self):
        case = ('<testcase name="t_NOT_BUILT" classname="t_NOT_BUILT" time="0" status="notrun">'
                '<skipped message="Unable to find executable"/><system-out>Unable to find executable</system-out>'
                '</testcase>')
        lines, bad = self.summarise(self.good_cases() + [case], {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)
        self.assertIn("  FAILED: t_NOT_BUILT", lines)

    def test_a_failure_fails_without_the_check(self):
        cases = self.good_cases() + [junit_case("broken", status="fail", failed=True)]
        lines, bad = self.summarise(cases, {"a [x] test; with, punctuation": 3})
        self.assertTrue(bad)
        self.assertIn("  FAILED: broken", lines)
        self.assertEqual(lines[-1], "tests: 4 ran, 3 passed, 1 failed, 1 skipped")


if __name__ == "__main__":
    unittest.main()
