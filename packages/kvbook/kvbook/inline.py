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

The workshop's answer key comes from the same run. A Markdown cell that closes
an exercise's solution may carry, in its metadata, the answers the key
records, as expressions: ``metadata["kvbook"]["answers"] = {label: {quantity:
expression}}``. :func:`fill` evaluates them where the cell stands and stores
the text of each in ``metadata["kvbook"]["answer_values"]``, which
:mod:`kvbook.workshop.answer_key` reads. Nothing of it shows on any page.

Run: ``python -m kvbook.inline NOTEBOOK...`` (fills in place).
"""

from __future__ import annotations

import ast
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


def result_text(result: dict) -> str:
    """The text a reader sees for one expression's result: its text/plain, a string without its quotes."""
    text = result["data"]["text/plain"]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            return str(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            pass
    return text


def names_read(expression: str) -> set[str]:
    """The free names an inline expression reads (not those its comprehensions or lambdas bind)."""
    tree = ast.parse(expression, mode="eval")
    local: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            local |= {t.id for t in ast.walk(node.target) if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Lambda):
            local |= {a.arg for a in node.args.args}
        elif isinstance(node, ast.NamedExpr):
            local.add(node.target.id)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local


#: Methods that change the object they are called on: a cell calling one at its top level changes that name.
MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "remove",
                      "clear", "add", "discard", "sort", "reverse"})


def names_bound(code: str) -> set[str]:
    """The names a code cell binds or changes at its top level (assignments, loops, imports, definitions,
    item or attribute assignment, a mutating method call); names local to a function or comprehension are not."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # IPython magics: a cell the chapters do not use for their prose's names
        return set()
    found: set[str] = set()

    def target(node: ast.AST) -> None:
        while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
            node = node.value
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                target(element)

    def block(statements: list[ast.stmt]) -> None:
        for s in statements:
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    target(t)
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
                target(s.target)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                target(s.target)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        target(item.optional_vars)
            elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(s.name)
                continue
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".")[0] for a in s.names)
            elif isinstance(s, ast.Delete):
                for t in s.targets:
                    target(t)
            elif isinstance(s, ast.Try):
                found.update(h.name for h in s.handlers if h.name)
            for node in ast.walk(s):
                if isinstance(node, ast.NamedExpr):
                    found.add(node.target.id)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in MUTATORS):
                    target(node.func.value)
            for field in ("body", "orelse", "finalbody"):
                block(getattr(s, field, []))
            for handler in getattr(s, "handlers", []):
                block(handler.body)

    block(tree.body)
    return found


def rebound_names(cells) -> list[tuple[int, int, list[str]]]:
    """Markdown cells whose expressions read a name that a later code cell binds again.

    jupyterlab-myst evaluates a Markdown cell's expressions when the kernel
    has finished the code cells queued with it, so after *Run All* such an
    expression shows the later value, not the one the sentence is about. The
    chapters keep one binding per name their prose reads; this lists each
    breach as (Markdown cell index, code cell index, names).
    """
    bound = [names_bound(c.source) if c.cell_type == "code" else set() for c in cells]
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        read = set().union(*(names_read(e) for e in expressions(cell.source)))
        for j in range(i + 1, len(cells)):
            if read & bound[j]:
                found.append((i, j, sorted(read & bound[j])))
    return found


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
            answers = cell.metadata.get("kvbook", {}).get("answers", {})
            wanted = exprs + [e for quantities in answers.values() for e in quantities.values()]
            results = kernel.evaluate(list(dict.fromkeys(wanted)))
            for expr, result in results.items():
                if result.get("status") != "ok":
                    raise RuntimeError(f"{path.name}, cell {index}: `{expr}` failed: "
                                       f"{result.get('ename', '')}: {result.get('evalue', '')}")
            if exprs:
                cell.metadata["user_expressions"] = [{"expression": e, "result": results[e]} for e in exprs]
            else:
                cell.metadata.pop("user_expressions", None)
            if answers:
                cell.metadata["kvbook"]["answer_values"] = {
                    label: {q: result_text(results[e]) for q, e in quantities.items()}
                    for label, quantities in answers.items()}
            count += len(exprs)
    finally:
        kernel.close()
    nbformat.write(nb, path)
    return count


def parse_notebook_args(parser, argv: list[str]):
    """``argv`` parsed by ``parser`` with one or more notebook paths added (``args.notebooks``), each an existing file:
    the command line of this module and of scripts/refresh_notebooks.py. ``--help`` prints the usage and exits 0; an
    unknown option or a missing notebook exits 2 with one line naming it."""
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="an .ipynb file")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {missing[0]}")
    return args


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kvbook.inline",
                                     description="Evaluate each notebook's inline expressions and store the results "
                                                 "in its Markdown cells' metadata (in place).")
    args = parse_notebook_args(parser, argv)
    for path in args.notebooks:
        n = fill(path)
        print(f"{path}: {n} inline expressions filled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
