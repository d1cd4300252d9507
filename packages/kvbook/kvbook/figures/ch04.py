"""Chapter 04's figures: the critical batch size, where the weight matmuls overtake reading the weights."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.units import dtype_bytes

from . import chip_options, figure


def _b_crit(chip, weights: str, math: str) -> float:
    # equation ms-bcrit: C of the compute dtype, b_w of the stored weights
    return F.critical_batch(chip.flops(math), chip.bandwidth, dtype_bytes(weights))


# Two rules of the chapter that its figure and its check cells share; kvmath has neither (the notebook
# imports them from here).
def compute_fraction(model, context, batch, chip="h100-sxm"):
    """Share of the no-overlap step that the weight matmuls take (eq. bc-compute-fraction, valid for B >= B_crit).

    ``model`` and ``chip`` are presets or their names; one chip, bf16, the chip's own link.
    """
    # the step model: bytes a step really reads, matmul FLOPs, attention FLOPs (no-overlap form)
    t = kvmath.Deployment(model, chip).step(batch, context)
    return t.weight_compute_s / t.no_overlap_s


def s_half(model, chip="h100-sxm"):
    """S_1/2 = 2PW/(kC) in tokens, from eq. bc-compute-fraction: the cache reads take as long as the weight matmuls.

    ``model`` and ``chip`` are presets or their names; bf16 weights, cache and math.
    """
    m = kvmath.Model.preset(model) if isinstance(model, str) else model
    c = kvmath.Chip.preset(chip) if isinstance(chip, str) else chip
    return 2 * m.matmul_params_per_token() * c.bandwidth / (m.kv_bytes_per_token() * c.flops("bf16"))


@figure
def bc_crossing(model: str = "kipply-52b", chip: str = "a100-40gb", bandwidth: float = 1.5e12,
                other_chip: str = "h100-sxm"):
    """Time per step on one chip of ``model`` (bf16): reading the weights against their matmuls, by batch.

    ``chip`` at kipply's rounded ``bandwidth`` (bytes/s) against ``other_chip``; each B_crit is marked.
    """
    import kvbook.plots as kp

    kipply_a100 = kvmath.Chip.preset(chip).replace(bandwidth=bandwidth)
    other = kvmath.Chip.preset(other_chip)
    p52 = kvmath.Model.preset(model).param_count()
    batch = np.geomspace(1, 1024, 97)
    fig, ax = kp.new_figure((7, 3.6))
    read_s = F.weight_bytes(p52, 2) / kipply_a100.bandwidth
    ax.plot(
        batch,
        np.full_like(batch, read_s),
        color=kp.COLORS[2],
        label="read the weights, $P b_w / W$ (1.5e12 B/s)",
    )
    for c, style, label in [
        (kipply_a100, "-", "A100 (312e12 FLOP/s)"),
        (other, "--", "H100 SXM (989.4e12 FLOP/s)"),
    ]:
        ax.plot(
            batch,
            F.weight_flops_per_step(batch, p52) / c.flops("bf16"),
            color=kp.COLORS[1],
            ls=style,
            label=f"weight matmuls, $2PB/C$, {label}",
        )
    ax.plot(
        batch,
        np.full_like(batch, F.weight_bytes(p52, 2) / other.bandwidth),
        color=kp.COLORS[2],
        ls="--",
        label="read the weights, H100 (3.35e12 B/s)",
    )
    kp.log_batch_axis(ax)
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time per step on one chip")
    b_kipply, b_other = _b_crit(kipply_a100, "bf16", "bf16"), _b_crit(other, "bf16", "bf16")
    kp.mark_vline(ax, b_kipply, f"B_crit = {b_kipply:.0f}", y=0.25)
    kp.mark_vline(ax, b_other, f"{b_other:.0f}", y=0.12, color=kp.COLORS[3])
    ax.legend(loc="upper left", fontsize=8)
    return fig


#: The models of the compute-share figure (Llama 3.1: documented to 131,072 tokens).
PLOT_MODELS = ("llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "falcon-7b")


@figure
def bc_fraction(models: tuple = PLOT_MODELS, chip: str = "h100-sxm", marked: str = "llama-3.1-70b"):
    """Share of the step that is compute-bound at B_crit (bf16) against the context, for each of ``models``.

    Solid up to each model's documented context, dotted past it; S_1/2 of ``marked`` is marked.
    """
    import kvbook.plots as kp

    c = kvmath.Chip.preset(chip)
    contexts = 2.0 ** np.arange(7, 18)  # 128 .. 131,072 tokens
    bcrit = _b_crit(c, "bf16", "bf16")
    s_half_marked = s_half(marked, c)
    fig, ax = kp.new_figure((7, 3.6))
    for i, name in enumerate(models):
        m = kvmath.Model.preset(name)
        fraction = compute_fraction(m, contexts, bcrit, c)
        inside = contexts <= (
            m.supported_context or np.inf
        )  # solid up to the documented context
        ax.plot(
            contexts[inside],
            fraction[inside],
            color=kp.COLORS[i],
            label=f"{name} ({m.attention.upper()}, g = {m.group_size})",
        )
        if (
            not inside.all()
        ):  # dotted past it: the arithmetic of a context the model was not trained for
            last = np.flatnonzero(inside)[-1]
            ax.plot(contexts[last:], fraction[last:], color=kp.COLORS[i], ls=":")
            ax.plot(
                [contexts[last]],
                [fraction[last]],
                "|",
                color=kp.COLORS[i],
                ms=10,
                mew=2,
            )
    kp.log_context_axis(ax)
    ax.set_ylabel("share of the step that is compute-bound")
    ax.set_ylim(0, 1)
    ax.axhline(0.5, color="0.5", lw=0.8, ls=":")
    kp.mark_vline(ax, s_half_marked, f"S_1/2 = {s_half_marked:,.0f} ({marked})", y=0.97)
    ax.legend(loc="upper right", fontsize=8)
    return fig


#: The live figure's batches.
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


@figure
def bcrit_live(batch: int = 128, chip: str = "h100-sxm", weights: str = "bf16", math: str = "bf16",
               model: str = "llama-3.1-70b", n_chips: int = 8):
    """The two weight terms of a decode step of ``model`` split over ``n_chips`` against the batch, crossing at B_crit."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    N_SPLIT = n_chips
    # the weights a step reads and multiplies (the embedding is only looked up)
    P70 = kvmath.Model.preset(model).matmul_params_per_token()
    B_GRID = np.geomspace(1, 2048, 97)
    CHIP_OPTIONS = chip_options()

    def setup(fig):
        ax = fig.add_subplot()
        (read_line,) = ax.plot(
            B_GRID, B_GRID, color=kp.COLORS[2], label="read the weights, $P b_w / (N W)$"
        )
        (math_line,) = ax.plot(
            B_GRID, B_GRID, color=kp.COLORS[1], label="weight matmuls, $2PB / (N C)$"
        )
        (read_dot,) = ax.plot([1], [1], "o", ms=8, color=kp.COLORS[2], zorder=4)
        (math_dot,) = ax.plot([1], [1], "o", ms=8, color=kp.COLORS[1], zorder=4)
        crit = kp.mark_vline(ax, 100.0, "B_crit")
        kp.log_batch_axis(ax)
        ax.set_xlim(1 / 1.25, 2048 * 1.25)  # room for the dots at both ends
        ax.set_yscale("log")
        kp.seconds_axis(ax, "y", "ms", f"time per step ({N_SPLIT} chips)")
        ax.legend(loc="upper left", fontsize=8)
        note = ax.set_title("", loc="left", fontsize=9)

        def update(batch, chip, weights, math):
            c = kvmath.Chip.preset(chip)
            if math not in c.flops_by_dtype:
                for artist in (
                    read_line,
                    math_line,
                    read_dot,
                    math_dot,
                    crit.line,
                    crit.text,
                ):
                    artist.set_visible(False)
                note.set_text(
                    f"{c.display_name} has no {math} rate (it has: {', '.join(sorted(c.flops_by_dtype))})"
                )
                return
            for artist in (read_line, math_line, read_dot, math_dot, crit.line, crit.text):
                artist.set_visible(True)
            w, fl = N_SPLIT * c.bandwidth, N_SPLIT * c.flops(math)
            b_w = dtype_bytes(weights)
            read_s = F.weight_bytes(P70, b_w) / w
            read_line.set_ydata(np.full_like(B_GRID, read_s))
            math_line.set_ydata(2 * P70 * B_GRID / fl)
            now_math = 2 * P70 * batch / fl
            ax.set_ylim(
                min(read_s, 2 * P70 / fl) / 3, max(read_s, 2 * P70 * B_GRID[-1] / fl) * 3
            )
            read_dot.set_data([batch], [read_s])
            math_dot.set_data([batch], [now_math])
            memory_bound = F.binds(read_s, now_math) == "memory"
            read_dot.set_markerfacecolor(kp.COLORS[2] if memory_bound else "white")
            math_dot.set_markerfacecolor("white" if memory_bound else kp.COLORS[1])
            bc = F.critical_batch(c.flops(math), c.bandwidth, b_w)
            crit.move(bc, f"B_crit = {bc:.0f}")
            note.set_text(
                f"{c.display_name}, {weights} weights, {math} math.\n"
                f"B = {batch}: read {read_s * 1e3:.2f} ms, math "
                f"{now_math * 1e3:.2f} ms: "
                f"{'memory' if memory_bound else 'compute'}-bound"
            )

        # Fixed margins rather than constrained layout, so that a slider move only redraws.
        fig.set_layout_engine("none")
        fig.subplots_adjust(left=0.1, right=0.95, bottom=0.14, top=0.86)
        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "chip": Choice(CHIP_OPTIONS, default=chip, label="chip"),
            "weights": Choice(
                ["bf16", "int8", "fp8", "int4"], default=weights, label="weights stored in"
            ),
            "math": Choice(["bf16", "int8", "fp8"], default=math, label="matmuls run in"),
        },
        main="batch",
        figsize=(7, 3.8),
        caption="The two weight terms of a decode step against batch size, crossing at the "
        "critical batch size",
        fixed_limits=True,
    )
