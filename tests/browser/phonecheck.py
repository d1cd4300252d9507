"""Phone pages a person can read (issue 22, item 2), checked in headless Chromium at 390 x 844 CSS px.

Used by ``tests/browser/test_site.py``; also runnable by hand, on some pages or all::

    python -m tests.browser.phonecheck _build/html [notebooks/11_serving.html ...]

Each page is opened as a phone opens it (390 x 844 CSS px, two device pixels per CSS
pixel, touch) in a fresh context, and checked for:

* **figure text of at least** :data:`MIN_CSS_PX` **CSS px.** Every figure's PNG records its
  smallest text in image pixels (the ``kvbook:min-text-px`` text chunk, written by
  :func:`kvbook.plots.png_text`); the text a reader sees is that times the image's displayed
  width over its width in pixels. The file is read from the built book (a ``data:`` URL is
  decoded). A figure whose text is smaller inline is tapped, as a reader would, and must open
  full size (``_static/kvmath.js``), its text then at least :data:`MIN_CSS_PX`, the page
  still not scrolling sideways; it is closed again (the first with the browser's back, the
  others with the close button) and must be back where it was;
* **no sideways page**: the page's scroll width is the screen's, and nothing in the article
  runs past the column unless it sits in a box that scrolls (``sitecheck``'s layout check);
* **boxes that scroll show it**: any box in the article that scrolls sideways (a long
  display equation, a wide table) draws a shadow inside its edge (``_static/kvmath.js`` and
  ``kvmath.css``);
* **a figure with its main control in one screen**: from the top of an interactive figure's
  image to the bottom of its main slider fits in the screen below the sticky header;
* **weight**: the bytes the page loads cold, before any touch, are within its budget
  (``sitecheck.budget``: 2.5 MB a chapter).
"""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tests.browser.sitecheck import _LAYOUT_JS, budget, html_pages, is_local, launch_browser, serve, served_bytes

#: How a phone opens a page: an iPhone 12-15's CSS viewport, at two device pixels per CSS pixel.
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True,
         "has_touch": True}
SCREEN = PHONE["viewport"]["width"]
#: The smallest figure text a reader should meet, CSS px (STYLE.md: 9 CSS px on a 390 px phone).
MIN_CSS_PX = 9.0
#: The PNG text chunk with a figure's smallest text, image pixels (kvbook.plots.MIN_TEXT_KEY).
MIN_TEXT_KEY = "kvbook:min-text-px"

_FIGURES_JS = r"""
() => {
  const imgs = Array.from(document.querySelectorAll(
      'article figure img, article .cell_output img, article .kvmath-interactive-img'));
  // what the theme keeps at the top of the screen (the article's header, sticky on a phone)
  let top = 0;
  for (const h of document.querySelectorAll('.bd-header, .bd-header-article')) {
    const p = getComputedStyle(h).position;
    if (p === 'sticky' || p === 'fixed') top = Math.max(top, h.getBoundingClientRect().height);
  }
  return {header: top, figures: Array.from(new Set(imgs)).map((img, i) => {
    img.dataset.kvmathPhone = String(i);
    const r = img.getBoundingClientRect();
    const block = img.closest('.kvmath-interactive');
    const range = block && block.querySelector('.kvmath-interactive-range');
    const rr = range && range.getBoundingClientRect();
    const fig = img.closest('figure');
    const number = fig && fig.querySelector('.caption-number');
    // the button under the figure (kvmath.js): after a static image's link to its file
    const after = (img.closest('a.image-reference') || img).nextElementSibling;
    const hint = block ? block.querySelector('button.kvmath-enlarge')
                       : after && after.matches('button.kvmath-enlarge') ? after : null;
    return {index: i, src: img.currentSrc || img.src, natural: img.naturalWidth, shown: r.width,
            name: number ? number.textContent.trim() : (img.getAttribute('alt') || '').slice(0, 40),
            interactive: !!block, span: rr ? rr.bottom - r.top : null,
            hint: !!(hint && hint.checkVisibility())};
  })};
}
"""

_OPENED_JS = r"""
() => {
  const layer = document.querySelector('.kvmath-zoom');
  if (!layer) return null;
  const img = layer.querySelector('img');
  const body = layer.querySelector('.kvmath-zoom-body');
  const range = layer.querySelector('.kvmath-interactive-range');
  const r = img ? img.getBoundingClientRect() : null;
  return {shown: r ? r.width : 0, natural: img ? img.naturalWidth : 0,
          pageScroll: document.scrollingElement.scrollWidth,
          bodyHeight: body ? body.clientHeight : 0,
          span: range && r ? range.getBoundingClientRect().bottom - r.top : null,
          href: location.href};
}
"""

_SCROLLERS_JS = r"""
() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const out = [];
  for (const el of article.querySelectorAll('*')) {
    const s = getComputedStyle(el);
    if (!(s.overflowX === 'auto' || s.overflowX === 'scroll')) continue;
    if (el.scrollWidth <= el.clientWidth + 1 || el.clientWidth === 0) continue;
    // the cue: a shadow inside the edge with more beyond it (kvmath.js, kvmath.css), at the start
    el.scrollLeft = 0;
    el.dispatchEvent(new Event('scroll'));
    const cue = getComputedStyle(el).boxShadow.includes('inset');
    out.push({what: el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : ''),
              text: (el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50),
              over: el.scrollWidth - el.clientWidth, cue: cue});
  }
  return out;
}
"""


def min_text_px(src: str, directory: Path, base: str) -> float | None:
    """The ``kvbook:min-text-px`` of the PNG behind ``src`` (a URL of the served book, or a data: URL)."""
    from PIL import Image

    if src.startswith("data:"):
        data = base64.b64decode(src.split(",", 1)[1])
    elif src.startswith(base):
        path = Path(directory) / unquote(urlsplit(src).path).lstrip("/")
        if not path.is_file():
            return None
        data = path.read_bytes()
    else:
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:
            value = getattr(im, "text", {}).get(MIN_TEXT_KEY)
    except Exception:  # not an image we can read: no size recorded
        return None
    return float(value) if value else None


def check_phone_page(context, base: str, rel: str, directory: Path,
                     shots: Path | None = None) -> tuple[list[str], dict]:
    """Open ``rel`` at phone size in ``context``; return (problems, facts).

    ``facts["figures"]``: per figure, its name and the CSS px of its smallest text inline and,
    where it was opened, full size. With ``shots`` (a folder), the screen is saved there for a
    person to look at: at the first figure opened (``phone-<page>-inline.png``) and opened
    (``phone-<page>-opened.png``).
    """
    problems: list[str] = []
    requests: list[str] = []
    page = context.new_page()
    page.on("request", lambda req: requests.append(req.url))
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    figures: list[dict] = []
    try:
        url = base + rel
        page.goto(url, wait_until="load", timeout=30_000)
        try:
            page.wait_for_load_state("networkidle", timeout=5_000)
        except Exception:  # a page still loading after 5 s: counted as far as it got
            pass
        cold = served_bytes(directory, base, list(requests))
        if cold > budget(rel):
            problems.append(f"loads {cold / 1e6:.2f} MB at 390 px, over its {budget(rel) / 1e6:.1f} MB")
        page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        # (a phone lays out a page wider than its screen at that width: innerWidth grows with it)
        wide = page.evaluate("() => document.scrollingElement.scrollWidth")
        if wide > SCREEN + 1:
            problems.append(f"the page scrolls sideways: {wide} px wide on a {SCREEN} px screen")
        problems.extend(f"at 390 px: {o}" for o in page.evaluate(_LAYOUT_JS)["overflow"])
        for box in page.evaluate(_SCROLLERS_JS):
            if not box["cue"]:
                problems.append(f"{box['what']} scrolls {box['over']} px sideways with no sign that it does: "
                                f"{box['text']}")
        listing = page.evaluate(_FIGURES_JS)
        screen = PHONE["viewport"]["height"] - listing["header"]
        closed_by_back = False
        for fig in listing["figures"]:
            name = fig["name"]
            px = min_text_px(fig["src"], directory, base)
            entry = {"name": name, "inline": None, "opened": None}
            figures.append(entry)
            if px is None:
                problems.append(f"{name}: its PNG records no {MIN_TEXT_KEY} ({fig['src'][:80]})")
                continue
            inline = px * fig["shown"] / fig["natural"]
            entry["inline"] = round(inline, 2)
            if fig["interactive"] and fig["span"] is not None and fig["span"] > screen:
                problems.append(f"{name}: image and main slider take {fig['span']:.0f} px, more than the "
                                f"{screen} px a screen shows below the header")
            if inline >= MIN_CSS_PX:
                continue
            if not fig["hint"]:
                problems.append(f"{name}: text {inline:.2f} CSS px and no visible 'Tap to enlarge'")
            shoot = shots is not None and not any(f["opened"] for f in figures)
            stem = Path(rel).stem
            try:
                if shoot:
                    page.locator(f'[data-kvmath-phone="{fig["index"]}"]').scroll_into_view_if_needed()
                    page.screenshot(path=str(Path(shots) / f"phone-{stem}-inline.png"))
                page.locator(f'[data-kvmath-phone="{fig["index"]}"]').tap(timeout=5_000)
                page.wait_for_selector(".kvmath-zoom img", timeout=1_500)
            except Exception:
                problems.append(f"{name}: text {inline:.2f} CSS px, and a tap does not open it full size"
                                + ("" if page.url == url else f" (it went to {page.url[:80]})"))
                if page.url != url:
                    page.goto(url, wait_until="load")
                    page.evaluate(_FIGURES_JS)
                continue
            opened = page.evaluate(_OPENED_JS)
            full = px * opened["shown"] / opened["natural"]
            entry["opened"] = round(full, 2)
            if shoot:
                page.screenshot(path=str(Path(shots) / f"phone-{stem}-opened.png"))
            if full < MIN_CSS_PX:
                problems.append(f"{name}: text {full:.2f} CSS px even when opened full size")
            if opened["pageScroll"] > SCREEN + 1:
                problems.append(f"{name}: the page scrolls sideways behind the opened figure")
            if opened["span"] is not None and opened["span"] > opened["bodyHeight"]:
                problems.append(f"{name}: opened, its image and main slider take {opened['span']:.0f} px, more "
                                f"than the {opened['bodyHeight']} px shown")
            if not closed_by_back:
                page.evaluate("() => history.back()")
                closed_by_back = True
            else:
                page.locator(".kvmath-zoom-close").tap()
            try:
                page.wait_for_selector(".kvmath-zoom", state="detached", timeout=3_000)
            except Exception:
                problems.append(f"{name}: the opened figure does not close")
                continue
            back = page.evaluate("""(i) => { const img = document.querySelector('[data-kvmath-phone="' + i + '"]');
                return !!(img && img.closest('article') && !img.closest('.kvmath-zoom')); }""", fig["index"])
            if not back or page.url != url:
                problems.append(f"{name}: closed, the figure is not back in its page ({page.url[:80]})")
    finally:
        page.close()
    for req in requests:
        if not is_local(req):
            problems.append(f"request leaves localhost: {req}")
    return problems, {"figures": figures}


def check_phone(browser, directory: Path, pages: list[str] | None = None,
                shots: Path | None = None) -> dict[str, dict]:
    """Check ``pages`` (every page by default) of the site in ``directory`` at phone size; {page: report}."""
    directory = Path(directory)
    pages = html_pages(directory) if pages is None else pages
    reports: dict[str, dict] = {}
    with serve(directory) as base:
        for rel in pages:
            context = browser.new_context(**PHONE)
            context.route("**/*", lambda r: r.continue_() if is_local(r.request.url) else r.abort())
            try:
                problems, facts = check_phone_page(context, base, rel, directory, shots)
            finally:
                context.close()
            reports[rel] = {"problems": problems, **facts}
    return reports


def smallest(report: dict, key: str) -> float | None:
    """The smallest figure text on a page, CSS px: ``key`` "inline", or "shown" (opened where it was opened)."""
    sizes = [f["opened"] if key == "shown" and f["opened"] is not None else f["inline"]
             for f in report["figures"] if f["inline"] is not None]
    return min(sizes, default=None)


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "_build/html")
    with launch_browser() as b:
        result = check_phone(b, site, sys.argv[2:] or None)
    bad = 0
    for rel, rep in result.items():
        print(f"{rel:50s} figures {len(rep['figures']):2d}  smallest inline {smallest(rep, 'inline')}  "
              f"as shown {smallest(rep, 'shown')}")
        for p in rep["problems"]:
            print("   ", p)
            bad += 1
    sys.exit(1 if bad else 0)
