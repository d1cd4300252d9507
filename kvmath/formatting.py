"""Human-readable strings, used only at the edges (CLI, notebooks' check cells).

Everything else in kvmath stays in base units; this is the one place that
turns bytes into "68.72 GB (64.00 GiB)" or seconds into "2.54 ms".
"""

from __future__ import annotations

import math

from .units import GB, GiB

_SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


def _si(value: float, unit: str, digits: int) -> str:
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_bytes(n_bytes: float, digits: int = 2) -> str:
    """Bytes as decimal GB with the binary GiB beside it.

    Examples
    --------
    >>> fmt_bytes(64 * 2**30)
    '68.72 GB (64.00 GiB)'
    """
    return f"{n_bytes / GB:.{digits}f} GB ({n_bytes / GiB:.{digits}f} GiB)"


def fmt_seconds(seconds: float, digits: int = 2) -> str:
    """Seconds with the unit that keeps the number readable (s, ms, µs, ns).

    Examples
    --------
    >>> fmt_seconds(0.0025362)
    '2.54 ms'
    >>> fmt_seconds(3.0)
    '3.00 s'
    """
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.{digits}f} {unit}"
    return f"{seconds / 1e-9:.{digits}f} ns"


def fmt_flops(flops: float, digits: int = 2) -> str:
    """A FLOP count with an SI prefix.

    Examples
    --------
    >>> fmt_flops(2.24e11)
    '224.00 GFLOP'
    """
    return _si(flops, "FLOP", digits)


def fmt_flop_rate(flops_per_s: float, digits: int = 2) -> str:
    """A FLOP/s rate with an SI prefix.

    Examples
    --------
    >>> fmt_flop_rate(312e12)
    '312.00 TFLOP/s'
    """
    return _si(flops_per_s, "FLOP/s", digits)


def fmt_bandwidth(bytes_per_s: float, digits: int = 2) -> str:
    """A bandwidth in decimal units (TB/s, GB/s).

    Examples
    --------
    >>> fmt_bandwidth(2.039e12)
    '2.04 TB/s'
    """
    return _si(bytes_per_s, "B/s", digits)


def fmt_count(count: float, digits: int = 2) -> str:
    """A plain count (parameters, tokens) in scientific notation.

    Examples
    --------
    >>> fmt_count(6.738e9)
    '6.74e9'
    >>> fmt_count(512)
    '5.12e2'
    """
    if count == 0:
        return "0"
    exponent = math.floor(math.log10(abs(count)))
    mantissa = count / 10**exponent
    if round(mantissa, digits) >= 10:  # 9.999e9 rounds up to 10.00e9
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.{digits}f}e{exponent}"
