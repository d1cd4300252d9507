"""Chapter 02's figures: the KV cache per token of every model preset, and its size against the context."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.formatting import fmt_bytes, fmt_number
from kvmath.memory import memory_budget
from kvmath.units import dtype_bytes

from . import chip_options, figure, model_options


@figure
def kvcache_presets(long_context: int = 32768):
    """KV cache bytes per token (bf16) of every model preset, by attention design.

    Hatched bars: the average per token over ``long_context`` tokens, for
    models with sliding-window layers.
    """
    import kvbook.plots as kp

    models = [kvmath.Model.preset(name) for name in kvmath.Model.presets()]
    full = np.array([m.kv_bytes_per_token(2) for m in models])
    at_long = np.array([m.kv_bytes_per_token(2, context=long_context) for m in models])
    order = np.argsort(full)

    def past(m):  # the long-context average lies past the model's documented context
        return m.supported_context is not None and m.supported_context < long_context

    names = [
        models[i].name + (" *" if past(models[i]) and at_long[i] < full[i] else "")
        for i in order
    ]
    colors = {
        "mha": kp.COLORS[1],
        "gqa": kp.COLORS[0],
        "mqa": kp.COLORS[2],
        "mla": kp.COLORS[3],
    }

    fig, ax = kp.new_figure(figsize=(7.0, 5.2))
    with kp.style():
        y = np.arange(len(order))
        ax.barh(
            y, full[order], color=[colors[models[i].attention] for i in order], height=0.7
        )
        windowed = [k for k, i in enumerate(order) if at_long[i] < full[i]]
        ax.barh(
            y[windowed],
            at_long[order][windowed],
            color="white",
            alpha=0.55,
            height=0.7,
            hatch="//",
            edgecolor="0.3",
            label=f"average at {long_context // 1024}K tokens (sliding windows;\n*: past the documented context)",
        )
        ax.set_yticks(y, names)
        ax.set_xscale("log", base=2)
        kp.bytes_axis(ax, "x", "KiB", "KV cache per token, bf16")
        ax.grid(axis="y", visible=False)
        for kind, color in colors.items():
            ax.barh([np.nan], [np.nan], color=color, label=kind.upper())
        ax.legend(loc="lower right")
    return fig


#: The live figure's contexts (1K ... 1M tokens), batches and KV formats (label, dtype).
CONTEXTS = [2**k for k in range(10, 21)]
BATCHES = [2**k for k in range(9)]
KV_DTYPES = [
    ("bf16 (2 bytes)", "bf16"),
    ("fp8 (1 byte)", "fp8"),
    ("int8 (1 byte)", "int8"),
    ("int4 (0.5 byte, scales not counted)", "int4"),
    ("fp8, fp32 scale per 128 (8.25 bits)", "fp8-g128"),
    ("KIVI 2-bit, fp16 scale + min per 32 (3 bits)", "kivi2-g32"),
]


@figure
def kvcache_live(model: str = "codellama-7b", context: int = 8192, batch: int = 16, kv_dtype: str = "bf16",
                 chip: str = "a100-80gb"):
    """KV cache size against context for the chosen model, batch and KV format, with one chip's HBM."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    context_grid = np.unique(np.geomspace(1024, 2**20, 96).astype(int))
    model_choices, chip_choices = model_options(), chip_options()

    def setup(fig):
        ax = fig.add_subplot()
        (kv_line,) = ax.plot([], [], label="KV cache")
        (total_line,) = ax.plot([], [], linestyle="--", label="weights (bf16) + KV cache")
        hbm_line = ax.axhline(1.0, color="0.25", linewidth=1.2, label="memory of one chip")
        (dot,) = ax.plot([], [], "o", color=kp.COLORS[0], markersize=8, zorder=4)
        info = kp.readout(ax)
        kp.log_context_axis(ax)
        ax.set_xlim(1024 / 1.2, 2**20 * 1.2)  # room for the dot at both ends
        ax.set_xticks([2**k for k in range(10, 21, 2)])
        ax.set_yscale("log")
        kp.bytes_axis(ax, "y", "GB", "memory")
        ax.yaxis.set_major_formatter(kp.bytes_formatter("GB"))
        ax.minorticks_off()  # minor log ticks double the time of every slider move
        legend = ax.legend(loc="lower right")
        log_x = np.log(ax.get_xlim())
        x_frac = (np.log(context_grid) - log_x[0]) / (log_x[1] - log_x[0])

        def update(model, context, batch, kv_dtype, chip):
            m, c = kvmath.Model.preset(model), kvmath.Chip.preset(chip)
            # the memory the device reports where the preset knows it (the page's convention), else the marketed size
            kind = "reported" if c.device_bytes else "device"
            hbm = memory_budget(c, kind)
            b = dtype_bytes(kv_dtype)
            weights = F.weight_bytes(m.param_count(), 2)
            curve = batch * m.kv_bytes_per_seq(context_grid, b)
            kv_line.set_data(context_grid, curve)
            total_line.set_data(context_grid, curve + weights)
            hbm_line.set_ydata([hbm, hbm])
            kv = batch * m.kv_bytes_per_seq(context, b)
            dot.set_data([context], [kv])
            chips = F.min_chips_for_weights(kv + weights, hbm)  # weights and cache alike
            documented = (
                ""
                if m.supported_context is None or context <= m.supported_context
                else f"\npast the documented {m.supported_context:,} tokens"
            )
            info.set_text(
                f"{m.display_name}, B = {batch}, {kv_dtype} cache{documented}\n"
                f"one {c.display_name}: {hbm / 1e9:.1f} GB "
                f"({'reported' if kind == 'reported' else 'marketed'})\n"
                f"KV cache at S = {fmt_number(context)}: "
                f"{fmt_bytes(kv)}\n"
                f"= {kv / hbm:.2f} x the memory of one chip\n"
                f"weights + KV need at least {chips} "
                f"chip{'s' if chips > 1 else ''}"
            )
            low = min(curve.min(), hbm)
            high = max(curve.max() + weights, hbm)
            lo, hi = np.log(low / 2), np.log(high * 3)
            # keep every line below the note (top left) and above the legend (bottom right)
            renderer = fig.canvas.get_renderer()
            note = ax.transAxes.inverted().transform(info.get_window_extent(renderer))
            key = ax.transAxes.inverted().transform(legend.get_window_extent(renderer))
            left = x_frac <= note[1, 0] + 0.02
            top = np.log(max((curve + weights)[left].max(), hbm))
            bottom = np.log(min(curve[x_frac >= key[0, 0] - 0.02].min(), hbm))
            a, b = key[1, 1] + 0.03, 1.03 - note[0, 1]  # fractions kept free
            for _ in range(30):
                hi = max(hi, (top - b * lo) / (1 - b))
                lo = min(lo, (bottom - a * hi) / (1 - a))
            ax.set_ylim(np.exp(lo), np.exp(hi))
            unit = "TB" if np.exp(hi) >= 1e14 else "GB"  # tick labels at most 5 digits
            ax.yaxis.set_major_formatter(kp.bytes_formatter(unit))
            ax.set_ylabel(f"memory ({unit})")

        return update

    return interactive_figure(
        setup,
        controls={
            "model": Choice(model_choices, default=model, label="model"),
            "context": Slider(
                CONTEXTS,
                default=context,
                label="context S (tokens)",
                fmt=lambda s: f"{s // 1024}K" if s < 2**20 else f"{s // 2**20}M",
            ),
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "kv_dtype": Choice(KV_DTYPES, default=kv_dtype, label="KV dtype"),
            "chip": Choice(chip_choices, default=chip, label="chip"),
        },
        main="context",
        figsize=(7.0, 4.2),
        caption="KV cache size against context length for the chosen model, batch and KV "
        "format, with the memory of the chosen chip (reported where known); the note says when the context is "
        "past the model's documented context",
        fixed_limits=True,
    )
