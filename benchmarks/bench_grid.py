"""Benchmark: min_step over a 1,000 x 1,000 grid in one call vs a Python loop.

Run: python benchmarks/bench_grid.py

Prints the median time of the vectorised grid (goal: under 50 ms on a
2-core machine), the median time per configuration for both ways, and
their ratio. The loop is timed on a 100 x 100 sub-grid and scaled per
configuration, because a million Python calls would take minutes.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import kvmath as km

MODEL = km.get_model("llama-2-70b")
CHIP = km.get_chip("h100-sxm")
N_CHIPS = 8
PARAM_COUNT = MODEL.param_count()
PARAM_BYTES = km.weight_bytes(PARAM_COUNT, 2)


def grid_once(batch: np.ndarray, context: np.ndarray) -> np.ndarray:
    kv_per_seq = context * MODEL.kv_bytes_per_token()
    return km.min_step(batch, kv_per_seq, PARAM_BYTES, PARAM_COUNT, N_CHIPS * CHIP.bandwidth, N_CHIPS * CHIP.flops())


def loop_once(batches, contexts) -> list[float]:
    per_token = MODEL.kv_bytes_per_token()
    return [
        km.min_step(b, s * per_token, PARAM_BYTES, PARAM_COUNT, N_CHIPS * CHIP.bandwidth, N_CHIPS * CHIP.flops())
        for b in batches
        for s in contexts
    ]


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    n = 1000
    batch = np.linspace(1, 4096, n)[:, None]
    context = np.linspace(128, 131072, n)[None, :]
    result = grid_once(batch, context)
    assert result.shape == (n, n)

    grid_s = median_seconds(lambda: grid_once(batch, context), repeats=15)
    m = 100
    loop_s = median_seconds(lambda: loop_once(batch[:m, 0].tolist(), context[0, :m].tolist()), repeats=5)

    # the loop agrees with the grid on its sub-grid
    looped = np.array(loop_once(batch[:m, 0].tolist(), context[0, :m].tolist())).reshape(m, m)
    assert np.allclose(looped, result[:m, :m], rtol=1e-12)

    grid_per_config = grid_s / (n * n)
    loop_per_config = loop_s / (m * m)
    print(f"grid of {n} x {n} configurations in one call: median {grid_s * 1e3:.1f} ms (goal < 50 ms)")
    print(f"per configuration: grid {grid_per_config * 1e9:.1f} ns, Python loop {loop_per_config * 1e6:.2f} µs")
    print(f"ratio loop / grid per configuration: {loop_per_config / grid_per_config:,.0f}x")


if __name__ == "__main__":
    main()
