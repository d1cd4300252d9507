"""Chapter 03's figures: the notes' min-step (the no-overlap form) for the 30B example on a TPU v5e 4x4 slice."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.units import dtype_bytes

from . import figure

# The notes' example (the scaling book's): 16 TPU v5e chips at the notes' 8.2e11 B/s each (the preset holds
# 8.19e11), a 30e9-parameter model, 8,192 tokens of context and 100 kB (1e3 B) of KV cache per token.
N_CHIPS = 16
BANDWIDTH = 8.2e11
PARAMS = 30e9
CONTEXT = 8192
KV_PER_TOKEN = 100e3


def _slice(chip: str, bandwidth: float):
    """The example's chip with the notes' bandwidth (bytes/s per chip)."""
    return kvmath.Chip.preset(chip).replace(bandwidth=bandwidth)


def _term_colors():
    import kvbook.plots as kp

    return {"kv": kp.COLORS[0], "read": kp.COLORS[2], "math": kp.COLORS[1]}


def _draw_step_bar(ax, y, t, height=0.6, labels=False):
    # One horizontal bar per step: the KV term, then the binding weight term (solid);
    # the weight term that is hidden under it is drawn as an outline.
    term_colors = _term_colors()
    kv, read, math = float(t.kv_read_s), float(t.weight_read_s), float(t.weight_compute_s)
    binding, hidden = ("read", "math") if read >= math else ("math", "read")
    sizes = {"read": read, "math": math}
    names = {
        "kv": "KV cache (memory)",
        "read": "read weights (memory)",
        "math": "weight matmuls (compute)",
    }
    ax.barh(
        y,
        kv,
        height=height,
        color=term_colors["kv"],
        label=names["kv"] if labels else None,
    )
    ax.barh(
        y,
        sizes[binding],
        left=kv,
        height=height,
        color=term_colors[binding],
        label=f"{names[binding]}, binding" if labels else None,
    )
    ax.barh(
        y,
        sizes[hidden],
        left=kv,
        height=height * 0.45,
        fill=False,
        hatch="///",
        edgecolor=term_colors[hidden],
        linewidth=1.2,
        label=f"{names[hidden]}, hidden" if labels else None,
    )


@figure
def ms_example(chip: str = "tpu-v5e", bandwidth: float = BANDWIDTH, n_chips: int = N_CHIPS,
               params: float = PARAMS, context: int = CONTEXT, kv_per_token: float = KV_PER_TOKEN):
    """The no-overlap step of the example at batch 4 and 256, int8 and bf16 weights: its terms as bars.

    ``bandwidth`` is per chip (bytes/s); the matmuls run at the chip's bf16 rate.
    """
    import kvbook.plots as kp
    from matplotlib.patches import Patch

    c = _slice(chip, bandwidth)
    W, C = n_chips * c.bandwidth, n_chips * c.flops("bf16")
    kv_seq = F.kv_bytes_per_seq(kv_per_token, context)
    weights = {d: F.weight_bytes(params, dtype_bytes(d)) for d in ("int8", "bf16")}
    cases = [
        (f"B = {b}, {d} weights", F.step_breakdown(b, kv_seq, weights[d], params, W, C))
        for b in (4, 256) for d in ("int8", "bf16")
    ]
    term_colors = _term_colors()
    fig, ax = kp.new_figure((7, 3.6))
    for i, (name, t) in enumerate(cases):
        _draw_step_bar(ax, i, t)
        ax.text(float(t.no_overlap_s), i, f"  {t.no_overlap_s * 1e3:.2f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(cases)), [name for name, _ in cases])
    ax.invert_yaxis()
    ax.set_xlim(0, 24e-3)
    kp.seconds_axis(ax, "x", "ms", "time of one decode step, no-overlap form")
    ax.grid(axis="y", visible=False)
    ax.legend(
        handles=[
            Patch(color=term_colors["kv"], label="KV cache (memory)"),
            Patch(color=term_colors["read"], label="read weights (memory)"),
            Patch(color=term_colors["math"], label="weight matmuls (compute)"),
            Patch(
                fill=False,
                hatch="///",
                edgecolor="0.4",
                label="hidden under the larger weight term",
            ),
        ],
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=2,
    )
    return fig


@figure
def ms_curve(chip: str = "tpu-v5e", bandwidth: float = BANDWIDTH, n_chips: int = N_CHIPS,
             params: float = PARAMS, context: int = CONTEXT, kv_per_token: float = KV_PER_TOKEN,
             weights: str = "int8"):
    """Latency (the step and its three terms) and throughput of the example against the batch, 1 to 1024.

    B_crit is marked on both, and the largest batch whose caches fit in the slice's HBM.
    """
    import kvbook.plots as kp

    c = _slice(chip, bandwidth)
    W, C = n_chips * c.bandwidth, n_chips * c.flops("bf16")
    kv_seq = F.kv_bytes_per_seq(kv_per_token, context)
    p_bytes = F.weight_bytes(params, dtype_bytes(weights))
    b_crit = F.critical_batch(C, W, dtype_bytes(weights))
    batch = np.arange(1, 1025)
    steps = F.min_step(batch, kv_seq, p_bytes, params, W, C)
    throughput = F.tokens_per_s(steps, batch)
    flat_throughput = 1 / (kv_seq / W + 2 * params / C)  # equation ms-throughput-flat
    batch_fits = F.max_batch(F.kv_budget_bytes(n_chips, c.hbm_bytes, p_bytes), kv_seq)
    term_colors = _term_colors()

    fig, (ax_t, ax_r) = kp.new_figure((8.4, 3.8), ncols=2)
    b = batch.astype(float)
    terms = F.step_breakdown(b, kv_seq, p_bytes, params, W, C)
    ax_t.plot(b, steps, color="0.15", label="min-step")
    ax_t.plot(b, terms.kv_read_s, color=term_colors["kv"], lw=1.2, ls="--", label="KV cache")
    ax_t.plot(
        b,
        terms.weight_read_s + 0 * b,
        color=term_colors["read"],
        lw=1.2,
        ls="--",
        label="read weights",
    )
    ax_t.plot(
        b,
        terms.weight_compute_s,
        color=term_colors["math"],
        lw=1.2,
        ls="--",
        label="weight matmuls",
    )
    ax_t.axhline(20e-3, color="0.5", lw=0.8, ls=":")
    ax_t.text(300, 20e-3, "20 ms", va="bottom", ha="right", fontsize=8, color="0.4")
    ax_t.set_yscale("log")
    kp.log_batch_axis(ax_t)
    kp.seconds_axis(ax_t, "y", "ms", "time per step = latency per token")
    ax_t.legend(loc="upper left", fontsize=8)

    ax_r.plot(b, throughput, color="0.15", label="tokens/s, whole batch")
    ax_r.axhline(flat_throughput, color="0.5", lw=0.8, ls=":")
    kp.log_batch_axis(ax_r)
    ax_r.set_ylabel("throughput (tokens/s)")
    ax_r.axvline(batch_fits, color=kp.COLORS[3], lw=1.0)
    for ax in (ax_t, ax_r):  # batches whose caches do not fit beside the weights
        ax.axvspan(batch_fits, b.max(), color=kp.COLORS[3], alpha=0.08, lw=0)
    ax_r.text(
        batch_fits,
        0.35,
        " HBM full",
        transform=ax_r.get_xaxis_transform(),
        color=kp.COLORS[3],
        fontsize=8,
        rotation=90,
    )
    kp.mark_vline(ax_t, b_crit, f"B_crit = {b_crit:.0f}", y=0.6)
    kp.mark_vline(ax_r, b_crit, f"B_crit = {b_crit:.0f}", y=0.6)
    return fig


#: The live figure's controls' values.
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONTEXTS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
CHIP_COUNTS = [1, 2, 4, 8, 16, 32, 64]
KV_SIZES = [12.5e3, 25e3, 50e3, 100e3, 200e3, 400e3, 800e3]
WEIGHTS = [
    ("int8 weights", "int8"),
    ("bf16 weights", "bf16"),
    ("fp8 weights", "fp8"),
    ("int4 weights", "int4"),
]


@figure
def minstep_live(batch: int = 256, context: int = CONTEXT, chips: int = N_CHIPS, weights: str = "int8",
                 kv_per_token: float = KV_PER_TOKEN, chip: str = "tpu-v5e", bandwidth: float = BANDWIDTH,
                 params: float = PARAMS):
    """Terms of the notes' min-step (the no-overlap form) against the batch, and the step at the chosen batch.

    ``chip`` at ``bandwidth`` bytes/s per chip, a ``params``-parameter model.
    """
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    v5e = _slice(chip, bandwidth)
    P = params
    term_colors = _term_colors()
    b_grid = np.geomspace(1, 1024, 97)

    def setup(fig):
        ax_l, ax_r = fig.subplots(1, 2, width_ratios=[1.25, 1])
        lines = {
            "step": ax_l.plot([], [], color="0.15", lw=2.4, label="min-step")[0],
            "kv": ax_l.plot([], [], color=term_colors["kv"], lw=1.3, label="KV cache")[0],
            "read": ax_l.plot(
                [], [], color=term_colors["read"], lw=1.3, label="read weights"
            )[0],
            "math": ax_l.plot(
                [], [], color=term_colors["math"], lw=1.3, label="weight matmuls"
            )[0],
        }
        (dot,) = ax_l.plot([], [], "o", color="0.15", zorder=4)
        crit = kp.mark_vline(ax_l, 100.0, "B_crit")
        kp.log_batch_axis(ax_l)
        ax_l.set_xlim(1 / 1.25, 1024 * 1.25)  # room for the dot at both ends
        ax_l.set_yscale("log")
        kp.seconds_axis(ax_l, "y", "ms", "time per step")
        ax_l.legend(loc="upper left", fontsize=8)

        bars = {
            "kv": ax_r.barh([0], [0], height=0.6, color=term_colors["kv"])[0],
            "bind": ax_r.barh([0], [0], height=0.6, color=term_colors["read"])[0],
            "hidden": ax_r.barh(
                [0], [0], height=0.27, fill=False, hatch="///", linewidth=1.2
            )[0],
        }
        ax_r.set_ylim(-0.5, 1.7)
        ax_r.set_yticks([])
        ax_r.grid(axis="y", visible=False)
        kp.seconds_axis(ax_r, "x", "ms", "the step at this batch")
        info = ax_r.text(
            0.03,
            0.97,
            "",
            transform=ax_r.transAxes,
            va="top",
            fontsize=8.5,
            family="monospace",
        )

        def update(batch, context, chips, weights, kv_per_token):
            w, c = chips * v5e.bandwidth, chips * v5e.flops("bf16")
            p_bytes = F.weight_bytes(P, dtype_bytes(weights))
            seq = kv_per_token * context
            curve = F.step_breakdown(b_grid, seq, p_bytes, P, w, c)
            lines["step"].set_data(b_grid, curve.no_overlap_s)
            lines["kv"].set_data(b_grid, curve.kv_read_s)
            lines["read"].set_data(b_grid, np.full_like(b_grid, curve.weight_read_s))
            lines["math"].set_data(b_grid, curve.weight_compute_s)
            now = F.step_breakdown(batch, seq, p_bytes, P, w, c)
            dot.set_data([batch], [now.no_overlap_s])
            ax_l.set_ylim(
                0.5 * min(curve.kv_read_s[0], curve.weight_compute_s[0]), 2 * curve.no_overlap_s[-1]
            )
            bc = F.critical_batch(c, w, dtype_bytes(weights))
            crit.move(bc, f"B_crit = {bc:.0f}")

            kv, read, math = (
                float(now.kv_read_s),
                float(now.weight_read_s),
                float(now.weight_compute_s),
            )
            binding, hidden = ("read", "math") if read >= math else ("math", "read")
            lines[binding].set_linewidth(2.4)
            lines[hidden].set_linewidth(1.0)
            size = {"read": read, "math": math}
            bars["kv"].set_width(kv)
            bars["bind"].set_x(kv)
            bars["bind"].set_width(size[binding])
            bars["bind"].set_color(term_colors[binding])
            bars["hidden"].set_x(kv)
            bars["hidden"].set_width(size[hidden])
            bars["hidden"].set_edgecolor(term_colors[hidden])
            ax_r.set_xlim(0, 1.15 * float(now.no_overlap_s))
            hbm = chips * v5e.hbm_bytes
            need = p_bytes + batch * seq
            fits = "fits" if need <= hbm else "does NOT fit"
            info.set_text(
                f"B = {batch}: step {now.no_overlap_s * 1e3:.2f} ms\n"
                f"= KV {kv * 1e3:.2f} + max(read {read * 1e3:.2f}, math {math * 1e3:.2f})\n"
                f"{'weights memory-bound' if binding == 'read' else 'weights compute-bound'}\n"
                f"{batch / now.no_overlap_s:,.0f} tok/s; {1 / now.no_overlap_s:,.1f} per sequence\n"
                f"{need / 1e9:,.0f} GB {fits} in {chips} x 16 GB"
            )
            info.set_color("0.1" if need <= hbm else kp.COLORS[1])

        # Fixed margins rather than constrained layout, so that a slider move only redraws.
        fig.set_layout_engine("none")
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.96, wspace=0.1)
        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "context": Slider(CONTEXTS, default=context, label="context S"),
            "chips": Slider(CHIP_COUNTS, default=chips, label="chips N"),
            "weights": Choice(WEIGHTS, default=weights, label="weights"),
            "kv_per_token": Slider(
                KV_SIZES,
                default=kv_per_token,
                label="KV per token",
                fmt=lambda x: f"{x / 1e3:g} kB",
            ),
        },
        main="batch",
        figsize=(8.4, 3.6),
        caption="Terms of the notes' min-step (the no-overlap form) against batch size, and "
        "the step at the chosen batch",
        fixed_limits=True,
    )
