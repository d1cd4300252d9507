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
  :mod:`kvmath.estimate` (estimates beside the bounds, fitted on those measurements),
  :mod:`kvmath.hf_config` (``config.json`` files), :mod:`kvmath.units`
  (GB, GiB, bytes per element), :mod:`kvmath.formatting` (strings at the
  edges) and :mod:`kvmath.measure` (timing this machine);
- :class:`ResultOverflow`, the error for valid inputs whose result
  overflows float64.

Every name and submodule loads on first use, so ``import kvmath`` stays light.
"""

__version__ = "0.1.0"

#: Where each public name lives: it is imported on first use (PEP 562), so ``import kvmath`` costs
#: a fraction of a millisecond and a script pays only for what it asks for.
_WHERE = {
    "Capacity": "deployment", "Deployment": "deployment", "Formats": "deployment", "Step": "deployment",
    "Chip": "hardware", "ParallelLayout": "layout", "Link": "links", "Model": "models",
    "Frontier": "requests", "Request": "requests", "ResultOverflow": "validation",
}
_SUBMODULES = ("formulas", "memory", "calibration", "hf_config", "units", "formatting", "measure")


def __getattr__(name: str):
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # found once
        return value
    raise AttributeError(f"module 'kvmath' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [*sorted(_WHERE), *_SUBMODULES]
