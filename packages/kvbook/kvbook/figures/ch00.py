"""Chapter 00's figures: a sample of the book's rhythm (kipply's 52B on an A100; a roofline)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas

from . import KIPPLY_BANDWIDTH, figure



@figure
def weights_against_math(model: str = "kipply-52b", chip: str = "a100-40gb",
                         bandwidth: float = KIPPLY_BANDWIDTH):
    """Time per decode step of ``model`` on one ``chip``: reading the weights against their matmuls, by batch.

    The whole model on one (hypothetical) chip, communication not counted;
    ``bandwidth`` replaces the chip's (bytes/s). B_crit is marked.
    """
    import kvbook.plots as kp

    a100 = kvmath.Chip.preset(chip).replace(bandwidth=bandwidth)
    batch = np.geomspace(1, 1024, 64)
    step = kvmath.Deployment(model, a100, link=None).step(batch, 1)
    b_crit = formulas.critical_batch(a100.flops("bf16"), a100.bandwidth, bytes_per_param=2)
    fig, ax = kp.new_figure((7, 3.6))
    ax.plot(batch, step.weight_read_s, label="read the weights, $P b_w / W$")
    ax.plot(batch, step.weight_compute_s, label="weight matmuls, $2PB / C$")
    kp.log_batch_axis(ax)
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time per decode step")
    kp.mark_vline(ax, b_crit, f"B_crit = {b_crit:.0f}")
    ax.legend(loc="upper left")
    return fig


#: The roofline's batches and chips (label, preset).
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CHIPS = [("H100 SXM", "h100-sxm"), ("A100 80GB", "a100-80gb"), ("TPU v5e", "tpu-v5e")]


@figure
def roofline_point(chip: str = "h100-sxm", batch: int = 16):
    """The roofline of the chosen chip with a bf16 decode step's operating point (intensity 2B / b_w = B)."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    def setup(fig):
        ax = fig.add_subplot()
        intensity = np.geomspace(0.5, 4096, 128)
        (roof,) = ax.plot(intensity, intensity)
        (point,) = ax.plot([1.0], [1.0], "o", color=kp.COLORS[1], zorder=3)
        # two lines, low: clear of the roof, which crosses the bottom left
        ridge = kp.mark_vline(ax, 1.0, "ridge", y=0.2)
        ridge.text.set_multialignment("left")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
        kp.flops_axis(ax, "y", "TFLOP/s", "attainable compute")
        ax.set_ylim(1e12, 3e15)
        note = ax.text(0.02, 0.95, "", transform=ax.transAxes, va="top", fontsize=9)

        def update(batch, chip):
            c = kvmath.Chip.preset(chip)
            flops, bandwidth = c.flops("bf16"), c.bandwidth
            roof.set_ydata(np.minimum(flops, intensity * bandwidth))
            x = 2 * batch / 2  # intensity 2B / b_w with bf16 weights
            point.set_data([x], [min(flops, x * bandwidth)])
            alpha = c.ridge_point()
            ridge.move(alpha, f"ridge \u03b1 = {alpha:.0f} FLOP/B\n(= B_crit for bf16 weights)")
            # per byte of weights: 1 / W to read it, x / C to do its x FLOPs
            bound = f"{formulas.binds(1 / bandwidth, x / flops)}-bound"
            note.set_text(f"{c.display_name}, B = {batch}: {bound}")

        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "chip": Choice(CHIPS, default=chip, label="chip"),
        },
        main="batch",
        figsize=(7, 3.6),
        caption="Roofline of the chosen chip with the decode step's operating point",
        fixed_limits=True,
    )
