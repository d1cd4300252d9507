"""Units and element sizes.

Every kvmath function takes and returns base units (bytes, seconds, FLOPs,
FLOP/s, bytes/s). The constants here exist so that callers can write
``80 * GB`` or ``64 * GiB`` and say which one they mean.
"""

from __future__ import annotations

from .presets import lookup

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

#: Bytes per element of each number format kvmath knows. int4 packs two
#: weights in a byte; its scales and zero points are not counted.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


def dtype_bytes(dtype: str, *, argument: str = "dtype") -> float:
    """Bytes per element of a number format.

    Parameters
    ----------
    dtype : str
        One of ``fp32``, ``bf16``, ``fp16``, ``fp8``, ``int8``, ``int4``
        (case-insensitive).
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
    """
    return lookup(dtype, DTYPE_BYTES, argument)
