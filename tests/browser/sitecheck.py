"""Check a built HTML site in headless Chromium: offline, typeset, complete.

Used by ``tests/browser/test_site.py``; also runnable by hand::

    python -m tests.browser.sitecheck _build/html

For every page it records each request the page makes and reports a problem
when any request leaves the local machine (only 127.0.0.1 / localhost and
data:/blob:/about: URLs are allowed; others are aborted so nothing is ever
fetched), when the console shows an error or the page throws, when raw TeX is
left in the visible text or math was not typeset by MathJax, when an image
did not load, and when an interactive figure (``kvbook.interactive``) does
not show its default image or its range input does not change the image.

It also measures each page as a first-time reader gets it (a fresh browser
context, so nothing is cached; bytes as served by ``http.server``, which
does not compress) and checks what issue 13 asks of a page:

* ``bytes``: everything the page loads until the network is idle, before
  the reader touches anything (frames of interactive figures load on first
  touch). Budgets: :data:`BUDGET_NOTEBOOK` and :data:`BUDGET_TEXT`.
* every image has alt text, and not a file name;
* every range input has ``aria-valuetext`` (it announces "batch B 64", not
  "6"), and keeps one after it moves;
* nothing in the article runs past the column's right edge (``overflow``);
* measured, and enforced once the chapters adopt the tags: the share of
  the article's height taken by code cells' input as shown (``code_share``: a
  collapsed cell counts its toggle bar, not its hidden source) and the
  blocks that scroll sideways because they are wider than the column
  (``wide_blocks``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
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
# sphinx-reredirects writes exactly this page for each renamed page
REDIRECT_RE = re.compile(r'<html><head><noscript><meta http-equiv="refresh" content="0; url=([^"]+)" /></noscript>'
                         r'<script>.*</script></head></html>', re.S)
BUDGET_NOTEBOOK = 2_500_000  # bytes, a chapter (notebook) page, cold
BUDGET_TEXT = 2_000_000  # bytes, a prose page, cold (MathJax alone is about 1.2 MB)
CODE_SHARE_MAX = 0.15  # of the article's height, at 1366 px wide


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


def redirect_target(path: Path) -> str | None:
    """Where a redirect stub (sphinx-reredirects' page for an old page name) points, else None."""
    text = path.read_text(encoding="utf-8", errors="replace")
    match = REDIRECT_RE.fullmatch(text.strip())
    return match.group(1) if match else None


def html_pages(directory: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to ``directory``.

    Redirect stubs from old page names are left out: a browser shows the page they
    point to, which is checked under its own name.
    """
    pages = []
    for path in sorted(Path(directory).rglob("*.html")):
        rel = path.relative_to(directory)
        if rel.parts[0] in SKIP_DIRS or redirect_target(path) is not None:
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
    if (!img || !(img.complete && img.naturalWidth > 0)) {
      out.push(id + ': default image missing'); continue;
    }
    if (!range) { out.push(id + ': no range input'); continue; }
    const announced = () => range.getAttribute('aria-valuetext') || '';
    if (!announced() || /^\s*\d+\s*$/.test(announced()))
      out.push(id + ': range input has no aria-valuetext naming its value');
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
    if (announced() === '' ) out.push(id + ': aria-valuetext lost after moving the range input');
    range.value = String(start);
    range.dispatchEvent(new Event('input', {bubbles: true}));
  }
  return {count: document.querySelectorAll('.kvmath-interactive').length, problems: out};
}
"""


_A11Y_JS = r"""
() => {
  const out = [];
  for (const img of document.images) {
    const alt = img.getAttribute('alt');
    const src = (img.getAttribute('src') || '').slice(0, 60);
    if (alt === null || !alt.trim()) out.push('image without alt text: ' + src);
    else if (/\.(png|jpe?g|svg|gif)$/i.test(alt.trim()) || alt.includes('_images/'))
      out.push('image alt text is a file name: ' + alt.slice(0, 80));
  }
  for (const r of document.querySelectorAll('input[type=range]'))
    if (!(r.getAttribute('aria-valuetext') || '').trim())
      out.push('range input without aria-valuetext: #' + (r.id || '?'));
  return out;
}
"""

_LAYOUT_JS = r"""
() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const col = article.getBoundingClientRect();
  const scrolls = el => { for (let a = el.parentElement; a && a !== article; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip') return true; }
    return false; };
  const overflow = [], wide = [];
  for (const el of article.querySelectorAll('p, li, pre, table, img, mjx-container, .cell_output, .output, h1, h2, h3, figure, .kvmath-interactive')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.right > col.right + 2 && !scrolls(el))
      overflow.push(el.tagName.toLowerCase() + ' runs ' + Math.round(r.right - col.right) + ' px past the column: ' +
                    (el.textContent || el.getAttribute('src') || '').trim().slice(0, 50));
  }
  for (const el of article.querySelectorAll('pre, table, div.math, .MathJax_Display, mjx-container[display=true], .highlight')) {
    if (el.scrollWidth > el.clientWidth + 2 && el.clientWidth > 0)
      wide.push(el.tagName.toLowerCase() + ' is ' + (el.scrollWidth - el.clientWidth) + ' px wider than its box: ' +
                (el.textContent || '').trim().slice(0, 50));
  }
  // Code as the reader sees it: a collapsed code cell (hide-input) takes only its
  // "Show code cell source" bar, which is counted; its hidden source is not.
  // A cell inside a collapsed solution (sphinx-togglebutton keeps it laid out, invisible)
  // is not seen at all.
  let code = 0;
  for (const el of article.querySelectorAll('.cell .cell_input')) {
    const closed = el.closest('details:not([open])');
    if (closed) { code += closed.querySelector('summary').getBoundingClientRect().height; continue; }
    if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;
    code += el.getBoundingClientRect().height;
  }
  const height = article.getBoundingClientRect().height;
  return {overflow: overflow, wide: Array.from(new Set(wide)), codeShare: height ? code / height : 0};
}
"""


def served_bytes(directory: Path, base: str, urls: list[str]) -> int:
    """Bytes of the local files behind ``urls`` (each counted once), as http.server serves them."""
    from urllib.parse import unquote

    total = 0
    for url in dict.fromkeys(urls):
        if not url.startswith(base):
            continue
        rel = unquote(urlsplit(url).path).lstrip("/")
        path = Path(directory) / rel
        if path.is_dir():
            path = path / "index.html"
        if path.is_file():
            total += path.stat().st_size
    return total


def check_page(context, url: str, directory: Path | None = None, base: str = "") -> tuple[list[str], dict]:
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
    layout: dict = {"overflow": [], "wide": [], "codeShare": 0.0}
    cold_bytes = 0
    try:
        page.goto(url, wait_until="load", timeout=30_000)
        with contextlib.suppress(Exception):
            page.wait_for_load_state("networkidle", timeout=5_000)
        if directory is not None:
            cold_bytes = served_bytes(directory, base, list(requests))
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
        problems.extend(page.evaluate(_A11Y_JS))
        layout = page.evaluate(_LAYOUT_JS)
        problems.extend(layout["overflow"])
        interactive = page.evaluate(_INTERACTIVE_JS)
        problems.extend(interactive["problems"])
    finally:
        page.close()
    for req in requests:
        if not is_local(req):
            problems.append(f"request leaves localhost: {req}")
    facts = {"requests": len(requests), "math_nodes": math.get("mathNodes", 0),
             "typeset": math.get("typeset", 0), "interactive": interactive["count"],
             "bytes": cold_bytes, "code_share": round(layout["codeShare"], 3), "wide_blocks": layout["wide"]}
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
    def route(r):
        # Never let anything leave the machine; the request is still recorded.
        if is_local(r.request.url):
            r.continue_()
        else:
            r.abort()

    with serve(directory) as base:
        for rel in pages:
            # a fresh context per page: nothing cached, as a first-time reader
            context = browser.new_context(viewport={"width": 1366, "height": 900})
            context.route("**/*", route)
            try:
                problems, facts = check_page(context, base + rel, directory, base)
            finally:
                context.close()
            reports[rel] = {"problems": problems, **facts}
    return reports


def budget(rel: str) -> int:
    """The cold-bytes budget of a page: notebook chapters get a little more (figures)."""
    return BUDGET_NOTEBOOK if rel.startswith("notebooks/") else BUDGET_TEXT


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
    for rel, rep in result.items():
        print(f"{rel:50s} {rep['bytes'] / 1e6:6.2f} MB  code {rep['code_share']:.0%}  "
              f"wide blocks {len(rep['wide_blocks'])}")
    print(text or f"{len(result)} pages checked, no problems")
    sys.exit(1 if text else 0)
