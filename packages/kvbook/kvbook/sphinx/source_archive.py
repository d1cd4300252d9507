"""Ship the book's own source beside it: ``kvmath-source.tar.gz`` in the built site.

Every page's footer links to it (``_config.yml``, ``extra_footer``), so a reader of
the published or copied book can get the repository the pages were built from, with
no network and no repository host to name: unpack it and run ``make lab``.

The archive holds the files git tracks, as they are in the working tree when the book
is built (``git ls-files``; for the workshop's learner and instructor books, their
transformed copies of the sources, see :func:`archived_files`), under ``kvmath/``, with fixed times and owners so the same
tree gives the same bytes. Outside a git checkout the build fails with a clear error:
the book is built from a clone.

A build may leave some tracked files out (``kvmath_archive_leave_out`` in the Sphinx
config): the workshop's learner edition leaves out the tests and the records of the
book's text, which hold every solution.

Also a Sphinx extension (``extra_extensions`` in ``_config.yml``): the archive is
written when the HTML build finishes, so ``make book`` and the tests' own builds both
carry it.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import subprocess
import tarfile
from pathlib import Path

NAME = "kvmath-source.tar.gz"
PREFIX = "kvmath"


def _git(root: Path, *args: str) -> bytes:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise RuntimeError(f"source archive: {root} is not in a git checkout ({err}); build the book "
                           "from a clone of the repository") from None


def archived_files(root: Path, leave_out: list[str] | tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    """(name in the archive, file to read) for every file git tracks, sorted by name.

    ``root`` is the checkout itself, or a copy of some of its sources inside it (the workshop's
    learner and instructor sources under ``_build/workshop-src/``, which git ignores: review R21-4
    found their archives empty). A copy's top-level entries are taken from the copy, as it was
    transformed (a file it removed, such as an instructor page, stays out); every other tracked
    file from the checkout, so the archive is a whole repository either way. A name matching one of
    the ``leave_out`` patterns (``fnmatch``, ``*`` crossing folders) stays out.
    """
    root = Path(root).resolve()
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    names = [n for n in _git(top, "ls-files", "-z").decode("utf-8").split("\0") if n]
    copied = {p.name for p in root.iterdir()} if root != top else set()
    found = []
    for name in sorted(names):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in leave_out):
            continue
        path = (root if root == top or name.split("/", 1)[0] in copied else top) / name
        if path.is_file():
            found.append((name, path))
    return found


def write_archive(root: Path, out_dir: Path, leave_out: list[str] | tuple[str, ...] = ()) -> Path:
    """Write ``out_dir/kvmath-source.tar.gz`` from the tracked files of ``root`` (:func:`archived_files`)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in archived_files(root, leave_out):
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size = path.stat().st_size
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    target = Path(out_dir) / NAME
    with target.open("wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return target


def _on_build_finished(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        write_archive(Path(app.srcdir), Path(app.outdir), app.config.kvmath_archive_leave_out)


def setup(app):
    # patterns of tracked files a build's archive leaves out (the learner edition: the tests, which hold the
    # solutions' text and numbers; kvbook.workshop.workshop_build)
    app.add_config_value("kvmath_archive_leave_out", [], "html")
    app.connect("build-finished", _on_build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
