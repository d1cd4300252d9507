"""Benchmark: ``kvmath size`` over 10^4 (rate, target) pairs in one call vs a Python loop over the same pairs.

Run: python benchmarks/bench_size.py [--times bound|estimate] (default: both, one after the other)

The function behind ``kvmath size`` (:func:`kvmath.sizing.size`): Llama 3 8B
on up to 8 H100s (20 layouts of tensor, pipeline and data parallelism),
requests of 2,000 tokens in and 200 out, 10^4 pairs of an arrival rate
(1 to 80 requests/s) and a TTFT p90 target (0.05 to 2 s) at a 20 ms TPOT
target, seeded. It prints the median wall and CPU time of the one vectorised
call (5 runs), the total and median per pair of a loop that calls the same
function once per pair, their ratio (goal: at least 20), and checks that both
give the same chips and layouts. Both share the layouts' engines, built once
per question and cached (the first call builds them, before timing). With
``--times estimate`` the service times are kvmath.estimate's, and every call
also sizes at the ends of their 80% interval (three sizings a call, in both
the vectorised call and the loop).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from kvmath.load import TIMES
from kvmath.sizing import size

N = 10_000
rng = np.random.default_rng(0)
RATES = rng.uniform(1.0, 80.0, N)
TTFT = rng.uniform(0.05, 2.0, N)
ARGS = ("llama-3-8b", "h100-sxm", 8)


def vectorised(times):
    return size(*ARGS, TTFT, 0.02, 2000, 200, arrival_rate=RATES, times=times)


def main(times: str) -> None:
    vectorised(times)  # builds and caches the layouts' engines
    wall, cpu = [], []
    for _ in range(5):
        w, c = time.perf_counter(), time.process_time()
        result = vectorised(times)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    per_pair, chips, layouts, ends = [], [], [], []
    start = time.perf_counter()
    for rate, ttft in zip(RATES, TTFT):
        t = time.perf_counter()
        one = size(*ARGS, float(ttft), 0.02, 2000, 200, arrival_rate=float(rate), times=times)
        per_pair.append(time.perf_counter() - t)
        chips.append(one.n_chips)
        layouts.append(one.layout)
        ends.append(None if one.at_low is None else (one.at_low.n_chips, one.at_high.n_chips))
    loop = time.perf_counter() - start
    assert chips == result.n_chips.tolist() and layouts == result.layout, "the loop and the call disagree"
    if result.at_low is not None:
        assert ends == list(zip(result.at_low.n_chips.tolist(), result.at_high.n_chips.tolist())), \
            "the loop and the call disagree at the interval's ends"
    call = statistics.median(wall)
    print(f"times                          {times}")
    print(f"pairs                          {N:,}")
    print(f"one call, median of 5          {call * 1e3:.1f} ms wall, {statistics.median(cpu) * 1e3:.1f} ms CPU")
    print(f"loop over the pairs            {loop:.1f} s in all, median {statistics.median(per_pair) * 1e3:.2f} ms a pair")
    print(f"ratio (loop / call)            {loop / call:.0f}x (goal: at least 20x)")
    print(f"feasible pairs                 {int(np.sum(result.feasible)):,}; chips used: "
          f"{sorted(set(result.n_chips[result.feasible].tolist()))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", choices=TIMES, help="the service times (default: each in turn)")
    chosen = parser.parse_args().times
    for kind in [chosen] if chosen else TIMES:
        main(kind)
