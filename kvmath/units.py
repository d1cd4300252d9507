"""Units and element sizes: exact constants (no bound, no estimate).

Every kvmath function takes and returns base units (bytes, seconds, FLOPs,
FLOP/s, bytes/s). The constants here exist so that callers can write
``80 * GB`` or ``64 * GiB`` and say which one they mean.
"""

from __future__ import annotations

from .formats import format_names, get_format

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40



def __getattr__(name: str):
    # DTYPE_BYTES reads data/formats.csv: built on first use, not at import
    if name == "DTYPE_BYTES":
        return {f: get_format(f).bytes_per_weight for f in format_names()}
    raise AttributeError(f"module 'kvmath.units' has no attribute {name!r}")


#: ``DTYPE_BYTES``: bytes per element of each number format in ``data/formats.csv``,
#: scales included: fractional for block formats (``q4_0``: 0.5625). The bare
#: ``int4`` row counts no scales, as the sources do. (Computed on first use.)


def dtype_bytes(dtype: str, *, argument: str = "dtype") -> float:
    """Bytes per element of a number format.

    Parameters
    ----------
    dtype : str
        A name from :data:`DTYPE_BYTES` (``bf16``, ``fp8``, ``int4-g128``,
        ``q4_0``, ``nvfp4``, ...; case-insensitive).
    argument : str
        Name of the caller's argument, used in the error message.

    Returns
    -------
    float
        Bytes per element.

    Examples
    --------
    >>> dtype_bytes("bf16")
    2.0
    >>> dtype_bytes("INT4")
    0.5
    >>> dtype_bytes("q4_0")  # 32 four-bit weights and one fp16 scale in 18 bytes
    0.5625
    """
    return get_format(dtype, argument=argument).bytes_per_weight
