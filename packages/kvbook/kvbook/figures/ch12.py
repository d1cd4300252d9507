"""Chapter 12's figures: the reality check (MBU of each decode row, the multi-chip gap, predicted against measured).

The rows are the chapter's (its Row and Gap objects, built from
kvmath.calibration's table of measurements: its keys and labels, each
row's step at S_avg, its all-reduce estimate); the notebook passes each
figure the numbers it draws, as JSON values, so the page's live layer
redraws the live figure from the same numbers. Those numbers are the
chapter's own computation, so every figure here requires them: no default
can keep up with the table.
"""

from __future__ import annotations

import numpy as np

import kvmath

from . import figure

#: gpt-fast's README: its power-capped A100s reach "about 1700 GB/s" (bytes/s).
GPTFAST_A100_BANDWIDTH = 1700e9
#: The sources' display names (as the chapter's rows name them).
GF, TRT, POPE, LCPP = "gpt-fast", "TensorRT-LLM", "Pope et al.", "llama.cpp"

def _source_colors():
    import kvbook.plots as kp

    return {GF: kp.COLORS[0], TRT: kp.COLORS[1], POPE: kp.COLORS[2], LCPP: kp.COLORS[3]}


@figure
def mbu(rows: list, run_phi: float, run_phi_row: str = "7"):
    """Model bandwidth utilisation of each decode row: the bytes a step reads per chip / measured time / W.

    ``rows`` (required: the chapter's Rows): (key, label, source, MBU) per
    decode row, top to bottom reversed; row ``run_phi_row`` also gets its
    whole-run phi ``run_phi`` (required: its ``bound_for`` ratio), a diamond.
    The dotted line is gpt-fast's observed A100 bandwidth, over its rows only.
    Bars are coloured by source, each named in the legend.
    """
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp

    colors = _source_colors()
    a100 = kvmath.Chip.preset("a100-80gb")
    fig, ax = kp.new_figure((7.2, 4.4))
    rows = list(rows)[::-1]
    y = np.arange(len(rows))
    named = set()
    for i, (key, _, source, share) in enumerate(rows):
        # each source named once in the legend (review C12-1: the colours were explained nowhere on the figure)
        ax.barh(i, share, color=colors[source], height=0.65, label=None if source in named else source)
        named.add(source)
        ax.text(share, i, f" {share:.0%}", va="center", fontsize=8)
        if key == run_phi_row:
            ax.plot([run_phi], [i], "D", color="0.15", ms=6, label=f"row {run_phi_row}: whole-run \u03c6")
    gf_rows = [i for i, r in enumerate(rows) if r[2] == GF]  # the ceiling applies to gpt-fast's A100s only
    ax.vlines(GPTFAST_A100_BANDWIDTH / a100.bandwidth, min(gf_rows) - 0.45, max(gf_rows) + 0.45, color="0.4",
              ls=":", lw=1.2, label='gpt-fast\'s A100 ceiling ("about 1700 GB/s")')
    ax.set_yticks(y, [f"{key}  {label}" for key, label, _, _ in rows])
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("model bandwidth utilisation (of the datasheet bandwidth)")
    ax.grid(axis="y", visible=False)
    ax.set_ylim(-0.6, len(rows) + 1.9)  # room for the legend's two lines above the top row
    ax.legend(loc="upper center", ncol=3, fontsize=8)
    kp.close(fig)  # shown once, as the cell's result
    return fig


@figure
def comm(gaps: list):
    """The multi-chip rows, each bar a share of the measured step time, bar ends labelled in ms.

    ``gaps`` (required: the chapter's Gaps): (key, label, bound without
    communication, + communication physics, + measured all-reduce latency,
    measured) per row, seconds.
    """
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp

    fig, ax = kp.new_figure((7.2, 4.4))
    STAGES = [
        ("bound (no communication)", kp.COLORS[0]),
        ("+ communication physics", kp.COLORS[2]),
        ("+ measured all-reduce latency (estimate)", kp.COLORS[1]),
        ("measured", "0.45"),
    ]
    h = 0.19
    gaps = list(gaps)
    for i, (_, _, bound_s, comm_s, estimate_s, t_meas_s) in enumerate(gaps[::-1]):
        ends = [bound_s, bound_s + comm_s, bound_s + estimate_s, t_meas_s]
        for j, ((label, color), end) in enumerate(zip(STAGES, ends)):
            y = i + (1.5 - j) * h
            ax.barh(y, end / t_meas_s, height=0.9 * h, color=color, label=label if i == 0 else None)
            ax.text(end / t_meas_s, y, f" {end * 1e3:.2f} ms", va="center", fontsize=7)
    ax.set_yticks(range(len(gaps)), [f"{gp[0]}  {gp[1]}" for gp in gaps[::-1]])
    ax.set_ylim(-0.5, len(gaps) + 0.25)
    ax.set_xlim(0, 1.2)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("share of the measured step time")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper center", ncol=2, fontsize=7.5)
    kp.close(fig)  # shown once, as the cell's result
    return fig


FRACTIONS = [round(f, 2) for f in np.arange(0.25, 1.0001, 0.05)]


@figure
def reality_live(*, row: str = "1", fraction: float = 0.7, rows: list):
    """Predicted against measured throughput of a published decode row, for an assumed fraction of peak W and C.

    ``rows`` (required: the chapter's decode Rows): one mapping per decode
    row (key, label, batch, context, unit_s: the whole run's bound per step,
    ratio: phi, t_meas_s, kind, n_chips, binds), as the chapter computes them.
    """
    from matplotlib.ticker import PercentFormatter

    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    by_key = {r["key"]: r for r in rows}

    def rate_unit(case):
        if case["kind"] == "seq" or case["kind"] == "latency":
            return "tokens/s per sequence"
        return "output tokens/s" + (f", all {case['n_chips']} GPUs" if case["n_chips"] > 1 else "")

    def setup(fig):
        ax = fig.subplots()
        grid = np.linspace(0.2, 1.0, 33)
        (pred_line,) = ax.plot([], [], color="0.15", lw=2, label="predicted (bound at this fraction)")
        meas_line = ax.axhline(1.0, color=kp.COLORS[1], lw=1.6, ls="--", label="measured")
        (dot,) = ax.plot([], [], "o", color="0.15", ms=7, zorder=4)
        cross = kp.mark_vline(ax, 0.5, "")
        ax.set_xlim(0.2, 1.03)  # room for the marker at 100%
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel("fraction of peak bandwidth and FLOP/s")
        ax.legend(loc="lower right", fontsize=8)
        info = ax.set_title("", fontsize=8.5, loc="left")

        def update(row, fraction):
            case = by_key[row]
            batch = case["batch"]
            per_step_full = case["unit_s"]  # the whole run's bound per step, prefill included
            meas_rate = batch / case["t_meas_s"]
            pred = batch * grid / per_step_full  # the bound scales as 1 / fraction
            pred_line.set_data(grid, pred)
            meas_line.set_ydata([meas_rate, meas_rate])
            dot.set_data([fraction], [batch * fraction / per_step_full])
            phi = case["ratio"]
            cross.move(min(max(phi, 0.2), 1.0), f"\u03c6 = {phi:.0%}")
            ax.set_ylim(0, 1.15 * max(pred[-1], meas_rate))
            ax.set_ylabel(rate_unit(case))
            binds = case["binds"]  # one fraction for W and C: what binds does not move
            info.set_text(f"row {row}: {case['label']}, B = {batch}, S_avg = {case['context']}\n"
                          f"predicted {batch * fraction / per_step_full:,.1f}, measured {meas_rate:,.1f} "
                          f"tokens/s; steps bound by {binds}")

        fig.set_layout_engine("none")
        fig.subplots_adjust(left=0.11, right=0.97, bottom=0.16, top=0.85)
        return update

    return interactive_figure(
        setup,
        controls={
            "row": Choice([(f"{r['key']}: {r['label']}", r["key"]) for r in rows], default=row, label="row"),
            "fraction": Slider(FRACTIONS, default=fraction, label="fraction of peak", fmt=lambda f: f"{f:.0%}"),
        },
        main="fraction",
        figsize=(6.4, 3.4),
        caption="Predicted against measured throughput of a published decode measurement, "
        "for an assumed fraction of peak bandwidth and FLOP/s",
        fixed_limits=True,
    )
