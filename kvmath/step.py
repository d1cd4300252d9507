"""One decode step of a real model on a real chip: what it reads, what it computes, how long at least.

:func:`decode_step` puts the model's side (weight bytes read by group, MoE
experts touched, attention FLOPs, KV bytes) together with the chip's side
(bandwidth, the FLOP rate of the weights' format) and returns both forms of
the bound of :mod:`kvmath.decode`. Every chapter and the command line use
it, so there is one step model.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .decode import StepBreakdown
from .hardware import Chip, get_chip
from .models import Model, Precision, _group_bytes, get_model, group_formats
from .links import Link, as_link
from .parallel import KV_SHARDINGS, ChipStep, ParallelLayout, as_layout, chip_step, tensor_parallel_comm_s, tensor_parallel_step
from .units import dtype_bytes
from .validation import ArrayLike, ResultOverflow, checked, choice, finite, fraction, instance, non_negative, one_int, plain, positive, positive_int


def as_presets(model, chip) -> tuple[Model, Chip]:
    """``(model, chip)`` as objects: a preset name is looked up, anything else not a Model/Chip is a ValueError."""
    out = []
    for name, value, cls, getter in (("model", model, Model, get_model), ("chip", chip, Chip, get_chip)):
        if isinstance(value, str):
            value = getter(value)
        elif not isinstance(value, cls):
            raise ValueError(f"{name} must be a {cls.__name__} or a preset name, got {value!r}")
        out.append(value)
    return out[0], out[1]


def _overflow(where: str, inputs: Mapping) -> ResultOverflow:
    shown = ", ".join(f"{k}={v!r}" if np.ndim(v) == 0 else f"{k} (an array of shape {np.shape(v)})"
                      for k, v in inputs.items())
    return ResultOverflow(f"{where}: the result overflows float64 (it would be inf) for {shown}; use smaller numbers")


def refuse_overflow(where: str, results: Mapping, **inputs) -> None:
    """Raise :class:`kvmath.ResultOverflow` naming ``inputs`` where any of ``results`` is inf or NaN."""
    for value in results.values():
        if not np.all(np.isfinite(np.asarray(value, dtype=float))):
            raise _overflow(where, inputs)


@contextlib.contextmanager
def overflow_named(where: str, **inputs):
    """Inside: no numpy warnings, and an inner overflow re-raised as one naming ``where``'s ``inputs``."""
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            yield
    except (ResultOverflow, ArithmeticError):
        raise _overflow(where, inputs) from None
from .moe import ROUTINGS


@dataclass(frozen=True)
class StepWork:
    """What one decode step must move and compute, for the whole step over all chips.

    Attributes
    ----------
    batch, context, tokens_per_seq : the step's shape (sequences, cached
        tokens each, tokens each through the weights).
    weight_bytes_read : what the strict bound charges: every matrix once,
        embedding rows looked up, MoE experts at the k-expert floor.
    weight_bytes_read_uniform : the same with experts touched under uniform
        routing (an estimate; equal to the floor for a dense model).
    weight_bytes_read_ceiling : the same with min(E, k T) experts (an upper bound).
    weight_bytes_resident : every weight, all experts: what memory must hold.
    matmul_params : parameters each token multiplies by (2x: its weight FLOPs).
    kv_bytes_per_seq : the cache one sequence reads.
    attention_flops_per_seq : attention's FLOPs for one sequence.
    kv_heads : heads the cache splits into under tensor parallelism (1 for
        MQA and for an MLA latent, which every head shares).
    state_bytes_per_seq, state_heads : the part of ``kv_bytes_per_seq`` that
        is linear layers' fixed state, and the heads it splits into (0:
        unknown, taken as splitting evenly); the rest splits by ``kv_heads``.
    """

    batch: ArrayLike
    context: ArrayLike
    tokens_per_seq: ArrayLike
    weight_bytes_read: ArrayLike
    weight_bytes_read_uniform: ArrayLike
    weight_bytes_read_ceiling: ArrayLike
    weight_bytes_resident: ArrayLike
    matmul_params: ArrayLike
    kv_bytes_per_seq: ArrayLike
    attention_flops_per_seq: ArrayLike
    kv_heads: int
    state_bytes_per_seq: ArrayLike = 0.0
    state_heads: int = 0

    @property
    def kv_bytes_read(self) -> ArrayLike:
        """The KV cache the whole batch reads, bytes."""
        return plain(self.batch * self.kv_bytes_per_seq)

    @property
    def weight_flops(self) -> ArrayLike:
        """FLOPs of the weight matmuls: 2 * P_matmul * B * tokens_per_seq."""
        return plain(2 * self.matmul_params * self.batch * self.tokens_per_seq)

    @property
    def attention_flops(self) -> ArrayLike:
        """FLOPs of attention over the cache for the whole batch."""
        return plain(self.batch * self.attention_flops_per_seq)


@checked
def step_work(
    model: Model,
    batch: ArrayLike,
    context: ArrayLike,
    *,
    weights: Precision = "bf16",
    kv_dtype: str | float = "bf16",
    tokens_per_seq: ArrayLike = 1,
) -> StepWork:
    """The bytes and FLOPs of one decode step of ``model`` (arguments as in :func:`decode_step`).

    Examples
    --------
    >>> from kvmath import get_model
    >>> w = step_work(get_model("mixtral-8x7b"), 8, 4096)
    >>> [round(x / 1e9, 2) for x in (w.weight_bytes_read, w.weight_bytes_read_uniform, w.weight_bytes_resident)]
    [25.5, 84.11, 93.41]
    """
    instance("model", model, Model, "a Model (get_model(name))")
    batch = positive("batch", batch)
    context = positive("context", context)
    tokens_per_seq = positive("tokens_per_seq", tokens_per_seq)
    b_kv = dtype_bytes(kv_dtype, argument="kv_dtype") if isinstance(kv_dtype, str) else positive("kv_dtype", kv_dtype)
    reads = {r: model.weight_bytes_read(batch, weights, r, tokens_per_seq) for r in ("floor", "uniform", "ceiling")}
    work = StepWork(
        batch=batch,
        context=context,
        tokens_per_seq=tokens_per_seq,
        weight_bytes_read=reads["floor"],
        weight_bytes_read_uniform=reads["uniform"],
        weight_bytes_read_ceiling=reads["ceiling"],
        weight_bytes_resident=model.weight_bytes_resident(weights),
        matmul_params=model.matmul_params_per_token(),
        kv_bytes_per_seq=model.kv_bytes_per_seq(np.ceil(context), b_kv),
        attention_flops_per_seq=plain(model.attention_flops_per_token(context) * tokens_per_seq),
        kv_heads=1 if model.attention == "mla" else model.n_kv_heads,
        **_linear_state(model),
    )
    for total in (work.kv_bytes_read, work.weight_flops, work.attention_flops):  # the totals over the batch must fit too
        finite(total)
    return work


def _linear_state(model: Model) -> dict:
    """StepWork's state_bytes_per_seq and state_heads: linear layers' states and the fewest heads they split into."""
    linear = [s for s in model.layer_specs() if s.kind == "linear"]
    if not linear:
        return {}
    return {"state_bytes_per_seq": float(sum(s.state_bytes for s in linear)),
            "state_heads": min(s.n_heads for s in linear)}


def _kv_bytes_split_by_heads(work: StepWork, n_chips: int) -> ArrayLike:
    """``kv_bytes_per_seq`` rescaled so that splitting it by ``kv_heads`` charges each part by its own heads.

    Attention KV goes ``ceil(h_kv / N) / h_kv`` to a chip, a linear state
    ``ceil(h_s / N) / h_s`` (``1 / N`` where its heads are unknown).
    """
    state = work.state_bytes_per_seq
    to_chip_kv = np.ceil(work.kv_heads / n_chips) / work.kv_heads
    h_s = work.state_heads
    to_chip_state = np.ceil(h_s / n_chips) / h_s if h_s else 1 / n_chips
    return plain(work.kv_bytes_per_seq - state + state * to_chip_state / to_chip_kv)


@dataclass(frozen=True)
class DecodeStep:
    """One decode step: its work (:class:`StepWork`) and its bounds on one chip.

    Attributes
    ----------
    work : StepWork
        Bytes and FLOPs of the whole step over all chips.
    n_chips : int
    kv_bytes_per_chip : the cache each chip reads (a replicated cache counts
        in full on every chip).
    terms : :class:`kvmath.StepBreakdown` on one chip: ``strict_step_s`` is the
        strict lower bound, ``step_s`` the no-overlap form.
    is_lower_bound : False where an efficiency below 1 or an overhead was
        given: the times are then estimates.
    comm_s : lower bound on the communication between chips, seconds (0
        without a link or on one chip).
    chip : the per-chip view (:class:`kvmath.ChipStep`) where a layout was given.
    """

    work: StepWork
    n_chips: int
    kv_bytes_per_chip: ArrayLike
    terms: StepBreakdown
    is_lower_bound: bool
    comm_s: ArrayLike = 0.0
    chip: ChipStep | None = None

    @property
    def strict_step_s(self) -> ArrayLike:
        """Strict lower bound on the step, seconds (an estimate if ``is_lower_bound`` is False).

        ``overhead + max(bytes / W, FLOPs / C, comm_s)``: communication runs
        on the links while other work that does not wait for it proceeds.
        """
        return plain(np.maximum(self.terms.strict_step_s, self.terms.overhead_s + self.comm_s))

    @property
    def no_overlap_step_s(self) -> ArrayLike:
        """The no-overlap form, seconds: attention, then the weights, then the communication."""
        return plain(self.terms.step_s + self.comm_s)

    @property
    def tokens_per_s(self) -> ArrayLike:
        """Tokens the batch produces per second at the strict bound: B / strict_step_s."""
        return self.work.batch / self.strict_step_s


def format_rate(chip: Chip, fmt) -> float:
    """The rate a chip runs matmuls of one weight format at (a bytes-per-weight number: bf16)."""
    return chip.flops_for_format(fmt) if isinstance(fmt, str) else chip.flops("bf16")


@checked
def compute_rate(chip: Chip, weights: Precision, compute_dtype: str | None = None, model: Model | None = None) -> float:
    """FLOP/s of a step's matmuls: ``compute_dtype`` if given, else each weight group's own format's rate.

    A format runs at its native rate where the chip has it, else at bf16
    (:meth:`kvmath.Chip.flops_for_format`); bytes per weight given as a
    number run at bf16. With a ``model`` and a mapping of formats, groups
    at different rates combine into the one rate that gives the same total
    time, ``sum(P_g) / sum(P_g / C_g)`` over the model's matmul parameters;
    attention's own math runs at that rate too.

    Examples
    --------
    >>> from kvmath import get_chip, get_model
    >>> h100 = get_chip("h100-sxm")
    >>> compute_rate(h100, "fp8") / 1e12, compute_rate(h100, "fp8", "bf16") / 1e12
    (1978.9, 989.4)
    >>> mixed = {"default": "bf16", "experts": "fp8"}  # Mixtral: most matmul parameters are experts
    >>> round(compute_rate(h100, mixed, model=get_model("mixtral-8x7b")) / 1e12)
    1774
    """
    instance("chip", chip, Chip, "a Chip (get_chip(name))")
    if model is not None:
        instance("model", model, Model, "a Model (get_model(name)) or None")
    formats = group_formats(weights, model.tied_embeddings if model is not None else False)
    _group_bytes(weights, False)  # refuse a bad weights even where compute_dtype makes it unused
    if compute_dtype is not None:
        return chip.flops(compute_dtype)

    def rate(fmt) -> float:
        return format_rate(chip, fmt)

    if model is None:
        if isinstance(weights, Mapping) and len({rate(f) for f in formats.values()}) > 1:
            raise ValueError("weights mixes formats of different compute rates: pass the model to combine them")
        return rate(formats["mlp"])
    params = model.matmul_params_by_group()
    time_per_flop = sum(n / rate(formats[g]) for g, n in params.items())
    return sum(params.values()) / time_per_flop


@checked
def step_time(
    work: StepWork,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    *,
    n_chips: int = 1,
    shard: str = "heads",
    overhead_s: ArrayLike = 0.0,
    efficiency: ArrayLike = 1.0,
    routing: str = "floor",
) -> DecodeStep:
    """Bounds on a step's ``work`` on ``n_chips`` chips of ``bandwidth`` bytes/s and ``flops`` FLOP/s each.

    See :func:`decode_step` for the arguments.
    """
    instance("work", work, StepWork, "a StepWork (step_work(...))")
    routing = choice("routing", routing, ROUTINGS)
    charged = {"floor": work.weight_bytes_read, "uniform": work.weight_bytes_read_uniform,
               "ceiling": work.weight_bytes_read_ceiling}
    if routing not in charged:
        raise ValueError(f"routing must be one of {sorted(charged)}, got {routing!r}")
    n_chips = one_int("n_chips", n_chips)
    efficiency = fraction("efficiency", efficiency)
    overhead_s = non_negative("overhead_s", overhead_s)
    effective_bw = finite(positive("bandwidth", bandwidth) * efficiency, nonzero=True)
    kv_seq = work.kv_bytes_per_seq
    if np.any(work.state_bytes_per_seq) and choice("shard", shard, KV_SHARDINGS) == "heads":
        kv_seq = _kv_bytes_split_by_heads(work, n_chips)
    terms = tensor_parallel_step(
        work.batch, kv_seq, work.kv_heads, charged[routing], work.matmul_params, n_chips,
        effective_bw, flops, shard=shard, attention_flops_per_seq=work.attention_flops_per_seq,
        overhead_s=overhead_s, tokens_per_seq=work.tokens_per_seq,
    )
    return DecodeStep(
        work=work,
        n_chips=n_chips,
        kv_bytes_per_chip=plain(terms.kv_s * effective_bw),
        terms=terms,
        is_lower_bound=bool(np.all(efficiency == 1) and np.all(overhead_s == 0) and routing == "floor"),
    )


@checked
def decode_step(
    model: Model,
    chip: Chip,
    batch: ArrayLike,
    context: ArrayLike,
    *,
    weights: Precision = "bf16",
    kv_dtype: str | float = "bf16",
    compute_dtype: str | None = None,
    n_chips: int = 1,
    shard: str | None = None,
    tokens_per_seq: ArrayLike = 1,
    overhead_s: ArrayLike = 0.0,
    efficiency: ArrayLike = 1.0,
    routing: str = "floor",
    layout: ParallelLayout | str | None = None,
    link: Link | str | None = None,
    activation_dtype: str = "bf16",
) -> DecodeStep:
    """Bounds on one decode step of ``model`` on ``n_chips`` of ``chip``.

    Parameters
    ----------
    model, chip : Model, Chip
        The presets (or your own).
    batch : float or array
        Sequences decoded together, B (real-valued for smooth sweeps).
    context : float or array
        Tokens in each sequence's cache, S (real-valued for smooth sweeps;
        sliding windows applied).
    weights : str, float or mapping
        How the weights are stored (see :data:`kvmath.models.Precision`).
    kv_dtype : str or float
        Format (or bytes per element) of the cache.
    compute_dtype : str, optional
        Rate the weight matmuls run at; default the weights' format's own
        (fp8 weights on an H100 at the fp8 rate; int4-g128 at bf16).
        Attention math runs at the same rate.
    n_chips, shard : int, str
        Tensor parallelism and how the cache splits (see
        :func:`kvmath.tensor_parallel_step`; ``shard`` default ``"heads"``);
        an MLA latent is shared by all heads, so sharding by heads
        replicates it on every chip. By heads, ``n_chips`` must divide the
        model's heads, as ``layout=ParallelLayout(tp=n_chips)`` must (a
        ``ValueError`` suggests ``pp=`` otherwise).
    tokens_per_seq : float or array
        Tokens per sequence through the weights: gamma + 1 for a speculative
        verify step (more FLOPs, more experts touched, the same cache read).
    overhead_s : float or array
        Fixed per-step overhead (an estimate to fit; default 0).
    efficiency : float or array
        Achieved fraction of peak bandwidth (default 1; below 1 the result
        is an estimate, not a bound).
    routing : str
        Which MoE weight reads the times charge: ``"floor"`` (k experts per
        layer: the strict bound, the default), ``"uniform"`` (an estimate)
        or ``"ceiling"``.
    layout : ParallelLayout, optional
        Any mix of tensor, context, data, pipeline and expert parallelism
        (:func:`kvmath.chip_step`), or its text (``"tp=2,pp=4"``); replaces
        ``n_chips`` and ``shard`` (``n_chips`` must then be 1 or the
        layout's chip count, and ``shard`` not given: write ``dp=``).
    link : Link or str, optional
        The chips' links (:func:`kvmath.get_link`, or a preset name): adds the communication
        lower bound ``comm_s``: tensor parallelism's two all-reduces per
        layer of ``B * tokens_per_seq * d`` activations (and, with a layout,
        its other collectives). Without it communication is not counted.
        The strict bound becomes ``max(bytes / W, FLOPs / C, comm_s)``
        (plus overhead), the no-overlap form adds ``comm_s``.
    activation_dtype : str
        Format of the activations the collectives move (default bf16).

    Returns
    -------
    DecodeStep

    Examples
    --------
    Llama 3 8B in bf16 on an RTX 4090 at batch 1: the step reads 15.01 GB
    of weights, not the 16.06 GB of the whole model (the input embedding is
    only looked up), so the bound is 67.0 tokens/s at a 256-token context,
    above the 65.21 tokens/s llama.cpp measured (PR #15131):

    >>> from kvmath import get_chip, get_model
    >>> s = decode_step(get_model("llama-3-8b"), get_chip("rtx-4090"), 1, 256)
    >>> round(s.work.weight_bytes_read / 1e9, 2), round(float(s.tokens_per_s), 1)
    (15.01, 67.0)

    Llama 2 70B at batch 1 on 8 H100s over NVLink 4: 160 all-reduces of
    16 KB cost at least 0.086 ms, against 5.1 ms of weight reads:

    >>> from kvmath import get_link
    >>> s = decode_step(get_model("llama-2-70b"), get_chip("h100-sxm"), 1, 4096, n_chips=8, link=get_link("nvlink4"))
    >>> round(s.comm_s * 1e3, 3), round(s.strict_step_s * 1e3, 3)
    (0.086, 5.178)
    """
    with overflow_named("decode_step", batch=batch, context=context, n_chips=n_chips):
        return _decode_step(model, chip, batch, context, weights, kv_dtype, compute_dtype, n_chips, shard,
                            tokens_per_seq, overhead_s, efficiency, routing, layout, link, activation_dtype)


def _decode_step(model, chip, batch, context, weights, kv_dtype, compute_dtype, n_chips, shard, tokens_per_seq,
                 overhead_s, efficiency, routing, layout, link, activation_dtype) -> DecodeStep:
    """:func:`decode_step`'s body."""
    model, chip = as_presets(model, chip)
    link = None if link is None else as_link(link)
    work = step_work(model, batch, context, weights=weights, kv_dtype=kv_dtype, tokens_per_seq=tokens_per_seq)
    flops = compute_rate(chip, weights, compute_dtype, model)
    b_act = dtype_bytes(activation_dtype, argument="activation_dtype")
    if layout is None:
        shard = "heads" if shard is None else shard
        if shard == "heads":  # the same rule as layout=ParallelLayout(tp=n_chips)
            for n in np.unique(positive_int("n_chips", n_chips)):
                if model.n_heads % int(n):
                    raise ValueError(f"n_chips ({int(n)}) must divide the {model.n_heads} heads of {model.name} "
                                     f"to split by heads; try layout=ParallelLayout(pp={int(n)}) (pipeline by layers)")
        step = step_time(work, chip.bandwidth, flops, n_chips=n_chips, shard=shard,
                         overhead_s=overhead_s, efficiency=efficiency, routing=routing)
        comm = tensor_parallel_comm_s(model, work.batch, step.n_chips, link, work.tokens_per_seq, b_act)
        step = dataclasses.replace(step, comm_s=comm)
    else:
        layout = as_layout(layout)
        if shard is not None:
            raise ValueError(f"shard ({shard!r}) does not combine with layout: write dp= in the layout "
                             "to split the sequences")
        if routing != "floor":
            raise ValueError(f"routing {routing!r} is not modelled with a layout yet: use routing='floor'")
        if int(positive_int("n_chips", n_chips)) not in (1, layout.n_chips):
            raise ValueError(f"n_chips ({n_chips}) must be 1 or the layout's {layout.n_chips} chips")
        step = layout_step_time(model, work, chip.bandwidth, flops, layout, weights=weights, link=link,
                                activation_bytes=b_act, overhead_s=overhead_s, efficiency=efficiency)
    refuse_overflow("decode_step", {"strict": step.strict_step_s, "no_overlap": step.no_overlap_step_s},
                    batch=batch, context=context, n_chips=n_chips)
    return step


@checked
def layout_step_time(
    model: Model,
    work: StepWork,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    layout: ParallelLayout | str | None,
    *,
    weights: Precision = "bf16",
    link: Link | None = None,
    activation_bytes: ArrayLike = 2,
    overhead_s: ArrayLike = 0.0,
    efficiency: ArrayLike = 1.0,
) -> DecodeStep:
    """Bounds on a step's ``work`` spread over ``layout`` (:func:`kvmath.chip_step`), per-chip rates given.

    The layout form of :func:`step_time`; :func:`decode_step` with
    ``layout=`` calls it. ``layout`` as :func:`kvmath.chip_step` takes it (None is one chip; text
    such as ``"tp=2,pp=2"`` is parsed).
    """
    instance("work", work, StepWork, "a StepWork (step_work(...))")
    layout = as_layout(layout)
    efficiency = fraction("efficiency", efficiency)
    overhead_s = non_negative("overhead_s", overhead_s)
    per_chip = chip_step(
        model, work.batch, work.context, layout, finite(positive("bandwidth", bandwidth) * efficiency, nonzero=True), flops,
        weights=weights, kv_bytes_per_seq=work.kv_bytes_per_seq, attention_flops_per_seq=work.attention_flops_per_seq,
        tokens_per_seq=work.tokens_per_seq, link=link, activation_bytes=activation_bytes, overhead_s=overhead_s,
    )
    return DecodeStep(work=work, n_chips=layout.n_chips, kv_bytes_per_chip=per_chip.kv_bytes_read, terms=per_chip.terms,
                      is_lower_bound=bool(np.all(efficiency == 1) and np.all(overhead_s == 0)),
                      comm_s=per_chip.comm_s, chip=per_chip)


@checked
def model_critical_batch(
    model: Model,
    chip: Chip,
    weights: Precision = "bf16",
    compute_dtype: str | None = None,
    routing: str = "uniform",
) -> float:
    """Batch at which the weight matmuls take as long as reading the weights the batch touches.

    Solves ``weight_bytes_read(B) / W = 2 * P_matmul * B / C``. For a dense
    model this is about ``C * b_w / (2 W)``, a property of the chip and the
    dtypes. For an MoE model the bytes read grow with B until every expert is
    touched, so it depends on the model: about ``P_total / P_active`` times
    the dense figure once saturated (uniform routing by default, an
    estimate; ``routing="floor"`` gives the k-expert floor's batch).

    Examples
    --------
    >>> from kvmath import get_chip, get_model
    >>> h100 = get_chip("h100-sxm")
    >>> round(model_critical_batch(get_model("llama-2-70b"), h100))  # C * b_w / (2 W) = 295.3
    295
    >>> round(model_critical_batch(get_model("mixtral-8x7b"), h100))
    1079
    """
    routing = choice("routing", routing, ROUTINGS)
    instance("model", model, Model, "a Model (get_model(name))")
    flops = compute_rate(chip, weights, compute_dtype, model)
    bandwidth = chip.bandwidth
    matmul = model.matmul_params_per_token()

    def excess(b: float) -> float:
        return 2 * matmul * b / flops - model.weight_bytes_read(b, weights, routing) / bandwidth

    lo, hi = 1e-6, 1e9
    if excess(hi) < 0:
        raise ValueError(f"{model.name}: the weight math never catches up with the reads below a batch of 1e9")
    # Bisection on a log scale: the reads grow at most linearly in B, the math exactly so.
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
        if hi / lo < 1 + 1e-12:
            break
    return float(hi)
