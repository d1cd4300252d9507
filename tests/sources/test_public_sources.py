"""Every source the project cites is one a reader can open: no preset, data file, test or chapter names a file
on a development machine (an absolute path under a home, work or temporary directory, a file URL, a
Windows drive and folder). Paths relative to the repository (``tests/data/...``) are fine.

The reliability audit at 3f3cb8a found the deepseek-r1 preset's source (shipped in the wheel and in
``kvmath models --json``) and three test files citing files under a private research directory.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

import kvmath as km

ROOT = Path(__file__).resolve().parents[2]
#: What is scanned: the presets and their data, every test and its data, the book's pages and chapters.
SCANNED = ["kvmath/data", "tests", "book", "notebooks"]
TEXT = {".csv", ".json", ".md", ".py", ".ipynb", ".txt", ".yaml", ".yml", ".bib", ".cfg", ".toml"}

# Written in pieces so that this file does not match itself.
_ROOTS = "|".join(["wo" + "rk", "ho" + "me", "ro" + "ot", "t" + "mp", "Us" + "ers"])
LOCAL = re.compile(
    rf"(?<![\w.])/(?:{_ROOTS})/[\w.~-]+"     # an absolute path on a machine: /<root>/<something>
    r"|fi" r"le://"                         # a file URL
    r"|(?<!\w)[A-Za-z]:\\{1,2}\w+\\"          # a Windows drive and a folder
)


def _files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT and "__pycache__" not in path.parts \
                    and ".ipynb_checkpoints" not in path.parts:
                yield path


def test_the_pattern_finds_local_paths_and_leaves_relative_ones():
    found = [m.group(0) for m in LOCAL.finditer(
        "see /" "work/research/x.txt, /" "home/ana/notes.md, fi" "le:///C:/x, C:\\" "Users\\ana\\x, "
        "and not tests/data/hf_configs/README.md, https://example.org/work/x, /proc/cpuinfo, 'p:\\n'")]
    assert len(found) == 4, found


def test_no_scanned_file_cites_a_local_path():
    hits = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in LOCAL.finditer(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert not hits, "local paths cited:\n" + "\n".join(hits)


@pytest.mark.parametrize("table", sorted(p.name for p in (ROOT / "kvmath" / "data").glob("*.csv")))
def test_every_preset_cell_is_free_of_local_paths(table):
    # the cells as the package ships them (kvmath models --json prints the source columns)
    with open(ROOT / "kvmath" / "data" / table, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for column, cell in row.items():
                assert not LOCAL.search(cell or ""), (table, row.get("name") or row.get("id"), column, cell)


def test_the_deepseek_r1_preset_cites_public_sources():
    with open(ROOT / "kvmath" / "data" / "models.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["name"] == "deepseek-r1")
    assert "https://" in row["source"] and not LOCAL.search(row["source"])
    assert km.Model.preset("deepseek-r1").source == row["source"]
