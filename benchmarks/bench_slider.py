"""Time per control move: blitting (today), full redraw (the old path) and a new figure per move.

Usage: python benchmarks/bench_slider.py [--moves N] [--notebooks 00 03 ...]

Three ways to show the same figure in a live kernel, run side by side in
one process, move by move in turn (so a busy machine slows all three alike):

* **blit**: ``kvbook.interactive`` as it is: one figure, one reused
  ipywidgets.Image; a move restores the cached background and redraws only
  the artists ``update`` touched (a full redraw when limits or ticks change).
* **old**: the previous code path: the same figure, but every move redraws
  all of it (``canvas.draw()``) and encodes with Pillow at compress level 1.
* **naive**: what ``interact`` + ``plt.subplots()`` in the callback does:
  build, draw and save a new figure on every move.

Each figure is one of the book's own (the chapter's ``setup`` and controls,
run from its notebook by benchmarks/book_figures.py), plus this file's
min-step-against-context figure. A move sets one control's widget value,
which runs the same observer a browser drag does; the moves are a fixed
pseudo-random walk over every control (most of them the main slider). The
time of a move is the observer's: update, draw, PNG, widget value.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvmath  # noqa: E402
from kvmath import formulas  # noqa: E402
from book_figures import NOTEBOOKS, BookFigure, book_figures  # noqa: E402
from kvbook import plots  # noqa: E402
from kvbook.interactive import Choice, InteractiveFigure, Slider  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONTEXTS = np.unique(np.round(np.geomspace(128, 131072, 64)))
MODELS = ["llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b-v0.1"]
# every chapter with an interactive figure, but the one that measures this machine
# (running its cells would time the machine, not the figure)
DEFAULT_NOTEBOOKS = sorted({name[2:4] for name, fn in __import__("kvbook.figures", fromlist=["load_all"]).load_all().items()
                            if not fn.static})  # chapters with live figures (14's measure the machine: static)
TARGET_MS = 30.0


def curves(batch: int, chip_name: str):
    """Decode min-step (s) against context for every model, one numpy call each."""
    chip = kvmath.Chip.preset(chip_name)
    out = {}
    for name in MODELS:
        m = kvmath.Model.preset(name)
        p = m.param_count()
        kv_seq = formulas.kv_bytes_per_seq(m.kv_bytes_per_token(), CONTEXTS)
        out[name] = formulas.min_step(batch, kv_seq, 2 * p, p, chip.bandwidth, chip.flops("bf16"))
    return out, formulas.critical_batch(chip.flops("bf16"), chip.bandwidth, 2)


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


BENCH_FIGURE = BookFigure(
    "bench: min-step against context", setup,
    {"batch": Slider(BATCHES, default=16, label="batch B"),
     "chip": Choice(["h100-sxm", "a100-80gb"], label="chip")},
    {"main": "batch", "figsize": (7, 4)})


class OldPath(InteractiveFigure):
    """The render of the previous kvbook.interactive: a full Agg redraw and Pillow level 1."""

    def render(self, fast: bool = False, **values):
        from PIL import Image

        self.values.update(values)
        with self._style():
            self._apply()  # the same update and held limits as today's path: only drawing differs
            canvas = self.figure.canvas
            canvas.draw()
            if not self.relayout and self.figure.get_layout_engine() is not None:
                self.figure.set_layout_engine("none")
            image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
            buf = io.BytesIO()
            image.convert("RGB").save(buf, format="png", compress_level=1 if fast else 6)
        return buf.getvalue()


class Naive:
    """A plain ``interact`` callback: a new figure (the chapter's own setup) per move."""

    def __init__(self, bf: BookFigure, like: InteractiveFigure | None = None) -> None:
        self.bf = bf
        # the axis limits a fixed_limits figure holds, by axes number
        self.limits = ([(like.figure.axes.index(ax), x, y) for ax, x, y in like._limits]
                       if like is not None and like._limits else [])
        self.values = {n: c.default for n, c in bf.controls.items()}
        self.image = widgets.Image(format="png")
        self.timings_s: list[float] = []
        # as InteractiveFigure does: a setup that sets its own margins gets no layout engine
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with plots.style():
                plt.close(self._figure(None))
        self.layout = "none" if any("subplots_adjust" in str(w.message) for w in caught) else None

    def _figure(self, layout):
        kw = self.bf.kwargs
        w, h = kw.get("figsize", (7.0, 4.0))
        fig = plt.figure(figsize=(w, h), dpi=kw.get("dpi", 100.0) * kw.get("pixel_ratio", 2.0),
                         layout=layout)
        self.bf.setup(fig)(**self.values)
        for k, xlim, ylim in self.limits:
            fig.axes[k].set_xlim(xlim)
            fig.axes[k].set_ylim(ylim)
        return fig

    def move(self, name, value) -> None:
        t0 = time.perf_counter()
        self.values[name] = value
        with plots.style():
            fig = self._figure(self.layout)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            plt.close(fig)
        self.image.value = buf.getvalue()
        self.timings_s.append(time.perf_counter() - t0)


def walk(controls: dict, n: int, seed: int = 0) -> list[tuple[str, object]]:
    """n single-control moves: two in three on the main (first) slider, stepping to a neighbour."""
    rng = random.Random(seed)
    names = list(controls)
    state = {k: c.default for k, c in controls.items()}
    out = []
    for _ in range(n):
        name = names[0] if rng.random() < 2 / 3 or len(names) == 1 else rng.choice(names[1:])
        values = controls[name].values
        i = values.index(state[name])
        j = i + rng.choice([-1, 1]) if 0 < i < len(values) - 1 else (1 if i == 0 else i - 1)
        if len(values) == 1 or j == i:
            continue
        state[name] = values[j]
        out.append((name, values[j]))
    return out


def bench_figure(bf: BookFigure, n: int) -> dict[str, list[float]]:
    controls = dict(bf.controls)
    main = bf.kwargs.get("main") or next(iter(controls))
    controls = {main: controls[main], **{k: v for k, v in controls.items() if k != main}}
    blit = bf.make(blit=True)
    old = OldPath(bf.setup, bf.controls, **{**bf.kwargs, "blit": False})
    for f in (blit, old):
        f.widget()
    naive = Naive(bf, like=blit)
    kinds = []
    for k, (name, value) in enumerate(walk(controls, n)):
        order = [0, 1, 2][k % 3:] + [0, 1, 2][:k % 3]  # rotate who goes first
        for who in order:
            if who == 0:
                blit._controls_w[name].value = value
                kinds.append(blit.last_draw)
            elif who == 1:
                old._controls_w[name].value = value
            else:
                naive.move(name, value)
    return {"blit": blit.timings_s, "old": old.timings_s, "naive": naive.timings_s,
            "blits": kinds.count("blit") / max(1, len(kinds))}


def med(t: list[float]) -> float:
    return 1000 * statistics.median(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=40, help="moves per figure (default 40)")
    ap.add_argument("--notebooks", nargs="*", default=DEFAULT_NOTEBOOKS,
                    help="chapter number prefixes whose figures to time (default: %(default)s)")
    args = ap.parse_args()
    figures = [BENCH_FIGURE]
    for prefix in args.notebooks:
        for nb in sorted(NOTEBOOKS.glob(f"{prefix}_*.ipynb")):
            figures += book_figures(nb)
    Naive(BENCH_FIGURE).move("batch", 16)  # warm up fonts and caches for all three
    load = os.getloadavg()[0]
    rows, everything = [], {"blit": [], "old": [], "naive": []}
    for bf in figures:
        r = bench_figure(bf, args.moves)
        for k in everything:
            everything[k] += r[k]
        rows.append((bf.name, r))
    head = (f"{'figure':<34} {'blit':>8} {'old':>8} {'naive':>8} {'old/blit':>9} {'naive/blit':>11}"
            f" {'blitted':>8}")
    print("median ms per move, live kernel (ipywidgets observer: update + draw + PNG); "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(head)
    for name, r in rows:
        b, o, nv = med(r["blit"]), med(r["old"]), med(r["naive"])
        print(f"{name:<34} {b:8.1f} {o:8.1f} {nv:8.1f} {o / b:8.2f}x {nv / b:10.2f}x {r['blits']:7.0%}")
    b, o, nv = (med(everything[k]) for k in ("blit", "old", "naive"))
    print(f"{'all moves of all figures':<34} {b:8.1f} {o:8.1f} {nv:8.1f} {o / b:8.2f}x {nv / b:10.2f}x")
    print(f"moves per path: {len(everything['blit'])}; target: blit median under {TARGET_MS:.0f} ms "
          f"({'met' if b < TARGET_MS else 'NOT met'} here)")


if __name__ == "__main__":
    main()
