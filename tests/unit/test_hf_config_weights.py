"""weights_from_hf_config: the stored precision a config.json names, on the repository's test configs.

gpt-oss-20b's file in tests/data/hf_configs is a mirror whose quantization_config read "gptq"; the committed
copy has upstream's "mxfp4" put back (that folder's README), as quoted from
https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json in the xinyuwei-david/david-share README
Deep-Learning/OAI-OSS-on-Azure: modules_to_not_convert the attention, the router, the embedding and the LM head.
The reconstructed DeepSeek-V3 and Kimi K2 files carry the fp8 block ({activation_scheme dynamic, fmt e4m3,
quant_method fp8, weight_block_size [128, 128]}) that deepseek-ai/DeepSeek-V3's README_WEIGHTS.md gives for its
FP8 weights ("FP8 Configuration", https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md).
"""

import json
import re

import pytest

import kvmath as km
from tests.unit.test_hf_config import DATA, path

GPT_OSS_MIRROR = json.loads(path("openai--gpt-oss-20b").read_text())
GPT_OSS_UPSTREAM_QUANT = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
    "quant_method": "mxfp4",
}
GPT_OSS = {**GPT_OSS_MIRROR, "quantization_config": GPT_OSS_UPSTREAM_QUANT}
#: the reconstructed file, which carries the release's fp8 block (tests/data/hf_configs/README.md)
DEEPSEEK_V3 = json.loads(path("deepseek-ai--DeepSeek-V3").read_text())
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def test_gpt_oss_as_published_keeps_its_experts_in_mxfp4():
    weights = km.hf_config.weights_from_hf_config(GPT_OSS)
    assert weights == {"default": "bf16", "experts": "mxfp4"}
    m = km.Model.from_hf_config(GPT_OSS)
    # experts 24 layers x 32 x 3 x 2880^2 = 19,110,297,600 at 4.25 bits = 10,152,345,600 B;
    # the other 1,797,629,760 parameters in bf16 = 3,595,259,520 B; sum 13,747,605,120 B (13.75 GB), exact.
    assert m.param_groups()["experts"] == 19_110_297_600
    assert m.weight_bytes_resident(weights) == 13_747_605_120
    assert "'mxfp4'" in m.note


def test_the_test_copy_carries_upstreams_quantization_and_a_gptq_block_without_bits_is_refused():
    assert json.loads(path("openai--gpt-oss-20b").read_text())["quantization_config"] == GPT_OSS_UPSTREAM_QUANT
    assert km.hf_config.weights_from_hf_config(path("openai--gpt-oss-20b")) == {"default": "bf16", "experts": "mxfp4"}
    relabelled = {**GPT_OSS, "quantization_config": {**GPT_OSS_UPSTREAM_QUANT, "quant_method": "gptq"}}
    with pytest.raises(ValueError, match=r"quantization_config\.bits' must be"):  # a gptq block without its bits
        km.hf_config.weights_from_hf_config(relabelled)
    assert "'gptq'" in km.Model.from_hf_config(relabelled).note  # recorded, not silently bf16


def test_deepseek_v3_fp8_block_scales_are_negligible():
    assert DEEPSEEK_V3["quantization_config"] == FP8_BLOCK  # the release's block, as DeepSeek publishes it
    weights = km.hf_config.weights_from_hf_config(DEEPSEEK_V3)
    assert weights == {"default": "bf16", "attention": "fp8-e4m3", "mlp": "fp8-e4m3", "experts": "fp8-e4m3",
                       "shared_experts": "fp8-e4m3"}
    m = km.Model.from_hf_config(DEEPSEEK_V3)
    g = m.param_groups()
    fp8 = g["attention"] + g["mlp"] + g["experts"] + g["shared_experts"]  # 669,065,609,216 weights, 1 B each
    bf16 = g["router"] + g["lm_head"] + g["embedding"] + g["norms"]        # 1,960,670,208 weights, 2 B each
    assert m.weight_bytes_resident(weights) == fp8 + 2 * bf16 == 672_986_949_632
    # one fp32 scale per 128 x 128 block: 163 MB, 0.024 % of the total, not counted
    assert 4 * fp8 / (128 * 128) / m.weight_bytes_resident(weights) < 2.5e-4


def test_kimi_k2_is_sized_as_its_fp8_release():
    # the reconstruction carries DeepSeek-V3's fp8 block (Kimi K2 is released "in block-fp8 format"): attention
    # 61 x (7168 x 1536 + 1536 x 64 x 192 + 7168 x 576 + 512 x 64 x 256 + 64 x 128 x 7168) = 6,168,444,928,
    # the dense MLP 3 x 7168 x 18432 = 396,361,728, 60 MoE layers of 384 experts and 1 shared of 3 x 7168 x 2048
    # (44,040,192): 1,014,686,023,680 + 2,642,411,520, all in 1 B; router 60 x 7168 x 384 = 165,150,720, LM head and
    # embedding 163,840 x 7168 = 1,174,405,120 each, norms 881,664, in 2 B: 1,023,893,241,856 + 2 x 2,514,842,624
    config = json.loads(path("moonshotai--Kimi-K2-Instruct").read_text())
    assert config["quantization_config"] == FP8_BLOCK
    m = km.Model.from_hf_config(config)
    assert 61 * (7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 64 * 128 * 7168) == 6_168_444_928
    assert 60 * (384 + 1) * 3 * 7168 * 2048 == 1_014_686_023_680 + 2_642_411_520
    assert m.weight_bytes_resident(km.hf_config.weights_from_hf_config(config)) == \
        1_023_893_241_856 + 2 * 2_514_842_624 == 1_028_922_927_104


@pytest.mark.parametrize("name, expected", [
    ("meta-llama--Llama-3.1-8B", "bf16"), ("meta-llama--Llama-2-7b-hf", "fp16"),
    ("mistralai--Mistral-7B-v0.1", "fp32"), ("google--gemma-3-12b-it", "bf16"), ("Qwen--Qwen3-32B", "bf16"),
])
def test_plain_configs_give_their_torch_dtype(name, expected):
    assert km.hf_config.weights_from_hf_config(path(name)) == expected


def test_every_test_config_reads_or_names_the_key():
    for config in sorted(DATA.glob("*/config.json")) + sorted((DATA / "reconstructed").glob("*.json")):
        try:
            km.hf_config.weights_from_hf_config(config)
        except ValueError as err:
            assert "quantization_config" in str(err) or "torch_dtype" in str(err), (config, err)


@pytest.mark.parametrize("edit, key", [
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config.bits"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0}}, "quantization_config.group_size"),
    ({"quantization_config": {"bits": 4}}, "quantization_config.quant_method"),
    ({"quantization_config": "mxfp4"}, "quantization_config"),
    ({"quantization_config": {"quant_method": "fp8", "fmt": "e3m4"}}, "quantization_config.fmt"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}, "weight_block_size"),
    ({"quantization_config": {**GPT_OSS_UPSTREAM_QUANT, "modules_to_not_convert": ["model.vision"]}},
     "modules_to_not_convert"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
])
def test_a_bad_quantization_config_names_the_key(edit, key):
    with pytest.raises(ValueError, match=key):
        km.hf_config.weights_from_hf_config({**GPT_OSS, "torch_dtype": "bfloat16", **edit})


def test_no_dtype_and_no_quantization_is_refused():
    with pytest.raises(ValueError, match="torch_dtype"):
        km.hf_config.weights_from_hf_config({"model_type": "llama"})


def test_the_cli_sizes_gpt_oss_as_shipped_with_experts_dtype():
    import contextlib
    import io

    from kvmath import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["capacity", "--config", str(path("openai--gpt-oss-20b")), "--hardware", "h100-sxm",
                  "--context", "131072", "--weight-dtype", "bf16", "--experts-dtype", "mxfp4", "--json"])
    result = json.loads(out.getvalue())
    assert result["weight_bytes_per_chip"] == 13_747_605_120  # one chip: all of them  # as in the hand computation above
    assert result["max_batch"] == 20  # (80e9 - 13.75e9) B / 3,224,371,200 B per sequence = 20.5


@pytest.mark.parametrize("entry, part", [
    ("model.layers.0.self_attn", "one layer"),                      # transformers leaves layer 0 alone in bf16
    ("model.layers.12.mlp.experts", "one layer"),
    ("model.layers.*.mlp.experts.gate_up_proj", "one matrix"),       # down_proj would still be converted
    ("model.layers.*.self_attn.q_proj", "one matrix"),
])
def test_a_modules_to_not_convert_entry_for_part_of_a_group_is_refused(entry, part):
    # kvmath sizes each group in one format in every layer: widening such an entry to the whole group would
    # size every layer's attention (Llama 3.1 8B: +1.34 GB on 8.5 GB) or every expert matrix in bf16
    quant = {"quant_method": "fp8", "modules_to_not_convert": [entry, "lm_head"]}
    with pytest.raises(ValueError, match=rf"names '{re.escape(entry)}', {part}"):
        km.hf_config.weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": quant})


def test_a_shared_expert_gate_is_not_a_group():
    # Qwen's shared_expert_gate (one d x 1 vector a layer) is not in kvmath's count, so leaving it unconverted
    # changes nothing; it no longer switches every shared expert to bf16
    quant = {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.*.mlp.shared_expert_gate", "lm_head"]}
    w = km.hf_config.weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": quant})
    assert w["shared_experts"] == "fp8-e4m3" and "lm_head" not in w


# ----- review J23-8: quantization settings that change the stored size are read or refused by name ----------

LLAMA_8B = json.loads(path("meta-llama--Llama-3.1-8B").read_text())
GPTQ_4_128 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}


def _gptq(**extra):
    return {**LLAMA_8B, "quantization_config": {**GPTQ_4_128, **extra}}


def test_gptq_lm_head_and_whole_group_modules_in_block_by_hand():
    """Llama 3.1 8B (hidden 4,096, MLP 14,336, 32 layers, 32 / 8 heads of 128, vocab 128,256, untied, bf16), GPTQ
    4 bits in groups of 128: (4 + 16/128 + 4/128) / 8 = 133/256 = 0.51953125 B a weight. By hand: attention 32 x
    4,096 x (4,096 + 2 x 1,024 + 4,096) = 1,342,177,280 weights, MLP 32 x 3 x 4,096 x 14,336 = 5,637,144,576,
    embedding = LM head = 128,256 x 4,096 = 525,336,576, norms 65 x 4,096 = 266,240.
      default (head in bf16): 6,979,321,856 x 133/256 + (2 x 525,336,576 + 266,240) x 2 = 3,625,975,808 +
        2,101,878,784 = 5,727,854,592 B;
      lm_head true (GPTQModel): 3,625,975,808 + 525,336,576 x 133/256 (272,928,768) + (525,336,576 + 266,240) x 2
        = 4,950,110,208 B;
      modules_in_block_to_quantize of the attention only: 1,342,177,280 x 133/256 = 697,303,040 + (5,637,144,576 +
        1,050,673,152 + 266,240) x 2 = 14,073,470,976 B."""
    m = km.Model.from_hf_config(LLAMA_8B)
    read = km.hf_config.weights_from_hf_config
    assert m.weight_bytes_resident(read(_gptq())) == 5_727_854_592
    head = read(_gptq(lm_head=True))
    assert head["lm_head"] == 0.51953125 and m.weight_bytes_resident(head) == 4_950_110_208
    everything = [["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
                  ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"]]
    assert read(_gptq(modules_in_block_to_quantize=everything)) == read(_gptq())
    attention = read(_gptq(modules_in_block_to_quantize=everything[:2]))
    assert "mlp" not in attention and m.weight_bytes_resident(attention) == 14_073_470_976


@pytest.mark.parametrize("extra, named", [
    # only q_proj quantized (15.27 GB by hand: kvmath cannot size one matrix of a group apart): refused, not 5.73
    (dict(modules_in_block_to_quantize=[["self_attn.q_proj"]]), "modules_in_block_to_quantize' quantizes q_proj"),
    (dict(modules_in_block_to_quantize=[["mlp.experts.0.up_proj"]]), "modules_in_block_to_quantize' names expert"),
    (dict(modules_in_block_to_quantize="self_attn"), "modules_in_block_to_quantize' must be a list of lists"),
    (dict(dynamic={"-:model\\.layers\\.0\\..*": {}}), "quantization_config.dynamic' sets formats module by module"),
    (dict(lm_head="yes"), "quantization_config.lm_head' must be true or false"),
])
def test_gptq_settings_kvmath_cannot_size_are_refused_by_name(extra, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        km.hf_config.weights_from_hf_config(_gptq(**extra))


def test_mxfp4_on_a_dense_model_and_lm_head_elsewhere_are_refused_by_name(capsys):
    # transformers' mxfp4 quantizer converts experts only (gpt-oss): on a dense Llama it would leave every weight in
    # bf16 (16.06 GB) while the config says mxfp4, so the config is refused, naming the key
    dense = {**LLAMA_8B, "quantization_config": {"quant_method": "mxfp4"}}
    with pytest.raises(ValueError, match=r"'quantization_config.quant_method' 'mxfp4' quantizes expert weights only"):
        km.hf_config.weights_from_hf_config(dense)
    awq = {**LLAMA_8B, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "lm_head": True}}
    with pytest.raises(ValueError, match=r"'quantization_config.lm_head' true is read for quant_method 'gptq'"):
        km.hf_config.weights_from_hf_config(awq)
    tied = {**LLAMA_8B, "tie_word_embeddings": True, "quantization_config": {**GPTQ_4_128, "lm_head": True}}
    with pytest.raises(ValueError, match="'tie_word_embeddings' true"):
        km.hf_config.weights_from_hf_config(tied)
    # gpt-oss's own mxfp4 (experts present) is still read
    assert km.hf_config.weights_from_hf_config(GPT_OSS)["experts"] == "mxfp4"
