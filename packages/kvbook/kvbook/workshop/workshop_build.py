"""Learner and instructor builds of the book (issue 15 item 2).

``make book`` keeps every solution in its dropdown. This script builds two
more versions from copies of the sources under ``_build/workshop-src/``:

- ``learner``: every solution removed from the notebooks before the build
  (the gated ``{solution-start}`` ... ``{solution-end}`` blocks, the code
  cells between them, and plain ``{solution}`` directives), and the
  pen-and-paper problems without their worked answers. Removing them from
  the sources, not hiding them in the HTML, keeps them out of the page, the
  search index and the downloadable ``_sources`` alike. (sphinx-exercise's
  ``hide_solutions`` crashes on the gated syntax with "unknown node type:
  solution_end_node", and leaves the solution's text and code on the page.)
- ``instructor``: the book as ``make book`` builds it, plus a facilitator's
  note at the top of every chapter, generated from ``book/teaching/plans.yaml``
  and ``misconceptions.yaml`` (its slots in the plans, objectives, exercises
  to set, what to watch for).

Both are executed and built with warnings as errors, like ``make book``, and
render offline (the same vendored MathJax and widget assets).

Usage::

    python -m kvbook.workshop.workshop_build learner      # -> _build/workshop-src/learner/_build/html
    python -m kvbook.workshop.workshop_build instructor
    python -m kvbook.workshop.workshop_build learner --sources-only   # copies, no build
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from kvbook.repo import ROOT
from kvbook.workshop import workshop_pages

SRC = ROOT / "_build" / "workshop-src"
COPIED = ["_config.yml", "_toc.yml", "book", "notebooks"]
LINKED = ["kvmath", "kvbook", "scripts", "tests", "benchmarks", "node_modules", "pyproject.toml"]

START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}")
END = re.compile(r"^(`{3,}|:{3,})\{solution-end\}")
PLAIN = re.compile(r"^(`{3,}|:{3,})\{solution\}")


def strip_solutions(nb: dict) -> dict:
    """A copy of a notebook with every solution, its prose and its code cells, removed."""
    out = copy.deepcopy(nb)
    cells, in_solution, close_fence = [], False, None
    for cell in out["cells"]:
        if cell["cell_type"] != "markdown":
            if not in_solution:
                cells.append(cell)
            continue
        kept, skip_next_fence = [], False
        for line in "".join(cell["source"]).splitlines(keepends=True):
            bare = line.strip()
            if close_fence is not None:          # inside a plain {solution} directive
                if bare == close_fence:
                    close_fence = None
                continue
            if skip_next_fence:                  # the closing fence of {solution-end}
                skip_next_fence = False
                if re.fullmatch(r"`{3,}|:{3,}", bare):
                    continue
            if in_solution:
                if END.match(bare):
                    in_solution, skip_next_fence = False, True
                continue
            if START.match(bare):
                in_solution = True
                continue
            m = PLAIN.match(bare)
            if m:
                close_fence = m.group(1)
                continue
            kept.append(line)
        text = "".join(kept).rstrip() + "\n" if "".join(kept).strip() else ""
        if text:
            cell["source"] = text
            cells.append(cell)
    if in_solution or close_fence is not None:
        raise ValueError("a solution is never closed")
    out["cells"] = cells
    return out


def add_facilitator_note(nb: dict, notebook: str) -> dict:
    """A copy of a notebook with its facilitator's note after the title cell."""
    note = workshop_pages.facilitator_note(notebook)
    out = copy.deepcopy(nb)
    if note is None:
        return out
    at = next(i for i, c in enumerate(out["cells"])
              if c["cell_type"] == "markdown" and re.search(r"^# ", "".join(c["source"]), re.M))
    out["cells"].insert(at + 1, {"cell_type": "markdown", "metadata": {}, "source": note})
    return out


def prepare(variant: str) -> Path:
    """Copy the book's sources to _build/workshop-src/<variant> and transform them."""
    dest = SRC / variant
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    for name in LINKED:
        if (ROOT / name).exists():
            (dest / name).symlink_to(ROOT / name)
    for path in sorted((dest / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        nb = strip_solutions(nb) if variant == "learner" else add_facilitator_note(nb, path.stem)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    config = (dest / "_config.yml").read_text()
    label = {"learner": "learner edition", "instructor": "instructor edition"}[variant]
    config = re.sub(r'^title: "(.*)"$', rf'title: "\1 ({label})"', config, count=1, flags=re.M)
    (dest / "_config.yml").write_text(config)
    if variant == "learner":
        (dest / "book" / "teaching" / "problems.md").write_text(workshop_pages.problems_page(learner=True))
    return dest


def build(dest: Path) -> Path:
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(dest), "--all", "-W", "-n", "--keep-going"]
    html = dest / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    subprocess.run(cmd, check=True)
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=["learner", "instructor"])
    parser.add_argument("--sources-only", action="store_true", help="prepare the copies, do not build")
    args = parser.parse_args(argv)
    dest = prepare(args.variant)
    if not args.sources_only:
        print(f"built {build(dest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
