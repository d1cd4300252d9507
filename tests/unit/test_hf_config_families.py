"""The 2025-26 families kvmath reads from a config.json (issue 23): each file in tests/data/hf_configs (provenance
in its README.md) against numbers computed by hand below from the file's own fields, with kvmath's counting rules
(attention, MLP or experts, router, embeddings, two norms per layer and a final one; biases, q/k norms and
multi-token-prediction layers left out). Integer arithmetic: exact unless a line says otherwise. KV in bf16.
"""

import contextlib
import io
import json
import warnings
from pathlib import Path

import pytest

import kvmath as km
from kvmath import cli
from kvmath.layers import LayerSpec, kv_bytes_per_seq, kv_bytes_read_per_seq

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
S3 = (1024, 8192, 131072)


def path(name):
    p = DATA / name / "config.json"
    return p if p.exists() else DATA / "reconstructed" / f"{name}.json"


def load(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the multi-token-prediction hint (tested below)
        return km.Model.from_hf_config(path(name))


# name: (KV bytes per token reserved, {S: bytes one sequence needs}, total params, active params)
CASES = {
    # GLM-4.7 (glm4_moe): L92 d5120 h96 kv8 d_h128: KV 2*8*128*2*92 = 376,832.
    # attn 5120*12288 + 2*5120*1024 + 12288*5120 = 136,314,880, x92 = 12,540,968,960;
    # 3 dense layers of 3*5120*12288 = 188,743,680 -> 566,231,040; 89 MoE layers of (160 + 1 shared)
    # * 3*5120*1536 (23,592,960) + router 5120*160 = 3,799,285,760 -> 338,136,432,640;
    # emb 2*151552*5120 = 1,551,892,480; norms 185*5120 = 947,200 -> 352,796,472,320.
    # active: 89*((8 + 1)*23,592,960 + 819,200) = 18,970,869,760 -> 33,630,909,440
    "zai-org--GLM-4.7": (376_832, {s: 376_832 * s for s in S3}, 352_796_472_320, 33_630_909_440),
    # MiniMax-M2.7 (minimax_m2): L62 d3072 h48 kv8 d_h128: KV 2*8*128*2*62 = 253,952.
    # attn 3072*6144*2 + 2*3072*1024 = 44,040,192; 256 experts of 3*3072*1536 = 14,155,776 -> 3,623,878,656;
    # router 3072*256 = 786,432; per layer 3,668,705,280, x62 = 227,459,727,360; emb 2*200064*3072 =
    # 1,229,193,216; norms 125*3072 = 384,000 -> 228,689,304,576.
    # active: 62*(44,040,192 + 8*14,155,776 + 786,432) = 9,800,515,584 -> 11,030,092,800
    "amd--MiniMax-M2.7-BF16": (253_952, {s: 253_952 * s for s in S3}, 228_689_304_576, 11_030_092_800),
    # OLMo-2 32B (olmo2): L64 d5120 h40 kv8 d_h128: KV 2*8*128*2*64 = 262,144.
    # attn 5120*5120*2 + 2*5120*1024 = 62,914,560; mlp 3*5120*27648 = 424,673,280; x64 = 31,205,621,760;
    # emb 2*100352*5120 = 1,027,604,480; norms 129*5120 = 660,480 -> 32,233,886,720
    "allenai--OLMo-2-0325-32B": (262_144, {s: 262_144 * s for s in S3}, 32_233_886_720, 32_233_886_720),
    # Llama 4 Maverick (llama4): L48 d5120 h40 kv8 d_h128, 2*8*128*2 = 4,096 B per token per layer: 196,608
    # reserved. no_rope_layers: every 4th layer NoPE (global, 12), the other 36 chunked over 8,192 tokens:
    # 4096 * (12 S + 36 min(S, 8192)): S=131072 -> 4096 * (1,572,864 + 294,912) = 7,650,410,496.
    # attn 5120*5120*2 + 2*5120*1024 = 62,914,560, x48 = 3,019,898,880; interleave 2: 24 dense layers of
    # 3*5120*16384 = 251,658,240 -> 6,039,797,760; 24 MoE layers of (128 + 1 shared) * 3*5120*8192
    # (125,829,120) + router 5120*128 = 16,232,611,840 -> 389,582,684,160; emb 2*202048*5120 = 2,068,971,520;
    # norms 97*5120 = 496,640 -> 400,711,848,960. active: 24*(2*125,829,120 + 655,360) = 6,055,526,400
    # -> 3,019,898,880 + 6,039,797,760 + 6,055,526,400 + 2,068,971,520 + 496,640 = 17,184,691,200
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": (
        196_608, {1024: 4096 * 48 * 1024, 8192: 4096 * 48 * 8192, 131072: 7_650_410_496},
        400_711_848_960, 17_184_691_200),
    # DeepSeek-V3.2 (deepseek_v32): DeepSeek-V3's MLA (576 bf16 latent elements = 1,152 B per layer) plus the
    # indexer's keys, 128 fp8 bytes + one fp32 scale = 132 B: 61 * (1,152 + 132) = 78,324 B per token, all held.
    # params: DeepSeek-V3's 671,026,279,424 (test_hf_config) + 61 indexers of 1536*64*128 + 7168*128 + 7168*64
    # = 13,959,168 -> 851,509,248: 671,877,788,672; active 37,552,157,696 + 851,509,248 = 38,403,666,944
    "deepseek-ai--DeepSeek-V3.2": (78_324, {s: 78_324 * s for s in S3}, 671_877_788_672, 38_403_666_944),
    # Granite 4.0 H Micro (granitemoehybrid, bf16, tied as the family publishes it: README): 4 attention layers
    # (h32 kv8 d_h 2048/32 = 64): 2*8*64*2*4 = 8,192 B per token; 36 Mamba-2 layers, bf16 state: 64 heads * 64 *
    # 128 = 524,288 SSM + (4096 + 2*128) * 3 = 13,056 conv elements = 537,344 * 2 B = 1,074,688 B, x36 =
    # 38,688,768 B per sequence.
    # mamba 2048*(2*4096 + 256 + 64) + 4352*4 + 3*64 + 4096 + 4096*2048 = 25,842,880, x36 = 930,343,680;
    # attn 2048*2048*2 + 2*2048*512 = 10,485,760, x4 = 41,943,040; mlp 3*2048*8192 x40 = 2,013,265,920;
    # emb (tied, once) 100352*2048 = 205,520,896; norms 81*2048 = 165,888 -> 3,191,239,424
    "ibm-granite--granite-4.0-h-micro": (8_192, {s: 8_192 * s + 38_688_768 for s in S3},
                                          3_191_239_424, 3_191_239_424),
    # SmolLM3-3B (smollm3, bf16): L36 d2048 h16 kv4 d_h 2048/16 = 128; every layer full attention (layer_types; the
    # NoPE layers, no_rope_layers 0 on every 4th, skip the rotation but cache the same K and V): KV 2*4*128*2*36 =
    # 73,728 B per token; 1,024 tokens 75,497,472 B, 8,192 603,979,776, 131,072 9,663,676,416.
    # attn 2048*2048*2 + 2*2048*512 = 10,485,760; mlp 3*2048*11008 = 67,633,152; x36 = 2,812,280,832;
    # emb tied (SmolLM3Config's default tie_word_embeddings=True; the file leaves it out) 128256*2048 =
    # 262,668,288; norms 73*2048 = 149,504 -> 3,075,098,624 (dense: all active)
    "HuggingFaceTB--SmolLM3-3B": (73_728, {s: 73_728 * s for s in S3}, 3_075_098_624, 3_075_098_624),
    # an OLMo 3 model (olmo3, bf16; a 190M continued-pretraining model's file, README): L12 d768 h12 kv12 d_h 64,
    # layer_types 3 sliding (window 4,096) to 1 full: 2*12*64*2 = 3,072 B per token and layer, 36,864 reserved;
    # 3 full layers hold S tokens, 9 sliding min(S, 4,096): S=1,024 12*3,072*1,024 = 37,748,736; S=8,192
    # 3*3,072*8,192 + 9*3,072*4,096 = 75,497,472 + 113,246,208 = 188,743,680; S=131,072 1,207,959,552 +
    # 113,246,208 = 1,321,205,760. attn 4*768*768 = 2,359,296; mlp 3*768*3072 = 7,077,888; x12 = 113,246,208;
    # emb 2*48000*768 = 73,728,000 (untied); norms 25*768 = 19,200 -> 186,993,408 (q/k norms not counted)
    "complexly--olmo3-190m-zh-continue": (36_864, {1024: 37_748_736, 8192: 188_743_680, 131072: 1_321_205_760},
                                          186_993_408, 186_993_408),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_gives_the_hand_computed_model(name):
    per_token, per_seq, total, active = CASES[name]
    m = load(name)
    assert m.kv_bytes_per_token() == per_token
    for s, expected in per_seq.items():
        assert m.kv_bytes_per_seq(s) == expected, s
    assert m.param_count() == total
    assert m.active_param_count() == active


# published totals, within 1%: GLM-4.5/4.6/4.7 model cards "355B total"; MiniMax-M2 card "230B total";
# Ai2's OLMo 2 32B "32B"; Meta's Llama 4 card "400B total"; DeepSeek-V3 report 671B (V3.2's 685B adds the
# 14B multi-token-prediction module, which kvmath leaves out). Granite 4.0 H Micro's "3B" is IBM's size class, a
# rounded figure: 3.19B counted (6% over), so it is not in this list.
@pytest.mark.parametrize("name, published", [
    ("zai-org--GLM-4.7", 355e9), ("amd--MiniMax-M2.7-BF16", 230e9), ("allenai--OLMo-2-0325-32B", 32e9),
    ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", 400e9), ("deepseek-ai--DeepSeek-V3.2", 671e9),
])
def test_totals_within_1_percent_of_published(name, published):
    assert load(name).param_count() == pytest.approx(published, rel=0.01)


def test_dsa_reads_topk_latents_and_every_indexer_key():
    m = load("deepseek-ai--DeepSeek-V3.2")
    # at 131,072 tokens a step reads 2,048 latents per layer and every token's 132 B of keys:
    # 61 * (1,152 * 2,048 + 132 * 131,072) = 61 * 19,660,800 = 1,199,308,800 (held: 78,324 * 131,072)
    assert kv_bytes_read_per_seq(m.layer_specs(), 131072) == 1_199_308_800
    step = km.Deployment(m, "h200").step(1, 131072)
    assert step.kv_bytes_read == 1_199_308_800 / 1  # one chip, one sequence
    assert step.kv_bytes_resident == 78_324 * 131072


# ---- one test per error class calculators make, each failing if kvmath made it ----

def test_hybrid_linear_layers_are_not_counted_as_full_attention():
    m = load("ibm-granite--granite-4.0-h-micro")
    # were all 40 layers full attention: 40 * 2,048 = 81,920 B per token
    assert m.kv_bytes_per_token() == 4 * 2048 != 40 * 2048
    assert m.kv_bytes_by_kind(131072) == {"linear": 38_688_768.0, "full": 8192 * 131072}


def test_shared_kv_layers_are_not_counted_twice():
    # No reader produces a shared layer (Gemma 3n / 4 are not read; num_kv_shared_layers is refused by name in any
    # config), so the class is tested on a hand-built layout. Gemma 3n E4B's layout (num_kv_shared_layers 15 of 35, as the Gemma 3n config documents): 20 layers own a
    # cache, 15 read the last owner's. 2 KV heads of 256: 2*2*256*2 = 2,048 B per token per owning layer.
    own = LayerSpec("full", n_heads=8, n_kv_heads=2, head_dim=256)
    shared = LayerSpec("shared", n_heads=8, n_kv_heads=2, head_dim=256)
    layers = (own,) * 20 + (shared,) * 15
    assert km.layers.kv_bytes_per_token(layers) == 20 * 2048  # not 35 * 2048
    assert kv_bytes_per_seq(layers, 8192) == 20 * 2048 * 8192
    assert kv_bytes_read_per_seq(layers, 8192) == 35 * 2048 * 8192  # each shared layer still reads it
    # and attention FLOPs: 4 h d_h per token read, all 35 layers
    assert km.layers.attention_flops_per_token(layers, 8192) == 35 * 4 * 8 * 256 * 8192


def test_chunked_and_sliding_windows_are_not_ignored():
    m = load("meta-llama--Llama-4-Maverick-17B-128E-Instruct")
    assert m.kv_bytes_per_seq(131072) == 7_650_410_496 != 196_608 * 131072
    # Gemma 3 12B's file: 40 sliding layers (window 1,024) and 8 full, 2 x 8 x 256 x 2 = 8,192 B per token and
    # layer: at 131,072 tokens 8,192 x (40 x 1,024 + 8 x 131,072) = 8,925,478,912 B, not 48 x 8,192 x 131,072
    g = km.Model.from_hf_config(DATA / "google--gemma-3-12b-it" / "config.json")
    assert g.kv_bytes_per_seq(131072) == 8192 * (40 * 1024 + 8 * 131072) == 8_925_478_912 != 48 * 8192 * 131072


def test_mla_is_not_read_as_full_attention():
    m = load("deepseek-ai--DeepSeek-V3.2")
    # full MHA of 128 heads of (128 + 64) keys and 128 values: 61 * 128 * (192 + 128) * 2 B = 4,997,120 B
    assert m.kv_bytes_per_token() == 78_324 != 61 * 128 * (192 + 128) * 2


def test_stored_precision_is_not_ignored():
    # gpt-oss-20b's committed file carries upstream's quantization block (mxfp4 experts; test_hf_config_weights):
    # on an H100 SXM, one sequence: 13,747,605,120 B resident (hand computation in test_hf_config_weights), not
    # the bf16 41.8 GB
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli.main(["decode", "--config", str(path("openai--gpt-oss-20b")), "--hardware", "h100-sxm",
                         "--batch", "1", "--context", "1", "--json"]) in (0, None)
    step = json.loads(out.getvalue())
    assert step["weight_bytes_resident"] == 13_747_605_120
    assert step["strict_s"] == pytest.approx(1.11e-3, abs=0.005e-3)  # the 1.11 ms
    assert "experts mxfp4" in err.getvalue()
    assert step["weights_formats"]["experts"] == "mxfp4" and step["weights_formats"]["attention"] == "bf16"


def test_gptq_and_fp8_blocks_set_the_formats():
    w = km.hf_config.weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False}})
    assert w["attention"] == "int4-g128" and w["default"] == "bf16"
    w = km.hf_config.weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32}})
    assert w["mlp"] == (4 + 16 / 32 + 4 / 32) / 8  # scale and packed zero point per 32 weights
    # MiniMax-M2's fp8 release: its router ("gate") and LM head kept in bf16
    w = km.hf_config.weights_from_hf_config({"quantization_config": {
        "quant_method": "fp8", "fmt": "float8_e4m3fn", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}})
    assert w == {"default": "bf16", "attention": "fp8-e4m3", "mlp": "fp8-e4m3", "experts": "fp8-e4m3",
                 "shared_experts": "fp8-e4m3"}


# ---- never silently wrong ----

#: One config per reader (model_type), each read by kvmath from tests/data/hf_configs.
READERS = {
    "llama": "meta-llama--Llama-3.1-8B", "mistral": "mistralai--Mistral-7B-v0.1",
    "mixtral": "mistralai--Mixtral-8x7B-Instruct-v0.1", "qwen2": "Qwen--Qwen2.5-7B", "qwen3": "Qwen--Qwen3-8B",
    "qwen3_moe": "Qwen--Qwen3-30B-A3B", "qwen3_next": "Qwen--Qwen3-Next-80B-A3B-Instruct", "phi3": "microsoft--phi-4",
    "gpt_oss": "openai--gpt-oss-20b", "deepseek_v2": "deepseek-ai--DeepSeek-V2-Lite",
    "deepseek_v3": "deepseek-ai--DeepSeek-V3", "kimi_k2": "moonshotai--Kimi-K2-Instruct",
    "deepseek_v32": "deepseek-ai--DeepSeek-V3.2", "gemma2": "google--gemma-2-9b-it",
    "gemma3_text": "google--gemma-3-12b-it", "falcon": "tiiuae--falcon-40b", "glm4_moe": "zai-org--GLM-4.7",
    "minimax_m2": "amd--MiniMax-M2.7-BF16", "llama4_text": "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
    "olmo2": "allenai--OLMo-2-0325-32B", "granitemoehybrid": "ibm-granite--granite-4.0-h-micro",
    "smollm3": "HuggingFaceTB--SmolLM3-3B", "olmo3": "complexly--olmo3-190m-zh-continue",
    # no qwen2_moe file: Qwen3-30B-A3B's, relabelled (the two model_types share one reader and one set of keys)
    "qwen2_moe": "Qwen--Qwen3-30B-A3B",
}


def reader_config(model_type):
    """READERS' config for ``model_type`` (relabelled where the file is another type's)."""
    config = json.loads(path(READERS[model_type]).read_text())
    if model_type == "qwen2_moe":
        config["model_type"] = "qwen2_moe"
    return config

#: A value that switches each size key's feature on (what a config of the family that has it would say).
SIZE_KEY_VALUES = {
    "num_local_experts": 8, "num_experts": 64, "n_routed_experts": 64, "num_experts_per_tok": 2,
    "moe_intermediate_size": 768, "shared_expert_intermediate_size": 768, "decoder_sparse_step": 2,
    "mlp_only_layers": [0, 1], "n_shared_experts": 1, "first_k_dense_replace": 2, "moe_layer_freq": 2,
    "interleave_moe_layer_step": 2, "moe_layers": [1, 3], "intermediate_size_mlp": 16384,
    "shared_intermediate_size": 1024, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "mamba_n_heads": 64,
    "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2,
    "mamba_ssm_dtype": "float32", "attn_type_list": [0, 1], "num_kv_shared_layers": 10,
    "kv_sharing_layer_map": {"30": 20}, "hidden_size_per_layer_input": 256, "laurel_rank": 64,
    "altup_num_inputs": 4, "num_global_key_value_heads": 4, "global_head_dim": 512, "attention_k_eq_v": True,
    "hybrid_override_pattern": "M-M*", "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128,
    "mamba_d_ssm": 4096, "attn_layer_period": 8, "expert_layer_period": 2,
    "block_configs": [{"attention": {"n_heads_in_group": 8}}], "compress_ratios": [4, 4], "o_lora_rank": 1024,
}


def test_every_reader_and_every_size_key_have_a_case():
    assert set(READERS) == set(km.hf_config._FAMILY)
    assert set(SIZE_KEY_VALUES) == set(km.hf_config._SIZE_KEYS)
    aliases = {"gemma3": "gemma3_text", "llama4": "llama4_text", "RefinedWebModel": "falcon"}
    for model_type in READERS:
        config = reader_config(model_type)
        given = (config.get("text_config") or config)["model_type"]
        assert aliases.get(given, given) == model_type


@pytest.mark.parametrize("model_type", sorted(READERS))
def test_a_size_key_the_reader_does_not_read_is_refused_by_name(model_type):
    """Each reader's config with each size-changing key of kvmath.hf_config._SIZE_KEYS that the reader does not
    read added (one at a time): refused, the key named; never loaded without it."""
    config = reader_config(model_type)
    target = "text_config" if "text_config" in config else None
    read = set(km.hf_config.reads(model_type))
    accepted = []
    for key, value in SIZE_KEY_VALUES.items():
        if key in read:
            continue
        edited = json.loads(json.dumps(config))
        (edited[target] if target else edited)[key] = value
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                km.Model.from_hf_config(edited)
            accepted.append(key)
        except ValueError as err:
            assert repr(key) in str(err) or key in str(err), (key, str(err))
    assert accepted == [], f"{model_type} loads without {accepted}"


@pytest.mark.parametrize("name, relabel, key, published", [
    # Mixtral as a dense Mistral would be 7,241,732,096 parameters without its experts, not 46,702,792,704
    ("mistralai--Mixtral-8x7B-Instruct-v0.1", "mistral", "num_local_experts", 46_702_792_704),
    # Qwen3-30B-A3B as a dense Qwen3: 3,340,437,504 instead of 30,532,110,336
    ("Qwen--Qwen3-30B-A3B", "qwen3", "num_experts", 30_532_110_336),
    ("Qwen--Qwen3-Next-80B-A3B-Instruct", "qwen3_moe", "linear_num_key_heads", 79_674_286_848),
])
def test_a_relabelled_moe_or_hybrid_config_is_refused_naming_the_key(name, relabel, key, published):
    config = json.loads(path(name).read_text())
    assert load(name).param_count() == published
    with pytest.raises(ValueError, match=key):
        km.Model.from_hf_config({**config, "model_type": relabel})


def test_mamba_ssm_dtype_is_read():
    # Qwen3.5's key on the Qwen3-Next file: the recurrent state in fp32, the convolution's inputs in bf16:
    # per layer 32 x 128 x 128 = 524,288 x 4 B + (2 x 16 x 128 + 32 x 128) x 3 = 24,576 x 2 B = 2,146,304 B,
    # x 36 layers = 77,266,944 B (39,518,208 with both in bf16)
    config = json.loads(path("Qwen--Qwen3-Next-80B-A3B-Instruct").read_text())
    m = km.Model.from_hf_config({**config, "mamba_ssm_dtype": "float32"})
    assert m.kv_bytes_per_seq(1024) - 24_576 * 1024 == 36 * (524_288 * 4 + 24_576 * 2) == 77_266_944
    with pytest.raises(ValueError, match="mamba_ssm_dtype"):
        km.Model.from_hf_config({**config, "mamba_ssm_dtype": "float8"})


def test_a_relabelled_v32_config_is_refused_naming_index_topk():
    config = json.loads(path("deepseek-ai--DeepSeek-V3.2").read_text())
    with pytest.raises(ValueError, match="index_topk"):
        km.Model.from_hf_config({**config, "model_type": "deepseek_v3"})


def test_mtp_layers_are_a_warning_and_a_note():
    with pytest.warns(UserWarning, match="num_nextn_predict_layers"):
        m = km.Model.from_hf_config(path("zai-org--GLM-4.7"))
    assert "not counted" in m.note


@pytest.mark.parametrize("edit, key", [
    ({"attn_type_list": [0] + [1] * 61}, "attn_type_list"), ({"shared_intermediate_size": 1536}, "shared_intermediate_size"),
])
def test_minimax_features_kvmath_does_not_model_are_refused(edit, key):
    config = json.loads(path("amd--MiniMax-M2.7-BF16").read_text())
    with pytest.raises(ValueError, match=key):
        km.Model.from_hf_config({**config, **edit})


@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_config_json_exits_0(name, capsys):
    assert cli.main(["decode", "--config", str(path(name)), "--hardware", "h200", "--batch", "1",
                     "--context", "4096", "--json", "--weight-dtype", "bf16"]) in (0, None)
    assert json.loads(capsys.readouterr().out)["strict_s"] > 0


def test_a_bad_config_exits_2_with_one_line(tmp_path, capsys):
    config = json.loads(path("zai-org--GLM-4.7").read_text())
    config["index_topk"] = 2048
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    assert cli.main(["decode", "--config", str(f), "--hardware", "h200", "--batch", "1", "--context", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "index_topk" in err[0]


def test_qwen3_next_refuses_a_window_it_would_not_read():
    # Qwen3-Next's reader reads no sliding window: one switched on by use_sliding_window is refused by name; one
    # switched off (the Qwen families' published convention) changes nothing
    config = json.loads(path("Qwen--Qwen3-Next-80B-A3B-Instruct").read_text())
    with pytest.raises(ValueError, match="sliding_window"):
        km.Model.from_hf_config({**config, "sliding_window": 4096, "use_sliding_window": True})
    off = km.Model.from_hf_config({**config, "sliding_window": 4096, "use_sliding_window": False})
    assert off.kv_bytes_per_seq(131072) == load("Qwen--Qwen3-Next-80B-A3B-Instruct").kv_bytes_per_seq(131072)


def test_gpt_oss_relabelled_mixtral_reads_the_same_sizes():
    # what the mixtral reader reads of gpt-oss's file is all that sizes it (layer_types, experts, head_dim): the
    # same 20,907,927,360 parameters and layers, so relabelling drops nothing (sinks and biases are not counted
    # by either)
    config = json.loads(path("openai--gpt-oss-20b").read_text())
    relabelled = km.Model.from_hf_config({**config, "model_type": "mixtral"})
    assert relabelled.param_count() == load("openai--gpt-oss-20b").param_count() == 20_907_927_360
    assert relabelled.layer_specs() == load("openai--gpt-oss-20b").layer_specs()


def test_smollm3_nope_layers_cache_as_full_and_slide_only_where_its_config_says():
    # SmolLM3Config: layer_types, where a config leaves them out, are sliding on the NoPE layers (no_rope_layers 0,
    # every 4th) only where use_sliding_window and sliding_window are set. SmolLM3-3B's file lists 36 full layers.
    config = json.loads(path("HuggingFaceTB--SmolLM3-3B").read_text())
    assert load("HuggingFaceTB--SmolLM3-3B").layer_kinds == ("full",)
    bare = {k: v for k, v in config.items() if k != "layer_types"}
    assert km.Model.from_hf_config(bare).kv_bytes_per_seq(8192) == 73_728 * 8192
    # with a 4,096-token window on the 9 NoPE layers, 2,048 B per token and layer: 27 full layers hold S tokens,
    # 9 hold min(S, 4,096): S = 131,072 -> 2,048 * (27 * 131,072 + 9 * 4,096) = 7,323,254,784
    windowed = km.Model.from_hf_config({**bare, "use_sliding_window": True, "sliding_window": 4096})
    assert windowed.kv_bytes_per_seq(131072) == 2048 * (27 * 131072 + 9 * 4096) == 7_323_254_784
    # the file's explicit layer_types win, as in SmolLM3Attention (a window only on a "sliding_attention" layer):
    # 36 full layers stay full whatever use_sliding_window says
    listed = km.Model.from_hf_config({**config, "use_sliding_window": True, "sliding_window": 4096})
    assert listed.kv_bytes_per_seq(131072) == 73_728 * 131072


def test_olmo3_windows_follow_layer_types_or_olmo3configs_rule():
    # Olmo3Config (vllm/transformers_utils/configs/olmo3.py): layer_types left out, every 4th layer is full and the
    # others slide over sliding_window, 4,096 by default; the file's own layer_types give the same 9 + 3
    config = json.loads(path("complexly--olmo3-190m-zh-continue").read_text())
    bare = {k: v for k, v in config.items() if k not in ("layer_types", "sliding_window")}
    m = km.Model.from_hf_config(bare)
    assert m.kv_bytes_per_seq(131072) == load("complexly--olmo3-190m-zh-continue").kv_bytes_per_seq(131072)
    assert m.kv_bytes_by_kind(131072) == {"sliding": 9 * 3072 * 4096, "full": 3 * 3072 * 131072}
    # windows ignored would charge all 12 layers for every token: 12 * 3,072 * 131,072 = 4,831,838,208
    assert m.kv_bytes_per_seq(131072) == 1_321_205_760 != 12 * 3072 * 131072
