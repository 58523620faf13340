"""How scripts/corpus-pytorch-distributed judges a test from the test's own verdict and
shardcheck's (no torch needed): a test that passes upstream must be clean, one that provokes a
mismatch on purpose must be flagged, and a test that did not pass upstream is not judged."""
import os
import unittest
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "corpus-pytorch-distributed")


def load_script():
    loader = SourceFileLoader("corpus_script", SCRIPT)
    module = module_from_spec(spec_from_loader("corpus_script", loader))
    loader.exec_module(module)
    return module


corpus = load_script()


def result(verdict, upstream="passed", kind="", expect="", explained="", transfers=2):
    r = corpus.Result("test_x", verdict, upstream, "", kind=kind, expect=expect,
                      explained=explained, transfers=transfers)
    r.judgement = corpus.judge(r)
    return r


class JudgeTest(unittest.TestCase):
    def test_a_passing_test_must_come_back_clean(self):
        self.assertEqual(result("clean").judgement, "ok")
        self.assertEqual(result("findings", kind="deadlock").judgement, "false-alarm")
        self.assertEqual(result("partial").judgement, "false-alarm")  # never clean
        self.assertEqual(result("refused").judgement, "false-alarm")
        self.assertEqual(result("not-checked").judgement, "false-alarm")

    def test_a_false_alarm_written_down_is_explained_not_failed(self):
        r = result("findings", kind="deadlock", explained="point-to-point modeling")
        self.assertEqual(r.judgement, "explained")

    def test_a_test_that_provokes_a_mismatch_must_be_flagged(self):
        why = "only rank 0 calls barrier()"
        self.assertEqual(result("findings", kind="deadlock", expect=why).judgement,
                         "flagged-as-expected")
        self.assertEqual(result("partial", kind="deadlock", expect=why).judgement,
                         "flagged-as-expected")
        self.assertEqual(result("clean", expect=why).judgement, "missed")
        self.assertEqual(result("partial", expect=why).judgement, "missed")  # no finding

    def test_a_test_that_does_not_pass_upstream_is_not_judged(self):
        self.assertEqual(result("findings", upstream="failed", kind="deadlock").judgement,
                         "upstream-failed")
        self.assertEqual(result("clean", upstream="timeout").judgement, "upstream-timeout")

    def test_totals_count_each_test_once(self):
        results = [result("clean"), result("clean", transfers=0),
                   result("findings", kind="deadlock"), result("partial"),
                   corpus.Result("test_y", "skipped", "skipped", "skipped")]
        t = corpus.totals(results)
        self.assertEqual((t["run"], t["passed_upstream"], t["clean"], t["findings"],
                          t["partial_or_refused"], t["skipped"]), (4, 4, 2, 1, 1, 1))
        self.assertEqual((t["ok"], t["false_alarm"], t["clean_without_transfers"]), (2, 2, 1))

    def test_every_expected_or_explained_test_is_named_once(self):
        self.assertFalse(set(corpus.EXPECT_FLAGGED) & set(corpus.EXPLAINED))
        for name in list(corpus.EXPECT_FLAGGED) + list(corpus.EXPLAINED):
            self.assertTrue(name.startswith("test_"), name)


if __name__ == "__main__":
    unittest.main()
