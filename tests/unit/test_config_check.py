"""kvmath.config_check and `kvmath check config`: one test per error calculators make, each failing if kvmath
made it (its own figure is the hand value and differs from the error's), and the command line's contract."""

from __future__ import annotations

import json

import pytest

from kvmath.cli import main
from kvmath.config_check import check_config
from kvmath.layers import LAYER_KINDS
from tests.unit.test_hf_config import GPT_OSS, NEXT, path

NEXT_PATH = str(path("Qwen--Qwen3-Next-80B-A3B-Instruct"))
V3_PATH = str(path("deepseek-ai--DeepSeek-V3"))
GPT_OSS_PATH = str(path("openai--gpt-oss-20b"))


def test_hybrid_linear_layers_counted_as_full():
    # Qwen3-Next: 48 layers x 2 x 2 x 256 x 2 B = 98,304 B per token if every layer were attention;
    # kvmath: the 12 full layers only, 24,576 B
    r = check_config(NEXT, "kv_bytes_per_token", 98_304)
    assert r.kvmath == 24_576 and not r.matches
    assert "linear-attention layers are counted as full attention" in r.explained_by
    assert r.explanation.startswith("kvmath gives 24,576 B; your 98,304 B is what the config gives when "
                                    "linear-attention layers")


def test_sliding_windows_ignored():
    # gpt-oss-20b at 131,072 tokens: 24 x 2,048 x 131,072 = 6,442,450,944 B with windows ignored;
    # kvmath 12 x 2,048 x (128 + 131,072) = 3,224,371,200 B
    r = check_config(GPT_OSS, "seq_bytes", 6_442_450_944, tokens=131_072)
    assert r.kvmath == 3_224_371_200
    assert "sliding windows and chunks are ignored (every layer holds every token)" in r.explained_by
    assert r.terms == {"sliding": 12 * 2048 * 128, "full": 12 * 2048 * 131072}


def test_mla_read_as_full_attention():
    # DeepSeek-V3: 61 x 128 heads x (128 + 64 + 128) x 2 B = 4,997,120 B per token as MHA; kvmath 61 x 576 x 2
    r = check_config(V3_PATH, "kv_bytes_per_token", 4_997_120)
    assert r.kvmath == 70_272 and r.explained_by == ["MLA is read as full multi-head attention"]


def test_stored_precision_ignored():
    # gpt-oss-20b as published: experts in mxfp4 (the mirror's quantization_config put back as upstream's);
    # issue 23: 41.8 GB in bf16 where it is 13.7 GB as stored
    cfg = {**GPT_OSS, "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    bf16 = check_config(cfg, "weight_bytes", 1e9).readings[
        "every weight is sized in the config's torch_dtype (bf16), not as stored"]
    r = check_config(cfg, "weight_bytes", bf16)
    assert round(r.kvmath / 1e9, 1) == 13.7 and round(r.figure / 1e9, 1) == 41.8
    assert r.explained_by == ["every weight is sized in the config's torch_dtype (bf16), not as stored"]


def test_cache_precision_misread():
    # the Qwen3-Next cache in fp32: 12 x 2 x 2 x 256 x 4 = 49,152 B per token
    r = check_config(NEXT, "kv_bytes_per_token", 49_152)
    assert r.explained_by == ["the cache is stored in 4 byte(s) per element instead of 2"]


@pytest.mark.skipif("shared" not in LAYER_KINDS, reason="the shared-KV layer kind comes with the configs branch")
def test_shared_kv_layers_counted_twice():
    # a layer reading an earlier layer's cache holds none: 4 full layers and 4 sharing theirs, 2 x 8 x 128 x 2 =
    # 4,096 B per layer and token; counted with caches of their own, 8 x 4,096 = 32,768 B
    from kvmath import Model
    from kvmath.layers import LayerSpec

    full, shared = LayerSpec("full", 32, 8, 128), LayerSpec("shared", 32, 8, 128)
    m = Model("shared-kv", 8, 4096, 32, 8, 128, 14336, 128256, attention="gqa", layers=(full,) * 4 + (shared,) * 4)
    from kvmath.config_check import LAYER_READINGS, _model_with, _read_layers

    read = _model_with(m, _read_layers(m, LAYER_READINGS["shared-KV layers are counted with a cache of their own"]))
    assert m.kv_bytes_per_token() == 16_384 and read.kv_bytes_per_token() == 32_768


def test_vllm_tokens_of_the_published_log_and_as_full_attention():
    # the vLLM 0.10.2 log (tests/data/vllm_logs.json): 973,760 tokens from 44.59 GiB at TP=2; a calculator
    # counting all 48 layers as full attention: blocks of 16 x 1,024 B x 48 layers, 60,880 -> 974,080 tokens
    kw = dict(available_kv_bytes=44.59 * 2**30, max_model_len=262_144, tensor_parallel=2,
              max_num_batched_tokens=8192)
    assert check_config(NEXT, "vllm_tokens", 973_760, **kw).matches
    r = check_config(NEXT, "vllm_tokens", 974_080, **kw)
    assert not r.matches and r.explained_by == ["linear-attention layers are counted as full attention"]


def test_the_old_tokens_line_cannot_tell_the_hybrid_misreadings_apart_and_concurrency_can(capsys):
    """Review J23-4. With unified pages vLLM's v0.10-v0.20 tokens line is num_blocks // groups x block, and
    groups x group size = all layers, so it is the memory over every layer paged as full attention, up to whole
    blocks. gpt-oss-20b (12 sliding + 12 full layers, 8 KV heads of 64, 2,048 B per token and layer) at 56.76 GiB,
    131,072 tokens, 8,192 batched, by hand: page 16 x 2,048 = 32,768 B; groups of 12, 2 groups;
    floor(floor(60,945,538,007 / 32,768) / 12) = floor(1,859,910 / 12) = 154,992 blocks; tokens 154,992 // 2 x 16
    = 1,239,936. Every layer full: page 32,768, one group of 24, floor(1,859,910 / 24) = 77,496 blocks x 16 =
    1,239,936, the same number. Concurrency tells them apart: a request takes cdiv(131,072, 16) = 8,192 full
    blocks + cdiv(127 + 8,192, 16) + 1 = 521 sliding = 8,713: 154,992 / 8,713 = 17.79x, against 77,496 / 8,192 =
    9.46x with the windows ignored."""
    avail = 56.76 * 2**30
    kw = dict(available_kv_bytes=avail, max_model_len=131_072, max_num_batched_tokens=8192)
    ignored = "sliding windows and chunks are ignored (every layer holds every token)"
    off = "the hybrid KV-cache manager is off (--disable-hybrid-kv-cache-manager)"
    r = check_config(GPT_OSS, "vllm_tokens", 1_239_936, **kw)
    assert r.matches and r.kvmath == 1_239_936 and r.readings[ignored] == r.readings[off] == 1_239_936
    assert {ignored, off} <= set(r.indistinguishable) and "cannot tell those readings" in r.explanation
    c = check_config(GPT_OSS, "vllm_concurrency", 9.46, **kw)
    assert not c.matches and round(c.kvmath, 2) == 17.79 and set(c.explained_by) >= {ignored, off}
    assert not c.indistinguishable
    assert check_config(GPT_OSS, "vllm_concurrency", 17.79, **kw).matches
    assert not check_config(GPT_OSS, "vllm_concurrency", 17.80, **kw).matches  # printed to 0.01: 17.79 +- 0.005
    # the command line marks the reading that equals kvmath's instead of offering it as an explanation
    args = ["check", "config", GPT_OSS_PATH, "--available-gib", "56.76", "--max-model-len", "131072",
            "--max-num-batched-tokens", "8192"]
    assert main(args + ["--vllm-tokens", "100"]) == 1
    out = capsys.readouterr().out
    assert f"1,239,936 tokens  {ignored}  (= kvmath's: this figure cannot tell it apart)" in out
    assert main(args + ["--vllm-concurrency", "9.46"]) == 1
    out = capsys.readouterr().out
    assert "kvmath gives 17.79x; your 9.46x is what the config gives when" in out and ignored in out
    assert main(["check", "config", GPT_OSS_PATH, "--vllm-concurrency", "9.46"]) == 2  # needs --available-gib
    assert "--vllm-concurrency needs --available-gib" in capsys.readouterr().err


def test_vllm_tokens_read_as_memory_over_bytes_per_token():
    # the same log read without pages or groups: 44.59 GiB over Qwen3-Next's 24,576 B a token (12 full layers x
    # 2 x 2 KV heads x 256 x 2 B) split over the 2 ranks, 12,288 B: 47,878,147,932.16 / 12,288 = 3,896,333.65,
    # 3,896,333 whole tokens
    kw = dict(available_kv_bytes=44.59 * 2**30, max_model_len=262_144, tensor_parallel=2,
              max_num_batched_tokens=8192)
    r = check_config(NEXT, "vllm_tokens", 973_760, **kw)
    assert r.readings["tokens are the memory over the bytes per token (no pages, no groups)"] == 3_896_333


def test_a_figure_matches_within_rtol_of_the_larger_inclusive():
    # kvmath's 24,576 B a token: 0.4% more is within the default 0.5% of the larger figure; with rtol 0.5, twice
    # it differs by exactly half the larger (24,576 of 49,152) and matches, a hair more does not
    assert check_config(NEXT, "kv_bytes_per_token", 24_576 * 1.004).matches
    assert not check_config(NEXT, "kv_bytes_per_token", 24_576 * 1.006).matches
    assert check_config(NEXT, "kv_bytes_per_token", 49_152, rtol=0.5).matches
    assert not check_config(NEXT, "kv_bytes_per_token", 49_152.01, rtol=0.5).matches


# ----- the command line -------------------------------------------------------------------------

def test_cli_text_json_and_exit_codes(capsys):
    # a figure that disagrees exits 1 (a script or CI can act on it); one that agrees 0
    assert main(["check", "config", NEXT_PATH, "--kv-bytes-per-token", "98304"]) == 1
    out = capsys.readouterr().out
    assert "when linear-attention layers are counted as full attention" in out and "24,576 B" in out
    assert main(["check", "config", NEXT_PATH, "--kv-bytes-per-token", "24576"]) == 0
    capsys.readouterr()
    assert main(["check", "config", NEXT_PATH, "--seq-bytes", "64684032", "--tokens", "1024", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == check_config(NEXT_PATH, "seq_bytes", 64_684_032, tokens=1024).to_dict() and data["matches"]


#: The vLLM 0.10.2 log's settings (tests/data/vllm_logs.json) as `check config` options: Qwen3-Next at TP=2
VLLM_LOG = ["--available-gib", "44.59", "--max-model-len", "262144", "--tensor-parallel", "2",
            "--max-num-batched-tokens", "8192"]


@pytest.mark.parametrize("mode, pages", [("none", 1), ("align", 2), ("all", 482)])
def test_cli_vllm_tokens_under_each_mamba_cache_mode_and_tokens_rule(capsys, mode, pages):
    # by hand (tests/unit/test_vllm_hybrid.py's log test): 7,162 blocks of 544 tokens in 4 groups; a
    # 262,144-token request takes cdiv(262,144, 544) = 482 full blocks and, in each of the 3 linear groups, 1
    # state page ("none"), 2 ("align") or 482 ("all"). The "blocks" line is 7,162 // 4 x 544 = 973,760 in
    # every mode; the "concurrency" line floor(7,162 x 262,144 / blocks a request): 3,871,083 (485),
    # 3,847,285 (488), 973,794 (1,928)
    hand = {"none": 3_871_083, "align": 3_847_285, "all": 973_794}[mode]
    assert 7162 * 262_144 // (482 + 3 * pages) == hand
    for rule, tokens in (("blocks", 973_760), ("concurrency", hand)):
        assert main(["check", "config", NEXT_PATH, "--vllm-tokens", str(tokens), *VLLM_LOG,
                     "--mamba-cache-mode", mode, "--tokens-rule", rule, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["kvmath"] == tokens and data["matches"]
    # the default is the library's: "none" and "blocks"
    assert main(["check", "config", NEXT_PATH, "--vllm-tokens", "973760", *VLLM_LOG, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kvmath"] == 973_760
    kw = dict(available_kv_bytes=44.59 * 2**30, max_model_len=262_144, tensor_parallel=2, max_num_batched_tokens=8192)
    assert check_config(NEXT, "vllm_tokens", hand, mamba_cache_mode=mode, tokens_rule="concurrency", **kw).matches


def test_cli_vllm_rules_refused_by_name(capsys):
    for argv, named in ((["--mamba-cache-mode", "ALIGNED"], "argument --mamba-cache-mode: invalid choice"),
                        (["--tokens-rule", "block"], "argument --tokens-rule: invalid choice")):
        with pytest.raises(SystemExit) as exit_info:
            main(["check", "config", NEXT_PATH, "--vllm-tokens", "5", *VLLM_LOG, *argv])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err
    # they change only the vLLM figure: with another one they are refused, in the CLI and in Python
    assert main(["check", "config", NEXT_PATH, "--kv-bytes-per-token", "5", "--tokens-rule", "blocks"]) == 2
    assert "--tokens-rule applies to --vllm-tokens and --vllm-concurrency only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mamba_cache_mode applies to vllm_tokens and vllm_concurrency only"):
        check_config(NEXT, "kv_bytes_per_token", 5, mamba_cache_mode="align")


@pytest.mark.parametrize("argv, named", [
    (["--seq-bytes", "5"], "--seq-bytes needs --tokens"),
    (["--vllm-tokens", "5"], "--vllm-tokens needs --available-gib"),
    (["--kv-bytes-per-token", "5", "--tokens", "9"], "--tokens applies to --seq-bytes only"),
    (["--kv-bytes-per-token", "-5"], "--kv-bytes-per-token"),
    (["--seq-bytes", "5", "--tokens", "0.5"], "--tokens"),
    (["--weight-bytes", "5", "--kv-dtype", "fp8"], "--kv-dtype"),
])
def test_cli_bad_input_is_one_line_naming_the_option(capsys, argv, named):
    assert main(["check", "config", NEXT_PATH, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err


def test_cli_needs_one_figure(capsys):
    # argparse's own usage error: exit 2, one line, naming the options
    with pytest.raises(SystemExit) as e:
        main(["check", "config", NEXT_PATH])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--kv-bytes-per-token" in err


def test_cli_bad_config_names_the_file(capsys):
    assert main(["check", "config", "no/such/config.json", "--kv-bytes-per-token", "5"]) == 2
    assert "cannot read config file" in capsys.readouterr().err


def test_a_bad_config_is_refused_naming_the_file(tmp_path, capsys):
    config = json.loads(open(NEXT_PATH).read())
    config["num_kv_shared_layers"] = 10
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    assert main(["check", "config", str(f), "--kv-bytes-per-token", "24576"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0] and "num_kv_shared_layers" in err[0]


def test_vllm_tokens_prints_the_engines_terms(capsys):
    # the Qwen3-Next log (tests/unit/test_vllm_hybrid.py's hand computation): block 544, page 557,056 B, 4 groups
    # of 12 layers, 7,162 blocks, 485 a request; a wrong figure exits 1 and shows them
    assert main(["check", "config", NEXT_PATH, "--vllm-tokens", "3000000", *VLLM_LOG]) == 1
    out = capsys.readouterr().out
    for term in ("block size (tokens, 544)", "557,056", "groups (linear, linear, linear, full)", "7,162",
                 "blocks a max_model_len request takes"):
        assert term in out, term
    assert "compare the engine's terms above" in out
    # later releases print int(concurrency x max_model_len): 3,871,083 is kvmath's figure under that rule
    assert main(["check", "config", NEXT_PATH, "--vllm-tokens", "3871083", *VLLM_LOG, "--tokens-rule",
                 "concurrency"]) == 0


@pytest.mark.filterwarnings("ignore:config.json num_nextn_predict_layers")
def test_dsa_misreadings_are_named():
    # DeepSeek-V3.2 read as full MHA (4,997,120 B a token) or as DeepSeek-V3 without its indexer (70,272 B):
    # 61 x 128 x (128 + 64 + 128) x 2 and 61 x 576 x 2
    v32 = str(path("deepseek-ai--DeepSeek-V3.2"))
    assert check_config(v32, "kv_bytes_per_token", 4_997_120).explained_by == ["MLA is read as full multi-head attention"]
    assert check_config(v32, "kv_bytes_per_token", 70_272).explained_by == [
        "the DSA indexer's keys are dropped (DeepSeek-V3.2 read as DeepSeek-V3)"]
