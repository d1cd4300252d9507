"""One description of what is served and how, and every question asked of it.

A :class:`Deployment` holds the model, the chip, the layout over chips, the
links and the formats. It resolves preset names and checks everything once,
when it is built, and precomputes what depends on the model alone (bytes per
tensor group, each layer kind's cache and attention coefficients, the
compute rate), so that a question costs a few numpy operations:

>>> from kvmath import Deployment
>>> dep = Deployment("llama-2-70b", "h100-sxm", "tp=8")
>>> s = dep.step(64, 4096)                  # 64 sequences of 4,096 cached tokens
>>> round(s.weight_bytes_read / 1e9, 2), round(s.kv_bytes_read / 1e9, 2)   # per chip: an eighth of each
(17.18, 10.74)
>>> round(s.strict_s * 1e3, 3), s.binds    # (17.18 + 10.74) GB at 3.35 TB/s
(8.333, 'memory')

Every step is a **lower bound** (:attr:`Step.is_lower_bound`) unless an
efficiency below 1, an overhead or a routing other than ``"floor"`` is
given: then it is an estimate, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .formulas import _max, binds, step_times
from .hardware import Chip, get_chip
from .layout import ParallelLayout, as_layout
from .links import (Link, _all_to_all_s, _allreduce_s, _estimate_terms, _spanning_allreduce_s,
                    _two_tier_all_to_all_s, as_link)
from .models import Model, Precision, _group_bytes, get_model
from .moe import ROUTINGS, _touched
from .results import Result
from .units import dtype_bytes

if TYPE_CHECKING:  # the request results live with the module that builds them, loaded on first use
    from .requests import Frontier, Request
from .validation import (
    ArrayLike,
    ResultOverflow,
    broadcast,
    choice,
    fraction,
    instance,
    non_negative,
    positive,
    positive_int,
)

# Elementwise max, min, ceil and where that stay in plain Python for scalars: a numpy call on two floats costs
# about a microsecond, twenty times the comparison; a step on scalars makes dozens of them.
_SCALARS = (float, int)


def _min(a, b):
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return a if a <= b else b
    return np.minimum(a, b)


def _ceil(a):
    if type(a) in _SCALARS:
        return float(math.ceil(a))
    return np.ceil(a)


def _where(condition, a, b):
    if type(condition) is bool:
        return a if condition else b
    return np.where(condition, a, b)


def _any_differs(x, value: float) -> bool:
    return x != value if type(x) is float else bool(np.any(x != value))


def _finite(x) -> bool:
    if type(x) is float:
        return x - x == 0
    return bool(np.all(np.isfinite(x)))



_CHIP_LINK = object()  # Deployment's default link: the chip preset's own interconnect


@dataclass(frozen=True)
class Formats:
    """How the weights, the cache and the activations are stored, and what the matmuls run at (a description:
    the bounds that use it are the :class:`Deployment`'s).

    Attributes
    ----------
    weights : str, float or mapping
        The weights' format: a name (``"bf16"``, ``"fp8"``, ``"q4_0"``),
        bytes per weight, or a mapping from tensor group to either with an
        optional ``"default"`` (see :data:`kvmath.models.WEIGHT_GROUPS`).
    kv : str or float
        The cache's format, or bytes per element.
    compute : str, optional
        The rate the matmuls run at; default each weight group's own
        format's native rate (bf16 where the chip has none).
    activations : str
        The format the collectives move (default bf16).
    dispatch : str, optional
        The format of expert parallelism's dispatch (default ``activations``;
        DeepSeek-V3 dispatches in fp8 and combines in bf16).
    """

    weights: Precision = "bf16"
    kv: str | float = "bf16"
    compute: str | None = None
    activations: str = "bf16"
    dispatch: str | None = None


def _bytes_per_elem(name: str, value) -> float:
    if isinstance(value, str):
        return dtype_bytes(value, argument=name)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a format name or bytes per element, got {value!r}")
    return float(positive(name, value))


def _link_or_none(name: str, link) -> Link | None:
    if link is None:
        return None
    try:
        return as_link(link)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def _default_node(chip: Chip, layout: ParallelLayout) -> int:
    """Chips per node when none is given: the chip preset's node, else the whole layout on one node."""
    return chip.node_chips or layout.n_chips


def _check_nodes(layout: ParallelLayout, per_node: int, chip: Chip) -> None:
    """Refuse a layout whose collective groups or pipeline stages straddle node boundaries unevenly."""
    lay = layout
    # (pipeline stages may straddle: counting the node boundaries as the hops that cross stays a lower bound)
    groups = [("tp", lay.tp, 1), ("tp * cp", lay.tp * lay.cp, 1), ("cp", lay.cp, lay.tp), ("ep", lay.ep, 1)]
    for name, size, stride in groups:
        block = size * stride
        if size == 1 or block % per_node == 0 or per_node % block == 0:
            continue
        where = f" (the {chip.name} preset's node)" if per_node == chip.node_chips else ""
        raise ValueError(f"chips_per_node ({per_node}){where} splits the {name} groups of {size} chips unevenly "
                         f"over nodes ({block} chips a group{' with stride ' + str(stride) if stride > 1 else ''}): "
                         f"a node must hold whole groups, or a group whole nodes")


class Deployment:
    """A model served on chips: model, chip, layout, links and formats, checked once.

    Parameters
    ----------
    model : Model or str
        The model, or a preset name (``"llama-3-8b"``).
    chip : Chip or str
        One chip of the deployment, or a preset name.
    layout : ParallelLayout or str, optional
        How the model spreads over chips (``"tp=8"``, ``"tp=8,pp=2"``,
        ``ParallelLayout(dp=144, ep=144)``); default one chip.
    link : Link, str or None
        The links between chips of one node; default the chip preset's own
        interconnect (NVLink 4 for an H100 SXM). ``None`` counts no
        communication at all (the bound is then looser, never wrong).
    node_link : Link, str or None
        The links between nodes (one chip's network port); default the same
        as ``link``: the whole layout on one fabric.
    chips_per_node : int, optional
        Chips one node holds; default the chip preset's node
        (:attr:`kvmath.Chip.node_chips`: 8 on an HGX H100 board), or every
        chip of the layout where it has none. Chips fill nodes in the order
        tp, cp, dp, pp: a collective over a group that fits in a node uses
        ``link``; one that spans nodes takes ``node_link`` at the floor of a
        hierarchical algorithm (each node reduces on ``link``, and only the
        nodes' shares cross); a pipeline hop crosses nodes where a stage
        boundary is a node boundary. With a ``node_link`` of its own, each
        group must fill whole nodes or fit a whole number of times in one.
    formats : Formats, optional
        How weights, cache and activations are stored (default all bf16).
    weights, kv, compute : optional
        Shorthand for the fields of ``formats`` (not both).

    Examples
    --------
    >>> dep = Deployment("llama-3-8b", "rtx-4090")
    >>> round(dep.step(1, 256).tokens_per_s, 1)   # llama.cpp measured 65.21 (PR #15131)
    67.0
    """

    __slots__ = ("model", "chip", "layout", "link", "node_link", "chips_per_node", "formats", "_plan", "flops",
                 "b_act", "b_dispatch", "_floor", "_terms")

    def __init__(self, model: Model | str, chip: Chip | str, layout: ParallelLayout | str | None = None, *,
                 link: Link | str | None = _CHIP_LINK, node_link: Link | str | None = _CHIP_LINK,
                 chips_per_node: int | None = None, formats: Formats | None = None,
                 weights: Precision | None = None, kv: str | float | None = None, compute: str | None = None):
        model = get_model(model) if isinstance(model, str) else instance("model", model, Model, "a Model or a preset name")
        chip = get_chip(chip) if isinstance(chip, str) else instance("chip", chip, Chip, "a Chip or a preset name")
        try:
            layout = as_layout(layout).check(model)
        except ValueError as err:
            raise ValueError(f"layout: {err}") from None
        shorthand = {k: v for k, v in (("weights", weights), ("kv", kv), ("compute", compute)) if v is not None}
        if formats is None:
            formats = Formats(**shorthand)
        else:
            instance("formats", formats, Formats, "a Formats(weights=..., kv=...)")
            if shorthand:
                raise ValueError(f"give {sorted(shorthand)} either in formats or as arguments, not both")
        link = chip.link if link is _CHIP_LINK else _link_or_none("link", link)
        node_link = link if node_link is _CHIP_LINK else _link_or_none("node_link", node_link)
        if chips_per_node is None:
            chips_per_node = _default_node(chip, layout)
        else:
            chips_per_node = int(positive_int("chips_per_node", chips_per_node))
        if node_link is not link and node_link is not None and layout.n_chips > chips_per_node:
            _check_nodes(layout, chips_per_node, chip)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "chip", chip)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "link", link)
        object.__setattr__(self, "node_link", node_link)
        object.__setattr__(self, "chips_per_node", chips_per_node)
        object.__setattr__(self, "formats", formats)
        # the links' floors, once: None where no collective is counted (one chip, or no link)
        counted = link is not None and (layout.weight_shards > 1 or layout.pp > 1 or layout.ep > 1)
        object.__setattr__(self, "_floor", _Floor(link, node_link, chips_per_node) if counted else None)
        object.__setattr__(self, "_plan", _Plan(model, layout, formats.weights, _bytes_per_elem("kv", formats.kv)))
        from .rates import (
            _compute_rate,  # the one rule for a step's FLOP rate (weights checked by the plan above)
        )

        if formats.compute is not None:
            choice("compute", formats.compute, ("bf16", "fp16", "fp8", "int8", "fp4"))
        try:
            rate = _compute_rate(chip, formats.weights, formats.compute, model)
        except ValueError as err:  # a format the chip has no rate for: say which argument asked for it
            raise ValueError(f"{'compute' if formats.compute is not None else 'weights'}: {err}") from None
        if not (rate > 0 and math.isfinite(rate)):  # a subnormal chip rate combined to 0 or inf: refuse by name
            raise ResultOverflow(f"chip {chip.name!r}: the matmuls' FLOP rate of these weights is {rate!r} "
                                 "(it under- or overflows float64); use a larger rate")
        object.__setattr__(self, "flops", rate)
        object.__setattr__(self, "b_act", dtype_bytes(formats.activations, argument="activations"))
        object.__setattr__(self, "b_dispatch", self.b_act if formats.dispatch is None
                           else dtype_bytes(formats.dispatch, argument="dispatch"))
        object.__setattr__(self, "_terms", _comm_terms(model, layout, self.b_act, self.b_dispatch, chips_per_node))

    def __setattr__(self, name, value):
        raise AttributeError("a Deployment is immutable: build a new one with .replace(...)")

    def __repr__(self) -> str:
        links = "" if self.link is None else f", link={self.link.name!r}"
        return (f"Deployment({self.model.name!r}, {self.chip.name!r}, {self.layout!r}{links}, "
                f"formats={self.formats!r})")

    def replace(self, **changes) -> "Deployment":
        """A copy with some of the constructor's arguments changed (checked again)."""
        args = {"model": self.model, "chip": self.chip, "layout": self.layout, "link": self.link,
                "node_link": self.node_link, "chips_per_node": self.chips_per_node, "formats": self.formats}
        if "chips_per_node" not in changes and self.chips_per_node == _default_node(self.chip, self.layout):
            args["chips_per_node"] = None  # the default follows a new chip or layout
        if "link" in changes and "node_link" not in changes and self.node_link is self.link:
            args["node_link"] = _CHIP_LINK
        args.update(changes)
        return Deployment(**args)

    @property
    def n_chips(self) -> int:
        """Chips the deployment uses."""
        return self.layout.n_chips

    # ----- the decode step ----------------------------------------------------

    def step(self, batch: ArrayLike, context: ArrayLike, *, tokens_per_seq: ArrayLike = 1,
             routing: str = "floor", efficiency: ArrayLike = 1.0, overhead_s: ArrayLike = 0.0,
             logits: bool = True, last_mlp_logits_only: bool = False) -> "Step":
        """One decode step of ``batch`` sequences of ``context`` cached tokens each, on the busiest chip.

        Parameters
        ----------
        batch, context : float or array
            Sequences decoded together (B) and tokens in each one's cache (S);
            real-valued for smooth sweeps; arrays broadcast.
        tokens_per_seq : float or array
            Tokens each sequence pushes through the weights: gamma + 1 for a
            speculative verify step (more FLOPs and experts, the same cache).
        routing : str
            Which MoE expert reads to charge: ``"floor"`` (top-k per layer: the
            strict bound), ``"uniform"`` (an estimate) or ``"ceiling"``.
        efficiency, overhead_s : float or array
            Achieved fraction of peak bandwidth, and a fixed time per step:
            with either, the step is an estimate, not a bound.
        logits, last_mlp_logits_only : bool
            ``logits=False``: no token of the step needs logits (a prompt
            token fed as a step of its own), so it neither reads nor
            multiplies by the LM head; with ``last_mlp_logits_only`` (an
            engine that keeps only the rows needing logits before the last
            layer's MLP, as llama.cpp does; dense models) that MLP is skipped too.

        Returns
        -------
        Step
            A lower bound (``is_lower_bound``) unless an estimate was asked for.
        """
        batch, context, tokens_per_seq = _shape_args(batch, context, tokens_per_seq, efficiency=efficiency,
                                                     overhead_s=overhead_s)
        routing = choice("routing", routing, ROUTINGS)
        for name, value in (("logits", logits), ("last_mlp_logits_only", last_mlp_logits_only)):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        if last_mlp_logits_only and self.model.n_experts:
            raise ValueError(f"last_mlp_logits_only is modelled for dense models only; {self.model.name} has experts")
        efficiency = fraction("efficiency", efficiency)
        overhead_s = non_negative("overhead_s", overhead_s)
        plan = self._plan
        estimate = routing != "floor" or _any_differs(efficiency, 1.0) or _any_differs(overhead_s, 0.0)
        args = plan.decode_inputs(batch, context, tokens_per_seq)
        no_logits = None if logits else 0.0  # tokens per sequence that need logits: all, or none
        options = dict(bandwidth=self.chip.bandwidth * efficiency, flops=self.flops, comm=self._comm,
                       routing=routing, overhead_s=overhead_s, is_lower_bound=not estimate, lm_head_tokens=no_logits,
                       last_mlp_tokens=no_logits if last_mlp_logits_only else None)
        if all(type(x) is float for x in (batch, context, tokens_per_seq, efficiency, overhead_s)):
            try:
                step = plan.pass_(*args, **options)  # plain floats: no numpy warnings to silence
            except (ZeroDivisionError, OverflowError):  # a product of valid floats under- or overflowed
                raise ResultOverflow(f"step: the result overflows float64 for batch={batch!r}, context={context!r}; "
                                     "use smaller numbers") from None
        else:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                step = plan.pass_(*args, **options)
        if not (_finite(step.strict_s) and _finite(step.no_overlap_s)):
            raise ResultOverflow(f"step: the result overflows float64 (it would be inf) for batch={_show(batch)}, "
                                 f"context={_show(context)}; use smaller numbers")
        return step

    def strict_s(self, batch: ArrayLike, context: ArrayLike, *, tokens_per_seq: ArrayLike = 1) -> ArrayLike:
        """The strict lower bound on one decode step alone, seconds: :attr:`Step.strict_s` without the rest.

        For grids too large to keep every term of :meth:`step`: it keeps
        about two arrays of the grid's shape alive at a time.
        """
        batch, context, tokens_per_seq = _shape_args(batch, context, tokens_per_seq)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            out = self._strict_only(batch, context, tokens_per_seq)
        if not np.all(np.isfinite(out)):
            raise ResultOverflow(f"strict_s: the result overflows float64 for batch={_show(batch)}, "
                                 f"context={_show(context)}; use smaller numbers")
        return out

    def _strict_only(self, batch, context, tokens_per_seq):
        """:meth:`Plan.pass_`'s strict bound for a plain decode step, with at most two grid-sized arrays alive."""
        plan, lay = self._plan, self.layout
        if lay.replicate_lm_head:  # the whole head on every chip: rare, so the one step model itself answers
            return plan.pass_(*plan.decode_inputs(batch, context, tokens_per_seq), bandwidth=self.chip.bandwidth,
                              flops=self.flops, comm=self._comm).strict_s
        micro = plan.micro(batch)
        tokens = micro * tokens_per_seq
        kv_seq = plan.kv_read_per_seq(np.ceil(context))  # what the step reads of each sequence's cache
        if lay.kv_split == "batch":
            seqs = np.minimum(micro, np.ceil(micro / lay.tp))
            memory, compute = seqs * kv_seq, seqs * plan.attention_per_token(context)
            memory /= lay.cp
            compute *= tokens_per_seq / lay.cp
        else:
            memory = micro * plan._chip_share(kv_seq)
            memory /= lay.cp
            compute = micro * plan.attention_per_token(context)
            compute *= tokens_per_seq / plan.g
        fixed = plan.fixed_read + np.minimum(tokens, plan.n_positions) * plan.position_row
        if plan.embedding_row:
            fixed = fixed + np.minimum(tokens, plan.vocab) * plan.embedding_row
        memory += fixed / plan.g
        ep_tokens = plan.expert_tokens(batch, tokens, tokens_per_seq) if lay.ep > 1 else tokens
        if plan.n_experts:
            ways = lay.ep if lay.ep > 1 else plan.g
            memory += _touched(plan.n_experts, plan.top_k, ep_tokens, "floor") * plan.expert_bytes / ways
        memory /= self.chip.bandwidth
        routed = 2 * ep_tokens * plan.routed_active / lay.ep if lay.ep > 1 else 2 * tokens * plan.routed_active / plan.g
        compute += 2 * tokens * plan.dense_active / plan.g + routed
        if plan.cp_combine:
            compute += lay.cp * plan.cp_combine * tokens
        compute /= self.flops
        out = np.maximum(memory, compute, out=memory) if isinstance(memory, np.ndarray) and \
            memory.shape == np.broadcast_shapes(np.shape(memory), np.shape(compute)) else np.maximum(memory, compute)
        comm_s = self._comm(tokens)
        if np.ndim(comm_s) or comm_s:
            out = np.maximum(out, comm_s, out=out) if isinstance(out, np.ndarray) else np.maximum(out, comm_s)
        return out

    # ----- the other questions, each asked of the same deployment ----------------

    def prefill(self, batch: ArrayLike, input_tokens: ArrayLike) -> "Step":
        """One prefill pass of ``batch`` prompts of ``input_tokens`` each, on one chip of the first stage.

        A :class:`Step` whose ``tokens_per_seq`` is the prompt (every prompt
        token through the weights, logits for the last), ``context`` the
        cache it writes, and whose ``strict_s`` bounds the pass; under
        pipeline parallelism a chip does its stage's ``1 / pp`` share. The
        time to the first token, with chunking and the pipeline's fill, is
        :meth:`request`'s ``ttft_s``.
        """
        from .requests import prefill_chip_step

        step = prefill_chip_step(self, batch, input_tokens)
        if not (_finite(step.strict_s) and _finite(step.no_overlap_s)):
            raise ResultOverflow(f"prefill: the result overflows float64 (it would be inf) for batch={_show(batch)}, "
                                 f"input_tokens={_show(input_tokens)}; use smaller numbers")
        return step

    def request(self, batch: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
                chunk_tokens: int | None = None, price_per_chip_hour: ArrayLike | None = None,
                efficiency: ArrayLike = 1.0, overhead_s: ArrayLike = 0.0,
                last_mlp_logits_only: bool = False, prefix_tokens: ArrayLike | None = None,
                prefix_hit_rate: ArrayLike | None = None, block_size: int | None = None,
                routing: str = "floor") -> "Request":
        """A batch of whole requests: prefill, then ``output_tokens - 1`` decode steps (:class:`Request`).

        ``chunk_tokens`` runs the prompt in chunks (each re-reads the
        weights); a price per chip-hour adds the cost per million tokens.
        ``last_mlp_logits_only``: an engine that runs the last layer's MLP on
        the rows that need logits only, as llama.cpp does (dense models).
        ``prefix_tokens``, ``prefix_hit_rate``, ``block_size``: a shared
        prompt prefix found cached (prefix caching, :mod:`kvmath.prefix`).
        ``routing``: the experts an MoE step reads (``"floor"``, or ``"uniform"`` for an estimate).
        Lower bounds unless an efficiency, an overhead or a routing other than ``"floor"`` is given.
        """
        from .requests import request_times

        return request_times(self, batch, input_tokens, output_tokens, chunk_tokens=chunk_tokens,
                             price_per_chip_hour=price_per_chip_hour, efficiency=efficiency, overhead_s=overhead_s,
                             last_mlp_logits_only=last_mlp_logits_only, prefix_tokens=prefix_tokens,
                             prefix_hit_rate=prefix_hit_rate, block_size=block_size, routing=routing)

    def mixed_step(self, batch: ArrayLike, context: ArrayLike, chunk_tokens: ArrayLike = 0,
                   chunk_start: ArrayLike = 0, *, overhead_s: ArrayLike = 0.0, routing: str = "floor"):
        """One step of continuous batching: ``batch`` decode sequences plus a prompt chunk (:class:`kvmath.batching.MixedStep`).

        With ``chunk_tokens = 0`` it is :meth:`step`'s decode step. ``routing``
        as in :meth:`step` (``"uniform"``: an estimate, not a bound).
        """
        from .batching import mixed_step

        return mixed_step(self, batch, context, chunk_tokens, chunk_start, overhead_s=overhead_s, routing=routing)

    def steady_state(self, batch: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
                     price_per_chip_hour: ArrayLike | None = None, overhead_s: ArrayLike = 0.0,
                     routing: str = "floor"):
        """Continuous batching at ``batch`` requests in flight (:class:`kvmath.batching.SteadyState`).

        ``routing`` as in :meth:`step` (``"uniform"``: an estimate, not a bound)."""
        from .batching import steady_state

        return steady_state(self, batch, input_tokens, output_tokens, price_per_chip_hour=price_per_chip_hour,
                            overhead_s=overhead_s, routing=routing)

    def frontier(self, input_tokens: ArrayLike, output_tokens: ArrayLike, *, batch: ArrayLike | None = None,
                 tpot_limit_s: float | None = None, chunk_tokens: int | None = None, budget: str = "device",
                 hbm_bytes: float | None = None, price_per_chip_hour: float | None = None,
                 routing: str = "floor") -> "Frontier":
        """Throughput per chip against tokens/s per user as the batch grows, capped by memory (:class:`Frontier`).

        ``routing`` as in :meth:`step` (``"uniform"``: an estimate, not a bound)."""
        from .requests import serving_frontier

        return serving_frontier(self, input_tokens, output_tokens, batch=batch, tpot_limit_s=tpot_limit_s,
                                chunk_tokens=chunk_tokens, budget=budget, hbm_bytes=hbm_bytes,
                                price_per_chip_hour=price_per_chip_hour, routing=routing)

    def critical_batch(self, routing: str = "uniform") -> float:
        """The batch at which the weight matmuls take as long as reading the weights they touch (one chip's).

        ``C b_w / (2 W)`` for a dense model; for MoE the bytes grow with
        the batch until every expert is touched (``routing="uniform"``, an
        estimate, by default).
        """
        from .rates import model_critical_batch

        return model_critical_batch(self.model, self.chip, self.formats.weights, self.formats.compute, routing)

    def speculate(self, batch: ArrayLike, context: ArrayLike, gamma: int, acceptance: ArrayLike,
                  draft: Model | str | None = None, routing: str = "uniform", *, verify_tokens: int | None = None,
                  tokens_per_step: ArrayLike | None = None):
        """Speculative decoding against plain decoding on this deployment (:class:`kvmath.speculative.Speculation`)."""
        from .speculative import speculative_decode

        return speculative_decode(self, batch, context, gamma, acceptance, draft, routing,
                                  verify_tokens=verify_tokens, tokens_per_step=tokens_per_step)

    def capacity(self, context: ArrayLike, *, budget: str = "device", hbm_bytes: float | None = None,
                 engine: str | None = None, prefix_tokens: ArrayLike | None = None,
                 prefix_hit_rate: ArrayLike | None = None, block_size: int | None = None,
                 draft: Model | str | None = None, **engine_options) -> "Capacity":
        """What fits: the busiest chip's weights and, beside them, the tokens and sequences of ``context`` tokens.

        Parameters
        ----------
        context : float or array
            Tokens in each sequence's cache.
        budget : str
            Which memory per chip (:func:`kvmath.memory.memory_budget`):
            ``"device"`` (the marketed size, the default), ``"reported"``,
            ``"reserve"`` or ``"engine"``.
        hbm_bytes : float, optional
            Memory per chip in bytes, instead of the chip's (taken as that budget's size).
        engine : str, optional
            ``"vllm"`` adds vLLM's own KV sizing (:func:`kvmath.memory.vllm_engine`,
            an estimate; ``engine_options`` go to it: ``gpu_memory_utilization``,
            ``max_model_len``, ``vllm_version``, ``mamba_cache_mode``, ``tokens_rule``,
            ``hybrid``, ``dtype``, ``mamba_ssm_cache_dtype``, ``kv_dtype`` (vLLM's
            ``--kv-cache-dtype``, "auto" its default; default: this deployment's KV
            format); and ``block_size``). The
            weights are this deployment's formats as vLLM loads them (``dtype`` "auto":
            a float32 checkpoint in bf16). Options without ``engine`` are refused by name.
        prefix_tokens, prefix_hit_rate, block_size : optional
            A shared prompt prefix (prefix caching, :mod:`kvmath.prefix`): the
            fraction ``prefix_hit_rate`` (default 1) of the sequences that hit
            it hold no copy of its :func:`kvmath.prefix.reused_tokens` (whole
            blocks of ``block_size``, default vLLM's 16), which every chip that
            holds such a sequence stores once (``prefix_tokens`` at most
            ``context``: the prefix is the start of each sequence).
            ``max_tokens`` stays the token slots the memory holds (without a
            prefix); ``max_batch`` counts the sequences that fit with it.
        draft : Model or str, optional
            A separate draft model for speculative decoding, held on the same
            chips in the same layout: its weights take memory beside the
            target's, and every sequence keeps a cache in both models
            (``weight_bytes_per_chip`` and ``kv_bytes_per_seq`` then count both;
            not with ``engine`` or a prefix).

        Returns
        -------
        Capacity

        Examples
        --------
        Llama 3.1 8B on one H100 at 8,192 tokens, alone and with Llama 3.2 1B drafting (its 32 KiB a token
        beside the target's 128 KiB):

        >>> dep = Deployment("llama-3.1-8b", "h100-sxm")
        >>> int(dep.capacity(8192).max_batch), int(dep.capacity(8192, draft="llama-3.2-1b").max_batch)
        (59, 45)
        """
        from .memory import memory_budget
        from .prefix import check_prefix, reused_tokens, shared_kv_bytes

        context = positive_int("context", context)  # whole tokens, as the command line asks
        prefix = check_prefix(prefix_tokens, prefix_hit_rate, block_size)
        budget = choice("budget", budget, ("device", "reported", "reserve", "engine"))
        memory = memory_budget(self.chip if hbm_bytes is None else positive("hbm_bytes", hbm_bytes), budget)
        plan, lay = self._plan, self.layout
        weights = plan.weight_resident
        drafting = None
        if draft is not None:  # the draft's plan: the same chips, layout and formats
            if engine is not None or prefix is not None:
                raise ValueError(f"draft={draft!r} is sized without an engine or a shared prefix; leave those out")
            try:
                drafting = self.replace(model=draft)._plan
            except ValueError as err:
                raise ValueError(f"draft: {err}") from None
            weights = weights + drafting.weight_resident
        free = memory - weights
        if np.any(free <= 0):
            raise ValueError(f"the weights do not fit: {weights:.4g} bytes on the busiest chip of {self.n_chips} "
                             f"against {np.max(memory):.4g} bytes per chip (budget {budget!r}); use more chips")
        def chip_bytes(p):  # (one sequence's cache, its share on the busiest chip)
            seq = p.kv_per_seq(np.ceil(context))
            return seq, (seq if lay.kv_split == "batch" else p._chip_share(seq)) / lay.cp * p.stage

        kv_seq, per_seq_chip = chip_bytes(plan)
        seqs_per_group = lay.tp if lay.kv_split == "batch" else 1
        if drafting is not None:
            draft_seq, draft_chip = chip_bytes(drafting)
            kv_seq, per_seq_chip = kv_seq + draft_seq, per_seq_chip + draft_chip
        groups = lay.dp * seqs_per_group  # chips that each hold whole, different sequences
        per_token_chip = per_seq_chip / context  # a token slot's bytes on the busiest chip, before any sharing
        held_once = 0.0
        if prefix is not None:
            p, h, b = prefix
            shared = shared_kv_bytes(plan, np.ceil(context), reused_tokens(p, b, context, prompt_name="context"))
            if lay.kv_split != "batch":  # split by heads as the rest of the cache (it holds no linear state)
                shared = plan._chip_share(shared + plan.state_bytes) - plan._chip_share(plan.state_bytes)
            shared = shared / lay.cp * plan.stage
            per_seq_chip = per_seq_chip - h * shared
            held_once = np.where(np.asarray(h) > 0, shared, 0.0)
        max_batch = np.floor(np.maximum(free - held_once, 0.0) / per_seq_chip) * groups
        per_token = kv_seq / context  # averaged over the sequence: windows and linear states included
        result = dict(context=context, budget=budget, memory_per_chip_bytes=memory,
                      weight_bytes_per_chip=weights, kv_budget_bytes_per_chip=free,
                      kv_bytes_per_token=per_token, kv_bytes_per_seq=kv_seq,
                      max_tokens=np.floor(free / per_token_chip) * groups, max_batch=max_batch,
                      n_chips=self.n_chips, engine=None, prefix_kv_bytes_per_chip=held_once)
        given = sorted(k for k, v in engine_options.items() if v is not None)
        if engine is None and given:  # they would size nothing: refused, not ignored
            raise ValueError(f"{given[0]} applies with engine='vllm' only; give engine='vllm' or "
                             "leave it out")
        if engine is not None:
            choice("engine", engine, ("vllm",))
            if block_size is not None:
                engine_options["block_size"] = block_size
            result["engine"] = self._vllm(context, hbm_bytes=hbm_bytes, **engine_options)
        return Capacity(**{k: float(v) if isinstance(v, (np.generic, np.ndarray)) and np.ndim(v) == 0 else v
                           for k, v in result.items()})

    def _vllm(self, context, *, hbm_bytes: float | None = None, gpu_memory_utilization: float | None = None,
              block_size: int | None = None, max_model_len: int | None = None, vllm_version: str = "v1",
              mamba_cache_mode: str | None = None, tokens_rule: str | None = None, hybrid: bool | None = None,
              dtype: str | None = None, mamba_ssm_cache_dtype: str | None = None, kv_dtype: str | None = None):
        from .memory import GPU_MEMORY_UTILIZATION, runtime_total_bytes, vllm_engine

        if self.layout.n_chips != self.layout.tp:
            raise ValueError(f"engine 'vllm' is sized for tensor parallelism only, got {self.layout!r}")
        if max_model_len is None:  # vLLM sizes for the context asked about: it must be whole tokens, named as such
            positive_int("context", context)
        max_len = context if max_model_len is None else max_model_len
        if np.any(np.asarray(context) > max_len):
            raise ValueError(f"context ({context!r}) exceeds max_model_len ({max_model_len!r}): vLLM refuses longer "
                             "requests")
        # a memory size given is the reported total, as for the budgets: vLLM sees the runtime total, estimated below it
        total = None if hbm_bytes is None else runtime_total_bytes(hbm_bytes)
        # vLLM's hybrid rules: given ones only, so that vllm_engine's defaults stay the one place they are set
        rules = {k: v for k, v in (("mamba_cache_mode", mamba_cache_mode), ("tokens_rule", tokens_rule),
                                   ("dtype", dtype), ("mamba_ssm_cache_dtype", mamba_ssm_cache_dtype))
                 if v is not None}
        return vllm_engine(self.model, self.chip, max_len, total_bytes=total,
                           gpu_memory_utilization=(GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
                                                   else gpu_memory_utilization),
                           block_size=block_size, hybrid=hybrid,
                           weights=self.formats.weights, tensor_parallel=self.layout.tp,
                           kv_dtype=self.formats.kv if kv_dtype is None else kv_dtype,
                           engine=vllm_version, **rules)

    def fewest_chips(self, budget: str = "device", hbm_bytes: float | None = None,
                     engine: str | None = None) -> "Deployment":
        """This deployment on the fewest tensor-parallel chips whose busiest chip holds its weights.

        Tries ``N`` chips from the fewest whose memory (``budget``, or
        ``hbm_bytes`` per chip) could hold all the weights, upward: ``tp = N``
        where the heads split ``N`` ways, else ``pp = N`` (by layers), and keeps
        the first layout whose busiest chip holds its weights; with
        ``engine="vllm"`` only tensor parallelism that vLLM accepts (KV heads
        divisible by ``tp`` or dividing it). Links and
        formats are kept. ``ValueError`` if no ``tp`` up to the head count will do.

        Examples
        --------
        >>> Deployment("llama-3.1-70b", "h100-sxm").fewest_chips().n_chips   # 141 GB of bf16 weights on 80 GB chips
        2
        >>> Deployment("llama-3.1-405b", "h100-sxm").fewest_chips().layout  # 10.1 chips' worth; 128 heads split 16 ways
        ParallelLayout(tp=1, cp=1, dp=1, pp=12, ep=1)
        """
        from .memory import _check_tensor_parallel, memory_budget

        budget = choice("budget", budget, ("device", "reported", "reserve", "engine"))
        if engine is not None:
            choice("engine", engine, ("vllm",))
        memory = memory_budget(self.chip if hbm_bytes is None else positive("hbm_bytes", hbm_bytes), budget)
        whole = self.replace(layout=None, link=None)._plan.weight_resident
        chips = whole / memory
        if not chips <= self.model.n_heads * self.model.n_layers:  # inf or absurd: no layout could hold them
            raise ValueError(f"hbm_bytes: {memory!r} bytes per chip cannot hold {self.model.name}'s {whole:.4g} bytes "
                             f"of weights on any layout")
        start = max(1, int(np.ceil(chips)))
        for n in range(start, self.model.n_heads + 1):
            if self.model.n_heads % n == 0:
                layout = ParallelLayout(tp=n, kv_split=self.layout.kv_split)
            elif engine is None and n <= self.model.n_layers:
                layout = ParallelLayout(pp=n)  # the heads do not split n ways; the layers do
            else:
                continue
            if engine is not None:
                try:
                    _check_tensor_parallel(self.model, n)
                except ValueError:
                    continue
            dep = self.replace(layout=layout)
            if dep._plan.weight_resident < memory:
                return dep
        raise ValueError(f"no tensor-parallel size from {start} to the {self.model.n_heads} heads of "
                         f"{self.model.name} holds its {whole:.4g} bytes of weights at {memory:.4g} bytes per chip "
                         f"(budget {budget!r})")

    # ----- communication --------------------------------------------------------

    def _pipeline_s(self, message_bytes: ArrayLike) -> ArrayLike:
        """The pipeline's ``pp - 1`` sends of ``message_bytes`` (:func:`pipeline_hops_s` on this deployment's links)."""
        if self.layout.pp == 1 or self._floor is None:
            return 0.0
        return pipeline_hops_s(self.layout, message_bytes, self._floor)

    def comm_estimate(self, batch: ArrayLike, *, tokens_per_seq: ArrayLike = 1,
                      algorithm: str = "auto") -> "CommEstimate":
        """An **estimate** of the communication chain of one decode pass of ``batch`` sequences, beside its bound.

        The same collectives as :attr:`Step.comm_s` (the chain of
        :func:`_comm_chain` over the same links), each priced by its
        measured latency-bandwidth curve (:func:`kvmath.links.collective_estimate`):
        ``algorithm`` picks the all-reduce inside a node (``"auto"``: the
        fastest curve, an engine's custom kernel for small messages;
        ``"nccl"``: NCCL's alone, for engines that call NCCL, as gpt-fast
        and PyTorch do); a group across nodes takes NCCL's curve on the
        network. Collectives without a measured curve keep the bound's
        formula and are listed in ``flags``.

        Examples
        --------
        >>> dep = Deployment("llama-2-70b", "h100-sxm", "tp=8")
        >>> e = dep.comm_estimate(1)                       # 160 all-reduces of 16 KiB
        >>> round(e.estimate_s * 1e3, 3), round(e.bound_s * 1e3, 4), e.flagged
        (0.961, 0.0858, False)
        """
        from .links import ESTIMATE_ALGORITHMS

        algorithm = choice("algorithm", algorithm, ESTIMATE_ALGORITHMS)
        batch, _, tokens_per_seq = _shape_args(batch, 1.0, tokens_per_seq)
        tokens = self._plan.micro(batch) * tokens_per_seq
        estimate, flags = self._comm_measured(tokens, algorithm)
        return CommEstimate(batch=batch, tokens_per_seq=tokens_per_seq, tokens=tokens, algorithm=algorithm,
                            estimate_s=estimate + 0 * tokens, bound_s=self._comm(tokens) + 0 * tokens, flags=flags)

    def _comm_measured(self, tokens: ArrayLike, algorithm: str, *, hops: ArrayLike | None = None
                       ) -> tuple[ArrayLike, dict]:
        """``(seconds, flags)``: the chain of :meth:`_comm` at ``tokens`` priced by measured curves (checked
        ``algorithm``), or, with ``hops``, the pipeline's sends of ``hops`` bytes alone: the one pricing of
        collectives that :meth:`comm_estimate` and :mod:`kvmath.estimate` share."""
        if self._floor is None:
            return 0.0, {}
        cost = _Measured(self.link, self.node_link, self.chips_per_node, algorithm)
        if hops is not None:
            seconds = pipeline_hops_s(self.layout, hops, cost) if self.layout.pp > 1 else 0.0
        else:
            seconds = _comm_chain(self._terms, tokens, cost)
        return seconds, dict(cost.flags)

    def collectives(self, batch: ArrayLike, *, tokens_per_seq: ArrayLike = 1) -> "Collectives":
        """The collectives one chip makes in a decode pass of ``batch`` sequences: what each moves, how often, and
        its floor (:class:`Collectives`; their times add up to :attr:`Step.comm_s`).

        Tensor parallelism's two all-reduces per layer of the pass's
        activations (``T d`` elements); with experts over several chips an
        MoE layer's second one is a dispatch and a combine all-to-all of each
        chip's ``T k d / g`` routed activations; context parallelism's
        log-sum-exp combine per layer; and the pipeline's ``pp - 1`` hops of
        the activations (``T`` is the micro-batch's tokens, as in :meth:`step`).

        Examples
        --------
        >>> c = Deployment("llama-2-70b", "h100-sxm", "tp=8").collectives(64)
        >>> [(k.name, k.count, k.message_bytes) for k in c.collectives]   # 64 tokens x 8,192 x 2 bytes
        [('tensor-parallel all-reduce', 160, 1048576.0)]
        >>> c.comm_s == Deployment("llama-2-70b", "h100-sxm", "tp=8").step(64, 1).comm_s
        True
        """
        batch, _, tokens_per_seq = _shape_args(batch, 1.0, tokens_per_seq)
        tokens = self._plan.micro(batch) * tokens_per_seq
        floor = self._floor
        kinds = tuple(Collective(name=t.name, kind=t.kind, count=t.count, message_bytes=tokens * t.bytes_per_token,
                                 n_chips=t.n_chips,
                                 time_s=0.0 * tokens if floor is None else t.price(floor, tokens * t.bytes_per_token))
                      for t in self._terms)
        return Collectives(batch=batch, tokens_per_seq=tokens_per_seq, tokens=tokens, collectives=kinds,
                           comm_s=self._comm(tokens) + 0 * tokens)

    def _comm(self, tokens: ArrayLike) -> ArrayLike:
        """One chip's chain of communication in a pass of ``tokens`` tokens, seconds (0: none counted)."""
        if self._floor is None:
            return 0.0
        return _comm_chain(self._terms, tokens, self._floor)


class _Floor:
    """The lower bound on each collective of a deployment, routed over the link its group spans (0 without a link).

    Chips fill nodes of ``chips_per_node`` in the order tp, cp, dp, pp, so a
    group of ``size`` chips ``stride`` apart occupies a block of ``size *
    stride`` chips: inside one node it uses ``link``; across nodes (with a
    ``node_link`` of its own) ``per_node`` of its chips sit in each node.
    """

    def __init__(self, link: Link | None, node_link: Link | None, chips_per_node: int):
        self.link, self.node_link, self.per_node = link, node_link, chips_per_node
        self.two_tier = node_link is not link and node_link is not None

    def spans(self, size: int, stride: int = 1) -> bool:
        return size * stride > self.per_node

    def all_reduce(self, message, size: int, stride: int = 1):
        if not self.spans(size, stride) or not self.two_tier:
            return _allreduce_s(message, size, self.link if not self.spans(size, stride) else self.node_link)
        per_node = max(1, min(size, self.per_node // stride))
        return _spanning_allreduce_s(message, size, per_node, self.node_link, self.link)

    def all_to_all(self, share, ep: int):
        if self.two_tier:  # the port may carry copies for the chip's own node too (DeepEP's kernels)
            return _two_tier_all_to_all_s(share, ep, self.per_node, self.node_link, self.link)
        return _all_to_all_s(share, ep, self.link if not self.spans(ep) else self.node_link)

    def hop(self, message, crosses: bool):
        hop_link = self.node_link if crosses else self.link
        return 0.0 if hop_link is None else message / hop_link.bandwidth + hop_link.latency_s


class _Measured(_Floor):
    """Estimates of the same collectives from measured curves (:func:`kvmath.links.collective_estimate`).

    Inside a node the all-reduce takes ``algorithm``'s curve on ``link``;
    across nodes NCCL's curve on ``node_link`` at the whole group's size
    (the engines' custom kernels run inside a node only). An all-to-all
    takes DeepEP's curve where its link has one (measured on nodes of H800s:
    across nodes on ``node_link``, inside one on ``link``), never below the
    floor of its own topology (:meth:`_Floor.all_to_all`: the two tiers
    across nodes); without a curve, that floor. ``flags`` collects each
    collective whose curve is not a measurement at its size and link.
    """

    def __init__(self, link, node_link, chips_per_node, algorithm: str):
        super().__init__(link, node_link, chips_per_node)
        self.algorithm, self.flags = algorithm, {}

    def _estimate(self, kind, message, n, link, algorithm="auto", floor=None, floor_name="the bound's formula"):
        """The curve's estimate, or with ``floor`` (seconds, named ``floor_name``) the larger of the two, the floor
        alone where the link has no curve."""
        t, used, _, _, lat_ok, bw_ok, gpus, _ = _estimate_terms(kind, message, n, link, algorithm)
        no_curve = np.all(used == "floor")
        if floor is not None:
            t = floor if no_curve else np.maximum(t, floor)
        if not (np.all(lat_ok) and np.all(bw_ok)):
            self.flags[f"{kind} over {n} chips on {link.name}"] = (
                f"no measured curve: {floor_name}" if no_curve else
                f"curve measured on {' and '.join(map(str, gpus))} GPUs"
                + ("" if np.all(lat_ok) else ", latency not measured there")
                + ("" if np.all(bw_ok) else ", bandwidth not measured there"))
        return t

    def all_reduce(self, message, size: int, stride: int = 1):
        if size <= 1 or self.link is None:
            return 0.0
        if not self.spans(size, stride) or not self.two_tier:
            link = self.link if not self.spans(size, stride) else self.node_link
            return self._estimate("all_reduce", message, size, link, self.algorithm)
        return self._estimate("all_reduce", message, size, self.node_link, "nccl")

    def all_to_all(self, share, ep: int):
        if ep <= 1 or self.link is None:
            return 0.0
        across = self.two_tier and self.spans(ep)
        link = self.node_link if self.spans(ep) else self.link
        return self._estimate("all_to_all", share, ep, link, floor=super().all_to_all(share, ep),
                              floor_name=("the two-tier floor (the network for other nodes, both paths for the "
                                          "chip's own)" if across else "the bound's formula"))

    def hop(self, message, crosses: bool):
        hop_link = self.node_link if crosses else self.link
        return 0.0 if hop_link is None else self._estimate("p2p", message, 2, hop_link)


class _Term(NamedTuple):
    """One kind of collective on a pass's chain: ``count`` of them, each of ``bytes_per_token`` times the pass's
    tokens, over ``n_chips`` (the pass's tokens are the only thing that changes from step to step)."""

    name: str
    kind: str  # "all_reduce", "all_to_all" or "p2p"
    count: int
    bytes_per_token: float
    n_chips: int
    stride: int = 1  # an all-reduce's group: chips this far apart (context parallelism's are tp apart)
    crosses: bool = False  # a pipeline hop over the node link

    def price(self, cost: "_Floor", message_bytes: ArrayLike) -> ArrayLike:
        """One of them, of ``message_bytes``, seconds, priced by ``cost``."""
        if self.kind == "all_reduce":
            return cost.all_reduce(message_bytes, self.n_chips, self.stride)
        if self.kind == "all_to_all":
            return cost.all_to_all(message_bytes, self.n_chips)
        return cost.hop(message_bytes, self.crosses)


def _comm_terms(model: Model, layout: ParallelLayout, b_act: float, b_dispatch: float,
                per_node: int) -> tuple[_Term, ...]:
    """The collectives on one chip's chain in a pass, with chips filling nodes of ``per_node``.

    Tensor parallelism's two all-reduces per layer of ``T d b_act`` bytes
    over ``g = tp * cp`` chips (with ``ep > 1`` an MoE layer's second is a
    dispatch and a combine all-to-all of ``T k d b / g`` over ``ep`` chips);
    one log-sum-exp combine per layer over the ``cp`` chips ``tp`` apart;
    ``pp - 1`` point-to-point sends of ``T d b_act`` (:func:`_hops`), for a
    pass of ``T`` tokens.
    """
    lay, m = layout, model
    g, L = lay.weight_shards, m.n_layers
    activation = m.d_model * b_act
    moe_layers = (L - (m.n_dense_layers or 0)) if (m.n_experts and lay.ep > 1) else 0
    terms = []
    if g > 1:
        terms.append(_Term("tensor-parallel all-reduce", "all_reduce", 2 * L - moe_layers, activation, g))
    if moe_layers:
        per_chip = m.top_k * m.d_model / g
        terms.append(_Term("expert-parallel dispatch", "all_to_all", moe_layers, per_chip * b_dispatch, lay.ep))
        terms.append(_Term("expert-parallel combine", "all_to_all", moe_layers, per_chip * b_act, lay.ep))
    if lay.cp > 1:
        d_v = m.v_head_dim or m.head_dim
        terms.append(_Term("context-parallel combine", "all_reduce", L, m.n_heads / lay.tp * (d_v + 1) * b_act,
                           lay.cp, lay.tp))
    return (*terms, *_hops(lay, per_node, activation))


def _hops(layout: ParallelLayout, per_node: int, bytes_per_token: float) -> tuple[_Term, ...]:
    """The pipeline's ``pp - 1`` sends: those whose stage boundary is a node boundary, and those inside a node.

    Stages fill nodes in order, ``tp * cp * dp`` chips each: once a stage
    fills a node every hop crosses; below that the ``nodes - 1`` hops whose
    stage boundary is a node boundary do (a stage that straddles a boundary
    makes its hop cross too: counting it inside the node stays a lower bound).
    """
    if layout.pp == 1:
        return ()
    stage = layout.tp * layout.cp * layout.dp
    crossing = layout.pp - 1 if stage >= per_node else max(0, -(-layout.pp * stage // per_node) - 1)
    terms = []
    if crossing:
        terms.append(_Term("pipeline hop across nodes", "p2p", crossing, bytes_per_token, 2, crosses=True))
    if layout.pp - 1 - crossing:
        terms.append(_Term("pipeline hop", "p2p", layout.pp - 1 - crossing, bytes_per_token, 2))
    return tuple(terms)


def _comm_chain(terms: tuple[_Term, ...], tokens: ArrayLike, cost: _Floor) -> ArrayLike:
    """One chip's chain of communication in a pass of ``tokens`` tokens (``terms``: :func:`_comm_terms`), seconds.

    All are on one chain, so their times add. With :class:`_Floor` it is the
    lower bound :attr:`Step.comm_s` (a group inside a node on ``link``; a
    tensor- or context-parallel group across nodes at the hierarchical floor
    of :func:`kvmath.links._spanning_allreduce_s`; expert parallelism's
    all-to-all across nodes at the two-tier floor of
    :func:`kvmath.links._two_tier_all_to_all_s`); with :class:`_Measured`
    the estimate of :meth:`Deployment.comm_estimate`.
    """
    comm = 0.0
    for term in terms:
        comm = comm + term.count * term.price(cost, tokens * term.bytes_per_token)
    return comm


def pipeline_hops_s(layout: ParallelLayout, message_bytes: ArrayLike, cost: _Floor) -> ArrayLike:
    """The ``pp - 1`` point-to-point sends of ``message_bytes`` down a pipeline (:func:`_hops`), seconds, priced
    by ``cost``: those across nodes over ``node_link``, the others over ``link``."""
    return _comm_chain(_hops(layout, cost.per_node, 1.0), message_bytes, cost)


def _show(value) -> str:
    return repr(value) if np.ndim(value) == 0 else f"an array of shape {np.shape(value)}"


def _shape_args(batch, context, tokens_per_seq, **others):
    """The step's shape, checked: positive finite numbers or arrays of them, whose shapes broadcast (named if not)."""
    out = positive("batch", batch), positive("context", context), positive("tokens_per_seq", tokens_per_seq)
    if not all(type(x) is float for x in (*out, *others.values())):
        broadcast(batch=batch, context=context, tokens_per_seq=tokens_per_seq, **others)
    return out


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Step(Result):
    """One decode step on the busiest chip of a deployment: what it moves and computes, and how long at least.

    Times are in seconds, bytes and FLOPs per chip; each field is a float or
    an array of the broadcast shape of the step's inputs.

    Attributes
    ----------
    batch, context, tokens_per_seq : the step's shape.
    micro_batch : sequences the chip's weights see per pass (``B`` on one
        chip; ``max(ceil(B / dp) / pp, 1)`` under data and pipeline parallelism).
    weight_bytes_read, kv_bytes_read : bytes the chip reads.
    weight_flops, attention_flops : FLOPs the chip does.
    weight_bytes_resident, kv_bytes_resident : bytes the chip holds.
    kv_read_s, weight_read_s : reading the cache and the weights at the
        chip's bandwidth.
    weight_compute_s, attention_compute_s : the weight matmuls and
        attention's math at the chip's FLOP rate.
    memory_s, compute_s : all the chip's bytes at its bandwidth, all its
        FLOPs at its rate (one division each, so every step form that moves the
        same bytes and FLOPs gives the same time to the last bit).
    comm_s : the chain of communication between chips (0 if none counted).
    overhead_s : the fixed overhead given (0 for a bound).
    strict_s : the strict lower bound, ``overhead + max(all bytes / W,
        all FLOPs / C, comm_s)``: each resource works in parallel.
    no_overlap_s : the no-overlap form, ``overhead + max(kv_read_s,
        attention_compute_s) + max(weight_read_s, weight_compute_s) + comm_s``:
        the notes' min-step, an upper estimate of a bound.
    is_lower_bound : False where an efficiency, an overhead or a routing
        estimate was given.
    n_chips : chips of the deployment.
    bandwidth, flops : the chip's rates the times use (bandwidth times any efficiency given).
    """

    batch: ArrayLike
    context: ArrayLike
    tokens_per_seq: ArrayLike
    micro_batch: ArrayLike
    weight_bytes_read: ArrayLike
    kv_bytes_read: ArrayLike
    weight_flops: ArrayLike
    attention_flops: ArrayLike
    weight_bytes_resident: float
    kv_bytes_resident: ArrayLike
    kv_read_s: ArrayLike
    weight_read_s: ArrayLike
    weight_compute_s: ArrayLike
    attention_compute_s: ArrayLike
    memory_s: ArrayLike
    compute_s: ArrayLike
    comm_s: ArrayLike
    overhead_s: ArrayLike
    strict_s: ArrayLike
    no_overlap_s: ArrayLike
    is_lower_bound: bool
    n_chips: int
    bandwidth: ArrayLike
    flops: float

    @property
    def binds(self) -> str | np.ndarray:
        """What sets the strict bound: ``"memory"``, ``"compute"`` or ``"communication"`` (ties: in that order)."""
        return binds(self.memory_s, self.compute_s, self.comm_s)

    @property
    def tokens_per_s(self) -> ArrayLike:
        """Sequences times steps per second at the strict bound, B / strict_s: tokens per second for a decode step."""
        return self.batch / self.strict_s

    @property
    def memory_bytes(self) -> ArrayLike:
        """Bytes the chip holds: its weights and its share of the cache."""
        return self.weight_bytes_resident + self.kv_bytes_resident

    _derived = ("binds", "tokens_per_s", "memory_bytes")


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class CommEstimate(Result):
    """An estimate of a pass's communication chain from measured curves (:meth:`Deployment.comm_estimate`).

    Attributes
    ----------
    batch, tokens_per_seq : the pass asked about; ``tokens`` the tokens one
        chip's collectives carry (the pipeline's micro-batch times tokens per sequence).
    algorithm : the all-reduce curve asked for inside a node.
    estimate_s : the chain at measured curves, seconds (an estimate: software included).
    bound_s : the same chain's lower bound, :attr:`Step.comm_s`.
    flags : collective -> why its figure is not a measurement at its size and link
        (empty when every curve was measured there).
    """

    batch: ArrayLike
    tokens_per_seq: ArrayLike
    tokens: ArrayLike
    algorithm: str
    estimate_s: ArrayLike
    bound_s: ArrayLike
    flags: dict

    @property
    def is_estimate(self) -> bool:
        """Always True."""
        return True

    @property
    def flagged(self) -> bool:
        """Whether any collective's curve is not a measurement at its size and link."""
        return bool(self.flags)

    _derived = ("is_estimate", "flagged")


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Collective(Result):
    """One kind of collective on a chip's chain in a pass (:meth:`Deployment.collectives`).

    Attributes
    ----------
    name : what it does: ``"tensor-parallel all-reduce"``, ``"expert-parallel dispatch"``,
        ``"expert-parallel combine"``, ``"context-parallel combine"``, ``"pipeline hop"`` or
        ``"pipeline hop across nodes"``.
    kind : ``"all_reduce"``, ``"all_to_all"`` or ``"p2p"``.
    count : how many of them a pass makes.
    message_bytes : each one's message: an all-reduce's buffer, what an all-to-all sends from one chip, a hop's
        activations.
    n_chips : chips in its group (2 for a hop).
    time_s : one of them at its floor on the deployment's links, seconds (0 where no link is counted).
    """

    name: str
    kind: str
    count: int
    message_bytes: ArrayLike
    n_chips: int
    time_s: ArrayLike

    @property
    def bytes_per_pass(self) -> ArrayLike:
        """``count * message_bytes``: the messages of a whole pass, bytes."""
        return self.count * self.message_bytes

    @property
    def total_s(self) -> ArrayLike:
        """``count * time_s``: all of them, seconds."""
        return self.count * self.time_s

    _derived = ("bytes_per_pass", "total_s")


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Collectives(Result):
    """The collectives of one pass on the busiest chip (:meth:`Deployment.collectives`), a lower bound.

    Attributes
    ----------
    batch, tokens_per_seq : the pass asked about; ``tokens`` the tokens one chip's collectives carry (the
        pipeline's micro-batch times tokens per sequence).
    collectives : one :class:`Collective` per kind, in the order of the chain (none on one chip).
    comm_s : the chain, seconds: the sum of their ``total_s``, :attr:`Step.comm_s`.
    """

    batch: ArrayLike
    tokens_per_seq: ArrayLike
    tokens: ArrayLike
    collectives: tuple
    comm_s: ArrayLike


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Capacity(Result):
    """What fits in a deployment's memory (:meth:`Deployment.capacity`); bytes per chip unless named otherwise.

    An upper bound on what fits (the weights and caches alone, at the budget
    named); ``engine`` is vLLM's own sizing, an estimate.

    Attributes
    ----------
    context : tokens per sequence.
    budget, memory_per_chip_bytes : the memory budget and what it gives per chip.
    weight_bytes_per_chip : the weights the busiest chip holds (its stage's, its share).
    kv_budget_bytes_per_chip : what is left beside them for the cache.
    kv_bytes_per_token, kv_bytes_per_seq : the cache of one sequence of
        ``context`` tokens per token (sliding windows and linear states
        averaged in) and whole.
    max_tokens, max_batch : cached tokens and sequences of ``context`` the
        whole deployment holds (each data-parallel group its own).
    n_chips : chips of the deployment.
    engine : vLLM's own sizing (:class:`kvmath.memory.EngineBudget`, an
        estimate) where asked for, else None.
    prefix_kv_bytes_per_chip : a shared prefix's cache, held once on each chip
        (0 without one; ``max_batch`` counts it).
    """

    context: ArrayLike
    budget: str
    memory_per_chip_bytes: ArrayLike
    weight_bytes_per_chip: float
    kv_budget_bytes_per_chip: ArrayLike
    kv_bytes_per_token: ArrayLike
    kv_bytes_per_seq: ArrayLike
    max_tokens: ArrayLike
    max_batch: ArrayLike
    n_chips: int
    engine: object = None
    prefix_kv_bytes_per_chip: ArrayLike = 0.0


class _Plan:
    """What a deployment's passes need that depends on the model, layout and formats alone.

    Built once per Deployment;
    :meth:`pass_` then runs on numbers and arrays checked at the boundary,
    with no further checks. This is the one step model: decode steps,
    verify steps, prefill passes and mixed steps are all passes of it.
    """

    def __init__(self, model: Model, layout: ParallelLayout, weights: Precision, b_kv: float):
        m, lay = model, layout
        self.model, self.layout, self.b_kv = m, lay, b_kv
        per_weight = _group_bytes(weights, m.tied_embeddings)
        groups = m.param_groups()
        g = lay.weight_shards
        self.g = g
        # weights read: fixed groups, plus embedding rows and position rows per token, plus routed experts
        fixed = sum(groups[n] * per_weight[n] for n in ("attention", "mlp", "shared_experts", "router", "norms"))
        self.lm_head_read = m.vocab * m.d_model * per_weight["lm_head"]
        self.fixed_read = fixed + self.lm_head_read
        self.embedding_row = 0.0 if m.tied_embeddings else m.d_model * per_weight["embedding"]
        self.vocab, self.n_positions = float(m.vocab), float(m.n_positions)
        self.position_row = m.d_model * per_weight["positions"]
        self.n_experts, self.top_k = m.n_experts or 0, m.top_k or 0
        self.expert_bytes = groups["experts"] / m.n_experts * per_weight["experts"] if m.n_experts else 0.0
        # FLOPs: dense matmul parameters split g ways; routed ones g ways, or ep ways over the stage's tokens
        self.routed_active = groups["experts"] * (m.top_k or 0) / (m.n_experts or 1)
        self.dense_active = m.matmul_params_per_token() - self.routed_active
        self.lm_head_params = m.vocab * m.d_model
        self.mlp_layer_params = groups["mlp"] / m.n_layers  # one layer's dense MLP (dense models)
        self.mlp_layer_read = self.mlp_layer_params * per_weight["mlp"]
        # the cache and attention, by layer kind: {(coefficient, window or None): layers}
        self.terms = m.cache_terms()
        self.state_bytes = self.terms.state_bytes
        self.state_heads = min((s.n_heads for s in m.layer_specs() if s.kind == "linear"), default=0)
        self.kv_heads = 1 if m.attention == "mla" else m.n_kv_heads
        self.cp_combine = ((2 * (m.v_head_dim or m.head_dim) + 4) * m.n_heads / lay.tp * m.n_layers
                           if lay.cp > 1 else 0.0)
        # resident weights: the largest stage's layers, plus the tables
        resident = {name: n * per_weight[name] for name, n in groups.items()}  # Model.weight_bytes_resident_by_group
        self.stage = math.ceil(m.n_layers / lay.pp) / m.n_layers
        tables = resident["embedding"] + resident["lm_head"] + resident["positions"]
        if lay.pp > 1:
            tables = max(resident["embedding"] + resident["positions"], resident["lm_head"])
        layer_groups = sum(resident.values()) - resident["embedding"] - resident["lm_head"] - resident["positions"]
        copies = (m.n_experts + lay.redundant_experts) / m.n_experts if m.n_experts else 1
        routed_resident = resident["experts"] * copies * self.stage / (lay.ep if lay.ep > 1 else g)
        self.weight_resident = ((layer_groups - resident["experts"]) * self.stage + tables) / g + routed_resident
        if lay.replicate_lm_head:  # the whole head on every chip (on the last stage under pp)
            self.weight_resident += resident["lm_head"] * (1 - 1 / g)

    def _sum(self, terms, context, scale, per_token, per_seq):
        """``per_seq + per_token * context`` plus ``coefficient * scale * layers * min(context, window)`` over
        ``terms`` (one :class:`kvmath.layers.CacheTerms` dict)."""
        total = per_seq + per_token * context if per_token else per_seq
        for (coefficient, window), layers in terms.items():
            tokens = context if window is None else _min(context, window)
            total = total + (coefficient * scale * layers) * tokens
        return total

    def kv_per_seq(self, context):
        """Cache bytes one sequence of ``context`` (whole) tokens holds, windows applied, linear states included."""
        t = self.terms
        return self._sum(t.held, context, self.b_kv, t.token_bytes, t.state_bytes)

    def kv_read_per_seq(self, context):
        """Cache bytes one step reads for one sequence of ``context`` tokens: :meth:`kv_per_seq` but shared layers
        read their source's cache and sparse (dsa) layers their top-k latents (:func:`kvmath.layers.kv_bytes_read_per_seq`)."""
        t = self.terms
        return self._sum(t.read, context, self.b_kv, t.token_bytes, t.state_bytes)

    def attention_per_token(self, context):
        """Attention FLOPs of one new token over a ``context``-token cache, all layers."""
        t = self.terms
        return self._sum(t.flops, context, 1, t.token_flops, t.state_flops)

    def _chip_share(self, kv_seq):
        """The part of one sequence's cache ``kv_seq`` a chip holds when a tp group splits it by heads."""
        tp = self.layout.tp
        share = _ceil(self.kv_heads / tp) / self.kv_heads
        if self.state_bytes and tp > 1:
            # a linear layer's state splits by its own heads (evenly where they are unknown), the rest by KV heads
            state_share = _ceil(self.state_heads / tp) / self.state_heads if self.state_heads else 1 / tp
            return (kv_seq - self.state_bytes) * share + self.state_bytes * state_share
        return kv_seq * share

    def micro(self, batch, even_share=False):
        """Sequences per pass on a chip: B, or max(ceil(B / dp) / pp, 1) under dp and pp (unrounded).

        ``even_share``: ``batch`` is already one data-parallel group's even share ``B / dp`` (a mean over the
        groups, maybe fractional), so only the pipeline splits it: ``max(b / pp, min(b, 1))`` with one group,
        ``b / pp`` with several (the clamp is not convex in ``b``, and a mean over groups is bounded only by a
        convex rule at the mean; ``b / pp`` is below the clamp).
        """
        lay = self.layout
        if even_share:
            if lay.pp == 1:
                return batch
            return batch / lay.pp if lay.dp > 1 else _max(batch / lay.pp, _min(batch, 1))
        if lay.dp == 1 and lay.pp == 1:
            return batch
        per_group = _max(_ceil(batch / lay.dp), 1.0)  # >= 1 for any batch > 0
        if lay.pp == 1:
            return per_group
        return _max(per_group / lay.pp, _min(per_group, 1))

    def decode_inputs(self, batch, context, tokens_per_seq):
        """:meth:`pass_`'s first six arguments for a decode (or verify) step: each sequence's cache of its whole
        tokens (held, and read), and its attention FLOPs for ``tokens_per_seq`` new tokens."""
        whole = _ceil(context)
        return (batch, context, tokens_per_seq, self.kv_per_seq(whole), self.kv_read_per_seq(whole),
                self.attention_per_token(context) * tokens_per_seq)

    def expert_tokens(self, batch, tokens, tokens_per_seq):
        """Tokens one pass sends through the experts of an ep group spanning the dp groups: each group's ``tokens``,
        but never more than the batch holds (``B / pp`` sequences a pass, or ``min(B, 1)`` if fewer): with ``B`` not a multiple
        of ``dp`` the groups' rounded-up shares would count tokens no group has."""
        lay = self.layout
        if lay.dp == 1:
            return tokens
        return _min(tokens * lay.dp, _max(batch / lay.pp, _min(batch, 1)) * tokens_per_seq)

    def pass_(self, batch, context, tokens_per_seq, kv_seq, kv_read_seq, attention_per_seq, *, bandwidth, flops, comm,
              routing="floor", overhead_s=0.0, lm_head_tokens=None, last_mlp_tokens=None,
              is_lower_bound=True, even_share=False) -> "Step":
        """One pass of ``batch`` sequences: per-sequence cache held ``kv_seq`` and read ``kv_read_seq`` (the two
        differ for shared and sparse layers: :meth:`kv_read_per_seq`) and attention FLOPs given.

        ``lm_head_tokens`` (default ``tokens_per_seq``): tokens per sequence
        that need logits; 0 (a prompt chunk before the last) reads and
        multiplies by no LM head. ``last_mlp_tokens`` (default
        ``tokens_per_seq``; dense models): tokens per sequence the last
        layer's MLP runs on, for an engine that keeps only the rows that
        need logits before it (llama.cpp's ``build_inp_out_ids``); 0 reads
        none of that MLP's weights. ``even_share``: ``batch`` is one
        data-parallel group's even share ``B / dp`` of the deployment's
        sequences (maybe fractional), not the whole batch, and the pass bounds
        the mean over the groups (and over a group's chips) of any split of
        them: every term not affine in the load is taken at a floor that is
        (see :meth:`micro`; the tables' rows, concave in the tokens, at the
        whole deployment's ``min(dp T, rows) / dp``, since a concave
        function that is 0 at 0 is subadditive; ``kv_split="batch"``'s
        sequences per chip at ``b / tp``, the mean over the group's chips,
        not the fullest chip's ``ceil(b / tp)``).
        """
        lay, g = self.layout, self.g
        micro = self.micro(batch, even_share)
        tokens = micro * tokens_per_seq
        # weights read: each token its embedding and position rows, at most the tables
        if even_share and lay.dp > 1:
            rows = _min(tokens * lay.dp, self.n_positions) / lay.dp * self.position_row
            if self.embedding_row:
                rows = rows + _min(tokens * lay.dp, self.vocab) / lay.dp * self.embedding_row
            read = self.fixed_read + rows
        else:
            read = self.fixed_read + _min(tokens, self.n_positions) * self.position_row
            if self.embedding_row:
                read = read + _min(tokens, self.vocab) * self.embedding_row
        head_read = self.lm_head_read if lay.replicate_lm_head else self.lm_head_read / g
        if lm_head_tokens is not None:
            read = read - _where(lm_head_tokens == 0, self.lm_head_read, 0.0)
        weight_read = read / g
        if lay.replicate_lm_head:  # every chip reads the whole head where it reads it at all
            weight_read = weight_read + (head_read - self.lm_head_read / g) * (
                1.0 if lm_head_tokens is None else _where(lm_head_tokens == 0, 0.0, 1.0))
        if last_mlp_tokens is not None:  # the last layer's MLP is not read by a pass that runs it on no row
            weight_read = weight_read - _where(last_mlp_tokens == 0, self.mlp_layer_read / g, 0.0)
        ep_tokens = tokens * lay.dp if even_share else self.expert_tokens(batch, tokens, tokens_per_seq)
        if self.n_experts:
            if lay.ep > 1:
                touched = _touched(self.n_experts, self.top_k, ep_tokens, routing)
                weight_read = weight_read + touched * self.expert_bytes / lay.ep
            else:
                weight_read = weight_read + _touched(self.n_experts, self.top_k, tokens, routing) * self.expert_bytes / g
        # FLOPs
        if lay.ep > 1:
            weight_flops = 2 * tokens * self.dense_active / g + 2 * ep_tokens * self.routed_active / lay.ep
        else:
            weight_flops = 2 * tokens * self.dense_active / g + 2 * tokens * self.routed_active / g
        head_tokens = tokens_per_seq if lm_head_tokens is None else lm_head_tokens
        if lm_head_tokens is not None:
            weight_flops = weight_flops - 2 * micro * (tokens_per_seq - lm_head_tokens) * self.lm_head_params / g
        if lay.replicate_lm_head:  # the rest of the head, on this chip too
            weight_flops = weight_flops + 2 * micro * head_tokens * self.lm_head_params * (1 - 1 / g)
        if last_mlp_tokens is not None:
            weight_flops = weight_flops - 2 * micro * (tokens_per_seq - last_mlp_tokens) * self.mlp_layer_params / g
        # the cache and attention: split by heads over tp (or by sequences), by position over cp
        if lay.kv_split == "batch":
            seqs = micro / lay.tp if even_share else _min(micro, _ceil(micro / lay.tp))
            kv_read = seqs * kv_read_seq / lay.cp
            attention = seqs * attention_per_seq / lay.cp
        else:
            kv_read = micro * self._chip_share(kv_read_seq) / lay.cp
            attention = micro * attention_per_seq / g
        if self.cp_combine:
            attention = attention + lay.cp * self.cp_combine * tokens
        comm_s = comm(tokens)
        kv_s, w_s = kv_read / bandwidth, weight_read / bandwidth
        wc_s, ac_s = weight_flops / flops, attention / flops
        memory_s = (kv_read + weight_read) / bandwidth
        compute_s = (weight_flops + attention) / flops
        strict, no_overlap = step_times(memory_s, compute_s, comm_s, overhead_s, kv_s, w_s, wc_s, ac_s)
        # what the chip holds: the largest stage's share of its sequences' caches
        seqs_held = _max(1, _ceil(batch / lay.dp)) if lay.dp > 1 and not even_share else batch
        if lay.kv_split == "batch":
            kv_resident = _min(seqs_held, _ceil(seqs_held / lay.tp)) * kv_seq / lay.cp * self.stage
        else:
            kv_resident = seqs_held * self._chip_share(kv_seq) / lay.cp * self.stage
        return Step(batch=batch, context=context, tokens_per_seq=tokens_per_seq, micro_batch=micro,
                    weight_bytes_read=weight_read, kv_bytes_read=kv_read, weight_flops=weight_flops,
                    attention_flops=attention, weight_bytes_resident=self.weight_resident,
                    kv_bytes_resident=kv_resident, kv_read_s=kv_s, weight_read_s=w_s, weight_compute_s=wc_s,
                    attention_compute_s=ac_s, memory_s=memory_s, compute_s=compute_s, comm_s=comm_s + 0 * strict,
                    overhead_s=overhead_s,
                    strict_s=strict, no_overlap_s=no_overlap, is_lower_bound=is_lower_bound, n_chips=lay.n_chips,
                    bandwidth=bandwidth, flops=flops)
