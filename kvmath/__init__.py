"""kvmath: the arithmetic of LLM inference, exact and vectorised.

One value describes what is served and how, and every question is asked of
it::

    >>> from kvmath import Deployment
    >>> dep = Deployment("llama-3-70b", "h100-sxm", "tp=8", weights="fp8")
    >>> step = dep.step(batch=64, context=4096)       # a lower bound, on the busiest chip
    >>> round(step.strict_s * 1e3, 2), step.binds
    (5.8, 'memory')

Every quantity is in base units: bytes, seconds, FLOPs, FLOP/s, bytes/s.
Questions broadcast over numpy arrays, so one call evaluates a whole grid
of batch sizes and contexts. Results are frozen and say whether they are
lower bounds (``is_lower_bound``); ``to_dict()`` gives the command line's
JSON.

The public names:

- :class:`Model`, :class:`Chip`, :class:`Link`, :class:`ParallelLayout`,
  :class:`Formats`: what is served, on what, spread how, stored in what
  (presets by name: ``Model.preset("llama-3-8b")``);
- :class:`Deployment`, and its results :class:`Step`, :class:`Request`,
  :class:`Frontier`, :class:`Capacity` (all lower bounds unless an estimate is asked for);
- :mod:`kvmath.formulas`: the notes' closed forms, by the names the
  chapters cite (``min_step``, ``critical_batch``, ``kv_bytes_per_token``);
- :mod:`kvmath.memory` (memory budgets and vLLM's KV sizing),
  :mod:`kvmath.calibration` (published measurements against the bound),
  :mod:`kvmath.hf_config` (``config.json`` files), :mod:`kvmath.units`
  (GB, GiB, bytes per element), :mod:`kvmath.formatting` (strings at the
  edges) and :mod:`kvmath.measure` (timing this machine);
- :class:`ResultOverflow`, the error for valid inputs whose result
  overflows float64.

Submodules load on first use, so ``import kvmath`` stays light.
"""

from .deployment import Capacity, Deployment, Formats, Step
from .hardware import Chip
from .layout import ParallelLayout
from .links import Link
from .models import Model
from .validation import ResultOverflow

__version__ = "0.1.0"

_SUBMODULES = ("formulas", "memory", "calibration", "hf_config", "units", "formatting", "measure")


def __getattr__(name: str):
    # the submodules are imported on first use: most callers need one or two of them
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in ("Frontier", "Request"):  # the request results, with the module that builds them
        return getattr(importlib.import_module(".requests", __name__), name)
    raise AttributeError(f"module 'kvmath' has no attribute {name!r}")


__all__ = [
    "Capacity", "Chip", "Deployment", "Formats", "Frontier", "Link", "Model", "ParallelLayout", "Request", "ResultOverflow",
    "Step", *_SUBMODULES,
]
