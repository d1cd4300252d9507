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
- ``"tree"`` (NCCL's double binary tree; Sanders, Speck & Traeff, "Two-tree
  algorithms for full bandwidth broadcast, reduction and scan", Parallel
  Computing 35 (2009), doi:10.1016/j.parco.2009.09.001): each half of the
  vector goes up one tree and down the other, so a chip moves a ring's
  bytes in ``2 log2 N`` dependent steps:
  ``2 (N - 1) / N * S / W_link + 2 log2(N) alpha``;
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
every size, and below every other one a real system runs too: CollNet, MSCCL++'s
kernels, and any pipelined or hierarchical variant all pay at least one
step and the fewest bytes.

Other collectives:

- all-to-all (expert parallelism): each chip sends ``(N - 1) / N`` of its
  bytes, one step: ``(N - 1) / N * S / W_link + alpha``;
- point-to-point (pipeline stages): ``S / W_link + alpha``.

Across nodes (a group wider than a node, each chip with a network port
beside its node's fabric) a :class:`kvmath.Deployment` takes the
hierarchical floor of :func:`_spanning_allreduce_s` for an all-reduce and
the two-tier floor of :func:`_two_tier_all_to_all_s` for an all-to-all.

Every collective costs 0 on one chip. The **estimates** are separate and
never bounds: :func:`collective_estimate` prices a collective from measured
latency-bandwidth curves per link, algorithm and GPU count
(``kvmath/data/collectives.csv``: nccl-tests runs and the engines' custom
all-reduce benchmarks, each row sourced, stand-ins flagged), and
:func:`allreduce_estimate` is the older one-number form (a preset's measured
small-message time plus the floor's bytes).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .presets import PresetTable, lookup, optional_float
from .results import Result
from .validation import ArrayLike, as_scalar, checked, choice, flag, non_negative, plain, positive, positive_int

ALLREDUCE_ALGORITHMS = ("best", "ring", "tree", "one_shot", "two_shot", "in_switch")
#: Where a link runs: a node's own fabric, or the network between nodes.
LINK_SCOPES = ("inside a node", "between nodes")


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
    scope : str
        ``"inside a node"`` (a node's own fabric: NVLink, Infinity Fabric,
        PCIe, ICI) or ``"between nodes"`` (a network card per chip:
        InfiniBand, RoCE). The command line's lone ``--link`` takes the
        second kind as the network between nodes.
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
    scope: str = "inside a node"
    in_switch_reduction: bool = False
    measured_allreduce_latency_s: float | None = None
    display_name: str = ""
    latency_source: str = ""
    measured_source: str = ""
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        # Checked and stored converted (one float, lower-case labels, real bools), so Link.replace()
        # gives what a preset gives: the collectives compare and divide these fields as they are.
        for attr in ("name", "display_name", "latency_source", "measured_source", "source", "note"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"{attr} must be a string, got {getattr(self, attr)!r}")
        if not self.name.strip():
            raise ValueError("name must not be empty")
        store = functools.partial(object.__setattr__, self)
        store("bandwidth", positive("bandwidth", as_scalar("bandwidth", self.bandwidth)))
        store("latency_s", non_negative("latency_s", as_scalar("latency_s", self.latency_s)))
        store("stated_bandwidth", non_negative("stated_bandwidth", as_scalar("stated_bandwidth", self.stated_bandwidth)))
        if self.measured_allreduce_latency_s is not None:
            store("measured_allreduce_latency_s", positive(
                "measured_allreduce_latency_s", as_scalar("measured_allreduce_latency_s", self.measured_allreduce_latency_s)))
        store("stated_as", choice("stated_as", self.stated_as, ("per direction", "bidirectional")))
        store("scope", choice("scope", self.scope, LINK_SCOPES))
        store("in_switch_reduction", flag("in_switch_reduction", self.in_switch_reduction))
        store("latency_is_assumption", flag("latency_is_assumption", self.latency_is_assumption))

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
        scope=row["scope"],
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

    ``algorithm``: ``"ring"``, ``"tree"``, ``"one_shot"``, ``"two_shot"``, ``"in_switch"``
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
        "tree": fewest / w + 2 * np.log2(n) * alpha,
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


def _spanning_allreduce_s(size, group, per_node, port: Link, node: Link):
    """Lower bound on an all-reduce of ``size`` bytes over ``group`` chips in ``group / per_node`` nodes, seconds.

    A group that spans ``a = group / per_node >= 2`` nodes (``per_node`` of
    its chips in each, on the node's fabric ``node``; one network ``port``
    per chip) can reduce inside each node for free and must then all-reduce
    across nodes: treating each node as one participant with its
    ``per_node`` ports, Patarasuk & Yuan's bound puts at least
    ``2 (a - 1) / a * S`` bytes through the node's ports (``S`` with
    in-network reduction on the port's switch), one dependent step on the
    port; and every chip still receives at least the all-reduce's fewest
    bytes over both its paths::

        max(2 (a - 1) / a * S / (per_node W_port) + alpha_port,
            R / (W_port + W_node) + min(alpha))

    with ``R`` the fewest bytes of :func:`_allreduce_s` (``S`` where either
    switch reduces). A hierarchical all-reduce (NCCL's tree across nodes with
    NVLink inside) moves about that much; charging the whole group's ring on
    the port, ``2 (g - 1) / g * S``, would not be a bound. ``per_node = 1``
    is the flat all-reduce over the port.
    """
    a = group / per_node
    cross = size if port.in_switch_reduction else 2 * (a - 1) / a * size
    away = cross / (per_node * port.bandwidth) + port.latency_s
    fewest = 2 * (group - 1) / group * size
    if port.in_switch_reduction or node.in_switch_reduction:
        fewest = np.minimum(fewest, size)
    both = fewest / (port.bandwidth + node.bandwidth) + min(port.latency_s, node.latency_s)
    return np.maximum(away, both) if isinstance(size, np.ndarray) else max(away, both)


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


# ----- estimates: measured latency-bandwidth curves ------------------------------------------------

#: Collectives :func:`collective_estimate` knows.
COLLECTIVE_KINDS = ("all_reduce", "all_to_all", "p2p")
#: All-reduce curves: NCCL's algorithms, the engines' custom kernels, and two choices among them: ``"nccl"`` (the
#: fastest NCCL curve, as NCCL's tuner picks) and ``"auto"`` (the fastest of all, as vLLM, SGLang and TensorRT-LLM
#: pick: their custom kernel for small messages inside a node, NCCL above).
ESTIMATE_ALGORITHMS = ("auto", "nccl", "ring", "tree", "in_switch", "custom")
_NCCL_ALGORITHMS = ("ring", "tree", "in_switch")
#: The one all-to-all curve: DeepEP's low-latency dispatch and combine, measured on H800 nodes (chapter 9).
_ALL_TO_ALL = "deepep"


@dataclass(frozen=True)
class Curve:
    """One measured collective curve (a row of ``kvmath/data/collectives.csv``): ``t = latency_s + R / bandwidth``.

    For an all-reduce (``kind``) ``R`` is the bytes the algorithm moves per
    chip (``2 (n - 1) / n * S`` for ring, tree and the custom kernels,
    counted as two-shot's; ``S`` in the switch), so ``bandwidth`` is
    nccl-tests' bus bandwidth for a ring or tree and its algorithm bandwidth
    for in-switch reduction. For an all-to-all (``"deepep"``: DeepEP's
    low-latency dispatch and combine) ``R`` is the chip's share ``S = T k d
    b``, every copy counted, the same-node ones too. Measured on
    ``n_gpus`` chips; ``latency_measured`` / ``bandwidth_measured`` are False
    where the source gives no such figure and the row carries a labelled
    stand-in (its ``note`` says which).
    """

    link: str
    kind: str
    algorithm: str
    n_gpus: int
    latency_s: float
    latency_measured: bool
    bandwidth: float
    bandwidth_measured: bool
    library: str
    source: str
    note: str


@lru_cache(maxsize=1)
def _curves() -> dict[tuple[str, str], tuple[Curve, ...]]:
    from .presets import read_rows

    out: dict[tuple[str, str], list[Curve]] = {}
    for r in read_rows("collectives.csv"):
        c = Curve(link=r["link"], kind=r["kind"], algorithm=r["algorithm"], n_gpus=int(r["n_gpus"]), latency_s=float(r["latency_s"]),
                  latency_measured=r["latency_measured"] == "true", bandwidth=float(r["bandwidth_bytes_per_s"]),
                  bandwidth_measured=r["bandwidth_measured"] == "true", library=r["library"], source=r["source"],
                  note=r["note"])
        out.setdefault((c.link, c.algorithm), []).append(c)
    return {k: tuple(sorted(v, key=lambda c: c.n_gpus)) for k, v in out.items()}


def curves(link: Link | str) -> list[Curve]:
    """The measured collective curves of ``link`` (a :class:`Link` or preset name), every algorithm and GPU count.

    Examples
    --------
    >>> [(c.algorithm, c.n_gpus) for c in curves("nvlink3")]
    [('ring', 2), ('ring', 8), ('custom', 2), ('custom', 4), ('custom', 8)]
    """
    name = as_link(link).name
    return [c for (lk, _), rows in _curves().items() if lk == name for c in rows]


def _steps(algorithm: str, n: float) -> float:
    """Dependent steps of an all-reduce on ``n`` chips: a ring's ``2 (n - 1)``, a tree's ``2 log2 n``, else one;
    for DeepEP's all-to-all, whose peers are written at once, ``log2 n`` (its latency changes little as the group
    doubles: a rule to interpolate by between its measured sizes, flagged as not a measurement)."""
    if algorithm == "ring":
        return 2.0 * (n - 1)
    if algorithm == "tree":
        return 2.0 * math.log2(n)
    if algorithm == _ALL_TO_ALL:
        return math.log2(n)
    return 1.0


def _curve_at(rows: tuple[Curve, ...], n: int) -> tuple[float, float, bool, bool, tuple[int, ...]]:
    """``(latency_s, bandwidth, latency_measured, bandwidth_measured, from_gpus)`` of an algorithm's rows at ``n`` chips.

    A row measured at ``n`` is used as it is. Between two rows the latency is
    interpolated linearly in the algorithm's dependent steps (a fixed launch
    cost plus a time per step: nccl-tests#123's DGX A100 ring gives 10 us on
    2 GPUs, 33.7 us on 8 and 16.9 us measured on 4, against 17.9 us
    interpolated); outside them the nearest row's latency is scaled by the
    ratio of steps. Either way the latency is then not a measurement at
    ``n`` and says so; the bandwidth is the nearest row's.
    """
    algorithm = rows[0].algorithm
    for r in rows:
        if r.n_gpus == n:
            return r.latency_s, r.bandwidth, r.latency_measured, r.bandwidth_measured, (n,)
    below = [r for r in rows if r.n_gpus < n]
    above = [r for r in rows if r.n_gpus > n]
    near = min(rows, key=lambda r: (abs(math.log(r.n_gpus / n)), -r.n_gpus))
    if below and above:
        lo, hi = below[-1], above[0]
        x0, x1, x = _steps(algorithm, lo.n_gpus), _steps(algorithm, hi.n_gpus), _steps(algorithm, n)
        latency = lo.latency_s + (hi.latency_s - lo.latency_s) * (x - x0) / (x1 - x0)
        return latency, near.bandwidth, False, near.bandwidth_measured, (lo.n_gpus, hi.n_gpus)
    latency = near.latency_s * _steps(algorithm, n) / _steps(algorithm, near.n_gpus)
    return latency, near.bandwidth, False, near.bandwidth_measured, (near.n_gpus,)


def _moved(algorithm: str, size, n):
    """Bytes per chip a curve's bandwidth divides: ``S`` in the switch, else ``2 (n - 1) / n * S``."""
    return size if algorithm == "in_switch" else 2 * (n - 1) / n * size


@dataclass(frozen=True, eq=False)
class CollectiveEstimate(Result):
    """An **estimate** of one collective (:func:`collective_estimate`), beside its lower bound.

    Attributes
    ----------
    kind, algorithm : the collective and the curve used (``"floor"``: no
        curve, the bound's formula with its assumed latency; with
        ``"auto"`` or ``"nccl"`` the fastest curve, per message).
    message_bytes, n_chips, link : what was asked.
    estimate_s : the estimate, seconds (0 on one chip).
    bound_s : the lower bound on the same collective (:func:`allreduce_time`'s ``"best"``,
        :func:`all_to_all_time`, :func:`p2p_time`).
    latency_s, bandwidth : the curve's terms at ``n_chips``.
    latency_measured, bandwidth_measured : False where the figure is not a
        measurement at ``n_chips`` on this link (interpolated, scaled, or a
        labelled stand-in): the estimate is then flagged.
    from_gpus : the GPU counts of the curves' measurements.
    source : where the curve comes from.
    """

    kind: str
    algorithm: object
    message_bytes: ArrayLike
    n_chips: int
    link: str
    estimate_s: ArrayLike
    bound_s: ArrayLike
    latency_s: ArrayLike
    bandwidth: ArrayLike
    latency_measured: object
    bandwidth_measured: object
    from_gpus: tuple
    source: str

    @property
    def is_estimate(self) -> bool:
        """Always True: measured curves include software; never a bound."""
        return True

    @property
    def flagged(self) -> bool:
        """True where a latency or bandwidth is not a measurement at this GPU count and link."""
        return not (bool(np.all(self.latency_measured)) and bool(np.all(self.bandwidth_measured)))

    _derived = ("is_estimate", "flagged")


def _candidates(link: Link, algorithm: str) -> list[str]:
    table = _curves()
    if algorithm == "auto":
        names = (*_NCCL_ALGORITHMS, "custom")
    elif algorithm == "nccl":
        names = _NCCL_ALGORITHMS
    else:
        names = (algorithm,)
    return [a for a in names if (link.name, a) in table]


def _estimate_terms(kind: str, size, n: int, link: Link, algorithm: str):
    """``(estimate_s, algorithm, latency_s, bandwidth, latency_measured, bandwidth_measured, from_gpus, source)``
    on checked inputs; the fastest curve per message where several apply."""
    if n <= 1:
        zero = 0.0 * size
        return zero, algorithm, zero, link.bandwidth, True, True, (), ""
    if kind == "all_reduce":
        names = _candidates(link, algorithm)
        if names:
            best = None
            for a in names:
                latency, bw, lat_ok, bw_ok, gpus = _curve_at(_curves()[(link.name, a)], n)
                t = latency + _moved(a, size, n) / bw
                src = " | ".join(c.source for c in _curves()[(link.name, a)] if c.n_gpus in gpus)
                if best is None:
                    best = [t, a, latency, bw, lat_ok, bw_ok, gpus, src]
                    continue
                if np.ndim(t) == 0:
                    if t < best[0]:
                        best = [t, a, latency, bw, lat_ok, bw_ok, gpus, src]
                    continue
                faster = t < best[0]
                best[0] = np.where(faster, t, best[0])
                best[1] = np.where(faster, a, best[1])
                best[2] = np.where(faster, latency, best[2])
                best[3] = np.where(faster, bw, best[3])
                best[4] = np.where(faster, lat_ok, best[4])
                best[5] = np.where(faster, bw_ok, best[5])
                best[6] = tuple(sorted(set(best[6]) | set(gpus)))
                best[7] = best[7] if src in best[7] else f"{best[7]} | {src}"
            return tuple(best)
        if algorithm not in ("auto", "nccl"):
            raise ValueError(f"link {link.name!r} has no measured {algorithm!r} all-reduce curve; "
                             f"it has {sorted(a for (lk, a) in _curves() if lk == link.name and a != _ALL_TO_ALL) or 'none'}")
        floor = _allreduce_s(size, n, link)
    elif kind == "all_to_all":
        rows = _curves().get((link.name, _ALL_TO_ALL))
        if rows:
            latency, bw, lat_ok, bw_ok, gpus = _curve_at(rows, n)
            src = " | ".join(c.source for c in rows if c.n_gpus in gpus)
            return latency + size / bw, _ALL_TO_ALL, latency, bw, lat_ok, bw_ok, gpus, src
        floor = _all_to_all_s(size, n, link)
    else:
        floor = size / link.bandwidth + link.latency_s
    # no measured curve: the bound's own formula, its latency the link's assumption (flagged)
    return floor, "floor", link.latency_s, link.bandwidth, False, False, (), link.latency_source


@checked
def collective_estimate(kind: str, message_bytes: ArrayLike, n_chips: int, link: Link | str,
                        algorithm: str = "auto") -> CollectiveEstimate:
    """An **estimate** of one collective from measured latency-bandwidth curves, beside its lower bound.

    ``t = latency(n) + R / bandwidth``, each curve a row of
    ``kvmath/data/collectives.csv`` with its source (nccl-tests runs, the
    engines' custom all-reduce benchmarks, DeepEP's all-to-all on H800
    nodes): see :class:`Curve` for ``R`` and :func:`_curve_at` for other
    GPU counts than the measured ones. Where a link has no curve
    (point-to-point everywhere, an all-to-all off DeepEP's two links,
    links no source measured), the estimate is the bound's formula with
    the link's assumed latency, and :attr:`CollectiveEstimate.flagged` says
    so, as it does for every latency or bandwidth that is not a measurement
    at ``n_chips``. A network's curve (``ib-ndr400``) was measured on a group
    spanning nodes, each reducing on its own fabric: it prices such a group
    (:meth:`kvmath.Deployment.comm_estimate` uses it so), and ``bound_s``,
    the flat bound over that link alone, is not its bound.

    Parameters
    ----------
    kind : str
        ``"all_reduce"``, ``"all_to_all"`` or ``"p2p"``.
    message_bytes : float or array
        Bytes on each chip (the all-reduce's vector, each chip's all-to-all
        share, the point-to-point message).
    n_chips : int
        Chips in the group.
    link : Link or str
    algorithm : str
        All-reduce curve: ``"ring"``, ``"tree"``, ``"in_switch"``,
        ``"custom"`` (the engines' one-shot/two-shot kernels), ``"nccl"``
        (the fastest NCCL curve) or ``"auto"`` (the fastest of all; default).

    Examples
    --------
    Llama 2 70B at batch 1 on 8 H100s (16 KiB, bf16): SGLang's custom kernel, against NCCL and the bound:

    >>> e = collective_estimate("all_reduce", 16384, 8, "nvlink4")
    >>> e.algorithm, round(e.estimate_s * 1e6, 2), round(e.bound_s * 1e6, 3), e.flagged
    ('custom', 6.01, 0.536, False)
    >>> round(collective_estimate("all_reduce", 16384, 8, "nvlink4", "nccl").estimate_s * 1e6, 2)  # NVLS
    30.06
    >>> collective_estimate("all_reduce", 16384, 8, "amd-if-mi300x").flagged  # no published figure
    True
    """
    kind = choice("kind", kind, COLLECTIVE_KINDS)
    algorithm = choice("algorithm", algorithm, ESTIMATE_ALGORITHMS)
    size = non_negative("message_bytes", message_bytes)
    n = int(positive_int("n_chips", as_scalar("n_chips", n_chips)))
    link = as_link(link)
    if kind != "all_reduce" and algorithm not in ("auto", "nccl"):
        raise ValueError(f"algorithm {algorithm!r} is an all-reduce curve; {kind} takes 'auto'")
    t, a, latency, bw, lat_ok, bw_ok, gpus, source = _estimate_terms(kind, size, n, link, algorithm)
    if kind == "all_reduce":
        bound = _allreduce_s(size, n, link)
    elif kind == "all_to_all":
        bound = _all_to_all_s(size, n, link)
    else:
        bound = 0.0 * size if n <= 1 else size / link.bandwidth + link.latency_s
    return CollectiveEstimate(kind=kind, algorithm=a, message_bytes=size, n_chips=n, link=link.name,
                              estimate_s=plain(t), bound_s=plain(bound), latency_s=plain(latency),
                              bandwidth=plain(bw), latency_measured=lat_ok, bandwidth_measured=bw_ok,
                              from_gpus=gpus, source=source)


def collective_estimate_s(kind: str, message_bytes: ArrayLike, n_chips: int, link: Link | str,
                          algorithm: str = "auto") -> ArrayLike:
    """:func:`collective_estimate`'s ``estimate_s`` alone, seconds (the same checks)."""
    return collective_estimate(kind, message_bytes, n_chips, link, algorithm).estimate_s
