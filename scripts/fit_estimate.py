"""Refit kvmath's estimate on the calibration table and rewrite its committed data.

Writes ``kvmath/data/estimate_parameters.csv`` (each fitted parameter: its
value, unit, home regimes, meaning and how many rows it was fitted on) and
``kvmath/data/estimate_errors.csv`` (each regime's leave-one-source-out
errors and interval), from ``kvmath/data/measurements.csv``. Run it after
adding rows there; no code changes. ``tests/unit/test_estimate.py`` checks
that a refit reproduces the committed files.

    python scripts/fit_estimate.py
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvmath import estimate  # noqa: E402

SOURCE = "fitted by scripts/fit_estimate.py on kvmath/data/measurements.csv (kvmath.estimate.fit)"


def parameter_rows(params) -> list[dict]:
    table = estimate._table()
    return [{"name": name, "value": repr(float(getattr(params, name))), "unit": unit, "home": " ".join(home),
             "rows": len(estimate._rows_moved_by(name, params, table)), "meaning": meaning, "source": SOURCE}
            for name, unit, home, meaning in estimate.PARAMETERS]


def error_rows(cv) -> list[dict]:
    out = []
    for regime, e in cv.by_regime.items():
        out.append({"regime": regime, "rows": e.rows, "sources": e.sources,
                    **{k: repr(float(getattr(e, k))) for k in ("median_abs_error", "p90_abs_error", "log_low",
                                                               "log_high", "coverage", "median_half_width")},
                    "pooled": "true" if e.pooled else "false",
                    "source": "leave-one-source-out cross-validation, " + SOURCE})
    return out


def as_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main() -> None:
    data = ROOT / "kvmath" / "data"
    params = estimate.fit()
    (data / "estimate_parameters.csv").write_text(as_csv(parameter_rows(params)), encoding="utf-8")
    cv = estimate.cross_validate()
    (data / "estimate_errors.csv").write_text(as_csv(error_rows(cv)), encoding="utf-8")
    for regime, e in cv.by_regime.items():
        print(f"{regime:<12} rows {e.rows:3d}  median {e.median_abs_error:6.1%}  p90 {e.p90_abs_error:6.1%}  "
              f"coverage {e.coverage:4.0%}  half-width {e.median_half_width:6.1%}{'  (pooled)' if e.pooled else ''}")


if __name__ == "__main__":
    main()
