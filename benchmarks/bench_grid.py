"""Benchmark: the full decode step over a 1,000 x 1,000 grid in one call vs a Python loop.

Run: python benchmarks/bench_grid.py

The full step is :func:`kvmath.decode_step`: weight bytes read by group
(three MoE routings), attention FLOPs, the KV cache with sliding windows,
both forms of the bound. It prints the median time of the vectorised grid
(goal: under 50 ms on a 2-core machine), the median time per configuration
for both ways, and their ratio; and the same for the notes' ``min_step``
alone. The loops are timed on a 100 x 100 sub-grid and scaled per
configuration, because a million Python calls would take minutes.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import kvmath as km

MODEL = km.get_model("mixtral-8x7b")  # MoE and GQA: every term of the step is live
CHIP = km.get_chip("h100-sxm")
N_CHIPS = 8


def full_step(batch, context):
    return km.decode_step(MODEL, CHIP, batch, context, n_chips=N_CHIPS).strict_step_s


def notes_step(batch, context):
    params = MODEL.param_count()
    return km.min_step(batch, context * MODEL.kv_bytes_per_token(), 2 * params, params,
                       N_CHIPS * CHIP.bandwidth, N_CHIPS * CHIP.flops())


def loop(fn, batches, contexts) -> list[float]:
    return [fn(b, s) for b in batches for s in contexts]


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(name: str, fn, batch: np.ndarray, context: np.ndarray, m: int) -> None:
    n = batch.shape[0] * context.shape[1]
    grid = fn(batch, context)
    assert grid.shape == (batch.shape[0], context.shape[1]) and np.all(np.isfinite(grid))
    sub_b, sub_s = batch[:m, 0].tolist(), context[0, :m].tolist()
    looped = np.array(loop(fn, sub_b, sub_s)).reshape(m, m)
    assert np.allclose(looped, grid[:m, :m], rtol=1e-12)  # the loop agrees with the grid

    grid_s = median_seconds(lambda: fn(batch, context), repeats=15)
    loop_s = median_seconds(lambda: loop(fn, sub_b, sub_s), repeats=3)
    per_grid, per_loop = grid_s / n, loop_s / (m * m)
    print(f"{name}: {n:,} configurations in one call, median {grid_s * 1e3:.1f} ms (goal < 50 ms)")
    print(f"  per configuration: grid {per_grid * 1e9:.1f} ns, Python loop {per_loop * 1e6:.2f} µs, "
          f"ratio {per_loop / per_grid:,.0f}x")


def main() -> None:
    n = 1000
    batch = np.linspace(1, 4096, n)[:, None]
    context = np.linspace(128, 131072, n)[None, :]
    report("full step (decode_step)", full_step, batch, context, m=60)
    report("notes' min_step", notes_step, batch, context, m=100)


if __name__ == "__main__":
    main()
