"""Links between chips and the collectives that run over them.

A link preset (``kvmath/data/links.csv``) gives, per chip, the bandwidth ``W_link``
it can send in **one direction** (bytes/s, all its ports together; the
source's own figure and whether it counts one direction or both are kept
beside it) and a minimum latency ``alpha`` per communication step (per hop).
No vendor publishes a per-hop latency, so every preset's ``alpha`` is a
labelled assumption (500 ns), kept well below every measured figure.

All-reduce of ``S`` bytes on each of ``N`` chips. The algorithms real
systems run (physics: bytes over the link's peak, ``alpha`` per dependent step):

- ``"ring"`` (NCCL's ring; Patarasuk & Yuan, "Bandwidth optimal all-reduce
  algorithms for clusters of workstations", J. Parallel Distrib. Comput. 69
  (2009), doi:10.1016/j.jpdc.2008.09.002): each chip sends
  ``2 (N - 1) / N * S`` bytes in ``2 (N - 1)`` steps:
  ``2 (N - 1) / N * S / W_link + 2 (N - 1) alpha``;
- ``"one_shot"`` (every chip reads or receives every peer's whole vector and
  reduces locally: vLLM's ``cross_device_reduce_1stage`` in
  ``csrc/custom_all_reduce.cuh``, TensorRT-LLM's ``AllReduceStrategyType::ONESHOT``):
  ``(N - 1) S / W_link + alpha``;
- ``"two_shot"`` (a direct reduce-scatter, each chip summing its ``1/N``
  slice from every peer, then a direct all-gather: vLLM's
  ``cross_device_reduce_2stage``, TensorRT-LLM's ``TWOSHOT``): ring's bytes
  in two steps, ``2 (N - 1) / N * S / W_link + 2 alpha``;
- ``"in_switch"`` (NVLink SHARP, NCCL's NVLS, where the switch reduces):
  each chip sends ``S`` up and receives the reduced ``S`` back:
  ``S / W_link + 2 alpha``.

``"best"`` (the default, the bound) is the minimum over **every** algorithm
the link allows, not only the ones above: the physical floor
``alpha + R / W_link``, where ``R`` is the fewest bytes a chip must receive.
Any all-reduce needs at least one dependent step (``alpha``: no byte from
a peer arrives sooner), and then the bytes: without in-network reduction
each element needs ``N - 1`` transfers to reduce and ``N - 1`` to spread
the result, ``2 (N - 1) S`` in all, so the busiest chip moves at least
``R = 2 (N - 1) / N * S`` (Patarasuk & Yuan's bound); with in-switch
reduction a chip still needs the ``S`` bytes of its peers' sum, ``R = S``
(the switch must reduce). So ``best`` is ``<=`` each named algorithm at
every size, and below every other one a real system runs too: NCCL's
double binary tree (``2 log2 N`` dependent steps), CollNet, MSCCL++'s
kernels, and any pipelined or hierarchical variant all pay at least one
step and the fewest bytes.

Other collectives:

- all-to-all (expert parallelism): each chip sends ``(N - 1) / N`` of its
  bytes, one step: ``(N - 1) / N * S / W_link + alpha``;
- point-to-point (pipeline stages): ``S / W_link + alpha``.

Every collective costs 0 on one chip. :func:`allreduce_estimate` instead
uses the small-message latency a published nccl-tests run measured: it is
an **estimate** (software included), never a bound.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .presets import PresetTable, lookup, optional_float
from .validation import ArrayLike, checked, choice, non_negative, plain, positive, positive_int

ALLREDUCE_ALGORITHMS = ("best", "ring", "one_shot", "two_shot", "in_switch")


@dataclass(frozen=True)
class Link:
    """One chip's links to its peers.

    Attributes
    ----------
    name, display_name : str
    bandwidth : float
        Bytes/s one chip can send in one direction, all its links together.
    stated_bandwidth : float
        The figure the source states, bytes/s.
    stated_as : str
        ``"per direction"`` or ``"bidirectional"`` (both directions added).
    latency_s : float
        Minimum latency per communication step (per hop), seconds.
    latency_is_assumption : bool
        True where no source states it (then ``latency_source`` says why
        the value is safe for a bound).
    in_switch_reduction : bool
        Whether the switch can reduce (NVLink SHARP).
    measured_allreduce_latency_s : float or None
        A published small-message all-reduce time (for estimates only).
    """

    name: str
    bandwidth: float
    latency_s: float
    stated_bandwidth: float = 0.0
    stated_as: str = "per direction"
    latency_is_assumption: bool = True
    in_switch_reduction: bool = False
    measured_allreduce_latency_s: float | None = None
    display_name: str = ""
    latency_source: str = ""
    measured_source: str = ""
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        positive("bandwidth", self.bandwidth)
        non_negative("latency_s", self.latency_s)
        choice("stated_as", self.stated_as, ("per direction", "bidirectional"))

    @staticmethod
    def preset(name: str) -> "Link":
        """The link preset called ``name`` (case-insensitive; an unknown name suggests the closest).

        Examples
        --------
        >>> Link.preset("nvlink4").name
        'nvlink4'
        """
        return get_link(name)

    @staticmethod
    def presets() -> list[str]:
        """Names of every link preset, in table order (each row cites its source in ``kvmath/data``)."""
        return link_names()

    def replace(self, **changes) -> "Link":
        """A copy with some fields changed, e.g. ``latency_s=2e-6``."""
        return dataclasses.replace(self, **changes)


def _link_from_row(row: dict[str, str]) -> Link:
    return Link(
        name=row["name"],
        display_name=row["display_name"],
        bandwidth=float(row["bandwidth_bytes_per_s_per_direction"]),
        stated_bandwidth=float(row["stated_bandwidth_bytes_per_s"]),
        stated_as=row["stated_as"],
        latency_s=float(row["latency_s_min"]),
        latency_is_assumption=row["latency_is_assumption"] == "true",
        latency_source=row["latency_source"],
        in_switch_reduction=row["in_switch_reduction"] == "true",
        measured_allreduce_latency_s=optional_float(row["measured_allreduce_latency_s"]),
        measured_source=row["measured_source"],
        source=row["source"],
        note=row["note"],
    )


@lru_cache(maxsize=None)
def _links() -> PresetTable:
    return PresetTable("links.csv", _link_from_row)


def link_names() -> list[str]:
    """Names of every link preset, in table order."""
    return list(_links())


def get_link(name: str) -> Link:
    """The link preset called ``name`` (case-insensitive).

    Examples
    --------
    >>> l = get_link("nvlink4")
    >>> l.bandwidth / 1e9, l.stated_as
    (450.0, 'per direction')
    >>> get_link("nvlink5").stated_bandwidth / get_link("nvlink5").bandwidth  # the source adds both directions
    2.0
    """
    return lookup(name, _links(), "link")


@checked
def ring_allreduce_bytes(message_bytes: ArrayLike, n_chips: ArrayLike) -> ArrayLike:
    """Bytes each chip sends (and receives) in a ring all-reduce: ``2 (N - 1) / N * S``.

    Examples
    --------
    >>> ring_allreduce_bytes(16384, 8)  # 1.75 x the message
    28672.0
    >>> ring_allreduce_bytes(16384, 1)
    0.0
    """
    n = positive_int("n_chips", n_chips)
    return plain(2 * (n - 1) / n * non_negative("message_bytes", message_bytes))


@checked
def allreduce_time(message_bytes: ArrayLike, n_chips: ArrayLike, link: Link | str,
                   algorithm: str = "best") -> ArrayLike:
    """Lower bound on an all-reduce of ``message_bytes`` on each of ``n_chips`` chips, seconds.

    ``algorithm``: ``"ring"``, ``"one_shot"``, ``"two_shot"``, ``"in_switch"``
    (needs a link with in-switch reduction) or ``"best"``, the physical floor
    over every algorithm the link allows (the bound; ``<=`` each named one).
    See the module text for each formula and its source. 0 at ``n_chips = 1``.
    ``link`` is a :class:`Link` or a preset name.

    Examples
    --------
    A 16 KB activation (Llama 2 70B at batch 1: 8192 bf16 values) on 8 H100s:

    >>> nv = get_link("nvlink4")
    >>> round(allreduce_time(16384, 8, nv, "ring") * 1e6, 3)  # 14 steps of 0.5 us
    7.064
    >>> round(allreduce_time(16384, 8, nv, "one_shot") * 1e6, 3)
    0.755
    >>> round(allreduce_time(16384, 8, nv) * 1e6, 3)           # one step and the S bytes of the switch's sum
    0.536
    >>> round(allreduce_time(1 << 20, 8, "nvlink3", "two_shot") * 1e6, 3)  # ring's bytes in two steps
    7.117
    >>> allreduce_time(16384, 1, nv)
    0.0
    """
    algorithm = choice("algorithm", algorithm, ALLREDUCE_ALGORITHMS)
    link = as_link(link)
    size = non_negative("message_bytes", message_bytes)
    n = positive_int("n_chips", n_chips)
    if algorithm == "best":
        return plain(_allreduce_s(size, n, link))
    w, alpha = link.bandwidth, link.latency_s
    fewest = 2 * (n - 1) / n * size
    times = {
        "ring": fewest / w + 2 * (n - 1) * alpha,
        "one_shot": (n - 1) * size / w + alpha,
        "two_shot": fewest / w + 2 * alpha,
    }
    if link.in_switch_reduction:
        times["in_switch"] = size / w + 2 * alpha
    if algorithm not in times:
        raise ValueError(f"link {link.name!r} has no in-switch reduction")
    return plain(np.where(n > 1, times[algorithm], 0.0))


def _allreduce_s(size, n, link: Link | None):
    """The best all-reduce's floor on checked inputs: one step, and the fewest bytes any algorithm sends.

    ``min(2 (N - 1) / N S, S if the switch reduces) / W + alpha``; 0 on one
    chip or without a link (communication not counted).
    """
    if link is None:
        return 0.0
    one_group = type(n) in (int, float)  # a layout's group size (the public function passes arrays)
    if one_group and n <= 1:
        return 0.0
    fewest = 2 * (n - 1) / n * size
    if link.in_switch_reduction:
        fewest = (fewest if fewest <= size else size) if one_group and type(size) is float else np.minimum(fewest, size)
    t = fewest / link.bandwidth + link.latency_s
    return t if one_group else np.where(n > 1, t, 0.0)


def as_link(link) -> Link:
    """``link`` as a :class:`Link`: a Link unchanged, a preset name looked up; anything else a ValueError.

    Examples
    --------
    >>> as_link("nvlink4").name
    'nvlink4'
    """
    if isinstance(link, Link):
        return link
    if isinstance(link, str):
        return get_link(link)
    raise ValueError(f"link must be a Link or a link preset name, got {link!r}")


@checked
def allreduce_estimate(message_bytes: ArrayLike, n_chips: ArrayLike, link: Link | str) -> ArrayLike:
    """An **estimate** of an all-reduce: the link's measured small-message time plus the bytes at peak.

    ``measured_allreduce_latency_s + best-algorithm bytes / W_link``; 0 on
    one chip. The measured figure (cited in the preset) includes software:
    launch, synchronisation, protocol. Raises where the preset has none.

    Examples
    --------
    >>> round(allreduce_estimate(16384, 8, get_link("nvlink4")) * 1e6, 2)  # the 30 us nccl-tests floor
    30.04
    """
    link = as_link(link)
    n = positive_int("n_chips", n_chips)
    non_negative("message_bytes", message_bytes)  # named before the link's missing figure
    if link.measured_allreduce_latency_s is None:
        raise ValueError(f"link {link.name!r} has no measured all-reduce latency to estimate from")
    bytes_s = allreduce_time(message_bytes, n_chips, link.replace(latency_s=0.0))
    return plain(np.where(n > 1, link.measured_allreduce_latency_s + bytes_s, 0.0))


@checked
def all_to_all_time(bytes_per_chip: ArrayLike, n_chips: ArrayLike, link: Link | str) -> ArrayLike:
    """Lower bound on an all-to-all (expert dispatch or combine), seconds.

    Each chip keeps ``1/N`` of its ``bytes_per_chip`` and sends the rest, in
    one step: ``(N - 1) / N * S / W_link + alpha``; 0 on one chip.

    Examples
    --------
    >>> round(all_to_all_time(8 * 7168 * 8, 8, get_link("nvlink4")) * 1e6, 3)  # 8 tokens x top-8, fp8
    1.392
    """
    n, link = positive_int("n_chips", n_chips), as_link(link)
    return plain(_all_to_all_s(non_negative("bytes_per_chip", bytes_per_chip), n, link))


def _all_to_all_s(size, n, link: Link | None):
    """:func:`all_to_all_time` on checked inputs; 0 without a link."""
    if link is None:
        return 0.0
    one_group = type(n) in (int, float)
    if one_group and n <= 1:
        return 0.0
    t = (n - 1) / n * size / link.bandwidth + link.latency_s
    return t if one_group else np.where(n > 1, t, 0.0)


def _two_tier_all_to_all_s(size, ep, per_node, port: Link | None, node: Link | None):
    """Lower bound on one all-to-all of ``size`` bytes per chip over ``ep`` chips in nodes of ``per_node``, seconds.

    Expert parallelism's dispatch and combine (one copy per token and routed
    expert, as DeepEP's low-latency kernels send them; spread evenly, ``1/ep``
    of the copies stay on the chip). The chip's network ``port`` and the
    fabric inside its ``node`` are two separate paths: the ``(ep - n) / ep``
    share bound for other nodes must leave through the port, while the
    ``(n - 1) / ep`` share for the chip's own node may take either (a kernel
    can send it through the port and the switch, as DeepEP's first
    low-latency kernels did). So the port carries at least the first share,
    and the two paths together all ``(ep - 1) / ep``::

        max((ep - n) / ep * S / W_port + alpha_port, (ep - 1) / ep * S / (W_port + W_node) + min(alpha))

    with ``n = min(per_node, ep)``. Routing that puts a token's experts on
    fewer chips, or a kernel that sends one copy per chip, moves less: the
    bound is for spread routing and per-expert copies. 0 without a port.
    :meth:`kvmath.Deployment.step` charges two per MoE layer, on one chain.
    """
    if port is None:
        return 0.0
    node = port if node is None else node
    n = np.minimum(per_node, ep)
    away = (ep - n) / ep * size / port.bandwidth + port.latency_s
    both = (ep - 1) / ep * size / (port.bandwidth + node.bandwidth) + min(port.latency_s, node.latency_s)
    return np.maximum(np.where(ep > n, away, 0.0), np.where(n > 1, both, 0.0))


@checked
def p2p_time(message_bytes: ArrayLike, link: Link | str) -> ArrayLike:
    """Lower bound on sending ``message_bytes`` to the next pipeline stage: ``S / W_link + alpha``.

    Examples
    --------
    >>> round(p2p_time(16384, get_link("pcie4-x16")) * 1e6, 3)
    1.02
    """
    link = as_link(link)
    return plain(non_negative("message_bytes", message_bytes) / link.bandwidth + link.latency_s)
