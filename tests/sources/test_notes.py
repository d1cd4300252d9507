"""Every figure of the min-step notes (shared/reference/errata.md), recomputed.

Hand computations are written next to each assertion; tolerances follow the
precision the notes and errata state (ms to 2-3 decimals, tokens exactly).
"""

import pytest

import kvmath as km

# The notes' 30B example: a TPU v5e 4x4 slice.
N_CHIPS = 16
W = N_CHIPS * 8.2e11
C = N_CHIPS * 1.97e14
KV_PER_SEQ = 8192 * 100e3  # 8192 tokens x 100 kB


def test_kv_flops_and_kv_bytes_are_different_formulas():
    # FLOPs to project K and V for one token: 2 * 2 * L * d^2
    l, d = 64, 8192
    kv_flops = 2 * 2 * l * d**2
    # bytes stored per token in fp16: 2 * 2 * L * h * d_h
    kv_bytes = km.formulas.kv_bytes_per_token(l, 64, 128, 2)
    assert kv_flops == 17_179_869_184
    assert kv_bytes == 2_097_152
    assert kv_flops / kv_bytes == d  # they differ by a factor d_model


def test_b4_is_2_54_ms_only_with_int8_weights():
    int8 = km.formulas.min_step(4, KV_PER_SEQ, 30e9 * 1, 30e9, W, C)
    bf16 = km.formulas.min_step(4, KV_PER_SEQ, 30e9 * 2, 30e9, W, C)
    assert int8 * 1e3 == pytest.approx(2.536, abs=5e-4)
    assert round(int8 * 1e3, 2) == 2.54
    assert bf16 * 1e3 == pytest.approx(4.82, abs=5e-3)
    # at B = 4 the simple all-memory form gives the same
    assert km.formulas.min_step_simple(4, KV_PER_SEQ, 30e9, W) == pytest.approx(int8, rel=1e-12)


def test_b256_is_20_86_ms_not_20_96():
    t = km.formulas.step_breakdown(256, KV_PER_SEQ, 30e9, 30e9, W, C)
    assert t.kv_read_s * 1e3 == pytest.approx(15.98, abs=5e-3)
    assert t.weight_compute_s * 1e3 == pytest.approx(4.87, abs=5e-3)
    assert t.no_overlap_s * 1e3 == pytest.approx(20.86, abs=5e-3)
    assert t.weights_bind == "compute"
    assert abs(t.no_overlap_s * 1e3 - 20.96) > 0.09  # the notes' figure is a slip


def test_scaling_book_21_ms_uses_8_1e11():
    step = km.formulas.min_step(256, KV_PER_SEQ, 30e9, 30e9, N_CHIPS * 8.1e11, C)
    assert step * 1e3 == pytest.approx(21.05, abs=5e-3)


def test_one_symbol_for_bytes_and_count_only_works_for_one_byte_weights():
    # int8: P bytes == P count, so the notes' single P is harmless
    assert km.formulas.weight_bytes(30e9, 1) == 30e9
    # bf16: using the count for P/W halves the memory time
    right = km.formulas.min_step(4, KV_PER_SEQ, km.formulas.weight_bytes(30e9, 2), 30e9, W, C)
    wrong = km.formulas.min_step(4, KV_PER_SEQ, 30e9, 30e9, W, C)
    assert right / wrong == pytest.approx(1.90, abs=0.005)


@pytest.mark.parametrize(
    "flops, bandwidth, b_w, expected, tol",
    [
        (1.97e14, 8.2e11, 2, 240.2, 0.05),  # v5e bf16
        (1.97e14, 8.2e11, 1, 120.1, 0.05),  # v5e int8 weights, bf16 math
        (3.94e14, 8.2e11, 1, 240.2, 0.05),  # v5e int8 x int8
        (989.4e12, 3.35e12, 2, 295.3, 0.05),  # H100 SXM bf16
        (312e12, 1.5e12, 2, 208.0, 1e-9),  # kipply's A100
        (312e12, 1.555e12, 2, 200.6, 0.05),  # A100-40GB datasheet
        (312e12, 2.039e12, 2, 153.0, 0.05),  # A100-80GB
    ],
)
def test_critical_batch(flops, bandwidth, b_w, expected, tol):
    assert km.formulas.critical_batch(flops, bandwidth, b_w) == pytest.approx(expected, abs=tol)


def test_beta_alpha_agrees_only_with_bf16_alpha_and_2x_int8_rate():
    v5e = km.Chip.preset("tpu-v5e").replace(bandwidth=8.2e11)
    # bf16 weights, bf16 math: beta = 1, alpha = C_bf16 / W
    assert km.formulas.critical_batch_beta_alpha(v5e.flops("bf16"), v5e.bandwidth, 2, 2) == pytest.approx(
        km.formulas.critical_batch(v5e.flops("bf16"), v5e.bandwidth, 2), rel=1e-12
    )
    # int8 x int8 on v5e: int8 rate is exactly 2x bf16, so beta * alpha (beta = 1) still agrees
    assert v5e.flops("int8") == 2 * v5e.flops("bf16")
    assert km.formulas.critical_batch(v5e.flops("int8"), v5e.bandwidth, 1) == pytest.approx(
        km.formulas.critical_batch_beta_alpha(v5e.flops("bf16"), v5e.bandwidth, 1, 1), rel=1e-12
    )
    # TPU v4's int8 rate equals its bf16 rate: beta * alpha overstates B_crit 2x
    v4 = km.Chip.preset("tpu-v4")
    exact = km.formulas.critical_batch(v4.flops("int8"), v4.bandwidth, 1)
    notes = km.formulas.critical_batch_beta_alpha(v4.flops("bf16"), v4.bandwidth, 1, 1)
    assert notes / exact == pytest.approx(2.0, rel=1e-12)


def test_52b_weights_chips_and_kv_budget():
    weights = km.formulas.weight_bytes(52e9, 2)
    assert weights == 104e9
    assert km.formulas.min_chips_for_weights(weights, 40e9) == 3
    assert km.formulas.kv_budget_bytes(3, 40e9, weights) == pytest.approx(16e9, rel=1e-12)
    # the notes' model, computed from its config, is within 0.2% of 52e9
    assert km.Model.preset("kipply-52b").param_count() == pytest.approx(52e9, rel=2e-3)


def test_52b_kv_per_token_is_2_mib():
    per_token = km.formulas.kv_bytes_per_token(64, 64, 128, 2)
    assert per_token == 2_097_152 == 2 * 2**20
    assert per_token / 1e9 == pytest.approx(0.002097, abs=5e-7)  # "0.002 GB" is loose rounding
    assert km.Model.preset("kipply-52b").kv_bytes_per_token() == per_token


def test_7629_tokens_not_8000():
    per_token = 2 * 2**20
    assert km.formulas.max_kv_tokens(16e9, per_token) == 7629  # 16e9 / 2,097,152 = 7629.39
    assert km.formulas.max_kv_tokens(16e9, 0.002e9) == 8000  # only with the rounded 0.002 GB
    assert km.formulas.max_kv_tokens(16 * 2**30, per_token) == 8192  # if 16 GB were GiB


def test_batch_of_four_2048_token_sequences_fits_only_in_16_gib():
    per_seq = 2048 * 2 * 2**20
    assert 4 * per_seq == 16 * 2**30
    assert 4 * per_seq / 1e9 == pytest.approx(17.18, abs=0.005)
    assert km.formulas.max_batch(16 * 2**30, per_seq) == 4
    assert km.formulas.max_batch(16e9, per_seq) == 3


def test_gqa_group_of_8_cuts_kv_8x():
    mha = km.Model.preset("kipply-52b")
    gqa = mha.with_kv_heads(8)
    assert gqa.kv_bytes_per_token() == 256 * 2**10  # 256 KiB
    assert mha.kv_bytes_per_token() / gqa.kv_bytes_per_token() == 8
    assert gqa.attention == "gqa" and gqa.group_size == 8
