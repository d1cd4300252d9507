"""Argument checks shared by every kvmath function.

Each check names the caller's argument and the offending value, so a bad
input fails at the call site instead of deep inside numpy or, worse,
producing a quietly wrong number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import math
import numbers
import warnings
from typing import Iterable, Mapping, Union

import numpy as np

ArrayLike = Union[float, int, np.ndarray]


def suggest(name: str, known: Iterable[str]) -> str:
    """Return a "did you mean" hint for an unknown name ('' if none is close).

    Names that contain what was typed come first ("h100" -> "h100-sxm"),
    then the closest spellings.
    """
    import difflib  # only when a name is wrong: keeps it off the import path

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


class ResultOverflow(ValueError):
    """Finite, valid inputs whose result does not fit in a float64 (it would be inf or NaN): no bound is returned."""


#: Types refused wherever a number is expected, with the word used in the message.
_REFUSED = (
    (bool, "a bool"), (np.bool_, "a bool"), (str, "a string"), (bytes, "bytes"), (np.str_, "a string"),
    (np.bytes_, "bytes"), (complex, "a complex number"), (np.complexfloating, "a complex number"),
    (datetime.date, "a date"), (datetime.time, "a time"), (datetime.timedelta, "a timedelta"),
    (np.datetime64, "a datetime64"), (np.timedelta64, "a timedelta64"),
)
#: numpy dtype kinds refused inside arrays and lists.
_REFUSED_KINDS = {
    "b": "bools", "U": "strings", "S": "bytes", "O": "objects (not numbers)", "c": "complex numbers",
    "M": "datetimes", "m": "timedeltas", "V": "raw records",
}


def _refuse(name: str, value, what: str):
    raise ValueError(f"{name} must be a real number or an array of them, got {what}: {value!r}")


def _holds_a_bool(value) -> bool:
    """Whether a (nested) list or tuple holds a bool, or a bool array, among its elements."""
    todo = [value]
    while todo:
        for item in todo.pop():
            kind = type(item)
            if kind is float or kind is int:  # the common case, first
                continue
            if isinstance(item, (bool, np.bool_)):
                return True
            if isinstance(item, np.ndarray):
                if item.dtype.kind == "b":
                    return True
            elif isinstance(item, (list, tuple)):
                todo.append(item)
    return False


def as_number(name: str, value) -> ArrayLike:
    """Convert ``value`` to a float or float array, rejecting anything that is not a real number.

    Accepted: Python ``int`` and ``float``, numpy integer and floating
    scalars, and arrays or (nested) lists of them. Integers become floats,
    so nothing wraps around. Refused with a ``ValueError`` naming ``name``:
    ``None``, bools, strings and bytes (also inside lists and arrays: ``[32, True]``),
    complex numbers, dates and timedeltas, masked and object arrays, NaN
    and +-inf.

    Examples
    --------
    >>> as_number("batch", np.int32(7))
    7.0
    >>> as_number("batch", ["32"])
    Traceback (most recent call last):
    ...
    ValueError: batch must be a real number or an array of them, got an array of strings: ['32']
    """
    if type(value) is float or type(value) is int:  # the common case, first (bool is a subclass, not this type)
        try:
            out = float(value)
        except OverflowError:
            raise ValueError(f"{name} is too large for a float64, got {value!r}") from None
        if out - out != 0:  # inf or NaN, without a function call
            raise ValueError(f"{name} must be finite, got {value!r}")
        return out
    if value is None:
        _refuse(name, value, "None")
    for kind, what in _REFUSED:
        if isinstance(value, kind):
            _refuse(name, value, what)
    if isinstance(value, (int, float, np.integer, np.floating)):
        try:
            out = float(value)
        except OverflowError:
            raise ValueError(f"{name} is too large for a float64, got {value!r}") from None
        if not math.isfinite(out):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return out
    if isinstance(value, np.ma.MaskedArray):
        _refuse(name, value, "a masked array")
    if isinstance(value, (numbers.Number, dict, set, frozenset)):
        _refuse(name, value, type(value).__name__)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        _refuse(name, value, "something that is not a rectangular array")
    if arr.dtype.kind in _REFUSED_KINDS:
        _refuse(name, value, "an array of " + _REFUSED_KINDS[arr.dtype.kind])
    if arr.dtype.kind not in "iuf":
        _refuse(name, value, f"an array of dtype {arr.dtype}")
    if isinstance(value, (list, tuple)) and _holds_a_bool(value):
        # numpy turns [32, True] into [32, 1]: a bool among numbers would count as 1
        _refuse(name, value, "a bool inside a list")
    with np.errstate(over="ignore"):
        arr = arr.astype(float)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {_describe(arr, ~np.isfinite(arr))}")
    return float(arr) if arr.ndim == 0 else arr


def as_scalar(name: str, value) -> float:
    """``value`` as one float (not an array); see :func:`as_number` for what is refused."""
    out = as_number(name, value)
    if np.ndim(out) != 0:
        raise ValueError(f"{name} must be a single number, got an array of shape {np.shape(out)}")
    return out


def whole(name: str, value, minimum: int = 1) -> int:
    """``value`` as a Python ``int`` >= ``minimum``: a structural count (layers, heads, experts).

    Python and numpy integers are accepted (numpy ones become Python ints,
    so arithmetic on them cannot wrap); floats, even 4.0, bools and
    everything :func:`as_number` refuses are not.

    Examples
    --------
    >>> whole("n_layers", np.int32(80))
    80
    >>> whole("n_layers", 80.0)
    Traceback (most recent call last):
    ...
    ValueError: n_layers must be a whole number (int), got 80.0
    """
    as_number(name, value)  # the specific complaint about strings, None, timedelta64, ... if there is one
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a whole number (int), got {value!r}")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return out


def _shape(value) -> tuple | None:
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return None
    if isinstance(value, np.ndarray):
        return value.shape or None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shape = np.shape(value)
    except (TypeError, ValueError):
        return None
    return shape or None


def broadcast(**arrays) -> tuple:
    """The common shape of the named arguments; a ValueError naming them if they do not broadcast.

    Examples
    --------
    >>> broadcast(batch=np.ones(3), context=np.ones((2, 1)))
    (2, 3)
    >>> broadcast(batch=np.ones(3), context=np.ones(4))
    Traceback (most recent call last):
    ...
    ValueError: the shapes of batch (3,) and context (4,) do not broadcast together
    """
    shapes = {k: s for k, s in ((k, _shape(v)) for k, v in arrays.items()) if s is not None}
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        pass
    # name the first pair that clashes
    names = list(shapes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            try:
                np.broadcast_shapes(shapes[a], shapes[b])
            except ValueError:
                raise ValueError(
                    f"the shapes of {a} {shapes[a]} and {b} {shapes[b]} do not broadcast together"
                ) from None
    described = ", ".join(f"{k} {s}" for k, s in shapes.items())
    raise ValueError(f"the shapes of {described} do not broadcast together")


def _numeric_parts(result) -> list:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return [getattr(result, f.name) for f in dataclasses.fields(result)]
    if isinstance(result, (tuple, list)):
        return list(result)
    if isinstance(result, dict):
        return list(result.values())
    return [result]


def _show(value) -> str:
    try:
        shape = np.shape(value)
    except ValueError:  # a ragged list (another argument's error, reported as it is)
        return repr(value)
    return repr(value) if shape == () else f"an array of shape {shape}"


def checked(func):
    """Decorator for public kvmath functions: named shape errors, and no inf or NaN out.

    Before the call, array arguments must broadcast together (else a
    ``ValueError`` names the two that clash). After it, every number in the
    result must be finite: where finite inputs overflow float64, a
    :class:`ResultOverflow` (a ``ValueError``) names the function and its
    inputs instead of returning inf.
    """
    code = func.__code__
    # argument names by position, as Python binds them (no inspect on the import path or per call)
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    positional = code.co_varnames[:code.co_argcount]

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if len(args) > len(positional):
            return func(*args, **kwargs)  # let Python word the arity error
        inputs = {k: v for k, v in zip(positional, args) if k != "self"}
        for k, v in kwargs.items():
            if k in names and k != "self":
                inputs[k] = v
        broadcast(**inputs)
        def overflow():
            shown = ", ".join(f"{k}={_show(v)}" for k, v in inputs.items())
            return ResultOverflow(f"{func.__name__}: the result overflows float64 (it would be inf) for {shown}")

        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                result = func(*args, **kwargs)
        except (ResultOverflow, ArithmeticError):
            # an inner call overflowed, Python's float ** did, or a product underflowed to a
            # zero divisor: name this caller's inputs
            raise overflow() from None
        for part in _numeric_parts(result):
            if isinstance(part, (str, bytes)) or part is None:
                continue
            arr = np.asarray(part)
            if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
                raise overflow()
        return result

    return wrapper


def positive(name: str, value) -> ArrayLike:
    """``value`` as float(s), each strictly greater than zero."""
    out = as_number(name, value)
    if type(out) is float:
        if out <= 0:
            raise ValueError(f"{name} must be > 0, got {out!r}")
        return out
    bad = np.asarray(out) <= 0
    if bad.any():
        raise ValueError(f"{name} must be > 0, got {_describe(out, bad)}")
    return out


def non_negative(name: str, value) -> ArrayLike:
    """``value`` as float(s), each zero or greater."""
    out = as_number(name, value)
    if type(out) is float:
        if out < 0:
            raise ValueError(f"{name} must be >= 0, got {out!r}")
        return out
    bad = np.asarray(out) < 0
    if bad.any():
        raise ValueError(f"{name} must be >= 0, got {_describe(out, bad)}")
    return out


def fraction(name: str, value) -> ArrayLike:
    """``value`` in the interval (0, 1]."""
    out = positive(name, value)
    if type(out) is float:
        if out > 1:
            raise ValueError(f"{name} must be in (0, 1], got {out!r}")
        return out
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


def instance(name: str, value, kind: type, what: str):
    """``value`` itself, which must be a ``kind`` (a Model, Chip, Link, ...); else a ValueError naming ``name``.

    Examples
    --------
    >>> instance("model", "llama-2-7b", str, "a model name")
    'llama-2-7b'
    >>> instance("model", 3, str, "a model name")
    Traceback (most recent call last):
    ...
    ValueError: model must be a model name, got int: 3
    """
    if not isinstance(value, kind):
        raise ValueError(f"{name} must be {what}, got {type(value).__name__}: {value!r}"[:300])
    return value


def flag(name: str, value) -> bool:
    """``value`` as a bool: True or False (numpy bools too), nothing else."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def finite(value, nonzero: bool = False) -> ArrayLike:
    """``value`` unchanged, or :class:`ResultOverflow` if an intermediate product of valid inputs is inf or NaN
    (or, with ``nonzero``, a product of positive numbers that underflowed to 0).

    Call it before passing a product on to another checked function, so the
    overflow is reported as the caller's (by :func:`checked`), not as a bad
    argument the user never passed.
    """
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or (nonzero and np.any(arr == 0)):
        raise ResultOverflow("an intermediate result overflows float64 (it would be inf, or 0 from underflow)")
    return value


def one_int(name: str, value) -> int:
    """``value`` as one Python ``int`` >= 1 (4.0 is accepted, 4.5 and arrays are not): a block size, a chip count."""
    return int(positive_int(name, as_scalar(name, value)))


def as_count(name: str, values) -> int | np.ndarray:
    """Whole numbers as a Python int, or an int64 array where every element fits (no wrap-around)."""
    if np.ndim(values) == 0:
        return int(values)
    if np.any(np.asarray(values) >= 2.0**63):
        raise ResultOverflow(f"{name} exceeds what an int64 array holds (2**63); pass scalars for Python ints")
    return np.asarray(values).astype(np.int64)


def _overflow(where: str, inputs: Mapping) -> ResultOverflow:
    shown = ", ".join(f"{k}={v!r}" if np.ndim(v) == 0 else f"{k} (an array of shape {np.shape(v)})"
                      for k, v in inputs.items())
    return ResultOverflow(f"{where}: the result overflows float64 (it would be inf) for {shown}; use smaller numbers")


def refuse_overflow(where: str, results: Mapping, **inputs) -> None:
    """Raise :class:`kvmath.ResultOverflow` naming ``inputs`` where any of ``results`` is inf or NaN."""
    for value in results.values():
        if not np.all(np.isfinite(np.asarray(value, dtype=float))):
            raise _overflow(where, inputs)


@contextlib.contextmanager
def overflow_named(where: str, **inputs):
    """Inside: no numpy warnings, and an inner overflow re-raised as one naming ``where``'s ``inputs``."""
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            yield
    except (ResultOverflow, ArithmeticError):
        raise _overflow(where, inputs) from None
