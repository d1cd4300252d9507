"""Benchmark: the serving frontier over 10^4 batch sizes x 10^2 request shapes in one call vs a Python loop.

Run: python benchmarks/bench_frontier.py

One :meth:`kvmath.Deployment.frontier` call: Llama 3 70B on 8 H100s by heads
over NVLink 4, every batch from 1 to 10,000 against 100 request shapes
(prompts of 32 to 16,384 tokens, outputs of 16 to 4,096), each a whole
request: the prefill bound, then every decode step over the growing context
summed in closed form, the memory cap and the best batch under a 50 ms
time-per-output-token limit. It prints the median time of that call (goal:
under 100 ms) and, measured in the same run, the median time per
configuration of a naive loop that calls :meth:`kvmath.Deployment.request` once
per (batch, shape) and of one that sums :meth:`kvmath.Deployment.step` step by
step; the loops run on a subset and are scaled per configuration. The
call's CPU time is printed beside its wall time: on a shared machine the
wall time also counts other processes.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import kvmath as km

DEP = km.Deployment("llama-3-70b", "h100-sxm", "tp=8", link="nvlink4")
BATCH = np.arange(1, 10_001)
INPUTS = np.repeat([32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384], 10)
OUTPUTS = np.tile([16, 64, 128, 256, 512, 1000, 1024, 2048, 3000, 4096], 10)


def frontier():
    return DEP.frontier(INPUTS, OUTPUTS, batch=BATCH, tpot_limit_s=0.05)


def per_configuration(pairs):
    return [DEP.request(b, INPUTS[j], OUTPUTS[j]).total_s for b, j in pairs]


def step_by_step(pairs):
    out = []
    for b, j in pairs:
        s_in, s_out = int(INPUTS[j]), int(OUTPUTS[j])
        ttft = DEP.request(b, s_in, 1).ttft_s
        decode = sum(DEP.step(b, s).strict_s for s in range(s_in + 1, s_in + s_out))
        out.append(ttft + decode)
    return out


def median_seconds(fn, repeats: int, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def main() -> None:
    n = BATCH.size * INPUTS.size
    f = frontier()
    assert f.requests.total_s.shape == (BATCH.size, INPUTS.size)
    rng = np.random.default_rng(0)
    pairs = [(int(b), int(j)) for b, j in zip(rng.integers(1, 10_001, 200), rng.integers(0, 100, 200))]
    looped = np.array(per_configuration(pairs))
    assert np.allclose(looped, [f.requests.total_s[b - 1, j] for b, j in pairs], rtol=1e-12)
    steps = pairs[:5]
    assert np.allclose(step_by_step(steps), looped[:5], rtol=1e-11)  # the closed form is the sum of the steps

    grid_s = median_seconds(frontier, repeats=15)
    cpu_s = median_seconds(frontier, repeats=15, clock=time.process_time)  # less sensitive to a busy machine
    loop_s = median_seconds(lambda: per_configuration(pairs), repeats=3) / len(pairs)
    step_s = median_seconds(lambda: step_by_step(steps), repeats=1) / len(steps)
    per_grid = grid_s / n
    print(f"serving frontier: {n:,} whole requests in one call, median {grid_s * 1e3:.1f} ms wall, "
          f"{cpu_s * 1e3:.1f} ms CPU (goal < 100 ms)")
    print(f"  per configuration: one call {per_grid * 1e9:.1f} ns; loop of request_times {loop_s * 1e6:.0f} µs "
          f"(ratio {loop_s / per_grid:,.0f}x); loop of decode steps {step_s * 1e3:.1f} ms "
          f"(ratio {step_s / per_grid:,.0f}x)")


if __name__ == "__main__":
    main()
