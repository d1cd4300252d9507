"""Benchmark: each of the book's diagrams (kvbook.diagrams) drawn as its chapter draws it, goal under 1 s.

Run: python benchmarks/bench_diagrams.py [rounds]   (default 5; about half a minute)

For each diagram, the median over rounds of building it (the kvmath
questions and the matplotlib artists) and of building it and rendering the
PNG a notebook shows (what a chapter's cell costs), on the calls that
tests/book/test_diagrams.py checks against the chapters. CPU time of this
process, so other processes on a shared machine disturb it little.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.book.test_diagrams import CHAPTER  # the chapters' calls, written once

ROUNDS = int(next((a for a in sys.argv[1:] if a.isdigit()), 5))
GOAL_S = 1.0


def main() -> None:
    CHAPTER["roofline"][2]()  # warm up: imports, fonts
    print(f"{'diagram':<22} {'build':>9} {'build + PNG':>12}   (median of {ROUNDS}, CPU s; goal < {GOAL_S:g} s)")
    for name, (_, _, make) in CHAPTER.items():
        build, both = [], []
        for _ in range(ROUNDS):
            start = time.process_time()
            d = make()
            build.append(time.process_time() - start)
            d.png()
            both.append(time.process_time() - start)
        b, p = statistics.median(build), statistics.median(both)
        print(f"{name:<22} {b:8.3f}s {p:11.3f}s   {'met' if p < GOAL_S else 'NOT met'}")


if __name__ == "__main__":
    main()
