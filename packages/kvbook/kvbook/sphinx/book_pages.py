"""Sphinx extension: light, accessible, printable pages for the kvmath book.

What it changes, and why (issue 13, "the published book reads like a book"):

* **No dead widget state.** myst-nb embeds the saved ipywidgets state (a
  ``widget-state+json`` script) in every executed notebook that made a
  widget, and no setting turns that off. No page renders a widget view
  (``nb_mime_priority_overrides`` in ``_config.yml``: our interactive
  figures publish their ``text/html`` form) and none loads the embed
  manager (``nb_ipywidgets_js: {}``), so the state is dropped.
* **No icon font.** pydata-sphinx-theme loads ``fontawesome.js`` (1.5 MB)
  so that *custom* icons can be added, and its stylesheet draws the theme's
  dozen icons with a 156 KB web font. The script is removed, each icon
  (``<i class="fa-solid fa-sun">``) becomes a small inline SVG whose path is
  read from the theme's own font file (fontTools, at build time), and the
  stylesheet's 1 900 unused ``.fa-*:before`` rules (86 KB) are dropped from
  the build's copy. The glyphs the stylesheets still draw with the font
  (admonition titles, external-link marks) come from a subset of it, a few
  KB instead of 156 KB.
* **Lighter figures.** HiDPI PNGs (figures and frames) are re-encoded with
  a 256-colour palette, which line plots need no more than; a file is
  replaced only when that makes it smaller. Their text chunks stay: the alt
  text, and the smallest text size (``kvbook:min-text-px``) that the page's
  script (``_static/kvmath.js``) and the phone test read.
* **Frames on demand.** The frames of a ``kvbook.interactive`` figure are
  base64 PNGs inside the page; they are moved into image files under
  ``_images/kvmath-frames/`` so a reader downloads the default frame with
  the page and the others when first touching the figure.
* **Figures at their CSS size, with alt text.** A notebook image rendered
  for HiDPI (``kvbook.plots``: 2x pixels, recorded in the PNG's dpi) is
  shown at its CSS size (``width`` = pixels x CSS_DPI / dpi, responsive by
  the stylesheet), and an image inside a captioned figure (cell metadata
  ``mystnb: figure: caption``) gets an alt text instead of its file path:
  the PNG's own ``Description``, where the figure's code wrote one
  (:mod:`kvbook.diagrams`: what the picture shows, with its numbers), else
  the caption (``mystnb: image: alt`` in the cell still wins).
* **Chapter numbers in the printed title.** The theme prints its own copy
  of the page title, without the chapter number the page's ``<h1>`` has;
  it gets the number ("1. Why the GPU waits").
* **Search tools only on the search page.** pydata-sphinx-theme loads
  Sphinx's search scripts and the whole search index (over 100 KB, growing
  with the book) on every page, for a search-as-you-type box it has switched
  off (``search_as_you_type = False``): the header's search form submits to
  ``search.html``, which loads them itself. Other pages drop the three tags.
* **The download menu offers the book's PDF, where there is one.** A build
  has no PDF (``make book`` starts from an empty ``_build/html``), so its menu
  keeps the theme's print button; ``scripts/make_pdf.py`` prints the book and
  then calls :func:`link_pdf`, which turns every page's print button into a
  link to the PDF it wrote (``make pdf``: ``_build/html/kvmath-book.pdf``; the
  workshop kit: the PDF beside each kit book). A build whose output folder
  already holds ``kvmath-book.pdf`` links it at once. The menu never links a
  file that is not there.

Nothing here fetches anything: every change is to files in the build.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

from docutils import nodes

PDF_NAME = "kvmath-book.pdf"
FRAMES_DIR = "_images/kvmath-frames"
CSS_DPI = 100  # kvbook.plots.CSS_DPI: CSS pixels per figure inch

_SEARCH_TOOLS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>')
_FONTAWESOME = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')
_PRINT_BUTTON = re.compile(r'<button onclick="window\.print\(\)"(.*?)title="Print to PDF"(.*?)</button>', re.S)
_PDF_TITLE = "The whole book as one PDF"
# the menu's entry once linked (by the build or by link_pdf): its target may be re-pointed
_PDF_LINK = re.compile(r'<a href="[^"]*" download(\s+class="[^"]*btn-download-pdf-button[^"]*"\s+)'
                       r'title="' + _PDF_TITLE + r'"(.*?)</a>', re.S)
_DATA = re.compile(r'(<script type="application/json" class="kvmath-interactive-data">)(.*?)(</script>)', re.S)
_IMG = re.compile(r'(<img class="kvmath-interactive-img" src=")(data:image/png;base64,[^"]+)(")')


# --- no page carries widget state: nothing on it could draw a widget --------------------

def drop_widget_state(app, pagename, templatename, context, doctree) -> None:
    """Runs before myst-nb's own html-page-context handler adds the page's JS files."""
    meta = getattr(app.env, "nb_metadata", {}).get(pagename)
    if meta:
        meta.get("js_files", {}).pop("ipywidgets_state", None)  # myst_nb.core.render's key


# --- figures: CSS size for HiDPI PNGs, alt text from the caption ------------------------

def _png_info(path: Path) -> dict:
    """The PNG's info (``dpi``, text fields such as ``Description``), or {} for a file that is not a PNG we can read."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            return dict(im.info)
    except Exception:  # not a PNG we can read: leave it alone
        return {}


def figures(app, doctree, docname) -> None:
    for image in doctree.findall(nodes.image):
        uri = image.get("uri", "")
        parent = image.parent
        local_png = uri.lower().endswith(".png") and "://" not in uri
        info = {}
        if local_png:
            # after Sphinx's image collector, candidates["*"] is the path from the source dir
            found = (image.get("candidates") or {}).get("*")
            path = Path(app.srcdir) / found if found else Path(app.env.relfn2path(uri, docname)[1])
            info = _png_info(path)
        if not image.get("alt") or image.get("alt") == uri:
            described = " ".join(str(info.get("Description", "")).split())
            captions = [c for c in parent.children if isinstance(c, nodes.caption)] \
                if isinstance(parent, nodes.figure) else []
            if described:  # written by the figure's code (kvbook.diagrams): what the picture shows
                image["alt"] = described
            elif captions:
                image["alt"] = " ".join(captions[0].astext().split())
        if "width" in image or not local_png:
            continue
        dpi = info.get("dpi")
        dpi = float(dpi[0]) if dpi else None
        if dpi and dpi > CSS_DPI * 1.2:
            from PIL import Image

            with Image.open(path) as im:
                width = im.size[0]
            image["width"] = f"{round(width * CSS_DPI / dpi)}px"
            image["classes"] = image.get("classes", []) + ["kvmath-hidpi"]


# --- after the build: frames to files, no icon script, PDF in the menu ---------------------

def _frame_file(outdir: Path, data_url: str) -> str:
    raw = base64.b64decode(data_url.split(",", 1)[1])
    name = hashlib.sha256(raw).hexdigest()[:20] + ".png"
    target = outdir / FRAMES_DIR / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(raw)
    return f"{FRAMES_DIR}/{name}"


_ICON = re.compile(r'<(i|span) class="([^"]*\b(?:fa-solid|fas|fa-brands|fab|fa-regular|far)\b[^"]*)"([^>]*)></\1>')
_FA_RULES = re.compile(r'((?:\.fa-[\w-]+:(?:before|after),?)+)\{content:"\\?([0-9a-f]*)"\}')
_FONTS = {"solid": "fa-solid-900.ttf", "regular": "fa-regular-400.ttf", "brands": "fa-brands-400.ttf"}


class Icons:
    """Inline SVGs for the theme's Font Awesome icons, drawn from its own font files."""

    def __init__(self, outdir: Path) -> None:
        self.static = outdir / "_static"
        css = (self.static / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
        self.codes: dict[str, int] = {}
        for names, code in _FA_RULES.findall(css):
            if code:
                for name in re.findall(r"\.fa-([\w-]+):", names):
                    self.codes.setdefault(name, int(code, 16))
        self._fonts: dict[str, object] = {}
        self._cache: dict[tuple[str, str], str | None] = {}

    def _font(self, style: str):
        if style not in self._fonts:
            from fontTools.ttLib import TTFont

            path = self.static / "vendor" / "fontawesome" / "webfonts" / _FONTS[style]
            self._fonts[style] = TTFont(path) if path.exists() else None
        return self._fonts[style]

    def path(self, style: str, name: str) -> str | None:
        """``(advance width, SVG path)`` of the icon, font units (512 per em, y up)."""
        key = (style, name)
        if key not in self._cache:
            self._cache[key] = None
            font, code = self._font(style), self.codes.get(name)
            if font is not None and code is not None:
                glyph = font.getBestCmap().get(code)
                if glyph is not None:
                    from fontTools.pens.svgPathPen import SVGPathPen

                    glyphs = font.getGlyphSet()
                    pen = SVGPathPen(glyphs)
                    glyphs[glyph].draw(pen)
                    self._cache[key] = (glyphs[glyph].width, pen.getCommands())
        return self._cache[key]

    def svg(self, m: re.Match) -> str:
        classes, attrs = m.group(2), m.group(3)
        words = classes.split()
        style = ("brands" if {"fa-brands", "fab"} & set(words) else
                 "regular" if {"fa-regular", "far"} & set(words) else "solid")
        names = [w[3:] for w in words if w.startswith("fa-") and w[3:] not in
                 ("solid", "regular", "brands", "lg", "sm", "xs", "fw", "2x")]
        for name in names:
            found = self.path(style, name)
            if found:
                width, d = found
                return (f'<svg class="kvmath-icon {" ".join(words)}"{attrs} viewBox="0 -448 {width} 512" '
                        f'aria-hidden="true" focusable="false"><path transform="scale(1,-1)" '
                        f'fill="currentColor" d="{d}"/></svg>')
        return m.group(0)  # an icon we cannot draw stays as it was


def slim_theme_css(outdir: Path) -> None:
    """Drop the icon font's ``.fa-*:before`` rules: no page uses the font for icons any more."""
    css = outdir / "_static" / "styles" / "pydata-sphinx-theme.css"
    if css.exists():
        text = css.read_text(encoding="utf-8")
        slim = _FA_RULES.sub("", text)
        if slim != text:
            css.write_text(slim, encoding="utf-8")


_GLYPH = re.compile(r'\\([ef][0-9a-f]{3})\b')
_FONT_SRC = re.compile(r'src:url\(\.\./vendor/fontawesome/webfonts/(fa-(?:solid-900|regular-400|brands-400))\.woff2\) '
                       r'format\("woff2"\),url\(\.\./vendor/fontawesome/webfonts/\1\.ttf\) format\("truetype"\)')


def css_glyphs(css: str) -> set[int]:
    """The icon-font code points a stylesheet draws: escaped (``"\\f107"``) or written out as the character.

    pydata-sphinx-theme's minified stylesheet writes its icons as literal
    private-use characters (``--pst-icon-github``: U+F09B itself; the
    admonition and version marks alike), so an escape-only reading misses
    them all and their subsets come out empty.
    """
    return {int(code, 16) for code in _GLYPH.findall(css)} | {ord(c) for c in _PRIVATE_USE.findall(css)}


_PRIVATE_USE = re.compile("[\ue000-\uf8ff]")


def subset_icon_fonts(outdir: Path) -> None:
    """Point the theme's icon @font-faces at subsets holding only the glyphs its CSS still uses."""
    from fontTools import subset

    static = outdir / "_static"
    theme = static / "styles" / "pydata-sphinx-theme.css"
    if not theme.exists():
        return
    used = set()
    for css in static.rglob("*.css"):
        used |= css_glyphs(css.read_text(encoding="utf-8", errors="replace"))
    webfonts = static / "vendor" / "fontawesome" / "webfonts"

    def repl(m: re.Match) -> str:
        name = m.group(1)
        source, target = webfonts / f"{name}.ttf", webfonts / f"kvmath-{name}-subset.ttf"
        if not source.exists():
            return m.group(0)
        options = subset.Options()
        options.layout_features = []
        font = subset.load_font(str(source), options)
        keep = used & set(font.getBestCmap())
        if not keep:
            keep = {0x20}
        sub = subset.Subsetter(options)
        sub.populate(unicodes=sorted(keep))
        sub.subset(font)
        subset.save_font(font, str(target), options)
        return f'src:url(../vendor/fontawesome/webfonts/{target.name}) format("truetype")'

    text = theme.read_text(encoding="utf-8")
    new = _FONT_SRC.sub(repl, text)
    if new != text:
        theme.write_text(new, encoding="utf-8")


def palette_png(data: bytes, *, hidpi_only: bool = True) -> bytes | None:
    """``data`` (a PNG) re-encoded with 256 colours, or None where that is not smaller or not wanted.

    Only HiDPI line plots (dpi >= 150) qualify unless ``hidpi_only`` is False
    (interactive frames); the dpi is kept, so the page still shows the image
    at its CSS size, and so are its text chunks (alt text, smallest text size).
    """
    import io

    from PIL import Image, PngImagePlugin

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            dpi = (im.info.get("dpi") or (0, 0))[0]
            if im.mode not in ("RGB", "RGBA") or (hidpi_only and dpi < 150):
                return None
            rgb = im.convert("RGB") if im.mode == "RGBA" and im.getextrema()[3][0] == 255 else im
            small = rgb.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            # the text chunks stay: alt text (Description), the smallest text (kvbook.plots.MIN_TEXT_KEY)
            text = PngImagePlugin.PngInfo()
            for key, value in getattr(im, "text", {}).items():
                text.add_text(key, value)
            buf = io.BytesIO()
            small.save(buf, format="png", optimize=True, dpi=im.info.get("dpi") or (72, 72), pnginfo=text)
    except Exception:  # leave any image we cannot read as it is
        return None
    return buf.getvalue() if buf.tell() < len(data) else None


def palette_pngs(outdir: Path) -> None:
    """Re-encode HiDPI PNGs (dpi >= 150, and every interactive frame) with 256 colours when smaller."""
    for path in list((outdir / "_images").rglob("*.png")):
        frame = FRAMES_DIR.split("/")[-1] in path.parts
        smaller = palette_png(path.read_bytes(), hidpi_only=not frame)
        if smaller is not None:
            path.write_bytes(smaller)


_CURRENT = re.compile(r'<li class="toctree-l1 current active[^>]*><a class="current reference internal" '
                      r'href="#">(\d+)\. ')


_PRINT_H1 = re.compile(r'(<div id="jb-print-docs-body" class="onlyprint">\s*<h1>)(?!<span)')


def pdf_link(text: str, href: str) -> str:
    """The page with its download menu's print button (or PDF link) linking ``href``."""
    def link(m: re.Match) -> str:
        return f'<a href="{href}" download{m.group(1)}title="{_PDF_TITLE}"{m.group(2)}</a>'

    return _PDF_LINK.sub(link, _PRINT_BUTTON.sub(link, text))


def link_pdf(outdir: Path, pdf: Path) -> int:
    """Point every page's download menu of the build in ``outdir`` at ``pdf`` (which must exist).

    Each page links it by its path relative to the page, so the PDF may lie in the
    build (``make pdf``) or beside it (the workshop kit's books). Returns the number
    of pages changed.
    """
    import os

    outdir, pdf = Path(outdir).resolve(), Path(pdf).resolve()
    if not pdf.is_file():
        raise FileNotFoundError(f"{pdf}: no PDF to link")
    changed = 0
    for path in _pages(outdir):
        text = path.read_text(encoding="utf-8")
        new = pdf_link(text, Path(os.path.relpath(pdf, path.parent)).as_posix())
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def _pages(outdir: Path):
    for path in sorted(outdir.rglob("*.html")):
        if path.relative_to(outdir).parts[0] not in ("_static", "_vendor", "_sources", "_images"):
            yield path


def rewrite_page(text: str, outdir: Path, rel_root: str, icons: Icons | None = None, search_page: bool = False,
                 pdf: bool = False) -> str:
    """The page's HTML after the changes above (idempotent)."""
    text = _FONTAWESOME.sub("", text)
    if not search_page:
        text = _SEARCH_TOOLS.sub("", text)
    number = _CURRENT.search(text)
    if number:  # the print title (the page's own h1 is numbered by Sphinx)
        text = _PRINT_H1.sub(rf'\1<span class="section-number">{number.group(1)}. </span>', text, count=1)
    if icons is not None:
        text = _ICON.sub(icons.svg, text)
    if pdf:
        text = pdf_link(text, rel_root + PDF_NAME)

    def frames(m: re.Match) -> str:
        data = json.loads(m.group(2))
        data["frames"] = [rel_root + _frame_file(outdir, f) if f.startswith("data:") else f
                          for f in data["frames"]]
        body = json.dumps(data).replace("</", "<\\/")
        return m.group(1) + body + m.group(3)

    text = _DATA.sub(frames, text)
    text = _IMG.sub(lambda m: m.group(1) + rel_root + _frame_file(outdir, m.group(2)) + m.group(3),
                    text)
    return text


def postprocess(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    try:
        icons = Icons(outdir)
    except OSError:  # another theme: leave icons alone
        icons = None
    pdf = (outdir / PDF_NAME).is_file()
    for path in _pages(outdir):
        rel = path.relative_to(outdir)
        rel_root = "../" * (len(rel.parts) - 1)
        text = path.read_text(encoding="utf-8")
        new = rewrite_page(text, outdir, rel_root, icons, search_page=rel.as_posix() == "search.html", pdf=pdf)
        if new != text:
            path.write_text(new, encoding="utf-8")
    if icons is not None:
        slim_theme_css(outdir)
        subset_icon_fonts(outdir)
    palette_pngs(outdir)


def setup(app):
    app.connect("html-page-context", drop_widget_state, priority=400)
    app.connect("doctree-resolved", figures)
    app.connect("build-finished", postprocess)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
