"""One plotting style for the whole book.

Every figure in the book is drawn through this module, so that all of them
share a look: axes labelled with units, log axes for batch size and context
length, byte counts shown in GB (1e9 bytes) or GiB (2**30 bytes), times in
ms, compute in TFLOP/s, and the ridge point or the critical batch size drawn
as a named vertical line.

Nothing here changes matplotlib's global settings: the style is applied
inside :func:`style` (a context manager) and by :func:`new_figure`, which
creates its figure inside that context. matplotlib is imported only by this
module and :mod:`kvmath.interactive`, never by the arithmetic core.

All data passed in are in base units (bytes, seconds, FLOP/s, bytes/s);
only the tick labels are scaled.

Examples
--------
>>> import kvmath.plots as kp
>>> fig, ax = kp.new_figure(figsize=(4, 3))
>>> kp.log_batch_axis(ax)
>>> marker = kp.mark_vline(ax, 208, "B_crit")
>>> marker.line.get_xdata()[0]
208
>>> kp.close(fig)
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import matplotlib
import matplotlib.ticker as mticker

__all__ = [
    "STYLE",
    "COLORS",
    "style",
    "new_figure",
    "close",
    "log_batch_axis",
    "log_context_axis",
    "bytes_formatter",
    "seconds_formatter",
    "flops_formatter",
    "bytes_axis",
    "seconds_axis",
    "flops_axis",
    "Marker",
    "mark_vline",
    "roofline",
]

#: Colour cycle used by every figure (colour-blind safe, Okabe-Ito order).
COLORS: tuple[str, ...] = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # green
    "#CC79A7",  # purple
    "#E69F00",  # orange
    "#56B4E9",  # sky
    "#000000",  # black
)

#: The rcParams the book's figures use (applied only inside :func:`style`).
STYLE: dict[str, Any] = {
    "figure.figsize": (7.0, 4.0),
    "figure.dpi": 100,
    "figure.facecolor": "white",
    "figure.constrained_layout.use": True,
    "savefig.facecolor": "white",
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.labelsize": 10.0,
    "axes.grid": True,
    "axes.grid.which": "major",
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=list(COLORS)),
    "lines.linewidth": 2.0,
    "legend.frameon": False,
    "legend.fontsize": 9.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
}

_BYTE_UNITS = {"B": 1.0, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
               "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
_SECOND_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_FLOPS_UNITS = {"FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Apply the book's matplotlib style inside a ``with`` block.

    The previous settings come back when the block ends, so importing or
    using this module never changes global state.

    Examples
    --------
    >>> import matplotlib
    >>> before = matplotlib.rcParams["axes.grid"]
    >>> with style():
    ...     matplotlib.rcParams["axes.grid"]
    True
    >>> matplotlib.rcParams["axes.grid"] == before
    True
    """
    # Save and restore only the keys we set. matplotlib.rc_context would
    # restore *all* rcParams, including the `interactive` flag that IPython's
    # inline backend switches on when the first figure of a kernel is made
    # inside this block; turning it back off hides every later figure.
    saved = {key: matplotlib.rcParams[key] for key in STYLE}
    matplotlib.rcParams.update(STYLE)
    try:
        yield
    finally:
        matplotlib.rcParams.update(saved)


def new_figure(figsize: tuple[float, float] = (7.0, 4.0), nrows: int = 1,
               ncols: int = 1, **subplot_kw: Any):
    """Create a figure and its axes in the book's style.

    The figure is made with ``matplotlib.pyplot`` so that a notebook shows it
    at the end of the cell; the style is applied to it while it is built.

    Parameters
    ----------
    figsize : tuple of float
        Width and height in inches.
    nrows, ncols : int
        Grid of axes (both >= 1).
    **subplot_kw
        Passed to :meth:`matplotlib.figure.Figure.subplots`.

    Returns
    -------
    (Figure, Axes or ndarray of Axes)

    Raises
    ------
    ValueError
        If ``nrows`` or ``ncols`` is < 1, or ``figsize`` is not positive.

    Examples
    --------
    >>> fig, ax = new_figure((4, 3))
    >>> [float(v) for v in fig.get_size_inches()]
    [4.0, 3.0]
    >>> close(fig)
    """
    if nrows < 1 or ncols < 1:
        raise ValueError(f"nrows and ncols must be >= 1, got nrows={nrows!r}, ncols={ncols!r}")
    if len(figsize) != 2 or min(figsize) <= 0:
        raise ValueError(f"figsize must be two positive numbers (inches), got {figsize!r}")
    import matplotlib.pyplot as plt

    with style():
        fig = plt.figure(figsize=figsize)
        axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def close(fig) -> None:
    """Close a figure made by :func:`new_figure` (frees pyplot's reference)."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def _which_axis(ax, which: str):
    if which == "x":
        return ax.xaxis
    if which == "y":
        return ax.yaxis
    raise ValueError(f"which must be 'x' or 'y', got {which!r}")


def _plain_number(value: float, _pos: Any = None) -> str:
    if value <= 0:
        return ""
    if value >= 1 and float(value).is_integer():
        return f"{int(value):,}".replace(",", "\u2009")
    return f"{value:g}"


def _log2_axis(ax, which: str, label: str) -> None:
    axis = _which_axis(ax, which)
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=2)
    axis.set_major_locator(mticker.LogLocator(base=2, numticks=12))
    axis.set_major_formatter(mticker.FuncFormatter(_plain_number))
    axis.set_minor_locator(mticker.NullLocator())
    axis.set_label_text(label)


def log_batch_axis(ax, which: str = "x", label: str = "batch size B (sequences)") -> None:
    """Make ``ax``'s x (or y) axis a base-2 log axis for batch size.

    Ticks read 1, 2, 4, ... 1 024 rather than 2^k.

    Raises
    ------
    ValueError
        If ``which`` is not ``'x'`` or ``'y'``.
    """
    _log2_axis(ax, which, label)


def log_context_axis(ax, which: str = "x", label: str = "context length S (tokens)") -> None:
    """Make ``ax``'s x (or y) axis a base-2 log axis for context length (tokens)."""
    _log2_axis(ax, which, label)


def _scaled_formatter(table: Mapping[str, float], unit: str, kind: str, digits: int | None):
    if unit not in table:
        raise ValueError(f"unit must be one of {sorted(table)} for {kind}, got {unit!r}")
    scale = table[unit]

    def fmt(value: float, _pos: Any = None) -> str:
        scaled = value / scale
        if digits is not None:
            return f"{scaled:.{digits}f}"
        return f"{scaled:g}"

    return mticker.FuncFormatter(fmt)


def bytes_formatter(unit: str = "GB", digits: int | None = None) -> mticker.Formatter:
    """Tick formatter showing byte counts in ``unit`` (GB = 1e9 bytes, GiB = 2**30).

    Examples
    --------
    >>> bytes_formatter("GB")(68.72e9)
    '68.72'
    >>> bytes_formatter("GiB", digits=1)(2**36)
    '64.0'
    """
    return _scaled_formatter(_BYTE_UNITS, unit, "bytes", digits)


def seconds_formatter(unit: str = "ms", digits: int | None = None) -> mticker.Formatter:
    """Tick formatter showing durations given in seconds in ``unit``.

    Examples
    --------
    >>> seconds_formatter("ms")(0.00254)
    '2.54'
    """
    return _scaled_formatter(_SECOND_UNITS, unit, "seconds", digits)


def flops_formatter(unit: str = "TFLOP/s", digits: int | None = None) -> mticker.Formatter:
    """Tick formatter showing FLOP/s in ``unit``.

    Examples
    --------
    >>> flops_formatter("TFLOP/s")(989e12)
    '989'
    """
    return _scaled_formatter(_FLOPS_UNITS, unit, "FLOP/s", digits)


def _minor_log_labels(major: mticker.Formatter) -> mticker.Formatter:
    """Label minor ticks 2 and 5 of each decade in the major's unit, on short log axes only.

    Without it matplotlib labels the minor ticks of a log axis spanning under
    about two decades in raw base units ("6x10^10") beside majors in GB/s.
    """

    def fmt(value: float, pos: Any = None) -> str:
        axis = minor.axis
        lo, hi = sorted(axis.get_view_interval())
        if axis.get_scale() != "log" or lo <= 0 or value <= 0 or math.log10(hi / lo) > 2.5:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return major(value, pos) if round(mantissa) in (2, 5) else ""

    minor = mticker.FuncFormatter(fmt)
    return minor


def _unit_axis(ax, which: str, formatter: mticker.Formatter, label: str, unit: str) -> None:
    axis = _which_axis(ax, which)
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(_minor_log_labels(formatter))
    axis.set_label_text(f"{label} ({unit})")


def bytes_axis(ax, which: str = "y", unit: str = "GB", label: str = "memory") -> None:
    """Label an axis that holds bytes, showing ticks in ``unit``: "memory (GB)"."""
    _unit_axis(ax, which, bytes_formatter(unit), label, unit)


def seconds_axis(ax, which: str = "y", unit: str = "ms", label: str = "time per step") -> None:
    """Label an axis that holds seconds, showing ticks in ``unit``: "time per step (ms)"."""
    _unit_axis(ax, which, seconds_formatter(unit), label, unit)


def flops_axis(ax, which: str = "y", unit: str = "TFLOP/s", label: str = "compute") -> None:
    """Label an axis that holds FLOP/s, showing ticks in ``unit``."""
    _unit_axis(ax, which, flops_formatter(unit), label, unit)


@dataclass
class Marker:
    """A named vertical line made by :func:`mark_vline`; :meth:`move` it in a slider update."""

    line: Any
    text: Any

    def move(self, x: float, label: str | None = None) -> None:
        """Move the line (and its label) to ``x``; optionally change the label text."""
        self.line.set_xdata([x, x])
        self.text.set_x(x)
        if label is not None:
            self.text.set_text(label)


def mark_vline(ax, x: float, label: str, color: str = "0.25", y: float = 0.97,
               **line_kw: Any) -> Marker:
    """Draw a dashed vertical line at ``x`` and name it, e.g. the ridge point or B_crit.

    Parameters
    ----------
    ax : Axes
    x : float
        Position in data units (must be > 0 on a log axis).
    label : str
        Text written beside the line, e.g. ``"B_crit = 208"``.
    y : float
        Height of the label as a fraction of the axes (0..1).

    Returns
    -------
    Marker
        Holds the line and the text; ``marker.move(x)`` repositions both.
    """
    if not 0.0 <= y <= 1.0:
        raise ValueError(f"y must be a fraction of the axes in [0, 1], got {y!r}")
    line_kw.setdefault("linestyle", "--")
    line_kw.setdefault("linewidth", 1.2)
    line = ax.axvline(x, color=color, **line_kw)
    text = ax.text(x, y, f" {label}", transform=ax.get_xaxis_transform(),
                   ha="left", va="top", color=color, fontsize=9)
    return Marker(line=line, text=text)


def roofline(ax, flops: float, bandwidth: float,
             intensity_range: tuple[float, float] | None = None,
             points: Mapping[str, float] | None = None,
             label: str | None = None, flops_unit: str = "TFLOP/s") -> dict[str, Any]:
    """Draw a roofline: attainable FLOP/s against arithmetic intensity, log-log.

    Attainable = min(C, I * W) for peak compute C (FLOP/s), memory bandwidth
    W (bytes/s) and arithmetic intensity I (FLOPs per byte). The ridge point
    alpha = C / W is drawn and named.

    Parameters
    ----------
    ax : Axes
    flops : float
        Peak compute C in FLOP/s (> 0).
    bandwidth : float
        Memory bandwidth W in bytes/s (> 0).
    intensity_range : (float, float), optional
        Smallest and largest intensity shown, FLOPs/byte. Defaults to
        alpha / 64 .. alpha * 16.
    points : mapping of str to float, optional
        Named operating points, name -> intensity (FLOPs/byte); each is
        drawn on the roof and annotated.
    label : str, optional
        Legend label of the roof.
    flops_unit : str
        Unit of the y tick labels.

    Returns
    -------
    dict
        ``{"roof": Line2D, "ridge": Marker, "points": {name: (Line2D, Annotation)}}``.

    Raises
    ------
    ValueError
        If ``flops`` or ``bandwidth`` is not positive, or the range is empty.

    Examples
    --------
    >>> fig, ax = new_figure((4, 3))
    >>> art = roofline(ax, 989e12, 3.35e12, points={"decode B=16": 16.0})
    >>> round(art["ridge"].line.get_xdata()[0], 1)
    295.2
    >>> close(fig)
    """
    import numpy as np

    if not flops > 0:
        raise ValueError(f"flops must be > 0 (FLOP/s), got {flops!r}")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0 (bytes/s), got {bandwidth!r}")
    alpha = flops / bandwidth
    lo, hi = intensity_range if intensity_range is not None else (alpha / 64, alpha * 16)
    if not 0 < lo < hi:
        raise ValueError(f"intensity_range must satisfy 0 < low < high, got {(lo, hi)!r}")
    intensity = np.geomspace(lo, hi, 256)
    attainable = np.minimum(flops, intensity * bandwidth)
    (roof,) = ax.plot(intensity, attainable, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    flops_axis(ax, "y", flops_unit, "attainable compute")
    ridge = mark_vline(ax, alpha, f"ridge \u03b1 = C/W = {alpha:.0f}", y=0.12)
    drawn: dict[str, Any] = {}
    for i, (name, x) in enumerate((points or {}).items()):
        if not x > 0:
            raise ValueError(f"points[{name!r}] must be an intensity > 0, got {x!r}")
        y = min(flops, x * bandwidth)
        (dot,) = ax.plot([x], [y], "o", color=COLORS[(i + 1) % len(COLORS)], zorder=3)
        note = ax.annotate(name, (x, y), xytext=(6, -14), textcoords="offset points", fontsize=9)
        drawn[name] = (dot, note)
    return {"roof": roof, "ridge": ridge, "points": drawn}
