"""kvbook: everything that exists for the kvmath book and not for the library.

* :mod:`kvbook.plots` and :mod:`kvbook.interactive`: the book's figure style and
  its slider figures (matplotlib, ipywidgets); imported on first use, not here;
* :class:`Table` and :func:`check_table` (:mod:`kvbook.tables`): the chapters' tables;
* :mod:`kvbook.sphinx`: the book's Sphinx extensions (named in ``_config.yml``);
* :mod:`kvbook.live`: the in-browser runtime's assembly (Pyodide, the figure code);
* :mod:`kvbook.workshop`: the workshop kit (``python -m kvbook.workshop.<tool>``).

``kvmath`` never imports this package.
"""

import sys

from .tables import Table, check_table

if sys.platform == "emscripten":
    # the workshop's JupyterLite site: put the repository files the chapters read where they look (a room served
    # without service workers gives the kernel no view of the site's files; kvbook.workshop.workshop_lite)
    try:
        import kvmath_lite_files  # noqa: F401
    except ImportError:
        pass
    # and let the prose's inline expressions follow a re-run (kvbook.pyodide_expressions)
    from .pyodide_expressions import install as _install_expressions

    _install_expressions()

__all__ = ["Table", "check_table"]
