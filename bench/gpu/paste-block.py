#!/usr/bin/env python3
"""Replaces what lies between `<!-- NAME:begin ... -->` and `<!-- NAME:end -->` in a Markdown
file with the contents of another file (a block a measurement script wrote on a GPU machine).

    bench/gpu/paste-block.py docs/gpu.md force-race OUT.md
"""
import re
import sys


def paste(text: str, name: str, block: str) -> str:
    pattern = re.compile(r"(<!-- %s:begin[^>]*-->\n).*?(<!-- %s:end -->)" % (re.escape(name), re.escape(name)), re.S)
    if not pattern.search(text):
        raise SystemExit(f"paste-block: no '{name}' markers")
    return pattern.sub(lambda m: m.group(1) + block.rstrip("\n") + "\n" + m.group(2), text, count=1)


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    path, name, block_path = sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(block_path, encoding="utf-8") as f:
        block = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(paste(text, name, block))


if __name__ == "__main__":
    main()
