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
