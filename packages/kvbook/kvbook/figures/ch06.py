"""Chapter 06's figures: prefill, tensor parallelism, quantized weights and cache, paged KV memory."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.units import dtype_bytes

from . import figure

#: The chapter's int4 weights: int4-g128 with a 16-bit LM head and embedding table (assumed).
INT4 = {"default": "int4-g128", "lm_head": "bf16", "embedding": "bf16"}
#: Weight format by the short name the chapter uses.
FORMATS = {"bf16": "bf16", "int8": "int8", "int4": INT4}
#: The quantization figure's (weights, cache) choices.
CONFIGS = (("bf16", "bf16"), ("int8", "bf16"), ("int4", "bf16"), ("int8", "int8"), ("int4", "fp8"))
#: Tensor-parallel widths of the chapter's sweep.
N_CHIPS = [1, 2, 4, 8, 16, 32, 64]
#: The paging figure's page sizes (tokens).
PAGE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def _term_colors():
    import kvbook.plots as kp

    return {"kv": kp.COLORS[0], "read": kp.COLORS[2], "math": kp.COLORS[1]}


def sequence_lengths(seed: int = 0, median: float = 512, sigma: float = 1.0, size: int = 2000,
                     s_max: int = 4096) -> np.ndarray:
    """The chapter's assumed sequence lengths: log-normal around ``median``, clipped to [1, s_max] (numpy ``seed``)."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(mean=np.log(median), sigma=sigma, size=size)), 1, s_max).astype(np.int64)


def quant_deployment(model, chip, w_name, kv_dtype, n_chips):
    """The quantization section's deployment: weights by the chapter's short name (:data:`FORMATS`), tensor parallel."""
    # weight-only quantization: the matmuls run in bf16
    return kvmath.Deployment(model, chip, f"tp={n_chips}", weights=FORMATS[w_name], kv=kv_dtype, compute="bf16")


@figure
def ttft_by_prompt(model: str = "llama-3-8b", chips: list = ("h100-sxm", "a100-80gb")):
    """Lower bound on the time to first token of one bf16 prompt against its length, on one chip of each kind.

    With the compute term (FLOPs / C) and the memory term ((weights + cache
    written) / W); a dot where the FLOPs start to bind (S_c), the line S*
    where attention's FLOPs equal the weights', the region past the
    model's supported context shaded.
    """
    import kvbook.plots as kp

    m = kvmath.Model.preset(model)
    s_grid = np.unique(np.geomspace(16, 131072, 160).round()).astype(int)
    p_body = m.matmul_params_per_token() - m.vocab * m.d_model
    s_star = p_body / (m.n_layers * m.n_heads * m.head_dim)  # equation pq-sstar
    fig, ax = kp.new_figure((7.2, 4.2))
    for color, name in zip((kp.COLORS[0], kp.COLORS[1]), chips):
        chip = kvmath.Chip.preset(name)
        p = kvmath.Deployment(m, chip).prefill(1, s_grid)   # FLOPs / C and (weights + cache written) / W
        # equation pq-ttft, strict: bf16 weights and cache, no communication
        bound = kvmath.Deployment(m, chip, "tp=1", link=None, weights="bf16", kv="bf16")
        ttft = bound.request(1, s_grid, 1).ttft_s
        s_c = F.critical_batch(chip.flops("bf16"), chip.bandwidth, dtype_bytes("bf16"))
        ax.plot(s_grid, ttft, color=color, label=f"{chip.display_name}: TTFT bound")
        ax.plot(s_grid, p.compute_s, color=color, lw=1.0, ls="--", label="  FLOPs / C")
        ax.plot(s_grid, p.memory_s, color=color, lw=1.0, ls=":", label="  (weights + cache written) / W")
        ax.plot([s_c], [bound.request(1, round(s_c), 1).ttft_s], "o", color=color, ms=5)
    kp.log_context_axis(ax, "x", "prompt length S (tokens)")
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time to first token, lower bound")
    ax.axvspan(m.supported_context, s_grid[-1], color="0.9", lw=0, zorder=0)
    ax.text(m.supported_context * 1.1, 0.03, f"past the {m.supported_context:,} tokens\n{m.display_name} supports",
            transform=ax.get_xaxis_transform(), fontsize=8, color="0.35")
    star = kp.mark_vline(ax, s_star, f"S* = {s_star:,.0f}: attention = weights ", y=0.2)
    star.text.set_ha("right")
    ax.legend(loc="upper left", fontsize=8)
    return fig


@figure
def tensor_parallel_scaling(model: str = "llama-3-70b", chip: str = "h100-sxm", batch: int = 32,
                            context: int = 8192, n_chips: list = tuple(N_CHIPS)):
    """Tensor parallelism without communication: the min-step terms on one chip and the batch's tokens/s, by N.

    Left: strict bound, no-overlap form and its three terms per chip; right:
    tokens per second against linear scaling from the first N whose weights
    and cache fit in the memory the chip reports. N = h_kv is marked.
    """
    import matplotlib.ticker as mticker

    import kvbook.plots as kp

    colors = _term_colors()
    m, c = kvmath.Model.preset(model), kvmath.Chip.preset(chip)
    chips = np.array(n_chips)
    steps = [kvmath.Deployment(m, c, f"tp={n}", link=None).step(batch, context) for n in chips]
    tp = {k: np.array([getattr(s, k) for s in steps]) for k in
          ("kv_read_s", "weight_read_s", "weight_compute_s", "strict_s", "no_overlap_s", "tokens_per_s",
           "memory_bytes")}
    tp_tokens = tp["tokens_per_s"]
    tp_fits = tp["memory_bytes"] <= kvmath.memory.memory_budget(c, "reported")

    fig, (ax_t, ax_r) = kp.new_figure((8.4, 3.8), ncols=2)
    n = chips.astype(float)
    ax_t.plot(n, tp["strict_s"], color="0.15", marker="o", ms=4, label="strict lower bound")
    ax_t.plot(n, tp["no_overlap_s"], color="0.15", lw=1.0, ls=":", label="no-overlap form")
    ax_t.plot(n, tp["kv_read_s"], color=colors["kv"], lw=1.2, ls="--", label="KV cache (per chip)")
    ax_t.plot(n, tp["weight_read_s"], color=colors["read"], lw=1.2, ls="--", label="read weights (per chip)")
    ax_t.plot(n, tp["weight_compute_s"], color=colors["math"], lw=1.2, ls="--", label="weight matmuls (per chip)")
    kp.log_batch_axis(ax_t, "x", "chips N (tensor parallel)")
    ax_t.set_yscale("log")
    kp.seconds_axis(ax_t, "y", "ms", "time per step")
    kp.mark_vline(ax_t, m.n_kv_heads, f"N = h_kv = {m.n_kv_heads}", y=0.97)
    ax_t.legend(loc="lower left", fontsize=8)

    ideal = tp_tokens[tp_fits][0] * n / chips[tp_fits][0]
    ax_r.plot(n, tp_tokens, color="0.15", marker="o", ms=4, label="tokens/s, whole batch")
    ax_r.plot(n, ideal, color="0.5", lw=1.0, ls=":", label="linear in N")
    ax_r.axvspan(0.8, chips[tp_fits][0] / 1.3, color=kp.COLORS[1], alpha=0.12, lw=0)
    ax_r.text(1.05, 0.5, "weights + cache\ndo not fit", transform=ax_r.get_xaxis_transform(), fontsize=8,
              color=kp.COLORS[1])
    kp.log_batch_axis(ax_r, "x", "chips N (tensor parallel)")
    ax_r.set_yscale("log")
    ax_r.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax_r.set_ylabel("throughput (tokens/s)")
    kp.mark_vline(ax_r, m.n_kv_heads, "N = h_kv", y=0.97)
    ax_r.legend(loc="lower right", fontsize=8)
    return fig


@figure
def quantized_throughput(model: str = "llama-2-70b", chip: str = "h100-sxm", n_chips: int = 2,
                         context: int = 4096, configs: list = CONFIGS):
    """Throughput bound for each (weights, cache) format pair in ``configs``, up to the largest batch that fits.

    Weight names are the chapter's (bf16, int8, int4 = int4-g128 with a bf16
    head); the math runs in bf16; the largest batch is the one whose caches
    fit in the memory the chips report (the dot).
    """
    import matplotlib.ticker as mticker

    import kvbook.plots as kp

    m, c = kvmath.Model.preset(model), kvmath.Chip.preset(chip)
    fig, ax = kp.new_figure((7.2, 4.0))
    for color, (w_name, kv_dtype) in zip(kp.COLORS, configs):
        dep = quant_deployment(m, c, w_name, kv_dtype, n_chips)
        max_batch = int(dep.capacity(context, budget="reported").max_batch)
        b = np.unique(np.geomspace(1, max_batch, 64).round())
        tok = dep.step(b, context).tokens_per_s
        ax.plot(b, tok, color=color, label=f"{w_name} weights, {kv_dtype} cache (max B = {max_batch})")
        ax.plot(b[-1:], tok[-1:], "o", color=color)
    kp.log_batch_axis(ax)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("throughput (tokens/s)")
    ax.legend(loc="lower right", fontsize=8)
    return fig


@figure
def paging(model: str = "llama-2-70b", chip: str = "h100-sxm", n_chips: int = 2, s_max: int = 4096,
           page: int = 16, seed: int = 0, page_sizes: list = tuple(PAGE_SIZES)):
    """The assumed sequence lengths and how many of them fit in the KV budget, by page size.

    The budget is what the bf16 weights leave in the memory ``n_chips``
    chips report (bf16 cache); lengths from :func:`sequence_lengths`.
    """
    import kvbook.plots as kp

    m = kvmath.Model.preset(model)
    lengths = sequence_lengths(seed=seed, s_max=s_max)
    k2 = m.kv_bytes_per_token()                 # bytes per token, bf16 cache (all chips together)
    fit = quant_deployment(m, kvmath.Chip.preset(chip), "bf16", "bf16", n_chips).capacity(s_max, budget="reported")
    budget = fit.kv_budget_bytes_per_chip * n_chips
    sizes = np.array(page_sizes)
    fits_by_page = np.array([F.max_batch_paged(lengths, p, budget, k2) for p in sizes])

    fig, (ax_h, ax_p) = kp.new_figure((8.4, 3.6), ncols=2)
    ax_h.hist(lengths, bins=np.geomspace(1, s_max, 40), color=kp.COLORS[0], alpha=0.8)
    kp.log_context_axis(ax_h, "x", "sequence length s (tokens)")
    ax_h.set_ylabel(f"sequences (of {lengths.size:,} drawn)")
    kp.mark_vline(ax_h, s_max, "S_max", y=0.97)
    ax_p.plot(sizes, fits_by_page, color="0.15", marker="o", ms=4)
    kp.log_context_axis(ax_p, "x", "page size p (tokens)")
    ax_p.set_ylim(0, 1.1 * fits_by_page.max())
    ax_p.set_ylabel("sequences that fit in the KV budget")
    kp.mark_vline(ax_p, page, f"p = {page}", y=0.6)
    ax_p.annotate("p = S_max: one page per sequence,\nthe same as reserving S_max",
                  (s_max, fits_by_page[-1]), (2, 0.25 * fits_by_page.max()), fontsize=8,
                  arrowprops={"arrowstyle": "->", "color": "0.4"})
    return fig


#: The live figure's batches.
I_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


@figure
def step_and_memory(batch: int = 16, weights: str = "bf16", kv: str = "bf16", chips: int = 2,
                    context: int = 4096):
    """Terms of one decode step of Llama 2 70B on H100 SXMs and the memory each chip holds, for the chosen batch."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    colors = _term_colors()
    m2, h100 = kvmath.Model.preset("llama-2-70b"), kvmath.Chip.preset("h100-sxm")

    def setup(fig):
        fig.set_layout_engine("none")   # fixed axes: a slider move only redraws
        ax_t = fig.add_axes((0.05, 0.60, 0.55, 0.28))
        ax_m = fig.add_axes((0.05, 0.14, 0.55, 0.28))
        ax_txt = fig.add_axes((0.64, 0.02, 0.35, 0.96))
        ax_txt.axis("off")
        bar_kv = ax_t.barh([0], [0], height=0.6, color=colors["kv"], label="KV cache")[0]
        bar_bind = ax_t.barh([0], [0], height=0.6, color=colors["read"])[0]
        bar_hid = ax_t.barh([0], [0], height=0.27, fill=False, hatch="///", linewidth=1.2)[0]
        ax_t.set_yticks([])
        ax_t.set_ylim(-0.5, 0.5)
        ax_t.grid(axis="y", visible=False)
        kp.seconds_axis(ax_t, "x", "ms", "one decode step")
        from matplotlib.patches import Patch
        ax_t.legend(handles=[Patch(color=colors["kv"], label="KV cache"),
                             Patch(color=colors["read"], label="read weights"),
                             Patch(color=colors["math"], label="weight matmuls")],
                    loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=8)

        mem_w = ax_m.barh([0], [0], height=0.6, color=kp.COLORS[4], label="weights")[0]
        mem_kv = ax_m.barh([0], [0], height=0.6, color=colors["kv"], alpha=0.55, label="KV cache")[0]
        ax_m.axvline(h100.hbm_bytes, color="0.2", ls="--", lw=1.2)
        ax_m.text(h100.hbm_bytes, 0.42, " 80 GB", va="bottom", fontsize=8)
        ax_m.set_xlim(0, 2 * h100.hbm_bytes)
        ax_m.set_yticks([])
        ax_m.set_ylim(-0.5, 0.6)
        ax_m.grid(axis="y", visible=False)
        kp.bytes_axis(ax_m, "x", "GB", "held by each chip")
        ax_m.legend(loc="lower right", fontsize=8)
        over = ax_m.text(2 * h100.hbm_bytes, 0, "", ha="right", va="center", fontsize=8, color="white")
        info = ax_txt.text(0.0, 0.98, "", va="top", ha="left", family="monospace", fontsize=8.5,
                           transform=ax_txt.transAxes)

        def update(batch, weights, kv, chips):
            fmt = FORMATS.get(weights, weights)
            dep = kvmath.Deployment(m2, h100, f"tp={chips}", link=None, weights=fmt, kv=kv, compute="bf16")
            t = dep.step(batch, context)
            kv_s, read, math = float(t.kv_read_s), float(t.weight_read_s), float(t.weight_compute_s)
            binding, hidden = ("read", "math") if read >= math else ("math", "read")
            size = {"read": read, "math": math}
            bar_kv.set_width(kv_s)
            bar_bind.set_x(kv_s)
            bar_bind.set_width(size[binding])
            bar_bind.set_color(colors[binding])
            bar_hid.set_x(kv_s)
            bar_hid.set_width(size[hidden])
            bar_hid.set_edgecolor(colors[hidden])
            ax_t.set_xlim(0, 1.1 * float(t.no_overlap_s))

            w_chip = t.weight_bytes_resident                 # what each chip holds
            kv_chip = float(t.kv_bytes_resident)
            mem_w.set_width(w_chip)
            mem_kv.set_x(w_chip)
            mem_kv.set_width(kv_chip)
            total = w_chip + kv_chip
            over.set_text(f"{total / 1e9:,.0f} GB \u2192 " if total > 2 * h100.hbm_bytes else "")
            fits = total <= h100.hbm_bytes
            if w_chip < h100.hbm_bytes:
                room = f"largest batch that fits: {int(dep.capacity(context).max_batch)}"
            else:
                room = "the weights alone do not fit"
            b_crit = dep.replace(layout=None).critical_batch()
            info.set_text(
                f"Llama 2 70B, S = {context:,}\n"
                f"{chips} x H100 SXM, bf16 math\n"
                f"weights {weights}, cache {kv}\n\n"
                f"B = {batch}: strict bound {t.strict_s * 1e3:.2f} ms\n"
                f"no-overlap {t.no_overlap_s * 1e3:.2f} = KV {kv_s * 1e3:.2f}\n"
                f"  + max(read {read * 1e3:.2f}, math {math * 1e3:.2f})\n"
                f"weights {'memory' if binding == 'read' else 'compute'}-bound, B_crit = {b_crit:.0f}\n\n"
                f"{batch / t.strict_s:,.0f} tokens/s for the batch\n"
                f"{1 / t.strict_s:,.1f} tokens/s per sequence\n\n"
                f"{total / 1e9:,.1f} GB per chip: {'fits' if fits else 'does NOT fit'}\n"
                f"{room}")
            info.set_color("0.1" if fits else kp.COLORS[1])

        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(I_BATCHES, default=batch, label="batch B"),
            "weights": Choice([("bf16 weights", "bf16"), ("int8 weights (weight-only)", "int8"),
                               ("fp8 weights (weight-only)", "fp8"),
                               ("int4-g128 weights, bf16 head (weight-only)", "int4")], default=weights,
                              label="weights"),
            "kv": Choice([("bf16 cache", "bf16"), ("int8 cache", "int8"), ("fp8 cache", "fp8")],
                         default=kv, label="KV cache"),
            "chips": Slider([1, 2, 4, 8], default=chips, label="chips N"),
        },
        main="batch",
        figsize=(8.4, 3.8),
        caption="Terms of one decode step of Llama 2 70B and the memory each chip holds, "
                "for the chosen batch",
        fixed_limits=True,
    )
