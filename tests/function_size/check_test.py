"""scripts/check-function-size finds a function over the bound, passes one at it, counts a
lambda toward the function around it, and is not fooled by braces in strings or comments."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check-function-size")


def body(lines):
    return "".join("  x += %d;\n" % i for i in range(lines))


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

    def test_the_repository_passes(self):
        p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)


if __name__ == "__main__":
    unittest.main()
