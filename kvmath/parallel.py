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

from .formulas import StepBreakdown, step_breakdown
from .links import Link, _two_tier_all_to_all_s, allreduce_time, as_link
from .moe import ROUTINGS
from .layout import KV_SHARDINGS, ParallelLayout, as_layout, parse_layout  # noqa: F401  (re-exported)
from .models import Model, Precision, get_model  # noqa: F401  (get_model: doctests)
from .validation import (ArrayLike, ResultOverflow, checked, choice, finite, instance, non_negative, plain, positive,
                         positive_int)



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
    >>> round(1 / by_heads.no_overlap_s, 1), round(1 / by_batch.no_overlap_s, 1)
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
        total = total + _two_tier_all_to_all_s(size, ep, n, link, node)
    return plain(np.where(ep > 1, moe_layers * total, 0.0))


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
) -> "Step":
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
    from .deployment import _Plan, comm_s  # the one step model; deployment imports this module's layout

    layout = as_layout(layout).check(model)
    link = None if link is None else as_link(link)
    batch = positive("batch", batch)
    tokens_per_seq = positive("tokens_per_seq", tokens_per_seq)
    b_act = positive("activation_bytes", activation_bytes)
    kv_per_seq = non_negative("kv_bytes_per_seq", kv_bytes_per_seq)
    attention = non_negative("attention_flops_per_seq", attention_flops_per_seq)
    routing = choice("routing", routing, ROUTINGS)
    lm_head = None if lm_head_tokens_per_seq is None else non_negative("lm_head_tokens_per_seq", lm_head_tokens_per_seq)
    last_mlp = None
    if last_mlp_tokens_per_seq is not None:
        if model.n_experts:
            raise ValueError(f"last_mlp_tokens_per_seq is modelled for dense models only; {model.name} has experts")
        last_mlp = non_negative("last_mlp_tokens_per_seq", last_mlp_tokens_per_seq)
    plan = _Plan(model, layout, weights, 2.0)

    def comm(tokens):
        return comm_s(model, layout, tokens, link=link, node_link=link, chips_per_node=layout.n_chips,
                      b_act=b_act, b_dispatch=b_act)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        return plan.pass_(batch, context, tokens_per_seq, kv_per_seq, attention, bandwidth=positive("bandwidth", bandwidth),
                          flops=positive("flops", flops), comm=comm, routing=routing,
                          overhead_s=non_negative("overhead_s", overhead_s), lm_head_tokens=lm_head,
                          last_mlp_tokens=last_mlp)
