"""The notebooks live in the room's browsers: a JupyterLite site (issue 15 item 7).

``make lite`` (part of ``make workshop``) assembles ``_build/workshop/lite/``: every
notebook of ``notebooks/`` runnable, editable and re-runnable in the browser with
kvmath, numpy and matplotlib, nothing fetched from outside.

- **Its own environment.** ``jupyter lite build`` runs from ``.venv-lite``, made from
  the pinned ``requirements-lite.txt`` (jupyterlite-core 0.6.4,
  jupyterlite-pyodide-kernel 0.6.1, jupyter_server and their closure), never from the
  book's ``.venv``. This script itself runs in the book's environment (it builds
  kvmath's and kvbook's wheels with the book's pinned setuptools).
- **The same vendored, checked Python.** Pyodide 0.27.7's core and every wheel the
  kernel loads from the lock (numpy, matplotlib, and the kernel's own micropip, ssl,
  sqlite3, jedi, ipython with their closure) come from ``packages/kvbook/kvbook/live/vendor_pyodide.py
  --packages numpy matplotlib kernel`` into ``.cache/pyodide-0.27.7-lite/``: each file
  checked against the sha256 of the official ``pyodide-lock.json``. They go to the
  lite dir's ``static/pyodide/``, and ``pyodideUrl`` points there.
- **piplite wheels**: kvmath's and kvbook's own (built from the tree), ``comm`` (the kernel
  installs it on start-up and the lock has none; pinned with its hash in
  ``requirements-lite-browser.txt``), ipywidgets 8.1.7 (live sliders; its lab
  extension, jupyterlab_widgets 3.0.15, is in ``requirements-lite.txt``), and ``kvmath-lite-files``,
  the repository files the chapters read (see ``FILES_MODULE``; ``kvbook`` imports it in the
  browser). PyPI is off (``disablePyPIFallback``). kvmath, kvbook, the files, numpy and matplotlib are loaded
  when the kernel starts (``loadPyodideOptions.packages``): the kernel's import scan
  only knows the lock's packages, and the notebooks must run unedited.
- **The contents**: the learner's copies of the notebooks (no solution and no answer the
  key records: ``workshop_build.learner_notebook``; no facilitator's note) with the lite
  kernel's kernelspec (``python``: no "Select kernel" dialog) and their outputs cleared,
  plus the files they read from the repository (``tests/data/hf_configs``).
- **MyST and inline expressions.** ``requirements-lite.txt`` has ``jupyterlab-myst``,
  whose lab extension renders the Markdown cells' MyST (directives, roles, admonitions,
  exercises, dropdowns, equation labels) and their inline expressions
  (``{eval}`...` ``). The Pyodide kernel does not answer ``user_expressions``, so each
  copy is run once here in a local kernel (``kvbook.inline.fill``) and ships with every
  Markdown cell's results in its metadata: the numbers are on the page before anything
  runs; a copy that does not run from top to bottom fails the build.
  :func:`check_notebooks` fails unless every ``{eval}`` has its result and no solution
  is left.
- **Links into the learner book.** Cross-references and citations, which jupyterlab-myst
  cannot resolve from one notebook, become links to the learner book served beside the
  site, relative to the page, and exercises and equations carry the book's numbers, read
  from that build (:mod:`kvbook.workshop.book_links`; so ``make lite`` builds the learner
  book first).
- **Checked output.** ``jupyter lite build`` takes its lite dir from the working
  directory unless ``--lite-dir`` is given: run from anywhere else, it reads neither
  the lite dir's ``jupyter-lite.json`` nor its ``static/pyodide/``, and writes an
  output whose kernel has no ``pyodideUrl`` and no ``disablePyPIFallback``, so the
  kernel falls back to cdn.jsdelivr.net (reproduced: the same build from ``/`` and
  from the lite dir). This script passes ``--lite-dir``, runs in it, starts from an
  empty lite dir and output dir every time, and :func:`check_site` fails unless the
  output's configuration points every URL at the site itself and the vendored files
  are the lock's.

Usage::

    python -m kvbook.workshop.workshop_lite                 # -> _build/workshop/learner/lite
    python -m kvbook.workshop.workshop_lite --check-only    # check an existing site
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from kvbook import cell_view, inline
from kvbook.live import vendor_pyodide
from kvbook.repo import ROOT
from kvbook.workshop import book_links, workshop_build

OUT = ROOT / "_build" / "workshop" / "learner" / "lite"
SRC = ROOT / "_build" / "workshop-lite-src"
CACHE = ROOT / ".cache" / f"pyodide-{vendor_pyodide.VERSION}-lite"
BROWSER_WHEELS = ROOT / ".cache" / "lite-wheels"
BROWSER_REQUIREMENTS = ROOT / "requirements-lite-browser.txt"
LITE_VENV = ROOT / ".venv-lite"
#: Repository files and folders the notebooks read (``../tests/data/...``; tests/book/test_workshop.py checks that
#: every path a chapter opens is here).
DATA = ["tests/data/hf_configs", "tests/data/serving_sweep.csv"]
KERNEL_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
# the kernel's worker script lies in <site>/extensions/@jupyterlite/pyodide-kernel-extension/static/;
# Pyodide resolves a wheel URL in loadPyodideOptions.packages against it
WORKER_TO_SITE = "../../../../"
KERNELSPEC = {"display_name": "Python (Pyodide)", "language": "python", "name": "python"}

FILES_MODULE = '''"""The repository files the kvmath chapters read, for the JupyterLite site of the workshop kit.

Served to a room without service workers, the kernel cannot see the site's files, so
``kvbook`` imports this module when it runs in the browser, and it writes its copies
where the notebooks look (``../tests/data/...``), unless they are already there (on
localhost, with the drive mounted, they are).
"""

import os as _os


def _place_repository_files():
    here = _os.path.join(_os.path.dirname(__file__), "_repo")
    for folder, _dirs, files in _os.walk(here):
        for name in files:
            rel = _os.path.relpath(_os.path.join(folder, name), here)
            target = _os.path.join("..", rel)
            if not _os.path.exists(target):
                try:
                    _os.makedirs(_os.path.dirname(target), exist_ok=True)
                    with open(_os.path.join(folder, name), "rb") as src, open(target, "wb") as dst:
                        dst.write(src.read())
                except OSError:
                    pass


_place_repository_files()
'''


class LiteError(RuntimeError):
    pass


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def data_files() -> list[Path]:
    """Every file of :data:`DATA` (a folder's files, or the file itself), sorted."""
    return sorted(p for rel in DATA for p in ([ROOT / rel] if (ROOT / rel).is_file() else (ROOT / rel).rglob("*"))
                  if p.is_file())


def copy_data_files(dest: Path) -> None:
    """Copy every file of :data:`DATA` to the same place under ``dest``, where a copy of the chapters reads it."""
    for path in data_files():
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def build_files_wheel(out_dir: Path, version: str = "0.1.0") -> Path:
    """A pure wheel ``kvmath_lite_files``: the ``DATA`` files and the module that places them (deterministic)."""
    dist = f"kvmath_lite_files-{version}.dist-info"
    files = {
        "kvmath_lite_files/__init__.py": FILES_MODULE.encode(),
        **{f"kvmath_lite_files/_repo/{p.relative_to(ROOT).as_posix()}": p.read_bytes()
           for p in data_files()},
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: kvmath-lite-files\nVersion: {version}\n"
                             "Summary: the repository files the kvmath chapters read, for the workshop's JupyterLite site\n"
                             "License: MIT\n").encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kvmath workshop_lite\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
        f"{dist}/top_level.txt": b"kvmath_lite_files\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"kvmath_lite_files-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return target


def browser_wheels(python: str = sys.executable) -> list[Path]:
    """The pinned pure wheels of requirements-lite-browser.txt (downloaded once, hash-checked by pip)."""
    names = [line.split("==")[0].strip() for line in BROWSER_REQUIREMENTS.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    found = {n: sorted(BROWSER_WHEELS.glob(f"{n.replace('-', '_')}-*.whl")) for n in names}
    if not all(found.values()):
        BROWSER_WHEELS.mkdir(parents=True, exist_ok=True)
        cmd = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
               "--require-hashes", "-r", str(BROWSER_REQUIREMENTS), "-d", str(BROWSER_WHEELS)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise LiteError("could not download requirements-lite-browser.txt:\n" + proc.stderr[-2000:])
        found = {n: sorted(BROWSER_WHEELS.glob(f"{n.replace('-', '_')}-*.whl")) for n in names}
    return [paths[-1] for paths in found.values()]


def lite_notebook(nb: dict) -> dict:
    """A notebook for the lite site: the lite kernel's kernelspec, outputs cleared."""
    nb = json.loads(json.dumps(nb))
    nb.setdefault("metadata", {})["kernelspec"] = dict(KERNELSPEC)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb




def _fill(path: str) -> int:
    return inline.fill(Path(path))


def learner_contents(contents: Path, names: list[str] | None = None, jobs: int | None = None,
                     book: book_links.BuiltBook | None = None) -> list[Path]:
    """Write the learner's lite copies of the notebooks (all, or ``names``) and the files they read.

    Each copy is run once in a local kernel and its Markdown cells' inline expressions
    filled (``kvbook.inline.fill``), ``jobs`` at a time (default: two, or one core's worth).
    With ``book`` (the learner book the kit serves beside them), its cross-references and
    citations become links to that book (:mod:`kvbook.workshop.book_links`).
    """
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if names is not None:
        paths = [p for p in paths if p.stem in names]
    (contents / "notebooks").mkdir(parents=True, exist_ok=True)
    copy_data_files(contents)
    out = []
    for path in paths:
        nb = lite_notebook(workshop_build.learner_notebook(json.loads(path.read_text())))
        if book is not None:
            nb = book.rewrite_notebook(nb, path.stem)
        target = contents / "notebooks" / path.name
        target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        out.append(target)
    jobs = jobs or max(1, min(2, (os.cpu_count() or 1) - 1))
    if jobs == 1 or len(out) == 1:
        for target in out:
            _fill(str(target))
    else:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(_fill, [str(t) for t in out]))
    return out


def check_notebooks(folder: Path, book: book_links.BuiltBook | None = None) -> list[str]:
    """Problems of the lite copies in ``folder``: a solution left, an ``{eval}`` without its result, code the book
    hides shown open, and with
    ``book``, a cross-reference or citation that is not a link to it."""
    problems = []
    for path in sorted(Path(folder).glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            src = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                if "{solution" in src:
                    problems.append(f"{path.name}, cell {i}: a solution")
                if re.search(r"Facilitator's note", src):
                    problems.append(f"{path.name}, cell {i}: a facilitator's note")
                if book is not None:
                    problems += [f"{path.name}, cell {i}: {role} is not a link to the learner book"
                                 for role in book_links.left_roles(src, "notebooks/" + path.stem, book)]
                    problems += [f"{path.name}, cell {i}: a link to {href}, not beside the site ({book.base}...)"
                                 for href in re.findall(r'<a href="([^"]*)" target="_blank"', src)
                                 if not href.startswith(book.base)]
                want = inline.expressions(src)
                have = {e["expression"]: e["result"] for e in cell.get("metadata", {}).get("user_expressions", [])}
                for expr in want:
                    if expr not in have:
                        problems.append(f"{path.name}, cell {i}: {{eval}}`{expr}` has no stored result")
                    elif have[expr].get("status") != "ok" or "text/plain" not in have[expr].get("data", {}):
                        problems.append(f"{path.name}, cell {i}: {{eval}}`{expr}`'s stored result is not ok")
            kvbook_meta = cell.get("metadata", {}).get("kvbook", {})
            if "answers" in kvbook_meta or "answer_values" in kvbook_meta:
                problems.append(f"{path.name}, cell {i}: an answer the key records")
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                problems.append(f"{path.name}, cell {i}: outputs left")
            if cell["cell_type"] == "code" and cell.get("metadata", {}).get("jupyter", {}) != cell_view.collapsed_view(cell):
                problems.append(f"{path.name}, cell {i}: not collapsed as the book hides it")
    return problems


def prepare(src: Path = SRC, cache: Path = CACHE) -> tuple[Path, list[Path]]:
    """A fresh lite dir (config, static/pyodide, contents) and the piplite wheels."""
    if vendor_pyodide.vendored(cache) is None:
        vendor_pyodide.vendor(cache, packages=(*vendor_pyodide.PACKAGES, *vendor_pyodide.KERNEL_PACKAGES))
    if src.exists():
        shutil.rmtree(src)
    (src / "static").mkdir(parents=True)
    shutil.copytree(cache, src / "static" / "pyodide")
    contents = src / "contents"
    book = book_links.BuiltBook.from_build(workshop_build.SRC / "learner" / "_build", base=book_links.LITE_BASE)
    notebooks = learner_contents(contents, book=book)
    problems = check_notebooks(contents / "notebooks", book)
    if problems:
        raise LiteError("the lite notebooks are not the learner's, filled:\n  " + "\n  ".join(problems[:20]))
    wheels = [vendor_pyodide.build_wheel(src / "wheels", "kvmath"), vendor_pyodide.build_wheel(src / "wheels", "kvbook")]
    wheels.append(build_files_wheel(src / "wheels"))
    wheels += [shutil.copy2(w, src / "wheels" / w.name) for w in browser_wheels()]
    wheels = [Path(w) for w in wheels]
    # jupyterlab_widgets is the front end's; the kernel needs kvmath, kvbook, the files, comm, ipywidgets
    preload = ["numpy", "matplotlib"] + [WORKER_TO_SITE + "pypi/" + w.name for w in wheels
                                         if not w.name.startswith("jupyterlab_widgets")]
    config = {"jupyter-lite-schema-version": 0, "jupyter-config-data": {
        "appName": "kvmath workshop (JupyterLite)",
        # every cell stays rendered: the browser's find reaches the whole notebook, and a
        # figure's controls scrolled back into view work at once (JupyterLab otherwise
        # skips laying out off-screen cells)
        "settingsOverrides": {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}},
        "litePluginSettings": {KERNEL_PLUGIN: {
            "pyodideUrl": "./static/pyodide/pyodide.js",
            "disablePyPIFallback": True,
            "loadPyodideOptions": {"packages": preload},
        }}}}
    (src / "jupyter-lite.json").write_text(json.dumps(config, indent=1) + "\n")
    return src, wheels


def build(out: Path = OUT, src: Path = SRC, lite_venv: Path = LITE_VENV) -> Path:
    out = Path(out).resolve()
    jupyter = lite_venv / "bin" / "jupyter"
    if not jupyter.exists():
        raise LiteError(f"{jupyter} missing: make lite-env (a venv from requirements-lite.txt)")
    src, wheels = prepare(src)
    if out.exists():
        shutil.rmtree(out)
    cmd = [str(jupyter), "lite", "build", "--lite-dir", str(src), "--contents", str(src / "contents"),
           "--output-dir", str(out), "--no-sourcemaps"]
    for wheel in wheels:
        cmd += ["--piplite-wheels", str(wheel)]
    proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
    if proc.returncode:
        raise LiteError("jupyter lite build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    check_site(out)
    return out


def _local(url: str) -> bool:
    return not url.startswith(("http:", "https:", "//"))


def check_site(out: Path = OUT) -> dict:
    """Fail unless the built site's kernel loads everything from the site itself."""
    problems = []
    for cfg in [out / "jupyter-lite.json", *sorted(out.glob("*/jupyter-lite.json"))]:
        data = json.loads(cfg.read_text()).get("jupyter-config-data", {})
        settings = data.get("litePluginSettings", {}).get(KERNEL_PLUGIN)
        if settings is None:
            if cfg.parent == out:
                problems.append(f"{cfg}: no {KERNEL_PLUGIN} settings")
            continue
        url = settings.get("pyodideUrl")
        if cfg.parent == out and url != "./static/pyodide/pyodide.js":
            problems.append(f"{cfg}: pyodideUrl is {url!r}, not the vendored ./static/pyodide/pyodide.js")
        if url is not None and not _local(url):
            problems.append(f"{cfg}: pyodideUrl {url!r} is not local")
        if cfg.parent == out and settings.get("disablePyPIFallback") is not True:
            problems.append(f"{cfg}: disablePyPIFallback is not true")
        for u in settings.get("pipliteUrls", []) + settings.get("loadPyodideOptions", {}).get("packages", []):
            if not _local(u):
                problems.append(f"{cfg}: {u!r} is not local")
    lock = out / "static" / "pyodide" / "pyodide-lock.json"
    official = vendor_pyodide.NPM_DIR / "pyodide-lock.json"
    if not (out / "static" / "pyodide" / "pyodide.js").is_file() or not lock.is_file():
        problems.append("static/pyodide/ lacks pyodide.js or pyodide-lock.json")
    elif official.is_file() and lock.read_bytes() != official.read_bytes():
        problems.append("static/pyodide/pyodide-lock.json differs from the official lock")
    else:
        entries = json.loads(lock.read_text())["packages"]
        for name in vendor_pyodide.closure(json.loads(lock.read_text()),
                                           (*vendor_pyodide.PACKAGES, *vendor_pyodide.KERNEL_PACKAGES)):
            f = out / "static" / "pyodide" / entries[name]["file_name"]
            if not f.is_file() or vendor_pyodide.sha256(f.read_bytes()) != entries[name]["sha256"]:
                problems.append(f"static/pyodide/{entries[name]['file_name']} missing or not the lock's")
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if not (out / "files" / "notebooks" / nb.name).is_file():
            problems.append(f"files/notebooks/{nb.name} missing")
    problems += check_notebooks(out / "files" / "notebooks")
    if not list((out / "extensions").glob("jupyterlab-myst/package.json")):
        problems.append("extensions/jupyterlab-myst missing: requirements-lite.txt's jupyterlab-myst "
                        "is not in the lite environment (make lite-env)")
    if problems:
        raise LiteError("the lite site is not self-contained:\n  " + "\n  ".join(problems))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"bytes": size, "notebooks": len(list((out / "files" / "notebooks").glob("*.ipynb")))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument("--lite-venv", type=Path, default=LITE_VENV,
                        help="the environment of requirements-lite.txt (make lite-env)")
    args = parser.parse_args(argv)
    try:
        if not args.check_only:
            build(args.out, lite_venv=(ROOT / args.lite_venv).resolve())
        info = check_site(args.out)
    except (LiteError, vendor_pyodide.VendorError) as exc:
        print(f"workshop_lite: {exc}", file=sys.stderr)
        return 1
    print(f"workshop_lite: {args.out} ({info['notebooks']} notebooks, {info['bytes'] / 1e6:.1f} MB), "
          "every URL of its kernel local")
    return 0


if __name__ == "__main__":
    sys.exit(main())
