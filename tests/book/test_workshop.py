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
