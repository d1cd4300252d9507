"""Sphinx extension: serve the book's browser assets from the build itself.

The published HTML must render with no network. MathJax 3 (with its woff
fonts) comes from npm (``package.json`` / ``package-lock.json``, installed by
``npm ci`` into ``node_modules/``, which git ignores). After an HTML build
this extension copies the files pages need into ``_build/html/_vendor/``;
``_config.yml`` points ``mathjax_path`` there. The assets are kept out of
``_static/`` on purpose: Jupyter Book would add every .js and .css found
there to every page. (No page loads the ipywidgets embed manager: published
figures are their ``text/html`` form, see ``nb_ipywidgets_js`` in
``_config.yml``.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

# (source under node_modules, destination under _build/html/_vendor, glob patterns)
ASSETS = [
    ("mathjax/es5", "mathjax", ["tex-chtml.js", "input/**/*", "output/**/*", "ui/**/*",
                                 "a11y/**/*", "sre/**/*", "adaptors/**/*"]),
]


def _node_modules(app) -> Path:
    return Path(app.confdir) / "node_modules"


def check_assets(app) -> None:
    root = _node_modules(app)
    missing = [src for src, _, _ in ASSETS if not (root / src).is_dir()]
    if missing:
        raise ExtensionError(
            f"offline assets missing under {root} ({', '.join(missing)}): run `npm ci` "
            "in the repository root (or `make book`, which does it)")


def copy_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    root = _node_modules(app)
    vendor = Path(app.outdir) / "_vendor"
    for src, dest, patterns in ASSETS:
        base = root / src
        for pattern in patterns:
            for path in base.glob(pattern):
                if path.is_file():
                    target = vendor / dest / path.relative_to(base)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if not target.exists() or target.stat().st_mtime < path.stat().st_mtime:
                        shutil.copy2(path, target)


def setup(app):
    app.connect("builder-inited", check_assets)
    app.connect("build-finished", copy_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
