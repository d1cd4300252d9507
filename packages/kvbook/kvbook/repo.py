"""The repository whose book kvbook builds.

kvbook exists only to build this repository's book and is installed from it in
editable mode (``pip install --no-deps -e packages/kvbook``), so the repository is two
levels above this package: ``<repo>/packages/kvbook/kvbook/``.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

if not (ROOT / "_config.yml").is_file():  # pragma: no cover - a non-editable install
    raise ImportError(f"kvbook expects to run from the kvmath repository (no _config.yml in {ROOT}); "
                      "install it with `pip install --no-deps -e packages/kvbook` from the repository root")
