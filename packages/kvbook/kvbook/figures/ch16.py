"""Chapter 16's figures: pitfalls (windows charged in full, live; the calculator-to-kvmath ratio of each pitfall)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas

from . import figure

#: Presets with sliding-window layers drawn live (gpt-oss-120b's curve is gpt-oss-20b's).
WINDOWED = ("mistral-7b-v0.1", "gemma-2-9b", "gemma-3-27b", "gpt-oss-20b")
S_GRID = np.unique(np.round(2.0 ** np.arange(9, 17.01, 0.125)).astype(int))
CONTEXTS = [2**k for k in range(10, 18)]


def _window_ratio(m, context):
    # the calculator's figure (every layer charged for every token: eq. pit-plain) over kvmath's, one sequence
    return formulas.kv_bytes_per_token(m.n_layers, m.n_kv_heads, m.head_dim) * context / m.kv_bytes_per_seq(context)


@figure
def windows_live(context: int = CONTEXTS[3], models: list = WINDOWED):
    """The calculator's KV cache of one sequence over kvmath's against context, for presets with windows (bf16).

    Dotted: past the model's documented context; the marker and the table
    on the right are at ``context``.
    """
    import kvbook.plots as kp
    from kvbook.interactive import Slider, interactive_figure

    windowed = [kvmath.Model.preset(n) for n in models]

    def setup(fig):
        grid = fig.add_gridspec(1, 2, width_ratios=[2.6, 1.0])
        ax, side = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
        lines = []
        for color, m in zip(kp.COLORS, windowed):
            inside = S_GRID <= m.supported_context
            lines += ax.plot(S_GRID[inside], _window_ratio(m, S_GRID[inside]), color=color)
            ax.plot(S_GRID[~inside], _window_ratio(m, S_GRID[~inside]), color=color, linestyle=":")
        kp.log_context_axis(ax)
        ax.set_xticks(2 ** np.arange(9, 18, 2))
        ax.set_xlim(S_GRID[0], S_GRID[-1])
        ax.set_ylim(0.8, 7.0)
        ax.set_ylabel("calculator / kvmath")
        marker = kp.mark_vline(ax, CONTEXTS[3], "", math=False)
        side.axis("off")
        side.legend(lines, [m.name + (" (and -120b)" if m.name == "gpt-oss-20b" else "") for m in windowed],
                    loc="upper left", fontsize=9, frameon=False)
        note = side.text(0.0, 0.45, "", transform=side.transAxes, va="top", fontsize=9, family="monospace")

        def update(context):
            marker.move(context, "")
            note.set_text(f"at S = {context:,}\n" + "\n".join(
                f"{m.name:16s}{_window_ratio(m, context):6.2f}" + ("*" if context > m.supported_context else "")
                for m in windowed) + ("\n* beyond the documented\n  context" if any(
                    context > m.supported_context for m in windowed) else ""))

        return update

    return interactive_figure(setup, controls={"context": Slider(CONTEXTS, default=context, label="context S",
                                                                 fmt=lambda s: f"{s:,}")},
                              figsize=(8.0, 4.2), fixed_limits=True,
                              caption="Windows charged in full: the calculator's KV cache of one sequence over "
                                      "kvmath's, against context, for presets with sliding-window layers (bf16). "
                                      "Dotted: past the model's documented context.")


@figure
def ratios(pitfalls: list):
    """The calculator's figure over kvmath's for each pitfall, on a log scale.

    ``pitfalls`` (required: the chapter's own computation, one section per
    pitfall): [label, ratio of the summary table's preset, [ratios of every
    preset the chapter computed]] per pitfall. Filled: the summary's
    preset (blue above 1, orange below); hollow: the others.
    """
    import matplotlib.ticker as mticker

    import kvbook.plots as kp

    labels = [label for label, _, _ in pitfalls]
    fig, ax = kp.new_figure((8, 1.6 + len(labels) / 3))    # a third of an inch a pitfall
    for y, (label, ratio, others) in enumerate(pitfalls):
        ax.plot(others, [y] * len(others), "o", mfc="none", color="0.55", ms=6, zorder=2)
        ax.plot([ratio], [y], "o", color=kp.COLORS[0] if ratio > 1 else kp.COLORS[1], ms=8, zorder=3)
    ax.axvline(1.0, color="0.3", lw=1)
    ax.set_xscale("log")
    ax.set_xlim(0.03, 200)                                # room for the left label inside the axes
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_xlabel("calculator / kvmath (log scale)")
    ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.text(1.06, -0.38, "overstates \u2192", ha="left", va="center", fontsize=10, color="0.3")
    ax.text(0.94, len(labels) - 0.62, "\u2190 understates", ha="right", va="center", fontsize=10, color="0.3")
    kp.close(fig)  # shown once, as the cell's result
    return fig
