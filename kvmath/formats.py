"""Number formats as data: true bits per weight, scales included, and the math they run in.

The table lives in ``kvmath/data/formats.csv``, one row per format with its
source. A block format stores a scale (and sometimes a minimum) for every
block of weights, so its bits per weight are more than its element width:
GGUF's Q4_0 keeps 32 four-bit weights and one fp16 scale in 18 bytes, 4.5
bits per weight, not 4.

``compute`` names the chip rate a format's matmuls run at where the chip
has it (``bf16``, ``fp8``, ``int8`` or ``fp4``); weight-only formats such as
``int4-g128`` are dequantized and multiply at the bf16 rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .presets import lookup, optional_int, read_rows

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
