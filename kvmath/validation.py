"""Argument checks shared by every kvmath function.

Each check names the caller's argument and the offending value, so a bad
input fails at the call site instead of deep inside numpy or, worse,
producing a quietly wrong number.
"""

from __future__ import annotations

import difflib
import numbers
from typing import Iterable, Union

import numpy as np

ArrayLike = Union[float, int, np.ndarray]


def suggest(name: str, known: Iterable[str]) -> str:
    """Return a "did you mean" hint for an unknown name ('' if none is close).

    Names that contain what was typed come first ("h100" -> "h100-sxm"),
    then the closest spellings.
    """
    known = list(known)
    containing = sorted((k for k in known if name and name in k), key=len)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hints = list(dict.fromkeys(containing + close))[:3]
    if hints:
        return "; did you mean " + " or ".join(repr(c) for c in hints) + "?"
    return "; known: " + ", ".join(sorted(known))


def _describe(value: ArrayLike, bad: np.ndarray) -> str:
    """Show a scalar as itself, an array by its first element flagged in ``bad``."""
    if np.ndim(value) == 0:
        return repr(value)
    flat = np.asarray(value).ravel()
    return f"an array containing {flat[int(np.argmax(bad.ravel()))]!r}"


def as_number(name: str, value) -> ArrayLike:
    """Convert ``value`` to a float or float array, rejecting non-numbers, NaN and inf."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, numbers.Number):
        out = float(value)
        if not np.isfinite(out):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return out
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or numeric array, got {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {_describe(arr, ~np.isfinite(arr))}")
    return float(arr) if arr.ndim == 0 else arr


def positive(name: str, value) -> ArrayLike:
    """``value`` as float(s), each strictly greater than zero."""
    out = as_number(name, value)
    bad = np.asarray(out) <= 0
    if bad.any():
        raise ValueError(f"{name} must be > 0, got {_describe(out, bad)}")
    return out


def non_negative(name: str, value) -> ArrayLike:
    """``value`` as float(s), each zero or greater."""
    out = as_number(name, value)
    bad = np.asarray(out) < 0
    if bad.any():
        raise ValueError(f"{name} must be >= 0, got {_describe(out, bad)}")
    return out


def fraction(name: str, value) -> ArrayLike:
    """``value`` in the interval (0, 1]."""
    out = positive(name, value)
    bad = np.asarray(out) > 1
    if bad.any():
        raise ValueError(f"{name} must be in (0, 1], got {_describe(out, bad)}")
    return out


def positive_int(name: str, value) -> ArrayLike:
    """``value`` as whole number(s) >= 1 (floats such as 4.0 are accepted, 4.5 is not)."""
    out = positive(name, value)
    bad = np.asarray(out) != np.round(np.asarray(out))
    if bad.any():
        raise ValueError(f"{name} must be a whole number, got {_describe(out, bad)}")
    return out


def choice(name: str, value: str, options: Iterable[str]) -> str:
    """``value`` lower-cased, which must be one of ``options``."""
    options = list(options)
    if not isinstance(value, str) or value.lower() not in options:
        hint = suggest(str(value).lower(), options)
        raise ValueError(f"unknown {name} {value!r}{hint}")
    return value.lower()


def plain(value) -> ArrayLike:
    """A 0-d numpy result as a Python float; arrays unchanged (keeps doctests and JSON clean)."""
    return float(value) if np.ndim(value) == 0 else value
