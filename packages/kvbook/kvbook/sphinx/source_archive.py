"""Ship the book's own source beside it: ``kvmath-source.tar.gz`` in the built site.

Every page's footer links to it (``_config.yml``, ``extra_footer``), so a reader of
the published or copied book can get the repository the pages were built from, with
no network and no repository host to name: unpack it and run ``make lab``.

The archive holds the files git tracks, as they are in the working tree when the book
is built (``git ls-files``), under ``kvmath/``, with fixed times and owners so the same
tree gives the same bytes. Outside a git checkout the build fails with a clear error:
the book is built from a clone.

Also a Sphinx extension (``extra_extensions`` in ``_config.yml``): the archive is
written when the HTML build finishes, so ``make book`` and the tests' own builds both
carry it.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

NAME = "kvmath-source.tar.gz"
PREFIX = "kvmath"


def tracked_files(root: Path) -> list[str]:
    """Paths git tracks under ``root`` that exist in the working tree, sorted."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise RuntimeError(f"source archive: {root} is not a git checkout ({err}); build the book "
                           "from a clone of the repository") from None
    names = [n for n in out.decode("utf-8").split("\0") if n]
    return sorted(n for n in names if (root / n).is_file())


def write_archive(root: Path, out_dir: Path) -> Path:
    """Write ``out_dir/kvmath-source.tar.gz`` from the tracked files of ``root``; return its path."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in tracked_files(root):
            path = root / name
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
        write_archive(Path(app.srcdir), Path(app.outdir))


def setup(app):
    app.connect("build-finished", _on_build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
