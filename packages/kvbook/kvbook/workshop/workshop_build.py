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
  The answers the solutions record for the key (cell metadata) go too
  (:func:`learner_notebook`). The learner
  build has no instructor page either: the plans (with their facilitator's
  notes), the misconceptions, the room checklist and the instructors' page
  (``INSTRUCTOR_ONLY``) are removed from the copy and from its table of
  contents; ``book/teaching.md`` becomes a short page for learners
  (``LEARNER_TEACHING_PAGE``) and the introduction's "Teach with it" paragraph
  points at it. A learner keeps the pen-and-paper problems (without worked
  answers) and the anatomy of a chapter (``notebooks/00_sample_rhythm``,
  stripped like every chapter).
- ``instructor``: the book as ``make book`` builds it, plus a facilitator's
  note at the top of every chapter, generated from ``book/teaching/plans.yaml``
  and ``misconceptions.yaml`` (its slots in the plans, objectives, exercises
  to set, what to watch for). Every teaching page is there.

The copies hold the book's sources only (``COPIED``; ``LINKED`` are symlinks
the build reads, none of them an environment but ``node_modules``, which the
book's ``exclude_patterns`` leave out): no ``.venv``, ``.venv-lite``, ``.cache``
or ``_build`` is copied, and notebook checkpoints are not either.

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
#: ``_static`` holds the book's own stylesheet and script (kvmath.css, kvmath.js), which Jupyter Book copies from the
#: book's root: without it the kits' pages lose the print rules, the phone table rules and the footer's source link
#: (review R21b-1).
COPIED = ["_config.yml", "_toc.yml", "_static", "book", "notebooks"]
LINKED = ["kvmath", "scripts", "tests", "benchmarks", "node_modules", "pyproject.toml"]
#: Tracked top-level entries the book build does not read (tests/book/test_workshop.py checks that every tracked
#: entry is copied, linked or named here, so a new one is decided on, not forgotten).
NOT_READ = [".ci", ".gitignore", "Makefile", "README.md", "licenses", "package-lock.json", "package.json", "packages",
            "pytest.ini", "requirements-lite-browser.txt", "requirements-lite.txt", "requirements-pyodide.txt",
            "requirements.txt"]

START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}")
END = re.compile(r"^(`{3,}|:{3,})\{solution-end\}")
PLAIN = re.compile(r"^(`{3,}|:{3,})\{solution\}")
#: Tracked files the learner book's source archive (kvmath-source.tar.gz) leaves out: the tests and the records of the
#: book's text and numbers hold every solution; the chapters' data under tests/data stay (the notebooks read them).
LEARNER_ARCHIVE_LEAVES_OUT = ["tests/*.py", "tests/*.cfg", "tests/book/*", "tests/browser/*", "tests/contract/*",
                              "tests/sources/*", "tests/unit/*", "tests/data/book_*"]

#: Teaching pages only the instructor build has (facilitator's notes, the room's checklist).
INSTRUCTOR_ONLY = [*(f"book/teaching/{plan['id']}" for plan in workshop_pages.plans()), "book/teaching/run-it",
                   "book/teaching/misconceptions"]
#: Teaching pages the learner build keeps (the problems without their worked answers).
LEARNER_TEACHING = ["book/teaching", "book/teaching/problems", "notebooks/00_sample_rhythm"]
LEARNER_TEACHING_PAGE = """# The workshop

This is the learner edition of the book: every exercise is here, without its
solution (work it out, then compare with your neighbour; your instructor has
the answers). The workshop also uses:

- {doc}`teaching/problems`: problems for pen and paper, each giving every
  number it uses;
- {doc}`/notebooks/00_sample_rhythm`: how every chapter is built, on one idea;
- the live notebooks: every chapter runnable in your browser, linked from the
  kit's front page, and the two-page handout.
"""
TEACH_PARAGRAPH = re.compile(r"^\*\*Teach with it\.\*\*.*?(?=\n\s*\n|\Z)", re.S | re.M)
LEARNER_INTRO_PARAGRAPH = (
    "**In the workshop.** This is the learner edition: every exercise is here without its "
    "solution, and the [pen-and-paper problems](teaching/problems.md) come without their worked "
    "answers. The [workshop page](teaching.md) lists what the room uses.")


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


def solution_code_cells(nb: dict) -> list[int]:
    """The indices of the code cells inside a gated solution (between ``{solution-start}`` and ``{solution-end}``)."""
    inside, found = False, []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            if inside:
                found.append(i)
            continue
        for line in "".join(cell["source"]).splitlines():
            if START.match(line.strip()):
                inside = True
            elif END.match(line.strip()):
                inside = False
    return found


def drop_recorded_answers(nb: dict) -> dict:
    """A copy of a notebook without the answers its solutions record for the key (cell metadata).

    ``metadata["kvbook"]["answers"]`` (expressions over the solution's variables, which the
    learner's copy no longer defines) and ``["answer_values"]`` (their text: the answers).
    """
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        meta = cell.get("metadata", {}).get("kvbook")
        if isinstance(meta, dict):
            meta.pop("answers", None)
            meta.pop("answer_values", None)
            if not meta:
                del cell["metadata"]["kvbook"]
    return out


def learner_notebook(nb: dict) -> dict:
    """The learner's copy of a chapter: no solution, no recorded answer."""
    return drop_recorded_answers(strip_solutions(nb))


def learner_toc(toc: dict) -> dict:
    """The table of contents without the ``INSTRUCTOR_ONLY`` pages; the teaching part renamed."""
    toc = copy.deepcopy(toc)

    def keep(entries):
        out = []
        for e in entries or []:
            if e.get("file") in INSTRUCTOR_ONLY:
                continue
            if "sections" in e:
                e["sections"] = keep(e["sections"])
                if not e["sections"]:
                    del e["sections"]
            out.append(e)
        return out

    for part in toc.get("parts", []):
        part["chapters"] = keep(part.get("chapters"))
        if part.get("caption") == "Teaching with this book":
            part["caption"] = "The workshop"
    return toc


def add_facilitator_note(nb: dict, notebook: str) -> dict:
    """A copy of a notebook with its facilitator's note after the title cell."""
    note = workshop_pages.facilitator_note(notebook)
    out = copy.deepcopy(nb)
    if note is None:
        return out
    at = next(i for i, c in enumerate(out["cells"])
              if c["cell_type"] == "markdown" and re.search(r"^# ", "".join(c["source"]), re.M))
    # a cell id of its own (nbformat 4.5 requires one), fixed per chapter so the copies build alike
    out["cells"].insert(at + 1, {"cell_type": "markdown", "id": f"facilitator-note-{notebook[:2]}", "metadata": {},
                                 "source": note})
    return out


def prepare(variant: str, src: Path = SRC) -> Path:
    """Copy the book's sources to ``src/<variant>`` (_build/workshop-src/) and transform them."""
    dest = src / variant
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    for name in LINKED:
        if (ROOT / name).exists():
            (dest / name).symlink_to(ROOT / name)
    for path in sorted((dest / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        nb = learner_notebook(nb) if variant == "learner" else add_facilitator_note(nb, path.stem)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    config = (dest / "_config.yml").read_text()
    label = {"learner": "learner edition", "instructor": "instructor edition"}[variant]
    config = re.sub(r'^title: "(.*)"$', rf'title: "\1 ({label})"', config, count=1, flags=re.M)
    if variant == "learner":
        config = re.sub(r"^  config:\n", "  config:\n    kvmath_archive_leave_out: " + json.dumps(LEARNER_ARCHIVE_LEAVES_OUT)
                        + "\n", config, count=1, flags=re.M)
    (dest / "_config.yml").write_text(config)
    if variant == "learner":
        learner_pages(dest)
    return dest


def learner_pages(dest: Path) -> None:
    """The learner copy's pages: no instructor page, the learner's problems and workshop page."""
    import yaml

    (dest / "book" / "teaching" / "problems.md").write_text(workshop_pages.problems_page(learner=True))
    for doc in INSTRUCTOR_ONLY:
        (dest / f"{doc}.md").unlink()
    for data in (dest / "book" / "teaching").glob("*.yaml"):   # the plans' notes, the worked answers
        data.unlink()
    (dest / "book" / "teaching.md").write_text(LEARNER_TEACHING_PAGE)
    toc = yaml.safe_load((dest / "_toc.yml").read_text())
    (dest / "_toc.yml").write_text(yaml.safe_dump(learner_toc(toc), sort_keys=False))
    intro = dest / "book" / "intro.md"
    text, n = TEACH_PARAGRAPH.subn(LEARNER_INTRO_PARAGRAPH, intro.read_text(), count=1)
    if n != 1:
        raise ValueError(f"{intro}: no 'Teach with it' paragraph to replace for learners")
    intro.write_text(text)
    # any other page that still names an instructor page would break the build (-n): say which
    for md in (dest / "book").rglob("*.md"):
        for doc in INSTRUCTOR_ONLY:
            name = doc.rsplit("/", 1)[1]
            if re.search(rf"(?:teaching/|\b){re.escape(name)}(?:\.md)?[`)>]", md.read_text()):
                raise ValueError(f"{md.relative_to(dest)} links the instructor page {doc}")


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
