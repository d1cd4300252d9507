"""Model.from_hf_config against the config.json files in tests/data/hf_configs (provenance in its README.md),
and its refusals of bad values, each a ValueError naming the key.

Every expected number below is computed by hand in the comments, from the
file's own fields, with kvmath's counting rules (attention, MLP or experts,
router, embeddings, two norms per layer and a final one; biases, sinks and
q/k norms left out). Integer arithmetic: the tolerance is exact unless a
line says otherwise. KV in bf16 (2 bytes per element).
"""

import json
from pathlib import Path

import numpy as np
import pytest

import kvmath as km

DATA = Path(__file__).parents[1] / "data" / "hf_configs"


def path(name):
    p = DATA / name / "config.json"
    return p if p.exists() else DATA / "reconstructed" / f"{name}.json"


def full(per_token):
    """KV of one sequence when every layer holds every token."""
    return {s: per_token * s for s in (1024, 8192, 131072)}


# name: (KV bytes per token reserved, {S: KV bytes one sequence needs}, total params, active params)
CASES = {
    # L32 d4096 h32 kv32 d_h128: KV 2*32*128*2 B * 32 = 524,288.
    # attn 4*4096^2 = 67,108,864; mlp 3*4096*11008 = 135,266,304; x32 = 6,476,005,376;
    # emb 2*32000*4096 = 262,144,000; norms 65*4096 = 266,240 -> 6,738,415,616
    "meta-llama--Llama-2-7b-hf": (524_288, full(524_288), 6_738_415_616, 6_738_415_616),
    # kv8: 2*8*128*2*32 = 131,072. attn 4096*4096*2 + 2*4096*1024 = 41,943,040; mlp 3*4096*14336 = 176,160,768;
    # x32 = 6,979,321,856; emb 2*128256*4096 = 1,050,673,152; norms 266,240 -> 8,030,261,248
    "meta-llama--Llama-3.1-8B": (131_072, full(131_072), 8_030_261_248, 8_030_261_248),
    # L80 d8192 h64 kv8: 2*8*128*2*80 = 327,680. attn 8192^2*2 + 2*8192*1024 = 150,994,944;
    # mlp 3*8192*28672 = 704,643,072; x80 = 68,451,041,280; emb 2*128256*8192 = 2,101,346,304;
    # norms 161*8192 = 1,318,912 -> 70,553,706,496
    "meta-llama--Llama-3.1-70B-Instruct": (327_680, full(327_680), 70_553_706_496, 70_553_706_496),
    # L28 d3072 h24 kv8 head_dim 128 (explicit), tied: 2*8*128*2*28 = 114,688.
    # attn 3072*3072*2 + 2*3072*1024 = 25,165,824; mlp 3*3072*8192 = 75,497,472; x28 = 2,818,572,288;
    # emb 128256*3072 = 394,002,432 (tied: once); norms 57*3072 = 175,104 -> 3,212,749,824
    "meta-llama--Llama-3.2-3B": (114_688, full(114_688), 3_212_749_824, 3_212_749_824),
    # L16 d2048 h32 kv8 head_dim 64 (explicit), tied: 2*8*64*2*16 = 32,768.
    # attn 2048*2048*2 + 2*2048*512 = 10,485,760; mlp 3*2048*8192 = 50,331,648; x16 = 973,078,528;
    # emb 128256*2048 = 262,668,288 (tied: once); norms 33*2048 = 67,584 -> 1,235,814,400
    "meta-llama--Llama-3.2-1B": (32_768, full(32_768), 1_235_814_400, 1_235_814_400),
    # every layer slides over 4096 tokens: 131,072 B/token, at most 4096 tokens held.
    # params as Llama 3.1 8B's layers with a 32000 vocab: 6,979,321,856 + 262,144,000 + 266,240 = 7,241,732,096
    "mistralai--Mistral-7B-v0.1": (131_072, {1024: 131_072 * 1024, 8192: 131_072 * 4096, 131072: 131_072 * 4096},
                                   7_241_732_096, 7_241_732_096),
    # L40 d5120 h32 kv8 head_dim 128 (h*d_h = 4096 != d): 2*8*128*2*40 = 163,840.
    # attn 5120*4096*2 + 2*5120*1024 = 52,428,800; mlp 3*5120*32768 = 503,316,480; x40 = 22,229,811,200;
    # emb 2*131072*5120 = 1,342,177,280; norms 81*5120 = 414,720 -> 23,572,403,200
    "mistralai--Mistral-Small-24B-Base-2501": (163_840, full(163_840), 23_572_403_200, 23_572_403_200),
    # 8 experts of 3*4096*14336 = 176,160,768, router 4096*8 = 32,768; per layer 41,943,040 + 8 * 176,160,768
    # + 32,768 = 1,451,261,952; x32 = 46,440,382,464; + 262,144,000 + 266,240 = 46,702,792,704.
    # active (top-2): (41,943,040 + 2*176,160,768 + 32,768) * 32 + 262,410,240 = 12,879,925,248
    "mistralai--Mixtral-8x7B-Instruct-v0.1": (131_072, full(131_072), 46_702_792_704, 12_879_925_248),
    # L28 d3584 h28 kv4: 2*4*128*2*28 = 57,344. attn 3584^2*2 + 2*3584*512 = 29,360,128;
    # mlp 3*3584*18944 = 203,685,888; x28 = 6,525,288,448; emb 2*152064*3584 = 1,089,994,752;
    # norms 57*3584 = 204,288 -> 7,615,487,488 (use_sliding_window false: no window)
    "Qwen--Qwen2.5-7B": (57_344, full(57_344), 7_615_487_488, 7_615_487_488),
    # L36 kv8 head_dim 128: 2*8*128*2*36 = 147,456. (41,943,040 + 3*4096*12288 = 150,994,944) * 36
    # = 6,945,767,424; emb 2*151936*4096 = 1,244,659,712; norms 73*4096 = 299,008 -> 8,190,726,144
    "Qwen--Qwen3-8B": (147_456, full(147_456), 8_190_726_144, 8_190_726_144),
    # L64 d5120 h64 kv8 head_dim 128: 2*8*128*2*64 = 262,144. attn 5120*8192*2 + 2*5120*1024 = 94,371,840;
    # mlp 3*5120*25600 = 393,216,000; x64 = 31,205,621,760; emb 2*151936*5120 = 1,555,824,640;
    # norms 129*5120 = 660,480 -> 32,762,106,880
    "Qwen--Qwen3-32B": (262_144, full(262_144), 32_762_106_880, 32_762_106_880),
    # L48 d2048 h32 kv4: 2*4*128*2*48 = 98,304. attn 2048*4096*2 + 2*2048*512 = 18,874,368;
    # 128 experts of 3*2048*768 = 4,718,592; router 262,144; per layer 623,116,288; x48 = 29,909,581,824;
    # emb 2*151936*2048 = 622,329,856; norms 97*2048 = 198,656 -> 30,532,110,336.
    # active (top-8): (18,874,368 + 8*4,718,592 + 262,144) * 48 + 622,528,512 = 3,353,020,416
    "Qwen--Qwen3-30B-A3B": (98_304, full(98_304), 30_532_110_336, 3_353_020_416),
    # L42, 21 local (4096 window) + 21 global, 2*8*256*2 = 8,192 B per layer per token; x42 = 344,064.
    # attn 3584*4096*2 + 2*3584*2048 = 44,040,192; mlp 3*3584*14336 = 154,140,672; x42 = 8,323,596,288;
    # emb (tied, Gemma2Config default) 256000*3584 = 917,504,000; norms 85*3584 = 304,640 -> 9,241,404,928
    "google--gemma-2-9b-it": (344_064, {1024: 344_064 * 1024, 8192: 8192 * 21 * (4096 + 8192),
                                        131072: 8192 * 21 * (4096 + 131072)}, 9_241_404_928, 9_241_404_928),
    # text_config only: L48 d3840 h16 kv8; head_dim 256, vocab 262208, pattern 6, tied: Gemma3TextConfig defaults.
    # 40 local layers (window 1024) + 8 global (layers 5, 11, ..., 47); 2*8*256*2 = 8,192 B per layer-token.
    # attn 3840*4096*2 + 2*3840*2048 = 47,185,920; mlp 3*3840*15360 = 176,947,200; x48 = 10,758,389,760;
    # emb 262208*3840 = 1,006,878,720; norms 97*3840 = 372,480 -> 11,765,640,960
    "google--gemma-3-12b-it": (393_216, {1024: 8192 * 48 * 1024, 8192: 8192 * (40 * 1024 + 8 * 8192),
                                         131072: 8192 * (40 * 1024 + 8 * 131072)}, 11_765_640_960, 11_765_640_960),
    # L32 d3072 h32 kv32 d_h 96, sliding_window 2047 on every layer: 2*32*96*2*32 = 393,216.
    # attn 4*3072^2 = 37,748,736; mlp 3*3072*8192 = 75,497,472; x32 = 3,623,878,656;
    # emb 2*32064*3072 = 197,001,216; norms 65*3072 = 199,680 -> 3,821,079,552
    "microsoft--Phi-3-mini-4k-instruct": (393_216, {1024: 393_216 * 1024, 8192: 393_216 * 2047,
                                                    131072: 393_216 * 2047}, 3_821_079_552, 3_821_079_552),
    # L40 d5120 h40 kv10: 2*10*128*2*40 = 204,800. attn 5120^2*2 + 2*5120*1280 = 65,536,000;
    # mlp 3*5120*17920 = 275,251,200; x40 = 13,631,488,000; emb 2*100352*5120 = 1,027,604,480;
    # norms 81*5120 = 414,720 -> 14,659,507,200
    "microsoft--phi-4": (204_800, full(204_800), 14_659_507_200, 14_659_507_200),
    # L24, layer_types: 12 sliding (128) + 12 full; 2*8*64*2 = 2,048 B per layer-token; x24 = 49,152.
    # S=1024: 2048*(12*128 + 12*1024) = 28,311,552.
    # attn 2880*4096*2 + 2*2880*512 = 26,542,080; 32 experts of 3*2880*2880 = 24,883,200; router 92,160;
    # per layer 822,896,640; x24 = 19,749,519,360; emb 2*201088*2880 = 1,158,266,880; norms 49*2880 = 141,120
    # -> 20,907,927,360. active (top-4): (26,542,080 + 4*24,883,200 + 92,160) * 24 + 1,158,408,000 = 4,186,416,960
    "openai--gpt-oss-20b": (49_152, {s: 2048 * 12 * (128 + s) for s in (1024, 8192, 131072)},
                            20_907_927_360, 4_186_416_960),
    # old RW keys: n_head 71, n_layer 32, multi_query -> 1 KV head of 64: 2*64*2*32 = 8,192.
    # attn 4544^2*2 + 2*4544*64 = 41,877,504; mlp 2*4544*18176 = 165,183,488 (4*d, two matrices);
    # x32 = 6,625,951,744; emb (tied) 65024*4544 = 295,469,056; norms 65*4544 = 295,360 -> 6,921,716,160
    "tiiuae--falcon-7b": (8_192, full(8_192), 6_921_716_160, 6_921_716_160),
    # new keys: 128 heads, num_kv_heads 8 of 64, 60 layers: 2*8*64*2*60 = 122,880.
    # attn 8192^2*2 + 2*8192*512 = 142,606,336; mlp 2*8192*32768 = 536,870,912; x60 = 40,768,634,880;
    # emb 65024*8192 = 532,676,608; norms 121*8192 = 991,232 -> 41,302,302,720
    "tiiuae--falcon-40b": (122_880, full(122_880), 41_302_302_720, 41_302_302_720),
    # MLA latent 512 + 64 = 576 elems per layer-token: 576*2*61 = 70,272.
    # attn/layer: q 7168*1536 + 1536*128*192 = 48,758,784; kv down 7168*576 = 4,128,768;
    # kv up 512*128*256 = 16,777,216; o 128*128*7168 = 117,440,512 -> 187,105,280; x61 = 11,413,422,080.
    # 3 dense: 3*3*7168*18432 = 1,189,085,184. 58 MoE: (256+1)*44,040,192 + router 1,835,008 = 11,320,164,352
    # x58 = 656,569,532,416. emb 2*129280*7168 = 1,853,358,080; norms 123*7168 = 881,664 -> 671,026,279,424.
    # active: 58*((8+1)*44,040,192 + 1,835,008) = 23,095,410,688 -> 37,552,157,696
    "deepseek-ai--DeepSeek-V3": (70_272, full(70_272), 671_026_279_424, 37_552_157_696),
    # q_lora_rank null: q 2048*16*192 = 6,291,456; kv down 2048*576 = 1,179,648; kv up 512*16*256 = 2,097,152;
    # o 16*128*2048 = 4,194,304 -> 13,762,560; x27 = 371,589,120. 1 dense 3*2048*10944 = 67,239,936.
    # 26 MoE: (64+2)*3*2048*1408 = 570,949,632 + router 131,072 -> x26 = 14,848,098,304.
    # emb 2*102400*2048 = 419,430,400; norms 55*2048 = 112,640 -> 15,706,470,400; KV 576*2*27 = 31,104.
    # active: 26*(8*8,650,752 + 131,072) = 1,802,764,288 -> 2,661,136,384
    "deepseek-ai--DeepSeek-V2-Lite": (31_104, full(31_104), 15_706_470_400, 2_661_136_384),
    # 64 heads: q 7168*1536 + 1536*64*192 = 29,884,416; kv down 4,128,768; kv up 512*64*256 = 8,388,608;
    # o 64*128*7168 = 58,720,256 -> 101,122,048; x61 = 6,168,444,928. 1 dense 396,361,728.
    # 60 MoE: 385*44,040,192 + router 7168*384 = 16,958,226,432; x60 = 1,017,493,585,920.
    # emb 2*163840*7168 = 2,348,810,240; norms 881,664 -> 1,026,408,084,480.
    # active: 60*(9*44,040,192 + 2,752,512) = 23,946,854,400 -> 32,861,352,960
    "moonshotai--Kimi-K2-Instruct": (70_272, full(70_272), 1_026_408_084_480, 32_861_352_960),
    # 48 layers, every 4th full: 12 full layers of 2*2*256*2 = 2,048 B/token -> 24,576 B/token reserved.
    # 36 Gated DeltaNet layers, fixed state (32*128*128 + (2*16*128 + 32*128)*(4-1)) elems * 2 B = 1,097,728 B
    # each -> 39,518,208 B per sequence. S=1024: 24,576*1024 + 39,518,208 = 64,684,032.
    # params: full attn (q doubled for the gate) 2048*4096*2 + 2*2048*512 + 4096*2048 = 27,262,976, x12;
    # linear 2048*12288 + 2048*64 + 8192*4 + 64 + 128 + 4096*2048 = 33,718,464, x36;
    # MoE (512 + 1 shared)*3*2048*512 + router 2048*512 = 1,614,807,040, x48 = 77,510,737,920;
    # emb 2*151936*2048 = 622,329,856; norms 97*2048 = 198,656 -> 79,674,286,848.
    # active: 48*(11*3,145,728 + 1,048,576) = 1,711,276,032 + 327,155,712 + 1,213,864,704 + 622,528,512 = 3,874,824,960
    "Qwen--Qwen3-Next-80B-A3B-Instruct": (24_576, {s: 24_576 * s + 39_518_208 for s in (1024, 8192, 131072)},
                                          79_674_286_848, 3_874_824_960),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_gives_the_hand_computed_model(name):
    per_token, per_seq, total, active = CASES[name]
    m = km.Model.from_hf_config(path(name))
    assert m.kv_bytes_per_token() == per_token
    for s, expected in per_seq.items():
        assert m.kv_bytes_per_seq(s) == expected, s
    assert m.param_count() == total
    assert m.active_param_count() == active
    assert m.supported_context is None  # max_position_embeddings is a hint, not a supported context
    if "max_position_embeddings" in path(name).read_text() or "gemma-3" in name:  # Gemma 3: the class default
        assert "max_position_embeddings" in m.note and "a hint" in m.note
    assert m.source == str(path(name))


def test_every_config_file_is_tested():
    from .test_hf_config_families import CASES as FAMILIES

    on_disk = {p.parent.name for p in DATA.glob("*/config.json")} | {p.stem for p in DATA.glob("reconstructed/*.json")}
    assert on_disk == set(CASES) | set(FAMILIES)


# published totals (model cards / papers) within 1%, or the reason they differ
@pytest.mark.parametrize("name, published", [
    ("meta-llama--Llama-3.2-3B", 3.21e9), ("meta-llama--Llama-3.2-1B", 1.23e9), ("mistralai--Mixtral-8x7B-Instruct-v0.1", 46.7e9),
    ("Qwen--Qwen2.5-7B", 7.61e9), ("Qwen--Qwen3-30B-A3B", 30.5e9), ("Qwen--Qwen3-32B", 32.8e9),
    ("Qwen--Qwen3-8B", 8.2e9), ("openai--gpt-oss-20b", 20.91e9), ("deepseek-ai--DeepSeek-V3", 671e9),
    ("deepseek-ai--DeepSeek-V2-Lite", 15.7e9), ("Qwen--Qwen3-Next-80B-A3B-Instruct", 80e9),
])
def test_totals_within_1_percent_of_published(name, published):
    assert km.Model.from_hf_config(path(name)).param_count() == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("preset, config", [
    ("llama-2-7b", "meta-llama--Llama-2-7b-hf"), ("mixtral-8x7b", "mistralai--Mixtral-8x7B-Instruct-v0.1"),
    ("falcon-7b", "tiiuae--falcon-7b"), ("falcon-40b", "tiiuae--falcon-40b"), ("gemma-2-9b", "google--gemma-2-9b-it"),
    ("mistral-7b-v0.1", "mistralai--Mistral-7B-v0.1"), ("qwen2.5-7b", "Qwen--Qwen2.5-7B"),
    ("deepseek-v3", "deepseek-ai--DeepSeek-V3"), ("llama-3.2-1b", "meta-llama--Llama-3.2-1B"),
    ("deepseek-r1", "deepseek-ai--DeepSeek-V3"),  # R1 shares V3's architecture
])
def test_a_preset_and_its_config_give_the_same_model(preset, config):
    p, c = km.Model.preset(preset), km.Model.from_hf_config(path(config))
    shape = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "vocab", "tied_embeddings", "mlp_matrices",
             "attention", "sliding_window", "n_sliding_layers", "n_experts", "top_k", "d_ff_expert", "kv_lora_rank",
             "qk_rope_dim", "q_lora_rank", "v_head_dim")
    assert {k: getattr(c, k) for k in shape} == {k: getattr(p, k) for k in shape}
    assert c.param_groups() == p.param_groups()
    for s in (1024, 8192, 131072):
        assert c.kv_bytes_per_seq(s) == p.kv_bytes_per_seq(s)
        assert c.attention_flops_per_token(s) == p.attention_flops_per_token(s)


def test_explicit_head_dim_wins_and_the_name_comes_from_the_file():
    m = km.Model.from_hf_config(path("Qwen--Qwen3-32B"))
    assert (m.d_model // m.n_heads, m.head_dim) == (80, 128)
    assert m.name == "Qwen--Qwen3-32B"  # no _name_or_path: the directory's name
    assert km.Model.from_hf_config(path("meta-llama--Llama-2-7b-hf")).name == "meta-llama/Llama-2-7b-hf"
    assert km.Model.from_hf_config(DATA / "Qwen--Qwen3-32B").name == "Qwen--Qwen3-32B"  # a directory reads its config.json


def test_kv_by_layer_kind():
    m = km.Model.from_hf_config(path("Qwen--Qwen3-Next-80B-A3B-Instruct"))
    assert m.kv_bytes_by_kind(8192) == {"linear": 39_518_208, "full": 24_576 * 8192}
    g = km.Model.from_hf_config(path("google--gemma-3-12b-it"))
    assert g.kv_bytes_by_kind(131072) == {"sliding": 8192 * 40 * 1024, "full": 8192 * 8 * 131072}


def test_a_config_model_runs_through_the_step_model():
    m = km.Model.from_hf_config(path("Qwen--Qwen3-Next-80B-A3B-Instruct"))
    step = km.Deployment(m, "h200").step(batch=8, context=8192)
    assert step.kv_bytes_read == 8 * 240_844_800  # one chip reads every sequence's whole cache


LLAMA = json.loads(path("meta-llama--Llama-3.1-8B").read_text())


def edited(base=LLAMA, drop=(), **changes):
    cfg = {k: v for k, v in base.items() if k not in drop}
    cfg.update(changes)
    return cfg


MIXTRAL = json.loads(path("mistralai--Mixtral-8x7B-Instruct-v0.1").read_text())
DEEPSEEK = json.loads(path("deepseek-ai--DeepSeek-V3").read_text())
NEXT = json.loads(path("Qwen--Qwen3-Next-80B-A3B-Instruct").read_text())
GEMMA2 = json.loads(path("google--gemma-2-9b-it").read_text())
FALCON40 = json.loads(path("tiiuae--falcon-40b").read_text())
QWEN3MOE = json.loads(path("Qwen--Qwen3-30B-A3B").read_text())

BAD = [
    (edited(drop=("num_attention_heads",)), "num_attention_heads"),
    (edited(num_attention_heads=0), "num_attention_heads"),
    (edited(num_key_value_heads=-1), "num_key_value_heads"),
    (edited(num_key_value_heads=5), "num_attention_heads.*divisible"),
    (edited(hidden_size=4100), "head_dim"),  # no head_dim, 4100 / 32 is not whole
    (edited(head_dim=0), "head_dim"),
    (edited(model_type="llama9"), "model_type"),
    (edited(drop=("model_type",)), "model_type"),
    (edited(num_hidden_layers=1.5), "num_hidden_layers"),
    (edited(vocab_size="128256"), "vocab_size"),
    (edited(tie_word_embeddings="no"), "tie_word_embeddings"),
    (edited(drop=("intermediate_size",)), "intermediate_size"),
    (edited(layer_types=["full_attention"] * 31), "layer_types"),
    (edited(layer_types=["full_attention"] * 31 + ["swa"]), "layer_types"),
    (edited(MIXTRAL, drop=("num_experts_per_tok",)), "num_experts_per_tok"),
    (edited(MIXTRAL, num_experts_per_tok=9), "num_experts_per_tok"),
    (edited(GEMMA2, drop=("sliding_window",)), "sliding_window"),
    (edited(DEEPSEEK, drop=("kv_lora_rank",)), "kv_lora_rank"),
    (edited(DEEPSEEK, moe_layer_freq=2), "moe_layer_freq"),
    (edited(NEXT, drop=("linear_num_value_heads",)), "linear_num_value_heads"),
    (edited(NEXT, drop=("layer_types", "full_attention_interval")), "full_attention_interval"),
    (edited(FALCON40, drop=("num_kv_heads",)), "n_head_kv"),
    (edited(QWEN3MOE, mlp_only_layers=[0]), "mlp_only_layers"),
    ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 3840,
                                              "num_hidden_layers": 48, "num_attention_heads": 16,
                                              "num_key_value_heads": 5}}, "divisible"),
]


@pytest.mark.parametrize("config, key", BAD)
def test_a_bad_config_names_the_key(config, key):
    with pytest.raises(ValueError, match=key):
        km.Model.from_hf_config(config)


def test_unreadable_files(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not JSON"):
        km.Model.from_hf_config(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="not an object"):
        km.Model.from_hf_config(tmp_path / "list.json")
    with pytest.raises(ValueError, match="cannot read"):
        km.Model.from_hf_config(tmp_path / "missing.json")


# ----- bad config.json values, each a ValueError naming the key -----------------------------------
# The configs are the files in tests/data/hf_configs, edited as each test says.

GPT_OSS = json.loads(path("openai--gpt-oss-20b").read_text())
GEMMA3 = json.loads(path("google--gemma-3-12b-it").read_text())
QWEN3MOE = json.loads(path("Qwen--Qwen3-30B-A3B").read_text())


def test_layer_patterns_read_from_their_keys_when_no_layer_types_is_listed():
    # Qwen3-Next without its layer_types: every full_attention_interval-th layer (4th) is full attention, the
    # rest linear (Gated DeltaNet): 48 layers -> linear, linear, linear, full, twelve times
    m = km.Model.from_hf_config(edited(NEXT, drop=("layer_types",)))
    assert NEXT["full_attention_interval"] == 4 and NEXT["num_hidden_layers"] == 48
    assert [layer.kind for layer in m.layers] == ["linear", "linear", "linear", "full"] * 12
    # Qwen2/3 with use_sliding_window: layers from index max_window_layers on slide (transformers' Qwen2Config:
    # sliding if i >= max_window_layers), so 2 of 48 stay full and 46 slide
    m = km.Model.from_hf_config(edited(QWEN3MOE, use_sliding_window=True, max_window_layers=2, sliding_window=4096))
    assert (m.sliding_window, m.n_sliding_layers) == (4096, 48 - 2)


def test_a_gptq_checkpoint_with_one_scale_per_row_counts_its_bits_alone():
    # group_size -1: one scale per output row, a negligible fraction: 4 bits = 0.5 bytes, 8 bits = 1 byte a weight
    for bits, per_weight in ((4, 0.5), (8, 1.0)):
        w = km.hf_config.weights_from_hf_config({"model_type": "llama", "torch_dtype": "bfloat16",
                                                 "quantization_config": {"quant_method": "gptq", "bits": bits,
                                                                         "group_size": -1}})
        assert (w["mlp"], w["attention"], w["default"]) == (per_weight, per_weight, "bf16")


def test_first_k_dense_replace_above_the_layers_names_the_key():
    # item 1: 99 dense layers of 61 gave a negative parameter count
    with pytest.raises(ValueError, match="first_k_dense_replace.*99.*num_hidden_layers.*61"):
        km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=99))
    with pytest.raises(ValueError, match="first_k_dense_replace.*61.*num_hidden_layers.*61"):
        km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=61))  # no MoE layer left
    assert km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=60)).n_dense_layers == 60


def test_model_refuses_more_dense_layers_than_layers():
    m = km.Model.preset("deepseek-v3")
    with pytest.raises(ValueError, match="n_dense_layers"):
        m.replace(n_dense_layers=m.n_layers + 1)
    with pytest.raises(ValueError, match="n_dense_layers"):
        m.replace(n_dense_layers=-1)


@pytest.mark.parametrize("config, key", [
    (edited(MIXTRAL, drop=("num_local_experts",)), "num_local_experts"),
    (edited(GPT_OSS, drop=("num_local_experts",)), "num_local_experts"),
    (edited(DEEPSEEK, drop=("n_routed_experts",)), "n_routed_experts"),
    (edited(QWEN3MOE, drop=("num_experts",)), "num_experts"),
    (edited(NEXT, drop=("num_experts",)), "num_experts"),
])
def test_moe_without_its_experts_key_is_refused_not_read_as_dense(config, key):
    # item 2
    with pytest.raises(ValueError, match=f"no '{key}'.*mixture of experts"):
        km.Model.from_hf_config(config)


@pytest.mark.parametrize("bad", ["oops", [1], 3])
def test_text_config_must_be_an_object(bad):
    # item 3: a string text_config gave Gemma 3's all-defaults 2.6B model
    with pytest.raises(ValueError, match="'text_config' must be an object"):
        km.Model.from_hf_config({**GEMMA3, "text_config": bad})


def test_non_string_model_type_and_layer_types_entries():
    # item 4: TypeError tracebacks before
    with pytest.raises(ValueError, match="'model_type' must be a string"):
        km.Model.from_hf_config(edited(model_type=["llama"]))
    types = ["full_attention"] * 31 + [{}]
    with pytest.raises(ValueError, match=r"layer_types\[31\] must be a string"):
        km.Model.from_hf_config(edited(layer_types=types))
    with pytest.raises(ValueError, match=r"layer_types\[0\]"):
        km.Model.from_hf_config(edited(layer_types=[["full_attention"]] + ["full_attention"] * 31))


@pytest.mark.parametrize("n", [10**20, 10**6])
def test_huge_layer_count_is_refused(n):
    # item 5: 10**20 raised OverflowError; 10**6 took seconds
    with pytest.raises(ValueError, match="num_hidden_layers.*10,000"):
        km.Model.from_hf_config(edited(num_hidden_layers=n))


def test_malformed_files_and_arguments(tmp_path):
    # item 6
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match="bin.json.*not UTF-8"):
        km.Model.from_hf_config(tmp_path / "bin.json")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match="deep.json"):
        km.Model.from_hf_config(tmp_path / "deep.json")
    for bad in (None, 42, ["a"]):
        with pytest.raises(ValueError, match="config must be a path"):
            km.Model.from_hf_config(bad)


def test_numpy_integers_in_a_dict_config_are_whole_numbers():
    # item 7: np.int32(32) was "must be a whole number >= 1"
    m = km.Model.from_hf_config(edited(num_attention_heads=np.int32(32), num_hidden_layers=np.int64(32)))
    assert m.param_count() == 8_030_261_248 and type(m.n_layers) is int
    with pytest.raises(ValueError, match="num_hidden_layers"):
        km.Model.from_hf_config(edited(num_hidden_layers=True))


def test_a_file_not_called_config_json_is_named_by_its_stem(tmp_path):
    # item 8: was the folder's name ("cfgs")
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "llama31.json").write_text(json.dumps(LLAMA))
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(LLAMA))
    assert km.Model.from_hf_config(tmp_path / "cfgs" / "llama31.json").name == "llama31"
    assert km.Model.from_hf_config(tmp_path / "my-model" / "config.json").name == "my-model"
    assert km.Model.from_hf_config(tmp_path / "my-model").name == "my-model"


def test_gemma2_without_head_dim_takes_the_library_default_256():
    # item 9: Gemma2Config default head_dim=256; d/h = 3584/16 = 224 was used. Numbers as with head_dim (test_hf_config).
    m = km.Model.from_hf_config(edited(GEMMA2, drop=("head_dim",)))
    assert m.head_dim == 256 and m.kv_bytes_per_token() == 344_064 and m.param_count() == 9_241_404_928


def test_gemma3_null_sliding_window_is_refused():
    # item 9, related: an explicit null is not the default 4096
    cfg = json.loads(json.dumps(GEMMA3))
    cfg["text_config"]["sliding_window"] = None
    with pytest.raises(ValueError, match="sliding_window' is null"):
        km.Model.from_hf_config(cfg)


def test_chunked_and_sliding_layers_keep_their_own_windows():
    # item 10: chunked layers took the sliding window. 16 chunked (8192) + 16 sliding (4096) Llama-3.1-8B layers,
    # 4096 B per token per layer (2*8*128*2): at 131,072 tokens 4096 * (16*8192 + 16*4096) = 805,306,368 B.
    types = ["chunked_attention", "sliding_attention"] * 16
    m = km.Model.from_hf_config(edited(layer_types=types, sliding_window=4096, attention_chunk_size=8192))
    assert m.kv_bytes_per_seq(131072) == 805_306_368
    assert {s.window for s in m.layers if s.kind == "chunked"} == {8192}


@pytest.mark.parametrize("types", [["sliding_attention"] * 61, ["sliding_attention", "full_attention"] * 30
                                   + ["full_attention"]])
def test_mla_with_sliding_layer_types_is_refused(types):
    # item 10: the {"full","sliding"} early return skipped the MLA guard
    with pytest.raises(ValueError, match="MLA layers as full attention only"):
        km.Model.from_hf_config(edited(DEEPSEEK, layer_types=types, sliding_window=4096))


def test_the_loaders_limits_include_their_last_value(tmp_path):
    from kvmath.hf_config import _MAX_INT_DIGITS, _parse_int, MAX_CONFIG_BYTES, MAX_LAYERS

    # 309 digits (a float64's range, 1.8e308) is the longest integer literal read; one more is refused by name
    assert _MAX_INT_DIGITS == 309 and _parse_int("9" * 309) == 10 ** 309 - 1
    assert not isinstance(_parse_int("9" * 310), int)
    # a file of exactly 16 MiB is read (it parses: '{}' and spaces, and then lacks its keys); one byte more is refused
    exact, over = tmp_path / "exact.json", tmp_path / "over.json"
    exact.write_bytes(b"{}" + b" " * (MAX_CONFIG_BYTES - 2))
    over.write_bytes(b"{}" + b" " * (MAX_CONFIG_BYTES - 1))
    with pytest.raises(ValueError) as err:
        km.Model.from_hf_config(exact)
    assert "larger than" not in str(err.value)
    with pytest.raises(ValueError, match="larger than 16 MiB"):
        km.Model.from_hf_config(over)
    # 10,000 layers is the most read, 10,001 refused
    assert km.Model.from_hf_config(edited(num_hidden_layers=MAX_LAYERS)).n_layers == 10_000
    with pytest.raises(ValueError, match="num_hidden_layers"):
        km.Model.from_hf_config(edited(num_hidden_layers=MAX_LAYERS + 1))
    # a token may use every expert (8 of Mixtral's 8), not more
    assert km.Model.from_hf_config(edited(MIXTRAL, num_experts_per_tok=8)).top_k == 8
