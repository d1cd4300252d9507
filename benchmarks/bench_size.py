"""Benchmark: ``kvmath size`` over 10^4 (rate, target) pairs in one call vs a Python loop over the same pairs.

Run: python benchmarks/bench_size.py

The function behind ``kvmath size`` (:func:`kvmath.sizing.size`): Llama 3 8B
on up to 8 H100s (20 layouts of tensor, pipeline and data parallelism),
requests of 2,000 tokens in and 200 out, 10^4 pairs of an arrival rate
(1 to 80 requests/s) and a TTFT p90 target (0.05 to 2 s) at a 20 ms TPOT
target, seeded. It prints the median wall and CPU time of the one vectorised
call (5 runs), the total and median per pair of a loop that calls the same
function once per pair, their ratio (goal: at least 20), and checks that both
give the same chips and layouts. Both share the layouts' engines, built once
per question and cached (the first call builds them, before timing).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from kvmath.sizing import size

N = 10_000
rng = np.random.default_rng(0)
RATES = rng.uniform(1.0, 80.0, N)
TTFT = rng.uniform(0.05, 2.0, N)
ARGS = ("llama-3-8b", "h100-sxm", 8)


def vectorised():
    return size(*ARGS, TTFT, 0.02, 2000, 200, arrival_rate=RATES)


def main() -> None:
    vectorised()  # builds and caches the layouts' engines
    wall, cpu = [], []
    for _ in range(5):
        w, c = time.perf_counter(), time.process_time()
        result = vectorised()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    per_pair, chips, layouts = [], [], []
    start = time.perf_counter()
    for rate, ttft in zip(RATES, TTFT):
        t = time.perf_counter()
        one = size(*ARGS, float(ttft), 0.02, 2000, 200, arrival_rate=float(rate))
        per_pair.append(time.perf_counter() - t)
        chips.append(one.n_chips)
        layouts.append(one.layout)
    loop = time.perf_counter() - start
    assert chips == result.n_chips.tolist() and layouts == result.layout, "the loop and the call disagree"
    call = statistics.median(wall)
    print(f"pairs                          {N:,}")
    print(f"one call, median of 5          {call * 1e3:.1f} ms wall, {statistics.median(cpu) * 1e3:.1f} ms CPU")
    print(f"loop over the pairs            {loop:.1f} s in all, median {statistics.median(per_pair) * 1e3:.2f} ms a pair")
    print(f"ratio (loop / call)            {loop / call:.0f}x (goal: at least 20x)")
    print(f"feasible pairs                 {int(np.sum(result.feasible)):,}; chips used: "
          f"{sorted(set(result.n_chips[result.feasible].tolist()))}")


if __name__ == "__main__":
    main()
