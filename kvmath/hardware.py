"""Accelerator presets: HBM capacity, HBM bandwidth and dense FLOP/s per dtype.

The numbers live in ``kvmath/data/hardware.csv``, one row per chip with its
source. All figures are per chip and dense (no 2:4 sparsity).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from .formats import get_format
from .presets import PresetTable, lookup, optional_float, optional_int
from .validation import as_scalar, choice, positive, positive_int

#: Compute dtypes a chip may list, and the CSV column that holds each rate.
#: fp16 runs at the bf16 rate on every chip here.
_RATE_COLUMN = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8", "fp4": "fp4"}
#: Keys a chip's ``flops_by_dtype`` may have.
_CHIP_DTYPES = ("bf16", "fp8", "int8", "fp4")


class FrozenRates(dict):
    """A read-only dict (FLOP/s per dtype): equal to a plain dict, picklable, but not changeable."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a Chip's flops_by_dtype is read-only; use chip.replace(flops_by_dtype={...})")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (FrozenRates, (dict(self),))

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True)
class Chip:
    """One accelerator: its memory, bandwidth and peak FLOP rates, from its datasheet (a description, not a bound;
    a :class:`kvmath.Deployment` turns it into lower bounds).

    Attributes
    ----------
    name : str
        Preset name, e.g. ``"h100-sxm"``.
    hbm_bytes : float
        Memory capacity in bytes as marketed ("80 GB"): the figure every
        chapter uses unless it names another budget (:mod:`kvmath.memory`).
    bandwidth : float
        Memory bandwidth in bytes/s.
    flops_by_dtype : mapping
        Dense FLOP/s for each compute dtype the chip has (``bf16``, ``fp8``, ``int8``, ``fp4``),
        stored as a read-only copy.
    display_name, source, note : str
        Where the numbers come from.
    device_bytes : float or None
        Total memory as the device reports it, in bytes, and ``device_report``
        says which report (``nvidia-smi memory.total`` for NVIDIA, the rocminfo
        pool size for AMD); ``device_source`` cites it. None where unknown.
    runtime_bytes : float or None
        Total memory the CUDA runtime gives a process
        (``torch.cuda.mem_get_info()[1]``, what vLLM sizes its cache from),
        in bytes, with ``runtime_source``. Smaller than ``device_bytes``: the
        driver keeps part. Sources print it to 0.01 GiB. None where unknown.
    node_chips : int or None
        Chips one node of the vendor's standard system joins on the chip's
        own link (8 on an HGX H100 board, 72 in a GB200 NVL72 rack), with
        ``node_source``; a :class:`kvmath.Deployment` over more chips puts
        the rest in further nodes. None where no such system is sourced
        (PCIe cards, TPU slices, single-device machines): then one node
        holds any layout.
    network_name : str
        Preset name of the link between nodes of that system, one network
        port per chip (``"ib-ndr400"``: one ConnectX-7 per H100 or H800),
        with ``network_source``; empty where none is sourced. A bound never
        assumes it (a :class:`kvmath.Deployment` names its own
        ``node_link``); an estimate of a layout wider than a node that
        names none prices the traffic between nodes on it
        (:mod:`kvmath.estimate`), as the system is built.

    Examples
    --------
    >>> chip = get_chip("A100-80GB")
    >>> chip.ridge_point()
    153.016...
    """

    name: str
    hbm_bytes: float
    bandwidth: float
    flops_by_dtype: dict = field(hash=False)
    display_name: str = ""
    source: str = ""
    note: str = ""
    device_bytes: float | None = None
    device_report: str = ""
    device_source: str = ""
    runtime_bytes: float | None = None
    runtime_source: str = ""
    link_name: str = ""
    node_chips: int | None = None
    node_source: str = ""
    network_name: str = ""
    network_source: str = ""

    def __post_init__(self) -> None:
        # Checked and converted here, so Chip.replace() validates like a preset.
        for attr in ("name", "display_name", "source", "note", "device_report", "device_source", "runtime_source",
                     "link_name", "node_source", "network_name", "network_source"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"{attr} must be a string, got {getattr(self, attr)!r}")
        if not self.name.strip():
            raise ValueError("name must not be empty")
        object.__setattr__(self, "hbm_bytes", positive("hbm_bytes", as_scalar("hbm_bytes", self.hbm_bytes)))
        for attr in ("device_bytes", "runtime_bytes"):
            if getattr(self, attr) is not None:
                object.__setattr__(self, attr, positive(attr, as_scalar(attr, getattr(self, attr))))
        if self.device_bytes is not None and self.runtime_bytes is not None and self.runtime_bytes > self.device_bytes:
            raise ValueError(
                f"runtime_bytes ({self.runtime_bytes:.0f}) of {self.name!r} cannot exceed device_bytes ({self.device_bytes:.0f})"
            )
        object.__setattr__(self, "bandwidth", positive("bandwidth", as_scalar("bandwidth", self.bandwidth)))
        if self.node_chips is not None:
            object.__setattr__(self, "node_chips", int(positive_int("node_chips", self.node_chips)))
        if not isinstance(self.flops_by_dtype, Mapping):
            raise ValueError(f"flops_by_dtype must be a mapping of dtype to FLOP/s, got {self.flops_by_dtype!r}")
        rates = {}
        for dtype, rate in self.flops_by_dtype.items():
            key = choice("flops_by_dtype key", dtype, _CHIP_DTYPES)
            if key in rates:
                raise ValueError(f"flops_by_dtype of {self.name!r} lists {key} twice")
            label = f"flops_by_dtype[{key!r}] of {self.name}"
            rates[key] = positive(label, as_scalar(label, rate))
        if "bf16" not in rates:
            raise ValueError(f"chip {self.name!r} needs a bf16 FLOP/s rate")
        # A read-only copy: a preset's table cannot be changed through one Chip.
        object.__setattr__(self, "flops_by_dtype", FrozenRates(rates))

    @property
    def link(self):
        """The chip's own interconnect between chips of one node (a :class:`kvmath.Link`), or None if unknown.

        From the chip's datasheet (the ``link`` column of ``hardware.csv``):
        NVLink 4 for an H100 SXM, PCIe 4.0 x16 for an RTX 4090. A
        :class:`kvmath.Deployment` over several chips uses it unless told
        otherwise; None (single-device systems, TPU v4/v6e) counts no
        communication.
        """
        if not self.link_name:
            return None
        from .links import get_link  # links depends on nothing here; imported late to keep hardware light

        return get_link(self.link_name)

    @property
    def network(self):
        """The link between nodes of the chip's standard system (a :class:`kvmath.Link`), or None if unsourced.

        Examples
        --------
        >>> get_chip("h800").network.name, get_chip("rtx-4090").network
        ('ib-ndr400', None)
        """
        if not self.network_name:
            return None
        from .links import get_link

        return get_link(self.network_name)

    @property
    def vendor(self) -> str:
        """The maker, lower case: the first word of ``display_name`` (``"nvidia"``, ``"amd"``, ``"google"``, ``"apple"``).

        Examples
        --------
        >>> get_chip("mi300x").vendor
        'amd'
        """
        return (self.display_name or self.name).split()[0].lower()

    def flops(self, dtype: str = "bf16") -> float:
        """Dense FLOP/s when the math runs in ``dtype`` (bf16, fp16, fp8, int8 or fp4)."""
        key = dtype.lower() if isinstance(dtype, str) else dtype
        if not isinstance(key, str) or key not in _RATE_COLUMN:  # a list or array is unhashable: refuse it by name
            raise ValueError(
                f"compute_dtype must be one of {sorted(_RATE_COLUMN)}, got {dtype!r}"
            )
        rate = self.flops_by_dtype.get(_RATE_COLUMN[key])
        if rate is None:
            have = ", ".join(sorted(self.flops_by_dtype))
            raise ValueError(f"chip {self.name!r} has no {key} rate (it has: {have})")
        return rate

    def flops_for_format(self, weights: str) -> float:
        """Dense FLOP/s the matmuls of weights stored in ``weights`` can reach on this chip.

        The format's native compute rate (:class:`kvmath.formats.Format`'s
        ``compute``) where the chip has it; otherwise the weights are
        converted and multiply at the bf16 rate (fp8 on an A100, for one).

        Examples
        --------
        >>> get_chip("h100-sxm").flops_for_format("fp8") / 1e12
        1978.9
        >>> get_chip("a100-80gb").flops_for_format("nvfp4") / 1e12
        312.0
        """
        native = get_format(weights, argument="weights").compute
        return self.flops(native if native in self.flops_by_dtype else "bf16")

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOPs per byte at which compute time equals memory time: C / W."""
        return self.flops(dtype) / self.bandwidth

    @staticmethod
    def preset(name: str) -> "Chip":
        """The chip preset called ``name`` (case-insensitive; an unknown name suggests the closest).

        Examples
        --------
        >>> Chip.preset("h100-sxm").name
        'h100-sxm'
        """
        return get_chip(name)

    @staticmethod
    def presets() -> list[str]:
        """Names of every chip preset, in table order (each row cites its source in ``kvmath/data``)."""
        return chip_names()

    def replace(self, **changes) -> "Chip":
        """A copy with some fields changed, e.g. kipply's A100 with ``bandwidth=1.5e12``."""
        return dataclasses.replace(self, **changes)


def _chip_from_row(row: dict[str, str]) -> Chip:
    rates = {dtype: optional_float(row[f"{dtype}_flops_per_s"]) for dtype in ("bf16", "fp8", "int8", "fp4")}
    return Chip(
        name=row["name"],
        hbm_bytes=float(row["hbm_bytes"]),
        bandwidth=float(row["bandwidth_bytes_per_s"]),
        flops_by_dtype={k: v for k, v in rates.items() if v is not None},
        display_name=row["display_name"],
        source=row["source"],
        note=row["note"],
        device_bytes=optional_float(row["device_bytes"]),
        device_report=row["device_report"],
        device_source=row["device_source"],
        runtime_bytes=optional_float(row["runtime_bytes"]),
        runtime_source=row["runtime_source"],
        link_name=row["link"],
        node_chips=optional_int(row["node_chips"]),
        node_source=row["node_source"],
        network_name=row["network"],
        network_source=row["network_source"],
    )


@lru_cache(maxsize=None)
def _chips() -> PresetTable:
    return PresetTable("hardware.csv", _chip_from_row)


def chip_names() -> list[str]:
    """Names of every chip preset, in table order."""
    return list(_chips())


def get_chip(name: str) -> Chip:
    """The chip preset called ``name`` (case-insensitive).

    Examples
    --------
    >>> get_chip("h100-sxm").bandwidth
    3350000000000.0
    >>> get_chip("h100")
    Traceback (most recent call last):
    ...
    ValueError: unknown hardware 'h100'; did you mean 'h100-sxm'...
    """
    return lookup(name, _chips(), "hardware")
