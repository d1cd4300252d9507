"""What every result type shares: frozen fields, and ``to_dict()`` keyed by attribute name.

The command line's ``--json`` is ``to_dict()`` of the same object, so Python
and JSON cannot disagree: each key is an attribute (a field, or one of the
derived quantities the class lists in ``_derived``), arrays and tuples become lists and
numpy scalars plain numbers, and NaN (an undefined figure, such as the time
per output token of a one-token request) None, which JSON can hold.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


def _no_nan(x):
    if isinstance(x, list):
        return [_no_nan(v) for v in x]
    return None if isinstance(x, float) and math.isnan(x) else x


def plain_value(value):
    """``value`` as JSON-ready Python: arrays as lists, numpy scalars as numbers, nested results as dicts."""
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return _no_nan(value.tolist())
    if isinstance(value, (np.generic, float)):
        return _no_nan(value.item() if isinstance(value, np.generic) else value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, tuple):  # JSON has lists only: a tuple field reads back as what --json prints
        return [plain_value(v) for v in value]
    return value


class Result:
    """Mixin for kvmath's frozen result dataclasses."""

    #: Properties that ``to_dict`` includes beside the fields.
    _derived: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Every field and derived quantity by its attribute name, JSON-ready."""
        out = {f.name: plain_value(getattr(self, f.name)) for f in dataclasses.fields(self)}
        for name in self._derived:
            out[name] = plain_value(getattr(self, name))
        return out
