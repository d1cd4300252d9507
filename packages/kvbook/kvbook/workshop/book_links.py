"""Notebooks opened outside the book point into it and number as it does.

In the built book Sphinx resolves ``{doc}``, ``{ref}``, ``{numref}``, ``{eq}`` and the
``{cite}`` roles against the whole book. jupyterlab-myst, rendering one notebook in
JupyterLite, sees only that notebook: another chapter shows as its file name, a figure
label or a citation key as a warning (jupyterlab-myst resolves no citations: its issue #127). The
copies of the chapters that readers open, the room's (``workshop_lite``, into the learner book
the kit serves beside them) and ``make lab``'s (:mod:`kvbook.lab`, into the built book that
JupyterLab serves at ``/book/``), therefore get each such role rewritten as a link to the book's page, with the text the book prints there ("Critical batch
size", "Fig. 3.2", "kipply, 2022"). Targets and texts come from that build's own
Sphinx environment (``_build/.doctrees/environment.pickle``: the titles, the labels, the
figure, equation and exercise numbers, sphinxcontrib-bibtex's citations) and, for a citation's
text, from the anchors of its built pages, so a link says what the book says.
An ``{eq}`` to an equation of the same notebook is left to jupyterlab-myst, which numbers
and links the notebook's own equations. jupyterlab-myst numbers a notebook's exercises and
equations from 1, where the book prints "Exercise 2.4" and "(8.1)", the names the plans and
the answer key use; so each labelled exercise and equation of a copy is given the book's
number (``:enumerator:``, which jupyterlab-myst honours; review R21c-7).
:meth:`BuiltBook.text` gives the same texts without the links, for the answer key.

Each link is an inline HTML anchor that opens in a new tab, so the notebook and its kernel
stay where they are; jupyterlab-myst leaves such an anchor's address to the browser (a
Markdown link it would take for a file of JupyterLab's own drive). The room's copies link
relative to the page that shows them (``lite/notebooks/index.html`` or ``lite/lab/index.html``,
two folders below the learner folder: ``../../book/…``), so they work wherever the learner
folder is served, at the root of an address or below it (review R21c-10). ``make lab``'s
links are root-relative (``/book/…``), where its server serves the book, since JupyterLab's
page addresses have no fixed depth.
"""

from __future__ import annotations

import html
import json
import pickle
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

#: The roles rewritten, with the target in the backticks (``text <target>`` for an explicit text).
ROLE = re.compile(r"\{(doc|ref|numref|eq|cite|cite:p|cite:t|cite:ps|cite:ts)\}`([^`]*)`")
_EXPLICIT = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)
_CITE_ANCHOR = re.compile(r'<a class="reference internal" href="[^"#]*#(id\d+)"[^>]*>(.*?)</a>', re.S)
#: A textual citation as sphinxcontrib-bibtex's author-year style prints it: ``Author [<a ...>2022</a>]``, the
#: author outside the anchor.
_TEXTUAL = re.compile(r'<span class="bibtex-citation" id="[^"]*">([^\[]*?) \[<a class="reference internal" '
                      r'href="[^"#]*#(id\d+)"[^>]*>(.*?)</a>\]</span>', re.S)
#: The year the style prints: "2022", "2023a", or "n.d." for an undated entry (review R21c-1: a pattern of four
#: digits took the anonymous notes' textual "n.d." for their whole text).
YEAR = r"(?:\d{4}[a-z]?|n\.d\.)"
_FIGURE_NAME = {"figure": "Fig. {}", "table": "Table {}", "code-block": "Listing {}", "exercise": "Exercise {}"}
#: Where the room's copies are shown (lite/notebooks/ or lite/lab/ of the learner folder), the learner book beside them.
LITE_BASE = "../../book/"
#: An exercise's options, up to its label (both the gated and the plain syntax).
_EXERCISE = re.compile(r"^((?:`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*\n(?::[^\n]*\n)*?:label:\s*(\S+)[ \t]*\n)", re.M)
#: A labelled display equation, ``$$ ... $$ (label)``, at the start of a line or indented inside a list item.
_EQUATION = re.compile(r"^([ \t]*)\$\$((?:(?!\$\$).)*?)\$\$ \(([\w-]+)\)[ \t]*$", re.M | re.S)


class LinkError(ValueError):
    """A role whose target the book does not have."""


def _plain(inner: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", inner)).split())


def citation_texts(pages) -> dict[str, str]:
    """{anchor id: "author, year"} as the built ``pages`` (HTML texts) print each citation.

    A parenthetical citation's anchor holds the whole "author, year" ("kipply, 2022"; for an undated entry the
    style's author is its title: "When your inference kernels are ..., n.d."). A textual one holds the year alone,
    its author printed before the anchor; its text is put together from the two. A parenthetical text wins, on
    any page, so the order the pages are read in does not matter.
    """
    found: dict[str, str] = {}
    for text in pages:
        for author, anchor_id, inner in _TEXTUAL.findall(text):
            found.setdefault(anchor_id, f"{_plain(author)}, {_plain(inner)}")
        for anchor_id, inner in _CITE_ANCHOR.findall(text):
            plain = _plain(inner)
            if re.search(rf", {YEAR}$", plain):
                found[anchor_id] = plain
    return found


@dataclass(frozen=True)
class BuiltBook:
    """What a built book holds for the roles, and where it is served.

    titles: {docname: title}; labels: {label: (docname, anchor id, section title)};
    numbers: {docname: {kind: {anchor id: (n, ...)}}} (Sphinx's ``toc_fignumbers``);
    equations: {label: docname}; citations: {key: (docname, anchor id)};
    cite_texts: {anchor id: the book's text for the citation, e.g. "kipply, 2022"}.
    """

    titles: dict
    labels: dict
    numbers: dict
    equations: dict
    citations: dict
    cite_texts: dict
    base: str = "/book/"

    @classmethod
    def from_build(cls, build: Path, base: str = "/book/") -> "BuiltBook":
        """Read a built book: ``build`` holds ``.doctrees/environment.pickle`` and ``html/``."""
        env_path = Path(build) / ".doctrees" / "environment.pickle"
        if not env_path.exists():
            raise LinkError(f"{env_path} missing: build the book first (make book, or make learner for the learner book)")
        with env_path.open("rb") as f:
            env = pickle.load(f)
        cite = env.domaindata["cite"]
        citations = {c.key: (c.bibliography_key.docname, c.citation_id) for c in cite["citations"]}
        cite_texts = citation_texts(page.read_text(encoding="utf-8")
                                    for page in sorted((Path(build) / "html").rglob("*.html")))
        return cls(titles={d: t.astext() for d, t in env.titles.items()},
                   labels={k: tuple(v) for k, v in env.domaindata["std"]["labels"].items()},
                   numbers=env.toc_fignumbers,
                   equations={k: v[0] for k, v in env.domaindata["math"]["objects"].items()},
                   citations=citations, cite_texts=cite_texts, base=base)

    def url(self, docname: str, anchor: str = "") -> str:
        return f"{self.base}{docname}.html" + (f"#{anchor}" if anchor else "")

    @staticmethod
    def anchor(text: str, url: str) -> str:
        """A link that opens the book in a new tab: jupyterlab-myst opens a Markdown link to a path of the same server
        in the notebook's own tab, which would leave JupyterLite and its kernel (review R21-3); an inline HTML
        anchor keeps its ``target`` through JupyterLab's sanitizer."""
        return f'<a href="{html.escape(url)}" target="_blank" rel="noopener">{html.escape(text, quote=False)}</a>'

    def _number(self, docname: str, anchor: str, role: str) -> str:
        for kind, numbered in self.numbers.get(docname, {}).items():
            if anchor in numbered:
                number = ".".join(str(n) for n in numbered[anchor])
                return f"({number})" if kind == "displaymath" else _FIGURE_NAME.get(kind, "{}").format(number)
        raise LinkError(f"{{{role}}}`{anchor}`: the book numbers no such figure, equation or exercise")

    def name(self, label: str) -> str:
        """What the book prints for a numbered label: "Exercise 2.4", "Fig. 1.1", "(8.1)"."""
        if label in self.equations:
            return self._number(self.equations[label], f"equation-{label}", "eq")
        if label not in self.labels:
            raise LinkError(f"{label!r}: the book has no such label")
        docname, anchor, _ = self.labels[label]
        return self._number(docname, anchor, "numref")

    def _citation(self, key: str, textual: bool) -> tuple[str, str]:
        if key not in self.citations:
            raise LinkError(f"citation {key!r}: not in the book's bibliography")
        docname, anchor = self.citations[key]
        text = self.cite_texts.get(anchor)
        if text is None:
            raise LinkError(f"citation {key!r}: no page of the book cites it")
        if textual and ", " in text:
            author, year = text.rsplit(", ", 1)
            text = f"{author} ({year})"
        return text, self.url(docname, anchor)

    def _targets(self, role: str, target: str, here: str) -> tuple[list[tuple[str, str]], str, str]:
        """The (text, url) pairs one role in the page ``here`` (a docname) stands for, what goes before and after
        them (a parenthetical citation's brackets) and what goes between them."""
        explicit = _EXPLICIT.match(target)
        text, target = (explicit.group(1), explicit.group(2)) if explicit else (None, target)
        if role.startswith("cite"):
            keys = [k.strip() for k in target.split(",") if k.strip()]
            cited = [self._citation(k, textual=role.startswith("cite:t")) for k in keys]
            return (cited, "", "") if role.startswith("cite:t") else (cited, "(", ")")
        if role == "doc":
            docname = posixpath.normpath(posixpath.join(posixpath.dirname(here), target))
            if docname not in self.titles:
                raise LinkError(f"{{doc}}`{target}` in {here}: the book has no page {docname!r}")
            return [(text or self.titles[docname], self.url(docname))], "", ""
        if role == "eq":
            docname = self.equations.get(target)
            if docname is None:
                raise LinkError(f"{{eq}}`{target}` in {here}: the book has no such equation")
            anchor = f"equation-{target}"
            return [(self._number(docname, anchor, role), self.url(docname, anchor))], "", ""
        if target not in self.labels:
            raise LinkError(f"{{{role}}}`{target}` in {here}: the book has no such label")
        docname, anchor, title = self.labels[target]
        if role == "numref":
            number = self._number(docname, anchor, role)
            text = text.replace("{number}", number.split(" ")[-1]).replace("%s", number.split(" ")[-1]) \
                if text else number
        else:
            text = text or title
        return [(text, self.url(docname, anchor))], "", ""

    def link(self, role: str, target: str, here: str) -> str | None:
        """The Markdown for one role in the page ``here`` (a docname), or None to leave it as it is (an ``{eq}`` to
        an equation of the same page, which jupyterlab-myst links)."""
        if role == "eq" and self.equations.get(target) == here:
            return None
        pairs, before, after = self._targets(role, target, here)
        return before + "; ".join(self.anchor(text, url) for text, url in pairs) + after

    def text(self, role: str, target: str, here: str) -> str:
        """The text the book prints for one role in the page ``here``, without a link."""
        pairs, before, after = self._targets(role, target, here)
        return before + "; ".join(text for text, _ in pairs) + after

    def number_as_the_book(self, markdown: str) -> str:
        """``markdown`` with each labelled exercise and display equation given the book's number (``:enumerator:``;
        an equation written ``$$ ... $$ (label)`` becomes a ``{math}`` directive, which takes options)."""
        def exercise(m: re.Match) -> str:
            number = self.name(m.group(2)).removeprefix("Exercise ")
            return f"{m.group(1)}:enumerator: {number}\n"

        def equation(m: re.Match) -> str:
            indent, body, label = m.groups()
            number = self.name(label).strip("()")
            lines = ["```{math}", f":label: {label}", f":enumerator: {number}",
                     *(line.removeprefix(indent) for line in body.strip().splitlines()), "```"]
            # an equation inside a list item keeps the item's indent, so the directive stays in the item
            return "\n".join(indent + line if line.strip() else "" for line in lines)
        return _EQUATION.sub(equation, _EXERCISE.sub(exercise, markdown))

    def rewrite_notebook(self, nb: dict, stem: str) -> dict:
        """A copy of the chapter ``nb`` (notebooks/``stem``) with every Markdown cell rewritten (:meth:`rewrite`) and
        numbered as the book numbers it (:meth:`number_as_the_book`)."""
        nb = json.loads(json.dumps(nb))
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = self.number_as_the_book(self.rewrite("".join(cell["source"]), "notebooks/" + stem))
        return nb

    def rewrite(self, markdown: str, here: str) -> str:
        """``markdown`` of the page ``here`` with every role this module rewrites as a link to the book."""
        def one(m: re.Match) -> str:
            link = self.link(m.group(1), m.group(2), here)
            return m.group(0) if link is None else link
        return ROLE.sub(one, markdown)


def left_roles(markdown: str, here: str, book: BuiltBook) -> list[str]:
    """The roles a lite copy's Markdown still holds that jupyterlab-myst cannot resolve (none after rewrite)."""
    left = []
    for m in ROLE.finditer(markdown):
        if m.group(1) == "eq" and book.equations.get(m.group(2)) == here:
            continue
        left.append(m.group(0))
    return left
