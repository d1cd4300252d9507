"""The workshop kit's data agrees with the chapters, and its pages with its data."""

from __future__ import annotations

from kvbook.workshop import workshop_pages


def test_data_names_only_what_the_chapters_have_and_every_chapter_has_a_slot():
    assert workshop_pages.validate() == []


def test_generated_pages_are_up_to_date():
    for path, text in workshop_pages.pages().items():
        assert path.exists() and path.read_text() == text, (
            f"{path.name} is stale: run python -m kvbook.workshop.workshop_pages")


def test_the_three_plans_exist_with_their_lengths():
    lengths = {p["id"]: sum(b["minutes"] for b in p["blocks"]) for p in workshop_pages.plans()}
    assert lengths == {"plan-90": 90, "plan-half-day": 210, "plan-full-day": 390}


def test_the_issues_misconceptions_are_all_listed():
    ids = {m["id"] for m in workshop_pages.misconceptions()}
    assert {"per-token-step-sequence", "gb-gib", "param-bytes-count", "kv-token-sequence",
            "bcrit-batch-chip", "mqa-mla-tp", "mbu-mfu"} <= ids


def test_every_chapter_gets_a_facilitator_note():
    for nb in workshop_pages.chapter_names():
        assert workshop_pages.facilitator_note(nb), nb


def test_exercises_and_figures_are_named_as_the_book_numbers_them():
    """Review R21c-7: the plans, the notes and the misconceptions gave exercises by label ("ex-kvcache-4") where
    learners see "Exercise 2.4"; every label they give is now a numref (the book's number) with the label beside it,
    and every figure name a numref."""
    import re

    exercises, figures = workshop_pages._labels()
    assert "ex-kvcache-4" in exercises and "fig-pq-tp" in figures
    texts = [*(text for path, text in workshop_pages.pages().items() if path.stem != "problems"),
             *(workshop_pages.facilitator_note(nb) or "" for nb in workshop_pages.chapter_names())]
    named = 0
    for text in texts:
        for m in re.finditer(r"(?<![\w-])(" + "|".join(map(re.escape, exercises | figures)) + r")(?![\w-])", text):
            before, label = text[:m.start()], m.group(1)
            ok = before.endswith("{numref}`") or (label in exercises and before.endswith(f"{{numref}}`{label}` (`"))
            assert ok, f"{label} given bare: ...{text[max(0, m.start() - 80):m.end() + 20]}"
            named += 1
    assert named > 50, named
    assert workshop_pages.name_labels("Pairs: ex-kvcache-4 (GB against GiB). Read fig-pq-tp; exercise ex-share-2.") \
        == ("Pairs: {numref}`ex-kvcache-4` (`ex-kvcache-4`; GB against GiB). Read {numref}`fig-pq-tp`; "
            "{numref}`ex-share-2` (`ex-share-2`).")
