"""Benchmark: the spine's speed targets (issue 20), each measured side by side in one run, as ratios and medians.

Run: python benchmarks/bench_spine.py [rounds] [--wall]   (default 15 rounds, CPU time; about a minute)

1. One decode step of Llama 2 70B on 8 H100s (tp = 8), B = 64, S = 4,096, on
   scalars, the deployment built once outside the timed loop (goal: at most
   30 us), and building the deployment from preset names (goal: at most
   200 us); against llm-analysis' ``inference()`` on the same question in the
   same run where it is installed (goal: at least 5x faster). llm-analysis is
   a benchmark-only peer, not a dependency: install it in a venv of its own
   (``python3 -m venv /tmp/peer && /tmp/peer/bin/pip install llm-analysis``, 0.2.2 here)
   and pass its site-packages as PEER_SITE=/tmp/peer/lib/python3.11/site-packages.
2. The 10^6-configuration grid (1,000 batches x 1,000 contexts) of the strict
   step, against a reference numpy expression of the same strict formula
   written here (fresh output arrays, no checks; goal: at most 2x) and against
   numpy writing the float64 answer once (goal: at most 20x); and the notes'
   ``formulas.min_step`` on the same grid against the bare numpy expression of
   its formula (goal: at most 2x).
3. Peak memory (tracemalloc) of 10^7 configurations in one call: the strict
   time only (goal: at most 4x one float64 array of 10^7) and the full step
   (goal: at most 2x the result's own arrays).

Times are medians over rounds in which the contenders run back to back, in
turn, so a busy machine slows all of them alike; the ratios are the point
(absolute times on a shared machine are noise). Start-up (``import kvmath``
and the command line) is ``benchmarks/bench_startup.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

import kvmath
from kvmath import formulas

ROUNDS = int(next((a for a in sys.argv[1:] if a.isdigit()), 15))


#: The clock: CPU time of this process (``time.process_time``), which other processes on a shared machine
#: disturb far less than wall time; ``--wall`` in the arguments uses ``time.perf_counter`` instead.
CLOCK = time.perf_counter if "--wall" in sys.argv else time.process_time


def per_call(fn, number: int) -> float:
    """Seconds per call of ``fn``, over ``number`` calls (one sample)."""
    start = CLOCK()
    for _ in range(number):
        fn()
    return (CLOCK() - start) / number


def interleave(contenders: dict, number: int, rounds: int = ROUNDS) -> dict:
    """Median seconds per call of each contender, measured in turn round after round."""
    samples = {name: [] for name in contenders}
    for r in range(rounds):
        names = list(contenders)
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
            samples[name].append(per_call(contenders[name], number))
    return {name: statistics.median(v) for name, v in samples.items()}


def verdict(value: float, goal: float, at_most: bool = True) -> str:
    met = value <= goal if at_most else value >= goal
    return f"(goal {'<=' if at_most else '>='} {goal:g}: {'met' if met else 'NOT met'})"


# ----- 1. one configuration --------------------------------------------------------

def one_configuration() -> None:
    dep = kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8")
    contenders = {
        "step": lambda: dep.step(64, 4096),
        "build": lambda: kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8"),
    }
    peer = _llm_analysis()
    if peer is not None:
        contenders["llm-analysis inference()"] = peer
    med = interleave(contenders, number=200)
    print("1. One decode step: Llama 2 70B, 8 H100 (tp=8), B = 64, S = 4,096, scalars")
    print(f"   Deployment.step (built once)      {med['step'] * 1e6:8.1f} us  {verdict(med['step'] * 1e6, 30)}")
    print(f"   Deployment(...) from preset names {med['build'] * 1e6:8.1f} us  {verdict(med['build'] * 1e6, 200)}")
    if peer is None:
        print("   llm-analysis: not installed (see this file's docstring); no peer ratio this run")
    else:
        ratio = med["llm-analysis inference()"] / med["step"]
        print(f"   llm-analysis inference()          {med['llm-analysis inference()'] * 1e6:8.1f} us")
        print(f"   llm-analysis / kvmath             {ratio:8.1f} x   {verdict(ratio, 5, at_most=False)}")


def _llm_analysis():
    """llm-analysis' ``inference()`` on the same question, or None where it is not installed."""
    site = os.environ.get("PEER_SITE")
    if site:
        sys.path.append(site)  # appended: kvmath's own numpy stays first
    try:
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name
    except Exception:  # not installed, or its own imports fail: the run goes on without the peer
        return None
    import logging

    logging.disable(logging.WARNING)  # it logs a table per call
    m = kvmath.Model.preset("llama-2-70b")  # the same configuration kvmath uses (its config.json)
    config = ModelConfig(name=m.name, num_layers=m.n_layers, n_head=m.n_heads, hidden_dim=m.d_model,
                         vocab_size=m.vocab, max_seq_len=None, num_key_value_heads=m.n_kv_heads,
                         ffn_embed_dim=m.d_ff, expansion_ratio=m.d_ff / m.d_model, model_type="llama")
    analysis = LLMAnalysis(config, get_gpu_config_by_name("h100-sxm-80gb"), get_dtype_config_by_name("w16a16e16"),
                           ParallelismConfig(tp_size=8))
    # its KV holds seq_len + num_tokens_to_generate tokens: one token on a 4,095-token prompt is S = 4,096
    return lambda: analysis.inference(batch_size_per_gpu=64, seq_len=4095, num_tokens_to_generate=1)


# ----- 2. the 10^6 grid --------------------------------------------------------------

def grid() -> None:
    dep = kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8", link=None)
    batch = np.arange(1.0, 1001.0)[:, None]
    context = np.round(np.linspace(128.0, 131072.0, 1000))[None, :]  # whole tokens
    # the reference: the same strict formula in bare numpy, constants taken from the model as a reader would
    m, chip = dep.model, dep.chip
    w_bytes = m.weight_bytes_read(1, "bf16") / 8         # per chip (dense: the reads do not grow with B... )
    embedding_row = m.d_model * 2 / 8                    # ...but for one embedding row per token
    kv_token = m.kv_bytes_per_token(2) / 8              # 8 KV heads over 8 chips
    att_token = m.attention_flops_per_token(1) / 8
    matmul = 2 * m.matmul_params_per_token() / 8
    bw, rate = chip.bandwidth, dep.flops

    def reference():
        memory = (batch * (context * kv_token) + (w_bytes + (batch - 1) * embedding_row)) / bw
        compute = (batch * (context * att_token) + batch * matmul) / rate
        return np.maximum(memory, compute)

    out = np.empty((1000, 1000))
    np.testing.assert_allclose(dep.strict_s(batch, context), reference(), rtol=1e-12)
    kv_seq = context * m.kv_bytes_per_token(2)
    params = m.param_count()
    w, c = 8 * chip.bandwidth, 8 * chip.flops()

    def bare_min_step():
        return batch * kv_seq / w + np.maximum(2 * params / w, 2 * params * batch / c)

    np.testing.assert_allclose(formulas.min_step(batch, kv_seq, 2 * params, params, w, c), bare_min_step(),
                               rtol=1e-12)
    med = interleave({
        "strict": lambda: dep.strict_s(batch, context),
        "reference": reference,
        "write": lambda: out.fill(1.0),
        "min_step": lambda: formulas.min_step(batch, kv_seq, 2 * params, params, w, c),
        "bare min_step": bare_min_step,
        "full step": lambda: dep.step(batch, context),
    }, number=3)
    print("2. The 10^6 grid (1,000 batches x 1,000 contexts), Llama 2 70B on 8 H100s")
    r1, r2 = med["strict"] / med["reference"], med["strict"] / med["write"]
    print(f"   Deployment.strict_s               {med['strict'] * 1e3:8.2f} ms")
    print(f"   reference numpy expression        {med['reference'] * 1e3:8.2f} ms   ratio {r1:5.2f}  {verdict(r1, 2)}")
    print(f"   numpy writes the answer once      {med['write'] * 1e3:8.2f} ms   ratio {r2:5.1f}  {verdict(r2, 20)}")
    r3 = med["min_step"] / med["bare min_step"]
    print(f"   formulas.min_step                 {med['min_step'] * 1e3:8.2f} ms")
    print(f"   bare numpy min-step expression    {med['bare min_step'] * 1e3:8.2f} ms   ratio {r3:5.2f}  {verdict(r3, 2)}")
    print(f"   Deployment.step (every term)      {med['full step'] * 1e3:8.2f} ms   "
          f"({med['full step'] / med['strict']:.1f}x the strict time alone)")


# ----- 3. memory at 10^7 -------------------------------------------------------------

def peak_bytes(fn) -> tuple[int, object]:
    tracemalloc.start()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, result


def memory() -> None:
    dep = kvmath.Deployment("llama-2-70b", "h100-sxm", "tp=8")
    batch = np.arange(1.0, 10001.0)[:, None]
    context = np.round(np.linspace(128.0, 131072.0, 1000))[None, :]  # whole tokens
    one = 10**7 * 8
    strict_peak, _ = peak_bytes(lambda: dep.strict_s(batch, context))
    full_peak, step = peak_bytes(lambda: dep.step(batch, context))
    own = sum(v.nbytes for v in vars(step).values() if isinstance(v, np.ndarray)) if hasattr(step, "__dict__") else \
        sum(getattr(step, f).nbytes for f in step.__dataclass_fields__ if isinstance(getattr(step, f), np.ndarray))
    print("3. Peak memory (tracemalloc) of 10^7 configurations in one call")
    print(f"   strict time only                  {strict_peak / 1e6:8.1f} MB = {strict_peak / one:4.2f} x one float64 "
          f"array of 10^7  {verdict(strict_peak / one, 4)}")
    print(f"   every term                        {full_peak / 1e6:8.1f} MB = {full_peak / own:4.2f} x the result's own "
          f"arrays ({own / 1e6:.0f} MB)  {verdict(full_peak / own, 2)}")


if __name__ == "__main__":
    clock = "wall time" if CLOCK is time.perf_counter else "CPU time"
    print(f"kvmath {kvmath.__version__}, numpy {np.__version__}; {clock}, medians over {ROUNDS} interleaved rounds\n")
    one_configuration()
    print()
    grid()
    print()
    memory()
