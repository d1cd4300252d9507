"""Chapter 09's figures: mixture-of-experts decode (experts touched, expert-parallel all-to-all, bytes read)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F

from . import figure, model_options

#: The models of the experts-touched figure.
FIG_MODELS = ["mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"]


def moe_presets():
    """The MoE presets the chapter tabulates (R1 left out: it is DeepSeek-V3's architecture)."""
    return [n for n in kvmath.Model.presets() if kvmath.Model.preset(n).n_experts and n != "deepseek-r1"]


@figure
def experts_touched(models: list = tuple(FIG_MODELS), share: float = 0.9):
    """Share of each MoE layer's routed experts one decode step reads, against the batch (one token per sequence).

    Uniform independent routing (equation moe-touched) solid, the ceiling
    dashed; a dot where ``share`` of the experts are touched.
    """
    import kvbook.plots as kp

    b_axis = np.geomspace(1, 4096, 200)
    fig, ax = kp.new_figure((7, 3.6))
    for i, n in enumerate(models):
        m = kvmath.Model.preset(n)
        touched = F.experts_touched(m.n_experts, m.top_k, b_axis)
        # equation moe-touched solved for T: the batch that touches `share` of the experts
        t_share = F.tokens_for_share(m.n_experts, m.top_k, share)
        ax.plot(
            b_axis,
            touched / m.n_experts,
            color=kp.COLORS[i],
            label=f"{m.display_name}: k/E = {m.top_k}/{m.n_experts}",
        )
        ceiling = F.experts_touched(m.n_experts, m.top_k, b_axis, "ceiling")
        ax.plot(b_axis, ceiling / m.n_experts, color=kp.COLORS[i], ls="--", lw=0.9)
        ax.plot([t_share], [share], "o", color=kp.COLORS[i], ms=5)
    kp.log_batch_axis(ax)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of each layer's experts read")
    ax.axhline(share, color="0.5", lw=0.8, ls=":")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def ep_setups():
    """The two expert-parallel setups: chip, layout, chips per node, network link (between nodes), NVLink (inside one)."""
    ib = kvmath.Link.preset("ib-ndr400")
    return {
        "8 H200, one node": (
            kvmath.Chip.preset("h200"),
            kvmath.ParallelLayout(dp=8, ep=8),
            8,
            ib,
            kvmath.Link.preset("nvlink4"),
        ),  # a 400 Gb/s card per GPU too
        "144 H800, 18 nodes": (
            kvmath.Chip.preset("h800"),
            kvmath.ParallelLayout(dp=144, ep=144, redundant_experts=32),
            8,
            ib,
            kvmath.Link.preset("nvlink4-h800"),
        ),
    }


def ep_deployment(setup, model="deepseek-v3", kv_dtype="fp8", links=True):
    """Setup ``setup`` of :func:`ep_setups`: fp8 weights, dispatch in fp8, combine in bf16; links=False: no communication."""
    chip, layout, n, net, node = ep_setups()[setup]
    return kvmath.Deployment(
        model,
        chip,
        layout,
        chips_per_node=n,
        link=node if links else None,
        node_link=net if links else None,
        formats=kvmath.Formats(weights="fp8", kv=kv_dtype, dispatch="fp8"),
    )


def ep_step(setup, b_chip, ctx=4096, model="deepseek-v3", kv_dtype="fp8", tokens_per_seq=1, links=True):
    """One decode step of ``b_chip`` sequences per chip; strict bound: max(bytes / W, FLOPs / C, the all-to-all chain)."""
    layout = ep_setups()[setup][1]
    return ep_deployment(setup, model, kv_dtype, links).step(layout.dp * b_chip, ctx, tokens_per_seq=tokens_per_seq)


@figure
def expert_parallel_all_to_all(model: str = "deepseek-v3", context: int = 4096):
    """DeepSeek-V3 decode under expert parallelism: each chip's bound on reading and arithmetic against the all-to-all chain.

    fp8 weights, latent cache and dispatch (combine in bf16), by sequences
    per chip, for one node of H200s and 18 nodes of H800s.
    """
    import kvbook.plots as kp

    b_chip = np.geomspace(1, 512, 64)
    fig, ax = kp.new_figure((7, 3.8))
    for i, s in enumerate(ep_setups()):
        step = ep_step(s, b_chip, context, model)   # strict bound: max(bytes / W, FLOPs / C, the chain)
        local = np.maximum(step.memory_s, step.compute_s)
        ax.plot(b_chip, local, color=kp.COLORS[i], label=f"{s}: max(bytes / W, FLOPs / C)")
        ax.plot(
            b_chip, step.comm_s, color=kp.COLORS[i], ls="--", label=f"{s}: all-to-all chain"
        )
    kp.log_batch_axis(ax, label="sequences per chip")
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time per step")
    ax.set_ylim(4e-5, 0.3)
    ax.legend(loc="upper left", fontsize=8)
    return fig


#: The live figure's batches and its batch grid.
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


@figure
def weight_bytes_read(batch: int = 16, model: str = "deepseek-v3", tokens_per_seq: int = 1):
    """Weight bytes one decode step of an MoE model reads against the batch: floor, uniform, ceiling, resident."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    MODEL_OPTIONS = model_options(moe_presets())
    GRID = np.geomspace(1, 2048, 97)

    def setup(fig):
        ax = fig.add_subplot()
        lines = {
            r: ax.plot(GRID, GRID, color=kp.COLORS[i], ls=ls, label=label)[0]
            for i, (r, ls, label) in enumerate(
                (
                    ("floor", ":", "floor: the same k experts"),
                    ("uniform", "-", "uniform routing (estimate)"),
                    ("ceiling", "--", "ceiling: min(E, kT) experts"),
                )
            )
        }
        (resident,) = ax.plot(
            GRID, GRID, color="0.35", lw=1.0, label="resident (all experts)"
        )
        (dot,) = ax.plot([1], [1], "o", ms=8, color=kp.COLORS[1], zorder=4)
        kp.log_batch_axis(ax)
        ax.set_xlim(1 / 1.25, 2048 * 1.25)
        ax.set_yscale("log")
        kp.bytes_axis(ax, "y", "GB", "weight bytes read per step")
        ax.legend(loc="center right", fontsize=8)
        note = ax.set_title("", loc="left", fontsize=9)

        def update(batch, model, tokens_per_seq):
            m = kvmath.Model.preset(model)
            for r, line in lines.items():
                line.set_ydata(m.weight_bytes_read(GRID, "bf16", r, tokens_per_seq))
            full = m.weight_bytes_resident("bf16")
            resident.set_ydata(np.full_like(GRID, full))
            now = float(m.weight_bytes_read(batch, "bf16", "uniform", tokens_per_seq))
            dot.set_data([batch], [now])
            ax.set_ylim(m.weight_bytes_read(1, "bf16") / 2, full * 2)
            n = float(F.experts_touched(m.n_experts, m.top_k, batch * tokens_per_seq))
            note.set_text(
                f"{m.display_name}, B = {batch}, {tokens_per_seq} token(s) per sequence:\n"
                f"{n:.1f} of {m.n_experts} experts per layer, "
                f"{now / full:.0%} of the resident bytes"
            )

        fig.set_layout_engine("none")
        fig.subplots_adjust(left=0.11, right=0.96, bottom=0.14, top=0.86)
        return update

    return interactive_figure(
        setup,
        controls={
            "batch": Slider(BATCHES, default=batch, label="batch B"),
            "model": Choice(MODEL_OPTIONS, default=model, label="model"),
            "tokens_per_seq": Choice([1, 2, 4], default=tokens_per_seq, label="tokens per sequence"),
        },
        main="batch",
        figsize=(7, 3.8),
        caption="Weight bytes one decode step of an MoE model reads against the batch: "
        "floor, uniform routing and ceiling, with the resident bytes",
        fixed_limits=True,
    )
