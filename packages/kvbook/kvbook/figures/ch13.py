"""Chapter 13's figures: calibration (phi by regime; the estimate's out-of-sample errors by regime)."""

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

#: The chapter's pairs of batch-1 rows: the same model, chip and software, 16-bit then quantized weights.
PAIRS = (
    ("gf-7b-bf16", "gf-7b-int8"),
    ("pr4766-3090-7b-f16", "pr4766-3090-7b-q4_0"),
    ("xd-4090-8b-f16", "xd-4090-8b-q4km"),
    ("xd-3090-8b-f16", "xd-3090-8b-q4km"),
    ("xd-m2u-8b-f16", "xd-m2u-8b-q4km"),
    ("xd-m2u-70b-f16", "xd-m2u-70b-q4km"),
    ("xd-m3max-8b-f16", "xd-m3max-8b-q4km"),
)


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
def estimates(rows):
    """Each row's measured time over its estimate, out of sample, by regime, with the 80% interval it was given.

    ``rows``: ``[id, regime, log residual, interval low, interval high]`` per calibration row, the residuals
    ``log(measured / estimate)`` of :func:`kvmath.estimate.cross_validate` (each row estimated by a fit that had
    not seen its source) and the ends of the interval stated for it, as the chapter computes them.
    """
    from matplotlib.ticker import FuncFormatter

    import kvbook.plots as kp

    order = list(REGIMES)
    fig, ax = kp.new_figure((7.4, 4.4))
    rng = np.random.default_rng(0)  # a fixed jitter, so the figure does not change between builds
    for i, regime in enumerate(order):
        mine = [r for r in rows if r[1] == regime]
        y = i + rng.uniform(-0.2, 0.2, len(mine))
        for (_, _, resid, low, high), yy in zip(mine, y):
            inside = low <= resid <= high
            ax.plot([np.exp(low), np.exp(high)], [yy, yy], color="0.75", lw=1.2, zorder=1)
            ax.plot([np.exp(resid)], [yy], "o" if inside else "X", color=kp.COLORS[i % len(kp.COLORS)], ms=6,
                    zorder=2)
    ax.set_xscale("log")
    ax.set_xlim(0.1, 10)
    ax.axvline(1.0, color="0.4", lw=1, ls="--")
    ax.set_yticks(range(len(order)), [REGIME_LABELS[r] for r in order])
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}\u00d7"))
    ax.set_xlabel("measured time \u00f7 estimate (out of sample); grey: the 80% interval stated")
    ax.grid(axis="y", visible=False)
    kp.close(fig)  # shown once, as the cell's result
    return fig
