"""Result tables: an HTML table on the page, plain text for nbval and terminals.

The book shows every result with more than three rows, and every check of a
number against its source, as a table made here (no pandas). A
:class:`Table` displays in a notebook as HTML (``_repr_html_``: numbers
right-aligned, units in the headers, digits grouped the one way the whole
book groups them, :data:`kvmath.formatting.GROUP_SEP`) and prints as aligned
plain text (``__repr__`` / ``str``, the ``text/plain`` output).

Checked cells (nbval)
---------------------
nbval compares *every* output of a checked cell, ``text/html`` included. The
HTML made here is deterministic (no ids, no inline styles, no timestamps;
the look comes from the book's stylesheet through ``class`` names), and
``tests/nbval_sanitize.cfg`` replaces every ``<table class="kvmath-table">``
with a placeholder before comparing, so a restyled table never fails a
check: the numbers are checked in the ``text/plain`` form. The recommended
check cell is therefore one cell, tagged ``nbval-check-output`` (and
``remove-input`` when its code is plumbing), whose last expression is the
table::

    check_table([
        ("KV cache per token", "0.5 MB", fmt_bytes(kv), "the source rounds"),
        ...
    ])

Do not ``print(table)`` in a cell that also displays it: the text would show
on the page twice.

Examples
--------
>>> t = Table(["model", ("KV per token", "KiB"), ("batch", None)],
...           [["llama-2-7b", 512.0, 64], ["llama-2-70b", 320.0, 1024]],
...           formats={1: ".1f"})
>>> print(t)
model        KV per token (KiB)  batch
-----------  ------------------  -----
llama-2-7b                512.0     64
llama-2-70b               320.0  1\u2009024
>>> t.to_html().splitlines()[2]
'<thead><tr><th scope="col">model</th><th scope="col" class="kvmath-num">KV per token (KiB)</th><th scope="col" class="kvmath-num">batch</th></tr></thead>'
"""

from __future__ import annotations

import html
import numbers
from typing import Any, Callable, Mapping, Sequence, Union

from kvmath.formatting import fmt_number

__all__ = ["Table", "Dropdown", "check_table", "CHECK_COLUMNS"]

Header = Union[str, tuple]
Format = Union[str, Callable[[Any], str], None]

#: Columns of a check table: what is checked, the source's figure, ours, and why they differ.
CHECK_COLUMNS = ("quantity", "the source says", "exact", "why they differ")

_MISSING = "\u2013"  # en dash for an empty cell


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _header_text(header: Header) -> str:
    if isinstance(header, tuple):
        if len(header) != 2:
            raise ValueError(f"columns entries must be a name or a (name, unit) pair, got {header!r}")
        name, unit = header
        return f"{name} ({unit})" if unit else str(name)
    if not isinstance(header, str):
        raise ValueError(f"columns entries must be a name or a (name, unit) pair, got {header!r}")
    return header


class Table:
    """Rows shown as an HTML table with a plain-text fallback.

    Parameters
    ----------
    columns : sequence of str or (name, unit)
        Column headers. A ``(name, unit)`` pair is shown as "name (unit)",
        so units live in the header and cells hold bare numbers.
    rows : sequence of sequences
        One entry per column in each row. Numbers are formatted with the
        column's format (below) and grouped; strings are shown as given;
        ``None`` shows as an en dash.
    caption : str, optional
        Shown above the HTML table (``<caption>``) and as a first line of the
        text form.
    formats : mapping, optional
        Column index or header text -> format spec (``".2f"``) or callable
        ``value -> str`` for that column's numbers. Default: integers whole,
        other floats ``"g"``, both grouped.
    align : str, optional
        One letter per column, ``"l"`` or ``"r"``. Default: a column whose
        cells are all numbers (or empty) is right-aligned, others left.
    text_columns : sequence of int or str, optional
        The columns (indices or header texts) the plain-text form keeps;
        default all. A long descriptive column that the HTML shows may stay
        out of the text nbval checks, which keeps the numbers and the row
        names (chapter 13's 113 measurements: its configurations).

    Raises
    ------
    ValueError
        If there are no columns, a row has the wrong length, or ``align``,
        ``formats`` or ``text_columns`` name a column that does not exist.
    """

    def __init__(self, columns: Sequence[Header], rows: Sequence[Sequence[Any]],
                 caption: str | None = None, formats: Mapping[Any, Format] | None = None,
                 align: str | None = None, text_columns: Sequence[int | str] | None = None) -> None:
        self.headers = [_header_text(c) for c in columns]
        if not self.headers:
            raise ValueError("columns must hold at least one header, got []")
        n = len(self.headers)
        self.rows = [list(r) for r in rows]
        for i, row in enumerate(self.rows):
            if len(row) != n:
                raise ValueError(f"rows[{i}] has {len(row)} cells, expected {n} (one per column)")
        self.caption = caption
        per_col: dict[int, Format] = {}
        for key, fmt in (formats or {}).items():
            per_col[self._column(key, "formats")] = fmt
        self._formats = per_col
        if align is None:
            align = "".join("r" if all(_is_number(r[j]) or r[j] is None for r in self.rows)
                            and any(_is_number(r[j]) for r in self.rows) else "l" for j in range(n))
        if len(align) != n or set(align) - {"l", "r"}:
            raise ValueError(f"align must be one 'l' or 'r' per column ({n}), got {align!r}")
        self.align = align
        self._text_columns = list(range(n)) if text_columns is None else [
            self._column(key, "text_columns") for key in text_columns]

    def _column(self, key: int | str, name: str) -> int:
        index = self.headers.index(key) if key in self.headers else key
        if not isinstance(index, int) or not 0 <= index < len(self.headers):
            raise ValueError(f"{name} key {key!r} is not a column index or header of {self.headers}")
        return index

    def cell_text(self, i: int, j: int) -> str:
        """The text of row ``i``, column ``j``, as both forms show it."""
        value = self.rows[i][j]
        if value is None:
            return _MISSING
        if _is_number(value):
            fmt = self._formats.get(j)
            if callable(fmt):
                return str(fmt(value))
            return fmt_number(value, fmt)
        return str(value)

    def _cells(self) -> list[list[str]]:
        return [[self.cell_text(i, j) for j in range(len(self.headers))] for i in range(len(self.rows))]

    def to_text(self) -> str:
        """Aligned plain text of the ``text_columns``: header, a rule, then the rows (no trailing spaces)."""
        keep = self._text_columns
        headers = [self.headers[j] for j in keep]
        align = [self.align[j] for j in keep]
        cells = [[r[j] for j in keep] for r in self._cells()]
        widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]

        def line(items: list[str]) -> str:
            parts = [s.rjust(w) if a == "r" else s.ljust(w) for s, w, a in zip(items, widths, align)]
            return "  ".join(parts).rstrip()

        out = [self.caption] if self.caption else []
        out.append(line(headers))
        out.append("  ".join("-" * w for w in widths))
        out.extend(line(r) for r in cells)
        return "\n".join(out)

    def to_html(self) -> str:
        """A plain ``<table class="kvmath-table">``: deterministic, styled by the book's CSS."""
        num = ' class="kvmath-num"'
        cls = [num if a == "r" else "" for a in self.align]
        out = ['<table class="kvmath-table">']
        if self.caption:
            out.append(f"<caption>{html.escape(self.caption)}</caption>")
        else:
            out.append("")
        out.append("<thead><tr>" + "".join(f'<th scope="col"{c}>{html.escape(h)}</th>'
                                           for h, c in zip(self.headers, cls)) + "</tr></thead>")
        out.append("<tbody>")
        for row in self._cells():
            out.append("<tr>" + "".join(f"<td{c}>{html.escape(s)}</td>" for s, c in zip(row, cls)) + "</tr>")
        out.append("</tbody>")
        out.append("</table>")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return self.to_text()

    __str__ = __repr__


def check_table(rows: Sequence[Sequence[Any]], caption: str | None = None) -> Table:
    """The check table: quantity · the source says · exact · why they differ.

    Parameters
    ----------
    rows : sequence of 3- or 4-sequences
        ``(quantity, source, exact)`` or ``(quantity, source, exact, why)``.
        ``source`` and ``exact`` are usually already formatted with their
        unit (``fmt_seconds(step_s)``); ``None`` (the source gives no
        figure, or they agree) shows as an en dash.
    caption : str, optional

    Returns
    -------
    Table
        Figures right-aligned, so the two numbers line up.

    Raises
    ------
    ValueError
        If a row has fewer than 3 or more than 4 entries.

    Examples
    --------
    >>> print(check_table([
    ...     ("ridge point (FLOPs/byte)", "295", "295.2", "the source rounds"),
    ...     ("min step at B = 1", "14 ms", "14.05 ms"),
    ... ]))
    quantity                  the source says     exact  why they differ
    ------------------------  ---------------  --------  -----------------
    ridge point (FLOPs/byte)              295     295.2  the source rounds
    min step at B = 1                   14 ms  14.05 ms  –
    """
    body = []
    for i, row in enumerate(rows):
        row = list(row)
        if not 3 <= len(row) <= 4:
            raise ValueError(f"rows[{i}] must be (quantity, source, exact[, why]), got {row!r}")
        body.append(row + [None] * (4 - len(row)))
    return Table(CHECK_COLUMNS, body, caption=caption, align="lrrl")


class Dropdown:
    """Notes keyed by a table's row, shown on demand: a collapsed ``<details>`` list in HTML.

    For a column too long to sit in a table (chapter 13's "what each row left
    unknown", a paragraph per row): the table keeps the short columns and this
    holds the long one under its row ids, closed until the reader opens it
    (HTML renders ``<details>`` the same in the built book, JupyterLab and
    JupyterLite). The plain-text form names what it holds and how many notes,
    not the notes themselves: it is the notebook's stored fallback, and the
    notes' source (a data file) is where a terminal reads them.

    Parameters
    ----------
    summary : str
        The dropdown's one visible line.
    notes : sequence of (key, text)
        One entry per row: the row's id and its note.

    Raises
    ------
    ValueError
        If ``summary`` is empty, there are no notes, or a key repeats.

    Examples
    --------
    >>> d = Dropdown("What each row assumes", [("row-1", "clocks unknown"), ("row-2", "batch <b>guessed</b>")])
    >>> print(d)
    What each row assumes: 2 notes (a dropdown in HTML)
    >>> d.to_html().splitlines()[1]
    '<summary>What each row assumes</summary>'
    >>> d.to_html().splitlines()[4]
    '<dt>row-2</dt><dd>batch &lt;b&gt;guessed&lt;/b&gt;</dd>'
    """

    def __init__(self, summary: str, notes: Sequence[Sequence[Any]]) -> None:
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError(f"summary must be a non-empty string, got {summary!r}")
        self.summary = summary
        self.notes = [(str(k), str(v)) for k, v in notes]
        if not self.notes:
            raise ValueError("notes must hold at least one (key, text) pair, got none")
        keys = [k for k, _ in self.notes]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"notes: each key once, got {repeated} more than once")

    def to_html(self) -> str:
        """A closed ``<details class="kvmath-dropdown">`` holding a ``<dl>`` of the notes."""
        out = ['<details class="kvmath-dropdown">', f"<summary>{html.escape(self.summary)}</summary>", "<dl>"]
        # element text: only &, < and > need escaping (a note's quotes stay one byte each)
        out.extend(f"<dt>{html.escape(k, quote=False)}</dt><dd>{html.escape(v, quote=False)}</dd>" for k, v in self.notes)
        out += ["</dl>", "</details>"]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return f"{self.summary}: {len(self.notes)} notes (a dropdown in HTML)"

    __str__ = __repr__
