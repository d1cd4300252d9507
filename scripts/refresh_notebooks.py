"""Re-execute notebooks in place, keeping only metadata that does not churn.

Usage: python scripts/refresh_notebooks.py notebooks/*.ipynb  (or `make refresh`)

Each notebook runs top to bottom in a fresh kernel, in its own folder, as the
book build and nbval run it. Then everything that would change on every run
without the content changing is dropped, so `git diff` shows only what
really changed:

* per-cell execution timestamps (``metadata.execution``) are not recorded;
* the notebook's ``language_info`` keeps only the language name, and the
  kernelspec is the plain ``python3`` one;
* ipywidgets state is not stored, and the ``widget-view`` output of an
  interactive figure is dropped (its model id is random, and without state it
  could not be shown anyway): the saved notebook keeps the figure's
  ``text/html`` version, frames included, which needs no kernel.

Execution counts and outputs are kept, so `tests/test_notebooks_committed.py`
can check that every code cell was run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

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
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
    return nb


def refresh(path: Path, timeout: int = 120) -> float:
    """Execute ``path`` in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    elapsed = time.perf_counter() - start
    nbformat.write(clean(nb), path)
    return elapsed


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[2])
        return 2
    for name in argv:
        path = Path(name)
        seconds = refresh(path)
        print(f"refreshed {path} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
