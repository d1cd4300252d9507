"""The book's diagrams (kvbook.diagrams) follow the presets they draw, read on a phone, and say what they show.

For each diagram a test changes what it draws (another chip, model or
layout) and finds a labelled number move to the value computed here by hand
from the presets' published shapes and rates. Each diagram's alt text is
checked against its chapter's caption (different, no LaTeX, no label id) and
rides in its PNG's ``Description``, which the book build writes into the
page (``kvbook.sphinx.book_pages.figures``, tested last). Labels are
rounded as drawn, so each hand figure is compared at the label's precision.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from kvbook import diagrams, plots

import kvmath

ROOT = Path(__file__).resolve().parents[2]
Model, Deployment = kvmath.Model.preset, kvmath.Deployment

H100_W, H200_W = 3.35e12, 4.8e12  # bytes/s: the datasheets' HBM bandwidths (kvmath/data/hardware.csv)
H100_C = 989.4e12  # dense bf16 FLOP/s of the H100 SXM (and the H200)

# Llama 3 8B's published shapes: L = 32, d = 4,096, h = 32, h_kv = 8, d_h = 128, d_ff = 14,336, V = 128,256
ATTENTION = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)  # Q and O, K and V: 1,342,177,280
MLP = 32 * 3 * 4096 * 14336  # gate, up, down: 5,637,144,576
LM_HEAD = 128256 * 4096  # 525,336,576
NORMS = (2 * 32 + 1) * 4096  # 266,240
ROW = 4096  # one embedding row per token: the rest of the table is not read
LLAMA3_READ = (ATTENTION + MLP + LM_HEAD + NORMS + ROW) * 2  # bf16: 15,009,857,536 bytes a decode step reads
LLAMA3_KV = 2 * 8 * 128 * 32 * 2  # bytes per token: 131,072


def labels(d: diagrams.Diagram) -> str:
    """Every text on the figure, one per line."""
    return "\n".join(d.texts())


def caption(notebook: str, name: str) -> str:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    for cell in nb["cells"]:
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if figure.get("name") == name:
            return figure["caption"]
    raise AssertionError(f"{notebook} has no figure {name!r}")


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


# --- what a decode step moves (chapter 3) ----------------------------------------------------------

def test_decode_step_labels_the_weights_and_cache_read_and_follow_the_chip():
    # weights read at 3.35 TB/s: 15,009,857,536 / 3.35e12 = 4.4806 ms; at the H200's 4.8 TB/s, 3.1271 ms.
    # 8 sequences of 4,096 tokens: 8 * 4,096 * 131,072 = 4,294,967,296 bytes of cache: 1.2821 ms, 894.78 us
    assert LLAMA3_READ == 15_009_857_536
    h100 = labels(diagrams.decode_step(Deployment("llama-3-8b", "h100-sxm"), (1, 8), 4096))
    assert f"weights 15.01 GB: {ms(LLAMA3_READ / H100_W)}" in h100 and "4.48 ms" in ms(LLAMA3_READ / H100_W)
    assert f"+ KV 4.29 GB: {ms(8 * 4096 * LLAMA3_KV / H100_W)}" in h100
    assert "weights\n16.06 GB" in h100  # held: 8,030,261,248 parameters x 2 bytes, the whole table included
    assert "memory, 80 GB" in h100
    h200 = labels(diagrams.decode_step(Deployment("llama-3-8b", "h200"), (1, 8), 4096))
    assert f"weights 15.01 GB: {ms(LLAMA3_READ / H200_W)}" in h200 and "3.13 ms" in h200
    kv_us = 8 * 4096 * LLAMA3_KV / H200_W * 1e6
    assert f"+ KV 4.29 GB: {kv_us:.2f} µs" in h200 and "894.78" in h200
    assert "memory, 141 GB" in h200


def test_decode_step_follows_the_model():
    # Llama 2 7B: L = 32, d = 4,096, h = h_kv = 32, d_ff = 11,008, V = 32,000; its cache 2 * 32 * 128 * 32 * 2 =
    # 524,288 bytes a token, so 8 sequences of 4,096 tokens hold 17,179,869,184 bytes (17.18 GB): 5.13 ms
    read = (32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 32000 * 4096 + 65 * 4096 + 4096) * 2
    text = labels(diagrams.decode_step(Deployment("llama-2-7b", "h100-sxm"), (1, 8), 4096))
    assert f"weights {read / 1e9:.2f} GB: {ms(read / H100_W)}" in text and "13.21 GB" in text
    kv = 8 * 4096 * 2 * 32 * 128 * 32 * 2
    assert f"+ KV {kv / 1e9:.2f} GB: {ms(kv / H100_W)}" in text and "17.18 GB: 5.13 ms" in text


def test_decode_step_says_what_its_bars_show_on_any_chip():
    """Review R22r-14: the memory is not called HBM (Apple's is unified LPDDR, a GeForce's GDDR), the chip takes no
    article that its name may not, and the alt text's last sentence follows the bars: a large batch of short
    sequences is compute-bound. By hand, Llama 3 8B at B = 512, S = 128 on an H100 SXM: it reads 15.01 GB of
    weights and 512 x 128 x 131,072 = 8.59 GB of cache, 7.05 ms at 3.35 TB/s, and computes about 2 x 7.5e9 x 512 =
    7.7 TFLOP, 7.8 ms at 989.4 TFLOP/s: the arithmetic is the longer."""
    m2 = diagrams.decode_step(Deployment("llama-3-8b", "m2-ultra"), (1, 8), 4096)
    assert "memory, 192 GB" in labels(m2) and "HBM" not in labels(m2) + m2.alt
    assert "on one Apple M2 Ultra (76-core GPU)." in m2.alt
    assert m2.alt.endswith("Reading memory takes far longer than the arithmetic.")
    kv = 512 * 128 * LLAMA3_KV
    assert (LLAMA3_READ + kv) / H100_W == pytest.approx(7.05e-3, abs=0.01e-3)
    big = diagrams.decode_step(Deployment("llama-3-8b", "h100-sxm"), (1, 512), 128)
    assert big.alt.endswith("At B = 512 the arithmetic takes longer than reading memory.")
    # between a third and all of the memory time: no "far"
    mid = diagrams.decode_step(Deployment("llama-3-8b", "h100-sxm"), (1, 256), 256)
    assert mid.alt.endswith(" Reading memory takes longer than the arithmetic.")


def test_decode_step_refuses_a_batch_that_does_not_fit():
    with pytest.raises(ValueError, match="batches"):
        diagrams.decode_step(Deployment("llama-3-8b", "h100-sxm"), (1, 512), 4096)


# --- the roofline (chapter 1) ------------------------------------------------------------------------

def test_roofline_labels_the_ridge_and_the_critical_batch_of_the_chip():
    # ridge C / W: 989.4e12 / 3.35e12 = 295.34 on the H100 SXM, / 4.8e12 = 206.13 on the H200; the weights reach
    # it at B_crit = C b_w / (2 W), the same number in bf16 (kvmath's 295.40 and 206.16 add the norms and the
    # embedding row, within 0.03%); a decode step at batch 1 does 2 P FLOPs on 2 P bytes: I = 1.00
    for chip, w in (("h100-sxm", H100_W), ("h200", H200_W)):
        text = labels(diagrams.roofline(Deployment("llama-3-8b", chip)))
        ridge = H100_C / w
        assert f"ridge \u03b1 = C/W = {ridge:.0f} FLOP/B" in text
        assert f"B = {H100_C * 2 / (2 * w):.0f}\nI = {ridge:.0f}" in text
        assert "I = 1.00" in text
    assert "= 295 FLOP/B" in labels(diagrams.roofline(Deployment("llama-3-8b", "h100-sxm")))
    assert "= 206 FLOP/B" in labels(diagrams.roofline(Deployment("llama-3-8b", "h200")))


def test_roofline_alt_text_says_where_an_moes_critical_batch_sits():
    """Review R22r-15: the alt text said "at the ridge" for every model; an MoE's critical batch is drawn right of
    it. Mixtral 8x7B: the critical batch reaches the ridge's intensity times (P_total - P_emb) / (P_active - P_emb)
    = (46.70e9 - 0.131e9) / (12.88e9 - 0.131e9) = 3.65 (Mistral AI's 46.7B total and 12.9B active parameters;
    the input table 32,000 x 4,096 is only looked up)."""
    alt = diagrams.roofline(Deployment("mixtral-8x7b", "h100-sxm")).alt
    ratio = float(re.search(r"right of the ridge, at ([0-9.]+) times its intensity, compute-bound\.$", alt).group(1))
    assert ratio == pytest.approx((46.70e9 - 0.131e9) / (12.88e9 - 0.131e9), abs=0.06)
    assert diagrams.roofline(Deployment("llama-3-8b", "m2-ultra")).alt.endswith("34, at the ridge.")


# --- KV cache layouts (chapter 5) ----------------------------------------------------------------------

LAYOUTS = ("llama-2-7b", "llama-3-8b", "falcon-7b", "deepseek-v3", "mistral-7b-v0.1")


def test_kv_layouts_label_each_designs_bytes_per_token():
    # 2 h_kv d_h L b: Llama 2 7B 2 * 32 * 128 * 32 * 2 = 524,288 (512 KiB), Llama 3 8B 131,072 (128 KiB),
    # Falcon 7B 2 * 1 * 64 * 32 * 2 = 8,192 (8 KiB); MLA (r + r_rope) L b = (512 + 64) * 61 * 2 = 70,272
    # (68.6 KiB); Mistral 7B keeps 4,096 of 32,768 tokens in every layer: 131,072 / 8 = 16,384 (16 KiB)
    text = labels(diagrams.kv_layouts([Model(n) for n in LAYOUTS], context=32768))
    for design, kib in (("MHA: Llama 2 7B", 512), ("GQA: Llama 3 8B", 128), ("MQA: Falcon 7B", 8)):
        assert design in text and f"{kib} KiB per token" in text
    assert "MLA: DeepSeek-V3" in text and f"{(512 + 64) * 61 * 2 / 1024:.1f} KiB per token" in text
    assert "16 KiB a token at S = 32\u2009768" in text and "32 of 32 layers keep the last 4\u2009096" in text


def test_kv_layouts_follow_the_model_drawn():
    # Llama 3 70B for Llama 3 8B: 2 * 8 * 128 * 80 * 2 = 327,680 bytes (320 KiB). Gemma 2 9B for Mistral:
    # 42 layers of 2 * 8 * 256 * 2 = 8,192 bytes, half of them windowed to 4,096 of 32,768 tokens:
    # 21 * 8,192 + 21 * 8,192 / 8 = 193,536 bytes (189 KiB) a token, 344,064 (336 KiB) reserved
    text = labels(diagrams.kv_layouts([Model("llama-3-70b"), Model("gemma-2-9b")], context=32768))
    assert "GQA: Llama 3 70B" in text and "320 KiB per token" in text
    assert "336 KiB per token" in text and "189 KiB a token at S = 32\u2009768" in text
    assert "21 of 42 layers keep the last 4\u2009096" in text


# --- tensor, pipeline and expert parallelism (chapter 6) ---------------------------------------------------

def _parallel(tensor="tp=8", pipeline="pp=4", expert=("mixtral-8x7b", "dp=8,ep=8"), batch=64):
    return labels(diagrams.parallelism(Deployment("llama-3-70b", "h100-sxm", tensor),
                                       Deployment("llama-3-70b", "h100-sxm", pipeline),
                                       Deployment(expert[0], "h100-sxm", expert[1]), batch=batch))


def test_parallelism_labels_each_collective_by_hand():
    # tp = 8, 64 tokens: 2 x 80 = 160 all-reduces of 64 * 8,192 * 2 = 1,048,576 bytes; pp = 4: a micro-batch of
    # 16 tokens, 3 hops of 16 * 8,192 * 2 = 262,144 bytes; Mixtral dp = ep = 8: 8 tokens a chip, each to top_k 2
    # experts, 8 * 2 * 4,096 * 2 = 131,072 bytes sent from each chip, in each of its 32 MoE layers
    text = _parallel()
    assert "MLP: 160\na step of 1.05 MB each" in text
    assert "3 hops a step" in text and "of 262 kB each" in text
    assert "32 of each a step, 131 kB from each" in text
    assert "top 2 of 8" in text


def test_parallelism_follows_the_layouts():
    # tp = 4 at batch 32: 160 all-reduces of 32 * 8,192 * 2 = 524,288 bytes; pp = 8: micro-batch 4 tokens, 7 hops
    # of 4 * 8,192 * 2 = 65,536 bytes; DeepSeek-V3 dp = ep = 8: 4 tokens a chip, top_k 8, d = 7,168:
    # 4 * 8 * 7,168 * 2 = 458,752 bytes, in its 61 - 3 dense = 58 MoE layers
    text = _parallel("tp=4", "pp=8", ("deepseek-v3", "dp=8,ep=8"), batch=32)
    assert "MLP: 160\na step of 524 kB each" in text
    assert "7 hops a step" in text and "of 66 kB each" in text
    assert "58 of each a step, 459 kB from each" in text


def test_parallelism_refuses_a_deployment_without_its_parallelism():
    with pytest.raises(ValueError, match="pipeline must be a deployment with pp >= 2"):
        diagrams.parallelism(Deployment("llama-3-70b", "h100-sxm", "tp=8"), Deployment("llama-3-70b", "h100-sxm", "tp=8"),
                             Deployment("mixtral-8x7b", "h100-sxm", "dp=8,ep=8"))


# --- continuous batching with chunked prefill (chapter 11) --------------------------------------------------

def test_continuous_batching_draws_each_step_as_long_as_its_bound():
    # the first step decodes 32 sequences of 2,048 tokens and no prompt: 15,009,857,536 + 31 more embedding rows
    # of 8,192 bytes, plus 32 * 2,048 * 131,072 = 8,589,934,592 bytes of cache: 23,600,046,080 / 3.35e12 =
    # 7.0448 ms, / 4.8e12 = 4.9167 ms. The next carries a 1,024-token chunk and is compute-bound: weights
    # 2 * 7,504,658,432 * 32 + 2 * (7,504,658,432 - 525,336,576) * 1,024 (a chunk needs no logits), the decoders'
    # attention 4 h d_h L S * 32 = 34,359,738,368, the chunk's causal 4 h d_h L * 1,024 * 1,025 / 2 =
    # 275,146,342,400: 15,083,455,381,504 FLOPs / 989.4e12 = 15.2451 ms
    matmul = ATTENTION + MLP + LM_HEAD
    decode_bytes = LLAMA3_READ + 31 * ROW * 2 + 32 * 2048 * LLAMA3_KV
    chunk_flops = (2 * matmul * 32 + 2 * (matmul - LM_HEAD) * 1024 + 4 * 32 * 128 * 32 * 2048 * 32
                   + 4 * 32 * 128 * 32 * 1024 * 1025 // 2)
    assert chunk_flops == 15_083_455_381_504
    h100 = diagrams.continuous_batching(Deployment("llama-3-8b", "h100-sxm"), 32, 2048, (2048, 2048), 1024)
    steps = [t for t in h100.texts() if re.fullmatch(r"\d+\.\d\d", t)]  # the step times, in order
    assert len(steps) == 6  # a plain step, two chunks of each prompt, a plain step of 34 sequences
    assert steps[0] == f"{decode_bytes / H100_W * 1e3:.2f}" == "7.04"
    assert steps[1] == f"{chunk_flops / H100_C * 1e3:.2f}" == "15.25"
    h200 = labels(diagrams.continuous_batching(Deployment("llama-3-8b", "h200"), 32, 2048, (2048, 2048), 1024))
    assert f"\n{decode_bytes / H200_W * 1e3:.2f}\n" in h200 and "4.92" in h200
    assert "A: a 2\u2009048-token prompt in chunks, then decoding" in h200
    assert h200.count("1\u2009024") == 4  # two chunks of each prompt


def test_continuous_batching_refuses_an_empty_plan():
    with pytest.raises(ValueError, match="chunk_tokens"):
        diagrams.continuous_batching(Deployment("llama-3-8b", "h100-sxm"), chunk_tokens=0)


# --- a speculative verify step (chapter 10) -------------------------------------------------------------------

def test_speculative_step_labels_expected_tokens_and_the_verify_step():
    # E = (1 - a^(gamma + 1)) / (1 - a): a = 0.8, gamma = 4: (1 - 0.32768) / 0.2 = 3.3616; a = 0.6:
    # (1 - 0.07776) / 0.4 = 2.3056. The verify step at batch 1 reads the weights, 4 more embedding rows and
    # 4,096 tokens of cache: (15,009,857,536 + 4 * 8,192 + 536,870,912) / 3.35e12 = 4.6408 ms, / 4.8e12 = 3.2389 ms
    verify = LLAMA3_READ + 4 * ROW * 2 + 4096 * LLAMA3_KV
    text = labels(diagrams.speculative_step(Deployment("llama-3-8b", "h100-sxm"), 4, 0.8))
    assert "3.36 tokens a step expected" in text and f"verify {ms(verify / H100_W)}" in text
    assert "t3" in text and "t4" not in text  # the outcome drawn: 2 drafts kept, then the target's token
    text = labels(diagrams.speculative_step(Deployment("llama-3-8b", "h200"), 4, 0.6))
    assert f"{(1 - 0.6 ** 5) / 0.4:.2f} tokens a step expected" in text and "2.31" in text
    assert f"verify {ms(verify / H200_W)}" in text and "3.24 ms" in text
    assert "t2" in text and "t3" not in text


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gpt-oss-20b", "deepseek-v3", "kimi-k2"])
def test_roofline_labels_an_moes_critical_batch_clear_of_every_line_and_edge(model):
    """An MoE's critical batch sits right of the ridge (Mixtral 8x7B 3.7 times, Kimi K2 over 30 times on a GB200):
    its label ran past the axes' edge or across the ridge line on every MoE preset (kvbook.plots.layout_problems
    found it on 1,209 roofline drawings, 4 still with five-digit batches before the label took four lines)."""
    for chip in ("h100-sxm", "gb200", "m2-ultra"):
        d = diagrams.roofline(Deployment(model, chip))
        d.figure.canvas.draw()
        assert plots.layout_problems(d.figure) == [], (model, chip)
        plots.close(d.figure)


# --- every diagram: alt text, the phone, the layout ---------------------------------------------------------

CHAPTER = {  # diagram -> (its chapter, its figure's name, the chapter's call)
    "decode_step": ("03_min_step.ipynb", "fig-ms-decode-diagram",
                    lambda: diagrams.decode_step(Deployment("llama-3-8b", "h100-sxm"), (1, 8), 4096)),
    "roofline": ("01_roofline.ipynb", "fig-roofline-diagram",
                 lambda: diagrams.roofline(Deployment("llama-3-8b", "h100-sxm"))),
    "kv_layouts": ("05_sharing_kv_heads.ipynb", "fig-share-layouts",
                   lambda: diagrams.kv_layouts([Model(n) for n in LAYOUTS], context=32768)),
    "parallelism": ("06_prefill_parallel_quant.ipynb", "fig-pq-parallel",
                    lambda: diagrams.parallelism(Deployment("llama-3-70b", "h100-sxm", "tp=8"),
                                                 Deployment("llama-3-70b", "h100-sxm", "pp=4"),
                                                 Deployment("mixtral-8x7b", "h100-sxm", "dp=8,ep=8"), batch=32)),
    "continuous_batching": ("11_serving.ipynb", "fig-serving-chunks",
                            lambda: diagrams.continuous_batching(Deployment("llama-3-8b", "h100-sxm"), 64, 2000,
                                                                 (1024, 1024), 512)),
    "speculative_step": ("10_speculative_decoding.ipynb", "fig-spec-round",
                         lambda: diagrams.speculative_step(Deployment("llama-3.1-8b", "h100-sxm", link=None), 4, 0.8,
                                                           context=1024)),
}

#: A 390 px phone shows the book's column 358 px wide (16 px margins); text must be 9 CSS px there.
PHONE_PX, MIN_PX = 358, 9.0


@pytest.fixture(scope="module", params=sorted(CHAPTER))
def drawn(request):
    notebook, name, make = CHAPTER[request.param]
    return request.param, notebook, name, make()


def test_alt_text_says_what_the_picture_shows_not_the_caption(drawn):
    _, notebook, name, d = drawn
    text = caption(notebook, name)
    assert d.alt and d.alt != text and not d.alt.startswith(text[:40])
    assert "$" not in d.alt and "\\" not in d.alt, d.alt
    assert "fig-" not in d.alt and name not in d.alt
    assert re.search(r"\d", d.alt), "the alt text carries the picture's key numbers"


def test_the_png_carries_the_alt_text_at_hidpi(drawn):
    from PIL import Image

    d = drawn[-1]
    with Image.open(io.BytesIO(d.png())) as im:
        assert im.info["Description"] == d.alt
        assert round(im.info["dpi"][0]) == plots.CSS_DPI * plots.HIDPI


def test_text_is_at_least_9_css_px_on_a_phone(drawn):
    from PIL import Image

    kind, d = drawn[0], drawn[-1]
    with Image.open(io.BytesIO(d.png())) as im:
        natural_css_px = im.size[0] / plots.HIDPI
        # the smallest text in image pixels, as the PNG records it (kvbook.plots.min_text_px)
        smallest_image_px = float(im.text[plots.MIN_TEXT_KEY])
    shown = min(PHONE_PX, natural_css_px)
    smallest_px = smallest_image_px / plots.HIDPI * shown / natural_css_px
    assert smallest_px >= MIN_PX, f"{kind}: its smallest text shows at {smallest_px:.1f} px on a phone"
    # and at least the diagrams' own FONT (11 pt at 200 dpi: 30.56 image px): they write no mathtext, whose
    # sub- and superscripts would shrink below it
    assert smallest_image_px == pytest.approx(diagrams.FONT * plots.CSS_DPI * plots.HIDPI / 72, abs=0.01), kind
    assert "$" not in "".join(d.texts())


def test_no_label_is_clipped_or_collides(drawn):
    assert plots.layout_problems(drawn[-1].figure) == []


# --- the book build writes the PNG's description into the page ------------------------------------------------

def test_the_build_takes_the_alt_text_from_the_png_before_the_caption(tmp_path):
    from types import SimpleNamespace

    from docutils import nodes
    from kvbook.sphinx.book_pages import figures

    d = CHAPTER["roofline"][2]()
    (tmp_path / "drawn.png").write_bytes(d.png())
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(2, 1), dpi=200)
    fig.savefig(tmp_path / "plain.png", dpi=200)
    plt.close(fig)

    def figure_of(uri, alt=None):
        image = nodes.image(uri=uri, candidates={"*": uri})
        if alt:
            image["alt"] = alt
        return nodes.figure("", image, nodes.caption("", "The caption."))

    doctree = nodes.section("", figure_of("drawn.png"), figure_of("plain.png"), figure_of("drawn.png", "given"))
    app = SimpleNamespace(srcdir=str(tmp_path), env=None)
    figures(app, doctree, "page")
    drawn_img, plain_img, given_img = doctree.findall(nodes.image)
    assert drawn_img["alt"] == d.alt and "kvmath-hidpi" in drawn_img["classes"]
    assert plain_img["alt"] == "The caption."
    assert given_img["alt"] == "given"
