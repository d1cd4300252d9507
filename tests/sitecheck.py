"""Check a built HTML site in headless Chromium: offline, typeset, complete.

Used by ``tests/test_browser.py``; also runnable by hand::

    python tests/sitecheck.py _build/html

For every page it records each request the page makes and reports a problem
when any request leaves the local machine (only 127.0.0.1 / localhost and
data:/blob:/about: URLs are allowed; others are aborted so nothing is ever
fetched), when the console shows an error or the page throws, when raw TeX is
left in the visible text or math was not typeset by MathJax, when an image
did not load, and when an interactive figure (``kvmath.interactive``) does
not show its default image or its range input does not change the image.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import sys
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

CHROMIUM = os.environ.get("KVMATH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
SKIP_DIRS = {"_static", "_vendor", "_sources", "_images"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output readable
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free localhost port; yield the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def html_pages(directory: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to ``directory``."""
    pages = []
    for path in sorted(Path(directory).rglob("*.html")):
        rel = path.relative_to(directory)
        if rel.parts[0] in SKIP_DIRS:
            continue
        pages.append(rel.as_posix())
    return pages


def is_local(url: str) -> bool:
    """True for URLs that never leave the machine."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "file", "chrome-error"):
        return True
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname in LOCAL_HOSTS


_MATH_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) { return {error: String(e)}; }
  }
  const mathNodes = document.querySelectorAll('.math, span.math, div.math');
  const typeset = document.querySelectorAll('mjx-container').length;
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('pre, code, .highlight, script, style, textarea, mjx-container, mjx-assistive-mml')
       .forEach(n => n.remove());
  const text = clone.textContent || '';
  const raw = [];
  for (const pat of ['$$', '\\(', '\\)', '\\[', '\\]', '\\begin{', '\\frac', '\\text{']) {
    const i = text.indexOf(pat);
    if (i >= 0) raw.push(text.slice(Math.max(0, i - 30), i + 40).replace(/\s+/g, ' '));
  }
  return {mathNodes: mathNodes.length, typeset: typeset,
          hasMathJax: !!window.MathJax, raw: raw};
}
"""

_IMAGES_JS = r"""
async () => {
  const imgs = Array.from(document.images);
  for (const img of imgs) {
    if (!img.complete) {
      img.loading = 'eager';
      await new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r);
                               setTimeout(r, 5000); });
    }
  }
  return imgs.filter(i => !(i.complete && i.naturalWidth > 0))
             .map(i => (i.getAttribute('src') || '').slice(0, 80));
}
"""

_INTERACTIVE_JS = r"""
async () => {
  const out = [];
  for (const fig of document.querySelectorAll('.kvmath-interactive')) {
    const id = fig.id || '(no id)';
    const img = fig.querySelector('img.kvmath-interactive-img');
    const range = fig.querySelector('input[type=range]');
    if (!img || !img.src.startsWith('data:image/png') || !(img.complete && img.naturalWidth > 0)) {
      out.push(id + ': default image missing'); continue;
    }
    if (!range) { out.push(id + ': no range input'); continue; }
    const before = img.src;
    const start = Number(range.value);
    const target = start === Number(range.min) ? Number(range.max) : Number(range.min);
    range.value = String(target);
    range.dispatchEvent(new Event('input', {bubbles: true}));
    await new Promise(r => setTimeout(r, 50));
    if (img.src === before) out.push(id + ': moving the range input did not change the image');
    else if (!(await new Promise(r => { if (img.complete) r(img.naturalWidth > 0);
                                          else { img.onload = () => r(img.naturalWidth > 0);
                                                 img.onerror = () => r(false); } })))
      out.push(id + ': the frame shown after moving the range input did not load');
    range.value = String(start);
    range.dispatchEvent(new Event('input', {bubbles: true}));
  }
  return {count: document.querySelectorAll('.kvmath-interactive').length, problems: out};
}
"""


def check_page(context, url: str) -> tuple[list[str], dict]:
    """Open ``url`` in a new page of ``context``; return (problems, facts)."""
    problems: list[str] = []
    requests: list[str] = []
    math: dict = {}
    interactive: dict = {"count": 0, "problems": []}
    page = context.new_page()
    page.on("request", lambda req: requests.append(req.url))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("response", lambda res: problems.append(f"HTTP {res.status} for {res.url}")
            if res.status >= 400 else None)
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}")
            if is_local(req.url) else None)
    try:
        page.goto(url, wait_until="load", timeout=30_000)
        with contextlib.suppress(Exception):
            page.wait_for_load_state("networkidle", timeout=5_000)
        math = page.evaluate(_MATH_JS)
        if "error" in math:
            problems.append(f"MathJax failed: {math['error']}")
        else:
            if math["mathNodes"] and not math["hasMathJax"]:
                problems.append(f"{math['mathNodes']} math elements but MathJax never loaded")
            elif math["mathNodes"] and math["typeset"] < math["mathNodes"]:
                problems.append(f"only {math['typeset']} of {math['mathNodes']} equations typeset")
            for snippet in math["raw"]:
                problems.append(f"raw TeX in visible text: ...{snippet}...")
        for src in page.evaluate(_IMAGES_JS):
            problems.append(f"image did not load: {src}")
        interactive = page.evaluate(_INTERACTIVE_JS)
        problems.extend(interactive["problems"])
    finally:
        page.close()
    for req in requests:
        if not is_local(req):
            problems.append(f"request leaves localhost: {req}")
    facts = {"requests": len(requests), "math_nodes": math.get("mathNodes", 0),
             "typeset": math.get("typeset", 0), "interactive": interactive["count"]}
    return problems, facts


@contextlib.contextmanager
def launch_browser(executable: str = CHROMIUM):
    """Headless Debian Chromium driven by Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def check_site(browser, directory: Path, pages: list[str] | None = None) -> dict[str, dict]:
    """Check every page of the site in ``directory``; return {page: report}."""
    directory = Path(directory)
    pages = html_pages(directory) if pages is None else pages
    reports: dict[str, dict] = {}
    with serve(directory) as base:
        context = browser.new_context()

        def route(r):
            # Never let anything leave the machine; the request is still recorded.
            if is_local(r.request.url):
                r.continue_()
            else:
                r.abort()

        context.route("**/*", route)
        try:
            for rel in pages:
                problems, facts = check_page(context, base + rel)
                reports[rel] = {"problems": problems, **facts}
        finally:
            context.close()
    return reports


def format_problems(reports: dict[str, dict]) -> str:
    lines = []
    for rel, rep in reports.items():
        for problem in rep["problems"]:
            lines.append(f"{rel}: {problem}")
    return "\n".join(lines)


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "_build/html")
    with launch_browser() as b:
        result = check_site(b, site)
    text = format_problems(result)
    print(text or f"{len(result)} pages checked, no problems")
    sys.exit(1 if text else 0)
