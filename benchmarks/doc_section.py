"""Replace a generated, marked section of a Markdown doc (or append it).

A section is `title` (a heading line), then a block between `begin` and `end` markers.
The benchmarks that write tables into docs/ share this so that re-running one replaces its
own section and leaves the rest of the file alone.
"""

from __future__ import annotations

from pathlib import Path


def replace_section(doc: Path, title: str, begin: str, end: str, section: str) -> None:
    """Put `section` (which starts with `title` and ends with `end`) in place of the old
    one: from its heading before `begin` (or `begin` itself) through `end`."""
    text = doc.read_text()
    if begin in text and end in text:
        start = text.rfind(title, 0, text.index(begin))
        start = start if start >= 0 else text.index(begin)
        text = text[:start] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text)
