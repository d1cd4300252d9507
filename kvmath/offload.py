"""Offload: KV blocks or experts kept in host memory or on NVMe, and moved to the chip over a link.

Memory beyond the chip's own holds more sequences (or frees the chip's memory
for them), at the price of moving what lives there over a link (a
:class:`kvmath.Link`: PCIe, NVLink-C2C, an NVMe drive's lanes) whenever a step
needs it. The arithmetic is the step model's, with a second memory:

- **KV offload** (:func:`kv_offload`): ``B`` sequences of ``S`` tokens, of
  which the chip's memory holds ``B_hbm`` (:meth:`kvmath.Deployment.capacity`);
  the caches of the other ``B - B_hbm`` are read over the link every decode
  step. The chip's reads and the link's transfer run in parallel, so the step is at
  least ``max(bytes_hbm / W, bytes_link / W_link, FLOPs / C, comm)``. It pays
  where ``B / t(B)`` beats the most the chip serves alone, ``B_hbm / t(B_hbm)``:
  above the break-even link bandwidth ``(B - B_hbm) k_seq B_hbm / (B t(B_hbm))``.
- **expert offload** (:func:`expert_offload`): a fraction of an MoE model's
  routed experts stays in host memory; each step brings the touched experts
  among them over the link (the k-expert floor, or uniform routing), and the
  memory they leave holds more cache.
- **reload or recompute** (:func:`reload_or_recompute`): a cached prefix kept
  off the chip comes back over the link in ``k R / W_link``, against its
  prefill's bound: reloading pays for prompts where the transfer is the shorter.

All times are lower bounds (the link at its peak, no latency beyond the
link's per-transfer ``alpha``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .deployment import Deployment
from .links import Link, as_link
from .results import Result
from .prefix import unit_interval
from .validation import ArrayLike, broadcast, choice, instance, non_negative, plain, positive, positive_int


def _flag(x):
    """A comparison as ``bool`` (a scalar) or a boolean array."""
    return bool(x) if np.ndim(x) == 0 else np.asarray(x, dtype=bool)


def _link(link) -> Link:
    try:
        return as_link(link)
    except ValueError as err:
        raise ValueError(f"link: {err}") from None


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Offload(Result):
    """A decode step with part of its bytes off the chip (per chip; seconds, bytes; arrays where the inputs were).

    Attributes
    ----------
    kind : ``"kv"`` or ``"experts"``.
    batch, context : the step's sequences and their cached tokens.
    link : the link's name; ``link_bandwidth`` its bytes/s one way.
    offloaded_bytes_per_step : bytes the step moves over the link.
    link_s : their transfer, ``bytes / W_link + alpha``.
    chip_step_s : the step's bound from the chip's own reads, FLOPs and communication.
    step_s : ``max(chip_step_s, link_s)``: the step's lower bound with the transfer overlapped.
    max_batch_chip : sequences of ``context`` the chip's memory holds without offload.
    max_batch : sequences of ``context`` with the host memory given added.
    tokens_per_s : ``batch / step_s``.
    tokens_per_s_chip_only : the chip's best without offload (at ``max_batch_chip``; 0 if none fit).
    pays : ``tokens_per_s > tokens_per_s_chip_only``.
    break_even_link_bandwidth : the link bandwidth (bytes/s) above which offloading this batch pays (kv only).
    """

    kind: str
    batch: ArrayLike
    context: ArrayLike
    link: str
    link_bandwidth: float
    offloaded_bytes_per_step: ArrayLike
    link_s: ArrayLike
    chip_step_s: ArrayLike
    step_s: ArrayLike
    max_batch_chip: ArrayLike
    max_batch: ArrayLike
    tokens_per_s: ArrayLike
    tokens_per_s_chip_only: ArrayLike
    pays: ArrayLike
    break_even_link_bandwidth: ArrayLike


def _chip_step(step, kv_on_chip_fraction):
    """A step's strict bound with only ``kv_on_chip_fraction`` of its cache read from the chip's memory."""
    memory = (step.weight_bytes_read + step.kv_bytes_read * kv_on_chip_fraction) / step.bandwidth
    return step.overhead_s + np.maximum(np.maximum(memory, step.compute_s), step.comm_s)


def kv_offload(dep: Deployment, batch: ArrayLike, context: ArrayLike, *, link: Link | str = "pcie5-x16",
               host_bytes: ArrayLike | None = None, budget: str = "device") -> Offload:
    """A decode step of ``batch`` sequences whose caches beyond what the chip holds are read over ``link``.

    Parameters
    ----------
    dep : Deployment
    batch, context : int or array
        Sequences in the step (whole: a cache is one sequence's) and their cached tokens.
    link : Link or str
        What joins the chip to the memory the rest of the cache lives in (default ``"pcie5-x16"``).
    host_bytes : float or array, optional
        Host memory for caches per chip (``max_batch``; default: as much as the batch needs).
    budget : str
        The chip's memory budget (:func:`kvmath.memory.memory_budget`).

    Examples
    --------
    Llama 3 8B on one H100 holds 119 sequences of 4,096 tokens; 200 of them read the other 81 caches over
    PCIe 5 x16 (81 x 4,096 x 131,072 B at 63 GB/s), 29 times the chip's own step:

    >>> from kvmath import Deployment
    >>> o = kv_offload(Deployment("llama-3-8b", "h100-sxm"), 200, 4096, link="pcie5-x16")
    >>> int(o.max_batch_chip), round(float(o.link_s) * 1e3, 1), bool(o.pays)
    (119, 690.3, False)
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    batch, context = positive_int("batch", batch), positive_int("context", context)   # a cache is a whole sequence's
    link = _link(link)
    broadcast(batch=batch, context=context, host_bytes=host_bytes)
    cap = dep.capacity(context, budget=budget)
    step = dep.step(batch, context)
    per_seq = step.kv_bytes_read / np.maximum(step.micro_batch, 1e-300)   # one sequence's cache on this chip
    held = cap.max_batch / dep.layout.dp          # a chip's sequences its memory holds (per replica)
    micro = step.micro_batch
    off = np.maximum(micro - held, 0.0)
    moved = off * per_seq
    link_s = np.where(moved > 0, moved / link.bandwidth + link.latency_s, 0.0)
    chip_s = _chip_step(step, np.where(micro > 0, np.minimum(held, micro) / micro, 1.0))
    step_s = np.maximum(chip_s, link_s)
    best_chip = dep.step(np.maximum(cap.max_batch, 1.0), context) if np.all(cap.max_batch >= 1) else None
    chip_only = (np.where(cap.max_batch >= 1, cap.max_batch / best_chip.strict_s, 0.0) if best_chip is not None
                 else np.zeros_like(np.asarray(batch, dtype=float)))
    tokens = batch / step_s
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(off > 0, moved * chip_only / np.maximum(batch, 1e-300), 0.0)
    extra = np.inf if host_bytes is None else np.floor(non_negative("host_bytes", host_bytes) / per_seq) * dep.layout.dp
    return Offload(kind="kv", batch=batch, context=plain(context), link=link.name, link_bandwidth=link.bandwidth,
                   offloaded_bytes_per_step=plain(moved), link_s=plain(link_s), chip_step_s=plain(chip_s),
                   step_s=plain(step_s), max_batch_chip=plain(cap.max_batch),
                   max_batch=plain(np.where(np.isinf(extra), np.maximum(batch, cap.max_batch), cap.max_batch + extra)),
                   tokens_per_s=plain(tokens), tokens_per_s_chip_only=plain(chip_only),
                   pays=_flag(tokens > chip_only), break_even_link_bandwidth=plain(need))


def expert_offload(dep: Deployment, batch: ArrayLike, context: ArrayLike, offloaded_fraction: ArrayLike, *,
                   link: Link | str = "pcie5-x16", routing: str = "floor", budget: str = "device") -> Offload:
    """A decode step of an MoE model with ``offloaded_fraction`` of its routed experts in host memory.

    The experts a step touches (``routing``: the k-expert floor, a bound, or
    ``"uniform"``, an estimate) are found off the chip in proportion, and come
    over ``link``; the memory they leave holds more cache (``max_batch``
    against ``max_batch_chip``). ``pays`` compares the step's tokens/s at
    ``batch`` with the chip's best at the batch that fits without offload.
    """
    from .moe import ROUTINGS, _touched

    instance("dep", dep, Deployment, "a kvmath.Deployment")
    m, lay, plan = dep.model, dep.layout, dep._plan
    if not m.n_experts:
        raise ValueError(f"expert_offload needs a mixture-of-experts model; {m.name} has no routed experts")
    batch, context = positive("batch", batch), positive_int("context", context)
    f = unit_interval("offloaded_fraction", offloaded_fraction)
    routing = choice("routing", routing, ROUTINGS)
    link = _link(link)
    broadcast(batch=batch, context=context, offloaded_fraction=f)
    step = dep.step(batch, context, routing=routing)
    tokens = step.micro_batch * step.tokens_per_seq
    ways = lay.ep if lay.ep > 1 else plan.g
    touched = _touched(plan.n_experts, plan.top_k, tokens * (lay.dp if lay.ep > 1 else 1), routing)
    layers = (m.n_layers - (m.n_dense_layers or 0)) * plan.stage
    expert_bytes_layer = plan.expert_bytes / max(m.n_layers - (m.n_dense_layers or 0), 1)
    moved = f * touched * plan.expert_bytes / ways
    link_s = np.where(moved > 0, moved / link.bandwidth + link.latency_s, 0.0)
    memory = (step.weight_bytes_read - moved + step.kv_bytes_read) / step.bandwidth
    chip_s = step.overhead_s + np.maximum(np.maximum(memory, step.compute_s), step.comm_s)
    step_s = np.maximum(chip_s, link_s)
    cap = dep.capacity(context, budget=budget)
    freed = f * m.n_experts * expert_bytes_layer * layers / ways   # resident expert bytes the chip no longer holds
    per_seq = step.kv_bytes_resident / np.maximum(np.ceil(batch / lay.dp), 1.0)
    more = np.floor(freed / per_seq) * lay.dp
    best = dep.step(np.maximum(cap.max_batch, 1.0), context, routing=routing)
    chip_only = np.where(cap.max_batch >= 1, cap.max_batch / best.strict_s, 0.0)
    rate = batch / step_s
    return Offload(kind="experts", batch=batch, context=plain(context), link=link.name, link_bandwidth=link.bandwidth,
                   offloaded_bytes_per_step=plain(moved), link_s=plain(link_s), chip_step_s=plain(chip_s),
                   step_s=plain(step_s), max_batch_chip=plain(cap.max_batch), max_batch=plain(cap.max_batch + more),
                   tokens_per_s=plain(rate), tokens_per_s_chip_only=plain(chip_only), pays=_flag(rate > chip_only),
                   break_even_link_bandwidth=plain(np.full(np.shape(rate), np.nan)))


@dataclass(frozen=True, eq=False)
class Reload(Result):
    """A cached prefix brought back over a link against computing it again (seconds; arrays over the prefixes).

    Attributes
    ----------
    prefix_tokens : the prefix's tokens; ``link`` the link's name.
    kv_bytes : its cache (one sequence, the whole deployment).
    reload_s : ``kv_bytes / (W_link n_replica) + alpha``: the ``n_replica = n_chips / dp`` chips of the replica
        that holds the sequence each reload their share over their own link.
    recompute_s : the prefill bound of those tokens alone.
    pays : ``reload_s < recompute_s``.
    """

    prefix_tokens: ArrayLike
    link: str
    kv_bytes: ArrayLike
    reload_s: ArrayLike
    recompute_s: ArrayLike
    pays: ArrayLike


def reload_or_recompute(dep: Deployment, prefix_tokens: ArrayLike, *, link: Link | str = "pcie5-x16") -> Reload:
    """Reload a prefix's cache over ``link`` or prefill it again: both bounds, and which is shorter.

    Examples
    --------
    Llama 3 8B on one H100: a 4,096-token prefix (537 MB of cache) reloads over PCIe 5 x16 in 8.5 ms and
    recomputes in at least 62 ms; from an NVMe drive on PCIe 4.0 x4, 68 ms:

    >>> from kvmath import Deployment
    >>> h100 = Deployment("llama-3-8b", "h100-sxm")
    >>> r = reload_or_recompute(h100, 4096)
    >>> round(float(r.reload_s) * 1e3, 1), round(float(r.recompute_s) * 1e3, 1), bool(r.pays)
    (8.5, 62.2, True)
    >>> bool(reload_or_recompute(h100, 4096, link="nvme-pcie4-x4").pays)
    False
    """
    from .requests import prefill_bound

    instance("dep", dep, Deployment, "a kvmath.Deployment")
    p = positive_int("prefix_tokens", prefix_tokens)
    link = _link(link)
    kv = dep._plan.kv_per_seq(np.asarray(p, dtype=float))
    # one sequence's cache lives on one data-parallel replica: its chips reload it, each its share over its own link
    reload_s = kv / (link.bandwidth * (dep.n_chips // dep.layout.dp)) + link.latency_s
    recompute = prefill_bound(dep, 1, p)
    return Reload(prefix_tokens=plain(p), link=link.name, kv_bytes=plain(kv), reload_s=plain(reload_s),
                  recompute_s=plain(recompute), pays=_flag(reload_s < recompute))
