"""Chapter 13's figures: calibration (phi by regime, the cost per step at batch 1, the two-cost model live)."""

from __future__ import annotations

import numpy as np

from kvmath.calibration import REGIMES, calibrate

from . import figure

#: The regimes' labels on the first figure's axis.
REGIME_LABELS = {
    "batch1": "one chip, batch 1\n(16-bit weights)",
    "quantized": "one chip, batch 1\n(quantized weights)",
    "large_batch": "one chip,\nlarge batch",
    "multi_chip": "several chips",
    "moe": "mixture of experts",
    "prefill": "prefill",
}

#: The median t0 of the NVIDIA pairs (chapter 13's two-point fits of equation cal-two-costs, 3.31 ms on
#: main's table); the notebook passes the fitted value, this default only lets the function build alone.
T0_NVIDIA_MEDIAN_S = 3.3e-3


def _batch1(cal):
    """The batch-1 decode rows of one chip (16-bit and quantized weights), rates per sequence."""
    return [c for c in cal if c.measurement.regime in ("batch1", "quantized") and c.measurement.n_chips == 1
            and c.measurement.metric == "seq_tok_s"]


@figure
def regimes():
    """Each published measurement's phi (its fraction of kvmath's bound), by regime, the median marked."""
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp

    order = list(REGIMES)
    by_regime = {r: [c for c in calibrate() if c.measurement.regime == r] for r in order}
    fig, ax = kp.new_figure((7.4, 4.4))
    rng = np.random.default_rng(0)  # a fixed jitter, so the figure does not change between builds
    for i, regime in enumerate(order):
        phis = np.array([c.ratio for c in by_regime[regime]])
        ax.plot(phis, i + rng.uniform(-0.17, 0.17, phis.size), "o", color=kp.COLORS[i % len(kp.COLORS)], ms=6,
                alpha=0.85)
        med = float(np.median(phis))
        ax.plot([med, med], [i - 0.32, i + 0.32], color="0.2", lw=2)
    ax.set_yticks(range(len(order)), [REGIME_LABELS[r] for r in order])
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlim(0, 1.05)
    ax.axvline(1.0, color="0.4", lw=1, ls="--")
    ax.text(0.99, len(order) - 0.62, "the bound", ha="right", va="bottom", fontsize=8, color="0.3")
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("fraction of the bound reached, \u03c6")
    ax.grid(axis="y", visible=False)
    kp.close(fig)  # shown once, as the cell's result
    return fig


@figure
def overhead(t0_s: float = T0_NVIDIA_MEDIAN_S):
    """Batch-1 decode on one chip: phi against the bound's time per token, with a fixed cost ``t0_s`` per step alone.

    The dashed curve is equation cal-two-costs with eta = 1 (seconds per step).
    """
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp

    fig, ax = kp.new_figure((7.2, 4.2))
    for c in _batch1(calibrate()):
        colour = kp.COLORS[0] if c.measurement.regime == "batch1" else kp.COLORS[1]
        ax.plot([c.unit_s], [c.ratio], "o", color=colour, ms=6, label=REGIMES[c.measurement.regime])
    grid = np.geomspace(1e-3, 0.3, 100)
    ax.plot(grid, grid / (grid + t0_s), color="0.3", lw=1.5, ls="--",
            label=f"\u03b7 = 1, t\u2080 = {t0_s * 1e3:.1f} ms per step")
    ax.set_xscale("log")
    ax.set_xlim(1e-3, 0.3)
    ax.set_ylim(0, 1.05)
    kp.seconds_axis(ax, "x", "ms", "bound's time per token")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("fraction of the bound reached, \u03c6")
    handles, names = ax.get_legend_handles_labels()
    keep = dict(zip(names, handles))
    ax.legend(keep.values(), keep.keys(), loc="lower right", fontsize=8)
    kp.close(fig)  # shown once, as the cell's result
    return fig


T0_MS = [round(x, 1) for x in np.arange(0.0, 11.51, 0.5)]
NV_CHIPS = ("a100-80gb", "rtx-3090", "rtx-4090")


@figure
def two_costs_live(t0_ms: float = 3.5, eta: float = 1.0):
    """Equation cal-two-costs as a fraction of the bound (fixed cost ``t0_ms`` per step, bandwidth fraction ``eta``).

    Against the batch-1 rows of one chip; the title gives the median miss
    over the NVIDIA rows and over the Apple rows.
    """
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    batch1 = _batch1(calibrate())

    def setup_two_costs(fig):
        ax = fig.subplots()
        for c in batch1:
            colour = kp.COLORS[0] if c.measurement.chip in NV_CHIPS else kp.COLORS[2]
            ax.plot([c.unit_s], [c.ratio], "o", color=colour, ms=6)
        (curve,) = ax.plot([], [], color="0.2", lw=1.8, ls="--")
        grid = np.geomspace(1e-3, 0.3, 100)
        ax.set_xscale("log")
        ax.set_xlim(1e-3, 0.3)
        ax.set_ylim(0, 1.05)
        kp.seconds_axis(ax, "x", "ms", "bound's time per token")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylabel("\u03c6")
        title = ax.set_title("", fontsize=8.5, loc="left")

        def update(t0_ms, eta):
            t0 = t0_ms * 1e-3
            curve.set_data(grid, grid / (grid / eta + t0))
            miss = {}
            for name, chips in (("NVIDIA", NV_CHIPS), ("Apple", ("m2-ultra", "m3-max"))):
                rows = [c for c in batch1 if (c.measurement.chip in chips)]
                miss[name] = float(np.median([abs(c.unit_s / (c.unit_s / eta + t0) - c.ratio) for c in rows]))
            title.set_text(
                f"t\u2080 = {t0_ms:.1f} ms, \u03b7 = {eta:.0%}: median miss "
                f"{miss['NVIDIA']:.2f} (NVIDIA, blue), {miss['Apple']:.2f} (Apple, green)"
            )

        fig.set_layout_engine("none")
        fig.subplots_adjust(left=0.1, right=0.97, bottom=0.17, top=0.88)
        return update

    return interactive_figure(
        setup_two_costs,
        controls={
            "t0_ms": Slider(T0_MS, default=t0_ms, label="fixed cost t\u2080 (ms)", fmt=lambda v: f"{v:.1f} ms"),
            "eta": Choice([("100%", 1.0), ("90%", 0.9), ("80%", 0.8)], default=eta, label="\u03b7"),
        },
        main="t0_ms",
        figsize=(6.6, 3.5),
        caption="The two-cost model of a decode step (equation cal-two-costs) against the batch-1 rows of one chip: "
        "a fixed cost per step and a fraction of the bandwidth",
        fixed_limits=True,
    )
