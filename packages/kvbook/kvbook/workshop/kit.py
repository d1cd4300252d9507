"""The workshop kit's two folders (issue 21 items 2 and 4): ``make workshop`` ends here.

``_build/workshop/`` holds exactly two folders, and nothing else::

    learner/      the only folder to serve to the room or copy to a USB stick
      index.html              front page: the book, the live notebooks, the handout, the PDF
      book/                   the learner build (no solution, no instructor page)
      lite/                   JupyterLite: the learner's notebooks, live (workshop_lite.py)
      handout.pdf             two A4 pages (handout.py)
      kvmath-book-learner.pdf the learner build printed (scripts/make_pdf.py)
    instructor/   for the person running the room
      index.html                 front page: the book, the answer key, the PDF
      book/                      the instructor build (solutions, facilitator's notes)
      answer-key.md, .json       one line per exercise (answer_key.py)
      kvmath-book-instructor.pdf the instructor build printed

The handout, the live notebooks and the answer key are written into their folders
by their own targets (``make handout``, ``make lite``, ``make answer-key``); this
script copies the two builds of ``workshop_build.py`` in as ``book/``, writes the
front pages, prints each book to its PDF beside it (each page's download menu then
links that PDF: ``book_pages.link_pdf``), removes anything else from the top of
``_build/workshop/`` (an older kit's layout) and fails unless each folder holds
exactly what is listed above. The book of ``make book`` (``_build/html``) is
neither read nor touched.

Usage::

    python -m kvbook.workshop.kit            # after make learner instructor handout answer-key lite
    python -m kvbook.workshop.kit --no-pdf   # the layout without the PDFs (then they are not listed)
    python -m kvbook.workshop.kit --check    # check an assembled kit
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import sys
from pathlib import Path

from kvbook.repo import ROOT
from kvbook.workshop import workshop_build, workshop_pages

KIT = ROOT / "_build" / "workshop"
VARIANTS = ("learner", "instructor")


def pdf_name(variant: str) -> str:
    return f"kvmath-book-{variant}.pdf"


#: What each folder holds, and nothing more (the PDF when it is made).
LAYOUT = {
    "learner": {"index.html", "book", "lite", "handout.pdf"},
    "instructor": {"index.html", "book", "answer-key.md", "answer-key.json"},
}

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em;line-height:1.5}"
          "a{font-size:1.2em}.chapters a{font-size:1em}.chapters li{margin:.4em 0}")


#: Shown only where the page is opened from disk (a USB stick; review R21-12): the book and the handout work there,
#: the live notebooks need a server, and this says how to start one on the learner's own laptop.
_FROM_DISK = (
    '<p id="from-disk" hidden><strong>Opened from a file.</strong> The book and the handout work as they are; '
    "the live notebooks need a web server. Copy this folder to your laptop (say as <code>learner</code>), run "
    "<code>python3 -m http.server -d learner 8000</code> and open "
    '<a href="http://localhost:8000/">http://localhost:8000/</a>.</p>'
    "<script>if (location.protocol === 'file:') document.getElementById('from-disk').hidden = false;</script>")

#: The room's notebooks as the learner's front page opens them: each chapter in JupyterLite's Notebook interface, one
#: chapter a page at any width (JupyterLab on a phone gave the notebook 62 px beside its file browser; review
#: R21b-4), and JupyterLab on the first chapter, for a laptop.
LITE_CHAPTER = "lite/notebooks/index.html?path=notebooks/{}.ipynb"
LITE_LAB = "lite/lab/index.html?path=notebooks/01_roofline.ipynb"


def live_chapters() -> list[tuple[str, str]]:
    """(href, "n. title") of each chapter live in the room, in book order, the sample chapter last as in the book."""
    return [(LITE_CHAPTER.format(name), f"{int(name[:2])}. {workshop_pages.chapter(name)['title']}")
            for name in workshop_pages.chapter_names()]


#: Each folder's front page: its title, the links to what it holds (href, text, what it is), the text of the
#: link to its PDF, and a note under the list.
FRONT_PAGES = {
    "learner": dict(
        title="kvmath workshop",
        items=[
            ('book/index.html', "The book", "learner edition: every exercise, no solutions"),
            (None, "The notebooks, live in your browser",
             "JupyterLite: each chapter on a page of its own, on a laptop or a phone; run, edit and re-run it; "
             "nothing is installed, nothing leaves this room; the first start took "
             f"{workshop_pages.first_load_words()} on a slow laptop's stand-in"),
            (LITE_LAB, "The same notebooks in JupyterLab", "tabs and a file browser, for a laptop's screen"),
            ('handout.pdf', "Handout", "two A4 pages"),
        ],
        pdf=("The book as one PDF", "the learner edition, to print or keep"),
        note=(f"{_FROM_DISK}<p>Your edits in the live notebooks stay in this browser only. Served from a room's "
              "address (not <code>localhost</code>), a browser allows no service worker, so the notebooks "
              "cannot read files beside them and \"save\" keeps a copy in the browser's storage; copied to "
              "your laptop and served on <code>localhost</code>, the full JupyterLite works.</p>")),
    "instructor": dict(
        title="kvmath workshop: instructor",
        items=[
            ('book/index.html', "The instructor's book", "solutions, and a facilitator's note atop every chapter"),
            ('answer-key.md', "Answer key", "one line per exercise, the numbers the notebooks computed "
                                            "(also as answer-key.json)"),
        ],
        pdf=("The instructor's book as one PDF", "with its solutions"),
        note=("<p>This folder is for the person running the room: do not serve it or copy it to the "
              "learners' stick. Serve <code>../learner/</code> (the book without solutions, the live "
              "notebooks, the handout): see the book's <a href=\"book/book/teaching/run-it.html\">room "
              "checklist</a>.</p>")),
}


def index_page(variant: str, pdf: bool = True) -> str:
    """The kit folder's front page: a link to each thing in the folder."""
    page = FRONT_PAGES[variant]
    items = page["items"] + ([(pdf_name(variant), *page["pdf"])] if pdf else [])
    title, note = page["title"], page["note"]
    def item(href, text, what):
        if href is not None:
            return f'<li><a href="{html.escape(href)}">{html.escape(text)}</a> ({html.escape(what)})</li>'
        chapters = "".join(f'<li><a href="{html.escape(h)}">{html.escape(t)}</a></li>' for h, t in live_chapters())
        return f"<li>{html.escape(text)} ({html.escape(what)}):<ul class=\"chapters\">{chapters}</ul></li>"

    lis = "\n".join(item(*entry) for entry in items)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>\n'
            f"<style>{_STYLE}</style></head>\n<body>\n<h1>{title}</h1>\n<ul>\n{lis}\n</ul>\n{note}\n</body></html>\n")


def expected(variant: str, pdf: bool = True) -> set[str]:
    return LAYOUT[variant] | ({pdf_name(variant)} if pdf else set())


def check(kit: Path = KIT, pdf: bool = True) -> list[str]:
    """Problems of an assembled kit: anything missing or extra, at the top or in a folder."""
    problems = []
    top = {p.name for p in kit.iterdir()} if kit.is_dir() else set()
    if top != set(VARIANTS):
        problems.append(f"{kit}: holds {sorted(top)}, not just {list(VARIANTS)}")
    for variant in VARIANTS:
        folder = kit / variant
        have = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        want = expected(variant, pdf)
        if missing := sorted(want - have):
            problems.append(f"{variant}/ lacks {missing}")
        if extra := sorted(have - want):
            problems.append(f"{variant}/ has what it should not: {extra}")
        if not (folder / "book" / "index.html").is_file():
            problems.append(f"{variant}/book/ has no index.html")
    learner = kit / "learner"
    for leak in ("answer-key.md", "answer-key.json", "instructor"):
        if list(learner.rglob(leak)):
            problems.append(f"learner/ holds {leak}")
    for doc in workshop_build.INSTRUCTOR_ONLY:
        if (learner / "book" / f"{doc}.html").exists():
            problems.append(f"learner/book/ holds the instructor page {doc}")
    return problems


def assemble(kit: Path = KIT, pdf: bool = True) -> Path:
    kit.mkdir(parents=True, exist_ok=True)
    for entry in kit.iterdir():          # an older kit's layout: book/, lite/, handout.pdf, ...
        if entry.name not in VARIANTS:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for variant in VARIANTS:
        folder = kit / variant
        folder.mkdir(exist_ok=True)
        built = workshop_build.SRC / variant / "_build" / "html"
        if not (built / "index.html").is_file():
            raise SystemExit(f"kit: {built} missing: make {variant}")
        if (folder / "book").exists():
            shutil.rmtree(folder / "book")
        shutil.copytree(built, folder / "book")
        for old in folder.glob("kvmath-book-*.pdf*"):
            old.unlink()
        if pdf:
            target = folder / pdf_name(variant)
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_pdf.py"), str(folder / "book"),
                            str(target), str(workshop_build.SRC / variant / "_toc.yml")], check=True)
            # make_pdf writes its page map beside the PDF (for the tests); the kit keeps the PDF only
            Path(str(target) + ".json").unlink(missing_ok=True)
        (folder / "index.html").write_text(index_page(variant, pdf))
    return kit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-pdf", action="store_true", help="do not print the books")
    parser.add_argument("--check", action="store_true", help="only check an assembled kit")
    args = parser.parse_args(argv)
    if not args.check:
        assemble(pdf=not args.no_pdf)
    problems = check(pdf=not args.no_pdf)
    if problems:
        print("kit: " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"Workshop kit in {KIT.relative_to(ROOT)}/: learner/ (serve or copy only this one) and instructor/")
    print(f"Serve it to the room:  python3 -m http.server -d {(KIT / 'learner').relative_to(ROOT)} 8000 "
          "--bind 0.0.0.0")
    print("  learners open http://<this machine's address>:8000/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
