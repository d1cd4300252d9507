"""Speculative decoding: Leviathan et al.'s improvement factor, tree verification, the break-even batch.

Expected values are hand computations written out in each test, with the
tolerance stated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvmath as km
from kvmath.speculative import speculation_break_even_batch

H100_8B = km.Deployment("llama-3-8b", "h100-sxm")


def test_improvement_factor_reproduces_leviathan_table_2():
    # T5-small drafting for T5-XXL (EnDe, argmax): a = 0.75, gamma = 7, measured 3.4x.
    # 0.75**8 = 0.1001129150390625, E = 0.8998870849609375 / 0.25 = 3.59954833984375;
    # c = 77e6 / 11e9 = 0.007, 7c + 1 = 1.049: 3.43141...
    f = km.formulas.speculative_improvement_factor(0.75, 7, 77e6 / 11e9)
    assert f == pytest.approx(3.59954833984375 / 1.049, rel=1e-12)
    assert round(f, 1) == 3.4


def test_improvement_factor_limits():
    # c = 0: the expected tokens; gamma = 1: (1 + a) / (1 + c) (Leviathan et al., Corollary 3.9's form)
    assert km.formulas.speculative_improvement_factor(0.8, 4, 0.0) == pytest.approx(3.3616, rel=1e-12)
    assert km.formulas.speculative_improvement_factor(0.85, 1, 0.1) == pytest.approx(1.85 / 1.1, rel=1e-12)
    grid = km.formulas.speculative_improvement_factor(0.8, np.array([1, 2, 4]), 0.05)
    assert grid.shape == (3,)
    with pytest.raises(ValueError, match="cost_ratio"):
        km.formulas.speculative_improvement_factor(0.8, 4, -0.1)
    with pytest.raises(ValueError, match="acceptance"):
        km.formulas.speculative_improvement_factor(1.5, 4, 0.1)


def test_the_default_verify_step_is_the_chain_of_gamma_plus_one():
    a = H100_8B.speculate(64, 1024, 4, 0.8)
    b = H100_8B.speculate(64, 1024, 4, 0.8, verify_tokens=5)
    assert a.speedup == b.speedup and a.verify_step_s == b.verify_step_s


def test_a_tree_verifies_more_tokens_than_it_keeps():
    tree = H100_8B.speculate(np.array([1.0, 16.0]), 128, 4, None, verify_tokens=64, tokens_per_step=3.0)
    # batch 1: 64 tokens x 2 x 7.5e9 FLOPs = 0.97 ms of math under a 4.8 ms weight read: memory-bound,
    # so the speed-up is the 3 tokens (to 0.1%: the verify step looks up 63 more embedding rows)
    assert tree.speedup[0] == pytest.approx(3.0, rel=1e-3)
    # batch 16: 1,024 tokens through the weights, 15.5 ms of math: compute-bound, the tree loses
    assert tree.speedup[1] < 1
    assert tree.verify_step_s[1] == pytest.approx(H100_8B.step(16, 128, tokens_per_seq=64).strict_s, rel=1e-12)


@pytest.mark.parametrize("kwargs, words", [
    (dict(verify_tokens=4), "verify_tokens"), (dict(verify_tokens=0), "verify_tokens"),
    (dict(tokens_per_step=6.0, acceptance=None), "tokens_per_step"),
    (dict(tokens_per_step=0.0, acceptance=None), "tokens_per_step"),
    # a verify step keeps at least the target's own token: 0.5 tokens a step is no measurement
    (dict(tokens_per_step=0.5, acceptance=None), "tokens_per_step"),
    (dict(tokens_per_step=[1.5, 0.9], acceptance=None), "tokens_per_step"),
    (dict(tokens_per_step=float("nan"), acceptance=None), "tokens_per_step"),
    (dict(acceptance=None), "acceptance"),
    # both given: which one counts? Refused rather than silently dropping the acceptance (even a bad one)
    (dict(tokens_per_step=3.0, acceptance=0.8), "acceptance"), (dict(tokens_per_step=3.0, acceptance=2.0), "acceptance"),
    # the plain and verify steps set their own tokens per sequence: speculate takes none (a TypeError naming it)
    (dict(tokens_per_seq=3), "tokens_per_seq"),
])
def test_tree_options_refuse_bad_input_by_name(kwargs, words):
    args = dict(batch=1, context=128, gamma=4, acceptance=0.8)
    args.update(kwargs)
    with pytest.raises(TypeError if "tokens_per_seq" in kwargs else ValueError, match=words):
        H100_8B.speculate(**args)


def test_dense_break_even_at_short_context_is_b_crit_times_e_over_gamma_plus_one():
    # with no cache to read the plain step is a weight read, P b_w / W, and the verify step
    # compute-bound, 2 P (gamma + 1) B / C: equal speed-up 1 at B = B_crit E / (gamma + 1)
    # = (989.4e12 x 2 / (2 x 3.35e12)) x 3.3616 / 5 = 198.57 (0.2%: one token of cache, embedding rows)
    b = speculation_break_even_batch(H100_8B, 1, 4, 0.8)
    assert b == pytest.approx(989.4e12 / 3.35e12 * 3.3616 / 5, rel=2e-3)


def test_moe_break_even_is_the_last_crossing_where_the_speedup_first_dips():
    dep = km.Deployment("deepseek-v3", "h100-sxm", "tp=8", weights="fp8", link=None)  # the old n_chips=8
    # batch 3: a plain step touches 8 x 3 = 24 at most of 256 experts per layer, the verify step's
    # 15 tokens about 256 (1 - (248/256)^15) = 98: the verify step is dearer than its 3.36 tokens
    dip = dep.speculate(3, 128, 4, 0.8).speedup
    assert dip < 1
    b = speculation_break_even_batch(dep, 128, 4, 0.8)
    s = dep.speculate(np.array([b / 2, b, 2 * b]), 128, 4, 0.8).speedup
    assert b > 1000  # past the MoE critical batch, not at the dip
    assert s[0] > 1 and s[1] == pytest.approx(1, abs=1e-6) and s[2] < 1
    # a = 0.7 loses at batch 1 (2.77 tokens for a verify step of about 3.0 plain steps) and pays later:
    # the break-even exists all the same
    assert dep.speculate(1, 128, 4, 0.7).speedup < 1
    assert speculation_break_even_batch(dep, 128, 4, 0.7) > 1000


def test_break_even_of_a_tree_and_no_break_even_at_long_context():
    b = speculation_break_even_batch(H100_8B, 128, 4, None, verify_tokens=64, tokens_per_step=3.0)
    assert 8 < b < 16  # by the test above: pays at 8... loses at 16
    with pytest.raises(ValueError, match="still pays"):  # the cache read dominates both steps
        speculation_break_even_batch(H100_8B, 8192, 4, 0.8)


def test_break_even_is_none_on_request_where_speculation_always_pays():
    # the same long context as above: with the keyword the solver says "none below 10**7" as None
    assert speculation_break_even_batch(H100_8B, 8192, 4, 0.8, none_if_always_pays=True) is None
    # where a break-even exists the keyword changes nothing: the same bisection, the same float
    assert (speculation_break_even_batch(H100_8B, 1, 4, 0.8, none_if_always_pays=True)
            == speculation_break_even_batch(H100_8B, 1, 4, 0.8))
    # the keyword must be a bool
    with pytest.raises(ValueError, match="none_if_always_pays"):
        speculation_break_even_batch(H100_8B, 128, 4, 0.8, none_if_always_pays="yes")


@pytest.mark.parametrize("kwargs, words", [
    (dict(context=[128, 256]), "context"), (dict(context=[[128], [256]]), "context"),
    (dict(acceptance=[0.8, 0.9]), "acceptance"), (dict(acceptance=[[0.8], [0.9]]), "acceptance"),
    (dict(acceptance=None, verify_tokens=64, tokens_per_step=[[3.0], [4.0]]), "tokens_per_step"),
    (dict(overhead_s=[[0.0], [1e-3]]), "overhead_s"), (dict(batch=4), "batch"), (dict(tokens_per_seq=2), "tokens_per_seq"),
])
def test_break_even_refuses_arrays_and_the_batch_by_name(kwargs, words):
    # one break-even batch: an (n, 1) array would broadcast against the batch grid and, before this
    # check, failed inside the solver with numpy's "truth value of an array ... is ambiguous"
    args = dict(context=128, gamma=4, acceptance=0.8)
    args.update(kwargs)
    # tokens_per_seq is no option of speculate any more: refused as an unexpected keyword that names it
    with pytest.raises(TypeError if "tokens_per_seq" in kwargs else ValueError, match=words):
        speculation_break_even_batch(H100_8B, **args)


# ---- a separate draft's own cost: its weights and its cache (review C10-1) ----

def _llama_params(L, d, h, kv, dh, ff, V, tied):
    """Parameters from a config's shape: attention, SwiGLU MLP, two norms a layer, the final norm, the tables."""
    per_layer = 2 * d * h * dh + 2 * d * kv * dh + 3 * d * ff + 2 * d
    return L * per_layer + V * d * (1 if tied else 2) + d


def test_a_draft_takes_memory_and_a_cache_of_its_own_beside_the_target():
    # Llama 3.1 8B (32 layers, 4096, 32/8 heads of 128, 14336, vocab 128256) and Llama 3.2 1B (16 layers,
    # 2048, 32/8 heads of 64, 8192, tied), bf16, on one H100 (80e9 B marketed), 8,192 tokens
    target, draft = _llama_params(32, 4096, 32, 8, 128, 14336, 128256, False), _llama_params(16, 2048, 32, 8, 64,
                                                                                                 8192, 128256, True)
    kv_target, kv_draft = 2 * 32 * 8 * 128 * 2, 2 * 16 * 8 * 64 * 2  # 128 KiB and 32 KiB a token
    alone = math.floor((80e9 - 2 * target) / (8192 * kv_target))
    both = math.floor((80e9 - 2 * target - 2 * draft) / (8192 * (kv_target + kv_draft)))
    assert (alone, both) == (59, 45)
    dep = km.Deployment("llama-3.1-8b", "h100-sxm")
    c = dep.capacity(8192, draft="llama-3.2-1b")
    assert int(dep.capacity(8192).max_batch) == alone and int(c.max_batch) == both
    assert c.weight_bytes_per_chip == pytest.approx(2 * (target + draft), rel=1e-12)
    assert c.kv_bytes_per_seq == 8192 * (kv_target + kv_draft)


def test_capacity_with_a_draft_refuses_what_it_does_not_size_by_name():
    dep = km.Deployment("llama-3.1-8b", "h100-sxm")
    with pytest.raises(ValueError, match="draft"):
        dep.capacity(8192, draft="llama-3.2-1b", engine="vllm")
    with pytest.raises(ValueError, match="draft"):
        dep.capacity(8192, draft="no-such-model")


def test_an_unknown_draft_preset_is_refused_naming_the_draft():
    """A misspelt draft preset names the argument, as every other bad draft does (found by the contract fuzz)."""
    import pytest

    import kvmath

    with pytest.raises(ValueError, match=r"^draft: unknown model 'llama2-7b'; did you mean 'llama-2-7b'"):
        kvmath.Deployment("codellama-7b", "h100-sxm").speculate(1, 128, 4, 0.8, draft="llama2-7b")
