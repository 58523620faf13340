"""The README is a front page (at most 250 lines, the architecture linked on its first screen),
and every relative link of README.md and docs/ leads to a file and heading that exist."""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def headings(path):
    out = set()
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    for line in text.splitlines():
        if line.startswith("#"):
            t = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", t).replace(" ", "-"))
    return out


def pages():
    yield "README.md"
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            yield os.path.join("docs", name)


class LinksTest(unittest.TestCase):
    def test_the_readme_is_a_front_page(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.assertLessEqual(len(lines), 250, "README.md is a front page: move detail into docs/")
        self.assertIn("docs/architecture.md", "\n".join(lines[:50]))

    def test_every_relative_link_resolves(self):
        broken = []
        for page in pages():
            with open(os.path.join(ROOT, page), encoding="utf-8") as f:
                text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
            for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text):
                if target.startswith(("http://", "https://", "mailto:")):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path \
                    else os.path.join(ROOT, page)
                if not os.path.exists(full):
                    broken.append("%s: %s (no such file)" % (page, target))
                elif anchor and full.endswith(".md") and anchor not in headings(full):
                    broken.append("%s: %s (no such heading)" % (page, target))
        self.assertEqual(broken, [])


if __name__ == "__main__":
    unittest.main()
