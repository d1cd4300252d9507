"""Whole requests: the prefill, then decode steps over a growing context, and the serving frontier.

A batch of ``B`` requests, each with ``S_in`` prompt tokens and ``S_out``
output tokens, runs as benchmarks run it:

- **time to first token** (TTFT): one prefill of the ``B`` prompts, which
  also yields the first output token. Its bound is the step bound of
  the deployment's step model with ``S_in`` tokens per sequence: weights read
  once, the new cache written, ``2 P S_in`` weight FLOPs (the LM head for the
  last token only) and causal attention, ``sum_{t=1}^{S_in} A(t)`` FLOPs
  with ``A(t)`` the attention FLOPs of a token that attends to ``t`` tokens
  (:meth:`kvmath.Model.attention_flops_per_token`). Chunked prefill
  (``chunk_tokens``) runs the prompt in chunks, each re-reading the
  weights and the cache written so far. Under pipeline parallelism
  (``pp > 1``) the chunks of one prompt flow through the stages (as in
  TeraPipe and SGLang's chunked pipeline prefill): the bound is the last
  stage's share of the work plus the fill of the pipeline (see
  :func:`prefill_bound`), never the whole model's FLOPs on one chip.
- **decode**: ``S_out - 1`` steps, the ``j``-th over a cache of ``S_in + j``
  tokens (``j = 1 .. S_out - 1``), each bounded by :meth:`kvmath.Deployment.step`'s
  strict form. Within a stretch of contexts where no window fills up (a
  sliding or chunked layer's, a dsa layer's top-k) and, with a shared
  prefix, the reads stay on one side of the prefix's share, every term of
  a step is affine in the context, so the sum of the step bounds is a sum
  of the upper envelope of two lines and a constant (the communication)
  over a range of integers, done in closed form (no loop over steps).
- ``time_per_output_token_s = decode_s / (S_out - 1)`` (undefined, NaN, for
  one output token: there is no decode step), ``output_tokens_per_s = B * S_out / (TTFT + decode_s)`` (the
  benchmarks' convention: prefill included), and the cost per million
  output tokens from a price per chip-hour.

Every argument broadcasts, so the frontier over batch sizes and request
shapes is one call (:func:`serving_frontier`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .deployment import Deployment, Step
from .layers import cache_terms
from .formulas import _cost_of_chip_time, kv_budget_bytes, step_times
from .memory import BUDGETS, memory_budget
from .models import Model
from .moe import ROUTINGS
from .prefix import check_prefix, reused_tokens, shared_kv_bytes
from .results import Result
from .validation import (
    ArrayLike,
    broadcast,
    checked,
    choice,
    fraction,
    instance,
    non_negative,
    one_int,
    overflow_named,
    plain,
    positive,
    positive_int,
    refuse_overflow,
)


@checked
def prefill_attention_flops(model: Model, input_tokens: ArrayLike) -> ArrayLike:
    """Causal attention FLOPs of one prompt: ``sum_{t=1}^{S} A(t)``, all layers.

    ``A(t) = model.attention_flops_per_token(t)`` is ``alpha t + beta min(t, w)``
    (``w`` a sliding window), so the sum is ``alpha S (S + 1) / 2 + beta M(S)``
    with ``M(S) = sum_t min(t, w)``; ``alpha`` and ``beta`` are read off
    ``A`` itself.

    A model that lists its layers sums each kind on its own: a window's
    ``min(t, w)``, a sparse layer's top-k, a linear layer's fixed count per
    token, a dsa indexer's ``t`` keys scored.

    MLA (a model whose fields define it, or listed MLA and dsa layers) is charged the
    cheaper of its two forms per query and cached token: the absorbed form
    of decode, ``2 h (r + r_rope) + 2 h r``, or the per-head form prefill
    kernels use, ``2 h (d_nope + r_rope) + 2 h d_v`` (DeepSeek-V3: 640 FLOPs
    per head against 2,176). The per-head form needs each token's keys and
    values up-projected from the latent, ``2 r h (d_nope + d_v)`` FLOPs per
    token and layer: exactly the absorbed form's ``W_UK`` and ``W_UV``
    products, which the weight FLOPs already charge once per token. (A
    chunk that attends to an earlier chunk's latent would up-project it
    again; leaving that out keeps the sum a lower bound.)

    Examples
    --------
    Llama 2 7B, 2,048 tokens: ``4 L h d_h * 2048 * 2049 / 2``.

    >>> from kvmath import Model
    >>> prefill_attention_flops(Model.preset("llama-2-7b"), 2048) / 1e12
    1.100...

    DeepSeek-V3, 4,096 tokens: ``61 * 128 * (2 * 192 + 2 * 128) * 4096 * 4097 / 2``.

    >>> round(prefill_attention_flops(Model.preset("deepseek-v3"), 4096) / 1e12, 2)
    41.93
    """
    s = positive_int("input_tokens", input_tokens)
    if instance("model", model, Model, "a Model (Model.preset(name))").layers is not None:
        # listed layers: each kind's sum on its own (windows, top-k reads, a linear state's fixed count per token)
        terms = cache_terms(model.layers)
        total = terms.state_flops * s + terms.token_flops * s * (s + 1) / 2
        per_head = (model.n_heads * (2 * (model.head_dim + model.qk_rope_dim) + 2 * model.v_head_dim)
                    if model.attention == "mla" else None)
        for (flops, w), count in terms.flops.items():
            flops = flops if per_head is None else min(flops, per_head)  # MLA or DSA: the cheaper form, as above
            total = total + flops * count * _sum_of_min(s, w)
        return plain(total)
    if model.sliding_window is None:
        alpha, beta, w = model.attention_flops_per_token(1), 0.0, np.inf
        if model.attention == "mla" and model.layers is None:
            per_head = 2 * (model.head_dim + model.qk_rope_dim) + 2 * model.v_head_dim
            alpha = min(alpha, model.n_layers * model.n_heads * per_head)
    else:
        w = model.sliding_window
        alpha = model.attention_flops_per_token(w + 1) - model.attention_flops_per_token(w)
        beta = model.attention_flops_per_token(1) - alpha
    windowed = np.where(s <= w, s * (s + 1) / 2, w * (w + 1) / 2 + (s - w) * w) if beta else 0.0
    return plain(alpha * s * (s + 1) / 2 + beta * windowed)


def _sum_of_min(s, w):
    """``sum_{t=1}^{S} min(t, w)`` (``w`` None: no window)."""
    if w is None:
        return s * (s + 1) / 2
    return np.where(s <= w, s * (s + 1) / 2, w * (w + 1) / 2 + (s - w) * w)


_BIG = 1e300  # a finite stand-in for an unbounded end of a range, so that 0 steps times it stays 0


def _sum_on(p, q, first, last, lo, hi) -> np.ndarray:
    """``sum of (p + q S)`` over the integers S in ``[max(lo, first), min(hi, last)]`` (0 if empty).

    ``p, q, first, last`` describe a line and where it applies (shape of the
    batch); ``lo, hi`` the range of steps (shape of the requests). Only the
    last few operations run on the broadcast shape of the two.
    """
    start = np.maximum(lo, first)
    stop = np.minimum(hi, last)
    n = np.subtract(stop, start)
    if np.ndim(n) == 0:
        n = max(n + 1, 0)
        return n * (p + 0.5 * q * (start + stop))
    # n (p + q (start + stop) / 2), in place: fresh arrays of the broadcast shape are the cost here
    n += 1
    np.maximum(n, 0, out=n)
    total = np.add(start, stop)
    total *= 0.5 * np.asarray(q, dtype=float)
    total += p
    total *= n
    return total


def _pieces_of_max(f: tuple, g: tuple) -> list[tuple]:
    """``max(f, g)`` of two lines ``(p, q)`` as pieces ``(p, q, first, last)`` over integer S."""
    steep = f[1] >= g[1]
    up = [np.where(steep, x, y) for x, y in zip(f, g)]      # the steeper line: the max right of the crossing
    down = [np.where(steep, y, x) for x, y in zip(f, g)]
    dq = up[1] - down[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.where(dq > 0, (down[0] - up[0]) / np.where(dq > 0, dq, 1),
                         np.where(up[0] >= down[0], -_BIG, _BIG))
    edge = np.clip(np.floor(cross), -_BIG, _BIG)  # down rules S <= edge, up rules S > edge
    return [(down[0], down[1], -_BIG, edge), (up[0], up[1], edge + 1, _BIG)]


def _sum_max2(f: tuple, g: tuple, lo: ArrayLike, hi: ArrayLike) -> np.ndarray:
    """``sum_{S=lo}^{hi} max(f(S), g(S))`` over integers S for two lines ``(p, q)``, in closed form."""
    (p1, q1, a1, b1), (p2, q2, a2, b2) = _pieces_of_max(f, g)
    return _sum_on(p1, q1, a1, b1, lo, hi) + _sum_on(p2, q2, a2, b2, lo, hi)


def _sum_max2_and_constant(f: tuple, g: tuple, k: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> np.ndarray:
    """``sum_{S=lo}^{hi} max(f(S), g(S), k)``: ``k`` per step plus, on each piece of max(f, g), its excess over k."""
    total = np.maximum(np.asarray(hi, dtype=float) - lo + 1, 0) * k
    for p, q, first, last in _pieces_of_max(f, g):
        excess = p - k                               # the piece's line less k is positive on one side of its root
        with np.errstate(divide="ignore", invalid="ignore"):
            root = -excess / np.where(q != 0, q, 1)
        above_lo = np.where(q > 0, np.floor(root) + 1, np.where((q < 0) | (excess > 0), -_BIG, _BIG))
        above_hi = np.where(q < 0, np.ceil(root) - 1, np.where((q > 0) | (excess > 0), _BIG, -_BIG))
        total += _sum_on(excess, q, np.maximum(first, above_lo), np.minimum(last, above_hi), lo, hi)
    return total


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Request(Result):
    """Bounds on serving a batch of requests (seconds; arrays where the inputs were).

    Attributes
    ----------
    batch, input_tokens, output_tokens : the request shape.
    n_chips : chips serving the batch.
    ttft_s : time to first token (the prefill).
    decode_s : the ``output_tokens - 1`` decode steps, strict bound summed.
    decode_no_overlap_s : the same in the no-overlap form.
    is_lower_bound : False where an efficiency below 1 or an overhead made
        the times estimates.
    price_per_chip_hour : the price given (None for no cost; broadcasts).
    reused_tokens, prefix_hit_rate : prompt tokens a request that hits a
        cached prefix reuses, and the fraction that hit (0 without a prefix).
    """

    batch: ArrayLike
    input_tokens: ArrayLike
    output_tokens: ArrayLike
    n_chips: int
    ttft_s: ArrayLike
    decode_s: ArrayLike
    decode_no_overlap_s: ArrayLike
    is_lower_bound: bool
    price_per_chip_hour: ArrayLike | None = None
    reused_tokens: ArrayLike = 0.0
    prefix_hit_rate: ArrayLike = 0.0

    _derived = ("total_s", "time_per_output_token_s", "tokens_per_s_per_user", "output_tokens_per_s",
                "output_tokens_per_s_per_chip", "cost_per_million_tokens")

    @property
    def total_s(self) -> ArrayLike:
        """End-to-end latency of the batch: TTFT + decode, seconds."""
        return plain(self.ttft_s + self.decode_s)

    @property
    def time_per_output_token_s(self) -> ArrayLike:
        """Decode time per output token after the first, ``decode_s / (S_out - 1)``.

        NaN (undefined) for one output token: it comes from the prefill and
        no decode step follows.
        """
        steps = np.asarray(self.output_tokens, dtype=float) - 1
        return plain(np.where(steps > 0, self.decode_s / np.maximum(steps, 1), np.nan))

    @property
    def tokens_per_s_per_user(self) -> ArrayLike:
        """What each request sees while decoding: ``1 / time_per_output_token_s`` (NaN, undefined, for one token)."""
        return plain(1.0 / np.asarray(self.time_per_output_token_s, dtype=float))

    @property
    def output_tokens_per_s(self) -> ArrayLike:
        """Output tokens of the batch over the total time, prefill included (benchmarks' convention)."""
        return plain(self.batch * self.output_tokens / self.total_s)

    @property
    def output_tokens_per_s_per_chip(self) -> ArrayLike:
        """``output_tokens_per_s / n_chips``."""
        return plain(self.output_tokens_per_s / self.n_chips)

    @property
    def cost_per_million_tokens(self) -> ArrayLike | None:
        """Price of a million output tokens: ``price x chips x total / 3600 / (B S_out) x 1e6`` (None without a price)."""
        if self.price_per_chip_hour is None:
            return None
        return plain(_cost_of_chip_time(self.price_per_chip_hour, self.n_chips * self.total_s
                                       / (self.batch * self.output_tokens)))


#: Most (batch x prompt x chunk) cells a chunked prefill evaluates at once: 4M, 32 MB a float array
#: (the frontier's 4096 batches x 1024 chunks, a 128K prompt in 128-token chunks).
_MAX_CHUNK_CELLS = 2**22


def _pass(dep: Deployment, batch, context, *, tokens_per_seq=1.0, overhead_s=0.0, efficiency=1.0, prefill=False,
          last_mlp_logits_only=False, lm_head_tokens=None, attention=None, kv_seq=None, routing="floor") -> Step:
    """A pass of the deployment's one step model, with the model's own cache and attention FLOPs.

    A prefill pass attends causally (:func:`prefill_attention_flops`) and
    needs logits for one token per prompt (``lm_head_tokens``, default 1);
    ``last_mlp_logits_only`` runs the last layer's MLP on that token alone.
    ``attention`` and ``kv_seq`` (default the model's own for ``context``):
    each sequence's attention FLOPs and cache bytes, where a cached prefix changes them. ``routing``: the experts
    a pass reads (:meth:`kvmath.Deployment.step`'s; the bounds take ``"floor"``, :mod:`kvmath.estimate` ``"uniform"``).
    """
    plan = dep._plan
    if attention is None:
        attention = (prefill_attention_flops(dep.model, context) if prefill
                     else plan.attention_per_token(context) * tokens_per_seq)
    if prefill and lm_head_tokens is None:
        lm_head_tokens = 1.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        held, read = plan.kv_per_seq(context), plan.kv_read_per_seq(context)
        if kv_seq is not None:   # a shared prefix: what it leaves out of the cache is left out of the reads too
            held, read = kv_seq, np.maximum(read - (held - kv_seq), 0.0)
        return plan.pass_(batch, context, tokens_per_seq, held, read,
                          attention,
                          bandwidth=dep.chip.bandwidth * efficiency, flops=dep.flops, comm=dep._comm,
                          overhead_s=overhead_s, lm_head_tokens=lm_head_tokens, routing=routing,
                          last_mlp_tokens=lm_head_tokens if prefill and last_mlp_logits_only else None)


def _without_pipeline(dep: Deployment) -> Deployment:
    """The deployment's stage group alone: its layout with ``pp = 1`` (every layer on ``tp * cp * dp`` chips)."""
    if dep.layout.pp == 1:
        return dep
    return dep.replace(layout=dataclasses.replace(dep.layout, pp=1))


def _stage_of(whole: Step, pp: int, weight_bytes_resident: float) -> Step:
    """One chip's ``1 / pp`` share of a pass over the whole stage group: bytes, FLOPs, comm and times divided."""
    kv_s, w_s, wc_s, ac_s, comm = (whole.kv_read_s / pp, whole.weight_read_s / pp, whole.weight_compute_s / pp,
                                   whole.attention_compute_s / pp, whole.comm_s / pp)
    memory_s, compute_s = whole.memory_s / pp, whole.compute_s / pp
    strict, no_overlap = step_times(memory_s, compute_s, comm, whole.overhead_s, kv_s, w_s, wc_s, ac_s)
    return dataclasses.replace(
        whole, weight_bytes_read=whole.weight_bytes_read / pp, kv_bytes_read=whole.kv_bytes_read / pp,
        weight_flops=whole.weight_flops / pp, attention_flops=whole.attention_flops / pp, comm_s=comm,
        kv_read_s=kv_s, weight_read_s=w_s, weight_compute_s=wc_s, attention_compute_s=ac_s, memory_s=memory_s,
        compute_s=compute_s, strict_s=strict,
        no_overlap_s=no_overlap, weight_bytes_resident=weight_bytes_resident,
        kv_bytes_resident=whole.kv_bytes_resident / pp)


def _stage_share(dep: Deployment, batch, context, **opts) -> Step:
    """A prefill pass on one chip of one pipeline stage: the stage group's work over ``pp``, memory of the layout.

    The pass is run on the layout without its pipeline (every layer on the
    stage group's ``tp * cp * dp`` chips) and its bytes, FLOPs and
    collectives are split evenly over the ``pp`` stages: the most even
    split of the layers there can be, so each chip's share is at most its
    real stage's.
    """
    whole = _pass(_without_pipeline(dep), batch, context, prefill=True, **opts)
    if dep.layout.pp == 1:
        return whole
    return _stage_of(whole, dep.layout.pp, dep._plan.weight_resident)


def prefill_chip_step(dep: Deployment, batch: ArrayLike, input_tokens: ArrayLike) -> Step:
    """One prefill pass of ``batch`` prompts on one chip of the first stage (bytes, FLOPs, comm): see :func:`prefill_bound`.

    Under pipeline parallelism the figures are one chip's: its stage's share
    (``1 / pp``) of the weights read, the cache written, the FLOPs and the
    stage's collectives; the point-to-point sends between stages are in
    :func:`prefill_bound`'s fill.

    Examples
    --------
    >>> from kvmath import Deployment
    >>> p = prefill_chip_step(Deployment("llama-2-7b", "a100-80gb"), 1, 2048)
    >>> round((p.weight_flops + p.attention_flops) / 1e12, 2)  # 2 P S (LM head once) + causal attention
    27.63
    >>> p3 = prefill_chip_step(Deployment("llama-2-7b", "a100-80gb", "pp=2"), 1, 2048)
    >>> round((p3.weight_flops + p3.attention_flops) / 1e12, 3)  # each chip does half
    13.813
    """
    batch = positive("batch", batch)
    s_in = positive_int("input_tokens", input_tokens)
    broadcast(batch=batch, input_tokens=input_tokens)
    return _stage_share(dep, batch, s_in, tokens_per_seq=s_in)


@checked
def prefill_bound(
    dep: Deployment,
    batch: ArrayLike,
    input_tokens: ArrayLike,
    *,
    chunk_tokens: int | None = None,
    overhead_s: ArrayLike = 0.0,
    efficiency: ArrayLike = 1.0,
    last_mlp_logits_only: bool = False,
    prefix_tokens: ArrayLike | None = None,
    prefix_hit_rate: ArrayLike | None = None,
    block_size: int | None = None,
) -> ArrayLike:
    """Strict lower bound on the prefill of ``batch`` prompts of ``input_tokens`` (TTFT), seconds.

    ``overhead + max(bytes / W, FLOPs / C, comm_s)`` per chip (see the module
    text). With ``chunk_tokens`` the prompt runs in chunks of that many
    tokens, each a step of its own that re-reads the weights (all but the LM
    head, which only the last chunk needs) and reads the cache of the chunks
    before it; the bound is the sum over chunks.

    ``last_mlp_logits_only``: the engine keeps only the rows that need
    logits (the last token of each prompt) before the last layer's MLP, as
    llama.cpp does (``build_inp_out_ids``), so that MLP multiplies one row
    per prompt and a chunk without logits does not read its weights (a dense
    model only).

    ``prefix_tokens``, ``prefix_hit_rate``, ``block_size`` (default
    vLLM's 16): the prompts open with a shared prefix of that many tokens,
    found cached by that fraction of them (default 1 once a prefix is given);
    a hit reuses :func:`kvmath.prefix.reused_tokens` of them (whole blocks,
    never the last prompt token) and prefills only the rest. The pass carries
    the mean over the prompts, ``S_in - h R`` tokens each, their attention and
    the cache they write (the hits' reads of the prefix's cache are left out,
    which keeps the bound); the step time is convex in those, so this bounds
    the mean over any pattern of hits with that rate. Not with ``chunk_tokens``.

    Under pipeline parallelism (``pp > 1``) the chunks flow through the
    stages, each stage's chip doing its share (``1 / pp``: the most even
    split of the layers) of every chunk (:func:`prefill_chip_step`). The
    last stage cannot start before the first chunk has passed the other
    ``pp - 1`` stages, and then must do its share of every chunk:

    - with ``chunk_tokens = c``: ``sum_k t_k + (pp - 1) (t_0 + p2p(chunk 0))``,
      ``t_k`` the strict bound of chunk ``k``'s share and ``p2p`` the send
      of its activations to the next stage (with a link);
    - without ``chunk_tokens`` the system may chunk as it likes: the bound is
      the whole prompt's share plus a fill of ``pp - 1`` stages that each
      must at least read their weights (the first chunk needs every layer)
      and send one token on (``alpha``, with a link).

    Examples
    --------
    Llama 2 7B, one 2,048-token prompt on an A100-80GB: compute-bound.

    >>> from kvmath import Deployment
    >>> a100 = Deployment("llama-2-7b", "a100-80gb")
    >>> round(prefill_bound(a100, 1, 2048) * 1e3, 2)
    88.54
    >>> round(prefill_bound(a100, 1, 2048, chunk_tokens=512) * 1e3, 2)  # 4 compute-bound chunks: the same
    88.54
    >>> round(prefill_bound(a100, 1, 2048, chunk_tokens=64) * 1e3, 2)   # 32 chunks, each reading the weights
    212.1

    The 52B on three A100-40GB by layers: a third of the FLOPs per chip plus
    the fill of two stages, not the whole model on one chip:

    >>> round(prefill_bound(Deployment("kipply-52b", "a100-40gb", "pp=3", link="nvlink3"), 1, 2048), 3)
    0.275
    """
    with overflow_named("prefill_bound", batch=batch, input_tokens=input_tokens, chunk_tokens=chunk_tokens):
        return _prefill_bound(dep, batch, input_tokens, chunk_tokens, overhead_s, efficiency, last_mlp_logits_only,
                              check_prefix(prefix_tokens, prefix_hit_rate, block_size))


def _prefix_prompt(dep: Deployment, s_in, prefix) -> dict:
    """A prompt's mean prefill with a cached prefix: ``_pass``'s tokens per sequence, attention and cache written."""
    p, h, b = prefix
    reused = reused_tokens(p, b, s_in)
    model, plan = dep.model, dep._plan
    saved = np.where(reused > 0, prefill_attention_flops(model, np.maximum(reused, 1)), 0.0)
    return dict(tokens_per_seq=plain(s_in - h * reused), attention=plain(prefill_attention_flops(model, s_in) - h * saved),
                kv_seq=plain(plan.kv_per_seq(s_in) - h * shared_kv_bytes(plan, s_in, reused)))


def _prefill_bound(dep, batch, input_tokens, chunk_tokens, overhead_s, efficiency, last_mlp_logits_only,
                   prefix=None, routing="floor") -> ArrayLike:
    """:func:`prefill_bound`'s body (``routing``: the experts its passes read, ``"floor"`` for the bound)."""
    model, layout = dep.model, dep.layout
    opts = dict(overhead_s=non_negative("overhead_s", overhead_s), efficiency=fraction("efficiency", efficiency),
                routing=routing)
    s_in = positive_int("input_tokens", input_tokens)
    batch = positive("batch", batch)
    broadcast(batch=batch, input_tokens=input_tokens)
    fills = layout.pp - 1
    if not isinstance(last_mlp_logits_only, (bool, np.bool_)):
        raise ValueError(f"last_mlp_logits_only must be True or False, got {last_mlp_logits_only!r}")
    if last_mlp_logits_only and model.n_experts:
        raise ValueError(f"last_mlp_logits_only is modelled for dense models only; {model.name} has experts")
    last_mlp = bool(last_mlp_logits_only)
    if prefix is not None and chunk_tokens is not None:
        raise ValueError(f"chunk_tokens ({chunk_tokens!r}) with prefix_tokens is not modelled: a cached prefix is "
                         "bounded for a prompt prefilled in one pass; leave chunk_tokens out")
    step, live, hop_bytes = _prefill_passes(dep, batch, s_in, chunk_tokens, last_mlp, opts, prefix)
    if live is None:
        ttft = step.strict_s
        if fills:  # each earlier stage reads its weights and sends one token on
            ttft = ttft + fills * step.weight_bytes_read / step.bandwidth + dep._pipeline_s(hop_bytes)
        refuse_overflow("prefill_bound", {"ttft": ttft}, batch=batch, input_tokens=input_tokens)
        return plain(ttft)
    per_chunk = np.where(live, step.strict_s, 0.0)
    ttft = np.cumsum(per_chunk, axis=-1)[..., -1]  # in order: a longer prompt beside it (zero chunks) changes no bit
    if fills:
        ttft = ttft + fills * per_chunk[..., 0] + dep._pipeline_s(hop_bytes)
    refuse_overflow("prefill_bound", {"ttft": ttft}, batch=batch, input_tokens=input_tokens, chunk_tokens=chunk_tokens)
    return plain(ttft)


def _prefill_passes(dep: Deployment, batch, s_in, chunk_tokens, last_mlp: bool, opts, prefix=None):
    """The passes a prefill runs on one chip of the first stage, as :func:`prefill_bound` charges them.

    Returns ``(step, live, hop_bytes)``: without ``chunk_tokens`` the whole prompt's pass (``live`` None); with it
    every chunk's pass on a last axis of chunks, ``live`` marking those inside the prompt. ``hop_bytes``: the first
    send down a pipeline (one token's activations, or the first chunk's). :mod:`kvmath.estimate` prices the same
    passes. ``prefix`` (whole prompts only): a cached prefix's share of the prompt skipped (:func:`_prefix_prompt`).
    """
    model, layout = dep.model, dep.layout
    if chunk_tokens is None:
        prompt = dict(tokens_per_seq=s_in) if prefix is None else _prefix_prompt(dep, s_in, prefix)
        share = _stage_share(dep, batch, s_in, last_mlp_logits_only=last_mlp, **prompt, **opts)
        return share, None, model.d_model * dep.b_act
    c = one_int("chunk_tokens", chunk_tokens)
    c = int(min(c, np.max(s_in)))  # a chunk longer than every prompt is the whole prompt
    n_chunks = float(np.ceil(np.max(s_in) / c))
    if n_chunks * np.size(s_in) * np.size(batch) > _MAX_CHUNK_CELLS:
        # each chunk is an array cell: refuse by name rather than run out of memory inside numpy
        raise ValueError(f"chunk_tokens {c} splits input_tokens (up to {np.max(s_in):.0f}) into {n_chunks:.0f} chunks, "
                         f"too many to evaluate for this batch (at most {_MAX_CHUNK_CELLS} batch x prompt x chunk "
                         "cells): use larger chunks")
    # Chunk k covers prompt positions k c + 1 .. min((k + 1) c, S): numpy over the chunk index.
    k = np.arange(int(n_chunks))
    s = np.asarray(s_in, dtype=float)[..., None]
    done = np.minimum(k * c, s)                  # tokens cached before chunk k
    size = np.minimum(s, done + c) - done        # tokens in chunk k (0 past the prompt)
    live = size > 0
    end = np.maximum(done + size, 1)
    # The chunk reads the cache of the chunks before it and writes its own: the cache up to its end.
    first = np.maximum(done, 1)
    attention = prefill_attention_flops(model, end) - np.where(done > 0, prefill_attention_flops(model, first), 0)
    batch, efficiency, overhead_s = (np.asarray(x, dtype=float)[..., None]  # the chunk index is the last axis
                                     for x in (batch, opts["efficiency"], opts["overhead_s"]))
    step = _pass(_without_pipeline(dep), batch, end, tokens_per_seq=np.maximum(size, 1), overhead_s=overhead_s,
                 efficiency=efficiency, prefill=True, last_mlp_logits_only=last_mlp, attention=attention,
                 routing=opts["routing"],
                 lm_head_tokens=np.where(done + size >= s, 1.0, 0.0))
    if layout.pp > 1:
        step = _stage_of(step, layout.pp, dep._plan.weight_resident)
    return step, live, batch[..., 0] * size[..., 0] * model.d_model * dep.b_act


def _decode_stretches(dep: Deployment, batch, lo, hi, opts, shared_per_seq=0.0):
    """Stretches of context ``lo .. hi`` on which every term of a decode step is affine in the context.

    A step's terms bend where a window fills: every window of the model's
    cache terms (sliding and chunked layers, a dsa layer's top-k, a shared
    layer's source). With a shared prefix (``shared_per_seq`` bytes per
    sequence left out of the reads, as :func:`_pass` leaves them, never below
    none) they also bend where a sequence's reads reach that share ``c``:
    below it the step reads none of the cache. Each stretch's line runs
    through the steps at its lowest context ``x`` and at ``x + 1`` (``x`` a
    window's end, where two stretches meet, or ``ceil(c)``), both on the
    stretch or, where it holds one context only, through that context's step.

    Yields ``(line, t1, first, last, steps)``: ``line(f)`` is ``(p, q)`` with ``f(step at S) = p + q S``
    on the stretch, ``t1`` a step on it, ``first .. last`` its contexts, ``steps`` how many."""
    plan = dep._plan
    t = plan.terms
    windows = sorted({w for terms in (t.held, t.read, t.flops) for _, w in terms if w is not None})
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    prefix = not np.all(np.asarray(shared_per_seq) == 0)

    def stretch(x, first, last):
        t1, t2 = (_pass(dep, batch, s, **opts) if not prefix else
                  _pass(dep, batch, s, kv_seq=plan.kv_per_seq(s) - shared_per_seq, **opts) for s in (x, x + 1.0))

        def line(f, t1=t1, t2=t2, x=x):
            slope = f(t2) - f(t1)
            return f(t1) - slope * x, slope

        return line, t1, first, last, np.maximum(last - first + 1, 0)

    # piece k: contexts ends[k] + 1 .. ends[k + 1] (the last one unbounded), its line anchored at max(ends[k], 1)
    ends = [0, *windows]
    for k, end in enumerate(ends):
        top = ends[k + 1] if k + 1 < len(ends) else None
        x = float(max(end, 1))
        first = np.maximum(lo, end + 1.0)
        last = hi if top is None else np.minimum(hi, float(top))
        if not prefix:
            yield stretch(x, first, last)
            continue
        # the reads, affine on the piece, reach the shared part at c: no cache read below, the rest above
        r1 = plan.kv_read_per_seq(x)
        dr = plan.kv_read_per_seq(x + 1.0) - r1
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(dr > 0, x + (shared_per_seq - r1) / np.where(dr > 0, dr, 1.0),
                         np.where(r1 >= shared_per_seq, -_BIG, _BIG))
        cap = float(top) if top is not None else max(float(np.max(hi)), x) + 1.0
        above = np.clip(np.ceil(c), x, cap)          # the first context that reads (a finite anchor where none does)
        below_last = np.minimum(last, above - 1.0)
        if np.any(below_last >= first):
            yield stretch(x, first, below_last)
        yield stretch(above, np.maximum(first, above), last)


def _decode_sums(dep: Deployment, batch, lo, hi, opts, shared_per_seq=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Strict and no-overlap bounds summed over decode steps with caches of ``lo .. hi`` tokens.

    ``shared_per_seq``: cache bytes per sequence left out of each step's reads (a shared prefix's, read once).
    """
    strict = no_overlap = 0.0
    for line, t1, first, last, steps in _decode_stretches(dep, batch, lo, hi, opts, shared_per_seq):
        mem = line(lambda t: t.memory_s)
        comp = line(lambda t: t.compute_s)
        kv, att = line(lambda t: t.kv_read_s), line(lambda t: t.attention_compute_s)
        fixed = t1.overhead_s
        strict = strict + _sum_max2_and_constant(mem, comp, t1.comm_s, first, last) + fixed * steps
        weights_s = np.maximum(t1.weight_read_s, t1.weight_compute_s)
        no_overlap = no_overlap + _sum_max2(kv, att, first, last) + (fixed + weights_s + t1.comm_s) * steps
    return strict, no_overlap


@checked
def request_times(
    dep: Deployment,
    batch: ArrayLike,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    *,
    chunk_tokens: int | None = None,
    price_per_chip_hour: ArrayLike | None = None,
    overhead_s: ArrayLike = 0.0,
    efficiency: ArrayLike = 1.0,
    last_mlp_logits_only: bool = False,
    prefix_tokens: ArrayLike | None = None,
    prefix_hit_rate: ArrayLike | None = None,
    block_size: int | None = None,
    routing: str = "floor",
) -> Request:
    """Bounds on serving ``batch`` requests of ``input_tokens`` in and ``output_tokens`` out, together.

    The prefill (:func:`prefill_bound`) yields the first token; the
    ``output_tokens - 1`` decode steps that follow are summed in closed
    form (see the module text). :meth:`kvmath.Deployment.request` calls it.

    Parameters
    ----------
    dep : Deployment
    batch, input_tokens, output_tokens : int or array
        Requests served together, and their prompt and output lengths
        (whole numbers; broadcast against each other).
    chunk_tokens, last_mlp_logits_only : optional
        Chunked prefill, and the last layer's MLP on the logits' rows only (see :func:`prefill_bound`).
    price_per_chip_hour : float or array, optional
        For ``cost_per_million_tokens`` (currency per chip-hour; broadcasts).
    overhead_s, efficiency :
        Per-step overhead and fraction of peak bandwidth (estimates; the
        defaults keep the times lower bounds).
    prefix_tokens, prefix_hit_rate, block_size : optional
        A shared prompt prefix found cached by a fraction of the requests
        (prefix caching; see :func:`prefill_bound` and :mod:`kvmath.prefix`).
        The prefill does only the rest; each decode step reads the shared
        part's cache once for the hits on a chip (``h (1 - 1 / b)`` of it per
        sequence left out, ``b`` the chip's sequences; with sliding windows the
        most of it a window can hold), which keeps the bound.
    routing : str
        The routed experts each pass reads (MoE models; :func:`kvmath.moe.experts_touched`): ``"floor"``
        (``k`` per layer) keeps the times lower bounds; ``"uniform"`` estimates a real router's reads, and
        the result is then not a lower bound (``is_lower_bound`` False).

    Returns
    -------
    Request

    Examples
    --------
    Llama 3 8B on one H100: 16 requests of 1,000 tokens in, 500 out.

    >>> from kvmath import Deployment
    >>> r = request_times(Deployment("llama-3-8b", "h100-sxm"), 16, 1000, 500, price_per_chip_hour=2.0)
    >>> round(r.ttft_s * 1e3, 1), round(r.time_per_output_token_s * 1e3, 3), round(float(r.output_tokens_per_s))
    (230.0, 5.263, 2801)
    >>> round(r.cost_per_million_tokens, 3)
    0.198
    """
    with overflow_named("request_times", batch=batch, input_tokens=input_tokens, output_tokens=output_tokens):
        return _request_times(dep, batch, input_tokens, output_tokens, chunk_tokens, price_per_chip_hour,
                              overhead_s, efficiency, last_mlp_logits_only,
                              check_prefix(prefix_tokens, prefix_hit_rate, block_size),
                              choice("routing", routing, ROUTINGS))


def _request_times(dep, batch, input_tokens, output_tokens, chunk_tokens, price_per_chip_hour, overhead_s,
                   efficiency, last_mlp_logits_only, prefix=None, routing="floor") -> Request:
    """:func:`request_times`'s body."""
    batch = positive_int("batch", batch)
    s_in = positive_int("input_tokens", input_tokens)
    s_out = positive_int("output_tokens", output_tokens)
    broadcast(batch=batch, input_tokens=input_tokens, output_tokens=output_tokens,
              price_per_chip_hour=price_per_chip_hour)
    if price_per_chip_hour is not None:
        price_per_chip_hour = plain(non_negative("price_per_chip_hour", price_per_chip_hour))
    efficiency = fraction("efficiency", efficiency)
    overhead_s = non_negative("overhead_s", overhead_s)
    opts = dict(overhead_s=overhead_s, efficiency=efficiency, routing=routing)
    prompts, back = s_in, None
    if prefix is None and np.ndim(s_in) == 1 and np.shape(batch)[-1:] in ((), (1,)):
        prompts, back = np.unique(s_in, return_inverse=True)  # shapes that share a prompt length share a prefill
    ttft = _prefill_bound(dep, batch, prompts, chunk_tokens, overhead_s, efficiency, last_mlp_logits_only, prefix,
                          routing)
    if back is not None:
        ttft = np.asarray(ttft)[..., back]
    shared, reused, hit = 0.0, 0.0, 0.0
    if prefix is not None:
        p, hit, b = prefix
        reused = reused_tokens(p, b, s_in)
        plan = dep._plan
        # at most what a window can hold of the prefix, read once by a chip's sequences that hit it
        shared = hit * (plan.kv_per_seq(reused) - plan.state_bytes) * (1 - 1 / np.maximum(plan.micro(batch), 1.0))
    decode, decode_no_overlap = _decode_sums(dep, batch, np.asarray(s_in) + 1.0, np.asarray(s_in) + s_out - 1.0, opts,
                                             shared)
    times = Request(
        batch=batch, input_tokens=s_in, output_tokens=s_out, n_chips=dep.n_chips,
        ttft_s=plain(ttft), decode_s=plain(decode), decode_no_overlap_s=plain(decode_no_overlap),
        is_lower_bound=bool(np.all(efficiency == 1) and np.all(overhead_s == 0) and routing == "floor"),
        price_per_chip_hour=price_per_chip_hour, reused_tokens=plain(reused), prefix_hit_rate=plain(hit),
    )
    refuse_overflow("request_times", {"total": times.total_s, "rate": times.output_tokens_per_s,
                                      "cost": 0.0 if times.cost_per_million_tokens is None else times.cost_per_million_tokens},
                    batch=batch, input_tokens=input_tokens, output_tokens=output_tokens)
    return times


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Frontier(Result):
    """Throughput per chip against tokens/s per user as the batch grows, for each request shape: bounds.

    Built from lower bounds on every request's time, so each throughput is an
    upper bound and each time per output token a lower bound (estimates where
    an efficiency or overhead was given).

    Arrays are ``(batch, shape)``: one row per batch size, one column per
    request shape.

    Attributes
    ----------
    requests : Request over the whole grid.
    budget : the memory budget the cap used (:func:`kvmath.memory.memory_budget`:
        ``"device"``, the marketed size, by default).
    memory_bytes : the bytes per chip that budget gives.
    max_batch : per shape, the most requests whose caches fit beside the
        weights (:func:`kvmath.formulas.kv_budget_bytes` on each chip).
    fits : where ``batch <= max_batch``.
    throughput_per_chip : output tokens/s per chip, prefill included (NaN
        where the batch does not fit).
    tokens_per_s_per_user : 1 / time per output token (NaN where it does not
        fit, or for one output token, where it is undefined).
    best_batch : per shape, the batch of highest throughput per chip that
        fits and meets ``tpot_limit_s`` (the smallest such batch where
        throughput ties within 1e-9; 0 where none does; a one-token output
        has no TPOT and meets any limit).
    best_throughput_per_chip : its throughput per chip (0.0 where none).
    found : per shape, whether any batch fits and meets the limit.
    """

    requests: Request
    budget: str
    memory_bytes: float
    max_batch: np.ndarray
    fits: np.ndarray
    throughput_per_chip: np.ndarray
    tokens_per_s_per_user: np.ndarray
    best_batch: np.ndarray
    best_throughput_per_chip: np.ndarray
    found: np.ndarray


def serving_frontier(
    dep: Deployment,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    *,
    batch: ArrayLike | None = None,
    tpot_limit_s: float | None = None,
    chunk_tokens: int | None = None,
    hbm_bytes: float | None = None,
    price_per_chip_hour: float | None = None,
    budget: str = "device",
    routing: str = "floor",
) -> Frontier:
    """The serving frontier of ``model`` on ``layout`` for request shapes ``input_tokens`` x ``output_tokens``.

    Every batch in ``batch`` (default 1 .. 4096) against every shape (the
    two length arrays broadcast to one axis of shapes), in one call;
    ``batch`` is 1-D. The memory cap: each chip's memory less its weights
    must hold its share of every cache at the last step. The memory is the
    named ``budget`` of :func:`kvmath.memory.memory_budget` (``"device"``, the
    marketed size, by default; ``"reported"``, ``"reserve"`` or ``"engine"``:
    vLLM's ``gpu_memory_utilization`` share, without its activation peak),
    or ``hbm_bytes`` per chip, taken as that budget's size when given.
    Where a chip's share of the weights alone exceeds that memory, no batch
    fits: ``max_batch`` is 0 and ``found`` is False. ``routing`` (MoE models):
    the experts each step reads, as in :func:`request_times` (``"floor"`` for
    the bounds, ``"uniform"`` for an estimate of a real router's).

    Examples
    --------
    Llama 3 70B on 8 H100s by heads, 1,000 tokens in and 1,000 out: memory
    holds 761 such requests; at most 15 ms per output token (66.7 tokens/s
    per user) allows 535, for 2,749 output tokens/s per chip:

    >>> from kvmath import Deployment
    >>> f = serving_frontier(Deployment("llama-3-70b", "h100-sxm", "tp=8", link="nvlink4"), 1000, 1000,
    ...                      tpot_limit_s=0.015)
    >>> int(f.max_batch[0]), int(f.best_batch[0]), round(float(f.best_throughput_per_chip[0])), f.budget
    (761, 535, 2749, 'device')

    Under vLLM's 0.9 of the runtime's memory, fewer fit (:func:`kvmath.memory.vllm_engine`,
    which also sets aside vLLM's activation peak, admits fewer still):

    >>> int(serving_frontier(Deployment("llama-3-70b", "h100-sxm", "tp=8"), 1000, 1000, budget="engine").max_batch[0])
    714
    """
    budget = choice("budget", budget, BUDGETS)
    broadcast(input_tokens=input_tokens, output_tokens=output_tokens)
    if batch is not None and np.ndim(batch) > 1:
        raise ValueError(f"batch must be a number or a 1-D array, got an array of shape {np.shape(batch)}")
    s_in = np.atleast_1d(positive_int("input_tokens", input_tokens)).astype(float)
    s_out = np.atleast_1d(positive_int("output_tokens", output_tokens)).astype(float)
    s_in, s_out = (x.ravel() for x in np.broadcast_arrays(s_in, s_out))
    batch = np.arange(1, 4097, dtype=float) if batch is None else np.atleast_1d(positive_int("batch", batch)).astype(float)
    hbm = memory_budget(dep.chip, budget) if hbm_bytes is None else positive("hbm_bytes", hbm_bytes)
    one = _pass(dep, 1.0, s_in + s_out - 1)
    # weights that do not fit leave no room: no batch fits (found is False), not an error,
    # so a sweep over models and chips can show where a model does not fit
    w = one.weight_bytes_resident
    kv_room = kv_budget_bytes(1, hbm, w) if w <= hbm else 0.0
    most = np.floor(kv_room / one.kv_bytes_resident) * dep.layout.dp
    requests = request_times(dep, batch[:, None], s_in, s_out, chunk_tokens=chunk_tokens,
                             price_per_chip_hour=price_per_chip_hour, routing=routing)
    fits = batch[:, None] <= most
    throughput = np.where(fits, requests.output_tokens_per_s_per_chip, np.nan)
    tpot = requests.time_per_output_token_s
    per_user = np.where(fits, requests.tokens_per_s_per_user, np.nan)
    no_decode = s_out == 1  # one output token: no TPOT, so any limit is met
    allowed = fits if tpot_limit_s is None else fits & (no_decode | (tpot <= positive("tpot_limit_s", tpot_limit_s)))
    score = np.where(allowed, throughput, -np.inf)
    # the smallest batch within rounding of the best: on a compute-bound plateau throughput ties to ~1e-15,
    # and the larger batch only makes each user wait longer for the same tokens per chip
    best = np.max(score, axis=0)
    pick = np.argmax(score >= best * (1 - 1e-9), axis=0)
    found = np.any(allowed, axis=0)
    return Frontier(
        requests=requests, budget=budget, memory_bytes=float(hbm), max_batch=most, fits=fits,
        throughput_per_chip=throughput, tokens_per_s_per_user=per_user,
        best_batch=np.where(found, batch[pick], 0), best_throughput_per_chip=np.where(
            found, np.take_along_axis(np.where(allowed, throughput, 0.0), pick[None, :], 0)[0], 0.0),
        found=found,
    )
