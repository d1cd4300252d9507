"""Number formats as data: true bits per weight, scales included, and the math they run in.

The table lives in ``kvmath/data/formats.csv``, one row per format with its
source. A block format stores a scale (and sometimes a minimum) for every
block of weights, so its bits per weight are more than its element width:
GGUF's Q4_0 keeps 32 four-bit weights and one fp16 scale in 18 bytes, 4.5
bits per weight, not 4.

``compute`` names the chip rate a format's matmuls run at where the chip
has it (``bf16``, ``fp8``, ``int8`` or ``fp4``); weight-only formats such as
``int4-g128`` are dequantized and multiply at the bf16 rate.

The same table holds KV-cache formats whose scales are bytes too
(``kivi2-g32``, ``kivi4-g32``, ``fp8-g128``): a cache quantized in groups
keeps a scale, and for asymmetric formats a minimum, per group, and
:func:`block_bits` gives what that costs per element for any group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .presets import lookup, optional_int, read_rows
from .validation import non_negative, positive, positive_int

#: Compute rates a format may name; each is a column of ``hardware.csv``.
COMPUTE_RATES = ("bf16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Format:
    """One number format.

    Attributes
    ----------
    name : str
        Preset name, e.g. ``"q4_0"``.
    bits_per_weight : float
        Storage per weight in bits, block scales and minimums included.
    block_size : int or None
        Weights that share one scale (None for formats without blocks).
    scale_format : str
        What each block's scale is stored as ('' where there is none).
    compute : str
        The chip rate its matmuls run at natively: one of :data:`COMPUTE_RATES`.
    source, note : str
        Where the layout comes from, and the arithmetic behind the bits.

    Examples
    --------
    >>> get_format("Q4_0").bytes_per_weight
    0.5625
    """

    name: str
    bits_per_weight: float
    block_size: int | None
    scale_format: str
    compute: str
    source: str
    note: str

    @property
    def bytes_per_weight(self) -> float:
        """Bytes per weight, scales included (fractional for block formats)."""
        return self.bits_per_weight / 8


@lru_cache(maxsize=None)
def _formats() -> dict[str, Format]:
    formats = {}
    for row in read_rows("formats.csv"):
        if row["compute"] not in COMPUTE_RATES:
            raise ValueError(f"formats.csv: {row['name']} has unknown compute rate {row['compute']!r}")
        formats[row["name"]] = Format(
            name=row["name"],
            bits_per_weight=float(row["bits_per_weight"]),
            block_size=optional_int(row["block_size"]),
            scale_format=row["scale_format"],
            compute=row["compute"],
            source=row["source"],
            note=row["note"],
        )
    return formats


def block_bits(element_bits: float, block_size: int, scale_bits: float = 16, zero_bits: float = 0) -> float:
    """Bits per element of a block-quantized tensor, its per-block scale (and zero point) included.

    ``element_bits + (scale_bits + zero_bits) / block_size``: each block of
    ``block_size`` elements shares one scale of ``scale_bits`` and, for an
    asymmetric format, one zero point or minimum of ``zero_bits``.

    Parameters
    ----------
    element_bits : float
        Bits of one quantized element (2, 4, 8).
    block_size : int
        Elements that share one scale.
    scale_bits, zero_bits : float
        Bits of the scale (16 for fp16, 32 for fp32, 8 for E8M0) and of the zero point (0 if none).

    Returns
    -------
    float
        Bits per element.

    Examples
    --------
    >>> block_bits(2, 32, 16, 16)   # KIVI's 2-bit cache: an fp16 scale and minimum per 32
    3.0
    >>> block_bits(8, 128, 32)      # FlashMLA's fp8 cache: an fp32 scale per 128
    8.25
    >>> block_bits(4, 32, 8) == get_format("mxfp4").bits_per_weight
    True
    """
    element_bits = positive("element_bits", element_bits)
    block_size = positive_int("block_size", block_size)
    scale_bits, zero_bits = non_negative("scale_bits", scale_bits), non_negative("zero_bits", zero_bits)
    return element_bits + (scale_bits + zero_bits) / block_size


def format_names() -> list[str]:
    """Names of every number format, in table order."""
    return list(_formats())


def get_format(name: str, *, argument: str = "dtype") -> Format:
    """The number format called ``name`` (case-insensitive).

    Examples
    --------
    >>> get_format("nvfp4").bits_per_weight, get_format("nvfp4").compute
    (4.5, 'fp4')
    >>> get_format("q4")
    Traceback (most recent call last):
    ...
    ValueError: unknown dtype 'q4'; did you mean ...
    """
    return lookup(name, _formats(), argument)
