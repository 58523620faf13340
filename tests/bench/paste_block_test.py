"""bench/gpu/paste-block.py: a measured block replaces exactly what lies between its markers,
twice gives the same file, and a file without the markers is refused."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "gpu", "paste-block.py")
spec = importlib.util.spec_from_file_location("paste_block", SCRIPT)
paste_block = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paste_block)


class PasteBlock(unittest.TestCase):
    def test_replaces_between_markers_only(self):
        text = "a\n<!-- x:begin (note) -->\nold\n<!-- x:end -->\nb\n<!-- y:begin -->\nkeep\n<!-- y:end -->\n"
        out = paste_block.paste(text, "x", "new 1\nnew 2\n")
        self.assertEqual(out, "a\n<!-- x:begin (note) -->\nnew 1\nnew 2\n<!-- x:end -->\nb\n"
                         "<!-- y:begin -->\nkeep\n<!-- y:end -->\n")
        self.assertEqual(paste_block.paste(out, "x", "new 1\nnew 2\n"), out)

    def test_refuses_missing_markers(self):
        with self.assertRaises(SystemExit):
            paste_block.paste("nothing here\n", "x", "block")

    def test_the_gpu_page_has_the_force_race_block(self):
        with open(os.path.join(ROOT, "docs", "gpu.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertIn("<!-- force-race:begin", readme)
        self.assertIn("<!-- force-race:end -->", readme)

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            md, block = os.path.join(d, "r.md"), os.path.join(d, "b.md")
            with open(md, "w") as f:
                f.write("<!-- z:begin -->\n<!-- z:end -->\n")
            with open(block, "w") as f:
                f.write("measured\n")
            subprocess.run([sys.executable, SCRIPT, md, "z", block], check=True)
            with open(md) as f:
                self.assertEqual(f.read(), "<!-- z:begin -->\nmeasured\n<!-- z:end -->\n")


if __name__ == "__main__":
    unittest.main()
