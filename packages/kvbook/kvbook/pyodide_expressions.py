"""Inline expressions that follow a re-run in the workshop's JupyterLite kernel.

jupyterlab-myst renders a Markdown cell's ``{eval}`` roles by sending the kernel an
execute request with empty code and the expressions in ``user_expressions``; a
kernel answers with each expression's formatted value (the Jupyter messaging
protocol's ``execute_reply``). IPython's kernel does. The Pyodide kernel of
JupyterLite (jupyterlite-pyodide-kernel up to 0.8.7, the newest release on PyPI as
of 2026-12) runs the code and drops ``user_expressions`` from its reply, so the
prose keeps the numbers ``make refresh`` stored however a learner changes the
inputs (jupyterlite/pyodide-kernel issue #251; its fix, commit bb0d1cd, is in no
release). The kernel builds its reply from the dict that the Python half,
``pyodide_kernel.kernel_instance.run``, returns; :func:`install` wraps that
method so the dict carries the expressions' values, computed by the shell's own
``user_expressions`` as IPython's kernel computes them. A kernel that answers
them itself is left alone.
"""

from __future__ import annotations

import sys


def _to_py(value):
    """A JavaScript object the worker handed over as a proxy, as Python data."""
    return value.to_py() if hasattr(value, "to_py") else value


def install() -> bool:
    """Make the running Pyodide kernel answer ``user_expressions``; True if it now does.

    Idempotent; a no-op (False) outside a Pyodide kernel.
    """
    kernel_module = sys.modules.get("pyodide_kernel")
    if kernel_module is None:
        return False
    kernel = kernel_module.kernel_instance
    if getattr(kernel, "_kvbook_user_expressions", False):
        return True
    shell = kernel_module.ipython_shell
    run = kernel.run

    async def run_answering_expressions(code):
        results = await run(code)
        if results.get("status") == "ok" and "user_expressions" not in results:
            parent = _to_py(getattr(kernel, "_parent_header", None)) or {}
            asked = _to_py(parent.get("content", {}).get("user_expressions")) or {}
            results["user_expressions"] = shell.user_expressions(dict(asked))
        return results

    kernel.run = run_answering_expressions
    kernel._kvbook_user_expressions = True
    return True
