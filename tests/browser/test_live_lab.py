"""An interactive figure is live in a real JupyterLab: moving its slider redraws it.

Starts JupyterLab from this environment on a free localhost port, on a
temporary copy of the sample chapter (so nothing in the repository is saved
over), runs all cells in headless Chromium, presses the right-arrow key on
the ipywidgets slider and waits for the figure's image to change.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "notebooks" / "00_sample_rhythm.ipynb"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    shutil.copy(SAMPLE, tmp_path / SAMPLE.name)
    port = free_port()
    jupyter = Path(sys.executable).with_name("jupyter")
    proc = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--notebook-dir={tmp_path}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "api/status", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("JupyterLab did not start")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_slider_redraws_the_figure_in_jupyterlab(lab, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto(lab + "lab/tree/" + SAMPLE.name, wait_until="load", timeout=60_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                               ".jp-Toolbar-kernelStatus, .jp-KernelStatus", timeout=60_000)
        time.sleep(2)
        # the Run menu, not the palette's shortcut: a key pressed while a loaded machine is still laying the page
        # out can be lost (make test-full, load 3-4)
        page.locator(".jp-Notebook").first.click()
        page.get_by_text("Run", exact=True).first.click()
        page.get_by_text("Run All Cells", exact=True).first.click()
        page.wait_for_selector(".widget-image", timeout=120_000)
        image = page.query_selector(".widget-image")
        before = image.get_attribute("src")
        assert before and before.startswith(("blob:", "data:"))
        # Run All leaves the view at the last cell, and JupyterLab 4 renders cells out of view lazily:
        # bring the figure into view before reading its slider's readout.
        image.scroll_into_view_if_needed()
        page.wait_for_function("() => { const r = document.querySelector('.widget-readout');"
                               " return r && r.innerText.trim() !== ''; }", timeout=20_000)
        readout = page.query_selector(".widget-readout")
        assert readout.inner_text().strip() == "16"
        handle = page.query_selector(".widget-slider .noUi-handle, .widget-hslider [role=slider]")
        handle.scroll_into_view_if_needed()
        handle.focus()
        handle.press("ArrowRight")
        page.wait_for_function(
            "(s) => { const i = document.querySelector('.widget-image');"
            " return i && i.getAttribute('src') !== s; }", arg=before, timeout=20_000)
        assert page.query_selector(".widget-readout").inner_text().strip() == "32"
        widget_errors = [e for e in errors if "widget" in e.lower() or "model" in e.lower()]
        assert not widget_errors, widget_errors
    finally:
        page.close()
