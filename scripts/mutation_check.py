"""Mutation check of kvmath's formulas (not part of CI).

Applies one single-point mutation at a time to the formula modules of
kvmath (swap ``>=`` and ``>``, ``<=`` and ``<``, ``+`` and ``-``, ``*`` and
``/``; drop one factor of a product; ``ceil`` <-> ``floor``, ``maximum`` <->
``minimum``) in a temporary copy of the package, runs the fast unit tests and
the doctests against the copy, and reports the mutants no test killed.

    .venv/bin/python scripts/mutation_check.py              # every module, 2 workers
    .venv/bin/python scripts/mutation_check.py decode.py -j 4
    .venv/bin/python scripts/mutation_check.py --list       # show the mutants, run nothing

Exit status 0 when every mutant was killed, 1 when some survived.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["capacity.py", "decode.py", "formatting.py", "kv_cache.py", "parallel.py", "prefill.py", "hardware.py",
           "units.py", "models.py"]
FAST_TESTS = ["tests/sources/test_notes.py", "tests/sources/test_thread.py", "tests/unit/test_presets.py",
              "tests/contract/test_inputs.py", "tests/unit/test_cli.py", "tests/contract/test_properties.py",
              # the step model, layers, configs, memory and serving pin their own formulas
              "tests/unit/test_step.py", "tests/unit/test_layers.py", "tests/unit/test_hf_config.py", "tests/unit/test_memory.py",
              "tests/unit/test_serving.py", "tests/unit/test_parallel.py"]
SWAP_OPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
SWAP_CMP = {ast.GtE: ast.Gt, ast.Gt: ast.GtE, ast.LtE: ast.Lt, ast.Lt: ast.LtE}
SWAP_CALLS = {"ceil": "floor", "floor": "ceil", "maximum": "minimum", "minimum": "maximum"}
OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=",
           ast.Lt: "<"}


@dataclass
class Mutant:
    module: str
    index: int  # which candidate node in the module (ast.walk order)
    kind: str  # "op", "cmp", "drop-left", "drop-right", "call"
    line: int
    what: str
    source: str = ""


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes inside docstrings (never mutated)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.update(id(n) for n in ast.walk(first))
    return out


def _in_fstring_or_message(node: ast.AST, parents: dict) -> bool:
    """Arithmetic that only builds an error message or an f-string is not a formula."""
    p = parents.get(id(node))
    while p is not None:
        if isinstance(p, (ast.JoinedStr, ast.Raise)):
            return True
        p = parents.get(id(p))
    return False


def candidates(module: str) -> list[Mutant]:
    text = (ROOT / "kvmath" / module).read_text()
    tree = ast.parse(text)
    skip = _docstring_nodes(tree)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    lines = text.splitlines()
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in skip or _in_fstring_or_message(node, parents):
            continue
        line = getattr(node, "lineno", 0)
        shown = lines[line - 1].strip() if line else ""
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_OPS:
            new = SWAP_OPS[type(node.op)]
            out.append(Mutant(module, i, "op", line, f"{OP_TEXT[type(node.op)]} -> {OP_TEXT[new]}", shown))
            if isinstance(node.op, (ast.Mult, ast.Div)):
                out.append(Mutant(module, i, "drop-right", line, f"drop factor {ast.unparse(node.right)}", shown))
                if isinstance(node.op, ast.Mult):
                    out.append(Mutant(module, i, "drop-left", line, f"drop factor {ast.unparse(node.left)}", shown))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
            new = SWAP_CMP[type(node.ops[0])]
            out.append(Mutant(module, i, "cmp", line, f"{OP_TEXT[type(node.ops[0])]} -> {OP_TEXT[new]}", shown))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in SWAP_CALLS and isinstance(node.func.value, ast.Name)):
            out.append(Mutant(module, i, "call", line, f"{node.func.attr} -> {SWAP_CALLS[node.func.attr]}", shown))
    return out


class _Apply(ast.NodeTransformer):
    def __init__(self, mutant: Mutant, order: dict[int, int]):
        self.m, self.order = mutant, order

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if self.order.get(id(node)) != self.m.index:
            return node
        k = self.m.kind
        if k == "op":
            node.op = SWAP_OPS[type(node.op)]()
        elif k == "drop-right":
            return node.left
        elif k == "drop-left":
            return node.right
        elif k == "cmp":
            node.ops = [SWAP_CMP[type(node.ops[0])]()]
        elif k == "call":
            node.func.attr = SWAP_CALLS[node.func.attr]
        return node


def mutate(mutant: Mutant) -> str:
    tree = ast.parse((ROOT / "kvmath" / mutant.module).read_text())
    order = {id(n): i for i, n in enumerate(ast.walk(tree))}
    tree = _Apply(mutant, order).visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


#: Examples per property test in the copy (CI runs hypothesis's default 100): a wrong formula
#: fails on the first few, and the whole check must fit in minutes on a busy 2-core machine.
PROPERTY_EXAMPLES = 25


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "kvmath", dest / "kvmath", ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    shutil.copy(ROOT / "pytest.ini", dest / "pytest.ini")
    props = dest / "tests" / "test_properties.py"
    props.write_text(props.read_text().replace(
        'register_profile("kvmath", deadline=None', f'register_profile("kvmath", max_examples={PROPERTY_EXAMPLES}, deadline=None'))


#: Tests that start a new Python process: slow, and they test the install, not the formulas.
SLOW = "not python_dash_m and not closed_pipe and not real_process"


def run_tests(workdir: Path, timeout: float, module: str | None = None) -> tuple[bool, str]:
    """(killed, first failing test) for the copy in ``workdir``: the fast tests and the
    doctests of ``module`` (of every formula module when None)."""
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # nbval and the Jupyter plugins take a second to load
    doctests = [f"kvmath/{module}"] if module else [f"kvmath/{m}" for m in MODULES]
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-o", "addopts=--doctest-modules -p no:cacheprovider",
           "-k", SLOW, *doctests, *FAST_TESTS]
    try:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return True, "timeout"
    failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return proc.returncode != 0, failed[0] if failed else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", default=MODULES, help="files in kvmath/ to mutate (default: the formula modules)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="parallel test runs (default: CPUs)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per test run (default: 120)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no new mutant after this many seconds; the rest are reported as not run")
    args = ap.parse_args()
    mutants = [m for mod in args.modules for m in candidates(mod)]
    if args.list:
        for m in mutants:
            print(f"kvmath/{m.module}:{m.line}: {m.what}    {m.source}")
        print(f"{len(mutants)} mutants")
        return 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="kvmath-mutants-") as tmp:
        base = Path(tmp) / "clean"
        _copy_tree(base)
        killed, reason = run_tests(base, args.timeout)
        if killed:
            print(f"the unmutated tests fail ({reason}); fix them first", file=sys.stderr)
            return 2
        slots = []
        for j in range(args.jobs):
            slot = Path(tmp) / f"slot{j}"
            _copy_tree(slot)
            slots.append(slot)
        free = list(slots)
        import threading

        lock = threading.Lock()

        def one(m: Mutant):
            if args.max_seconds is not None and time.time() - start > args.max_seconds:
                return m, None, "not run (time budget)"
            with lock:
                slot = free.pop()
            target = slot / "kvmath" / m.module
            try:
                target.write_text(mutate(m))
                return m, *run_tests(slot, args.timeout, m.module)
            finally:
                shutil.copy(ROOT / "kvmath" / m.module, target)
                with lock:
                    free.append(slot)

        results = []
        with ThreadPoolExecutor(args.jobs) as pool:
            for n, (m, killed, reason) in enumerate(pool.map(one, mutants), 1):
                results.append((m, killed, reason))
                mark = "not run " if killed is None else "killed " if killed else "SURVIVED"
                print(f"[{n}/{len(mutants)}] {mark} kvmath/{m.module}:{m.line}: {m.what}", flush=True)
    survivors = [m for m, killed, _ in results if killed is False]
    not_run = [m for m, killed, _ in results if killed is None]
    ran = len(results) - len(not_run)
    print()
    print(f"mutants: {ran}, killed: {ran - len(survivors)}, survivors: {len(survivors)}"
          + (f", not run in the time budget: {len(not_run)}" if not_run else "") + f" ({time.time() - start:.0f} s)")
    for m in survivors:
        print(f"  survivor kvmath/{m.module}:{m.line}: {m.what}    {m.source}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
