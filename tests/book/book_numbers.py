"""Every number the chapters print, read from executed notebooks, and a comparison with a record of them.

Issue 20 (item 7) ports the chapters to a new spine; every number a chapter prints must stay the
same unless it was wrong. Before the port, :func:`extract` wrote what the chapters print at
3f3cb8a to ``tests/data/book_numbers_3f3cb8a.json``; ``tests/test_book_numbers.py`` extracts the
same from the notebooks in the tree and fails on every difference that
``tests/data/book_numbers_changes.json`` does not list with its reason.

What a chapter prints comes in four kinds, each read from the outputs the notebook stores (no
execution, so the comparison takes well under a second):

``glue``
    every ``glue(name, value, display=False)`` (``myst_nb.glue``, called directly or through a
    chapter's ``g(name, value)`` helper): myst-nb stores it as an output with the mimetype
    ``application/papermill.record/text/plain`` and the name in ``metadata.scrapbook.name``; the
    value kept is that text/plain repr, exactly as stored (``'2.54 ms'`` with its quotes, ``295.3``).
    At 3f3cb8a the prose's ``{glue:text}`` roles and the answer key read these; the chapters now
    glue nothing (their prose numbers are inline expressions), so only the record has this kind,
    and tests/book/test_book_text.py compares what the pages say instead.
``check``
    the text outputs of each check cell (tagged ``nbval-check-output`` or marked
    ``# NBVAL_CHECK_OUTPUT``), the text nbval compares: streams joined per stream, rich outputs by
    their ``text/plain`` (a ``kvmath.Table``'s text form; its HTML carries the same numbers).
``cli``
    each ``$ kvmath ...`` command a check cell shows (chapter 15 runs ``kvmath.cli.main`` in the
    kernel and prints the command line, then its output), keyed by the command line itself, so
    the key survives any change of cell; the rest of that cell, if any, stays under ``check``.
``output``
    the text outputs of every other code cell a reader sees (exercise solutions, hidden-input
    readouts), except matplotlib's ``<Figure size ...>`` repr and interactive figures, whose
    frames are images. Cells tagged ``remove-cell`` or ``remove-output`` show nothing and are left out.

Keys are ``<notebook stem>/<kind>/<name>``: the glue name, the command line, or the cell id
(nbformat 4.5 ids, stable across ``make refresh``).

Usage::

    python -m tests.book.book_numbers notebooks/*.ipynb --out tests/data/book_numbers_3f3cb8a.json
    python -m tests.book.book_numbers notebooks/*.ipynb --compare   # the test's report, by hand
    python -m tests.book.book_numbers --at 3f3cb8a --out ...        # from git objects, no checkout
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_COMMIT = "3f3cb8a"
GOLDEN = ROOT / "tests" / "data" / f"book_numbers_{GOLDEN_COMMIT}.json"
CHANGES = ROOT / "tests" / "data" / "book_numbers_changes.json"

KINDS = ("glue", "check", "cli", "output")
GLUE_MIME = "application/papermill.record/"
CHECK_TAG = "nbval-check-output"
CHECK_COMMENT = "# NBVAL_CHECK_OUTPUT"
HIDDEN_TAGS = {"remove-cell", "remove-output"}
CLI_PROMPT = "$ kvmath "
REL_TOL = 1e-9  # glued floats this close are the same number (see same_number)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _cell_texts(outputs: list[dict]) -> list[str]:
    """The text of a cell's outputs other than glue, consecutive streams of one name joined (as nbval does)."""
    texts: list[str] = []
    last_stream = None
    for out in outputs:
        if "scrapbook" in out.get("metadata", {}):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            text = _text(out.get("text", ""))
            if last_stream == out.get("name") and texts:
                texts[-1] += text
            else:
                texts.append(text)
            last_stream = out.get("name")
            continue
        last_stream = None
        if kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "kvmath-interactive" in _text(data.get("text/html", "")):
                continue  # an interactive figure: images, and the figure's readouts are in its frames
            plain = data.get("text/plain")
            if plain is None or _text(plain).startswith("<Figure size "):
                continue
            texts.append(_text(plain))
    return texts


def _split_cli(text: str) -> tuple[dict[str, str], str]:
    """Split a check cell's text at each ``$ kvmath`` line: {command line: its output}, and what came before."""
    commands: dict[str, str] = {}
    before: list[str] = []
    current = None
    for line in text.splitlines(keepends=True):
        if line.startswith(CLI_PROMPT):
            current = line.rstrip("\n")
            commands[current] = ""
        elif current is None:
            before.append(line)
        else:
            commands[current] += line
    return commands, "".join(before)


def extract_notebook(nb: dict) -> dict[str, dict[str, str]]:
    """{kind: {name: text}} for one executed notebook (a dict as json.load gives it)."""
    found: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        outputs = cell.get("outputs", [])
        for out in outputs:
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            text = out.get("data", {}).get(GLUE_MIME + "text/plain")
            if name is not None and text is not None:
                if name in found["glue"]:
                    raise ValueError(f"glue name {name!r} is glued twice in one notebook")
                found["glue"][name] = _text(text)
        cell_id = cell.get("id") or f"cell-{index}"
        tags = set(cell.get("metadata", {}).get("tags", []))
        texts = _cell_texts(outputs)
        if not texts:
            continue
        joined = "".join(t if t.endswith("\n") or i == len(texts) - 1 else t + "\n" for i, t in enumerate(texts))
        if CHECK_TAG in tags or CHECK_COMMENT in _text(cell.get("source", "")):
            commands, rest = _split_cli(joined)
            for command, text in commands.items():
                if command in found["cli"]:
                    raise ValueError(f"command {command!r} is shown twice in one notebook")
                found["cli"][command] = text
            if rest.strip() or not commands:
                found["check"][cell_id] = rest if commands else joined
        elif not tags & HIDDEN_TAGS:
            found["output"][cell_id] = joined
    return found


def extract(notebooks: dict[str, dict]) -> dict[str, dict[str, dict[str, str]]]:
    """{notebook stem: {kind: {name: text}}} for {stem: notebook}."""
    return {stem: extract_notebook(nb) for stem, nb in sorted(notebooks.items())}


def read_notebooks(paths) -> dict[str, dict]:
    return {Path(p).stem: json.loads(Path(p).read_text(encoding="utf-8")) for p in paths}


def read_notebooks_at(commit: str, root: Path = ROOT) -> dict[str, dict]:
    """The notebooks/*.ipynb of a commit, read from git objects (no checkout)."""
    names = subprocess.run(["git", "ls-tree", "--name-only", commit, "notebooks/"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    return {Path(n).stem: json.loads(subprocess.run(["git", "show", f"{commit}:{n}"], cwd=root, capture_output=True,
                                                    text=True, check=True).stdout)
            for n in names if n.endswith(".ipynb")}


def flatten(numbers: dict[str, dict[str, dict[str, str]]]) -> dict[str, str]:
    """{"<stem>/<kind>/<name>": text}."""
    return {f"{stem}/{kind}/{name}": text
            for stem, kinds in numbers.items() for kind, entries in kinds.items() for name, text in entries.items()}


def counts(numbers: dict[str, dict[str, dict[str, str]]]) -> dict[str, dict[str, int]]:
    return {stem: {kind: len(kinds.get(kind, {})) for kind in KINDS} for stem, kinds in numbers.items()}


def same_number(old: str, new: str) -> bool:
    """Two glued reprs of one float, equal to 1e-9 relative: a port that reorders a sum moves the last digits of
    ``repr`` (``0.012827439857349354`` vs ``...576``) but no number the prose formats from it."""
    try:
        a, b = float(old), float(new)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


def compare(golden: dict[str, str], now: dict[str, str], changes: dict | None = None) -> dict[str, list]:
    """Sort every key of the record and of the tree into what passes and what fails.

    ``golden`` and ``now`` are flat {key: text} (:func:`flatten`). ``changes`` is the accepted-
    changes file: ``{"volatile": {key: why}, "changes": {key: {"old", "new", "why"}}}``. A change
    with ``"new": null`` accepts a key that is gone; one with ``"moved_to": key`` accepts a key
    that now lives under another name (its ``"new"``, if given, is the value it must have there).
    A volatile key (a value measured on the machine that ran the notebook) must still exist; its
    value is not compared. A glued float whose repr moved only in digits beyond
    :data:`REL_TOL` passes and is reported.

    Returns lists of strings: ``failed`` (each one a reason the test fails) and ``reported``
    (accepted changes, new keys, volatile values that changed), each naming its key.
    """
    changes = changes or {}
    volatile = changes.get("volatile", {})
    accepted = changes.get("changes", {})
    failed: list[str] = []
    reported: list[str] = []
    claimed: set[str] = set()

    for key, entry in sorted(accepted.items()):
        if not str(entry.get("why", "")).strip():
            failed.append(f"{key}: listed in the changes file without a reason ('why')")
        if key not in golden:
            failed.append(f"{key}: listed in the changes file but not in the {GOLDEN_COMMIT} record")
        elif entry.get("old") != golden[key]:
            failed.append(f"{key}: the changes file's 'old' {entry.get('old')!r} is not the record's {golden[key]!r}")
    for key, why in sorted(volatile.items()):
        if not str(why).strip():
            failed.append(f"{key}: listed as volatile without a reason")
        if key not in golden:
            failed.append(f"{key}: listed as volatile but not in the {GOLDEN_COMMIT} record")

    for key, old in sorted(golden.items()):
        entry = accepted.get(key)
        if key in volatile:
            if key not in now:
                failed.append(f"{key}: vanished (volatile, so its value is not compared, but it must exist)")
            elif now[key] != old:
                reported.append(f"{key}: volatile, {old!r} -> {now[key]!r}")
            continue
        if entry is None:
            if key not in now:
                failed.append(f"{key}: vanished (was {old!r})")
            elif now[key] != old and "/glue/" in key and same_number(old, now[key]):
                reported.append(f"{key}: {old!r} -> {now[key]!r}, the same to {REL_TOL:g} relative")
            elif now[key] != old:
                failed.append(f"{key}: {old!r} -> {now[key]!r}")
            continue
        target = entry.get("moved_to", key)
        if target != key:
            claimed.add(target)
            if key in now:
                failed.append(f"{key}: listed as moved to {target}, but it is still here")
        if "new" in entry and entry["new"] is None and "moved_to" not in entry:
            if key in now:
                failed.append(f"{key}: listed as removed ({entry['why']}), but it is still here: {now[key]!r}")
            else:
                reported.append(f"{key}: removed, accepted: {entry['why']}")
            continue
        if target not in now:
            failed.append(f"{key}: vanished{'' if target == key else f' (listed as moved to {target})'}")
            continue
        want = entry.get("new", old)
        if now[target] != want and not ("/glue/" in target and same_number(want, now[target])):
            failed.append(f"{target}: {now[target]!r}, but the changes file accepts {want!r} (was {old!r})")
        elif target == key and want == old:
            failed.append(f"{key}: listed in the changes file but unchanged: drop the entry")
        else:
            where = f" (now {target})" if target != key else ""
            reported.append(f"{key}{where}: {old!r} -> {want!r}, accepted: {entry['why']}")

    for key in sorted(set(now) - set(golden) - claimed):
        reported.append(f"{key}: new, {now[key]!r}")
    return {"failed": failed, "reported": reported}


def load_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="executed notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--at", metavar="COMMIT", help="read the notebooks of this commit from git instead")
    parser.add_argument("--out", type=Path, help="write the extraction to this JSON file")
    parser.add_argument("--compare", action="store_true", help=f"compare with {GOLDEN.name} and the changes file")
    args = parser.parse_args(argv)
    if args.at:
        notebooks = read_notebooks_at(args.at)
    else:
        notebooks = read_notebooks(args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb")))
    numbers = extract(notebooks)
    if args.out:
        record = {"commit": args.at or None, "kinds": list(KINDS), "chapters": numbers}
        args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    total = {kind: 0 for kind in KINDS}
    for stem, per_kind in counts(numbers).items():
        print(f"{stem:32s} " + "  ".join(f"{kind} {n:4d}" for kind, n in per_kind.items()))
        for kind, n in per_kind.items():
            total[kind] += n
    print(f"{'total':32s} " + "  ".join(f"{kind} {n:4d}" for kind, n in total.items()))
    if args.compare:
        result = compare(flatten(load_json(GOLDEN)["chapters"]), flatten(numbers), load_json(CHANGES))
        for line in result["reported"]:
            print("reported:", line)
        for line in result["failed"]:
            print("FAILED:", line)
        return 1 if result["failed"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
