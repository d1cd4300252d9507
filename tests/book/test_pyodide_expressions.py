"""kvbook.pyodide_expressions: the Pyodide kernel's reply carries the inline expressions' values.

The kernel is stood in for by a module shaped as jupyterlite-pyodide-kernel 0.6.1's
``pyodide_kernel`` (``kernel_instance.run`` returns the reply's dict; the worker stores the
request message on ``kernel_instance._parent_header``) with IPython's own shell, so the values
are formatted exactly as IPython's kernel formats ``user_expressions``. The browser test
(tests/browser/test_lite.py) checks the same in the room's JupyterLite.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
import types

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kvbook import pyodide_expressions


class _Kernel:
    """The Python half of the Pyodide kernel: runs code, answers without user_expressions."""

    def __init__(self, shell):
        self.shell = shell
        self._parent_header = None

    async def run(self, code):
        result = self.shell.run_cell(code)
        return {"status": "ok" if result.success else "error", "payload": []}


@pytest.fixture
def pyodide_kernel(monkeypatch):
    shell = InteractiveShell.instance()
    module = types.SimpleNamespace(kernel_instance=_Kernel(shell), ipython_shell=shell)
    monkeypatch.setitem(sys.modules, "pyodide_kernel", module)
    yield module
    InteractiveShell.clear_instance()


def _execute(kernel, code, expressions):
    kernel._parent_header = {"header": {"msg_type": "execute_request"},
                             "content": {"code": code, "user_expressions": expressions}}
    # in a thread of its own: a browser test earlier in the same process may leave this thread's event loop running
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, kernel.run(code)).result()


def test_the_reply_carries_each_expressions_value_and_follows_a_rerun(pyodide_kernel):
    assert pyodide_expressions.install() is True
    kernel = pyodide_kernel.kernel_instance
    # chapter 0's input: kipply's A100 bandwidth; B_crit = 312e12 * 2 / (2 * W)
    _execute(kernel, "w = 1.5e12", {})
    reply = _execute(kernel, "", {"0": 'f"{312e12 * 2 / (2 * w):.0f}"', "1": "undefined_name"})
    assert reply["user_expressions"]["0"] == {"status": "ok", "data": {"text/plain": "'208'"}, "metadata": {}}
    assert reply["user_expressions"]["1"]["status"] == "error"
    assert reply["user_expressions"]["1"]["ename"] == "NameError"
    _execute(kernel, "w = 1.0e12", {})   # the learner changes the input and re-runs
    reply = _execute(kernel, "", {"0": 'f"{312e12 * 2 / (2 * w):.0f}"'})
    assert reply["user_expressions"]["0"]["data"]["text/plain"] == "'312'"


def test_install_is_idempotent_and_leaves_a_kernel_that_answers_alone(pyodide_kernel):
    kernel = pyodide_kernel.kernel_instance
    assert pyodide_expressions.install() and pyodide_expressions.install()
    assert _execute(kernel, "1", {"a": "2 * 21"})["user_expressions"]["a"]["data"]["text/plain"] == "42"

    async def answers_itself(code):
        return {"status": "ok", "user_expressions": {"a": "its own"}}

    kernel.run = answers_itself
    kernel._kvbook_user_expressions = False
    pyodide_expressions.install()
    assert _execute(kernel, "", {"a": "1"})["user_expressions"] == {"a": "its own"}


def test_a_failed_cell_gets_no_expressions(pyodide_kernel):
    pyodide_expressions.install()
    reply = _execute(pyodide_kernel.kernel_instance, "1/0", {"0": "1"})
    assert reply["status"] == "error" and "user_expressions" not in reply


def test_outside_a_pyodide_kernel_it_does_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "pyodide_kernel", raising=False)
    assert pyodide_expressions.install() is False
