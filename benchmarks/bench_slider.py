"""Time per slider move of kvmath.interactive against a naive ipywidgets.interact.

Usage: python benchmarks/bench_slider.py [--moves N]

Both draw the same figure (decode step time against batch size for every
model preset family, with the ridge/B_crit marker and a text box), as a
chapter would. The kvmath helper mutates the artists of one figure and
re-renders it with Agg into one reused ipywidgets.Image; the naive version,
what `interact` + `plt.subplots()` in the callback does, builds and renders a
new figure on every move. Moves are simulated by setting the slider widget's
value, which runs the same observer a browser drag does.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kvmath  # noqa: E402
from kvmath import plots  # noqa: E402
from kvmath.interactive import Choice, Slider, interactive_figure  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONTEXTS = np.unique(np.round(np.geomspace(128, 131072, 64)))
MODELS = ["llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b-v0.1"]


def curves(batch: int, chip_name: str):
    """Decode min-step (s) against context for every model, one numpy call each."""
    chip = kvmath.get_chip(chip_name)
    out = {}
    for name in MODELS:
        m = kvmath.get_model(name)
        p = m.param_count()
        kv_seq = kvmath.kv_bytes_per_seq(m.kv_bytes_per_token(), CONTEXTS)
        out[name] = kvmath.min_step(batch, kv_seq, 2 * p, p, chip.bandwidth, chip.flops("bf16"))
    return out, kvmath.critical_batch(chip.flops("bf16"), chip.bandwidth, 2)


def setup(fig):
    ax = fig.add_subplot()
    lines = {name: ax.plot(CONTEXTS, CONTEXTS * 0 + 1e-3, label=name)[0] for name in MODELS}
    plots.log_context_axis(ax)
    ax.set_yscale("log")
    plots.seconds_axis(ax, "y", "ms", "min time per decode step")
    marker = plots.mark_vline(ax, 4096, "S = 4096")
    note = ax.text(0.02, 0.95, "", transform=ax.transAxes, va="top", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_ylim(1e-3, 30)

    def update(batch, chip):
        ys, b_crit = curves(batch, chip)
        for name, line in lines.items():
            line.set_ydata(ys[name])
        marker.move(4096)
        note.set_text(f"B = {batch}, B_crit = {b_crit:.0f} on {chip}")

    return update


def naive_render(batch: int, chip: str) -> bytes:
    """What a plain `interact` callback does: a new figure per move."""
    with plots.style():
        fig, ax = plt.subplots(figsize=(7, 4), dpi=80)
        ys, b_crit = curves(batch, chip)
        for name in MODELS:
            ax.plot(CONTEXTS, ys[name], label=name)
        plots.log_context_axis(ax)
        ax.set_yscale("log")
        plots.seconds_axis(ax, "y", "ms", "min time per decode step")
        plots.mark_vline(ax, 4096, "S = 4096")
        ax.text(0.02, 0.95, f"B = {batch}, B_crit = {b_crit:.0f} on {chip}", transform=ax.transAxes,
                va="top", fontsize=9)
        ax.legend(loc="lower right", fontsize=8)
        ax.set_ylim(1e-3, 30)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=80)
        plt.close(fig)
    return buf.getvalue()


def moves(n: int) -> list[int]:
    seq = BATCHES + BATCHES[-2:0:-1]
    return [seq[i % len(seq)] for i in range(1, n + 1)]


def bench_kvmath(n: int) -> list[float]:
    fig = interactive_figure(
        setup, {"batch": Slider(BATCHES, default=16, label="batch B"),
                "chip": Choice(["h100-sxm", "a100-80gb"], label="chip")},
        main="batch", figsize=(7, 4), dpi=80)
    fig.widget()
    slider = fig._controls_w["batch"]
    for b in moves(n):
        slider.value = b
    return fig.timings_s


def bench_naive(n: int) -> list[float]:
    image = widgets.Image(format="png")
    slider = widgets.SelectionSlider(options=BATCHES, value=16)
    timings = []

    def on_change(change):
        t0 = time.perf_counter()
        image.value = naive_render(change["new"], "h100-sxm")
        timings.append(time.perf_counter() - t0)

    slider.observe(on_change, names="value")
    for b in moves(n):
        slider.value = b
    return timings


def summary(name: str, t: list[float]) -> str:
    ms = [1000 * x for x in t]
    return f"{name:<34} median {statistics.median(ms):7.1f} ms   max {max(ms):7.1f} ms   (n={len(ms)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=60)
    args = ap.parse_args()
    naive_render(16, "h100-sxm")  # warm up fonts and caches for both
    ours = bench_kvmath(args.moves)
    naive = bench_naive(args.moves)
    print(summary("kvmath.interactive (one figure)", ours))
    print(summary("naive interact (rebuild figure)", naive))
    print(f"naive / kvmath median ratio: {statistics.median(naive) / statistics.median(ours):.2f}x")
    print("target: median under 100 ms per move")


if __name__ == "__main__":
    main()
