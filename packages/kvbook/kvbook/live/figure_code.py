"""The code a chapter's interactive figures need, cut from the notebook itself.

The published page makes every control of a ``kvbook.interactive`` figure
live by running the chapter's own Python in the reader's browser
(``packages/kvbook/kvbook/live/``). It runs only what the figures need: starting from each
top-level statement that calls ``interactive_figure(...)`` /
``InteractiveFigure(...)``, earlier statements are kept when they bind a name
the kept code reads (assignment, import, ``def``, ``for`` target, ``with ...
as``) or mutate it (``x[...] = ``, ``x.attr = ``, ``x.method(...)`` as a
statement); everything else (checks, tables, prints, static figures, glue) is
left out. Statements are copied verbatim from the notebook; ``glue`` and
``display`` calls are dropped, and a figure expression becomes
``_kvmath_figures.append(<the same expression>)`` so the page can find the
figures in display order.

A figure whose code measures the machine (``kvmath.measure``) is marked
static: its page keeps the frames rendered when the book was built, and says
why.

Used by ``packages/kvbook/kvbook/sphinx/book_pages.py`` (writes ``_figures/<page>.py`` beside the
build) and ``tests/browser/test_live_figures.py`` (runs the same code natively to
compare with the browser).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

FIGURE_CALLS = {"interactive_figure", "InteractiveFigure"}
DROPPED_CALLS = {"glue", "display"}
STATIC_MODULES = {"kvmath.measure"}
STATIC_REASON = ("This figure stays as rendered when the book was built: its code measures the "
                 "machine it runs on (kvmath.measure), at sizes (hundreds of MB copied, 2048\u00b3 "
                 "matrix products) that take minutes in WebAssembly, and the figure shows the "
                 "build machine's measurements. Every value of its slider was rendered then; "
                 "run the chapter with make lab to measure your own machine.")
PRELUDE = '''\
# The code of this chapter's interactive figures, cut from the notebook by
# packages/kvbook/kvbook/live/figure_code.py: the same statements, without checks, tables or glue.
_kvmath_figures = []
def glue(*args, **kwargs):
    pass
def display(*args, **kwargs):
    pass
'''


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute):
            return f.attr
    return None


def _figure_call(stmt: ast.stmt) -> bool:
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    return value is not None and _call_name(value) in FIGURE_CALLS


def _reads(node: ast.AST) -> set[str]:
    """Module-level names ``node`` reads, closures included (a function's own locals and
    parameters are not reads; the globals its body, or a nested function's, reads are)."""
    import symtable

    try:
        table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    except SyntaxError:  # pragma: no cover - unparse of parsed code parses
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    out = {s.get_name() for s in table.get_symbols() if s.is_referenced()}

    def walk(t) -> None:
        for child in t.get_children():
            out.update(s.get_name() for s in child.get_symbols()
                       if s.is_referenced() and (s.is_global() or s.is_declared_global()))
            walk(child)

    walk(table)
    return out


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _binds(stmt: ast.stmt, modules: frozenset[str] = frozenset()) -> set[str]:
    """Names ``stmt`` binds or mutates at module level.

    A method call as a statement (``rows.append(x)``) mutates its object, unless
    the object is a module (``kp.log_batch_axis(ax)`` draws on ``ax``; ``kp``
    is an import): ``modules`` are the names imports bind.
    """
    out: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if not isinstance(node, ast.Lambda):
                out.add(node.name)
            return  # a nested scope binds nothing at module level
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = _base_name(node)
            if base:
                out.add(base)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Attribute):
            base = _base_name(node.value.func.value)  # x.append(...)
            if base and base not in modules:
                out.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(stmt)
    return out


def _is_dropped(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr) and _call_name(stmt.value) in DROPPED_CALLS:
        return True
    if isinstance(stmt, ast.ImportFrom) and stmt.module in ("myst_nb", "IPython.display"):
        return True
    return isinstance(stmt, ast.Import) and all(a.name in ("myst_nb",) for a in stmt.names)


def _cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    src = "".join(src) if isinstance(src, list) else src
    # IPython magics and shell escapes cannot run outside IPython: blank them (keeps line numbers)
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def statements(notebook: dict) -> list[tuple[int, ast.stmt, str]]:
    """(cell index, statement, its source) for every top-level statement of every code cell."""
    out = []
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = _cell_source(cell)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        for k, stmt in enumerate(tree.body):
            first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            alone = (stmt.col_offset == 0
                     and (k == 0 or tree.body[k - 1].end_lineno < first)
                     and (k + 1 == len(tree.body) or tree.body[k + 1].lineno > stmt.end_lineno))
            if alone:  # whole lines: decorators and comments inside the statement kept
                text = "\n".join(lines[first - 1:stmt.end_lineno])
            else:
                text = ast.get_source_segment(source, stmt)
            out.append((index, stmt, text))
    return out


def extract(notebook: dict) -> dict | None:
    """``{"code": str, "figures": [{"cell", "static", "reason"}]}`` for the notebook, or None (no figure)."""
    stmts = statements(notebook)
    figure_at = [i for i, (_, stmt, _) in enumerate(stmts) if _figure_call(stmt)]
    if not figure_at:
        return None
    modules = frozenset(name for _, stmt, _ in stmts if isinstance(stmt, (ast.Import, ast.ImportFrom))
                        for name in _binds(stmt))
    # each figure's reads are satisfied by the statements before it (backwards slice)
    keep = set()
    for f in figure_at:
        keep.add(f)
        need = _reads(stmts[f][1])
        for i in range(f - 1, -1, -1):
            _, stmt, _ = stmts[i]
            if _is_dropped(stmt) or _figure_call(stmt):
                continue
            if _binds(stmt, modules) & need:
                keep.add(i)
                need |= _reads(stmt)
    lines = [PRELUDE]
    figures = []
    modules: set[str] = set()
    last_cell = None
    for i in sorted(keep):
        cell, stmt, source = stmts[i]
        for node in ast.walk(stmt):
            if isinstance(node, ast.Import):
                modules.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
                modules.update(f"{node.module}.{a.name}" for a in node.names)
        if cell != last_cell:
            lines.append(f"# --- cell {cell}")
            last_cell = cell
        if i in figure_at:
            if isinstance(stmt, ast.Assign):
                lines.append(source)
                target = ast.unparse(stmt.targets[0])
                lines.append(f"_kvmath_figures.append({target})")
            else:
                lines.append(f"_kvmath_figures.append(\n{source}\n)")
            figures.append({"cell": cell})
        else:
            lines.append(source)
    static = bool(modules & STATIC_MODULES)
    for fig in figures:
        fig["static"] = static
        fig["reason"] = STATIC_REASON if static else ""
    return {"code": "\n".join(lines) + "\n", "figures": figures}


def extract_file(path: Path) -> dict | None:
    return extract(json.loads(Path(path).read_text(encoding="utf-8")))


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:]:
        result = extract_file(Path(name))
        if result is None:
            print(f"# {name}: no interactive figure")
        else:
            print(result["code"])
            print("#", json.dumps(result["figures"]))
