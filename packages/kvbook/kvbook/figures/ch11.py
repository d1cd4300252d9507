"""Chapter 11's figures: serving (the frontier, prefill-decode interference, a day's load in chips, the steady state live)."""

from __future__ import annotations

import numpy as np

import kvmath

from . import chip_options, figure, model_options

#: The frontier figure's batches: 72 from 1 to 4,096 (each curve also gets its largest batch that fits).
FRONTIER_BATCHES = np.unique(np.round(np.geomspace(1, 4096, 72)))


@figure
def serving_frontier(models: list = ("llama-3-8b", "mixtral-8x7b"), chip: str = "h200", s_in: int = 1000,
                     s_out: int = 1000, tpot_limit_s: float = 0.020):
    """Output tokens/s per chip against tokens/s per user of each model on one ``chip``, bf16.

    Solid: static batches, prefill included (``Deployment.frontier``); dashed:
    continuous batching's steady state (``Deployment.steady_state``); each
    curve ends at the largest batch whose caches fit (dot). Both charge a
    mixture of experts' weights at the k-expert floor (the bound); dotted, for
    such a model, its static batches under uniform routing (an estimate: a
    batch touches more experts). The vertical line is the limit
    ``tpot_limit_s`` per output token.
    """
    import kvbook.plots as kp

    fig, ax = kp.new_figure((7, 3.8))
    for i, name in enumerate(models):
        on_chip = kvmath.Deployment(name, chip)
        shown = on_chip.model.display_name or on_chip.model.name   # the legend names the model, not its preset id
        best = on_chip.frontier(s_in, s_out, tpot_limit_s=tpot_limit_s)  # every batch 1 .. 4096
        grid = np.union1d(FRONTIER_BATCHES, best.max_batch)             # the curve ends at the cap
        f = on_chip.frontier(s_in, s_out, batch=grid, tpot_limit_s=tpot_limit_s)
        s = on_chip.steady_state(grid, s_in, s_out)
        fits = f.fits[:, 0]
        ax.plot(f.tokens_per_s_per_user[fits, 0], f.throughput_per_chip[fits, 0], color=kp.COLORS[i],
                label=f"{shown}, static batches")
        ax.plot(np.asarray(s.tokens_per_s_per_user)[fits], np.asarray(s.output_tokens_per_s_per_chip)[fits],
                color=kp.COLORS[i], ls="--", label=f"{shown}, continuous (steady state)")
        last = np.flatnonzero(fits)[-1]
        ax.plot([f.tokens_per_s_per_user[last, 0]], [f.throughput_per_chip[last, 0]], "o", color=kp.COLORS[i],
                ms=5)
        if on_chip.model.n_experts:
            u = on_chip.frontier(s_in, s_out, batch=grid, tpot_limit_s=tpot_limit_s, routing="uniform")
            ax.plot(u.tokens_per_s_per_user[fits, 0], u.throughput_per_chip[fits, 0], color=kp.COLORS[i], ls=":",
                    label=f"{shown}, static, uniform routing")
            ax.plot([u.tokens_per_s_per_user[last, 0]], [u.throughput_per_chip[last, 0]], "o", color=kp.COLORS[i],
                    ms=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens/s per user (1 / time per output token)")
    ax.set_ylabel("output tokens/s per chip")
    ax.set_xlim(3, 700)
    ax.set_ylim(30, 4e4)
    kp.mark_vline(ax, 1 / tpot_limit_s, f"TPOT limit {tpot_limit_s * 1e3:.0f} ms", y=0.1)
    ax.legend(loc="lower left", fontsize=8)
    kp.close(fig)  # shown once, as the cell's result
    return fig


def compute_bound_chunk(chunks, mixed) -> int:
    """The first of ``chunks`` (ascending prefill chunk sizes) whose mixed step ``mixed`` is compute-bound.

    ``mixed`` is ``Deployment.mixed_step(batch, context, chunks)``: the knee
    c* of chapter 11, where FLOPs / C first exceed bytes / W (exact, the
    chunk's attention and cache included, unlike eq. serving-knee).
    """
    chunks = np.asarray(chunks)
    over = np.asarray(mixed.compute_s > mixed.memory_s)
    if not over.any():
        raise ValueError(f"chunks: no chunk up to {int(chunks[-1])} tokens makes the step compute-bound")
    return int(chunks[np.argmax(over)])


@figure
def interference(model: str = "llama-3-8b", chip: str = "h100-sxm", batch: int = 64, context: int = 2000,
                 max_chunk: int = 8192):
    """One mixed step of ``batch`` decode sequences at ``context`` plus a prefill chunk of 0 .. ``max_chunk`` tokens.

    The strict bound of ``Deployment.mixed_step`` with its memory and compute
    times, bf16 on one ``chip``; c* marks the first chunk that makes the step
    compute-bound.
    """
    import kvbook.plots as kp

    chunks = np.arange(0, max_chunk + 1)
    mixed = kvmath.Deployment(model, chip).mixed_step(batch, context, chunks)
    knee = compute_bound_chunk(chunks, mixed)
    fig, ax = kp.new_figure((7, 3.6))
    ax.plot(chunks, mixed.strict_s, color=kp.COLORS[0], label="strict bound of the mixed step")
    ax.plot(chunks, mixed.memory_s, color=kp.COLORS[2], ls="--", label="bytes / W")
    ax.plot(chunks, mixed.compute_s, color=kp.COLORS[1], ls=":", label="FLOPs / C")
    ax.set_xlabel("prompt tokens in the step (chunk size c)")
    kp.seconds_axis(ax, "y", "ms", "time per step")
    ax.set_xlim(0, 8192)
    ax.set_ylim(0, 0.14)
    kp.mark_vline(ax, knee, f"c* = {knee}", y=0.5)
    ax.legend(loc="upper left", fontsize=8)
    kp.close(fig)  # shown once, as the cell's result
    return fig


def day_rates(peak_rps: float = 72.0, trough_rps: float = 8.0, peak_hour: float = 15.0) -> np.ndarray:
    """Requests/s in each hour of a day (0 .. 23): a sinusoid from ``trough_rps`` to ``peak_rps``, highest at
    ``peak_hour``. The chapter's illustrative day, not a measured trace."""
    hours = np.arange(24)
    mid, half = (peak_rps + trough_rps) / 2, (peak_rps - trough_rps) / 2
    return mid + half * np.cos(2 * np.pi * (hours - peak_hour) / 24)


@figure
def day_load(model: str = "llama-3-8b", chip: str = "h100-sxm", max_chips: int = 16, peak_rps: float = 72.0,
             trough_rps: float = 8.0, s_in: int = 2000, s_out: int = 200, ttft_target_s: float = 0.5,
             tpot_target_s: float = 0.02):
    """A day's request rate (top) and the fewest chips that serve each hour within the targets (bottom).

    ``kvmath.sizing.size`` over the 24 hours of :func:`day_rates`, one call
    per kind of times: TTFT at the 90th percentile within ``ttft_target_s``,
    mean TPOT within ``tpot_target_s``. The bottom panel draws the sizing from
    the step bounds and from the step estimates, with the estimates' 80%
    interval shaded (crosses: hours no layout of up to ``max_chips`` serves at
    its high end); the dashed line is the bounds' peak kept all day.
    """
    import kvbook.plots as kp
    from kvmath.sizing import size

    rates = day_rates(peak_rps, trough_rps)
    targets = (model, chip, max_chips, ttft_target_s, tpot_target_s, s_in, s_out)
    bound = size(*targets, arrival_rate=rates)
    est = size(*targets, arrival_rate=rates, times="estimate")
    hours = np.arange(24)
    fig, (top, bottom) = kp.new_figure((7, 4.8), nrows=2, sharex=True)
    top.step(hours, rates, where="mid", color=kp.COLORS[0])
    top.set_ylabel("requests/s")
    top.set_ylim(0, peak_rps * 1.15)
    chips = np.asarray(bound.n_chips)
    low = np.asarray(est.at_low.n_chips, dtype=float)
    served = np.asarray(est.at_high.feasible)
    high = np.where(served, np.asarray(est.at_high.n_chips, dtype=float), max_chips)
    bottom.fill_between(hours, low, high, step="mid", color=kp.COLORS[2], alpha=0.25, lw=0,
                        label="estimates' 80% interval")
    bottom.step(hours, np.asarray(est.n_chips), where="mid", color=kp.COLORS[2], label="from the step estimates")
    bottom.plot(hours[~served], np.full((~served).sum(), max_chips), "x", color=kp.COLORS[2], ms=5,
                label=f"high end: more than {max_chips} chips")
    bottom.step(hours, chips, where="mid", color=kp.COLORS[1], label="from the step bounds")
    bottom.axhline(chips.max(), color="0.4", ls="--", lw=1, label="bounds, sized for the peak")
    bottom.set_ylabel("chips")
    bottom.set_ylim(0, max_chips * 1.9)
    bottom.set_xlabel("hour of the day")
    bottom.set_xlim(-0.5, 23.5)
    bottom.set_xticks(range(0, 24, 3))
    bottom.legend(loc="upper left", fontsize=8, ncol=2)
    kp.close(fig)  # shown once, as the cell's result
    return fig


SLIDER_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
#: The live figure's curve: 96 batches from 1 to 4,096.
CURVE = np.unique(np.round(np.geomspace(1, 4096, 96)))
#: The live figure's choices, by the presets' display names.
MODELS = model_options(["llama-3-8b", "mixtral-8x7b", "qwen2.5-7b"])
CHIPS = chip_options(["h200", "h100-sxm", "mi300x"])


@figure
def serving_live(batch: int = 64, model: str = "llama-3-8b", chip: str = "h200", s_in: int = 1000,
                 s_out: int = 1000, price_per_chip_hour: float = 2.00):
    """The steady-state frontier of ``model`` on one ``chip``, the point at ``batch`` and its cost per million output tokens.

    ``price_per_chip_hour`` is the reader's price (any currency), not a quote.
    A mixture of experts is drawn under uniform routing (an estimate: the
    k-expert floor would keep its small-batch speed at every batch), a dense
    model at its bound; the readout says which.
    """
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    def setup(fig):
        ax = fig.add_subplot()
        (curve,) = ax.plot([1.0], [1.0], color=kp.COLORS[0], label="steady state, batches that fit")
        (point,) = ax.plot([1.0], [1.0], "o", color=kp.COLORS[1], ms=8, zorder=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens/s per user")
        ax.set_ylabel("output tokens/s per chip")
        ax.set_xlim(5, 2000)
        ax.set_ylim(30, 1e5)
        ax.legend(loc="lower left", fontsize=8)
        # the readout sits above the axes, where no curve can reach it
        note = ax.text(0.0, 1.02, "", transform=ax.transAxes, ha="left", va="bottom",
                       fontsize=9)

        def update(batch, model, chip):
            served = kvmath.Deployment(model, chip)
            routing = "uniform" if served.model.n_experts else "floor"
            f = served.frontier(s_in, s_out, batch=CURVE)
            fits = f.fits[:, 0]
            if not fits.any():
                curve.set_visible(False)
                point.set_visible(False)
                note.set_text(f"{served.model.display_name or model}: the weights do not fit on one "
                              f"{served.chip.display_name or chip}")
                return
            s = served.steady_state(CURVE[fits], s_in, s_out, routing=routing)
            curve.set_data(s.tokens_per_s_per_user, s.output_tokens_per_s_per_chip)
            curve.set_visible(True)
            top = int(f.max_batch[0])
            b = min(batch, top)
            p = served.steady_state(b, s_in, s_out, price_per_chip_hour=price_per_chip_hour, routing=routing)
            point.set_data([float(p.tokens_per_s_per_user)], [float(p.output_tokens_per_s_per_chip)])
            point.set_visible(True)
            capped = f", the largest that fits ({batch} chosen)" if batch > top else ""
            kind = ", uniform routing (an estimate)" if routing == "uniform" else ""
            note.set_text(f"B = {b}{capped}{kind}: {float(p.tokens_per_s_per_user):.0f} tok/s per user, "
                          f"{float(p.output_tokens_per_s_per_chip):,.0f} tok/s per chip\n"
                          f"{float(p.cost_per_million_tokens):.3f} per million output tokens at "
                          f"{price_per_chip_hour:.2f} per chip-hour")

        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(SLIDER_BATCHES, default=batch, label="batch B"),
            "model": Choice(MODELS, default=model, label="model"),
            "chip": Choice(CHIPS, default=chip, label="chip"),
        },
        main="batch",
        figsize=(7, 3.8),
        caption="Steady-state serving frontier with the operating point at batch B and its cost per million output tokens",
        fixed_limits=True,
    )
