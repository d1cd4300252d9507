"""Parallelism over N chips: what each chip holds, reads, computes and sends per step.

:class:`ParallelLayout` and :func:`chip_step` are the one parallelism model
(tensor by heads, context by sequence, data-parallel attention, pipeline by
layers, experts); :func:`kv_bytes_per_chip` and :func:`tensor_parallel_step`
are the tensor-parallel special case the step model started with.

Bandwidth and FLOP/s add up across chips, and the weights split N ways.
The KV cache splits by heads only while there are heads to go round: a
model with ``n_kv_heads < N`` must replicate some heads, and a multi-query
model (one KV head) keeps the whole cache on every chip, unless the cache
is sharded by batch instead (each chip keeps the caches of its own
sequences).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .decode import StepBreakdown, step_breakdown
from .links import Link, all_to_all_time, allreduce_time, as_link, p2p_time
from .models import Model, Precision, get_model  # noqa: F401  (get_model: doctests)
from .validation import (ArrayLike, ResultOverflow, checked, choice, finite, instance, non_negative, plain, positive,
                         positive_int)

KV_SHARDINGS = ("heads", "batch")


@checked
def kv_bytes_per_chip(
    kv_cache_bytes: ArrayLike,
    n_chips: ArrayLike,
    n_kv_heads: ArrayLike,
    batch: ArrayLike = 1,
    shard: str = "heads",
) -> ArrayLike:
    """Bytes of KV cache each chip holds and reads per step.

    ``shard="heads"``: each chip gets ``ceil(h_kv / N)`` of the ``h_kv`` heads.
    ``shard="batch"``: each chip gets ``ceil(B / N)`` of the ``B`` sequences.

    Examples
    --------
    >>> kv_bytes_per_chip(68.72e9, 2, 32) / 1e9            # MHA splits in two
    34.36
    >>> kv_bytes_per_chip(68.72e9, 2, 1) / 1e9             # MQA: every chip reads it all
    68.72
    >>> kv_bytes_per_chip(68.72e9, 2, 1, batch=16, shard="batch") / 1e9
    34.36
    """
    total = non_negative("kv_cache_bytes", kv_cache_bytes)
    n_chips = positive_int("n_chips", n_chips)
    shard = choice("shard", shard, KV_SHARDINGS)
    heads, batch = positive_int("n_kv_heads", n_kv_heads), positive_int("batch", batch)  # both, whichever is used
    share = heads if shard == "heads" else batch
    return plain(total * np.ceil(share / n_chips) / share)


@checked
def tensor_parallel_step(
    batch: ArrayLike,
    kv_bytes_per_seq: ArrayLike,
    n_kv_heads: ArrayLike,
    param_bytes: ArrayLike,
    param_count: ArrayLike,
    n_chips: ArrayLike,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    shard: str = "heads",
    attention_flops_per_seq: ArrayLike = 0,
    overhead_s: ArrayLike = 0,
    tokens_per_seq: ArrayLike = 1,
) -> StepBreakdown:
    """The decode-step terms on one of ``n_chips`` chips running tensor parallel.

    Weights and their FLOPs split evenly; the KV cache splits as
    :func:`kv_bytes_per_chip` says. Attention FLOPs split with the query
    heads (evenly, N ways) under ``shard="heads"``, and with the sequences
    under ``shard="batch"``. ``bandwidth`` and ``flops`` are per chip.
    Communication between chips is not counted. The other arguments are
    those of :func:`kvmath.step_breakdown`.

    Examples
    --------
    The thread's MQA model at 256K on two A100s at 70% of 2 TB/s:

    >>> kv = 262144 * 16384  # bytes per sequence, one KV head
    >>> by_heads = tensor_parallel_step(16, kv, 1, 14e9, 7e9, 2, 1.4e12, 312e12)
    >>> by_batch = tensor_parallel_step(16, kv, 1, 14e9, 7e9, 2, 1.4e12, 312e12, shard="batch")
    >>> round(1 / by_heads.step_s, 1), round(1 / by_batch.step_s, 1)
    (18.5, 33.8)
    """
    n_chips = positive_int("n_chips", n_chips)
    batch = positive("batch", batch)
    kv_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    positive_int("n_kv_heads", n_kv_heads)
    shard = choice("shard", shard, KV_SHARDINGS)
    param_bytes = positive("param_bytes", param_bytes)
    param_count = positive("param_count", param_count)
    bandwidth = positive("bandwidth", bandwidth)
    flops = positive("flops", flops)
    attention = non_negative("attention_flops_per_seq", attention_flops_per_seq)
    if not np.all(np.isfinite(kv_seq * batch)):
        raise ResultOverflow("batch x kv_bytes_per_seq overflows float64")
    # each chip's share; one too small for a float64 would be refused as zero below
    for name, share in (("param_bytes", param_bytes / n_chips), ("param_count", param_count / n_chips)):
        if np.any(np.asarray(share) == 0):
            raise ValueError(f"{name} / n_chips underflows float64 to 0; use a larger {name} or fewer n_chips")
    if shard == "heads":
        kv_chip = kv_bytes_per_chip(kv_seq * batch, n_chips, n_kv_heads)
        attention_chip = attention / n_chips
    else:
        # Each chip keeps ceil(B / N) whole sequences; min with B keeps a
        # fractional batch below one sequence per chip continuous (and
        # monotone) for bound curves. Whole B gives kv_bytes_per_chip's figure.
        seqs_per_chip = np.minimum(batch, np.ceil(batch / n_chips))
        kv_chip = kv_seq * seqs_per_chip
        attention_chip = attention * seqs_per_chip / batch
    return step_breakdown(
        batch, kv_chip / batch, positive("param_bytes", param_bytes) / n_chips,
        positive("param_count", param_count) / n_chips, bandwidth, flops,
        attention_flops_per_seq=attention_chip, overhead_s=overhead_s, tokens_per_seq=tokens_per_seq,
    )


# ----- one parallelism model: a layout, what each chip holds, reads, computes and sends ---------


@dataclass(frozen=True)
class ParallelLayout:
    """How a model is spread over ``tp * cp * dp * pp`` chips.

    Attributes
    ----------
    tp : int
        Tensor parallelism by heads: query heads, and the weights, split
        ``tp`` ways; each chip holds ``ceil(h_kv / tp)`` KV heads (a cache
        with fewer KV heads than ``tp`` is replicated; an MLA latent, shared
        by all heads, is replicated on every chip). Only the query heads
        are checked: ``tp = 7`` on 28 heads with 4 KV heads is accepted
        (one KV head per chip), a layout vLLM refuses (it needs
        ``tp % h_kv == 0`` or ``h_kv % tp == 0``); optimistic, as a bound may be.
    cp : int
        Context parallelism: each sequence's cache is split by position
        ``cp`` ways; every chip attends to its slice and the partial outputs
        are combined by their log-sum-exp. The ``cp`` chips also split the
        weight matmuls (the weights shard ``tp * cp`` ways).
    dp : int
        Data-parallel attention: the sequences split ``dp`` ways; attention,
        dense MLPs and shared experts are replicated on every group.
    pp : int
        Pipeline stages, by layers (``ceil(L / pp)`` on the largest).
    ep : int
        Expert parallelism: routed experts split by expert over ``ep``
        chips, which must be every chip of a stage (``ep = tp * cp * dp``);
        ``ep = 1`` splits them like the other weights.
    redundant_experts : int
        Extra copies of routed experts spread over the ``ep`` chips (default
        0): ``ep`` must divide ``E + redundant_experts``, and each chip
        holds that many over ``ep`` (DeepSeek-V3's decode: 256 + 32 experts
        on 144 chips, 2 each). Reads and FLOPs are unchanged: the experts a
        batch touches, split ``ep`` ways, stay a lower bound on the busiest
        chip's, wherever the copies are.
    replicate_lm_head : bool
        Every chip holds, reads and multiplies by the whole LM head instead
        of its ``1 / (tp cp)`` share (default False). gpt-fast's ``tp.py``
        splits the attention and MLP weights only and leaves ``output``
        whole on every GPU.

    Examples
    --------
    >>> ParallelLayout(tp=4, pp=2).n_chips
    8
    >>> ParallelLayout(tp=3).check(get_model("kipply-52b"))  # 64 heads do not split 3 ways
    Traceback (most recent call last):
    ...
    ValueError: tp (3) must divide the 64 heads of kipply-52b; try pp=3 (pipeline by layers)
    >>> ParallelLayout(pp=3).check(get_model("kipply-52b")).n_chips
    3
    >>> ParallelLayout(dp=144, ep=144, redundant_experts=32).check(get_model("deepseek-v3")).ep
    144
    """

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    redundant_experts: int = 0
    replicate_lm_head: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.replicate_lm_head, (bool, np.bool_)):
            raise ValueError(f"replicate_lm_head must be True or False, got {self.replicate_lm_head!r}")
        object.__setattr__(self, "replicate_lm_head", bool(self.replicate_lm_head))
        for name in ("tp", "cp", "dp", "pp", "ep", "redundant_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
            (non_negative if name == "redundant_experts" else positive_int)(name, value)
            object.__setattr__(self, name, int(value))  # numpy int32 would wrap in n_chips and not encode as JSON
        if self.redundant_experts and self.ep == 1:
            raise ValueError(f"redundant_experts ({self.redundant_experts}) needs expert parallelism (ep > 1)")

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)}" for n in ("tp", "cp", "dp", "pp", "ep"))
        extra = f", redundant_experts={self.redundant_experts}" if self.redundant_experts else ""
        extra += ", replicate_lm_head=True" if self.replicate_lm_head else ""
        return f"ParallelLayout({fields}{extra})"

    @property
    def n_chips(self) -> int:
        """Chips the layout uses: tp * cp * dp * pp."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def weight_shards(self) -> int:
        """Ways the (non-routed) weights split within one data-parallel group: tp * cp."""
        return self.tp * self.cp

    def check(self, model: Model) -> "ParallelLayout":
        """This layout, if ``model`` can run on it; else ``ValueError`` naming the field."""
        instance("model", model, Model, "a Model (get_model(name))")
        if model.n_heads % self.tp:
            raise ValueError(f"tp ({self.tp}) must divide the {model.n_heads} heads of {model.name}; "
                             f"try pp={self.tp} (pipeline by layers)")
        if self.pp > model.n_layers:
            raise ValueError(f"pp ({self.pp}) must not exceed the {model.n_layers} layers of {model.name}")
        if self.ep > 1:
            if not model.n_experts:
                raise ValueError(f"ep ({self.ep}) needs a mixture-of-experts model; {model.name} is dense")
            if self.ep != self.tp * self.cp * self.dp:
                raise ValueError(f"ep ({self.ep}) must equal tp * cp * dp ({self.tp * self.cp * self.dp}): "
                                 "routed experts split over every chip of a stage")
            slots = model.n_experts + self.redundant_experts
            if slots % self.ep:
                extra = f" + {self.redundant_experts} redundant" if self.redundant_experts else ""
                raise ValueError(f"ep ({self.ep}) must divide the {model.n_experts}{extra} experts of {model.name}")
        return self


def parse_layout(text: str) -> ParallelLayout:
    """A layout from ``"tp=2,pp=4"`` (fields tp, cp, dp, pp, ep; omitted ones are 1).

    Examples
    --------
    >>> parse_layout("tp=8")
    ParallelLayout(tp=8, cp=1, dp=1, pp=1, ep=1)
    """
    fields = {}
    for part in str(text).replace(" ", "").split(","):
        key, _, value = part.partition("=")
        if key not in ("tp", "cp", "dp", "pp", "ep") or not (value.isascii() and value.isdigit()) or key in fields:
            raise ValueError(f"parallel layout must look like 'tp=2,pp=4' (tp, cp, dp, pp, ep), got {text!r}")
        fields[key] = int(value)
    try:
        return ParallelLayout(**fields)
    except ValueError as err:  # "tp=0": say which text the field came from
        raise ValueError(f"parallel layout {text!r}: {err}") from None


def as_layout(layout) -> ParallelLayout:
    """``layout`` as a :class:`ParallelLayout`: None is one chip, text is parsed (:func:`parse_layout`).

    Examples
    --------
    >>> as_layout("tp=2,pp=2").n_chips
    4
    """
    if layout is None:
        return ParallelLayout()
    if isinstance(layout, ParallelLayout):
        return layout
    if isinstance(layout, str):
        return parse_layout(layout)
    raise ValueError(f"layout must be a ParallelLayout or text such as 'tp=2,pp=4', got {layout!r}")


@checked
def tensor_parallel_comm_s(
    model: Model, batch: ArrayLike, n_chips: ArrayLike, link: Link | None,
    tokens_per_seq: ArrayLike = 1, activation_bytes: ArrayLike = 2,
) -> ArrayLike:
    """Lower bound on tensor parallelism's communication in one decode step, seconds.

    Two all-reduces per layer (after attention, after the MLP), each of
    ``B * tokens_per_seq * d * b_act`` bytes on ``n_chips`` chips
    (:func:`kvmath.allreduce_time`, the fastest algorithm the link allows).
    They run one after the other (each layer needs the previous result), so
    their latencies add up: ``2 L`` of them per step. 0 without a link or on
    one chip.

    Examples
    --------
    Llama 2 70B at batch 1 on 8 H100s: 160 all-reduces of 16 KB,

    >>> from kvmath.links import get_link
    >>> round(tensor_parallel_comm_s(get_model("llama-2-70b"), 1, 8, get_link("nvlink4")) * 1e6, 1)
    85.8
    """
    # every argument is checked, even where no link makes it unused
    instance("model", model, Model, "a Model (get_model(name))")
    n_chips = positive_int("n_chips", n_chips)
    message = positive("batch", batch) * positive("tokens_per_seq", tokens_per_seq) * model.d_model
    message = finite(message * positive("activation_bytes", activation_bytes))
    if link is None:
        return plain(0.0 * message * n_chips)
    return plain(2 * model.n_layers * allreduce_time(message, n_chips, as_link(link)))


@checked
def expert_parallel_comm_s(
    model: Model, tokens: ArrayLike, ep: ArrayLike, link: Link | str, *,
    dispatch_bytes: ArrayLike = 2, combine_bytes: ArrayLike = 2,
    chips_per_node: ArrayLike = 1, node_link: Link | str | None = None,
) -> ArrayLike:
    """Lower bound on expert parallelism's all-to-alls in one step on one chip, seconds.

    Each MoE layer dispatches every token to the chips of its ``k`` routed
    experts and combines the results back: two all-to-alls, one after the
    other, each of ``S = T k d b`` bytes per chip (``T`` tokens on the
    chip, one copy per token and routed expert, as DeepEP's low-latency
    kernels send them; ``b`` = ``dispatch_bytes`` or ``combine_bytes``).
    Spread evenly, ``1/ep`` of the copies stay on the chip. With
    ``chips_per_node = n > 1``, ``link`` is the chip's network port and
    ``node_link`` the fabric inside its node, two separate paths: the
    ``(ep - n) / ep`` share bound for other nodes must leave through the
    port, while the ``(n - 1) / ep`` share for the chip's own node may take
    either (a kernel can send it through the port and the switch, as
    DeepEP's first low-latency kernels did). So the port carries at least
    the first share, and the two paths together all ``(ep - 1) / ep``
    (without ``node_link`` every peer shares ``link``; a group of fewer
    than ``n`` chips is all on one node):

        t = max((ep - n) / ep * S / W_link + alpha,
                (ep - 1) / ep * S / (W_link + W_node) + min(alpha, alpha_node))

    (``n = 1``: :func:`kvmath.all_to_all_time` on ``link``). The
    ``2 (L - L_dense)`` all-to-alls are on one chain (the next layer needs
    the combine), so their times add. Routing that puts a token's experts
    on fewer chips, or a kernel that sends one copy per chip, moves less:
    the bound is for spread routing and per-expert copies. 0 on one chip.

    Examples
    --------
    DeepSeek-V3's decode on 144 H800s (18 nodes), 88 tokens per chip, fp8
    dispatch, bf16 combine: 58 MoE layers of 5.0 MB and 10.1 MB, mostly over
    the 50 GB/s InfiniBand port:

    >>> from kvmath.links import get_link
    >>> t = expert_parallel_comm_s(get_model("deepseek-v3"), 88, 144, get_link("ib-ndr400"),
    ...                            dispatch_bytes=1, chips_per_node=8, node_link=get_link("nvlink4-h800"))
    >>> round(t * 1e3, 2)
    16.64
    """
    instance("model", model, Model, "a Model (get_model(name))")
    if not model.n_experts:
        raise ValueError(f"model {model.name} is dense: it has no experts to dispatch to")
    tokens = positive("tokens", tokens)
    ep = positive_int("ep", ep)
    n = positive_int("chips_per_node", chips_per_node)
    link = as_link(link)
    try:
        node = as_link(node_link) if node_link is not None else link
    except ValueError as err:
        raise ValueError(f"node_link: {err}") from None
    # a group smaller than a node: every peer is near; without node_link every peer shares link
    n = np.minimum(n, ep) if node_link is not None else 1 + 0 * n
    moe_layers = model.n_layers - (model.n_dense_layers or 0)
    total = 0.0
    # both checked before either is used, so a bad one is named even when the other overflows
    per_element = (positive("dispatch_bytes", dispatch_bytes), positive("combine_bytes", combine_bytes))
    for b in per_element:
        size = finite(tokens * model.top_k * model.d_model * b)
        away = (ep - n) / ep * size / link.bandwidth + link.latency_s
        both_paths = (ep - 1) / ep * size / (link.bandwidth + node.bandwidth) + min(link.latency_s, node.latency_s)
        total = total + np.maximum(np.where(ep > n, away, 0.0), np.where(n > 1, both_paths, 0.0))
    return plain(np.where(ep > 1, moe_layers * total, 0.0))


@dataclass(frozen=True)
class ChipStep:
    """One decode step on the busiest chip of a :class:`ParallelLayout`.

    Under pipeline parallelism a step is one round, in which every sequence
    gains one token. The figures are those of the schedule of ``pp``
    micro-batches of ``b = max(B' / pp, 1)`` sequences (``B' = ceil(B / dp)``,
    **unrounded**): per chip, its stage's weights ``pp`` times (all ``L``
    layers' worth once) and its stage's share of ``pp b`` sequences' cache;
    per micro-batch, the whole model. That is a lower bound over every
    schedule of ``m <= B'`` micro-batches: with ``m >= pp`` a chip's own
    work is at least this, and with ``m < pp`` one micro-batch of
    ``B' / m >= b`` sequences must pass every stage in turn. So at ``B' = 1``
    a pipeline is no faster than one chip. (The stage that holds
    ``ceil(L / pp)`` layers does a little more; leaving that out keeps
    the bound safe.)

    Attributes
    ----------
    layout : ParallelLayout
    micro_batch : sequences a chip's weights see per pass, max(ceil(B / dp) / pp, 1) (unrounded).
    weight_bytes_read, kv_bytes_read : bytes the chip reads in the step.
    weight_flops, attention_flops : FLOPs the chip does (attention includes
        the log-sum-exp combine under context parallelism).
    weight_bytes_resident, kv_bytes_resident : what the chip must hold.
    comm_s : lower bound on the chip's communication (links), seconds.
    bandwidth, flops, overhead_s : the chip's rates and the per-step overhead.
    """

    layout: ParallelLayout
    micro_batch: ArrayLike
    weight_bytes_read: ArrayLike
    kv_bytes_read: ArrayLike
    weight_flops: ArrayLike
    attention_flops: ArrayLike
    weight_bytes_resident: ArrayLike
    kv_bytes_resident: ArrayLike
    comm_s: ArrayLike
    bandwidth: ArrayLike
    flops: ArrayLike
    overhead_s: ArrayLike = 0.0

    @cached_property
    def terms(self) -> StepBreakdown:
        """:class:`kvmath.StepBreakdown` of the chip's bytes and FLOPs (without communication)."""
        return step_breakdown(1, self.kv_bytes_read, self.weight_bytes_read, self.weight_flops / 2, self.bandwidth,
                              self.flops, attention_flops_per_seq=self.attention_flops, overhead_s=self.overhead_s)

    @property
    def memory_bytes(self) -> ArrayLike:
        """Bytes the chip holds: its weights and its share of the cache."""
        return plain(self.weight_bytes_resident + self.kv_bytes_resident)


@checked
def chip_step(
    model: Model,
    batch: ArrayLike,
    context: ArrayLike,
    layout: ParallelLayout,
    bandwidth: ArrayLike,
    flops: ArrayLike,
    *,
    weights: Precision = "bf16",
    kv_bytes_per_seq: ArrayLike,
    attention_flops_per_seq: ArrayLike,
    tokens_per_seq: ArrayLike = 1,
    link: Link | None = None,
    activation_bytes: ArrayLike = 2,
    overhead_s: ArrayLike = 0,
    routing: str = "floor",
    lm_head_tokens_per_seq: ArrayLike | None = None,
    last_mlp_tokens_per_seq: ArrayLike | None = None,
) -> ChipStep:
    """Bytes, FLOPs, memory and communication of one decode step on each chip of ``layout``.

    ``kv_bytes_per_seq`` and ``attention_flops_per_seq`` are one sequence's
    (all layers, as :func:`kvmath.step_work` gives them). Per chip, with
    ``b = max(ceil(B / dp) / pp, 1)`` sequences per pass (unrounded, see :class:`ChipStep`) and ``g = tp * cp``:

    - weights read: non-routed groups / g; routed experts / g (``ep = 1``)
      or, with ``ep > 1``, the experts the stage's ``b * dp`` tokens touch / ep;
    - cache read: ``b * KV * ceil(h_kv / tp) / h_kv / cp`` (an MLA latent
      counts as one KV head: replicated over tp);
    - weight FLOPs: ``2 b T (P_matmul - P_routed) / g`` plus the routed
      experts' ``2 b T P_routed / g`` (or ``2 b dp T P_routed / ep``);
    - attention FLOPs: ``b A / g`` plus the combine, ``cp (2 d_v + 4)`` per
      head, layer and sequence;
    - communication (lower bound; not counted, 0, without a ``link``):
      2 all-reduces per layer of ``b T d b_act`` over g chips
      (with ``ep > 1`` an MoE layer's second one is a dispatch and a combine
      all-to-all of ``b T k d b_act / g`` over ep chips); one log-sum-exp
      combine per layer over cp chips; ``pp - 1`` point-to-point sends of
      ``b T d b_act``. All are on one chain, so their latencies add.

    ``lm_head_tokens_per_seq`` (default ``tokens_per_seq``): tokens per
    sequence that need logits; a prefill needs them for its last token only,
    and a pass with none (a prompt chunk before the last) neither reads nor
    multiplies by the LM head.

    ``last_mlp_tokens_per_seq`` (default ``tokens_per_seq``): tokens per
    sequence the last layer's MLP runs on, for an engine that keeps only the
    rows that need logits before it (llama.cpp's ``build_inp_out_ids``; a
    dense model only). A pass where it is 0 reads none of that MLP's weights.

    With ``layout.replicate_lm_head`` every chip reads and multiplies by the
    whole LM head (and holds it) instead of its ``1 / g`` share.

    Memory: weights of the largest stage (``ceil(L / pp)`` layers, plus the
    larger of the embedding and the LM head when ``pp > 1``) and the
    chip's share of the cache. The strict bound is ``overhead + max(all
    bytes / W, all FLOPs / C, comm_s)``: communication uses the links, its
    own resource, and may overlap with reads and math that do not wait for
    it; what depends on it (the next layer) is kept in ``comm_s`` as its
    chain of latencies. The no-overlap form adds ``comm_s``.

    Examples
    --------
    Llama 2 70B on 8 H100s by heads (8 KV heads, one each), batch 1, 4,096 tokens:

    >>> m = get_model("llama-2-70b")
    >>> kv, att = m.kv_bytes_per_seq(4096), m.attention_flops_per_token(4096)
    >>> from kvmath.links import get_link
    >>> s = chip_step(m, 1, 4096, ParallelLayout(tp=8), 3.35e12, 989.4e12,
    ...               kv_bytes_per_seq=kv, attention_flops_per_seq=att, link=get_link("nvlink4"))
    >>> round(s.weight_bytes_read / 1e9, 3), round(s.kv_bytes_read / 1e6, 2), round(s.comm_s * 1e6, 1)
    (17.179, 167.77, 85.8)
    """
    layout = as_layout(layout).check(model)
    link = None if link is None else as_link(link)
    batch = positive("batch", batch)
    tokens_per_seq = positive("tokens_per_seq", tokens_per_seq)
    b_act = positive("activation_bytes", activation_bytes)
    kv_per_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    attention = non_negative("attention_flops_per_seq", attention_flops_per_seq)
    g, L = layout.weight_shards, model.n_layers
    # Under pp, max(B' / pp, 1) sequences per pass, unrounded: a bound over every micro-batch schedule (ChipStep)
    micro = batch
    if layout.dp > 1 or layout.pp > 1:
        per_group = np.maximum(np.ceil(batch / layout.dp), 1.0)  # >= 1 for any batch > 0, even one that underflows
        micro = np.maximum(per_group / layout.pp, np.minimum(per_group, 1)) if layout.pp > 1 else per_group
    tokens = micro * tokens_per_seq

    read = model.weight_bytes_read_by_group(micro, weights, routing, tokens_per_seq)
    routed_read = (model.weight_bytes_read_by_group(micro * layout.dp, weights, routing, tokens_per_seq)["experts"]
                   / layout.ep if layout.ep > 1 else read["experts"] / g)
    weight_read = (sum(read.values()) - read["experts"]) / g + routed_read
    # the LM head a chip reads: its 1 / g share, or all of it where every chip keeps the whole head
    head_read = read["lm_head"] if layout.replicate_lm_head else read["lm_head"] / g
    if layout.replicate_lm_head:
        weight_read = weight_read + read["lm_head"] * (1 - 1 / g)
    if lm_head_tokens_per_seq is not None:
        # a pass that needs no logits (a prompt chunk before the last) reads no LM head either
        no_logits = non_negative("lm_head_tokens_per_seq", lm_head_tokens_per_seq) == 0
        weight_read = weight_read - np.where(no_logits, head_read, 0.0)
    if last_mlp_tokens_per_seq is not None:
        if model.n_experts:
            raise ValueError(f"last_mlp_tokens_per_seq is modelled for dense models only; {model.name} has experts")
        last_mlp = non_negative("last_mlp_tokens_per_seq", last_mlp_tokens_per_seq)
        # the last layer's MLP weights are not read by a pass that runs it on no row
        weight_read = weight_read - np.where(last_mlp == 0, read["mlp"] / L / g, 0.0)

    kv_heads = 1 if model.attention == "mla" else model.n_kv_heads
    kv_read = kv_bytes_per_chip(finite(micro * kv_per_seq), layout.tp, kv_heads) / layout.cp

    groups = model.param_groups()
    routed_active = groups["experts"] * (model.top_k or 0) / (model.n_experts or 1)
    dense_active = model.matmul_params_per_token() - routed_active
    routed_flops = (2 * tokens * layout.dp * routed_active / layout.ep if layout.ep > 1
                    else 2 * tokens * routed_active / g)
    weight_flops = 2 * tokens * dense_active / g + routed_flops
    head_tokens = tokens_per_seq  # tokens per sequence that multiply by the LM head
    if lm_head_tokens_per_seq is not None:
        head_tokens = non_negative("lm_head_tokens_per_seq", lm_head_tokens_per_seq)
        weight_flops = weight_flops - 2 * micro * (tokens_per_seq - head_tokens) * model.vocab * model.d_model / g
    if layout.replicate_lm_head:  # the rest of the head, on this chip too
        weight_flops = weight_flops + 2 * micro * head_tokens * model.vocab * model.d_model * (1 - 1 / g)
    if last_mlp_tokens_per_seq is not None:
        weight_flops = weight_flops - 2 * micro * (tokens_per_seq - last_mlp) * groups["mlp"] / L / g
    d_v = model.v_head_dim or model.head_dim
    heads = model.n_heads / layout.tp
    combine = (layout.cp * (2 * d_v + 4) * heads * L * tokens) if layout.cp > 1 else 0.0
    attention_flops = micro * attention / g + combine

    resident = model.weight_bytes_resident_by_group(weights)
    stage = np.ceil(L / layout.pp) / L
    tables = resident["embedding"] + resident["lm_head"] + resident["positions"]
    if layout.pp > 1:
        tables = max(resident["embedding"] + resident["positions"], resident["lm_head"])
    layer_groups = sum(resident.values()) - resident["embedding"] - resident["lm_head"] - resident["positions"]
    copies = (model.n_experts + layout.redundant_experts) / model.n_experts if model.n_experts else 1
    routed_resident = resident["experts"] * copies * stage / (layout.ep if layout.ep > 1 else g)
    weight_resident = ((layer_groups - resident["experts"]) * stage + tables) / g + routed_resident
    if layout.replicate_lm_head:  # the whole head on every chip (on the last stage under pp)
        weight_resident = weight_resident + resident["lm_head"] * (1 - 1 / g)
    seqs_held = np.maximum(1, np.ceil(batch / layout.dp)) if layout.dp > 1 else batch
    kv_resident = kv_bytes_per_chip(finite(seqs_held * kv_per_seq), layout.tp, kv_heads) / layout.cp * stage

    comm = _layout_comm_s(model, layout, tokens, b_act, link)
    return ChipStep(layout=layout, micro_batch=plain(micro), weight_bytes_read=plain(weight_read),
                    kv_bytes_read=plain(kv_read), weight_flops=plain(weight_flops),
                    attention_flops=plain(attention_flops), weight_bytes_resident=plain(weight_resident),
                    kv_bytes_resident=plain(kv_resident), comm_s=comm, bandwidth=positive("bandwidth", bandwidth),
                    flops=positive("flops", flops), overhead_s=non_negative("overhead_s", overhead_s))


def _layout_comm_s(model: Model, layout: ParallelLayout, tokens: ArrayLike, b_act: float, link: Link | None):
    """The communication chain of one chip per step (see :func:`chip_step`), seconds."""
    g, L = layout.weight_shards, model.n_layers
    if link is None or (g == 1 and layout.pp == 1 and layout.ep == 1):
        return plain(0.0 * tokens)
    activation = finite(tokens * model.d_model * b_act)
    moe_layers = (L - (model.n_dense_layers or 0)) if (model.n_experts and layout.ep > 1) else 0
    all_reduces = 2 * L - moe_layers
    comm = all_reduces * allreduce_time(activation, g, link)
    if moe_layers:
        comm = comm + 2 * moe_layers * all_to_all_time(activation * model.top_k / g, layout.ep, link)
    if layout.cp > 1:
        d_v = model.v_head_dim or model.head_dim
        partial = finite(tokens * model.n_heads / layout.tp * (d_v + 1) * b_act)
        comm = comm + L * allreduce_time(partial, layout.cp, link)
    if layout.pp > 1:
        comm = comm + (layout.pp - 1) * p2p_time(activation, link)
    return plain(comm)
