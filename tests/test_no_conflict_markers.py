"""No tracked text file keeps a merge's conflict markers.

Several engineers land on main by merging; a conflict resolved by hand can leave a
``<<<<<<<`` block behind in a doc, where no parser or test would notice it.
"""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def _tracked_text_files():
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in out.decode().split("\0"):
        path = ROOT / name
        text_suffix = path.suffix in {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ""}
        if name and text_suffix and path.is_file():
            yield path


def test_no_conflict_markers_in_tracked_files():
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if line.startswith(MARKERS) or line == "=======":
                found.append(f"{path.relative_to(ROOT)}:{number}: {line[:40]}")
    assert not found, "merge conflict markers left in:\n" + "\n".join(found)
