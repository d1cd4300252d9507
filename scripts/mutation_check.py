"""Mutation check of kvmath's formulas (not part of CI).

Applies one single-point mutation at a time to the modules of kvmath that compute
a quantity (swap ``>=`` and ``>``, ``<=`` and ``<``, ``+`` and ``-``, ``*`` and
``/``; drop one factor of a product; ``ceil`` <-> ``floor``, ``maximum`` <->
``minimum``) in a temporary copy of the package, runs the tests that execute the
mutated line against the copy, and reports the mutants no test killed.

    .venv/bin/python scripts/mutation_check.py              # every module, 2 workers
    .venv/bin/python scripts/mutation_check.py formulas.py -j 1
    .venv/bin/python scripts/mutation_check.py --list       # show the mutants, run nothing

Which tests run for a mutant: the fast tests (``FAST_TESTS``, less ``-m slow`` and
any test that starts a process) and the doctests of ``MODULES`` run once under
coverage.py, each test in its own dynamic context, which maps every line of kvmath
to the tests that execute it. A mutant runs only those tests, fastest first, with
``-x``. A line that runs while the modules are imported or the tests collected
(a preset table, a default argument, a parametrisation) may feed any test, so its
mutants run every fast test. A mutant whose line no test executes is reported as a
survivor, "not covered". The mapping is cached in ``.cache/mutation/`` under a hash
of the package's and the tests' sources, so a rerun on the same tree skips it.

Hypothesis tests draw at most ``MAX_EXAMPLES`` examples each in the copy.

Each worker (``-j``) is one process that has imported pytest, numpy and hypothesis
once; for each mutant it writes the mutated module into its own copy of the tree
and forks a child that runs the selected tests, killed after ``--timeout`` seconds more
than twice the time those tests took unmutated (a timeout counts as killed: a mutant
that makes a loop endless).

Modules left out (``LEFT_OUT``), because they compute no quantity: ``__init__`` and
``__main__`` (re-exports, the entry point), ``cli.py`` and ``cli_serving.py``
(argument plumbing: each option passed to a function that is mutated in its own
module), ``presets.py`` (reads the CSV tables and looks names up), ``results.py``
(the result containers' ``to_dict``) and ``units.py`` (exact unit constants, no
arithmetic that is mutated).

Exit status 0 when every mutant was killed, 1 when some survived.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = {"__init__.py", "__main__.py", "cli.py", "cli_serving.py", "presets.py", "results.py", "units.py"}
MODULES = sorted(p.name for p in (ROOT / "kvmath").glob("*.py") if p.name not in LEFT_OUT)
#: The tests that pin formulas: unit, contract and sources. Tests marked slow, and any test that
#: starts a process (found while the mapping is made), are left out: they test the install, not a formula.
FAST_TESTS = ["tests/unit", "tests/contract", "tests/sources"]
SWAP_OPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
SWAP_CMP = {ast.GtE: ast.Gt, ast.Gt: ast.GtE, ast.LtE: ast.Lt, ast.Lt: ast.LtE}
SWAP_CALLS = {"ceil": "floor", "floor": "ceil", "maximum": "minimum", "minimum": "maximum"}
OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=",
           ast.Lt: "<"}
#: Examples per hypothesis test in the copy, at most (the contract's fuzz tests draw up to 1,500 in CI): a wrong
#: formula fails on the first few, and a mutant no test kills runs every test that executes its line.
MAX_EXAMPLES = 100
#: pytest options of every run: the repository's addopts name the notebook plugins, which are not loaded.
PYTEST_OPTS = ["-q", "-p", "no:cacheprovider", "-o", "addopts=--doctest-modules", "-W", "ignore"]


@dataclass
class Project:
    """What is mutated and tested: ``package`` (a folder of ``root``), its ``modules``, the ``tests``
    (paths under ``root``), the other paths the tests need in each copy (``copy``: they hold bytecode
    and conftest files of their own), and those they only read (``link``: symlinked)."""

    root: str
    package: str
    modules: list[str]
    tests: list[str]
    copy: list[str] = field(default_factory=list)
    link: list[str] = field(default_factory=list)

    @property
    def doctests(self) -> list[str]:
        return [f"{self.package}/{m}" for m in self.modules]


_COPIED = ["tests", "pytest.ini", "scripts", "benchmarks"]
#: the book's sources, data and the kvbook package, which tests read (kvbook imports kvmath from the copy)
_LINKED = sorted(p.name for p in ROOT.iterdir() if not p.name.startswith((".", "_build"))
                 and p.name not in {"kvmath", "node_modules", *_COPIED})
KVMATH = Project(str(ROOT), "kvmath", MODULES, FAST_TESTS, _COPIED, _LINKED)


@dataclass
class Mutant:
    module: str
    index: int  # which candidate node in the module (ast.walk order)
    kind: str  # "op", "cmp", "drop-left", "drop-right", "call"
    line: int
    what: str
    source: str = ""
    end_line: int = 0
    statement_line: int = 0  # first line of the statement that holds the node


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


def _statement_line(node: ast.AST, parents: dict) -> int:
    p = node
    while p is not None and not isinstance(p, ast.stmt):
        p = parents.get(id(p))
    return p.lineno if p is not None else 0


def candidates(module: str, project: Project = KVMATH) -> list[Mutant]:
    text = (Path(project.root) / project.package / module).read_text()
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
        found = []
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP_OPS:
            new = SWAP_OPS[type(node.op)]
            found.append(("op", f"{OP_TEXT[type(node.op)]} -> {OP_TEXT[new]}"))
            if isinstance(node.op, (ast.Mult, ast.Div)):
                found.append(("drop-right", f"drop factor {ast.unparse(node.right)}"))
                if isinstance(node.op, ast.Mult):
                    found.append(("drop-left", f"drop factor {ast.unparse(node.left)}"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
            new = SWAP_CMP[type(node.ops[0])]
            found.append(("cmp", f"{OP_TEXT[type(node.ops[0])]} -> {OP_TEXT[new]}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in SWAP_CALLS and isinstance(node.func.value, ast.Name)):
            found.append(("call", f"{node.func.attr} -> {SWAP_CALLS[node.func.attr]}"))
        for kind, what in found:
            out.append(Mutant(module, i, kind, line, what, shown, node.end_lineno or line,
                              _statement_line(node, parents)))
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


def mutate(mutant: Mutant, project: Project = KVMATH) -> str:
    tree = ast.parse((Path(project.root) / project.package / mutant.module).read_text())
    order = {id(n): i for i, n in enumerate(ast.walk(tree))}
    tree = _Apply(mutant, order).visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


def _copy_tree(project: Project, dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    root = Path(project.root)
    for name in [project.package, *project.copy]:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    for name in project.link:
        (dest / name).symlink_to(root / name)


def _tree_hash(project: Project) -> str:
    """A hash of what the mapping depends on: the package (its data too) and the Python sources copied."""
    h = hashlib.sha256(json.dumps(asdict(project), sort_keys=True).encode())
    root = Path(project.root)
    for top in [project.package, *project.tests, *project.copy]:
        path = root / top
        pattern = "*" if top == project.package else "*.py"
        files = sorted(path.rglob(pattern)) if path.is_dir() else [path] if path.suffix == ".py" else []
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:20]


# ----- the mapping: every line of the package to the tests that execute it -------------------------------


COLLECT = "collect:"


class _Recorder:
    """pytest plugin of the mapping run: one coverage context per test, each test's duration and outcome,
    and the tests that start a process."""

    def __init__(self, cov):
        self.cov, self.durations, self.failed, self.spawners, self.current = cov, {}, [], set(), ""
        real_init = subprocess.Popen.__init__
        recorder = self

        def recording_init(popen, *a, **k):
            if recorder.current:
                recorder.spawners.add(recorder.current)
            real_init(popen, *a, **k)

        subprocess.Popen.__init__ = recording_init

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        # a test module's import (its parametrisations, its constants) feeds that module's tests
        is_module = isinstance(collector, pytest.Module)
        if is_module:
            self.cov.switch_context(COLLECT + collector.nodeid)
        yield
        if is_module:
            self.cov.switch_context("")

    def pytest_runtest_logstart(self, nodeid, location):
        self.current = nodeid
        self.cov.switch_context(nodeid)

    def pytest_runtest_logfinish(self, nodeid, location):
        self.current = ""
        self.cov.switch_context("")

    def pytest_runtest_logreport(self, report):
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            self.failed.append(report.nodeid)


def _cap_examples() -> None:
    """Every hypothesis ``settings`` made from now on (the tests' decorators, profiles) draws at most
    ``MAX_EXAMPLES``."""
    import hypothesis

    real = hypothesis.settings.__init__

    def capped(self, parent=None, **kwargs):
        if isinstance(kwargs.get("max_examples"), int) and kwargs["max_examples"] > MAX_EXAMPLES:
            kwargs["max_examples"] = MAX_EXAMPLES
        real(self, parent, **kwargs)

    hypothesis.settings.__init__ = capped


def _make_map(project: Project, tree: Path, out: Path) -> None:
    """Run in a fresh process: the tests under coverage in ``tree``, the mapping written to ``out``."""
    import importlib

    import coverage

    os.chdir(tree)
    sys.path.insert(0, str(tree))
    cov = coverage.Coverage(data_file=str(out.with_suffix(".coverage")), source=[str(tree / project.package)],
                            branch=False)
    _cap_examples()
    cov.start()
    # the package's own import (its preset tables, its constants) in the context "", before any test module
    for m in project.modules:
        importlib.import_module(f"{project.package}.{m[:-3]}")
    rec = _Recorder(cov)
    rc = pytest.main([*PYTEST_OPTS, "-m", "not slow", *project.doctests, *project.tests], plugins=[rec])
    cov.stop()
    cov.save()
    data = cov.get_data()
    lines: dict[str, dict[int, list[str]]] = {}
    for path in data.measured_files():
        rel = Path(path).resolve().relative_to(tree.resolve() / project.package)
        by_line = data.contexts_by_lineno(path)
        lines[str(rel)] = {ln: sorted(set(ctx) - rec.spawners) for ln, ctx in by_line.items()}
    tests = {n: d for n, d in rec.durations.items() if n not in rec.spawners}
    out.write_text(json.dumps({"rc": int(rc), "failed": rec.failed, "spawners": sorted(rec.spawners),
                               "durations": tests, "lines": lines}))


def load_map(project: Project, tree: Path, cache: Path | None) -> dict:
    """The mapping for ``project`` (made in ``tree``, a copy), from ``cache`` when its hash matches."""
    key = _tree_hash(project)
    cached = cache / f"{key}.json" if cache else None
    if cached and cached.exists():
        return json.loads(cached.read_text())
    out = tree.parent / "map.json"
    proc = subprocess.run([sys.executable, __file__, "--_map", json.dumps(asdict(project)), str(tree), str(out)],
                          env=_env(tree), capture_output=True, text=True)
    found = json.loads(out.read_text()) if out.exists() else {"rc": proc.returncode, "failed": []}
    if proc.returncode or found["rc"] not in (0, 5) or found["failed"]:
        raise SystemExit(f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}\nthe unmutated tests fail "
                         f"({', '.join(found['failed'][:3])}); fix them first")
    if cached:
        cache.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(found))
    return found


def select_tests(m: Mutant, mapping: dict) -> list[str]:
    """The tests that execute the mutated node's lines, fastest first: those that run them, every test of a
    test module whose import runs them, and every test (after those) when the package's import runs them;
    none when nothing runs them."""
    by_line = mapping["lines"].get(m.module, {})
    durations = mapping["durations"]
    found: set[str] = set()
    at_import = False
    for ln in {m.statement_line, *range(m.line, (m.end_line or m.line) + 1)}:
        for c in by_line.get(str(ln), []):
            if c == "":
                at_import = True
            elif c.startswith(COLLECT):
                prefix = c[len(COLLECT):] + "::"
                found.update(n for n in durations if n.startswith(prefix))
            else:
                found.add(c)
    chosen = sorted(found & durations.keys(), key=lambda n: (durations[n], n))
    if at_import:
        chosen += sorted(durations.keys() - found, key=lambda n: (durations[n], n))
    return chosen


# ----- the workers ---------------------------------------------------------------------------------------------


def _env(tree: Path) -> dict:
    # nbval and the Jupyter plugins take a second to load and test no formula
    path = os.pathsep.join(p for p in [str(tree), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


class _FirstFailure:
    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logreport(self, report):
        if report.failed and not os.path.exists(self.path):
            Path(self.path).write_text(report.nodeid)

    def pytest_collectreport(self, report):  # the mutant breaks a module's import: killed at collection
        if report.failed and not os.path.exists(self.path):
            Path(self.path).write_text(f"collecting {report.nodeid}")


def _serve(project: Project, tree: Path) -> None:
    """A worker: one JSON line per mutant on stdin ({module, source, tests, timeout}), one answer
    ({killed, reason, seconds}) on stdout. Each mutant runs in a forked child, so pytest, numpy and
    hypothesis are imported once, and the package afresh for every mutant."""
    import numpy  # noqa: F401  (imported once, before the forks)
    import pytest
    import hypothesis  # noqa: F401
    import hypothesis.strategies  # noqa: F401
    import _pytest.doctest  # noqa: F401

    os.chdir(tree)
    sys.path.insert(0, str(tree))
    out = sys.stdout
    for line in sys.stdin:
        job = json.loads(line)
        target = tree / project.package / job["module"]
        original = Path(project.root) / project.package / job["module"]
        fail_file = tree.parent / f"{tree.name}.failed"
        fail_file.unlink(missing_ok=True)
        out_file = tree.parent / f"{tree.name}.out"
        start = time.time()
        target.write_text(job["source"])
        pid = os.fork()
        if pid == 0:  # the child: run the tests, say nothing
            sys.dont_write_bytecode = True
            _cap_examples()
            log = os.open(out_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            try:
                rc = pytest.main([*PYTEST_OPTS, "-x", *job["tests"]], plugins=[_FirstFailure(str(fail_file))])
            except BaseException:
                rc = 3
            os._exit(int(rc))
        status = None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.time() - start > job["timeout"]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "timeout"
            else:
                time.sleep(0.005)
        shutil.copy2(original, target)  # copy2: the original's mtime, so its cached bytecode stays valid
        if status == "timeout":
            killed, reason = True, "timeout"
        else:
            rc = os.waitstatus_to_exitcode(status)
            killed = rc != 0
            reason = fail_file.read_text() if fail_file.exists() else ""
            if killed and not reason:  # pytest stopped outside any test (no mutant's doing): say why, run it again
                tail = [ln for ln in out_file.read_text(errors="replace").splitlines() if ln.strip()][-1:]
                killed, reason = None, f"error (exit {rc}): {tail[0][:200] if tail else 'no output'}"
        out.write(json.dumps({"killed": killed, "reason": reason, "seconds": time.time() - start}) + "\n")
        out.flush()


class Worker:
    def __init__(self, project: Project, tree: Path):
        self.proc = subprocess.Popen([sys.executable, __file__, "--_serve", json.dumps(asdict(project)), str(tree)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env(tree))

    def run(self, module: str, source: str, tests: list[str], timeout: float) -> dict:
        self.proc.stdin.write(json.dumps({"module": module, "source": source, "tests": tests,
                                          "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 60)
        if not ready:
            raise RuntimeError("a worker stopped answering")
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def run_mutants(project: Project, mutants: list[Mutant], jobs: int, timeout: float, cache: Path | None,
                max_seconds: float | None = None, report=print, tests: list[str] | None = None
                ) -> tuple[list[tuple[Mutant, bool | None, str, float]], dict]:
    """(mutant, killed, reason, seconds) for each mutant (killed None: not run in ``max_seconds``, or pytest
    stopped outside the tests twice, reason "error ..."), and the
    mapping. A mutant no test executes is not killed, reason "not covered". With ``tests``, every mutant
    runs those (pytest node ids) and no mapping is made."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        base = Path(tmp) / "clean"
        _copy_tree(project, base)
        mapping = (load_map(project, base, cache) if tests is None
                   else {"durations": dict.fromkeys(tests, 0.0), "lines": {}, "spawners": []})
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(base / project.package)], check=True,
                       stdout=subprocess.DEVNULL)
        slots = []
        for j in range(jobs):
            slot = Path(tmp) / f"slot{j}"
            shutil.copytree(base, slot, symlinks=True)  # with the bytecode, sources' mtimes kept
            slots.append(Worker(project, slot))
        free = list(slots)
        import threading

        lock = threading.Lock()

        def one(m: Mutant):
            if max_seconds is not None and time.time() - start > max_seconds:
                return m, None, "not run (time budget)", 0.0
            chosen = select_tests(m, mapping) if tests is None else tests
            if not chosen:
                return m, False, "not covered", 0.0
            with lock:
                w = free.pop()
            try:
                limit = timeout + 2 * sum(mapping["durations"][t] for t in chosen)
                r = w.run(m.module, mutate(m, project), chosen, limit)
                if r["killed"] is None:  # an error outside the tests (a busy machine's fork or file): once more
                    time.sleep(1)
                    r = w.run(m.module, mutate(m, project), chosen, limit)
            finally:
                with lock:
                    free.append(w)
            return m, r["killed"], r["reason"], r["seconds"]

        results = []
        try:
            with ThreadPoolExecutor(jobs) as pool:
                for n, res in enumerate(pool.map(one, mutants), 1):
                    results.append(res)
                    m, killed, reason, secs = res
                    mark = "not run " if killed is None else "killed  " if killed else "SURVIVED"
                    report(f"[{n}/{len(mutants)}] {mark} {project.package}/{m.module}:{m.line}: {m.what}"
                           f"  ({secs:.1f} s{', ' + reason if not killed else ''})")
        finally:
            for w in slots:
                w.close()
    return results, mapping


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("--_map", "--_serve"):  # the helper processes
        project = Project(**json.loads(sys.argv[2]))
        if sys.argv[1] == "--_map":
            _make_map(project, Path(sys.argv[3]), Path(sys.argv[4]))
        else:
            _serve(project, Path(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", default=MODULES, help="files in kvmath/ to mutate (default: MODULES)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel workers (default: 2)")
    ap.add_argument("--timeout", type=float, default=60,
                    help="seconds a mutant may take beyond twice its tests' unmutated time (default: 60)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no new mutant after this many seconds; the rest are reported as not run")
    ap.add_argument("--lines", type=lambda s: {int(n) for n in s.split(",")}, default=None,
                    help="only the mutants on these lines (comma-separated) of the modules named")
    ap.add_argument("--tests", nargs="+", default=None,
                    help="run these tests (pytest node ids) for every mutant, with no mapping: to confirm that "
                         "a new test kills the mutants it was written for")
    ap.add_argument("--json", type=Path, default=None, help="also write every mutant's result to this file")
    args = ap.parse_args()
    mutants = [m for mod in args.modules for m in candidates(mod) if args.lines is None or m.line in args.lines]
    if args.list:
        for m in mutants:
            print(f"kvmath/{m.module}:{m.line}: {m.what}    {m.source}")
        print(f"{len(mutants)} mutants")
        return 0
    start = time.time()
    results, mapping = run_mutants(KVMATH, mutants, args.jobs, args.timeout, ROOT / ".cache" / "mutation",
                                   args.max_seconds, tests=args.tests)
    elapsed = time.time() - start
    survivors = [(m, r) for m, killed, r, _ in results if killed is False]
    not_run = [m for m, killed, _, _ in results if killed is None]
    times = sorted(s for _, killed, r, s in results if killed is not None and r != "not covered")
    print(f"\nleft out, as they start a process: {', '.join(mapping['spawners']) or 'none'}")
    print(f"{'module':<20} {'mutants':>7} {'killed':>7} {'survived':>8} {'not run':>7}")
    for mod in args.modules:
        rs = [k for m, k, _, _ in results if m.module == mod]
        print(f"{mod:<20} {len(rs):>7} {rs.count(True):>7} {rs.count(False):>8} {rs.count(None):>7}")
    ran = len(results) - len(not_run)
    median = times[len(times) // 2] if times else 0.0
    print(f"mutants: {ran}, killed: {ran - len(survivors)}, survivors: {len(survivors)}"
          + (f", not run (time budget, or errors outside the tests): {len(not_run)}" if not_run else "")
          + f" ({elapsed:.0f} s, -j {args.jobs}, median {median:.2f} s a mutant)")
    for m, reason in survivors:
        print(f"  survivor kvmath/{m.module}:{m.line}: {m.what}    {m.source}"
              + ("    (not covered)" if reason == "not covered" else ""))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(m), "killed": k, "reason": r, "seconds": s}
                                         for m, k, r, s in results], indent=1) + "\n")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
