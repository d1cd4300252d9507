"""kvbook.workshop.book_links: the lite notebooks' cross-references and citations as links to the learner book.

The book's records are written out by hand here in the shapes Sphinx's environment holds them (titles, std labels,
toc_fignumbers, math objects, sphinxcontrib-bibtex citations); the texts expected are the built book's own
(chapter 0 of _build/html: "Critical batch size", "kipply, 2022", "Fig. 1.1", "(2)"). The slow browser test
(tests/browser/test_lite.py) follows every link of every chapter in the built kit.
"""

from __future__ import annotations

import pytest

from kvbook.workshop.book_links import LITE_BASE, BuiltBook, LinkError, citation_texts, left_roles

BOOK = BuiltBook(
    titles={"notebooks/04_critical_batch": "Critical batch size", "book/notation": "Notation"},
    labels={"fig-step-at-batch-1": ("notebooks/01_roofline", "fig-step-at-batch-1", "One decode step ..."),
            "ex-roofline-1": ("notebooks/01_roofline", "ex-roofline-1", "Exercise"),
            "ex-roofline-5": ("notebooks/01_roofline", "ex-roofline-5", "Exercise"),
            "thread-unsaid": ("notebooks/07_thread_256k", "thread-unsaid", "What the thread leaves unsaid")},
    numbers={"notebooks/01_roofline": {"figure": {"fig-step-at-batch-1": (1, 1)},
                                       "exercise": {"ex-roofline-1": (1, 1), "ex-roofline-5": (1, 5)},
                                       "displaymath": {"equation-roofline-time": (1, 1)}},
             "book/notation": {"displaymath": {"equation-kv-bytes-per-token": (1,)}},
             "notebooks/00_sample_rhythm": {"displaymath": {"equation-sample-bcrit": (2,)}}},
    equations={"kv-bytes-per-token": "book/notation", "sample-bcrit": "notebooks/00_sample_rhythm",
               "roofline-time": "notebooks/01_roofline"},
    citations={"kipply2022": ("book/references", "id8"), "scalingbook2025": ("book/references", "id9")},
    cite_texts={"id8": "kipply, 2022", "id9": "Austin et al., 2025"},
)
HERE = "notebooks/00_sample_rhythm"


def link(text: str, url: str) -> str:
    """A link into the learner book as the room's notebooks carry it: an HTML anchor opening a new tab (R21-3)."""
    return f'<a href="{url}" target="_blank" rel="noopener">{text}</a>'


def test_chapter_references_become_links_with_the_books_titles():
    assert BOOK.rewrite("the full treatment is {doc}`04_critical_batch`.", HERE) == \
        "the full treatment is " + link("Critical batch size", "/book/notebooks/04_critical_batch.html") + "."
    assert BOOK.rewrite("{doc}`see here <../book/notation>`", HERE) == link("see here", "/book/book/notation.html")
    assert BOOK.rewrite("{ref}`thread-unsaid`", "notebooks/03_min_step") == \
        link("What the thread leaves unsaid", "/book/notebooks/07_thread_256k.html#thread-unsaid")


def test_figures_and_equations_of_other_pages_carry_the_books_numbers():
    assert BOOK.rewrite("{numref}`fig-step-at-batch-1` shows", "notebooks/01_roofline") == \
        link("Fig. 1.1", "/book/notebooks/01_roofline.html#fig-step-at-batch-1") + " shows"
    assert BOOK.rewrite("{numref}`Figure {number} <fig-step-at-batch-1>`", "notebooks/01_roofline") == \
        link("Figure 1.1", "/book/notebooks/01_roofline.html#fig-step-at-batch-1")
    assert BOOK.rewrite("equation {eq}`kv-bytes-per-token`", HERE) == \
        "equation " + link("(1)", "/book/book/notation.html#equation-kv-bytes-per-token")
    # the notebook's own equation: jupyterlab-myst numbers and links it in the page
    assert BOOK.rewrite("equation {eq}`sample-bcrit`", HERE) == "equation {eq}`sample-bcrit`"


def test_citations_become_links_to_their_bibliography_entries():
    assert BOOK.rewrite("bandwidth {cite:p}`kipply2022,scalingbook2025` (", HERE) == \
        ("bandwidth (" + link("kipply, 2022", "/book/book/references.html#id8") + "; " +
         link("Austin et al., 2025", "/book/book/references.html#id9") + ") (")
    assert BOOK.rewrite("{cite:t}`kipply2022` shows", HERE) == \
        link("kipply (2022)", "/book/book/references.html#id8") + " shows"
    assert BOOK.rewrite("{cite}`kipply2022`", HERE) == "(" + link("kipply, 2022", "/book/book/references.html#id8") + ")"


def test_a_target_the_book_lacks_is_refused_by_name():
    for role, name in [("{doc}`99_missing`", "99_missing"), ("{ref}`no-label`", "no-label"),
                       ("{cite:p}`nobody1999`", "nobody1999"), ("{eq}`no-eq`", "no-eq")]:
        with pytest.raises(LinkError, match=name):
            BOOK.rewrite(role, HERE)


def test_left_roles_lists_what_jupyterlab_myst_cannot_resolve():
    text = "{doc}`04_critical_batch`, {eq}`sample-bcrit`, {eq}`kv-bytes-per-token`, {eval}`x`"
    assert left_roles(text, HERE, BOOK) == ["{doc}`04_critical_batch`", "{eq}`kv-bytes-per-token`"]
    assert left_roles(BOOK.rewrite(text, HERE), HERE, BOOK) == []


def test_a_links_text_is_escaped_as_html():
    """The link is HTML in the Markdown: a title's "&" or "<" stays text, not markup."""
    book = BuiltBook(titles={"book/qa": "Q&A: <B> and B_crit"}, labels={}, numbers={}, equations={},
                       citations={}, cite_texts={})
    assert book.rewrite("{doc}`../book/qa`", HERE) == link("Q&amp;A: &lt;B&gt; and B_crit", "/book/book/qa.html")


# The anonymous notes as the built book prints them (_build/html, shortened titles): textually in the introduction
# (book/intro.html, the first page read in sorted order), the year alone in the anchor; in parentheses in chapter 3.
NOTES = "When your inference kernels are (theoretically) memory bound vs compute bound"
INTRO = ('a set of notes titled <span class="bibtex-citation" id="id2"><em>' + NOTES + '</em> [<a class="reference '
         'internal" href="references.html#id9" title="When your ... Anonymous notes.">n.d.</a>]</span>, and kipply '
         '<span class="bibtex-citation" id="id3">kipply [<a class="reference internal" href="references.html#id10" '
         'title="kipply. Transformer inference arithmetic.">2022</a>]</span>')
CHAPTER_3 = ('The notes\u2019 answer <span class="bibtex-citation" id="id1">[<a class="reference internal" '
             'href="../book/references.html#id9" title="When your ... &quot;the notes&quot;."><em>' + NOTES +
             '</em>, n.d.</a>]</span>, the <strong>min-step</strong>')


def test_an_undated_sources_citation_reads_as_the_book_prints_it():
    """Review R21c-1: "n.d." is the year of an undated entry; the notes' textual citation in the introduction left
    their text as "n.d." alone, and every chapter citing them read "(n.d.)"."""
    for pages in ([INTRO, CHAPTER_3], [CHAPTER_3, INTRO]):
        texts = citation_texts(pages)
        assert texts["id9"] == NOTES + ", n.d.", pages
        assert texts["id10"] == "kipply, 2022"          # a textual citation alone: its author and its year
    book = BuiltBook(titles={}, labels={}, numbers={}, equations={}, citations={"minstepnotes": ("book/references", "id9")},
                     cite_texts=citation_texts([INTRO, CHAPTER_3]))
    assert book.rewrite("The notes {cite:p}`minstepnotes` take", "notebooks/08_fitting_52b") == \
        "The notes (" + link(NOTES + ", n.d.", "/book/book/references.html#id9") + ") take"
    assert book.rewrite("{cite:t}`minstepnotes`", "notebooks/03_min_step") == \
        link(NOTES + " (n.d.)", "/book/book/references.html#id9")


def test_the_rooms_links_are_relative_to_the_page_that_shows_them():
    """Review R21c-10: root-relative links (/book/...) work only where the learner folder is the root of its address.
    lite/notebooks/index.html and lite/lab/index.html are two folders below it: ../../book/ is its book/."""
    room = BuiltBook(**{**BOOK.__dict__, "base": LITE_BASE})
    assert LITE_BASE == "../../book/"
    assert room.rewrite("{doc}`04_critical_batch` (see {cite:p}`kipply2022`)", HERE) == (
        link("Critical batch size", "../../book/notebooks/04_critical_batch.html") + " (see ("
        + link("kipply, 2022", "../../book/book/references.html#id8") + "))")


def test_exercises_and_equations_carry_the_books_numbers():
    """Review R21c-7: jupyterlab-myst numbers a notebook's exercises and equations from 1 ("Exercise 1", "(1)") where
    the book, the plans and the answer key say "Exercise 1.1" and "(1.1)"; ``:enumerator:`` gives it the book's."""
    gated = "```{exercise-start}\n:label: ex-roofline-1\n```\nAsk.\n```{exercise-end}\n```"
    plain = ":::{exercise} Pen and paper\n:label: ex-roofline-5\n:class: x\n\nAsk.\n:::"
    assert BOOK.number_as_the_book(gated) == \
        "```{exercise-start}\n:label: ex-roofline-1\n:enumerator: 1.1\n```\nAsk.\n```{exercise-end}\n```"
    assert BOOK.number_as_the_book(plain) == \
        ":::{exercise} Pen and paper\n:label: ex-roofline-5\n:enumerator: 1.5\n:class: x\n\nAsk.\n:::"
    text = "Unlabelled:\n$$\nx = 1\n$$\n\nand labelled:\n\n$$\nt = \\frac{b}{W}\n$$ (roofline-time)\n\nafter."
    assert BOOK.number_as_the_book(text) == ("Unlabelled:\n$$\nx = 1\n$$\n\nand labelled:\n\n```{math}\n"
                                             ":label: roofline-time\n:enumerator: 1.1\nt = \\frac{b}{W}\n```\n\nafter.")
    # inside a list item the directive keeps the item's indent (as chapter 3's ms-attn-intensity needs)
    item = "- Time:\n\n  $$\n  t = \\frac{b}{W},\n  $$ (roofline-time)\n\n  with W."
    assert BOOK.number_as_the_book(item) == ("- Time:\n\n  ```{math}\n  :label: roofline-time\n  :enumerator: 1.1\n"
                                             "  t = \\frac{b}{W},\n  ```\n\n  with W.")
    assert BOOK.name("ex-roofline-5") == "Exercise 1.5" and BOOK.name("roofline-time") == "(1.1)"
    assert BOOK.name("fig-step-at-batch-1") == "Fig. 1.1"
    with pytest.raises(LinkError, match="ex-nowhere"):
        BOOK.number_as_the_book("```{exercise-start}\n:label: ex-nowhere\n```")


def test_the_text_of_a_role_is_what_the_book_prints_without_the_link():
    """For the answer key (review R21c-9: it printed equation labels, "(ms-general)")."""
    assert BOOK.text("eq", "kv-bytes-per-token", HERE) == "(1)"
    assert BOOK.text("eq", "sample-bcrit", HERE) == "(2)"          # the same page's, numbered too
    assert BOOK.text("numref", "fig-step-at-batch-1", HERE) == "Fig. 1.1"
    assert BOOK.text("cite:p", "kipply2022,scalingbook2025", HERE) == "(kipply, 2022; Austin et al., 2025)"
    assert BOOK.text("doc", "04_critical_batch", HERE) == "Critical batch size"
