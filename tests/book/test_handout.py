"""The handout: two A4 pages, every chip and model it lists on them, nothing clipped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kvmath

from kvbook.workshop import handout, workshop_pages

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.browser  # prints with Chromium


@pytest.fixture(scope="module")
def pdf(tmp_path_factory) -> Path:
    missing = [t for t in ("pdfinfo", "pdftotext") if shutil.which(t) is None]
    if not Path(handout.CHROMIUM).exists() or missing:
        pytest.fail(f"need Chromium and poppler-utils ({missing}): make chromium poppler "
                    "(or deselect with -m 'not browser')")
    d = tmp_path_factory.mktemp("handout")
    handout.main(["--html", str(d / "handout.html"), "--pdf", str(d / "handout.pdf")])
    return d / "handout.pdf"


def test_two_a4_pages(pdf):
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    assert "Pages:           2" in info
    assert "(A4)" in info


def test_nothing_is_clipped(pdf):
    """Each page hides what overflows it, so everything that must be there is looked for."""
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    for name in handout.CHIPS + handout.MODELS:
        assert name in text, name
    for m in workshop_pages.misconceptions():
        assert m["title"].split()[0] in text
    assert "prefill FLOPs (causal)" in text
    h100 = kvmath.Chip.preset("h100-sxm")
    assert f"{h100.runtime_bytes / 2**30:.2f} GiB" in text
    # the chip table's last column, its bf16 ridge point, was cut at the page's right edge (review R21b-2)
    lines = text.splitlines()
    for name in handout.CHIPS:
        line = next(l for l in lines if l.split() and l.split()[0] == name)
        last = line.split()[-1].replace("\u2009", "").replace(",", "")
        assert last == f"{kvmath.Chip.preset(name).ridge_point('bf16'):.0f}", (name, line)


def test_numbers_come_from_kvmath():
    page = handout.render()
    a100 = kvmath.Chip.preset("a100-80gb")
    assert f">{a100.ridge_point():.0f}<" in page
    assert f">{kvmath.Model.preset('llama-3-8b').kv_bytes_per_token(2) / 1024:.0f}<" in page
