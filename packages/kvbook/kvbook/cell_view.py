"""How a chapter's code cells open outside the book: collapsed where the book hides them.

The book hides most of its code with myst-nb's cell tags; JupyterLab and
JupyterLite ignore the tags and read the cell's ``metadata.jupyter`` instead.
``make refresh`` writes that metadata from the tags (review R21-2: 360 of 395
hidden cells were shown in full), and the room's copies keep it.
"""

from __future__ import annotations

#: The book's tags for hidden code and hidden outputs (myst-nb), and the JupyterLab cell metadata that collapses each.
COLLAPSED_BY_TAG = {"remove-input": "source_hidden", "hide-input": "source_hidden", "remove-output": "outputs_hidden"}


def collapsed_view(cell: dict) -> dict:
    """The ``metadata.jupyter`` a code cell should carry: source collapsed where the book hides the code
    (``remove-input``, ``hide-input``), outputs collapsed where it hides them (``remove-output``); a click shows either."""
    tags = cell.get("metadata", {}).get("tags", [])
    return {key: True for tag, key in COLLAPSED_BY_TAG.items() if tag in tags}


def collapse_as_the_book_hides(cell: dict) -> None:
    """Write :func:`collapsed_view` into a code cell's metadata (none where the book shows everything)."""
    view = collapsed_view(cell)
    if view:
        cell["metadata"]["jupyter"] = view
    else:
        cell["metadata"].pop("jupyter", None)
