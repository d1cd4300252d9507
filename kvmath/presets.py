"""Reading preset tables (``kvmath/data/*.csv``) and looking names up in them.

Presets are data: one CSV per kind, one row per preset, each row with its
source. Models and chips share this loader so both behave the same way:
case-insensitive names, and an unknown name suggests the closest ones.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable, Mapping, TypeVar

from .validation import suggest

T = TypeVar("T")


def read_rows(filename: str) -> list[dict[str, str]]:
    """Rows of ``kvmath/data/<filename>`` as dicts of strings (empty cell = '')."""
    # beside this module in every install (wheel, editable, Pyodide); importlib.resources would add ~10 ms to import
    text = (Path(__file__).parent / "data" / filename).read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


class PresetTable(Mapping):
    """The presets of one CSV by name, each built from its row on first use.

    A command asks for one model and one chip; building every model row to
    hand out one cost a few milliseconds of every start-up.
    """

    def __init__(self, filename: str, build: Callable[[dict[str, str]], T]):
        self._rows = {row["name"]: row for row in read_rows(filename)}
        self._build = build
        self._built: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        built = self._built.get(name)
        if built is None:
            built = self._built[name] = self._build(self._rows[name])
        return built

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows


def optional_float(cell: str) -> float | None:
    """A numeric CSV cell, or None where the cell is empty."""
    return float(cell) if cell.strip() else None


def optional_int(cell: str) -> int | None:
    """An integer CSV cell (written as ``8`` or ``4096``), or None where empty."""
    return int(float(cell)) if cell.strip() else None


def lookup(name: str, table: Mapping[str, T], kind: str) -> T:
    """Find ``name`` (case-insensitive) in ``table``; raise ValueError with suggestions."""
    if not isinstance(name, str):
        raise ValueError(f"{kind} must be a name (str), got {name!r}")
    key = name.strip().lower()
    if key not in table:
        raise ValueError(f"unknown {kind} {name!r}{suggest(key, table)}")
    return table[key]
