"""Chapter 07's figures: the 256K-context thread (codellama-7b, MHA against MQA, two A100-80GB)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F

from . import figure

#: The thread's setting: its model, GPU, batch, "8K" context, tensor-parallel degree and bandwidth share.
MODEL, CHIP, BATCH, S_8K, N_GPU, EFF = "codellama-7b", "a100-80gb", 16, 8 * 1024, 2, 0.7


def fmt_context(s):
    """1024 -> '1K', 262144 -> '256K', 1048576 -> '1M' (K = 1,024 tokens)."""
    return f"{s / 2**20:g}M" if s >= 2**20 else f"{s / 2**10:g}K"


def _context_ticks(ax, label="context length S (tokens)"):
    """A base-2 log axis for context with ticks 1K, 4K, 16K, ... 1M."""
    import kvbook.plots as kp

    kp.log_context_axis(ax, label=label)
    ticks = [2**k for k in range(10, 21, 2)]
    ax.set_xticks(ticks, [fmt_context(t) for t in ticks])


def _contexts():
    return np.round(2.0 ** np.arange(10, 20.01, 0.125))  # 1K .. 1M tokens


def _setting(model, chip, n_gpu, batch, context):
    """The thread's deployments: MHA split by heads, its one-KV-head MQA twin split by heads and by batch.

    With what one GPU holds of the (MHA) model's weights: the MQA model keeps
    them, as the chapter counts it.
    """
    m = kvmath.Model.preset(model)
    mqa = m.with_kv_heads(1)  # same shape, one KV head shared by all query heads
    tp = kvmath.Deployment(m, chip, f"tp={n_gpu}", link=None)
    mqa_heads = kvmath.Deployment(mqa, chip, f"tp={n_gpu}", link=None)
    mqa_batch = mqa_heads.replace(layout=f"tp={n_gpu},kv=batch")
    w_gpu = float(tp.step(batch, context).weight_bytes_resident)
    s_256k = context * m.n_heads // mqa.n_kv_heads
    return m, mqa, tp, mqa_heads, mqa_batch, w_gpu, s_256k


def per_gpu_bytes(dep, context, batch, w_gpu):
    """Bytes one GPU holds and reads per step: ``w_gpu`` of weights and dep's share of the cache.

    The thread's MQA model keeps codellama-7b's weights, so ``w_gpu`` is what
    one GPU of the MHA deployment holds, whatever ``dep``'s model.
    """
    return w_gpu + dep.step(batch, context).kv_bytes_resident


def _tokens_per_s_per_seq_at(dep, w_gpu, context, batch, eff):
    """Memory-bound tokens/s per sequence (chapter 7, step 3: the bytes over f W): w_gpu plus dep's cache share per GPU."""
    return F.tokens_per_s_per_seq(per_gpu_bytes(dep, context, batch, w_gpu) / (eff * dep.chip.bandwidth))


def _mqa(model):
    return kvmath.Model.preset(model).with_kv_heads(1)  # same shape, one KV head shared by all query heads


def _prefill_dep(model: str, chip: str, n_gpu: int):
    """The thread's MQA model on ``n_gpu`` GPUs by tensor parallelism, no link counted (chapter 6's ``ttft_bound``)."""
    return kvmath.Deployment(_mqa(model), chip, f"tp={n_gpu}", link=None)


def prefill_parts(prompt_len, model: str = MODEL, chip: str = CHIP, n_gpu: int = N_GPU):
    """FLOPs of one prompt on the thread's MQA model (chapter 6's eq. pq-prefill-flops): total, weight matmuls, attention.

    The weights' part is ``2 P_body S + 2 P_head`` (the embedding is only looked up, the LM head runs for the last
    token), the attention part ``2 L h d_h S (S + 1)``; summed over the GPUs, which split both evenly by heads.
    """
    pre = _prefill_dep(model, chip, n_gpu).prefill(1, prompt_len)
    weight_part, attention_part = n_gpu * pre.weight_flops, n_gpu * pre.attention_flops
    return weight_part + attention_part, weight_part, attention_part


def ttft(prompt_len, model: str = MODEL, chip: str = CHIP, n_gpu: int = N_GPU):
    """Strict lower bound on the time to first token on ``n_gpu`` GPUs at peak bf16 (s): ``Request.ttft_s``."""
    return _prefill_dep(model, chip, n_gpu).request(1, prompt_len, 1).ttft_s


def attention_crossing(model: str = MODEL):
    """The prompt length at which attention's FLOPs equal the weights' (chapter 6's S* = P_body / (L h d_h))."""
    m = kvmath.Model.preset(model)
    p_body = m.matmul_params_per_token() - m.vocab * m.d_model
    return p_body / (m.n_layers * m.n_heads * m.head_dim)


@figure
def speed_by_context(model: str = MODEL, chip: str = CHIP, batch: int = BATCH, context: int = S_8K,
                     n_gpu: int = N_GPU, eff: float = EFF):
    """Memory-bound decode speed per sequence against context: MHA, and MQA with its cache split by batch or heads.

    Dots at the thread's two points: MHA at ``context`` and MQA at
    ``context`` times the query heads (256K), the same height.
    """
    import kvbook.plots as kp

    m, _, tp2, mqa_heads, mqa_batch, w_gpu, s_256k = _setting(model, chip, n_gpu, batch, context)
    contexts = _contexts()
    fig, ax = kp.new_figure((7, 4))
    ax.plot(
        contexts,
        _tokens_per_s_per_seq_at(tp2, w_gpu, contexts, batch, eff),
        label=f"MHA, {m.n_kv_heads} KV heads",
    )
    ax.plot(
        contexts,
        _tokens_per_s_per_seq_at(mqa_batch, w_gpu, contexts, batch, eff),
        label="MQA, 1 KV head, cache split by batch",
    )
    ax.plot(
        contexts,
        _tokens_per_s_per_seq_at(mqa_heads, w_gpu, contexts, batch, eff),
        "--",
        label="MQA, 1 KV head, cache on both GPUs",
    )
    _context_ticks(ax)
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s per sequence")
    kp.mark_vline(ax, context, "8K")
    kp.mark_vline(ax, s_256k, "256K")
    ax.plot(
        [context, s_256k],
        [_tokens_per_s_per_seq_at(tp2, w_gpu, context, batch, eff),
         _tokens_per_s_per_seq_at(mqa_batch, w_gpu, s_256k, batch, eff)],
        "o",
        color="k",
        zorder=3,
    )
    ax.legend(loc="lower left")
    return fig


@figure
def compute_ceiling(model: str = MODEL, chip: str = CHIP, batch: int = BATCH, context: int = S_8K,
                    n_gpu: int = N_GPU, eff: float = EFF):
    """Decode steps per second of the MQA model (cache split by batch): the compute ceiling against memory's rate.

    The ceiling counts the weight matmuls (the matmul parameters) and
    attention at each context; dots at 256K on both curves.
    """
    import kvbook.plots as kp

    m, mqa, _, _, mqa_batch, w_gpu, s_256k = _setting(model, chip, n_gpu, batch, context)
    c = mqa_batch.chip
    contexts = _contexts()
    w_flops = F.weight_flops_per_step(batch, m.matmul_params_per_token())
    memory_steps = _tokens_per_s_per_seq_at(mqa_batch, w_gpu, contexts, batch, eff)
    compute_steps = F.compute_ceiling_steps_per_s(
        w_flops
        + F.attention_flops_per_step(
            batch, contexts, mqa.n_layers, mqa.n_heads, mqa.head_dim
        ),
        n_gpu * c.flops("bf16"),
    )
    memory_rate = _tokens_per_s_per_seq_at(mqa_batch, w_gpu, s_256k, batch, eff)
    ceiling = F.compute_ceiling_steps_per_s(
        F.attention_flops_per_step(batch, s_256k, mqa.n_layers, mqa.n_heads, mqa.head_dim) + w_flops,
        n_gpu * c.flops("bf16"))

    fig, ax = kp.new_figure((7, 4))
    ax.plot(
        contexts,
        compute_steps,
        label=r"compute ceiling, $N C / (F_\mathrm{w} + F_\mathrm{attn})$",
    )
    ax.plot(contexts, memory_steps, label="memory-bound rate at 70% of bandwidth")
    ax.fill_between(contexts, memory_steps, compute_steps, color=kp.COLORS[0], alpha=0.08)
    _context_ticks(ax)
    ax.set_yscale("log")
    ax.set_ylabel("decode steps per second")
    kp.mark_vline(ax, s_256k, "256K")
    ax.plot([s_256k, s_256k], [memory_rate, ceiling], "o", color="k", zorder=3)
    ax.legend(loc="lower left")
    return fig


@figure
def bytes_by_split(model: str = MODEL, chip: str = CHIP, batch: int = BATCH, context: int = S_8K,
                   n_gpu: int = N_GPU):
    """What each GPU reads per decode step: MHA at 8K, MQA at 256K with its cache split by heads and by batch."""
    import kvbook.plots as kp

    _, _, tp2, mqa_heads, mqa_batch, w_gpu, s_256k = _setting(model, chip, n_gpu, batch, context)
    cases = {
        "MHA 8K, split by heads": (tp2, context),
        "MQA 256K, split by heads": (mqa_heads, s_256k),
        "MQA 256K, split by batch": (mqa_batch, s_256k),
    }
    labels = list(cases)
    w_gb = [w_gpu for _ in labels]
    kv_gb = [float(dep.step(batch, s).kv_bytes_resident) for dep, s in cases.values()]
    hbm = tp2.chip.hbm_bytes
    fig, ax = kp.new_figure((7, 3.6))
    y = np.arange(len(labels))
    ax.barh(y, w_gb, color=kp.COLORS[0], label="weights (half each)")
    ax.barh(y, kv_gb, left=w_gb, color=kp.COLORS[1], label="KV cache")
    ax.axvline(hbm, color="0.25", linestyle="--", linewidth=1.2)
    ax.text(
        hbm, -0.5, "HBM of one A100-80GB ", ha="right", va="bottom", fontsize=9
    )
    ax.set_yticks(y, labels)
    ax.grid(axis="y", visible=False)
    kp.bytes_axis(ax, "x", "GB", "bytes read per GPU per decode step")
    ax.set_ylim(len(labels) - 0.5, -0.75)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


@figure
def prefill_split(model: str = MODEL, chip: str = CHIP, context: int = S_8K, n_gpu: int = N_GPU):
    """Lower bound on one prompt's prefill on ``n_gpu`` GPUs at peak bf16: weight matmuls against attention.

    The thread's MQA model with every parameter counted (2PS) and the bf16
    weights and cache moved once; 8K, 256K and the crossing are marked.
    """
    import kvbook.plots as kp

    *_, s_256k = _setting(model, chip, n_gpu, BATCH, context)
    c = kvmath.Chip.preset(chip)
    prompts = np.round(2.0 ** np.arange(10, 20.01, 0.125))
    _, pf_w, pf_attn = prefill_parts(prompts, model)
    ttft_s = ttft(prompts, model, chip, n_gpu)
    s_cross = attention_crossing(model)
    peak = n_gpu * c.flops("bf16")
    fig, ax = kp.new_figure((7, 4))
    ax.plot(prompts, ttft_s, color="k", label="time to first token, lower bound")
    ax.plot(prompts, pf_w / peak, "--", label="weight matmuls, $2PS$ FLOPs")
    ax.plot(prompts, pf_attn / peak, "--", label=r"attention, $2 L h d_h S^2$ FLOPs")
    _context_ticks(ax, label="prompt length S (tokens)")
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "s", "prefill time at peak bf16")
    kp.mark_vline(ax, context, "8K")
    kp.mark_vline(ax, s_256k, "256K")
    kp.mark_vline(ax, s_cross, "attention = weights", y=0.55)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.9))
    return fig


#: The live figure's choices: contexts 1K .. 1M, batches, GPUs, bandwidth shares.
CONTEXTS = sorted({2**k for k in range(10, 21)} | {3 * 2**k for k in range(9, 19)})
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
GPUS = [1, 2, 4, 8]
EFFS = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


@figure
def bytes_per_gpu(context: int = S_8K, kv_heads: int = 32, batch: int = BATCH, n_gpu: int = N_GPU,
                  shard: str = "heads", eff: float = EFF):
    """Bytes each GPU reads per decode step (codellama-7b's weights, the cache of ``kv_heads`` KV heads), with tokens/s."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    model = kvmath.Model.preset(MODEL)
    chip = kvmath.Chip.preset(CHIP)
    p = model.param_count()
    kv_head_counts = [h for h in range(1, model.n_heads + 1) if model.n_heads % h == 0]  # 1, 2, 4, ..., 32

    def setup(fig):
        fig.set_layout_engine(
            "none"
        )  # fixed axes positions: no layout pass on every slider move
        ax = fig.add_axes((0.1, 0.09, 0.44, 0.86))
        ax_text = fig.add_axes((0.58, 0.05, 0.41, 0.9))
        bars = ax.bar(
            ["weights", "KV cache"],
            [1.0, 1.0],
            color=[kp.COLORS[0], kp.COLORS[1]],
            width=0.6,
        )
        ax.axhline(chip.hbm_bytes, color="0.25", linestyle="--", linewidth=1.2)
        ax.text(
            1.45, chip.hbm_bytes, "HBM of one GPU", ha="right", va="bottom", fontsize=8
        )
        values = [ax.text(i, 0, "", ha="center", va="bottom", fontsize=9) for i in range(2)]
        kp.bytes_axis(ax, "y", "GB", "read per GPU per step")
        ax.grid(axis="x", visible=False)
        ax_text.axis("off")
        text = ax_text.text(
            0.0,
            0.98,
            "",
            va="top",
            ha="left",
            family="monospace",
            fontsize=9,
            transform=ax_text.transAxes,
        )

        def update(context, kv_heads, batch, n_gpu, shard, eff):
            m = model.with_kv_heads(kv_heads)
            layout = f"tp={n_gpu}" + (",kv=batch" if shard == "batch" else "")
            # one GPU's share: codellama-7b's weights, the cache of the model with kv_heads
            w_gpu = kvmath.Deployment(model, chip, f"tp={n_gpu}").step(batch, context).weight_bytes_resident
            kv_gpu = float(kvmath.Deployment(m, chip, layout).step(batch, context).kv_bytes_resident)
            memory_s = (w_gpu + kv_gpu) / (eff * chip.bandwidth)
            flops = F.weight_flops_per_step(batch, p) + F.attention_flops_per_step(
                batch, context, m.n_layers, m.n_heads, m.head_dim
            )
            compute_s = flops / (n_gpu * chip.flops("bf16"))
            step = max(memory_s, compute_s)
            top = max(w_gpu + kv_gpu, w_gpu, kv_gpu, chip.hbm_bytes) * 1.15
            for i, (bar, label, v) in enumerate(zip(bars, values, (w_gpu, kv_gpu))):
                bar.set_height(v)
                y = v
                if i == 0 and v <= chip.hbm_bytes <= v + 0.07 * top:
                    y = chip.hbm_bytes + 0.01 * top  # keep the label off the HBM line
                label.set_position((label.get_position()[0], y))
                label.set_text(f"{v / 1e9:.1f} GB")
            ax.set_ylim(0, top)
            fits = w_gpu + kv_gpu <= chip.hbm_bytes
            text.set_text(
                f"{fmt_context(context)} context, {kv_heads} KV "
                f"head{'s' if kv_heads > 1 else ''}\n"
                f"batch {batch}, {n_gpu} x A100-80GB\n"
                f"cache split by {shard}, {eff:.0%} of bandwidth\n\n"
                f"per GPU: {(w_gpu + kv_gpu) / 1e9:.1f} GB\n"
                f"  {'fits' if fits else 'does NOT fit'} in {chip.hbm_bytes / 1e9:.0f} GB\n"
                f"step: {step * 1e3:.2f} ms "
                f"({'memory' if memory_s >= compute_s else 'compute'}-bound)\n\n"
                f"tokens/s per sequence: {1 / step:,.1f}\n"
                f"tokens/s for the batch: {batch / step:,.0f}\n"
                f"compute ceiling: {1 / compute_s:,.0f} steps/s"
            )

        return update

    return interactive_figure(
        setup,
        controls={
            "context": Slider(
                CONTEXTS, default=context, label="context S (tokens)", fmt=fmt_context
            ),
            "kv_heads": Slider(kv_head_counts, default=kv_heads, label="KV heads"),
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "n_gpu": Slider(GPUS, default=n_gpu, label="GPUs (tensor parallel)"),
            "shard": Choice(
                [("by heads", "heads"), ("by batch", "batch")],
                default=shard,
                label="KV cache split",
            ),
            "eff": Slider(
                EFFS, default=eff, label="fraction of bandwidth", fmt=lambda f: f"{f:.0%}"
            ),
        },
        main="context",
        figsize=(7.5, 3.8),
        caption="Bytes each GPU reads per decode step, weights and KV cache, with the "
        "resulting tokens per second",
    )
