"""The chapters' pages say what they said at 7042cf4, before the prose's numbers moved from glue to inline expressions.

``tests/data/book_text_7042cf4.json`` holds every chapter page's text as built at 7042cf4 (the last
build with ``{glue:text}`` roles; ``tests/book/book_text.py`` reads it). The test diffs each page of
the book in the tree against it; every differing stretch of lines must be listed in
``tests/data/book_text_changes.json`` with the old lines, the new lines and why. A listed change that
no longer occurs fails too, so the list stays the list of what changed. A page the changes file lists
as volatile (chapter 14 prints what it measures on the machine that builds) is compared with every
number, and each word the measurements choose ("close to" or "far from" the peak), masked: its other
words must stay, its measurements may move.
"""

from __future__ import annotations

import difflib
import json
import re

from tests.book.book_text import chapter_texts
from tests.conftest import ROOT

RECORD = ROOT / "tests" / "data" / "book_text_7042cf4.json"
CHANGES = ROOT / "tests" / "data" / "book_text_changes.json"


NUMBER = re.compile(r"\d[\d,.\u2009]*")


def masked(lines: list[str], words: list[str] = (), optional: list[str] = (), machine: list[str] = ()) -> list[str]:
    """A volatile page's lines with each number, and each of ``words``, replaced by '#', and each of the
    ``optional`` sentences (given masked) removed: those a measurement adds on some machines only. A line that
    matches one of the ``machine`` patterns (regular expressions) describes the build machine (its CPU's name,
    flags and BLAS kernel; matched once masked) and becomes the pattern itself."""
    choice = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")\b") if words else None
    out = []
    for line in lines:
        line = NUMBER.sub("#", choice.sub("#", line) if choice else line)
        described = next((pattern for pattern in machine if re.search(pattern, line)), None)
        if described is not None:
            out.append(f"[the build machine: {described}]")
            continue
        for sentence in optional:
            line = line.replace(" " + sentence, "").replace(sentence, "")
        out.append(line)
    return out


def hunks(old: list[str], new: list[str]) -> list[tuple[list[str], list[str]]]:
    """The stretches where two pages' lines differ: (old lines, new lines) for each."""
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    return [(old[i1:i2], new[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def unlisted(record: dict, now: dict, changes: list[dict], volatile: dict | None = None) -> tuple[list[str], list[dict]]:
    """Differences the changes list does not name, and listed changes that do not occur (volatile pages masked)."""
    listed = {(c["page"], tuple(c["old"]), tuple(c["new"])): c for c in changes}
    seen, failures = set(), []
    for page in sorted(set(record) | set(now)):
        if page not in now or page not in record:
            failures.append(f"{page}: {'vanished' if page not in now else 'new'}")
            continue
        old_lines, new_lines = record[page], now[page]
        if page in (volatile or {}):
            words, optional = volatile[page].get("words", []), volatile[page].get("optional", [])
            machine = volatile[page].get("machine", [])
            old_lines, new_lines = masked(old_lines, words, optional, machine), masked(new_lines, words, optional, machine)
        for old, new in hunks(old_lines, new_lines):
            key = (page, tuple(old), tuple(new))
            if key in listed:
                seen.add(key)
            else:
                failures.append(f"{page}:\n  - " + "\n  - ".join(old) + "\n  + " + "\n  + ".join(new))
    stale = [c for k, c in listed.items() if k not in seen]
    return failures, stale


def test_every_chapter_page_says_what_it_said_or_a_listed_change(built_book):
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    listing = json.loads(CHANGES.read_text(encoding="utf-8"))
    changes, volatile = listing["changes"], listing["volatile"]
    assert all(c.get("why", "").strip() for c in changes), "every listed change gives its reason ('why')"
    assert all(entry["why"].strip() and page in record for page, entry in volatile.items())
    failures, stale = unlisted(record, chapter_texts(built_book), changes, volatile)
    assert not failures, (f"{len(failures)} stretches of chapter text differ from {RECORD.name} and are not in "
                          f"{CHANGES.name}:\n" + "\n".join(failures))
    assert not stale, f"{len(stale)} listed changes no longer occur: drop them:\n" + json.dumps(stale, indent=1)


def test_the_diff_finds_a_changed_number_and_a_stale_listing():
    record = {"p": ["It takes 3 GPUs.", "Then 16.00 GB are left."]}
    now = {"p": ["It takes 3 GPUs.", "Then 16.01 GB are left."]}
    failures, stale = unlisted(record, now, [])
    assert failures == ["p:\n  - Then 16.00 GB are left.\n  + Then 16.01 GB are left."]
    listed = [{"page": "p", "old": ["Then 16.00 GB are left."], "new": ["Then 16.01 GB are left."], "why": "x"}]
    assert unlisted(record, now, listed) == ([], [])
    assert unlisted(record, record, listed) == ([], listed)
    assert unlisted(record, now, [], {"p": {"why": "measured"}}) == ([], [])
    chosen = {"p": ["It takes 3 GPUs.", "Then 16.01 GB are left, far from the peak."]}
    record_chosen = {"p": ["It takes 3 GPUs.", "Then 16.00 GB are left, close to the peak."]}
    assert unlisted(record_chosen, chosen, [], {"p": {"why": "measured", "words": ["close to", "far from"]}}) == ([], [])
    # a line naming the build machine is matched by a pattern, whatever the machine says
    cpu = {"p": {"why": "the build machine", "machine": [r"^.+: # core at # GHz\. BLAS kernel: \S+\.$"]}}
    intel, amd = {"p": ["Intel Xeon: 1 core at 2.1 GHz. BLAS kernel: SkylakeX."]}, {"p": ["AMD EPYC: 2 core at 3.0 GHz. BLAS kernel: Haswell."]}
    assert unlisted(intel, amd, [], cpu) == ([], [])
    assert unlisted(intel, {"p": ["AMD EPYC, 2 cores."]}, [], cpu)[0]  # another line still fails
    # a sentence that a measurement adds on some machines only is listed, masked, as optional
    added = {"p": ["It takes 3 GPUs.", "Then 16.01 GB are left, far from the peak. It ran at 3.1 GHz or more."]}
    optional = {"p": {"why": "measured", "words": ["close to", "far from"], "optional": ["It ran at # GHz or more."]}}
    assert unlisted(record_chosen, added, [], optional) == ([], [])
    assert unlisted(record_chosen, added, [], {"p": {"why": "measured", "words": ["close to", "far from"]}})[0]
    worded = {"p": ["It takes 3 GPUs.", "Then 16.01 GB are free."]}
    assert unlisted(record, worded, [], {"p": {"why": "measured"}})[0] == [
        "p:\n  - Then # GB are left.\n  + Then # GB are free."]
