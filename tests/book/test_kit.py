"""The workshop kit (issue 21 items 2 and 4): two folders, the learner's holding no answer.

Fast (seconds): the Makefile's environment folders against the book's exclude_patterns,
the learner's source copies (``workshop_build.prepare``, as ``--sources-only``) against the
instructor's, one learner JupyterLite notebook run and filled (``kvbook.inline.fill``), the
PDF link of the download menu, the kit's front pages and layout check. Slow: the assembled
kit (``make workshop``), and ``make workshop``, ``make book``, ``make pdf`` in turn in a fresh
clone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from kvbook import inline
from kvbook.sphinx import book_pages
from kvbook.workshop import book_links, kit, workshop_build, workshop_lite, workshop_pages

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


# --- every folder a make target creates is left out of the book's build ---------------------

def _make_variables(text: str) -> dict[str, str]:
    raw = dict(re.findall(r"^([A-Z_]+)\s*[:?]?=\s*(\S.*?)\s*$", text, re.M))

    def expand(value: str, depth: int = 0) -> str:
        if depth > 5:
            return value
        return re.sub(r"\$\(([A-Z_]+)\)", lambda m: expand(raw.get(m.group(1), ""), depth + 1), value)

    return {name: expand(value) for name, value in raw.items()}


def makefile_folders(text: str) -> set[str]:
    """The top-level folders the Makefile's targets create in the checkout.

    Its environments (every variable named ``*VENV``), the folder of every stamp file
    (``*_STAMP``: node_modules/, .cache/, the environments), the build's outputs
    (``HTML``, ``WORKSHOP``, ``WSRC``) and what ``make clean`` removes.
    """
    variables = _make_variables(text)
    paths = [v for k, v in variables.items()
             if k.endswith("VENV") or k.endswith("_STAMP") or k in ("HTML", "WORKSHOP", "WSRC")]
    clean = re.search(r"^clean:.*\n((?:\t.*\n)+)", text, re.M)
    if clean:
        paths += [w for line in clean.group(1).splitlines() if "rm -rf" in line
                  for w in line.split("rm -rf", 1)[1].split()]
    tops = {Path(p).parts[0] for p in paths if p and not p.startswith(("/", "$"))}
    return {t for t in tops if t not in (".", "..")}


def test_every_folder_a_make_target_creates_is_excluded_from_the_book():
    makefile = (ROOT / "Makefile").read_text()
    folders = makefile_folders(makefile)
    # the parse finds what the Makefile is known to create (a parse that found nothing would pass)
    assert {".venv", ".venv-lite", "node_modules", ".cache", "_build"} <= folders, folders
    excluded = set(yaml.safe_load((ROOT / "_config.yml").read_text())["exclude_patterns"])
    missing = sorted(folders - excluded)
    assert not missing, f"_config.yml's exclude_patterns lack {missing}: a later `make book` would read them"


def test_the_folder_parse_sees_a_new_environment():
    text = "VENV ?= .venv\nOTHER_VENV := .venv-other\nX_STAMP := .tools/stamp\nclean:\n\trm -rf _build .junk\n"
    assert makefile_folders(text) == {".venv", ".venv-other", ".tools", "_build", ".junk"}


# --- the learner's source copies ------------------------------------------------------------

@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("workshop-src")
    return {v: workshop_build.prepare(v, src) for v in ("learner", "instructor")}


def _notebook_text(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])


def _solution_code(notebook: str) -> list[str]:
    """The code cells of a chapter's solutions (those stripping removes), each of some length."""
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    kept = {"".join(c["source"]) for c in workshop_build.strip_solutions(nb)["cells"]}
    return [src for c in nb["cells"] if c["cell_type"] == "code"
            for src in ["".join(c["source"])] if src not in kept and len(src.strip()) > 30]


def test_learner_copies_hold_no_solution(copies):
    removed = 0
    for notebook in CHAPTERS:
        text = _notebook_text(copies["learner"] / "notebooks" / f"{notebook}.ipynb")
        assert "{solution" not in text, notebook
        for code in _solution_code(notebook):
            removed += 1
            assert code not in text, f"{notebook}: a solution's code is in the learner copy"
            assert code in _notebook_text(copies["instructor"] / "notebooks" / f"{notebook}.ipynb")
    assert removed >= len(CHAPTERS), removed   # every chapter has solution code to look for
    # the answers the solutions record for the key (cell metadata) are not in the learner's copy
    recorded = 0
    for notebook in CHAPTERS:
        for variant in ("learner", "instructor"):
            cells = json.loads((copies[variant] / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
            n = sum(1 for c in cells if {"answers", "answer_values"} & set(c["metadata"].get("kvbook", {})))
            if variant == "learner":
                assert n == 0, notebook
            else:
                recorded += n
    original = sum(1 for n in CHAPTERS for c in json.loads((ROOT / "notebooks" / f"{n}.ipynb").read_text())["cells"]
                   if "answers" in c["metadata"].get("kvbook", {}))
    assert recorded == original
    problems = (copies["learner"] / "book" / "teaching" / "problems.md").read_text()
    assert "Worked answer" not in problems
    for p in workshop_pages.problems():
        worked = workshop_pages._fill(p["work"], p)
        assert worked not in problems and worked in (copies["instructor"] / "book" / "teaching" / "problems.md").read_text()


def test_only_the_learner_books_archive_leaves_the_tests_out(copies):
    import yaml

    def leave_out(variant):
        return yaml.safe_load((copies[variant] / "_config.yml").read_text())["sphinx"]["config"].get(
            "kvmath_archive_leave_out")
    assert leave_out("learner") == workshop_build.LEARNER_ARCHIVE_LEAVES_OUT and leave_out("instructor") is None


def test_learner_copies_hold_no_facilitator_note_and_no_instructor_page(copies):
    learner, instructor = copies["learner"], copies["instructor"]
    for f in (p for p in learner.rglob("*") if p.is_file() and "node_modules" not in p.parts):
        if f.suffix in (".md", ".ipynb", ".yml", ".yaml"):
            assert "Facilitator's note" not in f.read_text(), f
    assert all("Facilitator's note" in _notebook_text(instructor / "notebooks" / f"{n}.ipynb") for n in CHAPTERS)
    toc = (learner / "_toc.yml").read_text()
    for doc in workshop_build.INSTRUCTOR_ONLY:
        assert not (learner / f"{doc}.md").exists() and doc not in toc, doc
        assert (instructor / f"{doc}.md").exists() and doc in (instructor / "_toc.yml").read_text()
        name = doc.rsplit("/", 1)[1]
        for md in (learner / "book").rglob("*.md"):
            assert f"teaching/{name}" not in md.read_text(), f"{md.name} links the instructor page {name}"
    assert not list((learner / "book" / "teaching").glob("*.yaml"))   # the worked answers' data
    for doc in workshop_build.LEARNER_TEACHING:
        assert f"file: {doc}\n" in toc, doc
    assert "For instructors" not in (learner / "book" / "teaching.md").read_text()
    assert "For instructors" in (instructor / "book" / "teaching.md").read_text()


def test_copies_hold_no_environment(copies):
    for variant, dest in copies.items():
        top = {p.name for p in dest.iterdir()}
        for env in (".venv", ".venv-lite", ".cache", "_build", ".git", ".pytest_cache"):
            assert env not in top, (variant, env)
        # node_modules is linked (the build's MathJax), never built from: the copy's config excludes it
        assert (dest / "node_modules").is_symlink()
        assert "node_modules" in yaml.safe_load((dest / "_config.yml").read_text())["exclude_patterns"]
        assert not list(dest.rglob(".ipynb_checkpoints"))


def test_recorded_answers_are_dropped_from_the_learners_copy():
    end = {"cell_type": "markdown", "source": "```{solution-end}\n```\n\nAfter the solution.",
           "metadata": {"kvbook": {"answers": {"ex-a": {"x": "fmt_number(x)"}}, "answer_values": {"ex-a": {"x": "42"}},
                                   "other": 1}}}
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "```{solution-start} ex-a\n```\nx = 42."},
                    end]}
    out = workshop_build.learner_notebook(nb)
    assert [c["source"].strip() for c in out["cells"]] == ["After the solution."]
    assert out["cells"][0]["metadata"] == {"kvbook": {"other": 1}}
    assert end["metadata"]["kvbook"]["answer_values"] == {"ex-a": {"x": "42"}}   # the original is untouched


# --- the learner's live notebooks -------------------------------------------------------------

@pytest.fixture(scope="module")
def room_book(built_book) -> book_links.BuiltBook:
    """The book the room's copies link to and number from, as make lite reads the learner build's; the built book
    stands in for it (the learner build numbers the chapters, their figures and exercises alike)."""
    return book_links.BuiltBook.from_build(built_book.parent, base=book_links.LITE_BASE)


@pytest.fixture(scope="module")
def lite_copy(tmp_path_factory, room_book) -> Path:
    contents = tmp_path_factory.mktemp("lite-contents")
    [path] = workshop_lite.learner_contents(contents, ["00_sample_rhythm"], book=room_book)   # runs it: seconds
    return path


def test_the_rooms_copies_link_relative_to_their_page_and_number_as_the_book(lite_copy, room_book, tmp_path):
    """Review R21c-10: every link is relative (../../book/...), so the kit works below any path of an address;
    review R21c-7: each exercise and labelled equation carries the book's number. A root-relative link fails."""
    nb = json.loads(lite_copy.read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    hrefs = re.findall(r'<a href="([^"]*)" target="_blank"', text)
    assert hrefs and all(h.startswith("../../book/") for h in hrefs), hrefs
    # the book prints sample-bcrit as (2) (chapter 0 of _build/html), then Exercises 1, 2 and 3
    assert re.findall(r":enumerator: (\S+)", text) == ["2", "1", "2", "3"]
    assert "$$ (" not in text
    nb["cells"].append({"cell_type": "markdown", "metadata": {},
                        "source": '<a href="/book/book/notation.html" target="_blank" rel="noopener">Notation</a>'})
    (tmp_path / lite_copy.name).write_text(json.dumps(nb))
    assert any("not beside the site" in p for p in workshop_lite.check_notebooks(tmp_path, room_book))


def test_lite_notebook_is_the_learners_with_every_inline_expression_filled(lite_copy, room_book):
    nb = json.loads(lite_copy.read_text())
    assert workshop_lite.check_notebooks(lite_copy.parent, room_book) == []
    filled = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        stored = {e["expression"]: e["result"] for e in cell["metadata"].get("user_expressions", [])}
        assert set(inline.expressions("".join(cell["source"]))) == set(stored)
        filled += len(stored)
    original = _notebook_text(ROOT / "notebooks" / "00_sample_rhythm.ipynb")
    assert filled == sum(len(inline.expressions("".join(c["source"]))) for c in nb["cells"]
                         if c["cell_type"] == "markdown") >= 5
    assert "{solution" not in _notebook_text(lite_copy) and "{solution" in original
    # a real value: the check cell's B_crit at kipply's 1.5 TB/s, as kvmath computes it
    import kvmath
    from kvmath import formulas as F
    a100 = kvmath.Chip.preset("a100-40gb").replace(bandwidth=1.5e12)
    want = repr(f"{float(F.critical_batch(a100.flops('bf16'), a100.bandwidth, bytes_per_param=2)):.0f}")
    results = {e["expression"]: e["result"] for c in nb["cells"] for e in c["metadata"].get("user_expressions", [])}
    assert results['f"{float(b_crit_kipply):.0f}"']["data"]["text/plain"] == want == "'208'"
    assert nb["metadata"]["kernelspec"]["name"] == "python"
    assert all(c["outputs"] == [] for c in nb["cells"] if c["cell_type"] == "code")


def test_check_notebooks_finds_a_missing_result_and_a_solution(lite_copy, tmp_path):
    nb = json.loads(lite_copy.read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("user_expressions"))
    cell["metadata"]["user_expressions"] = cell["metadata"]["user_expressions"][1:]
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "```{solution-start} x\n```\nA."})
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    found = workshop_lite.check_notebooks(tmp_path)
    assert any("has no stored result" in p for p in found) and any("a solution" in p for p in found), found


# --- the download menu links only a PDF that exists ------------------------------------------

BUTTON = ('<li>\n<button onclick="window.print()"\n  class="btn btn-sm btn-download-pdf-button dropdown-item"\n'
          '  title="Print to PDF"\n  data-bs-placement="left" data-bs-toggle="tooltip"\n>\n'
          '<span class="btn__text-container">.pdf</span>\n</button>\n</li>')


def test_pdf_is_linked_only_once_it_exists(tmp_path):
    html = tmp_path / "book"
    (html / "notebooks").mkdir(parents=True)
    for page in ("index.html", "notebooks/01.html"):
        (html / page).write_text(f"<html><body>{BUTTON}</body></html>")
    # a build with no PDF keeps the print button
    assert book_pages.rewrite_page(BUTTON, html, "../") == BUTTON
    with pytest.raises(FileNotFoundError):
        book_pages.link_pdf(html, tmp_path / "kvmath-book-learner.pdf")
    (tmp_path / "kvmath-book-learner.pdf").write_bytes(b"%PDF-1.4\n")
    assert book_pages.link_pdf(html, tmp_path / "kvmath-book-learner.pdf") == 2
    assert 'href="../kvmath-book-learner.pdf" download' in (html / "index.html").read_text()
    assert 'href="../../kvmath-book-learner.pdf" download' in (html / "notebooks/01.html").read_text()
    assert "window.print" not in (html / "index.html").read_text()
    # the same build printed again, into itself: re-pointed, not doubled
    (html / book_pages.PDF_NAME).write_bytes(b"%PDF-1.4\n")
    book_pages.link_pdf(html, html / book_pages.PDF_NAME)
    page = (html / "notebooks/01.html").read_text()
    assert page.count(" download") == 1 and f'href="../{book_pages.PDF_NAME}"' in page


def test_the_built_books_pdf_links_resolve(built_book):
    pdf = built_book / book_pages.PDF_NAME
    linked = 0
    for page in built_book.rglob("*.html"):
        if page.relative_to(built_book).parts[0] in ("_static", "_vendor", "_sources", "_images"):
            continue
        for href in re.findall(r'href="([^"#?]+\.pdf)"', page.read_text(encoding="utf-8")):
            linked += 1
            assert (page.parent / href).resolve().is_file(), f"{page.relative_to(built_book)} links {href}"
    if pdf.is_file():   # make pdf (test-full) ran: every page's menu links it
        assert linked > 0
    else:               # make book alone: no page offers a PDF
        assert linked == 0


# --- the kit's layout ---------------------------------------------------------------------------

def _fake_kit(root: Path) -> Path:
    for variant in kit.VARIANTS:
        for name in kit.expected(variant):
            path = root / variant / name
            if name in ("book", "lite"):
                path.mkdir(parents=True)
                (path / "index.html").write_text("x")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("x")
    return root


def test_kit_check_finds_an_answer_key_in_the_learner_folder_and_anything_extra(tmp_path):
    fake = _fake_kit(tmp_path / "workshop")
    assert kit.check(fake) == []
    (fake / "learner" / "answer-key.md").write_text("secret")
    (fake / "handout.pdf").write_text("old layout")
    (fake / "learner" / "book" / "book" / "teaching").mkdir(parents=True)
    (fake / "learner" / "book" / "book" / "teaching" / "run-it.html").write_text("x")
    found = "\n".join(kit.check(fake))
    assert "learner/ holds answer-key.md" in found and "not just" in found and "run-it" in found, found


@pytest.mark.parametrize("variant", kit.VARIANTS)
def test_each_front_page_links_what_its_folder_holds(variant):
    page = kit.index_page(variant)
    targets = {href.split("/")[0].split("?")[0] for href in re.findall(r'href="([^"]+)"', page)
               if not href.startswith(("..", "book/book/", "http://localhost"))}
    want = kit.expected(variant) - {"index.html", "answer-key.json"}
    assert targets == want, (targets, want)
    if variant == "learner":
        assert "answer" not in page.lower() and "instructor" not in page.lower()


@pytest.mark.browser
def test_the_learners_front_page_reads_on_a_phone_and_says_what_works_from_disk(browser, tmp_path):
    """Opened from a USB stick (a file: URL) at 390 px (review R21-12, R21-13): the page fits the screen at a readable
    size, and a notice says that the live notebooks need a server and how to start one; served, the notice is hidden."""
    (tmp_path / "index.html").write_text(kit.index_page("learner"))
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto((tmp_path / "index.html").as_uri())
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        assert page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('li')).fontSize)") >= 16
        notice = page.locator("#from-disk")
        assert notice.is_visible() and "python3 -m http.server" in notice.inner_text()
        page.route("http://kit.test/**", lambda route: route.fulfill(body=kit.index_page("learner"),
                                                                       content_type="text/html"))
        page.goto("http://kit.test/index.html")
        assert not page.locator("#from-disk").is_visible()
    finally:
        page.close()


# --- slow: the assembled kit, and the targets in turn in a fresh clone -------------------------

KIT = kit.KIT


@pytest.mark.slow
def test_the_served_learner_folder_holds_no_answer_and_no_instructor_page():
    if not (KIT / "learner" / "index.html").exists():
        pytest.fail(f"{KIT} missing: run make workshop")
    assert kit.check(KIT) == []
    served = KIT / "learner"
    names = {p.name for p in served.rglob("*")}
    assert not names & {"answer-key.md", "answer-key.json"}
    for doc in workshop_build.INSTRUCTOR_ONLY:
        assert not (served / "book" / f"{doc}.html").exists(), doc
        assert (KIT / "instructor" / "book" / f"{doc}.html").exists(), doc
    for page in (served / "book").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "Facilitator's note" not in text and 'class="solution' not in text, page
    assert workshop_lite.check_notebooks(served / "lite" / "files" / "notebooks") == []
    # the source archive beside the learner book is the repository (review R21-4: it was empty) without the tests
    # (they hold the solutions' text): its chapters carry no solution, its pages no instructor's page
    with tarfile.open(served / "book" / "kvmath-source.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        for name in ("Makefile", "README.md", "requirements.txt", "kvmath/__init__.py", "notebooks/08_fitting_52b.ipynb"):
            assert f"kvmath/{name}" in members, name
        for doc in workshop_build.INSTRUCTOR_ONLY:
            assert f"kvmath/{doc}.md" not in members, doc
        assert not [n for n in members if n.startswith(("kvmath/tests/book/", "kvmath/tests/data/book_"))]
        assert "kvmath/tests/data/hf_configs/README.md" in members  # the data the chapters read
        for name, member in members.items():
            if name.endswith(".ipynb"):
                assert b"{solution-start}" not in tar.extractfile(member).read(), name
    for variant in kit.VARIANTS:
        pdf = KIT / variant / kit.pdf_name(variant)
        assert pdf.stat().st_size > 100_000
        # the book's index.html only redirects to its first page; that page's download menu links the PDF
        assert f'href="../../{pdf.name}" download' in (KIT / variant / "book" / "book" / "intro.html").read_text()


@pytest.mark.slow
def test_workshop_then_book_then_pdf_in_a_fresh_clone(tmp_path):
    """``make workshop``, ``make book``, ``make pdf`` one after the other in a fresh clone, each must succeed.

    The clone reuses this checkout's environments rather than installing them again: the
    book's venv (``VENV``; its stamp ``-o``, so make does not reinstall this checkout's
    editable packages into it from the clone), node_modules and .cache (linked, their
    stamps ``-o``); PYTHONPATH puts the clone's kvmath and kvbook first. ``.venv-lite``
    is made in the clone by ``make lite-env``. Takes many minutes.
    """
    venv = Path(sys.prefix) if (Path(sys.prefix) / "bin" / "jupyter-book").exists() else ROOT / ".venv"
    clone = tmp_path / "kvmath"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # the working tree as it is (the clone has the last commit): the tracked files' current text
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file() and not (ROOT / name).is_symlink():
            shutil.copy2(ROOT / name, clone / name)
    for shared in ("node_modules", ".cache"):
        (clone / shared).symlink_to((ROOT / shared).resolve())
    stamps = [f"{venv}/.kvmath-installed", "node_modules/.kvmath-installed",
              ".cache/pyodide-0.27.7/kvmath-runtime.json"]
    env = {**os.environ, "PYTHONPATH": f"{clone / 'packages' / 'kvbook'}:{clone}",
           "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    make = ["make", f"VENV={venv}", *(f"-o{s}" for s in stamps)]
    for target in ("workshop", "book", "pdf"):
        proc = subprocess.run([*make, target], cwd=clone, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"make {target} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert (clone / "_build" / "html" / book_pages.PDF_NAME).stat().st_size > 100_000
    out = clone / "_build" / "workshop"
    assert {p.name for p in out.iterdir()} == set(kit.VARIANTS)
    for variant in kit.VARIANTS:
        assert (out / variant / kit.pdf_name(variant)).stat().st_size > 100_000
    # the book of `make book` did not read the kit, the environments or the caches
    sources = {p.name for p in (clone / "_build" / "html" / "_sources").iterdir()}
    assert not sources & {".venv", ".venv-lite", ".cache", "node_modules", "_build"}, sources


def test_every_file_a_chapter_opens_travels_with_the_room_s_notebooks(tmp_path):
    """The room's copies read ../tests/data/... as the chapters do: each path a chapter's code opens is in
    workshop_lite.DATA, so it is copied beside them and packed in the kit's files wheel (chapter 11's measured sweep
    was not, and `make workshop` failed on it)."""
    import zipfile

    opened = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                opened |= set(re.findall(r"\.\./(tests/data/[\w./-]+\w)", "".join(cell["source"])))
    assert opened, "no chapter reads a repository file: the check has nothing to check"
    shipped = {p.relative_to(ROOT).as_posix() for p in workshop_lite.data_files()}
    assert opened <= shipped, sorted(opened - shipped)
    with zipfile.ZipFile(workshop_lite.build_files_wheel(tmp_path)) as wheel:
        packed = {n.removeprefix("kvmath_lite_files/_repo/") for n in wheel.namelist()}
    assert opened <= packed
