"""Chapter 01's figures: the roofline (Llama 3 8B's weight matmuls on an H100 SXM and the other chips)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.formatting import fmt_seconds

from . import chip_options, figure


# The chapter counts the bytes of every weight matmul exactly, activations included (eq. roofline-matmul);
# kvmath has no such count (it reads the weights only), so the chapter's rule lives here, once, and the
# notebook imports it.
def weight_matmuls(m):
    """Shapes (d_in, d_out) and counts of every weight matmul of a dense transformer."""
    d, q, kv, f = m.d_model, m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.d_ff
    per_layer = [(d, q), (d, kv), (d, kv), (q, d)]  # Q, K, V, O projections
    per_layer += [(d, f)] * (m.mlp_matrices - 1) + [
        (f, d)
    ]  # MLP: gate and up, then down
    shapes = [(i, o, m.n_layers) for i, o in per_layer] + [(d, m.vocab, 1)]  # + LM head
    return np.array(shapes, dtype=float).T  # rows: d_in, d_out, count


def matmul_flops_and_bytes(m, batch, bytes_w=2, bytes_act=2):
    """FLOPs and bytes moved by all weight matmuls for `batch` input rows, as in eq. roofline-matmul."""
    d_in, d_out, count = weight_matmuls(m)
    b = np.asarray(batch, dtype=float)[..., None]
    flops = (2 * b * d_in * d_out * count).sum(axis=-1)
    moved = ((bytes_w * d_in * d_out + bytes_act * b * (d_in + d_out)) * count).sum(
        axis=-1
    )
    return flops, moved


def first_batch_at_ridge(model, chip, bytes_w=2, bytes_act=2, dtype="bf16", largest=65536):
    """The first whole batch at which the weight matmuls' intensity, activations counted, reaches the chip's ridge.

    Eq. roofline-matmul on every batch 1 .. ``largest``; the weights-only figure is ``C b_w / (2 W)``.
    """
    grid = np.arange(1, largest + 1)
    reached = F.arithmetic_intensity(*matmul_flops_and_bytes(model, grid, bytes_w, bytes_act)) >= chip.ridge_point(dtype)
    if not reached.any():
        raise ValueError(f"{model.name}: the weight matmuls stay below the ridge up to a batch of {largest}")
    return int(grid[np.argmax(reached)])


def _intensity(model, batch):
    return F.arithmetic_intensity(*matmul_flops_and_bytes(model, batch))


@figure
def step_at_batch_1(model: str = "llama-3-8b", chip: str = "h100-sxm", batch: int = 1, context: int = 1024):
    """One decode step of ``model`` on one ``chip``: the time to read the weights against their arithmetic (bf16)."""
    import kvbook.plots as kp

    step = kvmath.Deployment(model, chip).step(batch, context)
    parts = {"read the weights": step.weight_read_s,
             "do their arithmetic": step.weight_compute_s}
    fig, ax = kp.new_figure(figsize=(7.0, 2.1))
    with kp.style():
        ms = [s * 1e3 for s in parts.values()]
        ax.barh(list(parts), ms, color=kp.COLORS[:2])
        for k, t in enumerate(parts.values()):
            ax.text(t * 1e3, k, f"  {fmt_seconds(t)}", va="center")
        ax.invert_yaxis()
        ax.set_xlim(0, 1.35 * max(ms))
        ax.set_xlabel("time per decode step (ms)")
        ax.grid(axis="y", visible=False)
    return fig


@figure
def roofline_h100(model: str = "llama-3-8b", chip: str = "h100-sxm", prompt_tokens: int = 2048):
    """The chip's bf16 roofline with ``model``'s weight matmuls decoding one sequence and prefilling a prompt."""
    import kvbook.plots as kp

    m, c = kvmath.Model.preset(model), kvmath.Chip.preset(chip)
    intensity_decode = float(_intensity(m, 1))
    intensity_prefill = float(_intensity(m, prompt_tokens))
    fig, ax = kp.new_figure(figsize=(7.0, 4.2))
    with kp.style():
        art = kp.roofline(
            ax,
            c.flops("bf16"),
            c.bandwidth,
            intensity_range=(0.25, 8192),
            points={
                f"decode, B = 1\nI = {intensity_decode:.2f}": intensity_decode,
                f"prefill, {prompt_tokens} tokens\nI = {intensity_prefill:.0f}": intensity_prefill,
            },
            label=f"{c.display_name}, bf16",
        )
        prefill_note = list(art["points"].values())[1][1]
        prefill_note.set_horizontalalignment("center")
        prefill_note.set_verticalalignment("top")
        prefill_note.xyann = (0, -10)  # under the point, clear of the ridge line
        ax.legend(loc="upper left")
    return fig


@figure
def intensity_vs_batch(model: str = "llama-3-8b", chip: str = "h100-sxm", max_batch: int = 4096):
    """Intensity of ``model``'s bf16 weight matmuls against the rows B, exact and I = B, with the chip's ridge."""
    import kvbook.plots as kp

    m = kvmath.Model.preset(model)
    alpha = kvmath.Chip.preset(chip).ridge_point("bf16")
    grid = np.arange(1, max_batch + 1)
    intensity_grid = _intensity(m, grid)
    batch_at_ridge = int(grid[np.argmax(intensity_grid >= alpha)])
    fig, ax = kp.new_figure(figsize=(7.0, 4.0))
    with kp.style():
        ax.plot(grid, intensity_grid, label=f"{m.display_name} weight matmuls, exact")
        ax.plot(grid, grid, linestyle=":", label="I = B (weights only)")
        ax.axhline(alpha, color="0.25", linewidth=1.2)
        ax.text(
            1.2,
            alpha * 1.15,
            f"H100 ridge alpha = {alpha:.0f}",
            fontsize=9,
            color="0.25",
        )
        kp.mark_vline(ax, batch_at_ridge, f"B = {batch_at_ridge}", y=0.3)
        kp.log_batch_axis(ax, label="rows per matmul B (batch, or prompt tokens)")
        ax.set_yscale("log")
        ax.set_ylabel("arithmetic intensity (FLOPs / byte)")
        ax.legend(loc="upper left")
    return fig


#: The live roofline's batches: 1 ... 4096, log-spaced.
BATCHES = [2**k for k in range(13)]


@figure
def roofline_live(model: str = "llama-3-8b", chip: str = "h100-sxm", batch: int = 1):
    """Roofline of the chosen chip with the operating point of ``model``'s weight matmuls at the chosen batch."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    m = kvmath.Model.preset(model)
    chip_choices = chip_options()
    i_range = np.geomspace(0.25, 8192, 256)

    def setup(fig):
        ax = fig.add_subplot()
        chip0 = kvmath.Chip.preset("h100-sxm")
        art = kp.roofline(
            ax, chip0.flops("bf16"), chip0.bandwidth, intensity_range=(0.25, 8192)
        )
        roof, ridge = art["roof"], art["ridge"]
        ax.minorticks_off()  # minor log ticks double the time of every slider move
        (dot,) = ax.plot([1.0], [1.0], "o", color=kp.COLORS[1], markersize=9, zorder=4)
        info = kp.readout(ax)
        ax.set_xlim(0.25, 8192)
        ax.set_ylim(5e10, 1e16)

        def update(chip, batch):
            c = kvmath.Chip.preset(chip)
            peak, bw = c.flops("bf16"), c.bandwidth
            alpha = c.ridge_point("bf16")
            roof.set_data(i_range, np.minimum(peak, i_range * bw))
            ridge.move(alpha, f"ridge \u03b1 = {alpha:.0f}")
            flops, moved = matmul_flops_and_bytes(m, batch)
            i = float(F.arithmetic_intensity(flops, moved))
            rate = min(peak, i * bw)
            dot.set_data([i], [rate])
            step = max(flops / peak, moved / bw)
            bound = f"{F.binds(moved / bw, flops / peak)}-bound"
            info.set_text(
                f"{c.display_name}, bf16\n{m.display_name}, B = {batch}: I = {i:.1f} FLOPs/byte\n"
                f"{rate / 1e12:.0f} TFLOP/s = {rate / peak:.1%} of peak, "
                f"{bound}\n"
                f"weight matmuls: {step * 1e3:.2f} ms per step"
            )

        return update

    return interactive_figure(
        setup,
        controls={
            "chip": Choice(chip_choices, default=chip, label="chip"),
            "batch": Slider(BATCHES, default=batch, label="batch size B"),
        },
        main="batch",
        figsize=(7.0, 4.2),
        caption="Roofline of the chosen chip with the operating point of Llama 3 8B's weight "
        "matmuls at the chosen batch size",
        fixed_limits=True,
    )
