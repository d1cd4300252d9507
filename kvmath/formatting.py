"""Human-readable strings, used only at the edges (CLI, notebooks' check cells); they round, never bound.

Everything else in kvmath stays in base units; this is the one place that
turns bytes into "68.72 GB (64.00 GiB)" or seconds into "2.54 ms".
"""

from __future__ import annotations

from .units import GB, GiB
from .validation import as_scalar, non_negative, whole


def _amount(name: str, value, digits) -> tuple[float, int]:
    """A finite, non-negative scalar and a digit count 0..15: the only things worth formatting."""
    value = non_negative(name, as_scalar(name, value))
    digits = whole("digits", digits, minimum=0)
    if digits > 15:
        raise ValueError(f"digits must be <= 15 (float64 has no more), got {digits}")
    return value, digits

_SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


def _si(value: float, digits: int, unit: str) -> str:
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_bytes(n_bytes: float, digits: int = 2) -> str:
    """Bytes as decimal GB with the binary GiB beside it.

    Every ``fmt_*`` helper takes one finite number >= 0 and refuses NaN, inf,
    negatives and arrays with a ``ValueError`` naming the argument.

    Examples
    --------
    >>> fmt_bytes(64 * 2**30)
    '68.72 GB (64.00 GiB)'
    """
    n_bytes, digits = _amount("n_bytes", n_bytes, digits)
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
    seconds, digits = _amount("seconds", seconds, digits)
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
    return _si(*_amount("flops", flops, digits), "FLOP")


def fmt_flop_rate(flops_per_s: float, digits: int = 2) -> str:
    """A FLOP/s rate with an SI prefix.

    Examples
    --------
    >>> fmt_flop_rate(312e12)
    '312.00 TFLOP/s'
    """
    return _si(*_amount("flops_per_s", flops_per_s, digits), "FLOP/s")


def fmt_bandwidth(bytes_per_s: float, digits: int = 2) -> str:
    """A bandwidth in decimal units (TB/s, GB/s).

    Examples
    --------
    >>> fmt_bandwidth(2.039e12)
    '2.04 TB/s'
    """
    return _si(*_amount("bytes_per_s", bytes_per_s, digits), "B/s")


def fmt_count(count: float, digits: int = 2) -> str:
    """A plain count (parameters, tokens) in scientific notation.

    Examples
    --------
    >>> fmt_count(6.738e9)
    '6.74e9'
    >>> fmt_count(512)
    '5.12e2'
    """
    count, digits = _amount("count", count, digits)
    if count == 0:
        return "0"
    # Python's "e" format rounds the count's exact value once (9.999e9 to 1.00e10, subnormals too); a mantissa
    # divided out first is rounded twice (1,015,000 / 1e6 is 1.01499..., which printed 1.01e6)
    mantissa, exponent = f"{count:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


#: The book's one digit-grouping separator (a thin space, U+2009), as in
#: "1 048 576": prose (fmt_number) and the book's tables, tick labels and slider
#: labels (``kvbook.tables``, ``kvbook.plots``, ``kvbook.interactive``) all use it.
GROUP_SEP = "\u2009"


def group_digits(text: str) -> str:
    """Group the integer part of a formatted number in threes with :data:`GROUP_SEP`.

    Only the first run of digits is grouped, and only when it has four or
    more digits; signs, decimals, exponents and units are left as they are.

    Examples
    --------
    >>> group_digits("1048576")
    '1\u2009048\u2009576'
    >>> group_digits("-12345.678 GB")
    '-12\u2009345.678 GB'
    >>> group_digits("512")
    '512'
    """
    start = 0
    while start < len(text) and not text[start].isdigit():
        start += 1
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    digits = text[start:end]
    if len(digits) < 4:
        return text
    groups = []
    while digits:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    return text[:start] + GROUP_SEP.join(groups) + text[end:]


def fmt_number(value: float, spec: str | None = None) -> str:
    """A plain number in the book's style: integers grouped, floats by ``spec``.

    Parameters
    ----------
    value : int or float
    spec : str, optional
        A format spec such as ``".2f"``. Without one, integers (and floats
        that are whole numbers) print whole, other floats with ``"g"``.

    Examples
    --------
    >>> fmt_number(65536)
    '65\u2009536'
    >>> fmt_number(2048.0)
    '2\u2009048'
    >>> fmt_number(3.14159, ".2f")
    '3.14'
    >>> fmt_number(12345.5, ".1f")
    '12\u2009345.5'
    """
    checked = as_scalar("value", value)  # refuses NaN, inf, strings, bools, arrays, ints past float64 by name
    if not isinstance(value, int):
        value = checked
    if spec is not None and not isinstance(spec, str):
        raise ValueError(f"spec must be a format spec such as '.2f', got {spec!r}")
    if spec is None:
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                       and abs(value) < 1e16):
            return group_digits(str(int(value)))
        return group_digits(f"{value:g}")
    return group_digits(format(value, spec))
