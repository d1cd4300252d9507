"""``make lab``: the chapters in JupyterLab, reading as they do in the book.

JupyterLab with jupyterlab-myst renders a chapter's MyST and its inline expressions, but it
sees one notebook at a time: a reference to another chapter shows as a file name and a
citation as its bare key (jupyterlab-myst resolves no citations; review R21-9). So
``make lab`` opens copies of the chapters in ``_build/lab/notebooks/``, each one the chapter
as committed (solutions, outputs and stored inline results included) with its
cross-references and citations rewritten as links into the built book
(:mod:`kvbook.workshop.book_links`), and its Jupyter server serves that book at ``/book/``
(this module is also that server extension: ``--ServerApp.jpserver_extensions=kvbook.lab=True``).

The copies are the reader's to edit. A copy is written when it is missing, or when its
chapter in ``notebooks/`` changed since it was written and the reader has not changed it;
a changed copy is kept, and a line says that a newer chapter is waiting. Changed means
what the reader sees (:func:`content_digest`): a cell's source, or the outputs of the cells
they ran. JupyterLab rewrites every notebook it opens when it autosaves (sources split
into lines, the kernel's ``language_info``, ``collapsed`` on cells with hidden outputs:
review R21c-2); a copy only opened is renewed like one never opened. The chapters read
``../tests/data/``, copied beside them.

jupyterlab-myst draws a gated solution's ``{solution-start}`` and ``{solution-end}`` as two
bars and cannot fold the cells between them, which the book hides in a dropdown; so the
copies open each solution's code cells collapsed, code and output (review R21c-8), and a
click shows them. The solution's prose, in the Markdown cells, shows between the bars.

Usage::

    python -m kvbook.lab          # write or refresh the copies (make lab runs it, then JupyterLab)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from kvbook.repo import ROOT
from kvbook.workshop import book_links, workshop_build, workshop_lite

OUT = ROOT / "_build" / "lab"
BOOK_BUILD = ROOT / "_build"  # .doctrees/ and html/ of `make book`
#: What each copy was written from and as: {notebook: {"source": sha256 of the chapter's file,
#: "content": :func:`content_digest` of the copy}}.
MANIFEST = ".kvbook-lab.json"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _output(output: dict) -> dict:
    """An output as the reader sees it: its text and data, without the execution count or metadata."""
    seen = {"output_type": output.get("output_type")}
    for key in ("name", "text", "ename", "evalue", "traceback"):
        if key in output:
            seen[key] = _text(output[key])
    if "data" in output:
        seen["data"] = {mime: _text(value) for mime, value in output["data"].items()}
    return seen


def content_digest(nb: dict) -> str:
    """The sha256 of what a reader changes in a notebook: each cell's type and source, and a code cell's outputs.

    Not the metadata (the kernel's ``language_info``, ``collapsed``, the inline expressions' stored results),
    the execution counts, or how the file is written (a source as one string or as lines, key order, indent):
    JupyterLab changes those in a copy it only opened (review R21c-2).
    """
    cells = [[c["cell_type"], _text(c.get("source", "")),
              [_output(o) for o in c.get("outputs", [])] if c["cell_type"] == "code" else None]
             for c in nb.get("cells", [])]
    return _digest(json.dumps(cells, sort_keys=True, ensure_ascii=False).encode())


def fold_solutions(nb: dict) -> dict:
    """``nb`` with the code cells of its solutions collapsed, source and outputs."""
    for i in workshop_build.solution_code_cells(nb):
        nb["cells"][i]["metadata"]["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
    return nb


def _changed(target: Path, seen: dict) -> bool:
    """Whether the reader changed the copy since it was written (one that no longer parses, they did)."""
    if "content" not in seen:   # a manifest of before content digests: only the file's bytes were recorded
        return _digest(target.read_bytes()) != seen["written"]
    try:
        return content_digest(json.loads(target.read_text())) != seen["content"]
    except (ValueError, UnicodeDecodeError):
        return True


def _shown(path: Path) -> str:
    """A path as a reader at the repository's root would type it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def prepare(out: Path = OUT, build: Path = BOOK_BUILD) -> list[str]:
    """Write or refresh the copies in ``out``; returns one line per changed copy kept over a newer chapter."""
    book = book_links.BuiltBook.from_build(build)
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    workshop_lite.copy_data_files(out)
    manifest_path = out / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    kept = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        source = path.read_bytes()
        target = out / "notebooks" / path.name
        seen = manifest.get(path.name)
        if target.exists() and seen:
            if seen["source"] == _digest(source):
                continue
            if _changed(target, seen):
                kept.append(f"{_shown(target)}: kept, with your changes (a cell's source, or the outputs of cells "
                            f"you ran); notebooks/{path.name} changed since (delete the copy to get the new chapter)")
                continue
        copy = fold_solutions(book.rewrite_notebook(json.loads(source), path.stem))
        target.write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n")
        manifest[path.name] = {"source": _digest(source), "content": content_digest(copy)}
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return kept


def _jupyter_server_extension_points():
    return [{"module": "kvbook.lab"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Serve the built book at ``<base_url>book/``, where the copies' links point."""
    from jupyter_server.utils import url_path_join
    from tornado.web import StaticFileHandler

    html = BOOK_BUILD / "html"
    pattern = url_path_join(serverapp.web_app.settings["base_url"], r"book/(.*)")
    serverapp.web_app.add_handlers(".*$", [(pattern, StaticFileHandler,
                                            {"path": str(html), "default_filename": "index.html"})])
    serverapp.log.info("kvbook.lab: the book in %s is served at %sbook/", html,
                       serverapp.web_app.settings["base_url"])


def main(argv: list[str] | None = None) -> int:
    try:
        kept = prepare()
    except book_links.LinkError as e:
        print(f"make lab: {e}", file=sys.stderr)
        return 2
    for line in kept:
        print(line)
    print(f"make lab: the chapters are in {_shown(OUT / 'notebooks')}/, linked to the book in "
          f"{_shown(BOOK_BUILD / 'html')}/ (served at /book/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
