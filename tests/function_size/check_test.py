"""scripts/check-function-size finds a function over the bound, passes one at it, counts a
lambda toward the function around it, and is not fooled by braces in strings or comments; in
Python too (a nested def counts toward its function); and its allow-list only shrinks: a listed
function within the bound, one grown past its length, and a new one over the bound all fail."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check-function-size")


def body(lines):
    return "".join("  x += %d;\n" % i for i in range(lines))


def py_body(lines, indent="    "):
    return "".join("%sx += %d\n" % (indent, i) for i in range(lines))


class FunctionSizeTest(unittest.TestCase):
    def check(self, source):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "core"))
            with open(os.path.join(d, "core", "a.cpp"), "w") as f:
                f.write(source)
            p = subprocess.run([sys.executable, SCRIPT, "--list", d], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout

    def test_a_function_over_the_bound_is_listed_with_its_length(self):
        out = self.check("int f(int x) {\n" + body(70) + "  return x;\n}\n")
        self.assertIn("73  core/a.cpp:f (line 1)", out)

    def test_a_function_at_the_bound_is_not(self):
        self.assertEqual(self.check("int f(int x) {\n" + body(68) + "}\n"), "")

    def test_a_lambda_counts_toward_its_function_and_strings_hide_braces(self):
        src = ("namespace n {\nvoid Outer::g() const {\n  auto h = [&](int y) {\n" + body(40) +
               "  };\n  const char* s = \"}}}{\"; // }\n" + body(40) + "}\n}  // namespace n\n")
        out = self.check(src)
        self.assertIn("core/a.cpp:Outer::g (line 2)", out)
        self.assertNotIn(":h", out)

    def run_tree(self, files, allowed=None, listing=False):
        """The script's exit code and output on a tree of `files` ({path: text}) with
        scripts/function-size-allowed holding `allowed` lines."""
        with tempfile.TemporaryDirectory() as d:
            if allowed is not None:
                files = dict(files, **{"scripts/function-size-allowed": "# a comment\n" + allowed})
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
                with open(os.path.join(d, path), "w") as f:
                    f.write(text)
            args = [sys.executable, SCRIPT] + (["--list"] if listing else []) + [d]
            p = subprocess.run(args, capture_output=True, text=True)
            return p.returncode, p.stdout

    def test_a_python_function_over_the_bound_is_listed_and_a_nested_def_counts_toward_it(self):
        src = ("import os\n\n\nclass Hooks:\n    def dispatch(self, x):\n        def inner(y):\n" +
               py_body(40, " " * 12) + "            return y\n" + py_body(30, " " * 8) + "        return x\n\n\n"
               "def short():\n" + py_body(68) + "    return 1\n")
        code, out = self.run_tree({"python/pkg/a.py": src}, listing=True)
        self.assertEqual(code, 0)
        self.assertIn("74  python/pkg/a.py:Hooks.dispatch (line 5)", out)
        self.assertNotIn("inner", out)
        self.assertNotIn("short", out)  # 70 lines: at the bound

    def test_a_new_function_over_the_bound_fails(self):
        code, out = self.run_tree({"python/a.py": "def f(x):\n" + py_body(70) + "    return x\n"}, allowed="")
        self.assertEqual(code, 1)
        self.assertIn("python/a.py:1: f is 72 lines, over the bound of 70: split it", out)

    def test_a_listed_function_may_stay_but_not_grow(self):
        tree = {"python/a.py": "def f(x):\n" + py_body(70) + "    return x\n", "core/b.cpp": "int g() {\n" +
                body(75) + "}\n"}
        self.assertEqual(self.run_tree(tree, allowed="72  python/a.py:f\n77  core/b.cpp:g\n")[0], 0)
        code, out = self.run_tree(tree, allowed="71  python/a.py:f\n77  core/b.cpp:g\n")
        self.assertEqual(code, 1)
        self.assertIn("f grew to 72 lines (allowed 71", out)

    def test_a_listed_function_within_the_bound_or_gone_must_leave_the_list(self):
        tree = {"python/a.py": "def f(x):\n" + py_body(60) + "    return x\n"}
        code, out = self.run_tree(tree, allowed="72  python/a.py:f\n80  core/gone.cpp:h\n")
        self.assertEqual(code, 1)
        self.assertIn("python/a.py:f: within the bound now (or gone): remove it from", out)
        self.assertIn("core/gone.cpp:h: within the bound now (or gone)", out)

    def test_the_repository_passes(self):
        p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)


if __name__ == "__main__":
    unittest.main()
