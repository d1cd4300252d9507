"""Take the README's screenshot of the built book in headless Chromium.

Usage: python scripts/screenshot.py [PAGE] [OUT]
  PAGE defaults to notebooks/00_sample_rhythm.html, OUT to book/images/screenshot.png.
Build the book first (`make book`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.sitecheck import launch_browser, serve  # noqa: E402


def main(page: str = "notebooks/00_sample_rhythm.html", out: str = "book/images/screenshot.png",
         anchor: str = ".kvmath-interactive") -> int:
    with serve(ROOT / "_build" / "html") as base, launch_browser() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
        tab.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url or r.request.url.startswith("data:") else r.abort())
        tab.goto(base + page, wait_until="networkidle")
        tab.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        target = tab.query_selector(anchor)
        if target is not None:
            target.scroll_into_view_if_needed()
            tab.evaluate("(el) => window.scrollBy(0, el.getBoundingClientRect().top - 140)", target)
        Path(ROOT / out).parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(ROOT / out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
