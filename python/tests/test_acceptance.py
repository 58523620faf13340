"""The acceptance runner's verdicts (python/tests/onegpu/acceptance.py): a case is met only
when every expected finding names its lines and nothing else was found, and a cut-short run
still says what it saw and where it ran. (The runner itself captures on a GPU machine.)"""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "onegpu"))
import acceptance  # noqa: E402

E = "examples/pytorch/"


class JudgeTest(unittest.TestCase):
    expect = [("stream_race", [E + "a.py:3", E + "a.py:7"])]

    def test_a_finding_naming_every_expected_line_is_met(self):
        got = {"findings": [("stream_race", f"race|{E}a.py:3|{E}a.py:7")], "partial": False}
        self.assertEqual(acceptance.judge(self.expect, got), "met")

    def test_a_finding_at_other_lines_or_of_another_kind_misses(self):
        for found in [("stream_race", f"race|{E}a.py:3|{E}a.py:8"),
                      ("uninitialized_read", f"uninit|{E}a.py:3|{E}a.py:7")]:
            got = {"findings": [found], "partial": False}
            self.assertEqual(acceptance.judge(self.expect, got),
                             f"missed stream_race at {E}a.py:3, {E}a.py:7")

    def test_a_fix_with_any_finding_is_not_clean(self):
        got = {"findings": [("deadlock", "deadlock|x.py:1")], "partial": True}
        self.assertEqual(acceptance.judge([], got), "also found deadlock (deadlock|x.py:1)")
        self.assertEqual(acceptance.judge([], {"findings": [], "partial": False}), "met")

    def test_no_report_is_no_verdict(self):
        self.assertEqual(acceptance.judge(self.expect, None), "no verdict")

    def test_every_case_has_a_fix_or_is_a_clean_program(self):
        names = {c["name"] for c in acceptance.CASES}
        for c in acceptance.CASES:
            self.assertTrue(os.path.exists(os.path.join(acceptance.ROOT, c["program"])), c)
            if c["expect"]:
                self.assertIn(c["name"] + "-fix", names)


class ResultsTest(unittest.TestCase):
    def test_results_name_the_machine_and_count_the_cases(self):
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(d, "cases", "x")
            os.makedirs(folder)
            with open(os.path.join(folder, "rank-0.jsonl"), "w", encoding="utf-8") as f:
                f.write(json.dumps({"shardcheck_capture": 1, "device": "NVIDIA H100 80GB HBM3",
                                    "torch": "2.11.0+cu130"}) + "\n")
            where = {"started": "2026-12-07 12:18 UTC", "on": acceptance.made_on(folder)}
            rows = [{"name": "x", "capture_rc": 0, "wall_s": 1.0, "verdict": "met"},
                    {"name": "y", "capture_rc": "timeout", "wall_s": 9.0,
                     "verdict": "no verdict"}]
            acceptance.write_results(d, rows, where, final=False)
            with open(os.path.join(d, "acceptance.md"), encoding="utf-8") as f:
                md = f.read()
            self.assertIn("1 of 2 cases met their expectation; 1 of 2 had a verdict (started "
                          "2026-12-07 12:18 UTC on NVIDIA H100 80GB HBM3, torch 2.11.0+cu130)", md)
            self.assertIn("| y | timeout | 9.0 | no verdict |", md)
            self.assertIsNone(acceptance.made_on(os.path.join(d, "nowhere")))


BIN = os.environ.get("SHARDCHECK_BIN") or os.path.join(acceptance.ROOT, "build", "cli",
                                                       "shardcheck")


@unittest.skipUnless(os.access(BIN, os.X_OK), "no shardcheck binary (SHARDCHECK_BIN, make)")
class RecheckTest(unittest.TestCase):
    def test_an_earlier_runs_captures_are_judged_again_by_this_checker(self):
        pinned = os.path.join(acceptance.ROOT, "tests", "capture", "h100")
        with tempfile.TemporaryDirectory() as d:
            cases = os.path.join(d, "cases")
            os.makedirs(cases)
            # The H100 capture where gloo's worker made the stream wait before the clamp.
            for name in ("gloo-inplace", "gloo-inplace-fix"):
                os.symlink(os.path.join(pinned, name + "-2"), os.path.join(cases, name))
            out = os.path.join(d, "out")
            with contextlib.redirect_stdout(io.StringIO()):
                code = acceptance.main([out, "--recheck", cases, "--only", "^gloo", "--bin", BIN])
            self.assertEqual(code, 0)
            with open(os.path.join(out, "acceptance.md"), encoding="utf-8") as f:
                md = f.read()
            self.assertIn("2 of 2 cases met their expectation", md)
            self.assertIn("from the captures of %s, made on NVIDIA H100 80GB HBM3" % cases, md)
            self.assertTrue(os.path.isdir(cases))  # not packed away: the run's own


if __name__ == "__main__":
    unittest.main()
