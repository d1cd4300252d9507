"""kvmath.measure: the bytes and FLOPs it reports, its input checks, and sane rates.

Timings differ per machine and per run, so nothing here asserts a time; it
asserts what must hold on any machine: the cost of the toy decode step equals
a hand count, bad input fails naming the argument, and measured rates are
positive and finite. Every call is small, so the file runs in a few seconds.
"""

import math

import numpy as np
import pytest

import kvmath
import kvmath.measure as measure


def test_decode_loop_cost_matches_a_hand_count():
    # B = 3 sequences, S = 5 cached tokens, d = 8, L = 2 layers, float32.
    c = measure.decode_loop_cost(batch=3, context=5, d_model=8, n_layers=2)
    weights = 2 * (8 * 16 + 16 * 8)            # per layer a d x 2d and a 2d x d matrix
    assert c.param_count == weights == 512
    assert c.weight_bytes == 512 * 4
    assert c.kv_bytes_per_seq == 2 * 2 * 5 * 8 * 4      # K and V, L layers, S tokens, d wide
    assert c.kv_bytes == 3 * c.kv_bytes_per_seq == 1920
    assert c.bytes_per_step == 2048 + 1920
    assert c.weight_flops == 2 * 3 * 512                 # multiply and add per weight per sequence
    assert c.attention_flops == 2 * (2 * 3 * 5 * 8) * 2  # q.K and p.V, 2 FLOPs per element, L layers
    assert c.flops_per_step == c.weight_flops + c.attention_flops


def test_decode_loop_cost_float64_doubles_the_bytes_not_the_flops():
    f32 = measure.decode_loop_cost(4, 16, 32, 2, bytes_per_elem=4)
    f64 = measure.decode_loop_cost(4, 16, 32, 2, bytes_per_elem=8)
    assert f64.bytes_per_step == 2 * f32.bytes_per_step
    assert f64.flops_per_step == f32.flops_per_step


def test_decode_loop_cost_broadcasts_and_feeds_min_step():
    batches = np.array([1, 2, 4, 8])
    c = measure.decode_loop_cost(batches, 16, 64, 2)
    assert np.array_equal(c.kv_bytes, batches * c.kv_bytes_per_seq)
    assert np.all(np.diff(c.flops_per_step) > 0)
    step = kvmath.formulas.min_step(batches, c.kv_bytes_per_seq, c.weight_bytes, c.param_count, 10e9, 100e9)
    assert np.all(step >= c.bytes_per_step / 10e9 - 1e-15)


def test_decode_loop_bound_is_the_hand_counted_bytes_and_flops_over_the_rates():
    # B = 2, S = 8, d = 16, L = 3, float32: weights 4 d^2 L = 3,072 (12,288 bytes), caches 2 * 2 L S d 4 = 6,144
    # bytes; FLOPs 2 B 3,072 = 12,288 for the weights and 4 B S d L = 3,072 for attention. W = 1,000 bytes/s.
    for c, strict, binds in ((10_000.0, 18.432, "memory"), (500.0, 30.72, "compute")):
        t = measure.decode_loop_bound(2, 8, 1000.0, c, d_model=16, n_layers=3)
        assert math.isclose(float(t.strict_s), strict, rel_tol=1e-12) and t.binds == binds
        assert math.isclose(float(t.kv_read_s), 6.144, rel_tol=1e-12)
        assert math.isclose(float(t.weight_read_s), 12.288, rel_tol=1e-12)
        assert math.isclose(float(t.weight_compute_s), 12_288 / c, rel_tol=1e-12)
        assert math.isclose(float(t.attention_compute_s), 3_072 / c, rel_tol=1e-12)
    # bf16 halves the bytes, not the FLOPs; a batch array gives one bound per batch
    half = measure.decode_loop_bound(2, 8, 1000.0, 10_000.0, d_model=16, n_layers=3, bytes_per_elem=2)
    assert math.isclose(float(half.strict_s), 18.432 / 2, rel_tol=1e-12)
    grid = measure.decode_loop_bound(np.array([1.0, 2.0]), 8, 1000.0, 10_000.0, d_model=16, n_layers=3)
    assert math.isclose(float(grid.strict_s[1]), 18.432, rel_tol=1e-12) and float(grid.strict_s[0]) < 18.432


def test_decode_loop_reports_its_configuration_and_cost():
    r = measure.decode_loop(batch=3, context=5, d_model=32, n_layers=2, steps=3)
    assert (r.batch, r.context, r.d_model, r.n_layers, r.dtype) == (3, 5, 32, 2, "float32")
    assert r.cost == measure.decode_loop_cost(3, 5, 32, 2, 4)
    assert len(r.step_times_s) == 3
    assert r.median_step_s == float(np.median(r.step_times_s))
    assert all(math.isfinite(t) and t > 0 for t in r.step_times_s)
    assert math.isfinite(r.bandwidth) and r.bandwidth > 0
    assert math.isfinite(r.flop_rate) and r.flop_rate > 0


def test_decode_loop_float64_counts_eight_bytes_per_element():
    r = measure.decode_loop(batch=2, context=4, d_model=16, n_layers=1, steps=1, dtype=np.float64)
    assert r.dtype == "float64"
    assert r.cost.weight_bytes == 4 * 16 * 16 * 8


def test_decode_sweep_keeps_order_and_shares_the_weights():
    configs = [(4, 8), (1, 8), (2, 16)]
    rs = measure.decode_sweep(configs, d_model=32, n_layers=1, steps=1)
    assert [(r.batch, r.context) for r in rs] == configs
    assert len({r.cost.weight_bytes for r in rs}) == 1
    assert [r.cost.kv_bytes for r in rs] == [measure.decode_loop_cost(b, s, 32, 1).kv_bytes for b, s in configs]


def test_measured_rates_are_positive_and_finite():
    for method in ("copy", "read"):
        w = measure.memory_bandwidth(n_bytes=4e6, repeats=2, method=method)
        assert math.isfinite(w) and w > 0
    c = measure.matmul_flops(n=64, repeats=2)
    assert math.isfinite(c) and c > 0
    assert measure.matmul_flops(n=32, dtype=np.float64, repeats=1) > 0


def test_cpu_peak_flops_is_cores_clock_fma_units_two_lanes():
    # Hand counts: 2 cores x 2.5 GHz x 2 FMA units x 2 FLOPs x 16 float32 lanes (512 bits) = 320 GFLOP/s.
    assert measure.cpu_peak_flops(2, 2.5e9, 512) == pytest.approx(2 * 2.5e9 * 2 * 2 * 16, rel=1e-12)
    assert measure.cpu_peak_flops(2, 2.5e9, 512) == pytest.approx(320e9, rel=1e-12)
    # AVX2 (8 float32 lanes) halves it; float64 halves it again; one FMA unit halves it again.
    assert measure.cpu_peak_flops(2, 2.5e9, 256) == pytest.approx(160e9, rel=1e-12)
    assert measure.cpu_peak_flops(2, 2.5e9, 256, bytes_per_elem=8) == pytest.approx(80e9, rel=1e-12)
    assert measure.cpu_peak_flops(2, 2.5e9, 256, fma_units=1, bytes_per_elem=8) == pytest.approx(40e9, rel=1e-12)
    cores = np.array([1, 2, 4])
    assert np.allclose(measure.cpu_peak_flops(cores, 3e9, 256), cores * 96e9, rtol=1e-12)


CPUINFO = """processor\t: 0
model name\t: AMD EPYC
cpu MHz\t\t: 2596.096
siblings\t: 4
cpu cores\t: 2
flags\t\t: fpu sse2 fma avx2 avx512f avx512bw

processor\t: 1
model name\t: other
cpu MHz\t\t: 1000.000
flags\t\t: fpu sse2
"""


def test_parse_cpuinfo_reads_the_first_processor_and_guesses_nothing():
    info = measure.parse_cpuinfo(CPUINFO)
    assert info.model == "AMD EPYC"
    assert info.clock_hz == pytest.approx(2596.096e6, rel=1e-12)
    assert info.vector_bits == 512 and info.flags == ("avx2", "avx512f", "fma")
    assert info.threads_per_core == 2                                            # 4 siblings on 2 cores
    assert measure.parse_cpuinfo("siblings : 2\ncpu cores : 2\n").threads_per_core == 1
    assert measure.parse_cpuinfo("cpu cores : 2\n").threads_per_core is None
    assert measure.parse_cpuinfo("flags : sse2 fma avx2\n").vector_bits == 256
    assert measure.parse_cpuinfo("flags : sse2 avx2\n").vector_bits is None        # no FMA: no FMA width
    arm = measure.parse_cpuinfo("processor : 0\nFeatures : fp asimd\n")
    assert (arm.model, arm.clock_hz, arm.vector_bits, arm.flags, arm.threads_per_core) == (None, None, None, (), None)
    assert measure.parse_cpuinfo("") == measure.CpuInfo(None, None, None, (), None)


BAD = [
    (lambda: measure.memory_bandwidth(n_bytes=0), "n_bytes"),
    (lambda: measure.memory_bandwidth(n_bytes=-1e6), "n_bytes"),
    (lambda: measure.memory_bandwidth(n_bytes=math.nan), "n_bytes"),
    (lambda: measure.memory_bandwidth(n_bytes=1e6, repeats=0), "repeats"),
    (lambda: measure.memory_bandwidth(n_bytes=1e6, repeats=2.5), "repeats"),
    (lambda: measure.memory_bandwidth(n_bytes=1e6, method="stream"), "method"),
    (lambda: measure.memory_bandwidth(n_bytes=1e6, threads=0), "threads"),
    (lambda: measure.matmul_flops(n=0), "n"),
    (lambda: measure.matmul_flops(n=10.5), "n"),
    (lambda: measure.matmul_flops(n=16, dtype=np.int8), "dtype"),
    (lambda: measure.matmul_flops(n=16, dtype="bogus"), "dtype"),
    (lambda: measure.matmul_flops(n=16, repeats=-1), "repeats"),
    (lambda: measure.decode_loop(batch=0, context=4), "batch"),
    (lambda: measure.decode_loop(batch=1.5, context=4), "batch"),
    (lambda: measure.decode_loop(batch=1, context=-4), "context"),
    (lambda: measure.decode_loop(batch=1, context=4, d_model=0), "d_model"),
    (lambda: measure.decode_loop(batch=1, context=4, n_layers=0), "n_layers"),
    (lambda: measure.decode_loop(batch=1, context=4, d_model=16, steps=0), "steps"),
    (lambda: measure.decode_loop(batch=1, context=4, d_model=16, dtype=np.int32), "dtype"),
    (lambda: measure.decode_loop(batch=1, context=4, d_model=16, seed=-1), "seed"),
    (lambda: measure.decode_loop_cost(batch=2, context=0), "context"),
    (lambda: measure.decode_loop_cost(batch=2, context=4, bytes_per_elem=0), "bytes_per_elem"),
    (lambda: measure.decode_sweep([]), "configs"),
    (lambda: measure.decode_sweep([(1, 2, 3)]), "configs"),
    (lambda: measure.decode_sweep(5), "configs"),
    (lambda: measure.decode_sweep([(0, 4)], d_model=16), "batch"),
    (lambda: measure.cpu_peak_flops(0, 2e9, 256), "cores"),
    (lambda: measure.cpu_peak_flops(1, -2e9, 256), "clock_hz"),
    (lambda: measure.cpu_peak_flops(1, 2e9, 0), "vector_bits"),
    (lambda: measure.cpu_peak_flops(1, 2e9, 256, fma_units=0), "fma_units"),
    (lambda: measure.cpu_peak_flops(1, 2e9, 256, bytes_per_elem=0), "bytes_per_elem"),
    (lambda: measure.parse_cpuinfo(None), "text"),
    (lambda: measure.stream_verdict(0, 1e9), "w_array"),
    (lambda: measure.stream_verdict(1e9, [1e9, 2e9]), "w_twice"),
    (lambda: measure.stream_verdict(1e9, 1e9, tolerance=1.5), "tolerance"),
]


@pytest.mark.parametrize("call, name", BAD, ids=[f"{i}-{n}" for i, (_, n) in enumerate(BAD)])
def test_bad_input_raises_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_a_threaded_copy_copies_every_element_and_counts_the_same_bytes(monkeypatch):
    # 4 threads over 1,000,003 float64 elements: four chunks that cover the array; the bytes counted are
    # 2 x 8 x 1,000,003 whatever the threads, so the rate is that over the median time
    copied = []
    real = np.copyto
    monkeypatch.setattr(measure.np, "copyto", lambda d, s: (copied.append(d.size), real(d, s)))
    w = measure.memory_bandwidth(n_bytes=8 * 1_000_003, repeats=1, threads=4)
    assert sum(copied) == 2 * 1_000_003 and len(copied) == 8  # one untimed pass and one timed, four chunks each
    assert np.isfinite(w) and w > 0


@pytest.mark.parametrize("w_array, w_twice, verdict", [
    (15.8e9, 16.0e9, "same"),      # the full book's run at 418e30e: 16.0 / 15.8 = 1.013
    (16.0e9, 12.2e9, "slower"),    # the instructor book's: 12.2 / 16.0 = 0.763 < 0.8
    (10.6e9, 15.4e9, "faster"),    # the learner book's (review R21c-4): 15.4 / 10.6 = 1.453 > 1.25, called "the same"
    (10e9, 8e9, "same"), (10e9, 7.9e9, "slower"),       # 8 = 0.8 x 10: at the edge, within
    (10e9, 12.5e9, "same"), (10e9, 12.6e9, "faster"),   # 10 = 0.8 x 12.5: at the edge, within
])
def test_stream_verdict_asks_each_rate_to_be_within_the_tolerance_of_the_other(w_array, w_twice, verdict):
    assert measure.stream_verdict(w_array, w_twice) == verdict
    # which is which matters: the other order turns "slower" into "faster" and back
    swapped = {"same": "same", "slower": "faster", "faster": "slower"}[verdict]
    assert measure.stream_verdict(w_twice, w_array) == swapped
