"""Prose that matches the page (issue 22, item 4), checked on the committed notebooks and book pages.

What the reader of a chapter sees, read from the notebook the book is built from: the Markdown without the markup
the page hides (tests/book/reader_text.py), the code of every cell not tagged ``remove-input``, and the outputs of
every cell not tagged ``remove-output``. In it: no equation label (``bc-moe``, ``(pit-plain)``), no directive text,
no table printed as text, no model or chip preset id in a table; every chapter ends with a takeaway; and "the
notes" are a bibliography entry that the introduction and the notation page cite. The same is checked on the built
pages by tests/browser/pagecheck.py.
"""

from __future__ import annotations

import html
import re

import nbformat
import pytest

from tests.book.book_numbers import CLI_PROMPT
from tests.book.reader_text import (CHAPTERS, DIRECTIVE_TEXT, ROOT, aligned_runs, all_labels, equation_labels,
                                    markdown_as_shown, raw_label_hits)

PATHS = [ROOT / "notebooks" / f"{name}.ipynb" for name in CHAPTERS]
TAG = re.compile(r"<[^>]+>")


def _tags(cell) -> set:
    return set(cell.metadata.get("tags", []))


def shown_outputs(cell) -> list[tuple[str, str]]:
    """(kind, text) of each output the page shows: streams, plain text and HTML (tags dropped)."""
    if "remove-output" in _tags(cell):
        return []
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(("stream", o.text))
        for mime in ("text/plain", "text/html"):
            text = o.get("data", {}).get(mime)
            if text is not None:
                out.append((mime, html.unescape(TAG.sub(" ", text)) if mime == "text/html" else text))
    return out


def what_the_reader_sees(nb) -> list[tuple[str, str]]:
    """(where, text) for every Markdown cell, shown code cell and shown output of ``nb``."""
    seen = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            seen.append((f"cell {i} (Markdown)", markdown_as_shown(cell.source)))
        elif cell.cell_type == "code":
            if "remove-input" not in _tags(cell):
                seen.append((f"cell {i} (code)", cell.source))
            seen += [(f"cell {i} ({kind} output)", text) for kind, text in shown_outputs(cell)]
    return seen


def test_the_labels_are_found():
    # labels the issue names, one of each kind: display equations, a {math} directive's option, an exercise
    assert {"bc-moe", "pq-allreduce-latency", "pit-plain", "rc-mbu"} <= equation_labels()
    assert "ex-roofline-4" in all_labels() and "ex-roofline-4" not in equation_labels()
    assert len(equation_labels()) > 50


def test_the_checks_catch_what_the_old_pages_showed():
    """Each leak issue 22 found, as the text showed it, is caught; the same names in roles and targets are not."""
    assert raw_label_hits("H100 SXM  dtypes  Ptot/Pact  floor  eq bc-moe")
    assert raw_label_hits("2 P_body S + 2 P_head (equation pq-prefill-flops)")
    assert raw_label_hits("def f(): # (pit-plain) per token")
    assert raw_label_hits("# The second factor of moe-bcrit grows")
    assert raw_label_hits("Pairs solve (ex-fit52-1) first")
    assert not raw_label_hits(markdown_as_shown("$$\nx = 1\n$$ (bc-moe)\n\nBy {eq}`bc-moe` and {ref}`thread-unsaid`\n"
                                                "```{exercise-start}\n:label: ex-roofline-1\n```\n(thread-unsaid)=\n"))
    assert not raw_label_hits("bc-moe-check, fig-pq-ttft, https://x.org/bc-moe")
    table = ("H100 SXM      dtypes     Ptot/Pact  dense\nllama-2-70b   bf16/bf16       1.00  295.3\n"
             "mixtral-8x7b  bf16/bf16       3.63  295.3\n")
    assert aligned_runs(table) == 3
    # a command's transcript is the CLI's output, not a table the chapter printed; the same lines without the
    # command line above them are
    assert is_cli_transcript("$ kvmath models\n" + table) and not is_cli_transcript(table)
    assert aligned_runs("B = 2: 3.50 experts, 44% of the experts' bytes\nB = 4: 5.47 experts\n"
                        "bf16 weights: B_crit = 295.3\n  indented: fine\n") == 0


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_equation_label_or_directive_text_where_the_reader_sees_it(path):
    nb = nbformat.read(path, as_version=4)
    leaks = [f"{where}: ...{hit}..." for where, text in what_the_reader_sees(nb) for hit in raw_label_hits(text)]
    leaks += [f"{where}: {markup!r}" for where, text in what_the_reader_sees(nb) if "Markdown" not in where
              for markup in DIRECTIVE_TEXT if markup in text]
    assert not leaks, (f"{path.name}: say what the label stands for (the equation's name in words), or cite it "
                       "with {eq} in prose:\n" + "\n".join(leaks))


def is_cli_transcript(text: str) -> bool:
    """A stream that starts with a ``$ kvmath ...`` line (chapter 15 shows commands with their output, as
    tests/book/book_numbers.py reads them): what the command prints, in the columns a terminal shows, is an example
    of the CLI, which keeps its form and its ids."""
    return text.startswith(CLI_PROMPT)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_table_is_printed_as_text(path):
    """Rows in columns are a kvbook.Table (an HTML table on the page, aligned text for nbval), never print();
    a transcript of a ``kvmath`` command (its ``$ kvmath ...`` line, then what it prints) is the CLI's own output."""
    nb = nbformat.read(path, as_version=4)
    printed = [f"cell {i}: {aligned_runs(text)} aligned lines, from {text.splitlines()[0]!r}"
               for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
               for kind, text in shown_outputs(cell)
               if kind == "stream" and aligned_runs(text) >= 3 and not is_cli_transcript(text)]
    assert not printed, f"{path.name}: a table printed as text (use kvbook.Table):\n" + "\n".join(printed)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_tables_name_models_and_chips_by_display_name(path):
    from kvbook.interactive import preset_ids

    ids = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(preset_ids(), key=len, reverse=True)))
                     + r")(?![\w-])")
    nb = nbformat.read(path, as_version=4)
    bad = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []) if "remove-output" not in _tags(cell) else []:
            table = o.get("data", {}).get("text/html", "")
            for td in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", table, re.S):
                if ids.search(html.unescape(td)):
                    bad.append(f"cell {i}: {html.unescape(td)!r}")
    assert not bad, f"{path.name}: table cells show preset ids, not display names:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_chapter_ends_with_a_takeaway(path):
    nb = nbformat.read(path, as_version=4)
    sections = [line.strip() for c in nb.cells if c.cell_type == "markdown"
                for line in c.source.splitlines() if line.startswith("## ")]
    assert sections[-1] == "## Exercises", f"{path.name}: the last section is {sections[-1]!r}"
    assert sections[-2] == "## What to take from this", (
        f"{path.name}: the section before the exercises is {sections[-2]!r}, not the takeaway")


def test_the_notes_are_an_entry_cited_by_their_title_in_the_introduction_and_the_notation_page():
    from pybtex.database import parse_file

    entry = parse_file(str(ROOT / "book" / "references.bib")).entries["minstepnotes"]
    # the source text's own title (shared/sources/001_6db4eda2cad216ad.txt, its first line)
    assert entry.fields["title"] == "When your inference kernels are (theoretically) memory bound vs compute bound"
    assert not entry.persons, "the notes carry no author: none may be invented"
    assert "url" not in entry.fields and "year" not in entry.fields, "no address or date is known"
    assert "kipply" in entry.fields["note"] and "How to Scale Your Model" in entry.fields["note"]
    for page in ("intro.md", "notation.md"):
        text = (ROOT / "book" / page).read_text(encoding="utf-8")
        assert "{cite:t}`minstepnotes`" in text, f"book/{page} does not cite the notes by their title"
        assert re.search(r"the notes", text, re.I), f"book/{page} does not say what 'the notes' are"


def test_a_control_never_shows_a_preset_id():
    from kvbook.figures import chip_options, model_options
    from kvbook.interactive import Choice

    with pytest.raises(ValueError, match="preset ids \\['kipply-52b', 'llama-2-7b'\\]"):
        Choice(["kipply-52b", "llama-2-7b"])
    with pytest.raises(ValueError, match="h100-sxm"):
        Choice([("h100-sxm", "h100-sxm")])
    assert model_options(["kipply-52b", "gpt-oss-20b"]) == [("kipply's 52B", "kipply-52b"),
                                                            ("gpt-oss-20b", "gpt-oss-20b")]
    assert chip_options(["h100-sxm"]) == [("NVIDIA H100 SXM", "h100-sxm")]
    # an id that is its own display name (OpenAI writes gpt-oss-20b) is a name, and stays allowed
    assert Choice(model_options(["gpt-oss-20b"])).fmt("gpt-oss-20b") == "gpt-oss-20b"
