"""Chapter 08's figures: fitting kipply's 52B model (fp16) and its KV cache on three A100-40GB, and a planner."""

from __future__ import annotations

import itertools

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.units import GiB

from . import KIPPLY_BANDWIDTH, figure, model_options

#: kipply's notes: 52e9 parameters of 2 bytes on 3 GPUs of 40 GB, 2,048-token sequences.
P_SOURCE, N_GPU, GPU_BYTES, CONTEXT = 52e9, 3, 40e9, 2048


def _budget(params, n_gpu, gpu_bytes, b_w=2):
    """The notes' KV budget: n_gpu x gpu_bytes less the weights (params x b_w bytes)."""
    return F.kv_budget_bytes(n_gpu, gpu_bytes, F.weight_bytes(params, b_w))


@figure
def cache_by_batch(model: str = "kipply-52b", params: float = P_SOURCE, n_gpu: int = N_GPU,
                   gpu_bytes: float = GPU_BYTES, context: int = CONTEXT, max_batch: int = 6):
    """KV cache of batches of ``context``-token sequences against the notes' budget (16 GB) and 16 GiB.

    Bars that fit in the budget blue, the others orange.
    """
    import kvbook.plots as kp

    kv_token = kvmath.Model.preset(model).kv_bytes_per_token()
    budget = _budget(params, n_gpu, gpu_bytes)
    batches = np.arange(1, max_batch + 1)
    fig, ax = kp.new_figure((6.5, 3.4))
    cache = F.kv_cache_bytes(kv_token, context, batches)
    colors = [kp.COLORS[0] if c <= budget else kp.COLORS[1] for c in cache]
    ax.bar(batches, cache, color=colors, width=0.6)
    ax.axhline(budget, color="0.25", linestyle="--", linewidth=1.2)
    ax.text(0.55, budget, " budget: 16 GB", va="bottom", fontsize=9, color="0.25")
    ax.axhline(16 * GiB, color=kp.COLORS[2], linestyle=":", linewidth=1.4)
    ax.text(
        max_batch + 0.45,
        16 * GiB,
        "16 GiB ",
        va="bottom",
        ha="right",
        fontsize=9,
        color=kp.COLORS[2],
    )
    ax.set_xlabel("batch size B (sequences of 2,048 tokens)")
    kp.bytes_axis(ax, "y", "GB", "KV cache")
    ax.set_xticks(batches)
    return fig


@figure
def step_by_batch(model: str = "kipply-52b", chip: str = "a100-40gb", bandwidth: float = KIPPLY_BANDWIDTH,
                  params: float = P_SOURCE, n_gpu: int = N_GPU, gpu_bytes: float = GPU_BYTES,
                  context: int = CONTEXT):
    """Lower bound on one decode step of the notes' model on ``n_gpu`` pooled GPUs against the batch, with its terms.

    The notes' count (``params`` x 2 bytes all read, fp16), the chip's
    bandwidth replaced by ``bandwidth``; the batches whose cache does not
    fit in the budget shaded; B_crit and the largest batch that fits marked.
    """
    import kvbook.plots as kp

    kipply = kvmath.Chip.preset(chip).replace(bandwidth=bandwidth)
    kv_seq = F.kv_bytes_per_seq(kvmath.Model.preset(model).kv_bytes_per_token(), context)
    weights = F.weight_bytes(params, 2)
    bmax_gb = F.max_batch(_budget(params, n_gpu, gpu_bytes), kv_seq)
    b_crit = F.critical_batch(kipply.flops("bf16"), kipply.bandwidth, 2)
    B = np.geomspace(1, 1024, 96)
    parts = F.step_breakdown(B, kv_seq, weights, params, n_gpu * kipply.bandwidth, n_gpu * kipply.flops("bf16"))
    fig, ax = kp.new_figure((7, 3.8))
    ax.plot(B, parts.no_overlap_s, color="black", label="min-step, no-overlap form")
    ax.plot(B, parts.strict_s, color="black", ls=":", label="strict lower bound")
    ax.plot(B, parts.kv_read_s, label="read the KV cache, $BS\\,\\mathrm{KV}/W$")
    ax.plot(B, parts.weight_read_s + 0 * B, label="read the weights, $P b_w/W$")
    ax.plot(B, parts.weight_compute_s, label="weight math, $2PB/C$")
    ax.axvspan(bmax_gb + 0.5, B[-1], color="0.85", alpha=0.5, lw=0)
    ax.text(
        40,
        0.97,
        "cache does not fit in 16 GB",
        transform=ax.get_xaxis_transform(),
        va="top",
        fontsize=9,
        color="0.3",
    )
    kp.log_batch_axis(ax)
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time per decode step")
    kp.mark_vline(ax, b_crit, f"B_crit = {b_crit:.0f}", y=0.12)
    kp.mark_vline(ax, bmax_gb, f"fits: B = {bmax_gb}", color=kp.COLORS[1], y=0.12)
    ax.set_xlim(1, 1024)
    ax.legend(loc="upper left", fontsize=8)
    return fig


#: The chips of the chapter's table and bar chart.
CHIPS = ["a100-40gb", "h100-sxm", "h200", "mi300x", "b200-hgx"]
#: The chapter's variants: (KV heads, or None for the model's own; bytes per weight; bytes per cached element).
VARIANTS = {
    "fp16 weights, fp16 KV, MHA": (None, 2, 2),
    "int8 weights": (None, 1, 2),
    "int8 KV": (None, 2, 1),
    "GQA, 8 KV heads": (8, 2, 2),
    "all three": (8, 1, 1),
}


def plan(model, chip, kv_heads, b_w, b_kv, contexts=(2048, 8192)):
    """The chapter's table row: the fewest chips that hold fp16 weights, their KV budget, the largest batches.

    The multi-head parameter count throughout (``kv_heads`` changes the cache
    only); the chip's reported memory where the preset knows it, else its
    marketed memory. Returns the memory counted (``memory``: "reported" or
    "device", and ``memory_bytes``), ``chips``, the KV ``budget`` in bytes,
    the ``tokens`` that fit, ``max_batch`` by context and ``b_crit`` for
    ``b_w``-byte weights at bf16 math.
    """
    m = model if kv_heads is None else model.with_kv_heads(kv_heads)
    memory = "reported" if chip.device_bytes else "device"  # the real bytes where the preset knows them
    p = model.param_count()
    n = F.min_chips_for_weights(F.weight_bytes(p, 2), kvmath.memory.memory_budget(chip, memory))
    kv_budget = F.kv_budget_bytes(n, chip, F.weight_bytes(p, b_w), budget=memory)
    return {
        "memory": memory,
        "memory_bytes": kvmath.memory.memory_budget(chip, memory),
        "chips": n,
        "budget": kv_budget,
        "tokens": F.max_kv_tokens(kv_budget, m.kv_bytes_per_token(b_kv)),
        "max_batch": {s: F.max_batch(kv_budget, m.kv_bytes_per_seq(s, b_kv)) for s in contexts},
        "b_crit": F.critical_batch(chip.flops("bf16"), chip.bandwidth, b_w),
    }


@figure
def largest_batch_by_chip(model: str = "kipply-52b", chips: list = tuple(CHIPS), context: int = CONTEXT):
    """Largest batch of ``context``-token sequences for each variant on each chip, against B_crit (fp16, int8)."""
    import kvbook.plots as kp

    m = kvmath.Model.preset(model)
    fig, ax = kp.new_figure((7.5, 3.8))
    names = list(VARIANTS)
    width = 0.8 / len(names)
    x = np.arange(len(chips))
    for j, v in enumerate(names):
        ax.bar(
            x + (j - (len(names) - 1) / 2) * width,
            [max(plan(m, kvmath.Chip.preset(c), *VARIANTS[v], (context,))["max_batch"][context], 0.8) for c in chips],
            width=width,
            label=v,
            color=kp.COLORS[j],
        )
    for i, c in enumerate(chips):
        for b_w_, style in ((2, "-"), (1, ":")):
            bc = F.critical_batch(
                kvmath.Chip.preset(c).flops("bf16"), kvmath.Chip.preset(c).bandwidth, b_w_
            )
            ax.hlines(bc, i - 0.45, i + 0.45, color="black", linestyle=style, linewidth=1.5)
    ax.plot([], [], color="black", label="B_crit, fp16 weights")
    ax.plot([], [], color="black", linestyle=":", label="B_crit, int8 weights")
    ax.set_yscale("log", base=2)
    kp.log_batch_axis(ax, "y", "largest batch at S = 2,048 (sequences)")
    ax.set_ylim(0.7, 16384)
    ax.set_xticks(
        x,
        [
            kvmath.Chip.preset(c)
            .display_name.replace("NVIDIA ", "")
            .replace("AMD Instinct ", "")
            for c in chips
        ],
    )
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    return fig


#: The planner's models, chips (by key) and contexts.
PLANNER_MODELS = [
    "kipply-52b",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-405b",
    "mistral-7b-v0.1",
    "qwen2.5-7b",
    "gemma-2-9b",
    "falcon-7b",
    "falcon-40b",
    "starcoder",
    "codellama-7b",
]
PLANNER_CHIP_NAMES = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "mi300x", "b200", "tpu-v5e", "l4"]
CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def planner_chips():
    """The planner's chips by key: kipply's A100 (1.5 TB/s) first, then the presets."""
    chips = {"a100-kipply": kvmath.Chip.preset("a100-40gb").replace(bandwidth=KIPPLY_BANDWIDTH)
             .replace(display_name="A100 (kipply: 1.5 TB/s)")}
    chips.update({c: kvmath.Chip.preset(c) for c in PLANNER_CHIP_NAMES})
    return chips


@figure
def planner(model: str = "kipply-52b", chip: str = "a100-kipply", n_chips: int = 3, split: str = "batch",
            weight_dtype: str = "fp16", kv_dtype: str = "fp16", context: int = CONTEXT):
    """Throughput bound of the chosen model against batch size, with the largest batch that fits and B_crit marked."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    PLANNER_CHIPS = planner_chips()
    BATCH_GRID = np.geomspace(1, 4096, 97)  # 1 .. 4096 sequences

    def planner_setup(fig):
        ax = fig.add_subplot()
        (fits,) = ax.plot([], [], color=kp.COLORS[0], label="cache fits")
        (nofit,) = ax.plot(
            [],
            [],
            color=kp.COLORS[0],
            alpha=0.25,
            linestyle="--",
            label="cache does not fit",
        )
        # the two labels sit in the headroom above the curves, one row each
        bcrit = kp.mark_vline(ax, 208, "B_crit", y=0.97)
        bmax = kp.mark_vline(ax, 3, "largest batch", color=kp.COLORS[1], y=0.89)
        # the readout sits above the axes, where no line can cross it
        note = ax.text(
            0.0, 1.02, "", transform=ax.transAxes, ha="left", va="bottom", fontsize=9
        )
        kp.log_batch_axis(ax)
        kp.log_batch_axis(
            ax, "y", "tokens/s for the whole batch (upper bound)"
        )  # plain log2 ticks
        ax.set_xlim(1, 4096)
        legend = ax.legend(loc="lower right", fontsize=8)

        def place_labels():
            # each label beside its own line, else beside the other one: on a side
            # that stays inside the axes and that no other marker's line crosses
            shown = [mk for mk in (bcrit, bmax) if mk.line.get_visible()]
            to_axes = ax.transAxes.inverted()
            xs = [mk.line.get_xdata()[0] for mk in shown]
            fx = [to_axes.transform(ax.transData.transform((x, 1.0)))[0] for x in xs]
            renderer = fig.canvas.get_renderer()
            for mk, own in zip(shown, fx):
                if own > 1:  # beyond the largest batch drawn: named at the right edge
                    mk.text.set_text(f"{mk.label} \u2192 ")
                    mk.text.set_x(ax.get_xlim()[1])
                    mk.text.set_horizontalalignment("right")
                    continue
                mk.text.set_text(f" {mk.label} ")
                width = mk.text.get_window_extent(renderer).width / ax.bbox.width
                sides = [
                    (x, f, ha, lo, lo + width)
                    for x, f in sorted(zip(xs, fx), key=lambda p: abs(p[1] - own))
                    for ha, lo in (("left", f), ("right", f - width))
                ]
                for x, f, ha, lo, hi in sides:
                    if 0 <= lo and hi <= 1 and not any(lo < g < hi for g in fx):
                        mk.text.set_x(x)
                        mk.text.set_horizontalalignment(ha)
                        break
            # the legend sits below the curves, where no marker's line passes: at the
            # lower right or centre, else in the widest gap between the lines and the edges
            edges = sorted([0.0, 1.0] + [f for f in fx if 0 < f < 1])
            gap = max(itertools.pairwise(edges), key=lambda p: p[1] - p[0])
            for loc, anchor in (
                ("lower right", (1, 0)),
                ("lower center", (0.5, 0)),
                ("lower center", ((gap[0] + gap[1]) / 2, 0)),
            ):
                legend.set_loc(loc)
                legend.set_bbox_to_anchor(anchor, transform=ax.transAxes)
                box = legend.get_window_extent(renderer).transformed(to_axes)
                if not any(box.x0 < f < box.x1 for f in fx):
                    break

        def hide(text):
            fits.set_data([], [])
            nofit.set_data([], [])
            bmax.line.set_visible(False)
            bmax.text.set_visible(False)
            note.set_text(text)

        def update(**values):
            draw(**values)
            place_labels()

        def draw(model, chip, n_chips, split, weight_dtype, kv_dtype, context):
            m, c = kvmath.Model.preset(model), PLANNER_CHIPS[chip]
            w = m.weight_bytes_resident(weight_dtype)  # capacity: every weight
            # the memory the device reports where the preset knows it (the chapter's table does the same)
            budget = "reported" if c.device_bytes else "device"
            memory = kvmath.memory.memory_budget(c, budget)
            # the matmuls run at the format's own rate (fp8 and int8 are W8A8, int4-g128 weight-only)
            b_crit_here = kvmath.Deployment(m, c, weights=weight_dtype).critical_batch()
            bcrit.move(b_crit_here, f"B_crit = {b_crit_here:.0f}")
            if w > n_chips * memory:
                need = F.min_chips_for_weights(w, memory)
                hide(
                    f"{w / 1e9:.0f} GB of weights do not fit on {n_chips} x {memory / 1e9:.0f} GB;"
                    f" need {need} chips"
                )
                return
            if split == "heads" and m.n_heads % n_chips:
                hide(
                    f"tensor parallelism by heads: {n_chips} chips do not divide\n"
                    f"the {m.n_heads} heads of {m.name}; split by batch instead"
                )
                return
            # by heads: tensor parallelism, each chip holds ceil(h_kv / N) heads of every sequence;
            # by batch: each chip holds the caches of its own sequences (no communication counted)
            layout = f"tp={n_chips}" + (",kv=batch" if split == "batch" else "")
            dep = kvmath.Deployment(m, c, layout, link=None, weights=weight_dtype, kv=kv_dtype)
            try:
                fit = dep.capacity(context, budget=budget)  # each chip's memory less its share of the weights
            except ValueError:  # the busiest chip's share of the weights alone does not fit
                hide(f"{w / 1e9:.0f} GB of weights do not fit on {n_chips} x {memory / 1e9:.0f} GB")
                return
            b_max = int(fit.max_batch)
            kv_budget = n_chips * fit.kv_budget_bytes_per_chip

            def chip_step(batch):
                return dep.step(batch, context)

            def batch_tokens_per_s(batch):
                return F.tokens_per_s(chip_step(batch).strict_s, batch)

            # solid up to the largest batch that fits, faint beyond it (both include b_max)
            x_fit = (
                np.append(BATCH_GRID[BATCH_GRID < b_max], b_max)
                if b_max >= 1
                else np.array([])
            )
            x_nofit = np.insert(BATCH_GRID[BATCH_GRID > b_max], 0, max(b_max, 1))
            fits.set_data(x_fit, batch_tokens_per_s(x_fit) if x_fit.size else [])
            nofit.set_data(x_nofit, batch_tokens_per_s(x_nofit))
            tps = batch_tokens_per_s(BATCH_GRID)
            ax.set_ylim(tps.min() / 4, tps.max() * 12)  # headroom: labels above, legend below
            visible = b_max >= 1
            bmax.line.set_visible(visible)
            bmax.text.set_visible(visible)
            if visible:
                bmax.move(b_max, f"largest batch = {b_max:,}")
                t = chip_step(b_max)
                where = "below" if b_max < b_crit_here else "at or above"
                note.set_text(
                    f"KV budget {kv_budget / 1e9:.1f} GB, split by {split}: {b_max:,} sequences of {context:,} tokens\n"
                    f"{where} B_crit: {t.binds}-bound, step >= {t.strict_s * 1e3:.1f} ms, "
                    f"{F.tokens_per_s(t.strict_s, b_max):,.0f} tok/s"
                )
            else:
                note.set_text(
                    f"KV budget {kv_budget / 1e9:.1f} GB: not one sequence of {context:,} tokens fits"
                )
            if m.supported_context is not None and context > m.supported_context:
                note.set_text(
                    note.get_text()
                    + f"\nbeyond {m.name}'s supported context ({m.supported_context:,} tokens)"
                )

        return update

    return interactive_figure(
        planner_setup,
        controls={
            "model": Choice(model_options(PLANNER_MODELS), default=model, label="model"),
            "chip": Choice(
                [(c.display_name, k) for k, c in PLANNER_CHIPS.items()],
                default=chip,
                label="chip",
            ),
            "n_chips": Slider([1, 2, 3, 4, 6, 8, 16], default=n_chips, label="chips"),
            "split": Choice(
                [("by batch", "batch"), ("by heads (TP)", "heads")],
                default=split,
                label="cache split",
            ),
            "weight_dtype": Choice(
                ["fp16", ("fp8 (fp8 math)", "fp8"), ("int8 (int8 math)", "int8"),
                 ("int4-g128 (bf16 math)", "int4-g128")],
                default=weight_dtype,
                label="weights",
            ),
            "kv_dtype": Choice(
                ["fp16", "fp8", "int8", "int4"], default=kv_dtype, label="KV cache"
            ),
            "context": Slider(
                CONTEXTS, default=context, label="context S (tokens)", fmt=lambda s: f"{s:,}"
            ),
        },
        main="context",
        figsize=(7.5, 4.0),
        relayout=True,  # the y tick labels change width with the model and chip
        caption="Throughput bound of the chosen model against batch size, with the largest "
        "batch that fits and B_crit marked",
        fixed_limits=True,
    )
