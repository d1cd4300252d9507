"""Python side of the page's live figures (loaded into Pyodide by worker.js).

The same helpers run natively in ``tests/browser/test_live_figures.py``, which renders
the same values with CPython and compares the figures' texts (the readouts,
e.g. "B = 64: 12.3 ms") with what the browser rendered.
"""

from __future__ import annotations

import json

#: namespace the chapter's figure code ran in
NAMESPACE: dict = {}


def run(code: str, filename: str = "<figures>") -> list:
    """Run the page's figure code (``_figures/<page>.py``); return its figures in display order."""
    NAMESPACE.clear()
    NAMESPACE["__name__"] = "__main__"
    exec(compile(code, filename, "exec"), NAMESPACE)
    return NAMESPACE["_kvmath_figures"]


def figures() -> list:
    return NAMESPACE.get("_kvmath_figures", [])


def specs() -> str:
    """Each figure's controls as JSON, read from its own Slider/Choice objects."""
    from kvbook.interactive import Choice

    out = []
    for f in figures():
        out.append({"main": f.main, "controls": [
            {"name": n, "label": c.label or n, "kind": "choice" if isinstance(c, Choice) else "slider",
             "labels": [c.fmt(v) for v in c.values], "default": c.values.index(c.default)}
            for n, c in f.controls.items()]})
    return json.dumps(out)


def texts(fig) -> list[str]:
    """The figure's own words: figure and axes texts, titles, legends (not tick labels)."""
    out = [t.get_text() for t in fig.texts if t.get_visible()]
    for ax in fig.axes:
        out += [ax.get_title(loc) for loc in ("left", "center", "right")]
        out += [t.get_text() for t in ax.texts if t.get_visible()]
        legend = ax.get_legend()
        if legend is not None:
            out += [t.get_text() for t in legend.get_texts()]
    return [t for t in out if t]


def render(index: int, positions: str):
    """Render figure ``index`` at ``positions`` (JSON {control: position}); return (PNG, texts JSON)."""
    f = figures()[index]
    values = {name: f.controls[name].values[int(k)] for name, k in json.loads(positions).items()}
    png = f.render(fast=True, **values)
    return png, json.dumps(texts(f.figure))
