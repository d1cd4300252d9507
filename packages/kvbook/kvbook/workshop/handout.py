"""The two-page A4 handout (issue 15 item 4), as HTML and, with Chromium, PDF.

Every number on it is computed here by kvmath from its presets: the chip
table of :data:`CHIPS` (memory as marketed, as the device reports it and as the CUDA runtime
gives it, where known; bandwidth; dense FLOP/s by format; the bf16 ridge),
the KV cache per token of twelve models, and the unit conversions. The
misconceptions come from ``book/teaching/misconceptions.yaml`` (the same
source as the facilitator's page). Formulas use the symbols of
``book/notation.md``.

Usage::

    python -m kvbook.workshop.handout --html _build/workshop-src/handout.html --pdf _build/workshop/learner/handout.pdf
"""

from __future__ import annotations

import argparse
import html
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import kvmath
from kvmath.units import GiB, KiB

from kvbook.repo import ROOT
from kvbook.workshop import workshop_pages

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# As tests/browser/sitecheck.py launches it, plus what printing needs.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-pdf-header-footer"]

# Which presets the handout shows, by name (the numbers come from the presets). The first page holds 25 chip
# rows with the units and formulas: the chips a workshop compares (the full table is `kvmath hardware`).
CHIPS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi355x",
         "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "trainium2", "l4", "l40s", "rtx-4090", "rtx-5090", "rtx-pro-6000",
         "dgx-spark", "m2-ultra", "m4-max", "h20"]
MODELS = ["llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b-v0.1",
          "mixtral-8x7b", "qwen3-8b", "qwen3-32b", "gemma-2-9b", "gpt-oss-20b", "deepseek-v3"]
FORMATS = ["bf16", "fp8", "int8", "fp4"]
CONTEXT = 8192

CSS = """
@page { size: A4; margin: 9mm 10mm; }
* { box-sizing: border-box; }
body { font: 8.4pt/1.28 "DejaVu Sans", "Helvetica", sans-serif; margin: 0; color: #111; }
.page { height: 278mm; overflow: hidden; page-break-after: always; break-after: page; }
.page:last-child { page-break-after: auto; break-after: auto; }
h1 { font-size: 13pt; margin: 0 0 1mm; }
h2 { font-size: 10pt; margin: 3mm 0 1mm; border-bottom: 0.4pt solid #888; }
p { margin: 0.8mm 0; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 0.35mm 1.2mm; border-bottom: 0.3pt solid #ccc; vertical-align: top; }
th { text-align: left; font-weight: 600; border-bottom: 0.6pt solid #555; }
td:first-child { white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
/* numbers stay on one line; the heads may wrap, or the chip table is wider than the page and its last column is cut
   (review R21b-2) */
td.n { white-space: nowrap; }
.small { font-size: 7.4pt; color: #333; }
.formulas td:first-child { width: 36%; }
.cols { columns: 2; column-gap: 6mm; }
.cols > div { break-inside: avoid; }
i { font-family: "DejaVu Serif", serif; }
"""


def _n(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "—"
    return f"{x:,.{digits}f}".replace(",", "\u2009")


def chip_rows() -> list[list[str]]:
    rows = []
    for name in CHIPS:
        c = kvmath.Chip.preset(name)
        flops = [_n(c.flops_by_dtype[f] / 1e12) if f in c.flops_by_dtype else "—" for f in FORMATS]
        rows.append([f"<code>{html.escape(c.name)}</code>", _n(c.hbm_bytes / 1e9, 0),
                     _n(c.device_bytes / GiB, 2) if c.device_bytes else "—",
                     _n(c.runtime_bytes / GiB, 2) if c.runtime_bytes else "—",
                     _n(c.bandwidth / 1e12, 2), *flops, _n(c.ridge_point("bf16"), 0)])
    return rows


def model_rows() -> list[list[str]]:
    rows = []
    for name in MODELS:
        m = kvmath.Model.preset(name)
        per_token = m.kv_bytes_per_token(2)
        seq = m.kv_bytes_per_seq(CONTEXT, 2)
        rows.append([f"<code>{html.escape(m.name)}</code>", m.attention.upper(), str(m.n_layers), str(m.n_heads),
                     str(m.n_kv_heads) if m.attention != "mla" else "latent",
                     _n(m.param_count() / 1e9, 1), _n(per_token / KiB, 0),
                     _n(seq / GiB, 2), _n(seq / 1e9, 2)])
    return rows


def table(head: list[str], rows: list[list[str]], numeric_from: int) -> str:
    def cls(i):
        return ' class="n"' if i >= numeric_from else ""
    out = ["<table><thead><tr>", *(f"<th{cls(i)}>{h}</th>" for i, h in enumerate(head)), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{v}</td>" for i, v in enumerate(r)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


FORMULAS = [
    ("KV bytes per token", "<i>k</i> = 2 <i>L h</i><sub>kv</sub> <i>d</i><sub>h</sub> <i>b</i><sub>kv</sub>"
     " &nbsp;(MLA: <i>L</i> (<i>r</i><sub>kv</sub> + <i>d</i><sub>rope</sub>) <i>b</i><sub>kv</sub>)"),
    ("per sequence; per batch", "<i>S k</i>; &nbsp;<i>B S k</i>"),
    ("weight bytes (memory)", "<i>P b</i><sub>w</sub> &nbsp;(<i>P</i> a count, <i>b</i><sub>w</sub> bytes per weight)"),
    ("fewest chips; KV budget", "&lceil;<i>P b</i><sub>w</sub> / HBM&rceil;; &nbsp;<i>N</i> HBM &minus; <i>P b</i><sub>w</sub>"),
    ("ridge point", "&alpha; = <i>C</i> / <i>W</i> &nbsp;FLOP/byte"),
    ("min-step, all memory", "<i>t</i> = (<i>B</i> KV + <i>P b</i><sub>w</sub>) / <i>W</i> &nbsp;(KV: one sequence, <i>S k</i>)"),
    ("min-step, no-overlap form", "<i>t</i> = <i>B</i> KV / <i>W</i> + max(<i>P b</i><sub>w</sub> / <i>W</i>, 2<i>PB</i> / <i>C</i>)"),
    ("strict lower bound", "max((<i>B</i> KV + <i>P b</i><sub>w</sub>) / <i>W</i>, (<i>B F</i><sub>attn</sub> + 2<i>PB</i>) / <i>C</i>)"),
    ("attention FLOPs, one sequence", "<i>F</i><sub>attn</sub> = 4 <i>S L h d</i><sub>h</sub>; intensity 2<i>g</i> / <i>b</i><sub>kv</sub>, <i>g</i> = <i>h</i> / <i>h</i><sub>kv</sub>"),
    ("critical batch (dense)", "<i>B</i><sub>crit</sub> = <i>C b</i><sub>w</sub> / (2<i>W</i>), <i>C</i> in the dtype of the math"),
    ("tokens/s", "per sequence 1 / <i>t</i>; for the batch <i>B</i> / <i>t</i>"),
    ("on <i>N</i> chips (tensor parallel)", "<i>W</i>, <i>C</i> &rarr; <i>N W</i>, <i>N C</i>; split by heads each chip holds "
     "&lceil;<i>h</i><sub>kv</sub>/<i>N</i>&rceil; / <i>h</i><sub>kv</sub> of the cache"),
    ("prefill FLOPs (causal)", "<i>B</i> (2 <i>P S</i> + 2 <i>L h d</i><sub>h</sub> <i>S</i><sup>2</sup>)"),
]


def render() -> str:
    chips = table(["chip", "GB sold", "GiB device", "GiB runtime", "TB/s",
                   *[f"{f} TFLOP/s" for f in FORMATS], "&alpha; bf16"], chip_rows(), 1)
    models = table(["model", "design", "<i>L</i>", "<i>h</i>", "<i>h</i><sub>kv</sub>", "params (10<sup>9</sup>)",
                    "KiB / token", f"GiB / {CONTEXT:,} tok", f"GB / {CONTEXT:,} tok"], model_rows(), 2)
    formulas = "<table class='formulas'>" + "".join(
        f"<tr><td>{name}</td><td>{f}</td></tr>" for name, f in FORMULAS) + "</table>"
    gib = GiB
    h100 = kvmath.Chip.preset("h100-sxm")
    units = (
        f"<p><b>GB</b> = 10<sup>9</sup> bytes; <b>GiB</b> = 2<sup>30</sup> = {_n(gib)} bytes = "
        f"{gib / 1e9:.4f} GB. KiB = 2<sup>10</sup>, MiB = 2<sup>20</sup> bytes. Bandwidth in bytes/s "
        "(TB/s = 10<sup>12</sup>), compute in FLOP/s.</p>"
        f"<p>Memory is three numbers. <b>Sold</b>: the H100 SXM's {_n(h100.hbm_bytes / 1e9)} GB "
        f"= {h100.hbm_bytes / gib:.2f} GiB. <b>Device</b> (<code>nvidia-smi</code> total): "
        f"{_n(h100.device_bytes / 2**20)} MiB = {h100.device_bytes / 1e9:.2f} GB. <b>Runtime</b> "
        f"(what PyTorch and vLLM get): {h100.runtime_bytes / gib:.2f} GiB = {h100.runtime_bytes / 1e9:.2f} GB, "
        "less the CUDA context; vLLM then takes its <code>gpu_memory_utilization</code> share.</p>")
    misc = "".join(f"<div><p><b>{html.escape(m['title'])}</b> {m['short']}</p></div>"
                   for m in workshop_pages.misconceptions())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kvmath workshop handout</title>
<style>{CSS}</style></head><body>
<section class="page">
<h1>The arithmetic of LLM inference: the handout</h1>
<p class="small">Every number below is computed by <code>kvmath</code> {html.escape(getattr(kvmath, "__version__", ""))}
from its presets when this sheet is built (<code>make handout</code>). Symbols as in the book's notation page.</p>
<h2>Chips</h2>
<p class="small">Dense FLOP/s by format (no sparsity); &alpha; = <i>C</i><sub>bf16</sub>/<i>W</i> is also
<i>B</i><sub>crit</sub> for bf16 weights; halve it for 8-bit weights with bf16 math. GB sold: marketed (10<sup>9</sup> bytes).
GiB device: what the device reports; GiB runtime: what the CUDA runtime gives a process; — where unknown.</p>
{chips}
<h2>Units: GB or GiB</h2>
{units}
<h2>Formulas</h2>
{formulas}
</section>
<section class="page">
<h2>KV cache per token (bf16, full context) and per sequence of {CONTEXT:,} tokens</h2>
<p class="small">Windowed layers hold at most their window, so per sequence can be less than {CONTEXT:,} &times; per token.
MLA caches one latent per layer for all heads. Params: every parameter, embeddings included.</p>
{models}
<h2>Misconceptions</h2>
<div class="cols">{misc}</div>
</section>
</body></html>
"""


def print_pdf(html_path: Path, pdf_path: Path, chromium: str = CHROMIUM) -> None:
    if not Path(chromium).exists():
        raise SystemExit(f"Chromium not found at {chromium}: run `make chromium` or set CHROMIUM=")
    pdf_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium, *CHROMIUM_ARGS, f"--user-data-dir={profile}",
               f"--print-to-pdf={pdf_path.resolve()}", html_path.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not pdf_path.exists():
        raise SystemExit(f"Chromium failed to print {html_path}:\n{proc.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "workshop-src" / "handout.html")
    parser.add_argument("--pdf", type=Path, default=None)
    args = parser.parse_args(argv)
    args.html.parent.mkdir(parents=True, exist_ok=True)
    args.html.write_text(render())
    if args.pdf:
        print_pdf(args.html, args.pdf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
