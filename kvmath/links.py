"""Links between chips and the collectives that run over them.

A link preset (``kvmath/data/links.csv``) gives, per chip, the bandwidth ``W_link``
it can send in **one direction** (bytes/s, all its ports together; the
source's own figure and whether it counts one direction or both are kept
beside it) and a minimum latency ``alpha`` per communication step (per hop).
No vendor publishes a per-hop latency, so every preset's ``alpha`` is a
labelled assumption (500 ns), kept well below every measured figure.

Lower bounds (physics: bytes over the link's peak, ``alpha`` per step):

- ring all-reduce of ``S`` bytes on ``N`` chips: each chip sends
  ``2 (N - 1) / N * S`` bytes in ``2 (N - 1)`` steps:
  ``2 (N - 1) / N * S / W_link + 2 (N - 1) alpha``;
- one-shot all-reduce (every chip sends its whole vector to every peer and
  reduces locally, as custom all-reduce kernels do for small messages):
  ``(N - 1) S / W_link + alpha``;
- in-switch reduction (NVLink SHARP, NVLS): each chip sends ``S`` up and
  receives the reduced ``S`` back: ``S / W_link + 2 alpha``;
- :func:`allreduce_time` with ``algorithm="best"`` (the default) takes the
  fastest the link allows: that is the bound.
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

from .presets import lookup, optional_float, read_rows
from .validation import ArrayLike, checked, choice, instance, non_negative, plain, positive, positive_int

ALLREDUCE_ALGORITHMS = ("best", "ring", "one_shot", "in_switch")


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

    def replace(self, **changes) -> "Link":
        """A copy with some fields changed, e.g. ``latency_s=2e-6``."""
        return dataclasses.replace(self, **changes)


@lru_cache(maxsize=None)
def _links() -> dict[str, Link]:
    links = {}
    for row in read_rows("links.csv"):
        links[row["name"]] = Link(
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
    return links


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


def _link(link) -> Link:
    return instance("link", link, Link, "a Link (get_link(name))")


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
def allreduce_time(message_bytes: ArrayLike, n_chips: ArrayLike, link: Link, algorithm: str = "best") -> ArrayLike:
    """Lower bound on an all-reduce of ``message_bytes`` on each of ``n_chips`` chips, seconds.

    ``algorithm``: ``"ring"``, ``"one_shot"``, ``"in_switch"`` (needs a link
    with in-switch reduction) or ``"best"``, the fastest the link allows (the
    bound). See the module text for each formula. 0 at ``n_chips = 1``.

    Examples
    --------
    A 16 KB activation (Llama 2 70B at batch 1: 8192 bf16 values) on 8 H100s:

    >>> nv = get_link("nvlink4")
    >>> round(allreduce_time(16384, 8, nv, "ring") * 1e6, 3)  # 14 steps of 0.5 us
    7.064
    >>> round(allreduce_time(16384, 8, nv) * 1e6, 3)           # one-shot is the fastest here
    0.755
    >>> allreduce_time(16384, 1, nv)
    0.0
    """
    algorithm = choice("algorithm", algorithm, ALLREDUCE_ALGORITHMS)
    size = non_negative("message_bytes", message_bytes)
    n = positive_int("n_chips", n_chips)
    w, alpha = _link(link).bandwidth, link.latency_s
    times = {
        "ring": 2 * (n - 1) / n * size / w + 2 * (n - 1) * alpha,
        "one_shot": (n - 1) * size / w + alpha,
    }
    if link.in_switch_reduction:
        times["in_switch"] = size / w + 2 * alpha
    if algorithm == "in_switch" and "in_switch" not in times:
        raise ValueError(f"link {link.name!r} has no in-switch reduction")
    t = np.minimum(times["ring"], times["one_shot"]) if algorithm == "best" else times[algorithm]
    if algorithm == "best" and "in_switch" in times:
        t = np.minimum(t, times["in_switch"])
    return plain(np.where(n > 1, t, 0.0))


@checked
def allreduce_estimate(message_bytes: ArrayLike, n_chips: ArrayLike, link: Link) -> ArrayLike:
    """An **estimate** of an all-reduce: the link's measured small-message time plus the bytes at peak.

    ``measured_allreduce_latency_s + best-algorithm bytes / W_link``; 0 on
    one chip. The measured figure (cited in the preset) includes software:
    launch, synchronisation, protocol. Raises where the preset has none.

    Examples
    --------
    >>> round(allreduce_estimate(16384, 8, get_link("nvlink4")) * 1e6, 2)  # the 30 us nccl-tests floor
    30.04
    """
    n = positive_int("n_chips", n_chips)
    non_negative("message_bytes", message_bytes)  # named before the link's missing figure
    if _link(link).measured_allreduce_latency_s is None:
        raise ValueError(f"link {link.name!r} has no measured all-reduce latency to estimate from")
    bytes_s = allreduce_time(message_bytes, n_chips, link.replace(latency_s=0.0))
    return plain(np.where(n > 1, link.measured_allreduce_latency_s + bytes_s, 0.0))


@checked
def all_to_all_time(bytes_per_chip: ArrayLike, n_chips: ArrayLike, link: Link) -> ArrayLike:
    """Lower bound on an all-to-all (expert dispatch or combine), seconds.

    Each chip keeps ``1/N`` of its ``bytes_per_chip`` and sends the rest, in
    one step: ``(N - 1) / N * S / W_link + alpha``; 0 on one chip.

    Examples
    --------
    >>> round(all_to_all_time(8 * 7168 * 8, 8, get_link("nvlink4")) * 1e6, 3)  # 8 tokens x top-8, fp8
    1.392
    """
    n = positive_int("n_chips", n_chips)
    t = (n - 1) / n * non_negative("bytes_per_chip", bytes_per_chip) / _link(link).bandwidth + link.latency_s
    return plain(np.where(n > 1, t, 0.0))


@checked
def p2p_time(message_bytes: ArrayLike, link: Link) -> ArrayLike:
    """Lower bound on sending ``message_bytes`` to the next pipeline stage: ``S / W_link + alpha``.

    Examples
    --------
    >>> round(p2p_time(16384, get_link("pcie4-x16")) * 1e6, 3)
    1.02
    """
    return plain(non_negative("message_bytes", message_bytes) / _link(link).bandwidth + link.latency_s)
