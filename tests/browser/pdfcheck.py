"""Read a printed book's PDF the way a reader would judge its pages, with pypdf alone.

For each page: where its text and images lie (from the content stream: text
positions with their font size, image placements), how much of the text area they
leave blank, and whether the page draws anything but holds neither text nor an
image (an empty frame); for the file: its bookmarks, page labels, links (to a
web address, or to a named destination in the file) and named destinations.

    python tests/browser/pdfcheck.py BOOK.pdf     # a summary, as quoted in the PR notes

Used by tests/browser/test_pdf.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

MM = 72 / 25.4


def _page_margins() -> dict[str, float]:
    """The top and bottom margins (points) of the book's pages (scripts/make_pdf.css, read by make_pdf)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from make_pdf import page_margins_mm

    top, _, bottom, _ = page_margins_mm()
    return {"top": top * MM, "bottom": bottom * MM}


#: the text area the book's pages print in (the page number sits in the bottom margin)
MARGINS_PT = _page_margins()
_PAINT = {b"f", b"F", b"f*", b"S", b"s", b"B", b"B*", b"b", b"b*"}


def _mul(a, b):
    """The product a x b of two PDF matrices [a b c d e f]."""
    return [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
            a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3],
            a[4] * b[0] + a[5] * b[2] + b[4], a[4] * b[1] + a[5] * b[3] + b[5]]


@dataclass
class PageBoxes:
    height: float
    text: list[tuple[float, float]]     # vertical extents (y0, y1) of each text run, points, y up
    images: list[tuple[float, float]]   # vertical extents of each image drawn
    painted: int                        # path painting operations (frames, rules, backgrounds)

    def blank_fraction(self) -> float:
        """The share of the text area's height that no line of text or image covers.

        Each text run counts from its descent to its ascent, grown by 0.4 of its font
        size each way (the gap between two lines of a paragraph); images as drawn.
        """
        top, bottom = self.height - MARGINS_PT["top"], MARGINS_PT["bottom"]
        spans = sorted((max(bottom, lo), min(top, hi)) for lo, hi in self.text + self.images
                       if hi > bottom and lo < top)
        covered, end = 0.0, bottom
        for lo, hi in spans:
            if hi > end:
                covered += hi - max(lo, end)
                end = hi
        return 1 - covered / (top - bottom)

    @property
    def empty_frame(self) -> bool:
        """Something drawn (a box, a rule) and no text or image inside the text area."""
        return self.painted > 0 and self.blank_fraction() >= 0.999


def page_boxes(reader, page) -> PageBoxes:
    from pypdf.generic import ContentStream

    text, images = [], []
    painted = 0

    def run(content, resources, ctm):
        nonlocal painted
        stack, tm, tlm, size, leading = [], [1, 0, 0, 1, 0, 0], [1, 0, 0, 1, 0, 0], 0.0, 0.0
        xobjects = (resources or {}).get("/XObject") or {}
        ops = content if isinstance(content, ContentStream) else ContentStream(content, reader)
        for args, op in ops.operations:
            if op == b"q":
                stack.append(ctm)
            elif op == b"Q":
                ctm = stack.pop() if stack else ctm
            elif op == b"cm":
                ctm = _mul([float(a) for a in args], ctm)
            elif op == b"BT":
                tm, tlm = [1, 0, 0, 1, 0, 0], [1, 0, 0, 1, 0, 0]
            elif op == b"Tf":
                size = float(args[1])
            elif op == b"TL":
                leading = float(args[0])
            elif op == b"Tm":
                tm = tlm = [float(a) for a in args]
            elif op in (b"Td", b"TD"):
                tm = tlm = _mul([1, 0, 0, 1, float(args[0]), float(args[1])], tlm)
                if op == b"TD":
                    leading = -float(args[1])
            elif op in (b"T*", b"'", b'"'):
                tm = tlm = _mul([1, 0, 0, 1, 0, -leading], tlm)
            if op in (b"Tj", b"TJ", b"'", b'"'):
                m = _mul(tm, ctm)
                y, up = m[5], abs(m[3]) * size
                text.append((y - 0.6 * up, y + 1.2 * up))
            elif op in _PAINT:
                painted += 1
            elif op == b"Do":
                xo = xobjects.get(args[0])
                xo = xo.get_object() if xo is not None else None
                if xo is None:
                    continue
                if xo.get("/Subtype") == "/Image":
                    ys = [ctm[1] * x + ctm[3] * y + ctm[5] for x, y in ((0, 0), (1, 0), (0, 1), (1, 1))]
                    images.append((min(ys), max(ys)))
                elif xo.get("/Subtype") == "/Form":
                    matrix = [float(v) for v in xo.get("/Matrix", [1, 0, 0, 1, 0, 0])]
                    run(xo, xo.get("/Resources") or resources, _mul(matrix, ctm))

    contents = page.get_contents()
    if contents is not None:
        run(contents, page.get("/Resources"), [1, 0, 0, 1, 0, 0])
    return PageBoxes(float(page.mediabox.height), text, images, painted)


def outline_titles(reader) -> list[tuple[int, str, int]]:
    """(depth, title, page index) of every bookmark, in order."""
    out = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                out.append((depth, item.title, reader.get_destination_page_number(item)))

    walk(reader.outline, 0)
    return out


def links(reader) -> list[tuple[int, str, str]]:
    """(page index, kind, target) of every link: kind 'uri' (a web address) or 'dest' (a name in the file)."""
    out = []
    for i, page in enumerate(reader.pages):
        for annot in page.get("/Annots") or []:
            a = annot.get_object()
            if a.get("/Subtype") != "/Link":
                continue
            action = a.get("/A")
            action = action.get_object() if action is not None else None
            if action is not None and action.get("/S") == "/URI":
                out.append((i, "uri", str(action["/URI"])))
            elif a.get("/Dest") is not None:
                out.append((i, "dest", str(a["/Dest"]).lstrip("/")))
            elif action is not None and action.get("/S") == "/GoTo":
                out.append((i, "dest", str(action["/D"]).lstrip("/")))
            else:
                out.append((i, "other", str(action)))
    return out


def summary(pdf: Path) -> dict:
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    boxes = [page_boxes(reader, p) for p in reader.pages]
    found = links(reader)
    return {
        "pages": len(reader.pages),
        "MB": round(pdf.stat().st_size / 1e6, 1),
        "over 60% blank": sum(b.blank_fraction() > 0.6 for b in boxes),
        "empty frame only": sum(b.empty_frame for b in boxes),
        "no text or image": sum(b.blank_fraction() >= 0.999 for b in boxes),
        "bookmarks": len(outline_titles(reader)),
        "page labels": "/PageLabels" in reader.trailer["/Root"],
        "links": len(found),
        "links to this machine": sum(k == "uri" and any(h in t for h in ("//127.0.0.1", "//localhost"))
                                     for _, k, t in found),
        "links inside the file": sum(k == "dest" for _, k, _ in found),
    }


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(name, summary(Path(name)))
