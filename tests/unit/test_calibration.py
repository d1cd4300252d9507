"""The calibration table: every published measurement loads, none beats its bound, three bounds by hand."""

import ast
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

import kvmath as km
from kvmath.calibration import EXTRA_MODELS, METRICS, REGIMES
from kvmath.layout import parse_layout
# llama.cpp's last-MLP rule is an option of the request model's prefill only (the calibration rows use it)

ROWS = km.calibration.load_measurements()
BIB = (Path(__file__).resolve().parents[2] / "book" / "references.bib").read_text(encoding="utf-8")


def test_enough_rows_and_sources():
    assert len(ROWS) >= 30
    assert len({m.source for m in ROWS}) >= 10
    assert len({m.id for m in ROWS}) == len(ROWS), "ids are unique"
    # every regime the issue names has measurements
    for regime in REGIMES:
        assert len(km.calibration.load_measurements(regime)) >= 3, regime


@pytest.mark.parametrize("m", ROWS, ids=[m.id for m in ROWS])
def test_every_row_loads(m):
    assert m.metric in METRICS and m.regime in REGIMES
    assert m.url.startswith("https://") and m.title and m.quote
    assert m.unknowns.strip(), "every row says what its source leaves unknown"
    assert re.search(r"@\w+\{" + re.escape(m.source) + ",", BIB), f"{m.source} is cited in references.bib"
    assert m.model in EXTRA_MODELS or m.model in km.Model.presets()
    assert m.chip in km.Chip.presets()
    assert m.measured > 0 and m.batch >= 1 and m.n_chips >= 1
    if m.layout and not m.layout.startswith("split="):
        parse_layout(m.layout).check(m.model_preset)


def _display_column(csv_name: str) -> dict[str, str]:
    """Preset id -> its ``display_name`` cell, read from the data file itself (not through kvmath's loaders)."""
    import csv

    data = Path(km.__file__).resolve().parent / "data"
    with open(data / csv_name, encoding="utf-8", newline="") as f:
        return {row["name"]: row["display_name"] for row in csv.DictReader(f)}


def test_describe_names_a_row_by_its_ids_or_its_display_names():
    """``describe()`` is ``configuration`` (the preset ids); ``describe(display_names=True)`` puts the presets'
    display names, the ``display_name`` column of models.csv and hardware.csv, in their place and changes
    nothing else."""
    models, chips = _display_column("models.csv"), _display_column("hardware.csv")
    m = km.calibration.get_measurement("gf-70b-tp2")  # gpt-fast's Llama 2 70B, bf16, tp=2 on A100-80GBs
    assert (m.model, m.chip) == ("llama-2-70b", "a100-80gb")
    assert m.describe() == m.configuration == "llama-2-70b on 2x a100-80gb (tp=2), B=1, in/out 5/200, bf16"
    shown = m.describe(display_names=True)
    assert (models["llama-2-70b"], chips["a100-80gb"]) == ("Llama 2 70B", "NVIDIA A100-80GB SXM")
    assert shown == "Llama 2 70B on 2x NVIDIA A100-80GB SXM (tp=2), B=1, in/out 5/200, bf16"
    # every row: the same text with each id replaced by its display name, and no preset id left in it
    for row in ROWS:
        text = row.describe(display_names=True)
        model = models.get(row.model) or EXTRA_MODELS[row.model].display_name
        ids = row.describe()
        assert text == ids.replace(f"{row.model} on ", f"{model} on ", 1).replace(
            f"x {row.chip}", f"x {chips[row.chip]}", 1), row.id
        # an id that is its own display name (OpenAI writes gpt-oss-20b) is the one that may stay
        assert model and (model == row.model or not text.startswith(f"{row.model} ")), row.id
        assert chips[row.chip] != row.chip and f"x {row.chip}" not in text, row.id
    with pytest.raises(ValueError, match="display_names must be True or False"):
        m.describe(display_names="yes")


@pytest.mark.parametrize("m", ROWS, ids=[m.id for m in ROWS])
def test_no_measurement_beats_its_bound(m):
    c = km.calibration.bound_for(m)
    assert np.isfinite(c.bound) and c.bound > 0
    assert 0 < c.ratio <= 1, f"{m.id} reaches {c.ratio:.3f} of its bound: an assumption of the bound is wrong"
    assert c.binds in ("memory", "compute", "communication", "mixed")


def test_hand_computed_palm_latency():
    """PaLM 540B, int8, batch 1, context 2,048, weights split over 64 TPU v4 chips (Pope et al.).

    Per layer: Q and O are 18432 x (48 x 256), K and V 18432 x 256 (multi-query),
    the SwiGLU MLP three 18432 x 73728 matrices; 118 layers; the 256,000 x 18432
    table is tied, so a step reads all of it as the output layer. The single KV
    head's cache cannot be split by heads: every chip reads all of it.
    """
    d, layers, q, f, vocab = 18432, 118, 48 * 256, 73728, 256000
    per_layer = 2 * d * q + 2 * d * 256 + 3 * d * f
    weights = layers * per_layer + vocab * d                      # int8: one byte each
    kv = 2 * layers * 256 * 2 * 2048                               # K and V, one head of 256, bf16
    expected = (weights / 64 + kv) / 1.2e12
    c = km.calibration.bound_for("pope-palm-64")
    assert c.bound == pytest.approx(expected, rel=1e-4)           # norms are left out here (0.0003%)
    assert c.ratio == pytest.approx(expected / 0.029, rel=1e-4)


def test_hand_computed_m2_ultra_70b_tg512():
    """Llama 3 70B in fp16 on an M2 Ultra, 512 tokens from an empty cache (llama-bench tg 512).

    A step reads every matrix once except the input table (one row): 80 layers of
    Q, O (8192 x 8192), K, V (8192 x 1024) and three 8192 x 28672 MLP matrices,
    plus the 128,256 x 8192 output layer, 2 bytes each; and the cache, 2 x 80 x
    8 x 128 x 2 = 327,680 bytes per token, at contexts 1 .. 512 (mean 256.5).
    """
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    weights = 2 * (80 * per_layer + 128256 * 8192)
    kv_mean = 327680 * 256.5
    expected_tok_s = 800e9 / (weights + kv_mean)
    c = km.calibration.bound_for("xd-m2u-70b-f16")
    assert c.bound == pytest.approx(expected_tok_s, rel=1e-4)     # norms and the one embedding row: < 0.002%
    assert c.ratio == pytest.approx(4.76 / expected_tok_s, rel=1e-4)


def test_hand_computed_ttft_a100():
    """LLaMA 7B, a 2,048-token prompt on an A100 at 312 TFLOP/s (TensorRT-LLM's 133 ms).

    FLOPs: 2 S P_layers for the 32 layers' matrices (4 x 4096^2 + 3 x 4096 x 11008
    each), the LM head for the last token only (2 x 32000 x 4096), and causal
    attention, QK^T and AV over 1 .. S keys: 4 d sum(i) = 2 d S (S + 1) per layer.
    Reading the 13.5 GB of weights takes 6.6 ms, far less: compute binds.
    """
    s, d = 2048, 4096
    layers = 32 * (4 * d * d + 3 * d * 11008)
    flops = 2 * s * layers + 2 * 32000 * d + 32 * 2 * d * s * (s + 1)
    expected = flops / 312e12
    c = km.calibration.bound_for("trt-7b-a100-ttft")
    assert c.bound == pytest.approx(expected, rel=2e-3)
    assert c.binds == "compute"
    assert c.ratio == pytest.approx(expected / 0.133, rel=2e-3)


def test_chunked_prefill_reads_the_lm_head_once():
    """llama-bench pp512 at micro-batch 1: 511 steps need no logits, so read no LM head.

    Charging the 128,256 x 4096 bf16 head (1.05 GB) on every step put the bound
    within 3% of llama.cpp's 65.21 tokens/s; without it the bound is 72.0.
    """
    m, chip = km.Model.preset("llama-3-8b"), km.Chip.preset("rtx-4090")
    head = 128256 * 4096 * 2
    dep = km.Deployment(m, chip)
    with_logits = dep.step(1, np.arange(1, 513, dtype=float))
    steps = float(np.sum(with_logits.strict_s)) - 511 * head / chip.bandwidth
    t = dep.request(1, 512, 1, chunk_tokens=1).ttft_s
    # the prefill's attention is causal over 1 .. 512, as the decode steps' is; bytes dominate
    assert t == pytest.approx(steps, rel=2e-3)


def test_llama_cpp_skips_the_last_mlp_without_logits():
    """llama.cpp keeps only the output rows before the last layer's MLP (build_inp_out_ids).

    So in pp512 at micro-batch 1 the 511 steps without logits also skip that
    MLP: 3 x 4096 x 14336 bf16 weights, 352.3 MB, on top of the 1.05 GB head.
    Whole prompt at once (Llama 2 7B, 2,048 tokens, A100 fp16): the last MLP
    multiplies one row instead of 2,048, 2 x 2047 x 3 x 4096 x 11008 fewer FLOPs.
    """
    m, chip = km.Model.preset("llama-3-8b"), km.Chip.preset("rtx-4090")
    head, mlp = 128256 * 4096 * 2, 3 * 4096 * 14336 * 2
    dep = km.Deployment(m, chip)
    with_logits = dep.step(1, np.arange(1, 513, dtype=float))
    steps = float(np.sum(with_logits.strict_s)) - 511 * (head + mlp) / chip.bandwidth
    t = dep.request(1, 512, 1, chunk_tokens=1, last_mlp_logits_only=True).ttft_s
    assert t == pytest.approx(steps, rel=2e-3)
    # the plain rule charges the MLP: exactly 511 of its reads more
    plain = dep.request(1, 512, 1, chunk_tokens=1).ttft_s
    assert plain - t == pytest.approx(511 * mlp / chip.bandwidth, rel=1e-9)
    assert km.calibration.bound_for("lcpp-4090-8b-ub1").bound == pytest.approx(512 / t, rel=1e-12)
    s, d = 2048, 4096
    flops = 2 * s * 32 * (4 * d * d + 3 * d * 11008) + 2 * 32000 * d + 32 * 2 * d * s * (s + 1)
    skipped = 2 * (s - 1) * 3 * d * 11008
    t7 = km.Deployment("llama-2-7b", "a100-80gb", weights="fp16", compute="fp16").request(
        1, s, 1, last_mlp_logits_only=True).ttft_s
    assert t7 == pytest.approx((flops - skipped) / 312e12, rel=2e-3)
    with pytest.raises(ValueError, match="last_mlp_logits_only"):
        km.Deployment("llama-3-8b", "rtx-4090").request(1, 512, 1, last_mlp_logits_only="yes")
    with pytest.raises(ValueError, match="dense models only"):
        km.Deployment("mixtral-8x7b", "a100-80gb").request(1, 512, 1, chunk_tokens=8, last_mlp_logits_only=True)


def test_replicated_lm_head_is_read_whole_on_every_chip():
    """gpt-fast's tp.py leaves the 32000 x 8192 bf16 output layer whole on each GPU.

    Per chip at tp = 8: the head's 524.3 MB instead of an eighth, 458.75 MB
    more to read, and 2 x 32000 x 8192 x 7/8 more FLOPs per token.
    """
    dep = km.Deployment("llama-2-70b", "a100-80gb", km.ParallelLayout(tp=8), link=None)  # 2.039e12 B/s, 312e12 FLOP/s
    split = dep.step(1, 100)
    whole = dep.replace(layout=km.ParallelLayout(tp=8, replicate_lm_head=True)).step(1, 100)
    head = 32000 * 8192 * 2
    assert whole.weight_bytes_read - split.weight_bytes_read == pytest.approx(head * 7 / 8, rel=1e-12)
    assert whole.weight_flops - split.weight_flops == pytest.approx(2 * 32000 * 8192 * 7 / 8, rel=1e-12)
    assert whole.weight_bytes_resident - split.weight_bytes_resident == pytest.approx(head * 7 / 8, rel=1e-12)
    c = km.calibration.bound_for("gf-70b-tp8")
    assert c.measurement.replicated_lm_head
    # 200 tokens from the 5-token prefill and 199 steps, all memory-bound at batch 1, each reading the
    # extra 458.75 MB at 2.039 TB/s: the time per token grows by exactly that read
    plain = km.calibration.bound_for(dataclasses.replace(c.measurement, replicated_lm_head=False))
    assert c.unit_s - plain.unit_s == pytest.approx(head * 7 / 8 / 2.039e12, rel=1e-6)
    with pytest.raises(ValueError, match="replicate_lm_head"):
        km.ParallelLayout(tp=2, replicate_lm_head=1)
    with pytest.raises(ValueError, match="replicated_lm_head needs a parallel layout"):
        dataclasses.replace(km.calibration.get_measurement("gf-7b-bf16"), replicated_lm_head=True)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="measurement_id"):
        km.calibration.get_measurement("gf-7b-bf61")
    with pytest.raises(ValueError, match="regime"):
        km.calibration.load_measurements("tiny_batch")


def test_geforce_fp16_prefill_takes_the_fp16_accumulate_rate():
    """llama.cpp multiplies F16 through cuBLAS with CUBLAS_COMPUTE_16F: a GeForce card's fastest 16-bit mode.

    Hand bound for xd-4090-8b-f16-pp512 (Llama 3 8B, 512 prompt tokens, one
    RTX 4090 at 330.3e12 FLOP/s): the prefill is compute-bound, so the bound is
    at least the matmul FLOPs of 512 tokens (2 x 512 x (8.03e9 - the 0.53e9
    embedding table), the LM head on the last token only) at that rate.
    """
    m = km.calibration.get_measurement("xd-4090-8b-f16-pp512")
    assert m.compute_flops_per_s == 330.3e12 and m.chip_preset.flops("fp16") == 330.3e12
    assert km.calibration.get_measurement("pr4766-3090-7b-f16-pp512").chip_preset.flops("fp16") == 142e12
    l3 = km.Model.preset("llama-3-8b")
    body = l3.param_count() - 2 * l3.vocab * l3.d_model  # neither the embedding nor the LM head
    flops = 2 * 512 * body + 2 * l3.vocab * l3.d_model
    c = km.calibration.bound_for(m)
    assert c.binds == "compute"
    assert 512 / c.bound >= flops / 330.3e12  # attention's FLOPs come on top
    assert 512 / c.bound == pytest.approx(flops / 330.3e12, rel=0.1)
    assert c.ratio < 0.5  # at the fp32-accumulate rate the row looked like 80% of its bound


@pytest.mark.parametrize("change, name", [
    (dict(measured=0.0), "measured"), (dict(measured=float("nan")), "measured"), (dict(measured="104.9"), "measured"),
    (dict(batch=0), "batch"), (dict(batch=1.5), "batch"), (dict(output_tokens=0), "output_tokens"),
    (dict(input_tokens=-5), "input_tokens"), (dict(metric="ttft_s", input_tokens=0), "input_tokens"),
    (dict(tokens_per_step=0), "tokens_per_step"), (dict(chunk_tokens=0), "chunk_tokens"),
    (dict(metric="tok_s"), "metric"), (dict(regime="tiny"), "regime"), (dict(per_chip="false"), "per_chip"),
    (dict(layout="split=x"), "split"), (dict(layout="split=4"), "decode-step metrics"),
    (dict(compute_flops_per_s=float("inf")), "compute_flops_per_s"),
    (dict(compute_flops_per_s=1e12), "compute_flops_per_s"),
    (dict(engine="vllm"), "engine"), (dict(engine=3), "engine"), (dict(conversion=None), "conversion"),
])
def test_a_bad_row_names_its_field(change, name):
    import dataclasses

    with pytest.raises(ValueError, match=name):
        km.calibration.bound_for(dataclasses.replace(km.calibration.get_measurement("gf-7b-bf16"), **change))


@pytest.mark.parametrize("call", [
    lambda: km.calibration.bound_for(None), lambda: km.calibration.bound_for({"id": "gf-7b-bf16"}), lambda: km.calibration.get_measurement(1),
    lambda: km.calibration.load_measurements([]), lambda: km.calibration.calibrate(1),
])
def test_wrong_types_are_value_errors(call):
    with pytest.raises(ValueError, match="measurement|regime"):
        call()


NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CH12, CH13 = "12_reality_check.ipynb", "13_calibration.ipynb"

# An inline expression that prints one row's ratio: f"{REF.ratio:SPEC}", REF naming a single Calibration
# (no min/max/median over rows, which print no row's own ratio)
ONE_RATIO = re.compile(r"""^f(['"])\{(?P<ref>[\w.]+(?:\[["'][\w.-]+["']\])?(?:\.cal)?|bound_for\(\w+\))"""
                       r"""\.ratio:(?P<spec>[^}]+)\}\1$""")
# the names the two chapters give single rows' Calibrations (BY_ID["id"] and chapter 12's CAL["key"] resolve alone)
NAMED = {CH12: {"r6.cal": "key:6", "r7.cal": "key:7", "r10.cal": "key:10", "bound_for(META)": "meta-65b-tp8",
                "worst.cal": "highest:12"},  # worst: the highest ratio of chapter 12's rows (its ROW_IDS)
         CH13: {"ds": "ds-v3-decode", "closest": "highest"}}  # closest: the row with the highest ratio


def _cells(notebook: str) -> list[dict]:
    return json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]


def _printed_texts(notebook: str) -> dict[str, str]:
    """Each inline expression's text as the committed, filled notebook shows it (its ``user_expressions``)."""
    from kvbook.inline import result_text

    out = {}
    for cell in _cells(notebook):
        for entry in cell.get("metadata", {}).get("user_expressions", []):
            assert entry["result"].get("status") == "ok", (notebook, entry)
            out.setdefault(entry["expression"], result_text(entry["result"]))
    assert out, f"{notebook} holds no evaluated inline expressions: fill it (python -m kvbook.inline, make refresh)"
    return out


def _row_keys() -> dict[str, str]:
    """Chapter 12's keys -> rows of the measurements table: its ROW_IDS, read from its source."""
    for cell in _cells(CH12):
        if cell["cell_type"] != "code":
            continue
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["ROW_IDS"]:
                return ast.literal_eval(node.value)
    raise AssertionError(f"{CH12} defines no ROW_IDS")


def _row_of(notebook: str, ref: str, keys: dict[str, str]) -> str:
    """The measurement id a chapter's REF (of f"{REF.ratio:...}") names."""
    m = re.fullmatch(r"""(BY_ID|CAL|BY_KEY)\[["']([\w.-]+)["']\](\.cal)?""", ref)
    if m:
        return m.group(2) if m.group(1) == "BY_ID" else keys[m.group(2)]
    named = NAMED[notebook].get(ref)
    assert named, f"{notebook} prints the ratio of {ref!r}: name its row in NAMED"
    if named == "highest":
        return max(ROWS, key=lambda m: km.calibration.bound_for(m).ratio).id
    if named == "highest:12":
        return max(keys.values(), key=lambda row: km.calibration.bound_for(row).ratio)
    return keys[named[4:]] if named.startswith("key:") else named


def _printed_ratios(notebook: str, texts: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(row id, format spec, expression, printed text) of each expression printing one row's ratio."""
    keys = _row_keys()
    found = []
    for expr, text in texts.items():
        m = ONE_RATIO.match(expr)
        if m:
            found.append((_row_of(notebook, m.group("ref"), keys), m.group("spec"), expr, text))
    return found


def _ratio_mismatches(printed: dict[str, list[tuple[str, str, str, str]]]) -> list[tuple]:
    """Every printed ratio that is not kvmath.calibration's for its row in the same format, or not the other
    chapter's text for the same row and format."""
    bad = [(nb, expr, text, format(km.calibration.bound_for(row).ratio, spec))
           for nb, found in printed.items() for row, spec, expr, text in found
           if text != format(km.calibration.bound_for(row).ratio, spec)]
    first = {}
    for nb, found in printed.items():
        for row, spec, expr, text in found:
            other = first.setdefault((row, spec), (nb, text))
            if other[1] != text:
                bad.append((row, spec, other, (nb, text)))
    return bad


def _output_lines(notebook: str) -> list[str]:
    """The lines of every committed text output of a notebook."""
    return "\n".join("".join(o.get("data", {}).get("text/plain", "")) for c in _cells(notebook)
                     for o in c.get("outputs", [])).splitlines()


def _table_column(notebook: str, marker: str, column: str, every: bool = False) -> dict[str, str]:
    """Row (first cell) -> the cell under ``column`` of the first committed text table whose text holds ``marker``
    (with ``every``, of all such tables together: chapter 13 shows one per regime; a row in two fails)."""
    found: dict[str, str] = {}
    for cell in _cells(notebook):
        for o in cell.get("outputs", []):
            text = "".join(o.get("data", {}).get("text/plain", ""))
            if marker in text:
                lines = text.splitlines()
                at = next(i for i, ln in enumerate(lines) if column in ln)
                head = re.split(r"\s{2,}", lines[at].strip())
                col = head.index(column)
                table = {cells[0]: cells[col] for cells in (re.split(r"\s{2,}", ln.strip()) for ln in lines[at + 2:])}
                if not every:
                    return table
                assert not table.keys() & found.keys(), f"{notebook}: rows in two tables: {table.keys() & found.keys()}"
                found.update(table)
    if not found:
        raise AssertionError(f"{notebook} shows no table holding {marker!r}")
    return found


def test_chapters_12_and_13_print_the_same_ratio_for_each_row():
    """Each chapter's printed ratio of a measured row (its filled inline expressions) is kvmath.calibration's, in
    the expression's own format, and both chapters print the same text for the same row; their tables too."""
    printed = {nb: _printed_ratios(nb, _printed_texts(nb)) for nb in (CH12, CH13)}
    rows = {nb: {row for row, *_ in found} for nb, found in printed.items()}
    assert len(rows[CH12]) >= 5 and len(rows[CH13]) >= 5, rows
    # the same rows printed by both: the first tokens on the A100 and the H100
    assert {"trt-7b-a100-ttft", "trt-7b-h100-ttft"} <= rows[CH12] & rows[CH13], rows
    assert not _ratio_mismatches(printed), _ratio_mismatches(printed)
    # the check catches a different number in either chapter
    for nb in (CH12, CH13):
        row, spec, expr, text = printed[nb][0]
        wrong = dict(printed, **{nb: [(row, spec, expr, text + "0"), *printed[nb][1:]]})
        assert any(expr in str(b) for b in _ratio_mismatches(wrong)), nb
    # chapter 13's tables of every measurement, one per regime (two decimals), and chapter 12's tables (percent)
    # of its rows
    ch13 = _table_column(CH13, "published measurements and kvmath's bound", "phi", every=True)
    assert len(ch13) == len(ROWS) >= 50
    for m in ROWS:
        assert ch13[m.id] == f"{km.calibration.bound_for(m).ratio:.2f}", (m.id, ch13[m.id])
    keys = _row_keys()
    ch12 = _table_column(CH12, "what binds the strict bound", "phi (%)")
    lines = _output_lines(CH12)  # run_table: one column per row, the ratio on the phi_run line
    head = next(ln for ln in lines if ln.startswith("quantity") and "row 4" in ln)
    phi_run = next(ln for ln in lines if ln.startswith("phi_run (%)"))
    run = dict(zip(re.split(r"\s{2,}", head.strip())[1:], re.split(r"\s{2,}", phi_run.strip())[1:]))
    in_tables = {**ch12, **{k.removeprefix("row "): v for k, v in run.items()}}
    assert {"1", "2a", "2b", "3a", "3b", "3c", "4", "5", "6", "7"} <= set(in_tables), in_tables
    for k, pct in in_tables.items():
        assert pct == f"{100 * km.calibration.bound_for(keys[k]).ratio:.0f}", (k, pct)
    # the two rows whose ratios used to differ (88% against 0.905, 54% against 0.53)
    assert (ch13["lcpp-4090-8b-ub1"], ch13["gf-70b-tp8"]) == ("0.88", "0.54")
    percent12 = {row: text for row, spec, _, text in printed[CH12] if spec == ".0%"}
    assert (percent12["lcpp-4090-8b-ub1"], in_tables["3c"]) == ("88%", "54")


def test_a_measurement_gives_its_deployment():
    """Measurement.deployment(): the row's layout, link and formats, the Deployment bound_for steps on.

    gpt-fast's Llama 2 70B in bf16 at tp = 2 over NVLink 3: each chip reads half of
    every weight but the 32000 x 8192 bf16 LM head (524.288 MB), which tp.py keeps
    whole on both. Pope et al.'s ``split=64`` is weights over 64 chips with the cache
    split by sequence, and the row names no link, so none is counted.
    """
    from kvmath.calibration import bound_for, get_measurement

    dep = get_measurement("gf-70b-tp2").deployment()
    assert (dep.layout.tp, dep.layout.replicate_lm_head, dep.link.name) == (2, True, "nvlink3")
    assert (dep.formats.weights, dep.formats.kv, dep.formats.compute) == ("bf16", "bf16", "bf16")
    read = dep.model.weight_bytes_read_by_group(1, "bf16")
    head = 32000 * 8192 * 2
    assert read["lm_head"] == head
    assert dep.step(1, 105).weight_bytes_read == pytest.approx((sum(read.values()) - head) / 2 + head, rel=1e-12)
    pope = get_measurement("pope-palm-64").deployment()
    assert (pope.n_chips, pope.layout.tp, pope.layout.kv_split, pope.link) == (64, 64, "batch", None)
    # an s_per_token row's bound is one step at its context: the same number through both paths
    assert float(pope.step(1, 2048).strict_s) == pytest.approx(bound_for("pope-palm-64").bound, rel=1e-12)


def test_a_one_token_run_binds_as_its_prefill_does():
    # Llama 2 7B on an A100 (bf16, 13.5 GB of weights at 2.04 TB/s: 6.6 ms; 2 x 6.7e9 FLOPs a token at 312 TFLOP/s):
    # 16 prompt tokens take 0.7 ms of math, under the read; 64 x 16 take 44 ms, over it
    row = km.calibration.get_measurement("trt-7b-a100-b60")
    one = {b: km.calibration.bound_for(dataclasses.replace(row, output_tokens=1, input_tokens=16, batch=b)).binds
           for b in (1, 64)}
    assert one == {1: "memory", 64: "compute"}


# ----- the set itself: its size, its sources, what each row says of its figure ---------------------------------

NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _arithmetic(text: str) -> float:
    """The value of an expression of numbers, + - * / and parentheses (a row's ``conversion``); nothing else runs."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            a, b = value(node.left), value(node.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.Div: a / b if b else float("nan")}[type(node.op)]
        raise ValueError(f"conversion {text!r} holds something besides numbers and + - * /")
    return value(ast.parse(text, mode="eval"))


def _numbers(text: str) -> set[float]:
    return {float(n) for n in NUMBER.findall(text.replace(",", ""))}


def test_the_set_holds_at_least_100_rows_over_the_chips_engines_and_regimes_the_issue_names():
    assert len(ROWS) >= 100
    assert len({m.source for m in ROWS}) >= 15
    chips = {m.chip for m in ROWS}
    for wanted in ({"h100-sxm"}, {"h200"}, {"b200", "b200-hgx", "gb200"}, {"mi300x", "mi325x", "mi355x"}, {"a100-80gb"},
                   {"l40s"}, {"rtx-4090", "rtx-5090"}, {"m2-ultra", "m3-max", "m4-max"}):
        assert chips & wanted, wanted
    engines = {m.engine for m in ROWS}
    assert {"vLLM", "SGLang", "TensorRT-LLM", "llama.cpp"} <= engines, engines
    assert any(m.source.startswith("mlperf_") for m in ROWS)
    # every regime holds at least 5 rows, the fewest a fitted parameter needs (issue 24: one per 5 rows)
    counts = {r: len(km.calibration.load_measurements(r)) for r in REGIMES}
    assert min(counts.values()) >= 5, counts


@pytest.mark.parametrize("m", ROWS, ids=[m.id for m in ROWS])
def test_every_row_names_its_engine_and_how_its_figure_was_read(m):
    """The engine is one of ENGINES; the quoted figure is ``measured`` itself, or the conversion turns numbers the
    quote holds into it (within 5e-6: ``measured`` keeps six significant figures of a quotient)."""
    assert m.engine in km.calibration.ENGINES
    quoted = _numbers(m.quote)
    if not m.conversion:
        assert m.measured in quoted, (m.id, m.measured, m.quote)
        return
    assert _arithmetic(m.conversion) == pytest.approx(m.measured, rel=5e-6), (m.id, m.conversion)
    # each number, its power of ten left off, is quoted; a one-digit whole number may be arithmetic's own (the 2 of
    # a mean of two)
    for n in NUMBER.findall(re.sub(r"e-?\d+", "", m.conversion)):
        assert float(n) in quoted or re.fullmatch(r"\d", n), (m.id, n, m.quote)


def test_a_conversion_that_is_not_arithmetic_is_refused():
    assert _arithmetic("2048 / 17.236") == pytest.approx(118.821, rel=5e-6)
    for bad in ("__import__('os')", "2 ** 10", "abs(-1)"):
        with pytest.raises(ValueError, match="conversion"):
            _arithmetic(bad)


def test_excluded_figures_say_where_they_are_from_and_why():
    rows = km.presets.read_rows("measurements_excluded.csv")
    assert rows
    kept = {(m.source, m.quote) for m in ROWS}
    for r in rows:
        assert re.search(r"@\w+\{" + re.escape(r["source"]) + ",", BIB), r["source"]
        assert r["url"].startswith("https://") and r["quote"] and r["setup"] and len(r["reason"]) > 20
        assert (r["source"], r["quote"]) not in kept


def test_hand_computed_ttft_l40s_fp8():
    """Llama 2 7B, a 2,048-token prompt on one L40S in fp8 at 733e12 FLOP/s (TensorRT-LLM v0.5: 73 ms).

    The FLOPs as in the A100 case: 2 S P_layers for the 32 layers' matrices, the LM head for the last
    token, causal attention 2 d S (S + 1) per layer; the 6.7 GB of fp8 weights take 7.8 ms at 864 GB/s,
    under the 37.7 ms of math: compute binds.
    """
    s, d = 2048, 4096
    flops = 2 * s * 32 * (4 * d * d + 3 * d * 11008) + 2 * 32000 * d + 32 * 2 * d * s * (s + 1)
    c = km.calibration.bound_for("trt-7b-l40s-ttft")
    assert c.bound == pytest.approx(flops / 733e12, rel=2e-3)
    assert c.binds == "compute"
    assert c.ratio == pytest.approx(flops / 733e12 / 0.073, rel=2e-3)


def test_hand_computed_mi300x_405b_batch_1():
    """Llama 3.1 405B in fp8 over 8 MI300X (vLLM, Oracle): 128 tokens in, 128 out, 3.530 s.

    Decode reads an eighth of the weights per chip each step: 126 layers of Q, O (16384 x 16384),
    K, V (16384 x 1024) and three 16384 x 53248 MLP matrices, plus the 128,256 x 16384 LM head,
    one byte each, at 5.3 TB/s: 9.56 ms, so the 127 steps take at least 1.21 s (the cache and the
    prefill add little). 128 / 3.530 = 36.26 tokens/s is at most 35% of the bound.
    """
    per_layer = 2 * 16384 * 16384 + 2 * 16384 * 1024 + 3 * 16384 * 53248
    step = (126 * per_layer + 128256 * 16384) / 8 / 5.3e12
    c = km.calibration.bound_for("orcl-405b-b1")
    assert 128 / c.bound >= 127 * step
    assert 128 / c.bound == pytest.approx(127 * step, rel=0.02)   # the prefill and the cache: under 2%
    assert c.ratio == pytest.approx((128 / 3.530) / c.bound, rel=5e-6) and c.ratio < 0.36  # measured: 36.2606


def test_deepseek_day_row_is_within_a_point_of_both_consistent_operating_points():
    # review C13-3: the row's batch comes from 22 tokens/s (84 a GPU: 14,800 / 8 / 22 = 84.1) and its time from
    # 21 (two tokens in 2 / 21 s); Little's law ties the two, so try both consistent points (21 gives 88: 88.1)
    from kvmath.calibration import bound_for, get_measurement

    m = get_measurement("ds-v3-decode")
    assert m.batch == 84 * 128 and m.measured == 21 and m.tokens_per_step == 2
    assert (round(14.8e3 / 8 / 22), round(14.8e3 / 8 / 21)) == (84, 88)
    row = bound_for(m).ratio
    for speed, per_gpu in ((22, 84), (21, 88)):
        for kv in ("bf16", "fp8"):
            point = bound_for(dataclasses.replace(m, measured=float(speed), batch=per_gpu * 128, kv_dtype=kv)).ratio
            assert abs(point - row) < 0.01, (speed, kv, point, row)
