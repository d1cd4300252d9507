"""Chapter 10's figures: speculative decoding (verify steps, expected tokens, speed-up and break-even batch)."""

from __future__ import annotations

import numpy as np

import kvmath
from kvmath import formulas as F
from kvmath.speculative import speculation_break_even_batch

from . import figure

#: The chapter's running example: four drafts, each accepted with probability 0.8, 1,024 tokens of context.
GAMMA, ACCEPT, CONTEXT = 4, 0.8, 1024


def deployment(model, chip, n_chips=1, weights="bf16"):
    """The chapter's deployment: tensor parallel over ``n_chips``, no communication counted."""
    # the chapter compares compute and memory
    return kvmath.Deployment(model, chip, f"tp={n_chips}", link=None, weights=weights)


def batch_that_fits(dep, context):
    """Whole sequences whose caches fit in each chip's memory beside its share of the weights."""
    return int(dep.capacity(context).max_batch)


@figure
def verify_steps(model: str = "llama-3.1-8b", chip: str = "h100-sxm", context: int = CONTEXT,
                 gammas: list = (7, 4, 1), gamma: int = GAMMA):
    """Strict lower bound on a plain decode step and on verify steps of each of ``gammas`` drafts, against the batch.

    bf16 weights and cache on one chip; B_crit and B_crit / (gamma + 1)
    (where a verify step of ``gamma`` drafts turns compute-bound) marked.
    """
    import kvbook.plots as kp

    c = kvmath.Chip.preset(chip)
    dep = deployment(kvmath.Model.preset(model), c)
    b_crit = F.critical_batch(c.flops("bf16"), c.bandwidth, 2)  # bf16 weights and math
    b_verify = b_crit / (gamma + 1)  # equation spec-verify-ridge
    batch = np.geomspace(1, 4096, 97)
    fig, ax = kp.new_figure((7, 3.6))
    for i, g in enumerate((*gammas, 0)):  # the plain step last, dashed, on top
        step_s = dep.step(batch, context, tokens_per_seq=g + 1).strict_s
        ax.plot(
            batch,
            step_s,
            color="0.1" if g == 0 else kp.COLORS[i + 1],
            ls="--" if g == 0 else "-",
            label="plain step" if g == 0 else f"verify, $\\gamma$ = {g}",
        )
    kp.log_batch_axis(ax)
    ax.set_yscale("log")
    kp.seconds_axis(ax, "y", "ms", "time per step (strict bound)")
    kp.mark_vline(ax, b_crit, f"B_crit = {b_crit:.0f}", y=0.97)
    kp.mark_vline(
        ax, b_verify, f"B_crit / {gamma + 1} = {b_verify:.0f}", y=0.55, color=kp.COLORS[2]
    )
    ax.legend(loc="upper left", fontsize=8)
    return fig


@figure
def expected_tokens(acceptances: list = (0.6, 0.7, 0.8, 0.9), max_gamma: int = 10):
    """Expected tokens per verify step (equation spec-expected) against the drafts, for each acceptance rate."""
    import kvbook.plots as kp

    gammas = np.arange(1, max_gamma + 1)
    fig, ax = kp.new_figure((7, 3.4))
    for i, a in enumerate(acceptances):
        ax.plot(
            gammas,
            F.expected_tokens_per_step(a, gammas),
            "o-",
            ms=4,
            color=kp.COLORS[i],
            label=f"a = {a}",
        )
    ax.plot(
        gammas, gammas + 1, ":", color="0.5", label="every draft accepted, $\\gamma + 1$"
    )
    ax.set_xlabel("drafts per verify step, $\\gamma$")
    ax.set_ylabel("expected tokens per step, E")
    ax.set_xlim(0.5, max_gamma + 0.5)
    ax.set_ylim(0, 8)
    ax.legend(loc="upper left", fontsize=8)
    return fig


#: The break-even figure's curves: label, model, chip, chips, weights, context.
CURVES = (
    ("Llama 3.1 8B, 1 H100, S = 128", "llama-3.1-8b", "h100-sxm", 1, "bf16", 128),
    ("Llama 3.1 8B, 1 H100, S = 8,192", "llama-3.1-8b", "h100-sxm", 1, "bf16", 8192),
    ("Mixtral 8x7B, 2 H100, S = 128", "mixtral-8x7b", "h100-sxm", 2, "bf16", 128),
    ("DeepSeek-V3, 8 H200, S = 128", "deepseek-v3", "h200", 8, "fp8", 128),
)


@figure
def speedup_by_batch(gamma: int = GAMMA, acceptance: float = ACCEPT, curves: list = CURVES):
    """Estimated speed-up of speculative decoding (free draft) against the batch, at the strict bounds of both steps.

    Each curve solid up to the largest batch whose caches fit beside the
    weights and dotted past it; the ceiling E dashed.
    """
    import kvbook.plots as kp

    e_run = float(F.expected_tokens_per_step(acceptance, gamma))
    wide = np.geomspace(1, 1e5, 121)
    fig, ax = kp.new_figure((7, 3.8))
    for i, (label, m, chip, n, w, s) in enumerate(curves):
        dep = deployment(kvmath.Model.preset(m), kvmath.Chip.preset(chip), n, w)
        curve = dep.speculate(wide, s, gamma, acceptance).speedup
        inside = wide <= batch_that_fits(dep, s)  # solid where the caches fit, dotted past it
        ax.plot(wide[inside], curve[inside], color=kp.COLORS[i], label=label)
        ax.plot(wide[~inside], curve[~inside], color=kp.COLORS[i], ls=":")
    ax.axhline(1, color="0.3", lw=0.9)
    ax.axhline(e_run, color="0.6", lw=0.8, ls="--")
    ax.text(1.3, e_run + 0.08, f"E = {e_run:.2f}", fontsize=9, color="0.4")
    kp.log_batch_axis(ax)
    ax.set_xlim(1, 1e5)
    ax.set_ylim(0, 4)
    ax.set_ylabel("speed-up over plain decoding")
    ax.legend(loc="lower left", fontsize=8)
    return fig


#: The live figure's settings, by key: label, model, chip, chips, weights, context.
SETUPS = {
    "llama-8b": ("Llama 3.1 8B, 1 H100, S = 128", "llama-3.1-8b", "h100-sxm", 1, "bf16", 128),
    "llama-70b": ("Llama 3.1 70B, 8 H100, S = 4,096", "llama-3.1-70b", "h100-sxm", 8, "bf16", 4096),
    "mixtral": ("Mixtral 8x7B, 2 H100, S = 128", "mixtral-8x7b", "h100-sxm", 2, "bf16", 128),
    "deepseek": ("DeepSeek-V3, 8 H200, S = 128", "deepseek-v3", "h200", 8, "fp8", 128),
}


def setup_deployment(key):
    """The live figure's deployment for setting ``key`` of :data:`SETUPS`."""
    _, m, chip, n, w, _ = SETUPS[key]
    return deployment(kvmath.Model.preset(m), kvmath.Chip.preset(chip), n, w)


@figure
def speedup_live(gamma: int = GAMMA, acceptance: float = ACCEPT, model: str = "llama-8b"):
    """Estimated speed-up of speculative decoding against the batch, with the break-even batch."""
    import kvbook.plots as kp
    from kvbook.interactive import Choice, Slider, interactive_figure

    DEPLOYMENTS = {key: setup_deployment(key) for key in SETUPS}
    FITS = {key: batch_that_fits(DEPLOYMENTS[key], s) for key, (*_, s) in SETUPS.items()}
    GRID = np.geomspace(1, 1e5, 121)

    def setup(fig):
        ax = fig.add_subplot()
        (inside,) = ax.plot(GRID, GRID, color=kp.COLORS[0])
        (outside,) = ax.plot(GRID, GRID, color=kp.COLORS[0], ls=":")
        ax.axhline(1, color="0.3", lw=0.9)
        (ceiling,) = ax.plot(GRID, np.ones_like(GRID), color="0.6", lw=0.8, ls="--")
        kp.log_batch_axis(ax)
        ax.set_xlim(1, 1e5)
        ax.set_ylim(0, 8)
        ax.set_ylabel("speed-up over plain decoding")
        even = kp.mark_vline(ax, 100.0, "break-even", y=0.97, color=kp.COLORS[3])
        note = ax.set_title("", loc="left", fontsize=9)

        def update(gamma, acceptance, model):
            label, *_, s = SETUPS[model]
            dep = DEPLOYMENTS[model]
            curve = dep.speculate(GRID, s, gamma, acceptance).speedup
            fit = GRID <= FITS[model]
            inside.set_data(GRID[fit], curve[fit])
            outside.set_data(GRID[~fit], curve[~fit])
            e = float(F.expected_tokens_per_step(acceptance, gamma))
            ceiling.set_ydata(np.full_like(GRID, e))
            b = speculation_break_even_batch(dep, s, gamma, acceptance, none_if_always_pays=True)
            shown = b is not None and b < 1e5
            even.line.set_visible(shown)
            even.text.set_visible(shown)
            if shown:
                even.move(b, f"stops paying at B = {b:,.0f}")
            where = (
                "pays at every batch shown"
                if not shown
                else f"fits up to B = {FITS[model]:,}"
            )
            note.set_text(
                f"{label}\n$\\gamma$ = {gamma}, a = {acceptance}: E = {e:.2f}; {where}"
            )

        return update

    return interactive_figure(
        setup,
        controls={
            "gamma": Slider([1, 2, 4, 6, 8], default=gamma, label="drafts gamma"),
            "acceptance": Choice([0.6, 0.7, 0.8, 0.9], default=acceptance, label="acceptance a"),
            "model": Choice(
                [(v[0], k) for k, v in SETUPS.items()], default=model, label="model"
            ),
        },
        main="gamma",
        figsize=(7, 3.8),
        caption="Estimated speed-up of speculative decoding against the batch, with the break-even batch",
        fixed_limits=True,
    )
