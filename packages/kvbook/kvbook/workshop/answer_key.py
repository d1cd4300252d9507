"""Collect the answer key from the answers the notebooks' solutions record.

The convention: the Markdown cell that closes an exercise's solution (the one
holding ``{solution-end}``) names the answers the key records, as expressions
in its metadata::

    "kvbook": {"answers": {"ex-roofline-1": {"batch": "fmt_number(first)",
                                             "ridge": "f'{a100_80.ridge_point():.1f} FLOP/byte'"}}}

Each expression gives a string that carries its unit (``kvmath.formatting``'s
``fmt_bytes``, ``fmt_seconds``, ... or an f-string with the unit).
``kvbook.inline.fill`` (``make refresh``) evaluates them where the cell stands
and stores each answer's text beside them (``answer_values``); this script
reads those, so the key holds exactly what the notebooks computed, never a
typed number, and no reader sees any of it.

The key has one line per exercise label found in the chapters (the
``{exercise-start}`` / ``{exercise}`` directives), in book order: the exercise
as the book names it ("Exercise 2.4") with its label, the chapter, the
question's short form (its first question, with its inline expressions'
numbers filled in, and its references as the book prints them: "(3.2)",
"Fig. 1.1") and the recorded answers, or "no recorded answer yet". Names and
references come from a built book (:class:`~kvbook.workshop.book_links.BuiltBook`;
review R21c-7, R21c-9), by default the instructor build the key goes with.

Usage::

    python -m kvbook.workshop.answer_key [--notebooks DIR] [--book BUILD] [--out answer-key.md] [--json key.json]

``DIR`` defaults to the committed ``notebooks/``, ``BUILD`` (a build's ``_build``, holding
``.doctrees/`` and ``html/``) to the instructor build's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from kvbook.repo import ROOT
from kvbook.workshop import book_links

NO_ANSWER = "no recorded answer yet"
#: The build the key names exercises and references from: the instructor build (make instructor).
BOOK_BUILD = ROOT / "_build" / "workshop-src" / "instructor" / "_build"

EXERCISE_RE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*\n(?P<opts>(?::[^\n]*\n)*)(?:(?P=fence)\s*\n)?"
    r"(?P<body>.*?)^(?:`{3,}|:{3,})(?:\{exercise-end\}|\s*$)",
    re.M | re.S,
)


def answer_values(nb: dict) -> dict[str, dict[str, str]]:
    """{exercise label: {quantity: text}} of a filled notebook, in book order."""
    values: dict[str, dict[str, str]] = {}
    for cell in nb.get("cells", []):
        for label, quantities in cell.get("metadata", {}).get("kvbook", {}).get("answer_values", {}).items():
            if label in values:
                raise ValueError(f"answers recorded twice for {label!r}")
            values[label] = dict(quantities)
    return values


def unfilled_answers(nb: dict) -> list[str]:
    """Labels whose answers are named but not evaluated (the notebook was not filled since they were added)."""
    return [label for cell in nb.get("cells", []) for label in cell.get("metadata", {}).get("kvbook", {}).get("answers", {})
            if label not in cell["metadata"]["kvbook"].get("answer_values", {})]


def expression_values(nb: dict) -> dict[str, str]:
    """Each inline expression's text as the notebook's filled ``user_expressions`` hold it."""
    from kvbook.inline import result_text

    values: dict[str, str] = {}
    for cell in nb.get("cells", []):
        for entry in cell.get("metadata", {}).get("user_expressions", []):
            if entry["result"].get("status") == "ok":
                values.setdefault(entry["expression"], result_text(entry["result"]))
    return values


def _fill_prose(text: str, values: dict[str, str], book: book_links.BuiltBook, here: str) -> str:
    from kvbook.inline import EVAL_ROLE

    text = EVAL_ROLE.sub(lambda m: values.get(m.group(1), m.group(1)), text)
    return book_links.ROLE.sub(lambda m: book.text(m.group(1), m.group(2), here), text)


def short_form(body: str, values: dict[str, str], book: book_links.BuiltBook, here: str, limit: int = 320) -> str:
    """The exercise's first question (or first sentence), one line, its inline expressions' numbers filled in and its
    references (the page ``here``'s) as ``book`` prints them."""
    text = " ".join(_fill_prose(body, values, book, here).split())
    q = text.find("?")
    end = q + 1 if 0 <= q < limit else None
    if end is None:
        m = re.search(r"[.!](\s|$)", text)
        end = m.end() if m and m.end() <= limit else None
    if end is None:
        return text[:limit].rstrip() + "…"
    return text[:end].strip()


def exercises(nb: dict) -> list[tuple[str, str]]:
    """(label, body) of each exercise, in order."""
    text = "\n".join("".join(c["source"]) + "\n" for c in nb.get("cells", []) if c["cell_type"] == "markdown")
    found = []
    for m in EXERCISE_RE.finditer(text):
        label = re.search(r"^:label:\s*(\S+)", m.group("opts"), re.M)
        if label:
            found.append((label.group(1), m.group("body")))
    return found


def chapter_order(nb_dir: Path) -> list[Path]:
    toc = (ROOT / "_toc.yml").read_text() if (ROOT / "_toc.yml").exists() else ""
    names = re.findall(r"file:\s*notebooks/(\S+)", toc)
    paths = [nb_dir / f"{n}.ipynb" for n in names if (nb_dir / f"{n}.ipynb").exists()]
    rest = sorted(p for p in nb_dir.glob("*.ipynb") if p not in paths)
    return paths + rest


def collect(nb_dir: Path, book: book_links.BuiltBook) -> list[dict]:
    """One entry per exercise: label, its name in ``book`` ("Exercise 2.4"), chapter, title, question, answers."""
    key = []
    for path in chapter_order(nb_dir):
        nb = json.loads(path.read_text())
        unfilled = unfilled_answers(nb)
        if unfilled:
            raise ValueError(f"{path.name}: answers for {', '.join(unfilled)} are not evaluated: run `make refresh`")
        answers, values = answer_values(nb), expression_values(nb)
        found = exercises(nb)
        labels = [lab for lab, _ in found]
        orphans = [label for label in answers if label not in labels]
        if orphans:
            raise ValueError(f"{path.name}: answers recorded for no exercise label: {', '.join(orphans)}")
        title = next((line[2:].strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                      for line in "".join(c["source"]).splitlines() if line.startswith("# ")), path.stem)
        for label, body in found:
            key.append({"label": label, "name": book.name(label), "chapter": path.stem, "title": title,
                        "question": short_form(body, values, book, f"notebooks/{path.stem}"),
                        "answers": list(answers.get(label, {}).items())})
    return key


def to_markdown(key: list[dict]) -> str:
    n_done = sum(1 for e in key if e["answers"])
    out = ["# Answer key\n\n",
           f"Generated by `packages/kvbook/kvbook/workshop/answer_key.py` from the answers the notebooks' solutions "
           f"record (evaluated by `make refresh`): {len(key)} exercises, "
           f"{n_done} with recorded answers. No number here is typed by hand.\n"]
    chapter = None
    for e in key:
        if e["chapter"] != chapter:
            chapter = e["chapter"]
            out.append(f"\n## {e['title']} ({chapter})\n\n")
        answers = "; ".join(f"{name.replace('_', ' ')} = {value}" for name, value in e["answers"]) or f"*{NO_ANSWER}*"
        out.append(f"- **{e['name']}** (`{e['label']}`): {e['question']} → {answers}\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--book", type=Path, default=BOOK_BUILD,
                        help="the built book whose exercise numbers and references the key prints (its _build)")
    parser.add_argument("--out", type=Path, default=None, help="write the key as Markdown here (else stdout)")
    parser.add_argument("--json", type=Path, default=None, help="also write it as JSON here")
    args = parser.parse_args(argv)
    try:
        key = collect(args.notebooks, book_links.BuiltBook.from_build(args.book))
    except book_links.LinkError as e:
        print(f"answer_key: {e}", file=sys.stderr)
        return 2
    md = to_markdown(key)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md)
    else:
        sys.stdout.write(md)
    if args.json:
        args.json.write_text(json.dumps(key, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
