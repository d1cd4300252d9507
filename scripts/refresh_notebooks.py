"""Re-execute notebooks in place, keeping only metadata that does not churn.

Usage: python scripts/refresh_notebooks.py [--small] notebooks/*.ipynb  (or `make refresh`)

Each notebook runs top to bottom in a fresh kernel, in its own folder, as the
book build and nbval run it. Then everything that would change on every run
without the content changing is dropped, so `git diff` shows only what
really changed:

* per-cell execution timestamps (``metadata.execution``) are not recorded;
* the notebook's ``language_info`` keeps only the language name, and the
  kernelspec is the plain ``python3`` one;
* a code cell the book hides (tagged ``remove-input``, ``hide-input`` or
  ``remove-output``) opens collapsed the same way in JupyterLab and JupyterLite
  (``metadata.jupyter.source_hidden`` / ``outputs_hidden``);
* ipywidgets state is not stored, and the ``widget-view`` output of an
  interactive figure is dropped (its model id is random, and without state it
  could not be shown anyway): the saved notebook keeps the figure's
  ``text/html`` version, frames included, which needs no kernel.

Execution counts and outputs are kept, so `tests/book/test_notebooks_committed.py`
can check that every code cell was run.

With ``--small`` the committed copy also leaves out what the book build
makes again anyway (it re-executes every notebook): every image output
(``image/png``, ``image/jpeg``, ``image/svg+xml``; the ``text/plain``
"<Figure ...>" stays), the pre-rendered frames of interactive figures,
whose ``text/html`` becomes the default frame alone, as one ``<img>`` drawn at its CSS size, and
the HTML of notes dropdowns (``kvbook.tables.Dropdown``; their one-line text form stays). The
text outputs nbval checks are untouched, so a notebook stays far under
200 KB (tests/book/test_notebooks_committed.py) and a diff shows the numbers that changed.
"""

from __future__ import annotations

import base64
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from kvbook.cell_view import collapse_as_the_book_hides
from kvbook.inline import parse_notebook_args

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop volatile metadata and dead widget views from an executed notebook."""
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        collapse_as_the_book_hides(cell)
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
    return nb


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
_DEFAULT_IMG = re.compile(r'<img class="kvmath-interactive-img"[^>]*>')
_DATA_PNG = re.compile(r'data:image/png;base64,([A-Za-z0-9+/=]+)')


def _palette_img(tag: str) -> str:
    """An ``<img>`` tag whose base64 PNG is drawn at its CSS size (1x) with 64 colours.

    The book draws interactive frames at 2x for HiDPI screens and makes them again when it builds;
    the committed copy's default frame is only a preview for a reader who opens the notebook without
    running it, so it keeps one pixel per CSS pixel and the few colours a line plot has (a fifth of
    the bytes of the 2x frame).
    """
    import io

    from PIL import Image, PngImagePlugin

    size = re.search(r'width="(\d+)" height="(\d+)"', tag)

    def preview(data: bytes) -> bytes:
        with Image.open(io.BytesIO(data)) as im:
            text = PngImagePlugin.PngInfo()  # alt text and the smallest text size (in CSS px) stay
            for key, value in getattr(im, "text", {}).items():
                text.add_text(key, value)
            if size is not None and im.width > int(size.group(1)):
                im = im.convert("RGB").resize((int(size.group(1)), int(size.group(2))), Image.Resampling.BOX)
            small = im.convert("RGB").quantize(colors=64, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            buf = io.BytesIO()
            small.save(buf, format="png", optimize=True, dpi=(72, 72), pnginfo=text)
        return buf.getvalue() if buf.tell() < len(data) else data

    def swap(m: re.Match) -> str:
        return "data:image/png;base64," + base64.b64encode(preview(base64.b64decode(m.group(1)))).decode()

    return _DATA_PNG.sub(swap, tag)


def small(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop image outputs and interactive frames (build outputs) from an executed notebook.

    Returns the notebook (changed in place). Text outputs are untouched.
    """
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is None:
                continue
            for mime in IMAGE_TYPES:
                data.pop(mime, None)
            meta = out.get("metadata") or {}
            for mime in IMAGE_TYPES:
                meta.pop(mime, None)
            page = data.get("text/html")
            if isinstance(page, list):
                page = "".join(page)
            if page and 'class="kvmath-interactive"' in page:
                img = _DEFAULT_IMG.search(page)
                data["text/html"] = (f'<div class="kvmath-interactive-static">{_palette_img(img.group(0))}</div>'
                                     if img else "")
                if not data["text/html"]:
                    del data["text/html"]
            elif page and 'class="kvmath-interactive-static"' in page:  # a copy made small before: 1x now
                data["text/html"] = _palette_img(page)
            elif page and page.startswith('<details class="kvmath-dropdown">') and "text/plain" in data:
                # notes kept closed until asked for (kvbook.tables.Dropdown): the build makes them again, and the
                # text form, which says what they are, stays
                del data["text/html"]
    return nb


def refresh(path: Path, timeout: int = 120, keep_images: bool = True) -> float:
    """Execute ``path`` in place; return the seconds it took.

    With ``keep_images=False`` the saved copy has no image outputs or
    interactive frames (see :func:`small`).
    """
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    elapsed = time.perf_counter() - start
    nb = clean(nb)
    if not keep_images:
        nb = small(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/refresh_notebooks.py",
                                     description="Re-execute notebooks in place, keeping only metadata that does not churn.")
    parser.add_argument("--small", action="store_true",
                        help="leave out what the book build makes again (images, interactive frames)")
    args = parse_notebook_args(parser, argv)
    for path in args.notebooks:
        seconds = refresh(path, keep_images=not args.small)
        print(f"refreshed {path} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
