"""Continuous batching: a decode step that also carries prompt tokens, its steady state, and the cost of a token.

Continuous (iteration-level) batching, as Orca and vLLM schedule it, runs
one forward pass per step over every running sequence: ``B`` decode tokens,
each reading its own cache, and, where a request has just arrived, some of
its prompt. The weights are read once for all of them. Two rules:

- :func:`mixed_step`: one step of ``B`` decode sequences plus one prefill
  chunk of ``c`` prompt tokens, ``c0`` of whose prompt are already cached.
  The chunk adds ``2 P c`` weight FLOPs, its causal attention, and its cache
  (it reads the ``c0`` tokens before it and writes its own); the weights are
  read once for all ``B + c`` tokens. The strict bound is
  ``overhead + max(bytes / W, FLOPs / C, comm)``, as for a decode step
  (:meth:`kvmath.Deployment.step`), so ``c = 0`` gives the decode step exactly.
- :func:`steady_state`: ``B`` decode slots kept full. A request of
  ``S_in`` prompt and ``S_out`` output tokens holds a slot for its
  ``S_out - 1`` decode steps (its first token comes from its prefill), so
  each step retires ``B / (S_out - 1)`` requests and admits as many
  prompts: ``B S_in / (S_out - 1)`` prompt tokens per step on average. The
  decode sequences' contexts are spread over ``S_in + 1 .. S_in + S_out -
  1``, mean ``S_in + S_out / 2`` (the caches averaged exactly over them, windows
  included). The step charges the prompts' FLOPs and
  the cache they write, not the re-reads of earlier chunks, so it is a
  lower bound under any chunking.

:func:`kvmath.formulas.cost_per_million_tokens` turns tokens per chip-second into a price,
given a price per chip-hour (an input: no price here is a fact).

Both rules take every layout. Two bounds hold on each (a mixed step on
replicas or ``kv=batch`` without expert parallelism has a third, below), and
the step is the largest (its figures are those of the largest; ``decode_only_s``
is the decode step's):

- *the decode step alone*, as :meth:`kvmath.Deployment.step` bounds it: prompt
  tokens only add work, so the step is at least the decode tokens' own. Under
  data parallelism that is the fullest replica's ``ceil(B / dp)`` sequences;
  under a pipeline, a micro-batch of ``max(B / pp, 1)`` of them must pass every
  stage within the step, reading every layer's weights (fewer micro-batches
  lengthen that trip, more make each stage read its weights more often).
- *the even share*: each data-parallel replica ``B / dp`` decode sequences and
  ``1 / dp`` of the prompt work, on every layer (the layout without its
  pipeline), over ``pp``. The stages' chips together must, within the step,
  read every layer's weights once and do every token's work, so the busiest
  does at least the mean, ``1 / pp`` of it; the busiest chip also takes at
  least the mean over the replicas of their times. A
  replica's time ``overhead + max(bytes / W, FLOPs / C, comm)`` is a max of
  terms affine in its load (sequences, chunk tokens), so convex, and the mean
  of a convex function is at least its value at the mean load: at least the
  even split's, wherever the chunk lands (replicas left idle only raise the
  others' share). The terms that are not affine are taken at a floor that is:
  the embedding and position rows (``min(T, rows)``, concave in the tokens ``T``,
  0 at 0, hence subadditive) at the whole deployment's ``min(dp T, rows) / dp``;
  ``kv_split="batch"``'s sequences per chip at ``b / tp``, not ``ceil(b / tp)``;
  a micro-batch at ``b / pp``, without the one-sequence floor, over several
  replicas (:meth:`kvmath.deployment._Plan.micro`). The experts a step reads are
  the floor's ``k`` per layer whatever the tokens, affine already. With
  ``routing="uniform"`` they grow with the step's tokens (concave), so that
  argument no longer holds and the step is an estimate of a real router's
  reads, not a bound (chapter 11 sizes MoE serving under both).

- *the chunk alone on its replica* (:func:`mixed_step` under data parallelism
  or ``kv=batch``, without expert parallelism): the chunk lands whole on one
  replica, its cache on one chip of a ``kv=batch`` group, and those chips do all
  of its work, over ``pp``. With experts over several chips the chunk's tokens
  may be routed to experts on other chips, so the routed work is not its
  replica's to count: that case keeps the first two bounds.

In a steady state the prompts' tokens are an average share; they may come
bunched in a few steps, and the rows are concave in the tokens, so the
steady step charges rows for the decode tokens only (the cache, the FLOPs and
the communication are affine and stay in). No pipeline hop is charged to the
even share (leaving it out keeps the bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .deployment import Deployment
from .formulas import _cost_of_chip_time
from .moe import ROUTINGS
from .requests import _without_pipeline, prefill_attention_flops
from .results import Result
from .validation import (
    ArrayLike,
    broadcast,
    checked,
    choice,
    instance,
    non_negative,
    plain,
    positive,
    positive_int,
    refuse_overflow,
)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class MixedStep(Result):
    """Bounds on one continuous-batching step, per chip (seconds, bytes, FLOPs; arrays where the inputs were).

    Attributes
    ----------
    batch, context : decode sequences (:func:`mixed_step`'s as called; a steady state's, one data-parallel
        replica's ``B / dp``) and their (mean) cached tokens.
    prefill_tokens : prompt tokens in the step (:func:`mixed_step`'s chunk, or a steady state's average share,
        one replica's).
    n_chips : chips of the layout.
    weight_bytes_read, kv_bytes_read : bytes one chip reads (the cache a chunk writes included), in the
        largest of the bounds of the module text (the even share's stage, the decode step alone, or the chunk
        alone on its replica); ``batch`` and ``prefill_tokens`` stay the call's whichever bound it is.
    total_flops : FLOPs one chip does (weights and attention, decode and prompt), in the same bound.
    comm_s : the chip's communication chain in the same bound (0 without a link).
    bandwidth, flops, overhead_s : the chip's rates (bytes/s, FLOP/s) and the per-step overhead.
    decode_only_s : the strict bound of the same step without its prompt tokens.
    """

    batch: ArrayLike
    context: ArrayLike
    prefill_tokens: ArrayLike
    n_chips: int
    weight_bytes_read: ArrayLike
    kv_bytes_read: ArrayLike
    total_flops: ArrayLike
    comm_s: ArrayLike
    bandwidth: float
    flops: float
    overhead_s: ArrayLike
    decode_only_s: ArrayLike

    _derived = ("memory_s", "compute_s", "strict_s", "slowdown")

    @property
    def memory_s(self) -> ArrayLike:
        """``(weights + cache) / W``, seconds."""
        return plain((self.kv_bytes_read + self.weight_bytes_read) / self.bandwidth)  # as a Step adds them

    @property
    def compute_s(self) -> ArrayLike:
        """``FLOPs / C``, seconds."""
        return plain(self.total_flops / self.flops)

    @property
    def strict_s(self) -> ArrayLike:
        """``overhead + max(memory_s, compute_s, comm_s)``: the step's lower bound, seconds."""
        return plain(self.overhead_s + np.maximum(np.maximum(self.memory_s, self.compute_s), self.comm_s))

    @property
    def slowdown(self) -> ArrayLike:
        """``strict_s / decode_only_s``: how much longer every decode sequence waits for this step."""
        return plain(self.strict_s / self.decode_only_s)


def _mean_over(f, lo, hi, windows) -> ArrayLike:
    """Mean of ``f(t)`` over the integers ``t = lo .. hi``, for ``f`` affine between the layers' windows.

    The cache and the attention FLOPs of a sequence are affine in its context
    between consecutive windows ``w`` (each windowed layer holds ``min(t, w)``
    tokens), so each stretch's sum is its length times the mean of its two
    ends: exact, with no loop over contexts.
    """
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    edges = [0.0, *sorted(float(w) for w in set(windows)), np.inf]
    total = 0.0
    for w0, w1 in zip(edges[:-1], edges[1:]):
        a, b = np.maximum(lo, w0 + 1), np.minimum(hi, w1)
        n = np.maximum(b - a + 1, 0)
        a1, b1 = np.where(n > 0, a, lo), np.where(n > 0, b, lo)  # ends of an empty stretch are never used
        total = total + n * (f(a1) + f(b1)) / 2
    return plain(total / (hi - lo + 1))


def _run(dep: Deployment, batch, context, tokens_per_seq, kv_seq, attention, *, lm_head_tokens=None,
         even_share=True, routing="floor"):
    """A pass of the deployment's one step model (:meth:`kvmath.deployment._Plan.pass_`) at the chip's rates;
    ``kv_seq`` is the (held, read) pair of each sequence's cache bytes; ``routing`` the experts it reads."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        return dep._plan.pass_(batch, context, tokens_per_seq, *kv_seq, attention, bandwidth=dep.chip.bandwidth,
                               flops=dep.flops, comm=dep._comm, lm_head_tokens=lm_head_tokens, even_share=even_share,
                               routing=routing)


def _kv(plan, context):
    """Each sequence's cache bytes at ``context`` tokens, (held, read), as :func:`_run` takes them."""
    return plan.kv_per_seq(context), plan.kv_read_per_seq(context)


def _figures(step, over=1):
    """A pass's figures as a MixedStep holds them, each over ``over`` (a stage's share: ``pp``)."""
    return dict(weight_bytes_read=step.weight_bytes_read / over, kv_bytes_read=step.kv_bytes_read / over,
                total_flops=(step.weight_flops + step.attention_flops) / over, comm_s=step.comm_s / over)


def _step(dep: Deployment, batch, context, prompts, prompt_start, prompt_tokens, lm_head, overhead_s, *,
          fullest=None, prompt_rows=True, routing="floor") -> MixedStep:
    """One step: ``batch`` decode sequences spread evenly over the contexts ``context = (lo, hi)``, plus ``prompts``
    prompts of ``prompt_tokens`` each, ``prompt_start`` of whose tokens are cached (``prompts`` may be fractional:
    an average share). ``batch`` and ``prompts`` are one data-parallel group's even share (``B / dp``, ``1 / dp``).

    The bound is the largest of these, each a pass of the deployment's one step model (see the module text):

    - the *share*: the even share's step on every layer (the layout without its pipeline), over ``pp``: the
      stages' chips together read every layer's weights once per step and do every token's work, so the busiest
      does at least the mean, ``1 / pp`` of it;
    - the step of the decode sequences alone, as :meth:`kvmath.Deployment.step` bounds it (a pipeline's
      micro-batch must pass every stage within the step): of ``fullest`` sequences (the whole batch, whose
      fullest group holds ``ceil(B / dp)``), or of the even share where ``fullest`` is None.

    and, for a mixed step on replicas or ``kv=batch`` without expert parallelism, the chunk alone on its replica.
    Its figures are those of the largest (the share's on a tie); ``decode_only_s`` is the decode step's.
    ``prompt_rows``: False charges no table rows for the prompts' tokens (a steady state's average share:
    its prompts may come bunched, and the rows are concave in the tokens). ``routing``: the experts each pass
    reads (``"floor"`` keeps every bound; ``"uniform"`` makes the step an estimate).
    """
    model, plan = dep.model, dep._plan
    r = dict(routing=routing)
    lo, hi = context
    windows = {layer.window for layer in model.layer_specs() if layer.window is not None}
    windows |= {layer.topk for layer in model.layer_specs() if layer.kind == "dsa"}  # where a dsa read stops growing
    kv = (_mean_over(plan.kv_per_seq, lo, hi, windows), _mean_over(plan.kv_read_per_seq, lo, hi, windows))
    att = _mean_over(plan.attention_per_token, lo, hi, windows)
    flat, pp = _without_pipeline(dep), dep.layout.pp
    decode = _run(flat, batch, hi, 1.0, kv, att, **r)
    has = (np.asarray(prompt_tokens) > 0) & (np.asarray(prompts) > 0)  # a share that underflows to 0 is none
    c = np.maximum(prompt_tokens, 1)
    end = prompt_start + c
    attention = prefill_attention_flops(model, end) - np.where(
        prompt_start > 0, prefill_attention_flops(model, np.maximum(prompt_start, 1)), 0.0)
    prompt = _run(flat, np.where(has, prompts, 1.0), end, c, _kv(plan, end), attention, lm_head_tokens=lm_head, **r)
    tokens = batch + np.where(has, prompts * c, 0.0)
    both = _run(flat, 1.0, 1.0, tokens, (0.0, 0.0), 0.0, **r)  # the weights, read once for all the step's tokens, and the comm
    # the stages' chips share every layer's work, so the busiest does at least the mean, 1 / pp of it
    # (x / 1 is exact: pp = 1 changes no bit)
    share = dict(weight_bytes_read=(both if prompt_rows else decode).weight_bytes_read / pp,
                 kv_bytes_read=(decode.kv_bytes_read + np.where(has, prompt.kv_bytes_read, 0.0)) / pp,
                 total_flops=(decode.weight_flops + decode.attention_flops
                              + np.where(has, prompt.weight_flops + prompt.attention_flops, 0.0)) / pp,
                 comm_s=both.comm_s / pp)
    alone = (_run(dep, batch, hi, 1.0, kv, att, **r) if fullest is None
             else _run(dep, fullest, hi, 1.0, kv, att, even_share=False, **r))
    decode_only = overhead_s + alone.strict_s  # the decode step alone (its own overhead is 0)
    # the shape shown: a steady state's one replica's share; a mixed step's whole call (its one chunk)
    shown = np.where(has, prompts * c, 0.0) if fullest is None else np.where(has, c, 0.0)
    rates = dict(batch=batch if fullest is None else fullest, context=plain((context[0] + context[1]) / 2),
                 prefill_tokens=plain(shown), n_chips=dep.n_chips,
                 bandwidth=dep.chip.bandwidth, flops=dep.flops, overhead_s=overhead_s, decode_only_s=plain(decode_only))
    mixed = MixedStep(**rates, **{k: plain(v) for k, v in share.items()})
    if fullest is not None and (dep.layout.dp > 1 or dep.layout.kv_split == "batch") and dep.layout.ep == 1:
        # the chunk lands whole on one replica, its cache on one chip of a kv=batch group: those chips do all of
        # its work (review r2, R1); the even share alone spread it over every replica and chip. Not with experts
        # over several chips: the chunk's tokens may go to experts elsewhere (review r3, N1: Mixtral dp=ep=8)
        chunk = _figures(_run(flat, 1.0, end, c, _kv(plan, end), attention, lm_head_tokens=lm_head,
                              even_share=False, **r), over=pp)
        larger = has & (np.asarray(MixedStep(**rates, **{k: plain(v) for k, v in chunk.items()}).strict_s)
                        > np.asarray(mixed.strict_s))
        if np.any(larger):
            share = {k: np.where(larger, chunk[k], share[k]) for k in share}
            mixed = MixedStep(**rates, **{k: plain(v) for k, v in share.items()})
    take = has & (np.asarray(mixed.strict_s) >= decode_only)  # without prompts the decode step, to the last bit
    if np.all(take):
        return mixed
    alone_figures = _figures(alone)
    return MixedStep(**rates, **{k: plain(np.where(take, share[k], alone_figures[k])) for k in share})


@checked
def mixed_step(
    dep: Deployment,
    batch: ArrayLike,
    context: ArrayLike,
    chunk_tokens: ArrayLike = 0,
    chunk_start: ArrayLike = 0,
    *,
    overhead_s: ArrayLike = 0.0,
    routing: str = "floor",
) -> MixedStep:
    """A decode step of ``batch`` sequences at ``context`` that also runs a prefill chunk of ``chunk_tokens``.

    The chunk belongs to a prompt of which ``chunk_start`` tokens are already
    cached: it reads their cache, writes its own, and attends causally to
    ``chunk_start + 1 .. chunk_start + chunk_tokens`` tokens. No logits are
    charged for it (only a prompt's last chunk needs them, ``2 d V`` FLOPs:
    left out, which keeps the bound safe). ``chunk_tokens = 0`` is the plain
    decode step on every layout (:meth:`kvmath.Deployment.step`'s floats). See the module text.

    Under data parallelism the chunk lands on one replica; the bound holds
    wherever it lands and however the decode sequences are spread: the largest
    of the fullest replica's ``ceil(B / dp)`` decode sequences alone, the even
    split (``B / dp`` sequences and ``c / dp`` of the chunk on each, the mean
    over the replicas of a convex step time), and the chunk alone on one
    replica (with ``kv=batch``, its cache on one chip; not under expert parallelism, whose routed work may
    run on other chips). Under a pipeline, the larger
    of the decode step (a micro-batch's trip through every stage) and one
    stage's ``1 / pp`` of the whole step, weights read once.

    Parameters
    ----------
    dep : Deployment
        Any layout: tensor, context, data, pipeline and expert parallelism and their combinations.
    batch : float or array
        Decode sequences in the step, > 0 (real-valued for smooth sweeps, as in :meth:`kvmath.Deployment.step`).
    context : float or array
        Their mean cached tokens (the cache is affine in the context for
        full attention, so the mean gives the sum; with sliding windows use
        contexts on one side of the window).
    chunk_tokens, chunk_start : int or array
        The chunk's prompt tokens, and its prompt's tokens already cached.
    overhead_s : float or array
        A fixed time per step (an estimate; 0 keeps the bound).
    routing : str
        The routed experts each token group reads (:func:`kvmath.moe.experts_touched`): ``"floor"``, ``k`` per
        layer whatever the tokens, keeps the bound; ``"uniform"`` (every token's experts drawn at random, so a
        large batch touches nearly all of them) is an estimate of what a real router reads, and is no longer
        a lower bound. Unused on dense models.

    Returns
    -------
    MixedStep

    Examples
    --------
    Llama 3 8B on an H100, 64 decode sequences at 2,000 tokens: a 512-token
    chunk costs the memory-bound step almost nothing; a 4,096-token chunk
    makes it compute-bound and 6.7 times as long.

    >>> from kvmath import Deployment
    >>> h100 = Deployment("llama-3-8b", "h100-sxm")
    >>> [round(float(mixed_step(h100, 64, 2000, c).strict_s) * 1e3, 2) for c in (0, 512, 4096)]
    [9.49, 9.51, 63.27]
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    batch = positive("batch", batch)
    positive_int("context", context)
    c = non_negative("chunk_tokens", chunk_tokens)
    start = non_negative("chunk_start", chunk_start)
    for name, value in (("chunk_tokens", c), ("chunk_start", start)):
        if np.any(np.asarray(value) != np.floor(value)):
            raise ValueError(f"{name} must be whole numbers of tokens, got {value!r}")
    broadcast(batch=batch, context=context, chunk_tokens=c, chunk_start=start)
    context = np.asarray(context, dtype=float)
    # the even share of the whole step (B / dp decode sequences and 1 / dp of the chunk per replica), and the
    # fullest replica's ceil(B / dp) decode sequences alone (the decode step itself): see the docstring
    dp = dep.layout.dp
    step = _step(dep, batch / dp, (context, context), 1.0 / dp, start, c, 0.0, non_negative("overhead_s", overhead_s),
                 fullest=batch, routing=choice("routing", routing, ROUTINGS))
    refuse_overflow("mixed_step", {"step": step.strict_s, "slowdown": step.slowdown}, batch=batch,
                    context=context, chunk_tokens=chunk_tokens, chunk_start=chunk_start)
    return step


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class SteadyState(Result):
    """Continuous batching with ``batch`` decode slots kept full (see :func:`steady_state`).

    Attributes
    ----------
    step : MixedStep of one steady-state step (decode at the mean context, plus the prompts' share), one
        data-parallel replica's: ``B / dp`` slots (on a pipeline, the larger of its two bounds: see the module text).
    batch, input_tokens, output_tokens : slots and the request shape.
    price_per_chip_hour : the price given (None for no cost).
    """

    step: MixedStep
    batch: ArrayLike
    input_tokens: ArrayLike
    output_tokens: ArrayLike
    price_per_chip_hour: ArrayLike | None = None

    _derived = ("time_per_output_token_s", "tokens_per_s_per_user", "output_tokens_per_s_per_chip",
                "cost_per_million_tokens")

    @property
    def time_per_output_token_s(self) -> ArrayLike:
        """Every slot gains one token per step: the step's strict bound, seconds."""
        return self.step.strict_s

    @property
    def tokens_per_s_per_user(self) -> ArrayLike:
        """``1 / time_per_output_token_s``."""
        return plain(1.0 / self.step.strict_s)

    @property
    def output_tokens_per_s_per_chip(self) -> ArrayLike:
        """``B`` decode tokens plus ``B / (S_out - 1)`` first tokens per step, over the chips."""
        per_step = self.batch * self.output_tokens / (self.output_tokens - 1.0)
        return plain(per_step / self.step.strict_s / self.step.n_chips)

    @property
    def cost_per_million_tokens(self) -> ArrayLike | None:
        """:func:`cost_per_million_tokens` of the output rate per chip (None without a price)."""
        if self.price_per_chip_hour is None:
            return None
        per_step = self.batch * self.output_tokens / (self.output_tokens - 1.0)
        return plain(_cost_of_chip_time(self.price_per_chip_hour, self.step.strict_s * self.step.n_chips / per_step))


@checked
def steady_state(
    dep: Deployment,
    batch: ArrayLike,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    *,
    price_per_chip_hour: ArrayLike | None = None,
    overhead_s: ArrayLike = 0.0,
    routing: str = "floor",
) -> SteadyState:
    """Lower bounds on continuous batching's steady state: ``batch`` slots, requests of ``input_tokens`` / ``output_tokens``.

    One step (of each data-parallel replica, with ``B / dp`` in place of ``B``): ``B`` decode sequences spread evenly over the contexts
    ``S_in + 1 .. S_in + S_out - 1`` (mean ``S_in + S_out / 2``; their caches
    and attention FLOPs averaged exactly, sliding windows included) plus ``B / (S_out - 1)`` prompts of ``S_in`` tokens (an average share;
    each writes its cache and needs logits for its last token). Every layout
    is taken: each replica keeps ``B / dp`` slots full (the even share: the
    fullest holds at least that many, and ``b / t(b)`` is concave in ``b``, so
    no split serves more tokens a second), and on a pipeline the step is the
    larger of its decode step (a micro-batch of ``B / dp / pp`` passes every
    stage) and one stage's ``1 / pp`` of the whole step. See the module text.

    Parameters
    ----------
    batch : float or array
        Decode slots (sequences decoding at once), over all data-parallel replicas (``B / dp`` each).
    input_tokens, output_tokens : int or array
        The request shape; ``output_tokens >= 2`` (one output token has no decode step).
    price_per_chip_hour : float or array, optional
        For ``cost_per_million_tokens`` (an input the reader sets).
    Other arguments as in :func:`mixed_step`.

    Returns
    -------
    SteadyState

    Examples
    --------
    Llama 3 8B on an H100, 64 slots, 1,000 tokens in and 500 out: the
    prompts' share (128 tokens a step) rides in a memory-bound step.

    >>> from kvmath import Deployment
    >>> s = steady_state(Deployment("llama-3-8b", "h100-sxm"), 64, 1000, 500, price_per_chip_hour=2.0)
    >>> round(float(s.step.prefill_tokens)), round(float(s.time_per_output_token_s) * 1e3, 3)
    (128, 7.616)
    >>> round(float(s.output_tokens_per_s_per_chip)), round(float(s.cost_per_million_tokens), 4)
    (8420, 0.066)
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    batch = positive("batch", batch)
    s_in = np.asarray(positive_int("input_tokens", input_tokens), dtype=float)
    s_out = np.asarray(positive_int("output_tokens", output_tokens), dtype=float)
    if np.any(s_out < 2):
        raise ValueError(f"output_tokens must be at least 2 for a steady state of decode steps, got {output_tokens!r}")
    broadcast(batch=batch, input_tokens=input_tokens, output_tokens=output_tokens,
              price_per_chip_hour=price_per_chip_hour)
    if price_per_chip_hour is not None:
        price_per_chip_hour = plain(non_negative("price_per_chip_hour", price_per_chip_hour))
    # Each replica keeps an even share B / dp of the slots full: the fullest holds at least that many (so the time is
    # a lower bound), and since b / t(b) is concave in b no split serves more tokens a second (so the rate is a bound).
    group = batch / dep.layout.dp
    step = _step(dep, group, (s_in + 1, s_in + s_out - 1), group / (s_out - 1.0), 0.0, s_in, 1.0,
                 non_negative("overhead_s", overhead_s), prompt_rows=False,
                 routing=choice("routing", routing, ROUTINGS))
    state = SteadyState(step=step, batch=plain(batch), input_tokens=plain(s_in), output_tokens=plain(s_out),
                        price_per_chip_hour=price_per_chip_hour)
    cost = state.cost_per_million_tokens
    refuse_overflow("steady_state", {"step": step.strict_s, "rate": state.output_tokens_per_s_per_chip,
                                     "per user": state.tokens_per_s_per_user, "cost": 0.0 if cost is None else cost},
                    batch=batch, input_tokens=input_tokens, output_tokens=output_tokens)
    return state
