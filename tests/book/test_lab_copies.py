"""kvbook.lab: `make lab`'s copies of the chapters link into the built book and keep a reader's edits (review R21-9)."""

from __future__ import annotations

import collections
import html
import json
import re

from kvbook import lab
from kvbook.workshop import book_links


def test_the_copies_link_every_reference_and_citation_and_keep_the_stored_numbers(built_book, tmp_path):
    assert lab.prepare(tmp_path) == []
    book = book_links.BuiltBook.from_build(lab.BOOK_BUILD)
    for source in sorted((lab.ROOT / "notebooks").glob("*.ipynb")):
        copy = json.loads((tmp_path / "notebooks" / source.name).read_text())
        original = json.loads(source.read_text())
        assert len(copy["cells"]) == len(original["cells"]), source.name
        for mine, theirs in zip(copy["cells"], original["cells"]):
            assert mine["metadata"] == theirs["metadata"] and mine.get("outputs") == theirs.get("outputs")
            if mine["cell_type"] == "markdown":
                text = "".join(mine["source"])
                assert not book_links.left_roles(text, "notebooks/" + source.stem, book), (source.name, text[:200])
            else:
                assert mine["source"] == theirs["source"]
    sample = "".join(c for cell in json.loads((tmp_path / "notebooks" / "00_sample_rhythm.ipynb").read_text())["cells"]
                     for c in cell["source"])
    assert '<a href="/book/book/references.html#' in sample and 'target="_blank"' in sample
    assert (tmp_path / "tests" / "data" / "serving_sweep.csv").exists()  # the chapters read ../tests/data


def test_an_edited_copy_is_kept_when_its_chapter_changes_and_an_unedited_one_is_renewed(built_book, tmp_path):
    lab.prepare(tmp_path)
    manifest_path = tmp_path / lab.MANIFEST
    edited, plain = tmp_path / "notebooks" / "01_roofline.ipynb", tmp_path / "notebooks" / "02_kv_cache.ipynb"
    edited.write_text(edited.read_text().replace("roofline", "roofline (my note)", 1))
    assert lab.prepare(tmp_path) == [], "an unchanged chapter leaves the reader's edit alone, silently"
    assert "(my note)" in edited.read_text()
    # both chapters "change" in notebooks/: the manifest's record of their sources no longer matches
    manifest = json.loads(manifest_path.read_text())
    for name in (edited.name, plain.name):
        manifest[name]["source"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    kept = lab.prepare(tmp_path)
    assert len(kept) == 1 and "01_roofline.ipynb" in kept[0] and "delete the copy" in kept[0], kept
    assert "(my note)" in edited.read_text()
    renewed = json.loads(manifest_path.read_text())
    assert renewed[plain.name]["source"] == lab._digest((lab.ROOT / "notebooks" / plain.name).read_bytes())
    assert renewed[edited.name]["source"] == "0" * 64, "the kept copy still waits for its new chapter"


_BOOK_CITATION = re.compile(r'<span class="bibtex-citation" id="[^"]*">(.*?)</span>', re.S)
_BOOK_ANCHOR = re.compile(r'<a class="reference internal" href="[^"#]*references\.html#(id\d+)"[^>]*>(.*?)</a>', re.S)
_COPY_ANCHOR = re.compile(r'<a href="/book/book/references\.html#(id\d+)" target="_blank" rel="noopener">(.*?)</a>')


def _plain(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


def book_citations(page: str) -> collections.Counter:
    """(entry id, "author, year") of each citation a built page prints: "[author, year]" (parenthetical; several
    within one pair of brackets) or "author [year]" (textual)."""
    found = collections.Counter()
    for span in _BOOK_CITATION.findall(page):
        anchors = _BOOK_ANCHOR.findall(span)
        author = _plain(span.split("[", 1)[0])
        for anchor_id, inner in anchors:
            found[(anchor_id, f"{author}, {_plain(inner)}" if author else _plain(inner))] += 1
    return found


def test_every_citation_in_the_copies_reads_as_the_book_prints_it_on_the_same_page(built_book, tmp_path):
    """Review R21c-1: the notes, which have no year, were cited as "(n.d.)" in six chapters, where the book prints
    their title; every citation of a copy carries the text the chapter's built page prints for it."""
    lab.prepare(tmp_path)
    compared = 0
    for copy in sorted((tmp_path / "notebooks").glob("*.ipynb")):
        markdown = "\n".join("".join(c["source"]) for c in json.loads(copy.read_text())["cells"]
                             if c["cell_type"] == "markdown")
        # the copy prints a textual citation "author (year)", the book "author [year]": both are "author, year" here
        mine = collections.Counter((anchor_id, re.sub(r" \(([^()]*)\)$", r", \1", html.unescape(text)))
                                   for anchor_id, text in _COPY_ANCHOR.findall(markdown))
        theirs = book_citations((built_book / "notebooks" / f"{copy.stem}.html").read_text(encoding="utf-8"))
        assert mine == theirs, (copy.name, mine - theirs, theirs - mine)
        compared += sum(mine.values())
    assert compared > 100, compared
    eight = (tmp_path / "notebooks" / "08_fitting_52b.ipynb").read_text()
    assert "(theoretically) memory bound vs compute bound, n.d.</a>" in eight and ">n.d.</a>" not in eight
