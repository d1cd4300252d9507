"""One plotting style for the whole book.

Every figure in the book is drawn through this module, so that all of them
share a look: axes labelled with units, log axes for batch size and context
length, byte counts shown in GB (1e9 bytes) or GiB (2**30 bytes), times in
ms, compute in TFLOP/s, and the ridge point or the critical batch size drawn
as a named vertical line.

Nothing here changes matplotlib's global settings: the style is applied
inside :func:`style` (a context manager) and by :func:`new_figure`, which
creates its figure inside that context. matplotlib is imported only by this
module and :mod:`kvbook.interactive`, never by the arithmetic core.

All data passed in are in base units (bytes, seconds, FLOP/s, bytes/s);
only the tick labels are scaled.

Examples
--------
>>> import kvbook.plots as kp
>>> fig, ax = kp.new_figure(figsize=(4, 3))
>>> kp.log_batch_axis(ax)
>>> marker = kp.mark_vline(ax, 208, "B_crit")
>>> marker.line.get_xdata()[0]
208
>>> kp.close(fig)
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import re

import matplotlib
import matplotlib.ticker as mticker
from matplotlib.backends.backend_agg import FigureCanvasAgg

from kvmath.formatting import fmt_number

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
    "mathtext",
    "HIDPI",
    "CSS_DPI",
    "layout_problems",
    "MIN_TEXT_KEY",
    "min_text_px",
    "png_text",
    "plain_text",
    "describe",
    "BookCanvas",
]

#: Figures are laid out at CSS_DPI CSS pixels per inch (a 7 in figure shows
#: 700 px wide, so 9 pt text is 12.5 px) and rendered with HIDPI times as
#: many pixels, so they stay sharp on a high-density screen. The book build
#: (packages/kvbook/kvbook/sphinx/book_pages.py) reads the PNG's dpi and shows it at its CSS
#: size, responsive: it shrinks with the column, never grows past it. On a phone's 390 px that
#: halves its text; there a tap opens it at this size (_static/kvmath.js, using MIN_TEXT_KEY).
CSS_DPI = 100
HIDPI = 2

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
    "figure.dpi": CSS_DPI * HIDPI,
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
    return fmt_number(float(value))


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


_SYMBOL = re.compile(r"(?<![\\$\w])([A-Za-z])_(\{[^}]*\}|[A-Za-z0-9]+)(?![\w$])")


def mathtext(label: str) -> str:
    """Write the book's symbols in mathtext: ``"B_crit = 208"`` -> ``"$B_\\mathrm{crit}$ = 208"``.

    A single letter with a subscript (``B_crit``, ``S_avg``, ``h_kv``,
    ``d_h``, ``b_w``) becomes italic with an upright subscript, as the
    notation page writes it. Labels that already hold ``$`` are returned
    unchanged, and so is everything else in the label.

    Examples
    --------
    >>> print(mathtext("B_crit = 208"))
    $B_\\mathrm{crit}$ = 208
    >>> print(mathtext("S_avg and h_kv"))
    $S_\\mathrm{avg}$ and $h_\\mathrm{kv}$
    >>> print(mathtext("llama_2 (no symbol)"))
    llama_2 (no symbol)
    """
    if "$" in label:
        return label

    def sub(m: re.Match) -> str:
        base, index = m.group(1), m.group(2).strip("{}")
        index = index if index.isdigit() else rf"\mathrm{{{index}}}"
        return f"${base}_{index}$"

    return _SYMBOL.sub(sub, label)


def _place_label(text, x: float, label: str) -> None:
    """Put a vertical line's label on the side of the line with room: right of it, or left near the right edge."""
    ax = text.axes
    try:
        frac = ax.transAxes.inverted().transform(ax.transData.transform((x, 1.0)))[0]
    except (ValueError, ZeroDivisionError):  # pragma: no cover - degenerate axes
        frac = 0.0
    if frac > 0.62:
        text.set_horizontalalignment("right")
        text.set_text(f"{label} ")
    else:
        text.set_horizontalalignment("left")
        text.set_text(f" {label}")


@dataclass
class Marker:
    """A named vertical line made by :func:`mark_vline`; :meth:`move` it in a slider update."""

    line: Any
    text: Any
    label: str = ""
    math: bool = True

    def move(self, x: float, label: str | None = None) -> None:
        """Move the line (and its label) to ``x``; optionally change the label text.

        The label sits right of the line, or left of it when the line is in
        the right part of the axes, so it is never clipped by the edge.
        """
        if label is not None:
            self.label = mathtext(label) if self.math else label
        self.line.set_xdata([x, x])
        self.text.set_x(x)
        _place_label(self.text, x, self.label)


def readout(ax, x: float = 0.02, y: float = 0.97, fontsize: float = 9):
    """An empty boxed text in the axes' top-left corner, for the numbers of a figure's current setting.

    The figure's ``update`` fills it (``readout.set_text(...)``); the white box keeps the numbers legible over
    the curves they describe.
    """
    return ax.text(x, y, "", transform=ax.transAxes, va="top", fontsize=fontsize,
                   bbox={"facecolor": "white", "edgecolor": "0.8"})


def mark_vline(ax, x: float, label: str, color: str = "0.25", y: float = 0.97,
               math: bool = True, **line_kw: Any) -> Marker:
    """Draw a dashed vertical line at ``x`` and name it, e.g. the ridge point or B_crit.

    Parameters
    ----------
    ax : Axes
    x : float
        Position in data units (must be > 0 on a log axis).
    label : str
        Text written beside the line, e.g. ``"B_crit = 208"``; symbols are
        written in mathtext (:func:`mathtext`) unless ``math=False``.
    y : float
        Height of the label as a fraction of the axes (0..1).
    math : bool
        Typeset symbols such as ``B_crit`` with mathtext.

    Returns
    -------
    Marker
        Holds the line and the text; ``marker.move(x)`` repositions both.
        The label is drawn on the side of the line that has room (set the
        axis limits before marking, so the side is chosen right).
    """
    if not 0.0 <= y <= 1.0:
        raise ValueError(f"y must be a fraction of the axes in [0, 1], got {y!r}")
    line_kw.setdefault("linestyle", "--")
    line_kw.setdefault("linewidth", 1.2)
    line = ax.axvline(x, color=color, **line_kw)
    text = ax.text(x, y, "", transform=ax.get_xaxis_transform(),
                   ha="left", va="top", color=color, fontsize=9)
    marker = Marker(line=line, text=text, label=mathtext(label) if math else label, math=math)
    _place_label(text, x, marker.label)
    return marker


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


# --- the smallest text, recorded in the PNG ----------------------------------------

#: The PNG text chunk (tEXt keyword) that holds a figure's smallest text size, in image
#: pixels. A page shows the image at some CSS width; the text a reader sees is then
#: ``min-text-px x displayed width / image width`` CSS px (tests/browser/phonecheck.py
#: reads it from the served file to check figures at phone width).
MIN_TEXT_KEY = "kvbook:min-text-px"


def _drawn_texts(artist) -> Iterator[Any]:
    """The Text artists a draw of ``artist`` would paint: visible (their parents too) and not empty.

    An axis draws one tick per tick location inside its view interval (``Axis._update_ticks``);
    its other Tick objects hold stale labels that are never drawn. Nothing is changed: in
    particular no artist is marked stale, which the blitting in :mod:`kvbook.interactive`
    reads as "update touched it".
    """
    from matplotlib.axis import Axis
    from matplotlib.text import Text

    if not artist.get_visible():
        return
    if isinstance(artist, Text):
        if artist.get_text().strip():
            yield artist
        return
    if isinstance(artist, Axis):
        lo, hi = sorted(artist.get_view_interval())
        slack = 1e-10 * max(abs(lo), abs(hi), 1e-300)
        for ticks, locs in ((artist.majorTicks, artist.get_majorticklocs()),
                            (artist.minorTicks, artist.get_minorticklocs())):
            for tick, loc in zip(ticks, locs):
                if tick.get_visible() and lo - slack <= loc <= hi + slack:
                    for label in (tick.label1, tick.label2):
                        yield from _drawn_texts(label)
        for text in (artist.label, artist.offsetText):
            yield from _drawn_texts(text)
        return
    for child in artist.get_children():
        yield from _drawn_texts(child)


@functools.lru_cache(maxsize=4096)
def _smallest_glyph_pt(line: str, prop) -> float:
    """The smallest glyph of a mathtext line, points: sub- and superscripts shrink (0.7 a level)."""
    from matplotlib.mathtext import MathTextParser

    glyphs = MathTextParser("path").parse(line, 72, prop).glyphs
    return min((g[1] for g in glyphs), default=prop.get_size_in_points())


def min_text_px(fig, dpi: float | None = None) -> float | None:
    """The smallest text drawn on ``fig``, in image pixels at ``dpi`` (the figure's by default).

    Every visible, non-empty text counts (titles, axis and tick labels, legends,
    annotations, labels in the axes): its font size in points x dpi / 72. In a
    mathtext line (``$B_\\mathrm{crit}$``) each glyph counts at the size it is drawn, so
    a subscript counts at 0.7 of the text's size. Tick labels are those of the last
    draw: call it after the figure was drawn. None when nothing is written on it.

    Examples
    --------
    >>> fig, ax = new_figure((4, 3))
    >>> ax.set_axis_off()
    >>> _ = ax.text(0.5, 0.5, "9 pt", fontsize=9)
    >>> round(min_text_px(fig, dpi=200), 2)      # 9 x 200 / 72
    25.0
    >>> _ = ax.text(0.1, 0.1, r"$B_\\mathrm{crit}$", fontsize=10)
    >>> round(min_text_px(fig, dpi=200), 2)      # its subscript: 0.7 x 10 x 200 / 72
    19.44
    >>> close(fig)
    """
    from matplotlib import cbook

    dpi = fig.dpi if dpi is None else float(dpi)
    smallest = math.inf
    for text in _drawn_texts(fig):
        prop = text.get_fontproperties()
        size = prop.get_size_in_points()
        for line in text.get_text().split("\n"):
            if not line.strip():
                continue
            if text.get_parse_math() and not text.get_usetex() and cbook.is_math_text(line):
                smallest = min(smallest, _smallest_glyph_pt(line, prop.copy()))
            else:
                smallest = min(smallest, size)
    return None if smallest == math.inf else smallest * dpi / 72.0


# --- what a figure shows, in words (its alt text) --------------------------------------

_MATH_WORDS = {r"\times": "×", r"\cdot": "·", r"\leq": "≤", r"\geq": "≥", r"\le": "≤", r"\ge": "≥",
               r"\approx": "≈", r"\infty": "infinity", r"\to": "to", r"\rightarrow": "to", r"\%": "%"}
_MATH_COMMAND = re.compile(r"\\(?:mathrm|mathit|mathbf|mathdefault|text|operatorname)\s*\{([^{}]*)\}")
_POWER_OF_TEN = re.compile(r"10\^\{?([−-]?\d+)\}?")


def plain_text(label: str) -> str:
    """A figure's label without mathtext, as a screen reader should hear it.

    Examples
    --------
    >>> plain_text(r"$B_\\mathrm{crit}$ = 208")
    'B_crit = 208'
    >>> plain_text(r"$\\mathdefault{10^{-2}}$ to $\\mathdefault{10^{3}}$")
    '0.01 to 1,000'
    >>> plain_text(r"time per token $\\times$ 2")
    'time per token × 2'
    """
    def power(m: re.Match) -> str:
        k = int(m.group(1).replace("−", "-"))
        return f"{10.0 ** k:,.{max(0, -k)}f}" if abs(k) <= 6 else f"10 to the {k}"

    out = _POWER_OF_TEN.sub(power, label)  # a log axis's ticks, "$\\mathdefault{10^{3}}$"
    for _ in range(3):  # nested commands, innermost first
        out = _MATH_COMMAND.sub(r"\1", out)
    for command, word in _MATH_WORDS.items():
        out = out.replace(command, word)
    out = re.sub(r"\\[,;:! ]", " ", out)
    out = re.sub(r"\\([A-Za-z]+)", r"\1", out)  # a Greek letter or other symbol: its name
    out = out.replace("$", "").replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(out.split())


def _axis_words(axis, scale: str) -> str:
    """``"batch size B (sequences), log scale, 1 to 1,024"``: the label and the ticks a reader sees."""
    ticks = [plain_text(t.get_text()) for t in _drawn_texts(axis)
             if t is not axis.label and t is not axis.offsetText]
    ticks = [t for t in ticks if t]
    words = [plain_text(axis.label.get_text())] if axis.label.get_text().strip() else []
    if scale == "log":
        words.append("log scale")
    numeric = all(re.fullmatch(r"[−\-+]?[\d.,]+\s*[%\w]{0,4}", t) for t in ticks)
    if ticks and numeric:
        words.append(f"{ticks[0]} to {ticks[-1]}" if len(ticks) > 1 else ticks[0])
    elif ticks:
        words.append(", ".join(ticks[:8]) + (f" and {len(ticks) - 8} more" if len(ticks) > 8 else ""))
    return ", ".join(words)


def _axes_words(ax) -> str:
    from matplotlib.collections import PathCollection, PolyCollection
    from matplotlib.container import BarContainer

    kinds = []
    if any(isinstance(c, BarContainer) for c in ax.containers):
        kinds.append("bars")
    if any(line.get_visible() and len(line.get_xdata()) > 1 for line in ax.get_lines()):
        kinds.append("lines")
    if any(isinstance(c, PathCollection) for c in ax.collections):
        kinds.append("points")
    if any(isinstance(c, PolyCollection) for c in ax.collections):
        kinds.append("shaded bands")
    if not kinds and not ax.axison:
        return ""
    chart = {"bars": "A bar chart", "lines": "A line chart", "points": "A scatter plot"}.get(
        kinds[0] if len(kinds) == 1 else "", "A chart")
    parts = [chart + (f" of {', '.join(kinds)}" if len(kinds) > 1 else "")]
    title = plain_text(ax.get_title())
    if title:
        parts[0] += f", {title}"
    if ax.axison:
        y, x = _axis_words(ax.yaxis, ax.get_yscale()), _axis_words(ax.xaxis, ax.get_xscale())
        if y:
            parts.append(f"y axis: {y}")
        if x:
            parts.append(f"x axis: {x}")
    legend = ax.get_legend()
    if legend is not None and legend.get_visible():
        names = [plain_text(t.get_text()) for t in legend.get_texts() if t.get_text().strip()]
        if names:
            parts.append("key: " + "; ".join(names))
    return "; ".join(parts) + "."


def describe(fig) -> str:
    """What ``fig`` shows, in words, for its alt text: each panel's kind of chart, its title, its
    axes (label, scale, first and last tick as drawn) and its key, without mathtext. A caption
    says what a figure means; this says what is on it, for a reader who cannot see it.
    Call it after the figure was drawn (its ticks are those of the last draw).

    Examples
    --------
    >>> fig, ax = new_figure((4, 3))
    >>> _ = ax.plot([1, 64], [2, 5], label="memory")
    >>> log_batch_axis(ax)
    >>> _ = ax.set_ylabel("time per step (ms)")
    >>> _ = ax.legend()
    >>> fig.canvas.draw()
    >>> print(describe(fig))   # doctest: +NORMALIZE_WHITESPACE
    A line chart; y axis: time per step (ms), 2.0 to 5.0; x axis: batch size B (sequences), log scale, 1 to 64;
    key: memory.
    >>> close(fig)
    """
    panels = [w for w in (_axes_words(ax) for ax in fig.axes if ax.get_visible()) if w]
    title = plain_text(fig._suptitle.get_text()) if getattr(fig, "_suptitle", None) else ""
    head = f"{title}. " if title else ""
    if len(panels) <= 1:
        return head + "".join(panels)
    return head + f"{len(panels)} panels. " + " ".join(f"Panel {i}: {p}" for i, p in enumerate(panels, 1))


def png_text(fig, dpi: float | None = None) -> dict[str, str]:
    """The PNG text chunks every figure PNG of the book carries: its smallest text
    (``{MIN_TEXT_KEY: "25.00"}``) and what it shows (``Description``, :func:`describe`), which
    the book build writes into the page's alt text unless the figure's code wrote its own.

    Without either where the figure has no text or nothing to describe. ``dpi`` is the dpi the
    PNG is rendered at (the figure's by default).
    """
    px = min_text_px(fig, dpi)
    out = {} if px is None else {MIN_TEXT_KEY: f"{px:.2f}"}
    described = describe(fig)
    if described:
        out["Description"] = described
    return out


class BookCanvas(FigureCanvasAgg):
    """The Agg canvas of the book's figures: each PNG it writes carries :func:`png_text`.

    ``savefig`` and IPython's display of a figure (``print_figure``) both write
    through the canvas's ``print_png``; the figure is drawn once first, so that its
    tick labels are those the PNG shows. Give a figure one with ``BookCanvas(fig)``
    once pyplot no longer manages it (``kvbook.figures.figure`` and
    :mod:`kvbook.diagrams` do).
    """

    def print_png(self, filename_or_obj, *, metadata=None, pil_kwargs=None, **_savefig_options):
        # (matplotlib drops the options print_figure passes every print method, orientation and
        # the like, for its own canvases only: Agg's print_png takes none of them)
        FigureCanvasAgg.draw(self)  # print_figure has set the dpi the PNG is written at
        metadata = {**png_text(self.figure), **(metadata or {})}
        return super().print_png(filename_or_obj, metadata=metadata, pil_kwargs=pil_kwargs)


# --- layout checks ------------------------------------------------------------

def _visible_text(t) -> bool:
    return t.get_visible() and bool(t.get_text().strip())


def _overlap(a, b, tol: float) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _inside(inner, outer, tol: float) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.x1 <= outer.x1 + tol
            and inner.y0 >= outer.y0 - tol and inner.y1 <= outer.y1 + tol)


def layout_problems(fig, lines: bool = True, tol_px: float = 1.0) -> list[str]:
    """What a reader would see as broken in a drawn figure: clipped or colliding text and markers.

    The figure is drawn once (Agg) and the display extents of its text are
    compared with the figure, with their axes and with each other:

    * any text (titles, axis and tick labels, legend, annotations) that runs
      past the figure's edge;
    * a label placed inside an axes (``ax.text``, ``ax.annotate``,
      :func:`mark_vline`) that runs past the axes' edge;
    * two labels that overlap (labels inside the axes, the legend, axis
      labels and tick labels, all against each other);
    * a marker (``ax.plot(..., "o")``, ``ax.scatter``) cut by the axes edge
      or drawn outside the axes where it is clipped away;
    * with ``lines=True``, a label inside the axes crossed by a plotted line.

    Parameters
    ----------
    fig : matplotlib Figure
    lines : bool
        Also report labels crossed by lines.
    tol_px : float
        Overlaps and overhangs up to this many pixels are ignored.

    Returns
    -------
    list of str
        One sentence per problem, naming the text; empty when the figure is clean.

    Examples
    --------
    >>> fig, ax = new_figure((4, 3))
    >>> _ = ax.plot([1, 2, 3], [1, 4, 9], "o")
    >>> _ = ax.set_xlim(1, 3)
    >>> layout_problems(fig)[0]
    'marker at (1, 1) is cut by the axes edge'
    >>> close(fig)
    """
    import numpy as np
    from matplotlib.path import Path

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    fig_box = fig.bbox
    labels: list[tuple[str, Any]] = []  # (description, bbox)

    def ext(t):
        return t.get_window_extent(renderer)

    for t in fig.texts:
        if _visible_text(t):
            labels.append((f"figure text {t.get_text()!r}", ext(t)))
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        ax_box = ax.bbox
        inner: list[tuple[str, Any]] = []
        for t in ax.texts:
            if not _visible_text(t):
                continue
            box = ext(t)
            name = f"label {t.get_text().strip()!r}"
            inner.append((name, box))
            anchor = t.get_transform().transform(t.get_unitless_position()) \
                if not hasattr(t, "xy") else box.p0
            if ax_box.contains(*anchor) and not _inside(box, ax_box, tol_px):
                problems.append(f"{name} runs past the edge of its axes")
        labels.extend(inner)
        for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label):
            if _visible_text(t):
                labels.append((f"{'axis label' if t in (ax.xaxis.label, ax.yaxis.label) else 'title'} "
                               f"{t.get_text()!r}", ext(t)))
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not (lo <= tick.get_loc() <= hi) if tick.get_loc() is not None else True:
                    continue
                for t in (tick.label1, tick.label2):
                    if _visible_text(t):
                        labels.append((f"tick label {t.get_text()!r}", ext(t)))
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            labels.append(("the legend", legend.get_window_extent(renderer)))
        # markers
        for line in ax.lines:
            marker = line.get_marker()
            if not line.get_visible() or marker in (None, "None", "", " ", ",") or not line.get_clip_on():
                continue
            xy = np.asarray(line.get_xydata(), dtype=float)
            if xy.size == 0:
                continue
            pts = line.get_transform().transform(xy)
            r = line.get_markersize() * fig.dpi / 72.0 / 2.0
            for (x, y), (px, py) in zip(xy, pts):
                if not (np.isfinite(px) and np.isfinite(py)):
                    continue
                where = f"marker at ({x:g}, {y:g})"
                if not ax_box.contains(px, py):
                    problems.append(f"{where} is outside the axes and clipped away")
                elif (px - ax_box.x0 < r - tol_px or ax_box.x1 - px < r - tol_px
                      or py - ax_box.y0 < r - tol_px or ax_box.y1 - py < r - tol_px):
                    problems.append(f"{where} is cut by the axes edge")
        for coll in ax.collections:
            offsets = getattr(coll, "get_offsets", lambda: None)()
            sizes = getattr(coll, "get_sizes", lambda: None)()
            if offsets is None or sizes is None or len(sizes) == 0 or not coll.get_clip_on():
                continue
            pts = coll.get_offset_transform().transform(np.asarray(offsets, dtype=float))
            for k, (px, py) in enumerate(pts):
                r = np.sqrt(sizes[k % len(sizes)]) * fig.dpi / 72.0 / 2.0
                if not (np.isfinite(px) and np.isfinite(py)):
                    continue
                if not ax_box.contains(px, py):
                    problems.append(f"scatter point {k} is outside the axes and clipped away")
                elif min(px - ax_box.x0, ax_box.x1 - px, py - ax_box.y0, ax_box.y1 - py) < r - tol_px:
                    problems.append(f"scatter point {k} is cut by the axes edge")
        if lines:
            for name, box in inner:
                shrunk = box.padded(-2.0 * tol_px)
                if shrunk.width <= 0 or shrunk.height <= 0:
                    continue
                for line in ax.lines:
                    if not line.get_visible() or line.get_linestyle() in ("None", "", " "):
                        continue
                    xy = np.asarray(line.get_xydata(), dtype=float)
                    if len(xy) < 2:
                        continue
                    path = Path(line.get_transform().transform(xy))
                    if path.intersects_bbox(shrunk, filled=False):
                        who = line.get_label()
                        who = f"line {who!r}" if who and not who.startswith("_") else "a line"
                        problems.append(f"{name} is crossed by {who}")
                        break
    for name, box in labels:
        if not _inside(box, fig_box, tol_px):
            problems.append(f"{name} is clipped by the figure edge")
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            (a, abox), (b, bbox) = labels[i], labels[j]
            if _overlap(abox, bbox, tol_px):
                problems.append(f"{a} overlaps {b}")
    return problems
