"""The built book renders completely in a browser with no network.

Every HTML page of ``_build/html`` is opened in headless Chromium; see
``tests/sitecheck.py`` for what is checked on each page.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sitecheck import check_site, format_problems, html_pages, is_local


@pytest.fixture(scope="module")
def site_reports(built_book, browser):
    return check_site(browser, built_book)


def test_every_page_renders_offline(site_reports):
    assert len(site_reports) >= 5, f"too few pages found: {sorted(site_reports)}"
    problems = format_problems(site_reports)
    assert not problems, "pages with problems:\n" + problems


def test_math_is_typeset_where_there_is_math(site_reports):
    notation = site_reports["book/notation.html"]
    assert notation["math_nodes"] > 10
    assert notation["typeset"] >= notation["math_nodes"]


def test_sample_chapter_has_a_working_interactive_figure(site_reports):
    chapter = site_reports["notebooks/00_sample_rhythm.html"]
    assert chapter["interactive"] >= 1
    assert not chapter["problems"]


def test_every_interactive_figure_page_was_checked(built_book, site_reports):
    with_figures = [rel for rel in html_pages(built_book)
                    if "kvmath-interactive" in (built_book / rel).read_text(encoding="utf-8")]
    for rel in with_figures:
        assert site_reports[rel]["interactive"] >= 1, rel


def test_no_page_references_a_cdn(built_book):
    """Static check beside the browser one: no script or stylesheet URL off the machine."""
    import re

    bad = []
    for rel in html_pages(built_book):
        text = (built_book / rel).read_text(encoding="utf-8")
        for url in re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', text):
            if "://" in url and not is_local(url):
                bad.append(f"{rel}: {url}")
    assert not bad, "\n".join(bad)


@pytest.fixture
def broken_site(built_book, tmp_path) -> Path:
    """A copy of the built site with faults injected into a few pages."""
    site = tmp_path / "site"
    shutil.copytree(built_book, site, ignore=shutil.ignore_patterns("_vendor"))
    (site / "_vendor").symlink_to(built_book / "_vendor", target_is_directory=True)
    chapter = site / "notebooks" / "00_sample_rhythm.html"
    text = chapter.read_text(encoding="utf-8")
    text = text.replace("</head>", '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script></head>', 1)
    chapter.write_text(text, encoding="utf-8")
    (site / "raw_tex.html").write_text(
        "<html><body><p>Unrendered: $$ B_\\text{crit} = \\frac{C b_w}{2W} $$</p>"
        '<img src="missing.png" alt="gone"></body></html>', encoding="utf-8")
    (site / "dead_slider.html").write_text(
        '<html><body><div class="kvmath-interactive" id="dead">'
        '<img class="kvmath-interactive-img" src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==">'
        '<input type="range" min="0" max="3" value="1"></div></body></html>', encoding="utf-8")
    return site


def test_the_check_catches_external_requests_and_broken_pages(browser, broken_site):
    pages = ["notebooks/00_sample_rhythm.html", "raw_tex.html", "dead_slider.html"]
    reports = check_site(browser, broken_site, pages)
    chapter = reports["notebooks/00_sample_rhythm.html"]["problems"]
    assert any("request leaves localhost: https://cdn.jsdelivr.net/npm/mathjax@3" in p for p in chapter), chapter
    raw = reports["raw_tex.html"]["problems"]
    assert any("raw TeX" in p for p in raw), raw
    assert any("image did not load" in p for p in raw), raw
    dead = reports["dead_slider.html"]["problems"]
    assert any("did not change the image" in p for p in dead), dead


def test_is_local():
    assert is_local("http://127.0.0.1:8000/_vendor/mathjax/tex-chtml.js")
    assert is_local("http://localhost:1234/x")
    assert is_local("data:image/png;base64,AAAA")
    assert not is_local("https://cdn.jsdelivr.net/npm/mathjax@3")
    assert not is_local("https://fonts.googleapis.com/css?family=Lato")
    assert not is_local("http://127.0.0.1.example.com/")
