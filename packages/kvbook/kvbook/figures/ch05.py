"""Chapter 05's figures: sharing KV heads (MHA, GQA, MQA, MLA), its cache and what it buys on a chip."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.formatting import fmt_number
from kvmath.units import KiB

from . import chip_options, figure, model_options


# The chapter's rule for the cache a model would keep without sharing; its figure and its check cells both
# use it, and kvmath has none for MLA (the notebook imports it from here).
def mha_equivalent_bytes_per_token(m, bytes_per_elem=2):
    """Bytes per token if every query head kept its own key and value (``m`` a Model preset)."""
    if m.attention == "mla":
        per_layer = m.n_heads * (
            m.head_dim + m.qk_rope_dim + m.v_head_dim
        )  # K is 128 + 64 wide, V 128
        return m.n_layers * per_layer * bytes_per_elem
    return F.kv_bytes_per_token(m.n_layers, m.n_heads, m.head_dim, bytes_per_elem)  # every layer full, no window


#: The models of the design figure.
DESIGN_MODELS = (
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "qwen2.5-7b",
    "mistral-7b-v0.1",
    "gemma-2-9b",
    "falcon-40b",
    "falcon-7b",
    "starcoder",
    "deepseek-v3",
)


@figure
def share_design(models: tuple = DESIGN_MODELS):
    """KV cache per token (bf16) of each of ``models``, coloured by attention design, over its MHA equivalent."""
    import kvbook.plots as kp

    design = {}
    for name in models:
        m = kvmath.Model.preset(name)
        design[name] = (m, m.kv_bytes_per_token(), mha_equivalent_bytes_per_token(m))
    DESIGN_COLOR = {
        "mha": kp.COLORS[1],
        "gqa": kp.COLORS[0],
        "mqa": kp.COLORS[2],
        "mla": kp.COLORS[3],
    }
    names = sorted(design, key=lambda n: design[n][1])
    fig, ax = kp.new_figure((7, 4.2))
    y = np.arange(len(names))
    ax.barh(y, [design[n][2] for n in names], color="0.85", label="MHA equivalent")
    for d, color in DESIGN_COLOR.items():
        sel = [i for i, n in enumerate(names) if design[n][0].attention == d]
        ax.barh(
            y[sel],
            [design[names[i]][1] for i in sel],
            color=color,
            label=d.upper(),
            height=0.6,
        )
    ax.set_yticks(y, names)
    kp.log_batch_axis(ax, "x", "KV cache per token, bf16 (KiB)")  # base-2 log axis...
    ax.xaxis.set_major_formatter(kp.bytes_formatter("KiB"))  # ...labelled in KiB
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower right", fontsize=8)
    return fig


#: The models that fit on one chip, of the throughput figure.
ONE_CHIP = (
    "llama-2-7b",
    "gemma-2-9b",
    "llama-3-8b",
    "mistral-7b-v0.1",
    "qwen2.5-7b",
    "starcoder",
    "falcon-7b",
)


@figure
def share_h100(models: tuple = ONE_CHIP, chip: str = "h100-sxm", batch: int = 16, context: int = 4096):
    """Tokens/s per sequence (the strict bound) of ``batch`` sequences on one ``chip`` against the context.

    Each model's line ends where the batch's caches no longer fit next to its
    bf16 weights (the reported memory, sized at ``context`` or the model's
    documented context if shorter); faint past the documented context, dashed
    for sliding windows.
    """
    import kvbook.plots as kp

    c = kvmath.Chip.preset(chip)
    contexts = 2.0 ** np.arange(10, 20.01, 0.25)
    fig, ax = kp.new_figure((8, 4))
    for i, name in enumerate(models):
        dep = kvmath.Deployment(name, c)  # one chip, bf16 weights and cache
        m = dep.model
        budget = dep.capacity(min(context, m.supported_context), budget="reported").kv_budget_bytes_per_chip
        seq = m.kv_bytes_per_seq(np.round(contexts).astype(int))
        ok = batch * seq <= budget
        trained = ok & (contexts <= m.supported_context)
        past = ok & (contexts >= m.supported_context)
        step = dep.strict_s(batch, np.round(contexts))
        color, ls = kp.COLORS[i % len(kp.COLORS)], "--" if m.sliding_window else "-"
        ax.plot(
            contexts[trained],
            F.tokens_per_s_per_seq(step[trained]),
            label=f"{name} ({m.attention.upper()})",
            color=color,
            linestyle=ls,
        )
        ax.plot(
            contexts[past],
            F.tokens_per_s_per_seq(step[past]),
            color=color,
            linestyle=ls,
            alpha=0.3,
        )
    kp.log_context_axis(ax)
    ax.set_xticks(2 ** np.arange(10, 21, 2))
    kp.log_batch_axis(ax, "y", "tokens/s per sequence (upper bound)")  # plain log2 ticks
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig


@figure
def share_window(models: tuple = ("llama-3-8b", "mistral-7b-v0.1", "gemma-2-9b")):
    """KV cache per sequence (left) and average per token (right) against the context, with and without windows."""
    import kvbook.plots as kp

    ms = [kvmath.Model.preset(name) for name in models]
    S = np.round(2.0 ** np.arange(9, 17.01, 0.125)).astype(int)
    fig, (ax1, ax2) = kp.new_figure((9, 3.6), ncols=2)
    for i, m in enumerate(ms):
        label = f"{m.name} ({'no window' if m.sliding_window is None else f'{m.n_sliding_layers}/{m.n_layers} layers windowed'})"
        ax1.plot(S, m.kv_bytes_per_seq(S), color=kp.COLORS[i], label=label)
        ax2.plot(S, m.kv_bytes_per_token(context=S), color=kp.COLORS[i], label=label)
    for ax in (ax1, ax2):
        kp.log_context_axis(ax)
        ax.set_xticks(2 ** np.arange(9, 18, 2))
        kp.mark_vline(ax, 4096, "window 4,096", y=0.97)
        ax.axvspan(
            max(m.supported_context for m in ms),
            S[-1],
            color="0.88",
            lw=0,
            zorder=0,
        )
    ax1.set_yscale("log")
    kp.bytes_axis(ax1, "y", "GB", "KV cache per sequence")
    kp.bytes_axis(ax2, "y", "KiB", "average KV per token")
    ax2.set_yticks(np.arange(0, 385, 64) * KiB)
    ax2.set_ylim(0, 384 * KiB)
    ax1.legend(loc="lower right", fontsize=8)
    return fig


#: The live figure's models, chips and KV-head steps.
SHARE_MODELS = ["llama-2-70b", "llama-2-7b", "llama-3-8b", "qwen2.5-7b"]
SHARE_CHIPS = ["h100-sxm", "a100-80gb", "h200", "mi300x", "b200", "l4"]
KV_HEAD_STEPS = [64, 32, 16, 8, 4, 2, 1]


def _divisors(n):
    return [d for d in range(n, 0, -1) if n % d == 0]


@figure
def share_live(kv_heads: int = 8, model: str = "llama-2-70b", chip: str = "h100-sxm", context: int = 4096):
    """Tokens of KV cache that fit (left) and the throughput bound against the batch (right) as h_kv changes.

    The cache at ``context`` tokens per sequence, on the fewest chips that
    hold the MHA form's weights, each keeping its own sequences' caches.
    """
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    S_INTERACTIVE = context
    BATCHES_I = np.geomspace(1, 8192, 105)

    def share_setup(fig):
        ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
        bars = ax1.bar(np.arange(8), np.ones(8), color="0.75")
        ax1.set_yscale("log")
        ax1.set_ylabel("tokens of KV cache that fit")
        ax1.set_xlabel("KV heads $h_{kv}$")
        ax1.grid(axis="x", visible=False)
        label1 = ax1.text(0.02, 0.98, "", transform=ax1.transAxes, va="top", fontsize=8)
        (mha_fit,) = ax2.plot([], [], color="0.55", label="MHA, fits")
        (mha_no,) = ax2.plot([], [], color="0.55", alpha=0.3, linestyle="--")
        (sel_fit,) = ax2.plot([], [], color=kp.COLORS[0], label="chosen $h_{kv}$, fits")
        (sel_no,) = ax2.plot(
            [], [], color=kp.COLORS[0], alpha=0.3, linestyle="--", label="does not fit"
        )
        bcrit = kp.mark_vline(ax2, 300, "B_crit", y=0.25)
        bmax = kp.mark_vline(ax2, 10, "largest batch", color=kp.COLORS[1], y=0.12)
        kp.log_batch_axis(ax2)
        kp.log_batch_axis(ax2, "y", "tokens/s, whole batch (upper bound)")
        ax2.set_xlim(1, 8192)
        ax2.legend(loc="lower right", fontsize=7)
        # the readout sits above the axes, where no line can cross it
        label2 = ax2.text(0.0, 1.02, "", transform=ax2.transAxes, va="bottom", fontsize=8)
        fmt = fmt_number

        def label_side(marker, right):
            # put a line's label right (or left) of it, so two close lines do not cross labels
            marker.text.set_horizontalalignment("left" if right else "right")
            marker.text.set_text(f" {marker.label}" if right else f"{marker.label} ")

        def update(kv_heads, model, chip):
            base, c = kvmath.Model.preset(model), kvmath.Chip.preset(chip)
            ladder = _divisors(base.n_heads)
            h_kv = max(d for d in ladder if d <= kv_heads)
            # the fewest chips that hold every weight of the largest layout (MHA: K and V
            # projections grow with h_kv), each chip keeping its own sequences' caches
            mha = base.with_kv_heads(base.n_heads)
            n = F.min_chips_for_weights(mha.weight_bytes_resident("bf16"), c.hbm_bytes)
            layout = f"tp={n},kv=batch"
            deps = {d: kvmath.Deployment(base.with_kv_heads(d), c, layout) for d in ladder}
            room = {d: dep.capacity(S_INTERACTIVE) for d, dep in deps.items()}
            budget = n * room[h_kv].kv_budget_bytes_per_chip
            tokens = [room[d].max_tokens for d in ladder]
            for i, bar in enumerate(bars):
                if i < len(ladder):
                    bar.set_visible(True)
                    bar.set_height(max(tokens[i], 1))
                    bar.set_color(kp.COLORS[0] if ladder[i] == h_kv else "0.75")
                    bar.set_edgecolor(
                        kp.COLORS[1] if ladder[i] == base.n_kv_heads else "none"
                    )
                    bar.set_linewidth(2)
                else:
                    bar.set_visible(False)
            ax1.set_xticks(range(len(ladder)), [str(d) for d in ladder])
            ax1.set_xlim(-0.6, len(ladder) - 0.4)
            ax1.set_ylim(max(min(tokens), 1) / 2, max(tokens) * 6)
            chosen_tokens = tokens[ladder.index(h_kv)]
            label1.set_text(
                f"{model} on {n} x {chip}\n{budget / 1e9:.0f} GB for KV\n"
                f"h_kv = {h_kv} (g = {base.n_heads // h_kv}): {fmt(chosen_tokens)} tokens\n"
                f"outlined: the real model (h_kv = {base.n_kv_heads})"
            )

            def curve(d, fit_line, no_line):
                b_max = int(room[d].max_batch)
                tps = deps[d].step(BATCHES_I, S_INTERACTIVE).tokens_per_s
                ok = BATCHES_I <= b_max
                fit_line.set_data(BATCHES_I[ok], tps[ok])
                no_line.set_data(BATCHES_I[~ok], tps[~ok])
                return b_max, tps

            _, tps_mha = curve(base.n_heads, mha_fit, mha_no)
            b_max, tps = curve(h_kv, sel_fit, sel_no)
            ax2.set_ylim(
                min(tps.min(), tps_mha.min()) / 2, max(tps.max(), tps_mha.max()) * 4
            )
            b_crit_here = kvmath.Deployment(base, c).critical_batch()
            bcrit.move(b_crit_here, f"B_crit = {b_crit_here:.0f}")
            if b_max >= 1:
                bmax.line.set_visible(True)
                bmax.text.set_visible(True)
                bmax.move(b_max, f"fits: {fmt(b_max)}")
                if b_crit_here / 8 <= b_max <= 8 * b_crit_here:
                    label_side(bmax, right=b_max > b_crit_here)
                    label_side(bcrit, right=b_crit_here >= b_max)
                t = deps[h_kv].step(b_max, S_INTERACTIVE)
                tps_max = t.tokens_per_s
                label2.set_text(
                    f"S = {fmt(S_INTERACTIVE)}: at B = {fmt(b_max)}, {fmt(tps_max, '.0f')} tok/s,\n"
                    f"{F.tokens_per_s_per_seq(t.strict_s):.0f} tok/s per sequence"
                )
            else:
                bmax.line.set_visible(False)
                bmax.text.set_visible(False)
                label2.set_text(f"not one {fmt(S_INTERACTIVE)}-token sequence fits")

        return update

    return interactive_figure(
        share_setup,
        controls={
            "kv_heads": Slider(KV_HEAD_STEPS, default=kv_heads, label="KV heads h_kv (at most)"),
            "model": Choice(model_options(SHARE_MODELS), default=model, label="model"),
            "chip": Choice(chip_options(SHARE_CHIPS), default=chip, label="chip"),
        },
        main="kv_heads",
        figsize=(7.6, 4.2),  # about the column's width, so the text shows near its size
        caption="Tokens of KV cache that fit (left) and the throughput bound against batch size "
        "(right) as the number of KV heads changes",
        fixed_limits=True,
    )
