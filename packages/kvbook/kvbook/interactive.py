"""The one interactive-figure helper every chapter uses.

A chapter describes its figure once, with a ``setup`` function that builds
the axes and artists and returns an ``update`` function that only mutates
them::

    from kvbook.interactive import Slider, Choice, interactive_figure

    def setup(fig):
        ax = fig.add_subplot()
        (line,) = ax.plot([], [])

        def update(batch, chip):        # one keyword per control
            line.set_data(...)          # mutate artists, never rebuild

        return update

    interactive_figure(
        setup,
        controls={
            "batch": Slider([1, 2, 4, 8, 16, 32], default=16, label="batch B"),
            "chip": Choice([("NVIDIA H100 SXM", "h100-sxm"), ("NVIDIA A100-80GB SXM", "a100-80gb")], default="h100-sxm"),
        },
        main="batch",
    )

What the reader gets depends on where the page is shown:

* **In a live kernel** (``make lab``) the object displays as ipywidgets
  controls above one reused image. Moving a control calls ``update`` with
  every control's value and re-renders the same figure with the Agg canvas;
  the figure is never rebuilt. A move redraws only the artists ``update``
  touched, over a cached background (blitting, see ``_Blitter``), with the
  pixels of a full redraw; limits or ticks that change redraw everything.
  ``render(**values)`` (build-time frames, the in-browser runtime) draws the
  same way.
* **In the published book** (no kernel) the object's ``text/html`` is used:
  the figure at its default values and an HTML range input over the
  ``main`` control whose frames were rendered at build time (with the other
  controls at their defaults), swapped by a few lines of inline JavaScript.
  A one-line note says the other controls need a live kernel.

matplotlib and ipywidgets are imported lazily; nothing here changes global
matplotlib settings.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import itertools
import json
import time
import warnings
from typing import Any, Callable, Mapping, Sequence

__all__ = ["Slider", "Choice", "InteractiveFigure", "interactive_figure"]

_ids = itertools.count()


def _format_value(value: Any) -> str:
    # Numbers grouped as everywhere in the book (kvmath.formatting.GROUP_SEP).
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        from kvmath.formatting import fmt_number

        return fmt_number(value)
    return str(value)


@functools.lru_cache(maxsize=1)
def preset_ids() -> frozenset:
    """Model and chip preset ids (``llama-2-7b``, ``h100-sxm``): names for code, never a label a reader sees.

    An id that is also its preset's display name (``gpt-oss-20b``, as OpenAI writes it) is left out.
    """
    import kvmath

    return frozenset(n for kind in (kvmath.Model, kvmath.Chip) for n in kind.presets()
                     if kind.preset(n).display_name != n)


def _checked_default(values: list, default: Any, what: str) -> Any:
    """``default`` (the first value when None), after checking that ``values`` do not repeat."""
    if len(set(map(repr, values))) != len(values):
        raise ValueError(f"{what} must not repeat, got {values!r}")
    if default is None:
        return values[0]
    if default not in values:
        raise ValueError(f"default must be one of {what} {values!r}, got {default!r}")
    return default


class Slider:
    """A slider over an explicit list of values (so log-spaced batches work).

    Parameters
    ----------
    values : sequence
        The values the slider steps through, in order (at least two, no
        duplicates). Numbers or strings.
    default : optional
        The starting value; must be one of ``values``. Defaults to the first.
    label : str, optional
        Text shown beside the control. Defaults to the control's name.
    fmt : callable, optional
        Turns a value into the text shown beside the slider.

    Raises
    ------
    ValueError
        If ``values`` has fewer than two entries or duplicates, or
        ``default`` is not one of them.

    Examples
    --------
    >>> s = Slider([1, 2, 4, 8], default=4, label="batch B")
    >>> s.default, s.index(8)
    (4, 3)
    >>> Slider([1, 2], default=3)
    Traceback (most recent call last):
    ...
    ValueError: default must be one of values [1, 2], got 3
    """

    def __init__(self, values: Sequence[Any], default: Any = None, label: str | None = None,
                 fmt: Callable[[Any], str] | None = None) -> None:
        values = list(values)
        if len(values) < 2:
            raise ValueError(f"values must hold at least two entries, got {values!r}")
        self.values = values
        self.default = _checked_default(values, default, "values")
        self.label = label
        self.fmt = fmt or _format_value

    @property
    def options(self) -> list[tuple[str, Any]]:
        """(text, value) pairs, in order."""
        return [(self.fmt(v), v) for v in self.values]

    def index(self, value: Any) -> int:
        """Position of ``value`` among the values."""
        return self.values.index(value)

    def _widget(self, description: str):
        import ipywidgets as widgets

        return widgets.SelectionSlider(
            options=self.options, value=self.default, description=description,
            continuous_update=True, readout=True,
            style={"description_width": "initial"},
            layout=widgets.Layout(width="min(100%, 520px)"),
        )

    def __repr__(self) -> str:
        return f"Slider({self.values!r}, default={self.default!r}, label={self.label!r})"


class Choice(Slider):
    """A drop-down over options: strings, or ``(label, value)`` pairs.

    Parameters
    ----------
    options : sequence
        Strings (shown as they are) or ``(label, value)`` pairs.
    default : optional
        The starting *value*; must be one of the options' values. Defaults
        to the first.
    label : str, optional
        Text shown beside the control.

    Raises
    ------
    ValueError
        If there are no options, a pair is malformed, values repeat,
        ``default`` is not one of the values, or a label is a model or chip
        preset id (the reader sees display names).

    Examples
    --------
    >>> c = Choice([("H100 SXM", "h100-sxm"), ("A100 80GB", "a100-80gb")])
    >>> c.default
    'h100-sxm'
    >>> c.options[1]
    ('A100 80GB', 'a100-80gb')
    """

    def __init__(self, options: Sequence[Any], default: Any = None,
                 label: str | None = None) -> None:
        options = list(options)
        if not options:
            raise ValueError("options must hold at least one entry, got []")
        pairs = []
        for opt in options:
            if isinstance(opt, tuple):
                if len(opt) != 2:
                    raise ValueError(f"options entries must be strings or (label, value) pairs, got {opt!r}")
                pairs.append((str(opt[0]), opt[1]))
            else:
                pairs.append((str(opt), opt))
        ids = [lab for lab, _ in pairs if lab in preset_ids()]
        if ids:
            raise ValueError(f"options show preset ids {ids} to the reader: label each with its display name "
                             "(kvbook.figures.model_options / chip_options)")
        values = [v for _, v in pairs]
        self.values = values
        self.default = _checked_default(values, default, "the options' values")
        self.label = label
        self._labels = {repr(v): lab for lab, v in pairs}
        self.fmt = lambda v: self._labels[repr(v)]

    def _widget(self, description: str):
        import ipywidgets as widgets

        return widgets.Dropdown(options=self.options, value=self.default, description=description,
                                style={"description_width": "initial"})

    def __repr__(self) -> str:
        return f"Choice({self.options!r}, default={self.default!r}, label={self.label!r})"


def _fast_png(rgba: Any) -> bytes:
    """An RGB PNG of an (h, w, 4) uint8 buffer, for live moves: no row filter, zlib level 1.

    About half the time of Pillow's ``compress_level=1`` on the book's figures
    (most of which is spent choosing row filters), for files about 10% larger;
    the pixels are the same as Pillow's.
    """
    import struct
    import zlib

    import numpy as np

    rgba = np.asarray(rgba)
    h, w = rgba.shape[:2]
    rows = np.empty((h, 3 * w + 1), np.uint8)
    rows[:, 0] = 0  # filter type None on every row
    rows[:, 1:].reshape(h, w, 3)[...] = rgba[:, :, :3]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 1))
            + chunk(b"IEND", b""))


class _Blitter:
    """Redraw only the artists an ``update`` touched, over a cached background.

    matplotlib marks an artist *stale* whenever one of its setters runs
    (``set_data``, ``set_text``, ``set_width``...). After every draw the
    blitter clears those flags, so after the next ``update`` the stale
    artists are the ones it touched. A full draw with those artists marked
    animated gives the background (``canvas.copy_from_bbox``); each later
    move restores it and draws only them, in the order ``Figure.draw`` would.

    The pixels are those of a full redraw as long as no artist kept in the
    background is drawn, in that order, above a redrawn one where they
    meet. That is checked on every move, from the artists' drawn extents
    (for lines, their paths): an artist that a redrawn one reaches joins
    the redrawn ones (a later axes whose background it reaches, whole), and
    the figure is drawn in full once.

    A full redraw also happens on the first draw, when an artist not yet
    redrawn is touched, when an artist is added or removed, when any axes'
    position, limits, scales, tick locations or tick labels, an axis label
    (their text, colour, size) or a background patch change, and after
    anyone else drew the figure.
    Not seen: changes that bypass matplotlib's setters (editing an artist's
    data array in place) and tick styling (``tick_params``) in ``update``;
    pass ``blit=False`` for such a figure.
    """

    def __init__(self, figure: Any) -> None:
        self.figure = figure
        self.background = None
        self.touched: set[int] = set()  # ids of artists update has touched
        self.promoted: set[int] = set()  # ids of untouched artists redrawn for order's sake
        self.whole: set[int] = set()  # ids of axes redrawn whole
        self.redraw: list = []  # (draw-order index, artist), in draw order
        self.kept: list = []  # (index, artist, extent, id to promote): background after redrawn
        self.extents: dict[int, Any] = {}  # of the redrawn artists update does not touch
        self.signature: Any = None
        self.structure: Any = None
        self.drawn = False
        self.external = False
        self._own_draw = False
        self.full_draws = 0
        self.blits = 0
        figure.canvas.mpl_connect("draw_event", self._on_draw_event)

    def _on_draw_event(self, event: Any) -> None:
        if not self._own_draw:
            self.external = True  # someone else drew: the stale flags were cleared

    # -- the figure's draw order, as Figure.draw and Axes.draw have it ------------
    def _figure_items(self) -> list:
        fig = self.figure
        return sorted((a for a in fig.get_children() if a is not fig.patch and not a.get_animated()),
                      key=lambda a: a.get_zorder())

    @staticmethod
    def _axes_items(ax: Any) -> list:
        kids = ax.get_children()
        kids.remove(ax.patch)
        if not (ax.axison and ax._frameon):
            kids = [k for k in kids if k not in ax.spines.values()]
        if not ax.axison:
            kids = [k for k in kids if k not in ax._axis_map.values()]
        return sorted((k for k in kids if not k.get_animated()), key=lambda a: a.get_zorder())

    def _units(self) -> list:
        """(artist, id to promote) in draw order: axes patches, axes children, figure artists."""
        from matplotlib.axes import Axes

        out = []
        for item in self._figure_items():
            if isinstance(item, Axes) and id(item) not in self.whole:
                out.append((item.patch, id(item)))  # drawn by Axes.draw, whatever its flags
                out.extend((kid, id(kid)) for kid in self._axes_items(item))
            else:
                out.append((item, id(item)))
        return out

    @staticmethod
    def _subtree(artist: Any) -> list:
        out, todo = [], [artist]
        while todo:
            a = todo.pop()
            out.append(a)
            todo.extend(a.get_children())
        return out

    def _watched(self) -> list:
        """(artist, the artists whose stale flags say it changed), for every artist but
        the axes' patches and axis objects (their changes are compared in _signature)."""
        from matplotlib.axes import Axes
        from matplotlib.axis import Axis

        out = []
        for item in self._figure_items():
            if isinstance(item, Axes):
                out.extend((kid, self._subtree(kid)) for kid in item.get_children()
                           if kid is not item.patch and not isinstance(kid, Axis))
            else:
                out.append((item, self._subtree(item)))
        return out

    def _clean(self, watched: list) -> None:
        """Clear the stale flags that the next update's changes will set again."""
        self.figure.patch._stale = False
        for _, arts in watched:
            for a in arts:
                a._stale = False
        for ax in self.figure.axes:
            ax.patch._stale = False

    def _signature(self) -> tuple:
        """What forces a full redraw when it changes: layout, limits, scales, ticks, axis labels."""
        fig = self.figure
        sig: list = [fig.canvas.get_width_height()]
        for ax in fig.axes:
            sig += [tuple(ax.bbox.bounds), ax.get_xlim(), ax.get_ylim(), ax.get_xscale(),
                    ax.get_yscale(), ax.axison, ax.get_visible()]
            for axis in ax._axis_map.values():
                major = axis.get_majorticklocs()
                labels = tuple(axis.major.formatter.format_ticks(major)) if len(major) else ()
                label = axis.label
                # minor ticks follow from the limits and their locator (and cost
                # more to compute: LogLocator's minor ticks)
                sig += [axis.get_visible(), tuple(major), labels, id(axis.get_minor_locator()),
                        id(axis.get_minor_formatter()),
                        label.get_text(), label.get_visible(), label.get_color(),
                        label.get_fontsize(), label.get_rotation()]
        return tuple(sig)

    def _relabelled(self) -> bool:
        """Whether update touched the background patches (drawn under everything)."""
        fig = self.figure
        return fig.patch._stale or any(ax.patch._stale for ax in fig.axes)

    def _structure(self) -> tuple:
        from matplotlib.axes import Axes

        out = []
        for item in self._figure_items():
            out.append(id(item))
            if isinstance(item, Axes):
                out.append(tuple(map(id, item.get_children())))
        return tuple(out)

    # -- drawing ------------------------------------------------------------------
    def draw(self) -> str:
        """Draw the figure into its Agg buffer; returns "full" or "blit"."""
        fig = self.figure
        if not self.drawn or fig.subfigs:
            self._own_draw = True
            try:
                fig.canvas.draw()
            finally:
                self._own_draw = False
            self.full_draws += 1
            self.drawn, self.external, self.background = True, False, None
            self._clean(self._watched())
            self.signature, self.structure = self._signature(), self._structure()
            return "full"
        for ax in fig.axes:  # as Figure.draw does before drawing
            locator = ax.get_axes_locator()
            ax.apply_aspect(locator(ax, fig.canvas.get_renderer()) if locator else None)
        watched = self._watched()
        touched = {id(a) for a, arts in watched if any(x._stale for x in arts)}
        for ax in fig.axes:
            # a legend at loc="best" is placed at draw time, away from the data:
            # it moves with what update touched without being touched itself
            legend = ax.get_legend()
            if (legend is not None and legend._loc == 0
                    and any(id(k) in touched for k in ax.get_children())):
                touched.add(id(legend))
        signature, structure = self._signature(), self._structure()
        full = (self.background is None or self.external or signature != self.signature
                or structure != self.structure or not touched <= self.touched
                or self._relabelled())
        if structure != self.structure:  # forget artists that were removed
            self.touched, self.promoted, self.whole = set(), set(), set()
        self.touched |= touched
        self.signature, self.structure = signature, structure
        if not full and not self._blit():
            full = True
        if full:
            self._full()
            watched = self._watched()
        self._clean(watched)
        return "full" if full else "blit"

    def _full(self) -> None:
        """Draw the background (all but the redrawn artists), cache it, draw those over it."""
        fig, canvas = self.figure, self.figure.canvas
        for _ in range(len(self._units()) + 1):  # a pass that fails promotes an artist
            units = self._units()
            redrawn = {i for i, (a, key) in enumerate(units)
                       if id(a) in self.touched or key in self.promoted or key in self.whole}
            self.redraw = [(i, units[i][0]) for i in sorted(redrawn)]
            for _, a in self.redraw:
                a.set_animated(True)
            self._own_draw = True
            try:
                canvas.draw()
            finally:
                self._own_draw = False
                for _, a in self.redraw:
                    a.set_animated(False)
            self.full_draws += 1
            self.background = canvas.copy_from_bbox(fig.bbox)
            self.external = False
            renderer = canvas.get_renderer()
            for _, a in self.redraw:
                a.draw(renderer)
            first = min(redrawn, default=len(units))
            self.kept = [(i, a, _extent(a, renderer), key) for i, (a, key) in enumerate(units)
                         if i > first and i not in redrawn]
            self.kept = [k for k in self.kept if k[2] is not None]
            self.extents = {id(a): _extent(a, renderer) for _, a in self.redraw
                            if id(a) not in self.touched}
            if self._in_order(renderer):
                return

    def _in_order(self, renderer: Any) -> bool:
        """False (and what was crossed promoted) if a redrawn artist reaches one that the
        background holds and that should be drawn above it."""
        ok = True
        for i, a in self.redraw:
            later = [k for k in self.kept
                     if k[0] > i and k[3] not in self.promoted and k[3] not in self.whole]
            if not later:
                continue
            box = self.extents[id(a)] if id(a) in self.extents else _extent(a, renderer)
            if box is None:
                continue
            for k in later:
                if k[3] not in self.promoted and k[3] not in self.whole and _meet(a, box, k[1], k[2]):
                    (self.whole if k[1] is not None and k[3] != id(k[1]) else self.promoted).add(k[3])
                    ok = False
        return ok

    def _blit(self) -> bool:
        canvas = self.figure.canvas
        canvas.restore_region(self.background)
        renderer = canvas.get_renderer()
        for _, a in self.redraw:
            a.draw(renderer)
        if not self._in_order(renderer):
            return False
        self.blits += 1
        return True


def _extent(artist: Any, renderer: Any):
    """Where ``artist`` draws, in display pixels (clipped as drawn, padded for
    antialiasing); None if it draws nothing. Errs on the large side."""
    import numpy as np
    from matplotlib.axis import Axis
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    if not artist.get_visible():
        return None
    if isinstance(artist, Line2D) and len(artist.get_xydata()) == 0:
        return None
    fig = artist.figure  # (not get_figure(root=True): matplotlib 3.8, in Pyodide 0.27, lacks it)
    try:
        box = artist.get_tightbbox(renderer)
    except Exception:  # pragma: no cover - an artist without extents: all of the figure
        return fig.bbox
    if isinstance(artist, Text) and artist.get_bbox_patch() is not None and box is not None:
        # a text's box (bbox=...) is drawn around it, larger than its extent
        patch = artist.get_bbox_patch()
        artist.update_bbox_position_size(renderer)
        box = type(box).union([box, patch.get_window_extent(renderer)])
    if isinstance(artist, Axis):
        # tick labels are in the tight box; grid lines and ticks are not
        ticks = max(artist.majorTicks[0]._size if artist.majorTicks else 0,
                    artist.minorTicks[0]._size if artist.minorTicks else 0)
        grid = artist.axes.bbox.padded(ticks * fig.dpi / 72)
        box = grid if box is None else type(box).union([box, grid])
    if box is None or not np.all(np.isfinite(box.extents)) or box.width < 0 or box.height < 0:
        return None
    if box.width == 0 and box.height == 0 and not box.x0 and not box.y0:
        return fig.bbox  # the default extent of an artist that does not say
    # Extents follow the geometry: strokes reach half a line width beyond it
    # (a projecting cap's corner, 0.71 of it) and a legend's shadow a few points.
    return box.padded(2 + _reach_pt(artist) * fig.dpi / 72)


def _reach_pt(artist: Any) -> float:
    """How far (points) ``artist``'s strokes may reach past its geometric extent."""
    import numpy as np
    from matplotlib.legend import Legend
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    widths = [0.0]
    if hasattr(artist, "get_linewidth"):
        lw = np.atleast_1d(artist.get_linewidth())
        widths.append(0.75 * float(lw.max()) if lw.size else 0.0)
    if isinstance(artist, Line2D) and artist.get_marker() not in (None, "None", "", " "):
        widths.append(artist.get_markersize() / 2 + artist.get_markeredgewidth())
    if isinstance(artist, Text):
        for patch in (artist.get_bbox_patch(), getattr(artist, "arrow_patch", None)):
            if patch is not None:
                widths.append(0.75 * patch.get_linewidth())
    if isinstance(artist, Legend):
        widths.append(0.75 * artist.legendPatch.get_linewidth() + (6.0 if artist.shadow else 0.0))
    return max(widths)


def _meet(a: Any, a_box: Any, b: Any, b_box: Any) -> bool:
    """Whether artists a and b (with their _extent boxes) may share a pixel."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import Bbox

    if not a_box.overlaps(b_box):
        return False
    line, box = (a, b_box) if isinstance(a, Line2D) else (b, a_box) if isinstance(b, Line2D) else (None, None)
    if line is None or (isinstance(a, Line2D) and isinstance(b, Line2D)):
        return True
    if line.get_clip_on() and line.get_clip_box() is not None:
        box = Bbox.intersection(box, line.get_clip_box())
        if box is None:
            return False
    box = box.padded(_reach_pt(line) * line.figure.dpi / 72 + 2)
    path = line.get_transform().transform_path(line.get_path())
    return bool(path.intersects_bbox(box, filled=False))


class InteractiveFigure:
    """A figure with controls; see :func:`interactive_figure` (the way to make one)."""

    def __init__(self, setup: Callable, controls: Mapping[str, Slider], main: str | None = None,
                 figsize: tuple[float, float] = (7.0, 4.0), dpi: float = 100.0,
                 max_frames: int = 24, alt: str | None = None,
                 relayout: bool = False, caption: str | None = None,
                 pixel_ratio: float = 2.0, fixed_limits: bool = False, blit: bool = True) -> None:
        if not callable(setup):
            raise ValueError(f"setup must be a callable setup(fig) -> update, got {setup!r}")
        if not isinstance(controls, Mapping) or not controls:
            raise ValueError(f"controls must be a non-empty mapping name -> Slider/Choice, got {controls!r}")
        for name, control in controls.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"controls keys must be Python identifiers (they become keyword "
                                 f"arguments of update), got {name!r}")
            if not isinstance(control, Slider):
                raise ValueError(f"controls[{name!r}] must be a Slider or Choice, got {control!r}")
        if main is None:
            sliders = [n for n, c in controls.items() if not isinstance(c, Choice)]
            main = sliders[0] if sliders else next(iter(controls))
        if main not in controls:
            raise ValueError(f"main must name one of the controls {list(controls)}, got {main!r}")
        if len(controls[main].values) > max_frames:
            raise ValueError(
                f"controls[{main!r}] has {len(controls[main].values)} values, more than "
                f"max_frames={max_frames} frames for the published page; use fewer values")
        if len(figsize) != 2 or min(figsize) <= 0:
            raise ValueError(f"figsize must be two positive numbers (inches), got {figsize!r}")
        if not dpi > 0:
            raise ValueError(f"dpi must be > 0, got {dpi!r}")
        if not pixel_ratio >= 1:
            raise ValueError(f"pixel_ratio must be >= 1, got {pixel_ratio!r}")

        from matplotlib.figure import Figure

        from . import plots

        self.controls = dict(controls)
        self.main = main
        self.call: dict | None = None  # set by kvbook.figures.figure: the function call that made this figure
        self.dpi = float(dpi)  # CSS pixels per inch: the size the image is shown at
        self.pixel_ratio = float(pixel_ratio)  # rendered pixels per CSS pixel (HiDPI)
        self.caption = caption
        self.alt = alt if alt is not None else (caption or "interactive figure")
        self.relayout = relayout
        self._style = plots.style

        def build(layout):
            fig = Figure(figsize=figsize, dpi=self.dpi * self.pixel_ratio, layout=layout)
            plots.BookCanvas(fig)
            return fig, setup(fig)

        with self._style():
            # The book's style lays figures out with constrained layout. A setup
            # that sets its own margins (fig.subplots_adjust) would be refused
            # by it with a warning, so such a setup gets a figure without a
            # layout engine instead.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.figure, update = build(None)
            refused = [w for w in caught if "subplots_adjust" in str(w.message)]
            if refused:
                self.figure, update = build("none")
            for w in caught:
                if w not in refused:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if not callable(update):
            raise ValueError(f"setup must return the update function, got {update!r}")
        self.update = update
        self.values = {name: c.default for name, c in self.controls.items()}
        # Unique within a kernel (one page = one notebook = one kernel) and the
        # same on every run, so refreshed notebooks do not churn.
        self._uid = f"kvmath-fig-{next(_ids)}"
        self._widget = None
        self._image = None
        self.timings_s: list[float] = []
        self.fixed_limits = bool(fixed_limits)
        self._limits: list | None = None  # (axes, xlim, ylim) held in the current frame
        self._limit_sets: dict[tuple, list] = {}  # those limits, by the other controls' values
        self._autoscale: list = []  # (axes, autoscale x on, y on) before any limits were held
        # Moves redraw only what update touched (see _Blitter); blit=False
        # redraws the whole figure every time (the reference the tests use).
        self._blitter = _Blitter(self.figure) if blit else None
        self.last_draw: str | None = None  # "full" or "blit": how the last render drew
        self.render(**self.values)  # first draw at the defaults: fixes the layout

    # -- rendering ---------------------------------------------------------
    def render(self, fast: bool = False, **values: Any) -> bytes:
        """Call ``update`` with the given values (others unchanged) and return a PNG.

        Parameters
        ----------
        fast : bool
            Use the cheapest PNG encoding (for live slider moves): the same
            pixels, a larger file.
        **values
            Control name -> value.

        Raises
        ------
        ValueError
            If a name is not a control, or a value is not one of its values.
        """
        for name, value in values.items():
            if name not in self.controls:
                raise ValueError(f"unknown control {name!r}; controls are {list(self.controls)}")
            if value not in self.controls[name].values:
                raise ValueError(f"{name} must be one of {self.controls[name].values!r}, got {value!r}")
        self.values.update(values)
        with self._style():
            self._apply()
            # Draw the one figure with Agg and encode its pixels directly:
            # cheaper than savefig, which lays out and draws a second time.
            # Once the background is cached, a move restores it and redraws
            # only the artists update touched (same pixels, see _Blitter).
            canvas = self.figure.canvas
            engine = self.figure.get_layout_engine()
            if self._blitter is None:
                canvas.draw()
                self.last_draw = "full"
            else:
                if self.relayout and engine is not None and self._blitter.drawn:
                    # Solve the layout now, once, as the draw would (a second
                    # solve moves the axes a little): if no axes moved, the
                    # move can still blit.
                    engine.execute(self.figure)
                    self.figure.set_layout_engine("none")
                    try:
                        self.last_draw = self._blitter.draw()
                    finally:
                        self.figure.set_layout_engine(engine)
                else:
                    self.last_draw = self._blitter.draw()
            if not self.relayout and self.figure.get_layout_engine() is not None:
                # Lay out once (constrained layout, at the default values) and
                # keep those axes positions: re-solving the layout on every
                # move costs about half the time of a draw.
                self.figure.set_layout_engine("none")
            if fast:
                return _fast_png(canvas.buffer_rgba())
            from PIL import Image, PngImagePlugin

            from .plots import png_text

            # the smallest text, for the phone check (kvbook.plots.MIN_TEXT_KEY); live moves
            # (fast) are not checked and skip it
            info = PngImagePlugin.PngInfo()
            for key, value in png_text(self.figure).items():
                info.add_text(key, value)
            image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
            buf = io.BytesIO()
            image.convert("RGB").save(buf, format="png", compress_level=6, pnginfo=info)
        return buf.getvalue()

    def _apply(self) -> None:
        """Call ``update`` at the current values and hold the axes' limits (inside the style)."""
        if self.fixed_limits:
            self._limits = self._held_limits()
        self.update(**self.values)
        if self._limits is not None:
            for ax, xlim, ylim in self._limits:
                ax.set_xlim(xlim)
                ax.set_ylim(ylim)

    def _held_limits(self) -> list:
        """The limits to hold: for every axes, the union of its limits over the main
        control's values at the other controls' current values (computed once per
        combination of those). Moving the main control keeps the axes still; moving
        another one rescales them to what its frames need."""
        import math

        key = tuple(c.index(self.values[n]) for n, c in self.controls.items() if n != self.main)
        if key in self._limit_sets:
            return self._limit_sets[key]
        if not self._limit_sets:  # before any limits are held: how each axes scales itself
            self._autoscale = [(ax, ax.get_autoscalex_on(), ax.get_autoscaley_on())
                               for ax in self.figure.axes]
        for ax, x_on, y_on in self._autoscale:  # holding limits switched autoscaling off
            ax.set_autoscalex_on(x_on)
            ax.set_autoscaley_on(y_on)
        seen: dict[int, list] = {}
        for value in self.controls[self.main].values:
            self.update(**{**self.values, self.main: value})
            for ax in self.figure.axes:
                entry = seen.setdefault(id(ax), [ax, [math.inf, -math.inf], [math.inf, -math.inf]])
                for k, lim in ((1, ax.get_xlim()), (2, ax.get_ylim())):
                    entry[k] = [min(entry[k][0], *lim), max(entry[k][1], *lim)]
        limits = []
        for ax, xlim, ylim in seen.values():
            # keep an inverted axis inverted
            if ax.xaxis_inverted():
                xlim = xlim[::-1]
            if ax.yaxis_inverted():
                ylim = ylim[::-1]
            limits.append((ax, tuple(xlim), tuple(ylim)))
        self._limit_sets[key] = limits
        return limits

    def layout_problems(self) -> list[str]:
        """Render every value of every control and report clipped or colliding text and markers.

        Uses :func:`kvbook.plots.layout_problems` on each frame: every value
        of each control in turn, the other controls at their defaults (the
        frames a reader reaches by moving one control). Each problem is
        prefixed with the frame, e.g. ``"batch B = 64: label 'S = 1' runs
        past the edge of its axes"``. A chapter's test asserts the list is empty.
        """
        from .plots import layout_problems

        defaults = {name: c.default for name, c in self.controls.items()}
        previous = dict(self.values)
        out: list[str] = []
        for k, (name, control) in enumerate(self.controls.items()):
            for value in control.values:
                if k and value == control.default:
                    continue  # the all-defaults frame, checked under the first control
                self.render(fast=True, **{**defaults, name: value})
                with self._style():
                    for problem in layout_problems(self.figure):
                        out.append(f"{control.label or name} = {control.fmt(value)}: {problem}")
        self.render(**previous)
        return out

    def frames(self) -> list[bytes]:
        """PNG frames over the main control's values, the others at their defaults."""
        defaults = {name: c.default for name, c in self.controls.items()}
        previous = dict(self.values)
        main = self.controls[self.main]
        out = []
        for value in main.values:
            out.append(self.render(**{**defaults, self.main: value}))
        self.render(**previous)  # leave the figure as the live controls had it
        return out

    # -- published page ------------------------------------------------------
    def to_html(self) -> str:
        """Self-contained HTML: default image + a range input over the main control.

        No external script is loaded. The frames are base64 PNGs in a JSON
        block; the book build (``packages/kvbook/kvbook/sphinx/offline_assets.py``) moves them into
        image files beside the page, so a reader downloads the default frame
        only, and the others when first touching the figure. The image is
        rendered at ``pixel_ratio`` times its CSS size and shown responsive
        (``width: 100%`` up to its CSS width). The slider announces its value
        (``aria-valuetext``: "batch B 64"), the readout is ``aria-live`` and
        a one-line hint says how to move it.
        """
        main = self.controls[self.main]
        frames = [f"data:image/png;base64,{base64.b64encode(p).decode('ascii')}" for p in self.frames()]
        labels = [main.fmt(v) for v in main.values]
        start = main.index(main.default)
        uid = self._uid
        main_name = main.label or self.main
        main_label = html.escape(main_name)
        alts = [f"{self.alt} ({main_name} = {lab})" for lab in labels]
        width_px = int(round(self.figure.get_figwidth() * self.dpi))
        height_px = int(round(self.figure.get_figheight() * self.dpi))
        others = [(c.label or n, c.fmt(c.default)) for n, c in self.controls.items() if n != self.main]
        if others:
            fixed = ", ".join(f"{html.escape(lab)} = {html.escape(val)}" for lab, val in others)
            note = (f"Shown with {fixed}. Changing those needs a live kernel: run "
                    f"<code>make lab</code> and open this notebook.")
        else:
            note = "Frames were rendered when the book was built; run <code>make lab</code> for the live version."
        # every control, for the page's live layer (packages/kvbook/kvbook/live/): it builds the
        # other controls before Python loads, and Python then drives them
        controls = [{"name": n, "label": c.label or n,
                     "kind": "choice" if isinstance(c, Choice) else "slider",
                     "labels": [c.fmt(v) for v in c.values], "default": c.index(c.default)}
                    for n, c in self.controls.items()]
        # a figure made by a kvbook.figures function says which call made it: the page's live layer repeats it
        call = "" if self.call is None else f' data-call="{html.escape(json.dumps(self.call))}"'
        data = json.dumps({"frames": frames, "labels": labels, "alts": alts,
                           "name": main_name, "main": self.main,
                           "controls": controls}).replace("</", "<\\/")
        return (
            f'<div class="kvmath-interactive" id="{uid}" data-main="{html.escape(self.main)}"{call}>\n'
            f'<img class="kvmath-interactive-img" src="{frames[start]}" alt="{html.escape(alts[start])}" '
            f'width="{width_px}" height="{height_px}" '
            f'style="width:100%;max-width:{width_px}px;height:auto;">\n'
            f'<p class="kvmath-interactive-hint" id="{uid}-hint">Drag the slider, or focus it and use '
            f'\u2190/\u2192, to change {main_label}.</p>\n'
            f'<div class="kvmath-interactive-controls" style="display:flex;gap:0.75em;align-items:center;">'
            f'<label for="{uid}-range">{main_label}</label>'
            f'<input type="range" id="{uid}-range" class="kvmath-interactive-range" min="0" '
            f'max="{len(frames) - 1}" step="1" value="{start}" '
            f'aria-valuetext="{main_label} {html.escape(labels[start])}" aria-describedby="{uid}-hint" '
            f'style="flex:0 1 22em;">'
            f'<output for="{uid}-range" class="kvmath-interactive-value" aria-live="polite">'
            f'{html.escape(labels[start])}</output>'
            f'</div>\n'
            f'<p class="kvmath-interactive-note" style="font-size:0.85em;opacity:0.8;margin:0.2em 0 0 0;">{note}</p>\n'
            f'<script type="application/json" class="kvmath-interactive-data">{data}</script>\n'
            f'<script>(function(){{var r=document.getElementById("{uid}");if(!r)return;'
            f'var d=JSON.parse(r.querySelector(".kvmath-interactive-data").textContent);'
            f'var i=r.querySelector(".kvmath-interactive-img"),s=r.querySelector(".kvmath-interactive-range"),'
            f'o=r.querySelector(".kvmath-interactive-value"),warm=false;'
            # frames are fetched when the reader first comes near the figure
            f'function pre(){{if(warm)return;warm=true;d.frames.forEach(function(u){{(new Image()).src=u;}});}}'
            f'["pointerenter","touchstart","focusin"].forEach(function(e){{r.addEventListener(e,pre,{{passive:true}});}});'
            f's.addEventListener("input",function(){{var k=s.value;i.src=d.frames[k];i.alt=d.alts[k];'
            f'o.textContent=d.labels[k];s.setAttribute("aria-valuetext",d.name+" "+d.labels[k]);}});'
            f'}})();</script>\n'
            f'</div>'
        )

    # -- live kernel ----------------------------------------------------------
    def widget(self):
        """The ipywidgets view (built once): controls above one reused Image."""
        if self._widget is None:
            import ipywidgets as widgets

            self._controls_w = {name: c._widget(c.label or name) for name, c in self.controls.items()}
            # Show the PNG at its own pixel size: stretched to the output's
            # width it would look blurred.
            width_px = int(round(self.figure.get_figwidth() * self.dpi))
            self._image = widgets.Image(value=self.render(fast=True, **self.values), format="png",
                                        layout=widgets.Layout(width=f"{width_px}px",
                                                              max_width="100%", height="auto"))
            for name, w in self._controls_w.items():
                w.observe(self._on_change, names="value")
            self._widget = widgets.VBox([widgets.HBox(list(self._controls_w.values()),
                                                      layout=widgets.Layout(flex_flow="row wrap")),
                                         self._image])
        return self._widget

    def _on_change(self, change: Any) -> None:
        t0 = time.perf_counter()
        values = {name: w.value for name, w in self._controls_w.items()}
        self._image.value = self.render(fast=True, **values)
        self.timings_s.append(time.perf_counter() - t0)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        try:
            import ipywidgets  # noqa: F401
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - no live front end possible
            return bundle
        if get_ipython() is not None and getattr(get_ipython(), "kernel", None) is not None:
            view = self.widget()._repr_mimebundle_()
            if view:
                bundle.update({k: v for k, v in view.items() if k != "text/plain"})
        return bundle

    def __repr__(self) -> str:
        return (f"<InteractiveFigure main={self.main!r} controls={list(self.controls)} "
                f"values={self.values!r}>")


def interactive_figure(setup: Callable, controls: Mapping[str, Slider], main: str | None = None,
                       figsize: tuple[float, float] = (7.0, 4.0), dpi: float = 100.0,
                       max_frames: int = 24, alt: str | None = None,
                       relayout: bool = False, caption: str | None = None,
                       pixel_ratio: float = 2.0, fixed_limits: bool = False,
                       blit: bool = True) -> InteractiveFigure:
    """Make the book's interactive figure from a ``setup(fig) -> update`` function.

    Parameters
    ----------
    setup : callable
        ``setup(fig)`` adds axes and artists to the (empty) matplotlib
        figure and returns ``update(**values)``, which receives one keyword
        argument per control and only mutates artists (``set_data``,
        ``set_text``, ``set_ylim``...).
    controls : mapping of str to Slider or Choice
        Control name (the keyword passed to ``update``) -> control.
    main : str, optional
        The control the published page keeps working without a kernel, by
        swapping frames rendered at build time. Defaults to the first Slider.
    figsize : (float, float)
        Inches.
    dpi : float
        CSS pixels per inch: the size the image is shown at (a 7 in figure
        at 100 is 700 px wide, so 9 pt text is 12.5 px).
    max_frames : int
        Most values the main control may have (one frame each).
    alt : str, optional
        Alternative text of the image (each frame adds the main control's
        value). Defaults to ``caption``.
    relayout : bool
        Re-solve the figure's layout on every move. By default the layout is
        solved once, at the default values, and kept (faster); set this when
        ``update`` changes tick labels so much that they would be clipped.
        A move still blits when the solved layout did not move any axes.
    caption : str, optional
        The figure's caption, used as alt text when ``alt`` is not given
        (the page's numbered caption comes from the chapter, see STYLE.md).
    pixel_ratio : float
        Rendered pixels per CSS pixel (2: sharp on HiDPI screens).
    fixed_limits : bool
        Hold every axes at the union of its limits over all frames of the
        main control, so bars grow instead of the axis jumping; moving
        another control rescales the axes to that control's frames.
    blit : bool
        Redraw only the artists ``update`` touched over a cached background
        (same pixels as a full redraw, several times faster); a full redraw
        still happens when limits, ticks or the set of artists change. Set
        False for an ``update`` that edits data arrays in place or restyles
        ticks, which the blitting cannot see.

    Returns
    -------
    InteractiveFigure
        Display it (last expression of a cell). In a live kernel it shows
        ipywidgets controls; its ``text/html`` is the published fallback.

    Raises
    ------
    ValueError
        Naming the argument: empty or malformed ``controls``, ``main`` not a
        control, too many frames, ``setup`` not returning a callable.

    Examples
    --------
    >>> def setup(fig):
    ...     ax = fig.add_subplot()
    ...     (line,) = ax.plot([0, 1], [0, 1])
    ...     def update(slope):
    ...         line.set_ydata([0, slope])
    ...     return update
    >>> f = interactive_figure(setup, {"slope": Slider([1, 2, 4], default=2)})
    >>> len(f.frames())
    3
    >>> 'type="range"' in f.to_html()
    True
    >>> interactive_figure(setup, {"slope": Slider([1, 2])}, main="batch")
    Traceback (most recent call last):
    ...
    ValueError: main must name one of the controls ['slope'], got 'batch'
    """
    return InteractiveFigure(setup, controls, main=main, figsize=figsize, dpi=dpi,
                             max_frames=max_frames, alt=alt, relayout=relayout, caption=caption,
                             pixel_ratio=pixel_ratio, fixed_limits=fixed_limits, blit=blit)
