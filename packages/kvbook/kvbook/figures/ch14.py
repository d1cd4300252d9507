"""Chapter 14's figures: measure your machine (its roofline, the numpy decode step's knee, the sweep live).

Every figure draws this machine's measurements (kvmath.measure). The
chapter measures once and draws several figures, so it passes what it
measured as arguments (W, C and the sweep's step times, JSON numbers); called
without them, a function measures at the chapter's sizes itself. The page's
live layer gets the build machine's measurements as arguments, which is why
these figures keep the build's frames (``MEASURES_THE_MACHINE``).
"""

from __future__ import annotations

import numpy as np

from kvmath import formulas as F
from kvmath import measure

from . import MEASURES_THE_MACHINE, figure

#: The chapter's sizes: bytes per bandwidth pass, the matmul's side, timed repeats.
N_BYTES, N_MATMUL, REPEATS = 128e6, 1024, 3
#: The numpy decode step: width, layers, the main sweep's context and batches, every context swept.
D_MODEL, N_LAYERS, S_MAIN = 2048, 2, 16
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
CONTEXTS = [16, 64, 256, 1024]
#: B * S at most in the sweep: caches as large as the weights.
MAX_CACHED_TOKENS = 4096
#: Bytes per float32 weight.
B_W = 4


def _rates(bandwidth, flops):
    """W and C as given, or measured here at the chapter's sizes (bytes/s, FLOP/s)."""
    if bandwidth is None:
        bandwidth = max(measure.memory_bandwidth(N_BYTES, repeats=REPEATS, method=m) for m in ("copy", "read"))
    if flops is None:
        flops = measure.matmul_flops(N_MATMUL, dtype=np.float32, repeats=REPEATS)
    return float(bandwidth), float(flops)


def _sweep(steps, bandwidth, flops, d_model, n_layers):
    """The sweep's medians, (batch, context) -> step_s, as given or measured here, and W and C."""
    if steps is None:
        configs = [(b, s) for s in CONTEXTS for b in BATCHES if b * s <= MAX_CACHED_TOKENS]
        runs = measure.decode_sweep(configs, d_model=d_model, n_layers=n_layers, steps=3)
        steps = [[r.batch, r.context, r.median_step_s] for r in runs]
    return {(int(b), int(s)): float(t) for b, s, t in steps}, *_rates(bandwidth, flops)


@figure(static=MEASURES_THE_MACHINE)
def roofline(bandwidth: float | None = None, flops: float | None = None, n_matmul: int = N_MATMUL):
    """The roofline of this machine from its measured ``bandwidth`` (bytes/s) and float32 matmul rate ``flops``.

    Dots: the weight matmuls of a float32 decode step at B = 1, 4, 64 and the
    ``n_matmul`` product that measured C. Without W or C, it measures them.
    """
    import kvbook.plots as kp

    W, C = _rates(bandwidth, flops)
    fig, ax = kp.new_figure((7, 4))
    points = {
        "decode, B = 1": 2 * 1 / B_W,
        "decode, B = 4": 2 * 4 / B_W,
        "decode, B = 64": 2 * 64 / B_W,
        f"matmul n = {n_matmul}": n_matmul / 6,
    }
    kp.roofline(ax, C, W, intensity_range=(0.1, 4 * n_matmul / 6), points=points, label="this machine, float32",
                flops_unit="GFLOP/s")
    ax.legend(loc="upper left")
    kp.close(fig)  # shown once, as the cell's result
    return fig


@figure(static=MEASURES_THE_MACHINE)
def knee(steps: list | None = None, bandwidth: float | None = None, flops: float | None = None,
         context: int = S_MAIN, d_model: int = D_MODEL, n_layers: int = N_LAYERS):
    """The numpy decode step at ``context``: measured medians against the min-step bound from the measured W and C.

    ``steps``: the sweep's [batch, context, step_s] rows (seconds) of the
    step of width ``d_model`` and ``n_layers`` layers; left, time
    per step with the bound's two weight terms; right, tokens/s of the whole
    batch. B_crit is this machine's. Without arguments, it measures.
    """
    import kvbook.plots as kp

    measured, W, C = _sweep(steps, bandwidth, flops, d_model, n_layers)
    batches = sorted(b for b, s in measured if s == context)
    step_meas = np.array([measured[(b, context)] for b in batches])
    b_crit = F.critical_batch(C, W, B_W)
    fig, (ax_t, ax_r) = kp.new_figure((8.4, 3.8), ncols=2)
    b_grid = np.geomspace(1, batches[-1], 97)
    terms = measure.decode_loop_bound(b_grid, context, W, C, d_model, n_layers)
    ax_t.plot(b_grid, terms.strict_s, color="0.15", label="strict bound (measured W, C)")
    ax_t.plot(b_grid, terms.no_overlap_s, color="0.15", lw=1.0, ls=":", label="no-overlap form")
    ax_t.plot(b_grid, terms.weight_read_s + 0 * b_grid, color=kp.COLORS[2], lw=1.1, ls="--", label="read weights")
    ax_t.plot(b_grid, terms.weight_compute_s, color=kp.COLORS[1], lw=1.1, ls="--", label="weight matmuls")
    ax_t.plot(batches, step_meas, "o", color=kp.COLORS[0], label="measured (median)")
    ax_t.set_yscale("log")
    kp.log_batch_axis(ax_t)
    kp.seconds_axis(ax_t, "y", "ms", "time per step")
    ax_t.legend(loc="upper left", fontsize=8)
    kp.mark_vline(ax_t, b_crit, f"B_crit = {b_crit:.0f}", y=0.35)

    ax_r.plot(b_grid, b_grid / terms.strict_s, color="0.15", label="bound (strict)")
    ax_r.plot(batches, np.array(batches) / step_meas, "o", color=kp.COLORS[0], label="measured")
    kp.log_batch_axis(ax_r)
    ax_r.set_yscale("log")
    ax_r.set_ylabel("throughput (tokens/s, whole batch)")
    ax_r.legend(loc="upper left", fontsize=8)
    kp.mark_vline(ax_r, b_crit, f"B_crit = {b_crit:.0f}", y=0.35)
    kp.close(fig)  # shown once, as the cell's result
    return fig


@figure(static=MEASURES_THE_MACHINE)
def measure_live(context: int = S_MAIN, steps: list | None = None, bandwidth: float | None = None,
                 flops: float | None = None, d_model: int = D_MODEL, n_layers: int = N_LAYERS):
    """Measured numpy decode steps against the min-step bound with this machine's W and C, for a chosen context.

    ``steps``: the sweep's [batch, context, step_s] rows (seconds) of the
    step of width ``d_model`` and ``n_layers`` layers; its contexts are the
    slider's. Without arguments, it measures.
    """
    import kvbook.plots as kp
    from kvbook.interactive import Slider, interactive_figure

    measured, W, C = _sweep(steps, bandwidth, flops, d_model, n_layers)
    b_crit = F.critical_batch(C, W, B_W)
    contexts = sorted({s for _, s in measured})

    def setup(fig):
        ax = fig.add_subplot()
        grid = np.geomspace(1, 256, 97)
        (bound_line,) = ax.plot([], [], color="0.15", label="strict bound (measured W, C)")
        (kv_line,) = ax.plot([], [], color=kp.COLORS[0], lw=1.1, ls="--", label="KV cache term")
        (weights_line,) = ax.plot([], [], color=kp.COLORS[2], lw=1.1, ls="--", label="weight term, max(read, math)")
        (dots,) = ax.plot([], [], "o", color=kp.COLORS[1], label="measured (median)")
        kp.log_batch_axis(ax)
        ax.set_xlim(0.8, 320)
        ax.set_yscale("log")
        longest = measure.decode_loop_bound(grid, max(contexts), W, C, d_model, n_layers).strict_s
        all_steps = list(measured.values()) + list(longest)
        ax.set_ylim(0.5 * min(all_steps), 2 * max(all_steps))
        kp.seconds_axis(ax, "y", "ms", "time per step")
        # B_crit is named in the readout: the curves and dots move with every measurement,
        # so no place inside the axes is sure to stay clear of them
        kp.mark_vline(ax, b_crit, "", math=False)
        # the legend below the axes and the readout above them, where no curve can reach
        fig.legend(loc="outside lower center", ncol=4, fontsize=8)
        note = ax.text(0.0, 1.02, "", transform=ax.transAxes, ha="left", va="bottom", fontsize=8.5)

        def update(context):
            c = measure.decode_loop_cost(grid, context, d_model, n_layers)
            t = measure.decode_loop_bound(grid, context, W, C, d_model, n_layers)
            bound_line.set_data(grid, t.strict_s)
            kv_line.set_data(grid, t.kv_read_s)
            weights_line.set_data(grid, np.maximum(t.weight_read_s, t.weight_compute_s))
            pts = sorted((b, t) for (b, s), t in measured.items() if s == context)
            dots.set_data([b for b, _ in pts], [s for _, s in pts])
            note.set_text(
                f"S = {context} tokens: KV cache {c.kv_bytes_per_seq / 1e6:.2f} MB per sequence\n"
                f"measured at {len(pts)} batch sizes, up to B = {pts[-1][0]};"
                f" vertical dashed line: {kp.mathtext('B_crit')} = {b_crit:.0f}"
            )

        return update

    return interactive_figure(
        setup,
        controls={"context": Slider(contexts, default=context, label="context S (tokens)")},
        main="context",
        figsize=(7.2, 3.9),
        alt="Measured numpy decode steps against the min-step bound with this machine's measured rates, "
            "for a chosen context",
    )
