"""The book's diagrams: pictures of ideas, drawn from the presets so they stay true.

Each function takes the kvmath objects it draws (a :class:`kvmath.Deployment`,
models) and returns a :class:`Diagram`: the matplotlib figure, in the book's
style (:mod:`kvbook.plots`), and its alt text, both built from the same
numbers, every one computed by kvmath. A chapter shows one as the last
expression of a figure cell; the PNG it shows carries the alt text in its
``Description`` field, which the book build writes into the page's ``alt``
(:mod:`kvbook.sphinx.book_pages`), so what a screen reader hears follows the
presets as the picture does.

Text is at least :data:`FONT` points on a figure at most :data:`WIDTH` inches
wide: 11 pt is 15.3 CSS px at the book's 100 px per inch, and still over 9.5 px
where a 390 px phone shows the figure 358 px wide.

Examples
--------
>>> import kvmath
>>> d = speculative_step(kvmath.Deployment("llama-3-8b", "h100-sxm"), gamma=4, acceptance=0.8)
>>> "3.36 tokens" in d.alt
True
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import matplotlib.ticker as mticker
import numpy as np

import kvmath
from kvmath.batching import mixed_step
from kvmath.formatting import fmt_number, fmt_seconds
from kvmath.units import GB

#: The smallest text on a diagram, points.
FONT = 11.0
#: The widest a diagram is drawn, inches (CSS px / 100).
WIDTH = 5.6
#: Fill colours: light tints of the book's colours (kvbook.plots.COLORS), one per kind of thing.
WEIGHTS, KV, COMPUTE, FREE, DRAFT, REJECT = "#cfe3f3", "#f6d3bf", "#c6eadf", "#f2f2f2", "#fbe7bf", "#e9c9c9"


@dataclass(frozen=True)
class Diagram:
    """A drawn diagram and its alt text (what the picture shows, for a screen reader).

    In a notebook it shows as its PNG, whose ``Description`` is :attr:`alt`.
    """

    figure: Any
    alt: str

    def png(self) -> bytes:
        """The figure as PNG at its own dpi (HiDPI), cropped as a notebook crops it, with the alt text inside
        (``Description``) and its smallest text size (:data:`kvbook.plots.MIN_TEXT_KEY`, written by its canvas)."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=self.figure.dpi, bbox_inches="tight",
                            metadata={"Description": self.alt})
        return buf.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png()

    def __repr__(self) -> str:
        return f"<Diagram: {self.alt}>"

    def texts(self) -> list[str]:
        """Every text drawn on the figure, in drawing order (tick labels included)."""
        self.figure.canvas.draw()
        return [t.get_text() for t in self.figure.findobj(lambda a: hasattr(a, "get_text") and a.get_visible())
                if t.get_text().strip()]


def _canvas(height: float, ymax: float):
    """A figure of the diagrams' width with one axes of plain coordinates (x 0..100, y 0..ymax), no frame."""
    import kvbook.plots as kp

    fig, ax = kp.new_figure(figsize=(WIDTH, height))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, ymax)
    ax.set_axis_off()
    return fig, ax


def _done(fig, alt: str) -> Diagram:
    """Hand the figure over without pyplot's copy of it, so a notebook cell shows it once."""
    import kvbook.plots as kp

    kp.close(fig)
    # pyplot's close leaves a bare canvas: an Agg one lays the text out for the tests, and its
    # PNGs record the smallest text (kvbook.plots.png_text)
    kp.BookCanvas(fig)
    return Diagram(fig, " ".join(alt.split()))


def _box(ax, x, y, w, h, text="", color=FREE):
    """A rounded box at (x, y), w by h, with ``text`` centred in it."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.8", facecolor=color,
                                edgecolor="0.35", linewidth=1.0))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT)


def _arrow(ax, start, end, color="0.25", style="-|>", width=1.4):
    ax.annotate("", xy=end, xytext=start,
                arrowprops={"arrowstyle": style, "color": color, "linewidth": width, "shrinkA": 0, "shrinkB": 0})


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / GB:.2f} GB"


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.2f} MB" if n_bytes >= 1e6 else f"{n_bytes / 1e3:.0f} kB"


def _kib(n_bytes: float) -> str:
    kib = n_bytes / 2**10
    return f"{kib:.0f} KiB" if kib == round(kib) else f"{kib:.1f} KiB"


# --- 1. what one decode step moves and computes ---------------------------------------------------

def decode_step(dep: kvmath.Deployment, batches: Sequence[int] = (1, 8), context: int = 4096) -> Diagram:
    """What one decode step of ``dep`` reads from memory and computes, at each of ``batches`` sequences of ``context``.

    Top: the chip's memory to scale, with the weights it holds and the
    largest batch's KV cache, read through the memory bus into the compute
    units. Below: for each batch, the time to read the weights and the
    cache at the chip's bandwidth against the time of their arithmetic at
    its FLOP rate (strict bounds, :meth:`kvmath.Deployment.step`).
    """
    chip, model = dep.chip, dep.model
    steps = [dep.step(b, context) for b in batches]
    big = steps[-1]
    if big.memory_bytes > chip.hbm_bytes:
        raise ValueError(f"batches: {batches[-1]} sequences of {context} tokens and the weights need "
                         f"{big.memory_bytes / GB:.2f} GB, more than the {chip.hbm_bytes / GB:.0f} GB of one "
                         f"{chip.display_name}")
    fig, ax = _canvas(5.0, ymax=90)
    # the memory, to scale: weights held, the largest batch's cache, the rest free
    hbm = chip.hbm_bytes
    x0, w0, y0, h0 = 2, 30, 47, 36
    held_w, held_kv = big.weight_bytes_resident / hbm * h0, big.kv_bytes_resident / hbm * h0
    _box(ax, x0, y0, w0, h0, color=FREE)
    _box(ax, x0, y0 + h0 - held_w, w0, held_w, f"weights\n{_gb(big.weight_bytes_resident)}", color=WEIGHTS)
    _box(ax, x0, y0 + h0 - held_w - held_kv, w0, held_kv, color=KV)
    kv_label = f"KV cache, B = {fmt_number(batches[-1])}\n{_gb(big.kv_bytes_resident)}"
    ax.text(x0 + w0 / 2, y0 + h0 - held_w - held_kv - 1.2, kv_label, ha="center", va="top", fontsize=FONT)
    free = hbm - big.weight_bytes_resident - big.kv_bytes_resident
    ax.text(x0 + w0 / 2, y0 + 1.5, f"free {_gb(free)}", ha="center", va="bottom", fontsize=FONT, color="0.3")
    # "memory", not "HBM": kvmath's chips include GDDR cards and Apple's unified LPDDR, and it does not record which
    ax.text(x0 + w0 / 2, y0 + h0 + 1.5, f"memory, {hbm / GB:.0f} GB", ha="center", va="bottom", fontsize=FONT,
            weight="bold")
    cx, cw = 62, 30
    _box(ax, cx, y0 + 10, cw, 16, f"compute\n{dep.flops / 1e12:.0f} TFLOP/s", color=COMPUTE)
    ax.text(cx + cw / 2, y0 + h0 + 1.5, chip.display_name, ha="center", va="bottom", fontsize=FONT, weight="bold")
    _arrow(ax, (x0 + w0 + 1, y0 + 18), (cx - 1, y0 + 18), width=2.5)
    ax.text((x0 + w0 + cx) / 2, y0 + 20, f"{chip.bandwidth / 1e12:.2f} TB/s", ha="center", va="bottom",
            fontsize=FONT)
    ax.text((x0 + w0 + cx) / 2, y0 + 16, "each step reads\nweights + KV", ha="center", va="top", fontsize=FONT)
    # the times of each batch's step: memory against compute, to scale
    longest = max(float(s.memory_s) for s in steps)
    left, span = 14, 84
    ax.text(0, 40, f"one step, S = {fmt_number(context)} tokens (lower bounds)", fontsize=FONT, weight="bold",
            va="bottom")
    lines = []
    for i, (b, s) in enumerate(zip(batches, steps)):
        y = 31 - i * 19
        ax.text(0, y + 2.5, f"B = {fmt_number(b)}", fontsize=FONT, va="center")
        w_w = float(s.weight_read_s) / longest * span
        w_kv = float(s.kv_read_s) / longest * span
        _box(ax, left, y, w_w, 5, color=WEIGHTS)
        _box(ax, left + w_w, y, w_kv, 5, color=KV)
        ax.text(left + 1, y + 2.5, f"weights {_gb(s.weight_bytes_read)}: {fmt_seconds(s.weight_read_s)}",
                fontsize=FONT, va="center")
        ax.text(left + w_w + w_kv, y - 0.8, f"+ KV {_gb(s.kv_bytes_read)}: {fmt_seconds(s.kv_read_s)}",
                fontsize=FONT, va="top", ha="right")
        flops = float(s.weight_flops + s.attention_flops)
        compute_w = float(s.compute_s) / longest * span
        _box(ax, left, y - 10.5, max(compute_w, 0.4), 3.5, color=COMPUTE)
        ax.text(left + compute_w + 1.5, y - 8.75, f"compute {flops / 1e9:.0f} GFLOP: {fmt_seconds(s.compute_s)}",
                fontsize=FONT, va="center")
        lines.append(f"at B = {b}, the step reads {_gb(s.weight_bytes_read)} of weights in "
                     f"{fmt_seconds(s.weight_read_s)} and {_gb(s.kv_bytes_read)} of KV cache in "
                     f"{fmt_seconds(s.kv_read_s)}, while its {flops / 1e9:.0f} GFLOP of arithmetic take "
                     f"{fmt_seconds(s.compute_s)}")
    # the last sentence says what the bars show, for this chip and these batches: a large batch can be compute-bound
    ratios = [float(s.compute_s / s.memory_s) for s in steps]
    worst = int(np.argmax(ratios))
    verdict = ("Reading memory takes far longer than the arithmetic." if ratios[worst] < 1 / 3 else
               "Reading memory takes longer than the arithmetic." if ratios[worst] < 1 else
               f"At B = {batches[worst]} the arithmetic takes longer than reading memory.")
    alt = (f"Diagram of one decode step of {model.display_name} on one {chip.display_name}. The chip's "
           f"{hbm / GB:.0f} GB of memory holds {_gb(big.weight_bytes_resident)} of weights and, at "
           f"{batches[-1]} sequences of {context} tokens, {_gb(big.kv_bytes_resident)} of KV cache; every step "
           f"reads them through a {chip.bandwidth / 1e12:.2f} TB/s bus into compute units of "
           f"{dep.flops / 1e12:.0f} TFLOP/s. Bars to scale: " + "; ".join(lines) + ". " + verdict)
    return _done(fig, alt)


# --- 2. the roofline with the chip's ridge -----------------------------------------------------------

def _beside_ridge(ratio: float) -> str:
    """Where a point of ``ratio`` times the ridge's intensity sits, in words: a dense model's critical batch puts
    its weights at the ridge, an MoE's (its experts' weights read once, used by fewer sequences) right of it."""
    if ratio > 1.1:
        return f"right of the ridge, at {ratio:.1f} times its intensity, compute-bound"
    if ratio < 0.9:
        return f"left of the ridge, at {ratio:.2f} times its intensity, memory-bound"
    return "at the ridge"


def roofline(dep: kvmath.Deployment) -> Diagram:
    """The chip's roofline at the deployment's FLOP rate, its ridge, and where a decode step's weight matmuls sit
    at batch 1 and at the critical batch (intensity: the step's weight FLOPs per weight byte read)."""
    import kvbook.plots as kp

    chip, model = dep.chip, dep.model
    b_crit = dep.critical_batch()
    alpha = dep.flops / chip.bandwidth
    points = {}
    for b in (1, b_crit):
        s = dep.step(b, 1)
        points[b] = float(s.weight_flops / s.weight_bytes_read)
    fmt = dep.formats.compute or dep.formats.weights
    fig, ax = kp.new_figure(figsize=(WIDTH, 4.0))
    with kp.style():
        lo = alpha / 1000  # the same span about the ridge on every chip, so the labels keep their places
        art = kp.roofline(ax, dep.flops, chip.bandwidth, intensity_range=(lo, 64 * alpha))
        ax.set_ylim(dep.flops / 3000, dep.flops * 8)
        ax.set_xlim(lo, 64 * alpha)
        ax.minorticks_off()
        ridge = art["ridge"].text
        ridge.set_text(f"ridge \u03b1 = C/W = {alpha:.0f} FLOP/B ")
        ridge.set_horizontalalignment("right")
        ridge.set_y(0.97)
        for name, i in (("one", points[1]), ("crit", points[b_crit])):
            y = min(dep.flops, i * chip.bandwidth)
            ax.plot([i], [y], "o", color=kp.COLORS[1] if name == "one" else kp.COLORS[2], markersize=8, zorder=3)
        # labels placed against the roof, which moves with the chip: under the slope, under the flat part, above
        ax.annotate(f"decode, B = 1\nI = {points[1]:.2f}", (points[1], points[1] * chip.bandwidth),
                    xytext=(10, -6), textcoords="offset points", va="top", fontsize=FONT)
        # no subscript: mathtext sets it at 70%, under 9 px on a phone. Under the flat roof, just right of the
        # ridge line: a dense model's point is at the ridge, an MoE's up to 35 times right of it (Kimi K2), and
        # the space between the ridge line and the edge holds the label for either, crossed by no line
        ax.annotate(f"decode at the\ncritical batch\nB = {b_crit:.0f}\nI = {points[b_crit]:.0f}",
                    (points[b_crit], min(dep.flops, points[b_crit] * chip.bandwidth)),
                    xytext=(1.25 * alpha, dep.flops / 2.5), ha="left", va="top", fontsize=FONT)
        ax.text(1.4 * lo, 1.4 * lo * chip.bandwidth * 40, "memory-bound:\ntime = bytes / W", fontsize=FONT, va="bottom")
        ax.text(0.98, 0.985, "compute-bound:\ntime = FLOPs / C", transform=ax.transAxes, fontsize=FONT, va="top",
                ha="right")
        ax.set_xlabel("arithmetic intensity I (FLOPs / byte)", fontsize=FONT)
        ax.yaxis.label.set_fontsize(FONT)
        ax.tick_params(labelsize=FONT)
        for t in ax.texts:
            t.set_fontsize(max(t.get_fontsize(), FONT))
        ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _pos: fmt_number(v) if v >= 1 else f"{v:g}"))
    alt = (f"Roofline of the {chip.display_name}: attainable compute against arithmetic intensity, both on log "
           f"scales. The roof rises with slope W = {chip.bandwidth / 1e12:.2f} TB/s until the ridge at "
           f"{alpha:.0f} FLOPs per byte, then stays flat at {dep.flops / 1e12:.0f} TFLOP/s ({fmt}). A decode "
           f"step of {model.display_name} at batch 1 sits far left on the slope, at {points[1]:.2f} FLOPs per "
           f"byte of weights, memory-bound; at the critical batch of {b_crit:.0f} sequences it sits at "
           f"{points[b_crit]:.0f}, {_beside_ridge(points[b_crit] / alpha)}.")
    return _done(fig, alt)


# --- 3. what each attention design caches per token --------------------------------------------------

def _heads(n: int) -> str:
    return f"{n} KV head{'s' if n > 1 else ''}"


def _design(model: kvmath.Model) -> str:
    kinds = set(model.layer_kinds)
    if "sliding" in kinds:
        return "sliding window"
    return {"mha": "MHA", "gqa": "GQA", "mqa": "MQA", "mla": "MLA"}[model.attention]


def kv_layouts(models: Sequence[kvmath.Model], context: int = 32768, kv: str = "bf16") -> Diagram:
    """Each model's attention heads, what one token adds to its cache, and the bytes per token (``kv`` format).

    Query heads (top squares) share the KV heads under them: one each (MHA),
    a group (GQA), one for all (MQA); MLA caches one compressed latent per
    token and layer; a sliding-window model's windowed layers keep only the
    last ``window`` tokens, so a ``context``-token sequence holds less per
    token on average (:meth:`kvmath.Model.kv_bytes_per_token`).
    """
    from kvmath.units import dtype_bytes

    b = dtype_bytes(kv)
    rows = [(m, [sp.window for sp in m.layer_specs() if sp.kind == "sliding"]) for m in models]
    heights = [27.0 if windows else 22.0 for _, windows in rows]
    fig, ax = _canvas(0.2 + sum(heights) * WIDTH / 100, ymax=sum(heights) + 1)
    top = sum(heights) + 1
    lines = []
    for (m, windows), height in zip(rows, heights):
        design = _design(m)
        per_token = float(m.kv_bytes_per_token(b))
        ax.text(0, top - 0.5, f"{design}: {m.display_name}", fontsize=FONT, weight="bold", va="top")
        ax.text(100, top - 0.5, f"{_kib(per_token)} per token", fontsize=FONT, weight="bold", va="top", ha="right")
        shown = min(m.n_heads, 8)
        q_w, gap = 3.6, 1.0
        span = shown * (q_w + gap) - gap
        y_q, y_kv = top - 8.5, top - 15.0
        for k in range(shown):
            _box(ax, k * (q_w + gap), y_q, q_w, 3.2, color=COMPUTE)
        more = "\u2026 " if m.n_heads > shown else ""
        ax.text(span + 2, y_q + 1.6, f"{more}{m.n_heads} query heads", fontsize=FONT, va="center")
        if m.attention == "mla":
            n_kv, kv_text = 1, f"one latent: {m.kv_lora_rank} + {m.qk_rope_dim} rotary"
            formula = f"({m.kv_lora_rank} + {m.qk_rope_dim}) \u00d7 {m.n_layers} layers \u00d7 {b:g} B"
        else:
            n_kv = max(1, shown * m.n_kv_heads // m.n_heads)
            kv_text = f"{m.n_kv_heads} K and {m.n_kv_heads} V head{'s' if m.n_kv_heads > 1 else ''} of {m.head_dim}"
            formula = f"2 \u00d7 {m.n_kv_heads} \u00d7 {m.head_dim} \u00d7 {m.n_layers} layers \u00d7 {b:g} B"
        group = shown / n_kv
        kv_w = (span - (n_kv - 1) * gap) / n_kv
        for k in range(n_kv):
            _box(ax, k * (kv_w + gap), y_kv, kv_w, 3.2, color=KV)
        for k in range(shown):
            target = min(int(k // group), n_kv - 1)
            _arrow(ax, (k * (q_w + gap) + q_w / 2, y_q), (target * (kv_w + gap) + kv_w / 2, y_kv + 3.2), style="-",
                   width=0.8)
        ax.text(span + 2, y_kv + 1.6, kv_text, fontsize=FONT, va="center")
        ax.text(100, y_kv - 1.5, f"per token: {formula}", fontsize=FONT, va="top", ha="right")
        if windows:
            held = float(m.kv_bytes_per_token(b, context=context))
            ax.text(100, y_kv - 6.5, f"{len(windows)} of {m.n_layers} layers keep the last {fmt_number(windows[0])}: "
                                     f"{_kib(held)} a token at S = {fmt_number(context)}", fontsize=FONT, va="top",
                    ha="right")
            lines.append(f"{design}, {m.display_name}: {m.n_heads} query heads over {_heads(m.n_kv_heads)} of "
                         f"{m.head_dim}; {len(windows)} of its {m.n_layers} layers keep only the last {windows[0]} "
                         f"tokens, so one token reserves {_kib(per_token)} but a {context}-token sequence holds "
                         f"{_kib(held)} per token")
        else:
            heads = (f"{m.n_heads} query heads share one compressed latent of {m.kv_lora_rank} plus "
                     f"{m.qk_rope_dim} rotary elements" if m.attention == "mla" else
                     f"{m.n_heads} query heads over {_heads(m.n_kv_heads)} of {m.head_dim}")
            lines.append(f"{design}, {m.display_name}: {heads}, {_kib(per_token)} per token")
        top -= height
    alt = (f"Diagram of what one token adds to the KV cache in {len(models)} attention designs, in {kv}: "
           + "; ".join(lines) + ".")
    return _done(fig, alt)


# --- 4. tensor, pipeline and expert parallelism and their collectives ----------------------------------

def _one(collectives, prefix: str):
    found = [c for c in collectives.collectives if c.name.startswith(prefix)]
    if not found:
        raise ValueError(f"the deployment makes no {prefix} collective")
    return found


def parallelism(tensor: kvmath.Deployment, pipeline: kvmath.Deployment, expert: kvmath.Deployment,
                batch: int = 64) -> Diagram:
    """How tensor, pipeline and expert parallelism split a model over chips, and what each step sends between them.

    One panel per deployment, each decoding ``batch`` sequences: ``tensor``'s
    layers split over its ``tp`` chips, with two all-reduces per layer;
    ``pipeline``'s layers in ``pp`` stages, one hop per stage boundary;
    ``expert``'s experts over its ``ep`` chips, a dispatch and a combine
    all-to-all per MoE layer. Counts, message bytes and times are
    :meth:`kvmath.Deployment.collectives` (floors on each deployment's links).
    """
    for dep, attr, what in ((tensor, "tp", "tensor"), (pipeline, "pp", "pipeline"), (expert, "ep", "expert")):
        if getattr(dep.layout, attr) < 2:
            raise ValueError(f"{what} must be a deployment with {attr} >= 2, got layout {dep.layout!r}")
    fig, ax = _canvas(6.3, ymax=112)
    lines = []

    def row(n, y, h, label_of, color, gap=1.5):
        """``n`` boxes (at most 8 drawn) across the width; their centres."""
        shown = min(n, 8)
        w = (96 - (shown - 1) * gap) / shown
        for k in range(shown):
            _box(ax, 2 + k * (w + gap), y, w, h, label_of(k) if shown == n else "", color=color)
        return [2 + k * (w + gap) + w / 2 for k in range(shown)], w

    # tensor parallelism: every layer split over the chips, its partial sums all-reduced twice a layer
    (ar,) = _one(tensor.collectives(batch), "tensor-parallel")
    tp, m = tensor.layout.tp, tensor.model
    ax.text(0, 111, f"tensor parallel, tp = {tp}: {m.display_name}", fontsize=FONT, weight="bold", va="top")
    ax.text(0, 105.5, f"each chip holds 1/{tp} of every layer's heads and MLP", fontsize=FONT, va="top")
    centres, _ = row(tp, 88, 9, lambda k: f"chip\n{k + 1}", WEIGHTS)
    for x in centres:
        ax.plot([x, x], [88, 84.5], color="0.25", linewidth=1.2)
    ax.plot([centres[0], centres[-1]], [84.5, 84.5], color="0.25", linewidth=2.5)
    ax.text(0, 82.5, f"all-reduce after attention and after the MLP: {ar.count}\na step of {_mb(ar.message_bytes)} "
                     f"each, {fmt_seconds(ar.total_s)} in all", fontsize=FONT, va="top")
    lines.append(f"tensor parallelism, {m.display_name} with every layer split over {tp} chips: {ar.count} "
                 f"all-reduces a step, two a layer, of {_mb(ar.message_bytes)} each, {fmt_seconds(ar.total_s)} in all")
    # pipeline parallelism: the layers in stages, the activations handed on at each boundary
    hops = _one(pipeline.collectives(batch), "pipeline hop")
    pp, m = pipeline.layout.pp, pipeline.model
    per = math.ceil(m.n_layers / pp)
    n_hops, hop_bytes = sum(h.count for h in hops), hops[0].message_bytes
    ax.text(0, 68, f"pipeline parallel, pp = {pp}: {m.display_name}", fontsize=FONT, weight="bold", va="top")
    centres, w = row(pp, 52, 10, lambda k: f"layers\n{k * per + 1}\u2013{min((k + 1) * per, m.n_layers)}",
                     COMPUTE, gap=6)
    for a, b in pairwise(centres):
        _arrow(ax, (a + w / 2 + 0.3, 57), (b - w / 2 - 0.3, 57), width=1.8)
    ax.text(0, 50, f"{n_hops} hops a step, one per stage boundary,\nof {_mb(hop_bytes)} each, "
                   f"{fmt_seconds(sum(h.total_s for h in hops))} in all", fontsize=FONT, va="top")
    lines.append(f"pipeline parallelism, {m.display_name} in {pp} stages of up to {per} layers: {n_hops} "
                 f"point-to-point hops a step, one per stage boundary, of {_mb(hop_bytes)} each")
    # expert parallelism: each chip's tokens sent to the chips holding their experts, and the results back
    collectives = expert.collectives(batch)
    dispatch = _one(collectives, "expert-parallel dispatch")[0]
    combine = _one(collectives, "expert-parallel combine")[0]
    ep, m = expert.layout.ep, expert.model
    per_chip = (m.n_experts + expert.layout.redundant_experts) // ep
    ax.text(0, 38, f"expert parallel, ep = {ep}: {m.display_name}, top {m.top_k} of {m.n_experts}", fontsize=FONT,
            weight="bold", va="top")
    tokens, _ = row(ep, 27, 6, lambda k: f"chip {k + 1}", FREE)
    experts, _ = row(ep, 13, 8.5, lambda k: f"expert\n{k + 1}" if per_chip == 1 else f"{per_chip}\nexperts", KV)
    for a in tokens:
        for b in experts:
            ax.plot([a, b], [27, 21.5], color="0.55", linewidth=0.6)
    ax.text(0, 11, f"all-to-all: each chip's tokens to their experts' chips\nand back, {dispatch.count} of each a step, "
                   f"{_mb(dispatch.message_bytes)} from each\nchip, {fmt_seconds(dispatch.total_s + combine.total_s)} "
                   f"in all", fontsize=FONT, va="top")
    lines.append(f"expert parallelism, {m.display_name} with its {m.n_experts} experts over {ep} chips, each token "
                 f"sent to its top {m.top_k}: a dispatch and a combine all-to-all in each of {dispatch.count} MoE "
                 f"layers, {_mb(dispatch.message_bytes)} from each chip each time")
    alt = (f"Diagram of three ways to split a model over chips, each decoding {batch} sequences, with the "
           f"messages each step sends between them: " + "; ".join(lines) + ".")
    return _done(fig, alt)


# --- 5. continuous batching with chunked prefill ------------------------------------------------------

def continuous_batching(dep: kvmath.Deployment, running: int = 32, context: int = 2048,
                        prompts: Sequence[int] = (2048, 2048), chunk_tokens: int = 1024) -> Diagram:
    """A timeline of continuous-batching steps in which new requests' prompts join, chunk by chunk.

    ``running`` sequences of ``context`` tokens decode one token each step.
    Each new request (``prompts``: its prompt tokens) arrives when the one
    before has finished its prefill; its prompt runs ``chunk_tokens`` a step
    beside the decode tokens, and the step after its last chunk it decodes
    too. Each step is drawn as long as its strict bound
    (:func:`kvmath.batching.mixed_step`); the first, with no prompt, is a
    plain decode step.
    """
    if running < 1 or chunk_tokens < 1 or not prompts:
        raise ValueError(f"running and chunk_tokens must be >= 1 and prompts not empty, got running={running!r}, "
                         f"chunk_tokens={chunk_tokens!r}, prompts={prompts!r}")
    plan = [(running, 0, 0, None)]  # (decoding, chunk, start, request)
    decoding = running
    for r, p in enumerate(prompts):
        for start in range(0, p, chunk_tokens):
            plan.append((decoding, min(chunk_tokens, p - start), start, r))
        decoding += 1
    plan.append((decoding, 0, 0, None))
    decoding, chunks, starts, _ = (np.array(column) for column in zip(*plan))
    times = [float(t) for t in mixed_step(dep, decoding, context, chunks, starts).strict_s]  # all steps in one call
    total = sum(times)
    names = [chr(ord("A") + r) for r in range(len(prompts))]
    n_rows = len(prompts) + 2
    fig, ax = _canvas(0.5 + 0.8 * n_rows, ymax=14 * n_rows + 7)
    top = 14 * n_rows + 7
    labels = ["steps, each as long as its bound (ms)", f"{running} running sequences: one token a step"]
    labels += [f"{n}: a {fmt_number(p)}-token prompt in chunks, then decoding" for n, p in zip(names, prompts)]
    ys = []
    for k, label in enumerate(labels):
        y = top - 14 * (k + 1)
        ax.text(0, y + 7.5, label, fontsize=FONT, va="bottom")
        ys.append(y)
    t = 0.0
    for (b, c, s, r), dt in zip(plan, times):
        x, w = 0.5 + t / total * 99, dt / total * 99 - 0.6
        _box(ax, x, ys[0], w, 6.5, f"{dt * 1e3:.2f}", color=FREE)
        _box(ax, x, ys[1], w, 6.5, color=COMPUTE)
        for k in range(len(prompts)):
            if r == k:
                _box(ax, x, ys[2 + k], w, 6.5, fmt_number(c), color=KV)
            elif k < b - running:  # it has finished its prompt: it decodes with the others
                _box(ax, x, ys[2 + k], w, 6.5, color=COMPUTE)
        t += dt
    ax.text(0, 0, f"{dep.model.display_name}, {dep.chip.display_name}, contexts of {fmt_number(context)}",
            fontsize=FONT, va="bottom")
    decode_s, chunk_s = times[0], max(times)
    alt = (f"Timeline of {len(plan)} continuous-batching steps of {dep.model.display_name} on an "
           f"{dep.chip.display_name}, each drawn as long as it takes. {running} running sequences of {context} "
           f"tokens decode one token in every step. New requests "
           + ", ".join(f"{n} with a {p}-token prompt" for n, p in zip(names, prompts))
           + f" arrive in turn; each prompt runs in chunks of {chunk_tokens} tokens inside the decode steps, and "
           f"from the next step the request decodes with the others. A plain decode step takes "
           f"{fmt_seconds(decode_s)}; a step carrying a chunk takes up to {fmt_seconds(chunk_s)}, "
           f"{chunk_s / decode_s:.2f} times as long, and every running sequence waits that long for its token.")
    return _done(fig, alt)


# --- 6. a speculative verify step ---------------------------------------------------------------------

def speculative_step(dep: kvmath.Deployment, gamma: int = 4, acceptance: float = 0.8,
                     draft: kvmath.Model | str | None = None, batch: int = 1, context: int = 4096) -> Diagram:
    """A draft proposes ``gamma`` tokens; one target pass verifies ``gamma + 1`` positions; a prefix is kept.

    The accepted prefix drawn is one outcome (the expected number of drafts
    accepted, rounded down); the expected tokens per step at
    ``acceptance`` and the step times are
    :func:`kvmath.speculative.speculative_decode`'s (strict bounds; a
    ``draft`` of None costs nothing).
    """
    spec = dep.speculate(batch, context, gamma, acceptance, draft)
    expected = float(spec.expected_tokens)
    kept = min(gamma, math.floor(expected - 1))
    draft_name = None if draft is None else (kvmath.Model.preset(draft) if isinstance(draft, str) else draft).display_name
    fig, ax = _canvas(4.9, ymax=82)
    ax.set_ylim(-6, 82)
    w, gap, x0 = min(11.0, 72.0 / (gamma + 1)), 1.2, 26
    ax.text(0, 71, f"draft: {gamma}\ntokens", fontsize=FONT, va="center")
    ax.text(0, 49, f"target: one\npass over {gamma + 1}\npositions", fontsize=FONT, va="center")
    ax.text(0, 29, "kept", fontsize=FONT, va="center")
    for k in range(gamma):
        _box(ax, x0 + k * (w + gap), 67, w, 8, f"d{k + 1}", color=DRAFT)
        _arrow(ax, (x0 + k * (w + gap) + w / 2, 66.5), (x0 + k * (w + gap) + w / 2, 55.5), width=1.0)
    _box(ax, x0 - 1, 42, (gamma + 1) * (w + gap) + 0.8, 13, color=COMPUTE)
    for k in range(gamma + 1):
        if k < kept:
            mark, color = "\u2713", "white"       # the draft agrees with the target: kept
        elif k == kept:
            mark, color = ("\u2717" if k < gamma else "+1"), (REJECT if k < gamma else WEIGHTS)
        else:
            mark, color = "\u2013", FREE          # after the first rejection: dropped
        _box(ax, x0 + k * (w + gap), 44.5, w, 8, mark, color=color)
    for k in range(kept + 1):
        _box(ax, x0 + k * (w + gap), 25, w, 8, f"d{k + 1}" if k < kept else f"t{k + 1}",
             color="white" if k < kept else WEIGHTS)
    ax.text(0, 16, f"a = {acceptance:g}, \u03b3 = {gamma}: {expected:.2f} tokens a step expected", fontsize=FONT,
            va="center")
    ax.text(0, 10, f"verify {fmt_seconds(spec.verify_step_s)}, plain step {fmt_seconds(spec.plain_step_s)}",
            fontsize=FONT, va="center")
    drafting = "a free draft" if draft_name is None else f"draft {draft_name}: {fmt_seconds(spec.draft_s)}"
    ax.text(0, 4, f"{drafting}; speed-up {float(spec.speedup):.2f}\u00d7", fontsize=FONT, va="center")
    ax.text(0, -2, f"{dep.model.display_name}, {dep.chip.display_name}, B = {batch}, S = {fmt_number(context)}",
            fontsize=FONT, va="center")
    draft_text = "a draft that costs nothing" if draft is None else (
        f"a draft ({fmt_seconds(spec.draft_s)} for its {gamma} steps)")
    alt = (f"Diagram of one speculative decoding step of {dep.model.display_name} on an {dep.chip.display_name}: "
           f"{draft_text} proposes {gamma} tokens; one pass of the target checks all {gamma + 1} positions at "
           f"once, in {fmt_seconds(spec.verify_step_s)} against {fmt_seconds(spec.plain_step_s)} for a plain step. "
           f"In the outcome drawn the first {kept} drafts are accepted, the next is replaced by the target's own "
           f"token and the rest are dropped, {kept + 1} tokens in all. With each draft accepted with probability "
           f"{acceptance:g} a step yields {expected:.2f} tokens on average, a speed-up of "
           f"{float(spec.speedup):.2f} times.")
    return _done(fig, alt)
