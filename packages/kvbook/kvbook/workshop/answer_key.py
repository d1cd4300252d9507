"""Collect the answer key from the executed notebooks' own glue outputs.

The convention (issue 15 item 3): inside an exercise's solution, glue each
expected answer under a name that starts with ``ans_`` followed by the
exercise's label and then ``_`` and a short name for the quantity::

    glue("ans_ex-roofline-1_batch", f"{first}", display=False)
    glue("ans_ex-kvcache-2_tokens_bf16", f"{n_bf16:,} tokens", display=False)

Glue a string that already carries its unit (``kvmath.fmt_bytes``,
``fmt_seconds``, ... or an f-string with the unit), with ``display=False``
so nothing shows on the page. ``ans_<label>`` alone (no quantity) is allowed
for a single answer. myst-nb stores each glued value as a cell output with
the mimetype ``application/papermill.record/text/plain`` and the name in
``metadata.scrapbook.name``; this script reads those outputs, so the key
holds exactly what the notebooks computed, never a typed number.

The key has one line per exercise label found in the chapters (the
``{exercise-start}`` / ``{exercise}`` directives), in book order: the label,
the chapter, the question's short form (its first question, with glued
numbers filled in) and the recorded answers, or "no recorded answer yet".

Usage::

    python -m kvbook.workshop.answer_key [--notebooks DIR] [--out answer-key.md] [--json key.json]

``DIR`` defaults to ``_build/jupyter_execute/notebooks`` (what ``make book``
executed) when it exists, else the committed ``notebooks/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from kvbook.repo import ROOT
PREFIX = "ans_"
GLUE_MIME = "application/papermill.record/"
NO_ANSWER = "no recorded answer yet"

EXERCISE_RE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*\n(?P<opts>(?::[^\n]*\n)*)(?:(?P=fence)\s*\n)?"
    r"(?P<body>.*?)^(?:`{3,}|:{3,})(?:\{exercise-end\}|\s*$)",
    re.M | re.S,
)


def _glue_outputs(nb: dict):
    for cell in nb.get("cells", []):
        yield from cell.get("outputs", []) if cell.get("cell_type") == "code" else []


def glue_values(nb: dict, store: dict | None = None) -> dict[str, str]:
    """Every glued name of an executed notebook and its text/plain value, in output order.

    ``store`` is myst-nb's ``<notebook>.glue.json`` beside an executed notebook
    (``_build/jupyter_execute``), where the build moves the glue outputs of
    cells it removes; a committed notebook keeps them in its cells.
    """
    values: dict[str, str] = {}
    outputs = list(_glue_outputs(nb)) + list((store or {}).values())
    for out in outputs:
        name = out.get("metadata", {}).get("scrapbook", {}).get("name")
        data = out.get("data", {})
        text = data.get(GLUE_MIME + "text/plain", data.get("text/plain") if store else None)
        if name is not None and text is not None and name not in values:
            values[name] = "".join(text) if isinstance(text, list) else text
    return values


def plain(text: str) -> str:
    """A glued repr as a reader wants it: strings without their quotes."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            return str(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            pass
    return text


def _fill_glue(text: str, glue: dict[str, str]) -> str:
    def role(m: re.Match) -> str:
        key, _, fmt = m.group(1).partition(":")
        value = plain(glue.get(key, key))
        if fmt:
            try:
                return format(float(value) if not fmt.endswith("d") else int(float(value)), fmt)
            except ValueError:
                return value
        return value
    text = re.sub(r"\{glue(?::text)?\}`([^`]*)`", role, text)
    text = re.sub(r"\{eq\}`([^`]*)`", r"(\1)", text)
    text = re.sub(r"\{(?:doc|ref|numref)\}`(?:([^`<]*?)\s*<[^`]*>|([^`]*))`",
                  lambda m: (m.group(1) or m.group(2)), text)
    return text


def short_form(body: str, glue: dict[str, str], limit: int = 320) -> str:
    """The exercise's first question (or first sentence), one line."""
    text = " ".join(_fill_glue(body, glue).split())
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


def answers_for(label: str, glue: dict[str, str], labels: list[str]) -> list[tuple[str, str]]:
    """The ans_ glue of one label (longest label wins when one label prefixes another)."""
    out = []
    for name, value in glue.items():
        if not name.startswith(PREFIX):
            continue
        rest = name[len(PREFIX):]
        owner = max((lab for lab in labels if rest == lab or rest.startswith(lab + "_")), key=len, default=None)
        if owner == label:
            out.append((rest[len(label) + 1:] or "answer", plain(value)))
    return out


def orphan_answers(glue: dict[str, str], labels: list[str]) -> list[str]:
    """ans_ names that match no exercise label (a typo in a label)."""
    return [n for n in glue if n.startswith(PREFIX)
            and not any(n[len(PREFIX):] == lab or n[len(PREFIX):].startswith(lab + "_") for lab in labels)]


def chapter_order(nb_dir: Path) -> list[Path]:
    toc = (ROOT / "_toc.yml").read_text() if (ROOT / "_toc.yml").exists() else ""
    names = re.findall(r"file:\s*notebooks/(\S+)", toc)
    paths = [nb_dir / f"{n}.ipynb" for n in names if (nb_dir / f"{n}.ipynb").exists()]
    rest = sorted(p for p in nb_dir.glob("*.ipynb") if p not in paths)
    return paths + rest


def collect(nb_dir: Path) -> list[dict]:
    """One entry per exercise: label, chapter, title, question, answers."""
    key = []
    for path in chapter_order(nb_dir):
        nb = json.loads(path.read_text())
        store_path = path.with_suffix(".glue.json")
        store = json.loads(store_path.read_text()) if store_path.exists() else None
        glue = glue_values(nb, store)
        found = exercises(nb)
        labels = [lab for lab, _ in found]
        orphans = orphan_answers(glue, labels)
        if orphans:
            raise ValueError(f"{path.name}: answers glued for no exercise label: {', '.join(orphans)}")
        title = next((line[2:].strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                      for line in "".join(c["source"]).splitlines() if line.startswith("# ")), path.stem)
        for label, body in found:
            key.append({"label": label, "chapter": path.stem, "title": title,
                        "question": short_form(body, glue), "answers": answers_for(label, glue, labels)})
    return key


def to_markdown(key: list[dict]) -> str:
    n_done = sum(1 for e in key if e["answers"])
    out = ["# Answer key\n\n",
           f"Generated by `packages/kvbook/kvbook/workshop/answer_key.py` from the executed notebooks' glue outputs "
           f"(names `ans_<exercise label>_<quantity>`): {len(key)} exercises, "
           f"{n_done} with recorded answers. No number here is typed by hand.\n"]
    chapter = None
    for e in key:
        if e["chapter"] != chapter:
            chapter = e["chapter"]
            out.append(f"\n## {e['title']} ({chapter})\n\n")
        answers = "; ".join(f"{name.replace('_', ' ')} = {value}" for name, value in e["answers"]) or f"*{NO_ANSWER}*"
        out.append(f"- **{e['label']}**: {e['question']} → {answers}\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT / "_build" / "jupyter_execute" / "notebooks"
    parser.add_argument("--notebooks", type=Path, default=default if default.is_dir() else ROOT / "notebooks")
    parser.add_argument("--out", type=Path, default=None, help="write the key as Markdown here (else stdout)")
    parser.add_argument("--json", type=Path, default=None, help="also write it as JSON here")
    args = parser.parse_args(argv)
    key = collect(args.notebooks)
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
