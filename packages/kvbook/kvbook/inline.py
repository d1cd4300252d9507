"""The chapters' inline expressions (``{eval}`...` `` in Markdown), evaluated where a reader meets them.

The prose of every chapter writes its numbers as MyST inline expressions,
e.g. ``{eval}`f"{budget / 1e9:.2f}"` ``. Three places render them:

- the book: myst-nb's ``inline`` execution mode evaluates each one in the
  chapter's kernel when the build reaches it (``_config.yml``);
- JupyterLab and JupyterLite: the ``jupyterlab-myst`` extension shows the
  results stored in each Markdown cell's ``user_expressions`` metadata, and
  evaluates them again through the kernel when the cell is run.

JupyterLite's Pyodide kernel (jupyterlite-pyodide-kernel 0.6) does not answer
``user_expressions`` requests, and a notebook opened before any cell has run
has no kernel state at all, so :func:`fill` runs a notebook from top to
bottom in a local kernel and writes every Markdown cell's results into its
metadata, in the form jupyterlab-myst stores them: the numbers are on the
page before anything runs, in any kernel.

Run: ``python -m kvbook.inline NOTEBOOK...`` (fills in place).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: ``{eval}`expression` `` in MyST Markdown (one backtick pair; the expression holds no backtick).
EVAL_ROLE = re.compile(r"\{eval\}`([^`]+)`")


def expressions(markdown: str) -> list[str]:
    """The inline expressions of one Markdown cell's source, in order, each once."""
    seen: dict[str, None] = {}
    for m in EVAL_ROLE.finditer(markdown):
        seen.setdefault(m.group(1), None)
    return list(seen)


class Kernel:
    """A local IPython kernel that runs a notebook's cells in order and answers ``user_expressions``."""

    def __init__(self, cwd: Path, timeout: float = 120):
        from jupyter_client.manager import start_new_kernel

        self.timeout = timeout
        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(cwd))

    def run(self, code: str) -> list[dict]:
        """Execute ``code`` as a cell; return its outputs as nbformat dicts; raise on an error."""
        outputs: list[dict] = []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                outputs.append({"output_type": kind, "data": content["data"],
                                "metadata": content.get("metadata", {}),
                                **({"execution_count": content["execution_count"]} if kind == "execute_result" else {})})
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": content["ename"], "evalue": content["evalue"],
                                "traceback": content["traceback"]})

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=self.timeout, allow_stdin=False)
        if reply["content"]["status"] != "ok":
            error = next((o for o in outputs if o["output_type"] == "error"), {})
            raise RuntimeError(f"cell failed: {error.get('ename', '')}: {error.get('evalue', '')}\n{code[:300]}")
        return outputs

    def evaluate(self, exprs: list[str]) -> dict[str, dict]:
        """Each expression's result as the kernel answers ``user_expressions`` (status, data, metadata)."""
        if not exprs:
            return {}
        msg_id = self.kc.execute("", silent=True, store_history=False,
                                 user_expressions={str(i): e for i, e in enumerate(exprs)})
        while True:
            reply = self.kc.get_shell_msg(timeout=self.timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        answers = reply["content"]["user_expressions"]
        return {e: answers[str(i)] for i, e in enumerate(exprs)}

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def fill(path: Path) -> int:
    """Run the notebook at ``path`` and store each Markdown cell's expression results in its metadata.

    Returns the number of expressions filled. An expression that fails is an
    error naming the cell, as it is in the book's build.
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    kernel = Kernel(path.parent)
    count = 0
    try:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                kernel.run(cell.source)
                continue
            if cell.cell_type != "markdown":
                continue
            exprs = expressions(cell.source)
            if not exprs:
                cell.metadata.pop("user_expressions", None)
                continue
            results = kernel.evaluate(exprs)
            for expr, result in results.items():
                if result.get("status") != "ok":
                    raise RuntimeError(f"{path.name}, cell {index}: {{eval}}`{expr}` failed: "
                                       f"{result.get('ename', '')}: {result.get('evalue', '')}")
            cell.metadata["user_expressions"] = [{"expression": e, "result": results[e]} for e in exprs]
            count += len(exprs)
    finally:
        kernel.close()
    nbformat.write(nb, path)
    return count


def main(argv: list[str]) -> int:
    for name in argv:
        n = fill(Path(name))
        print(f"{name}: {n} inline expressions filled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
