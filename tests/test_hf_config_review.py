"""Config loading: the bad inputs of the config/memory review (items 1-10), each a ValueError naming the key.

The configs are the files in tests/data/hf_configs, edited as each test says.
"""

import json

import numpy as np
import pytest

import kvmath as km
from tests.unit.test_hf_config import DEEPSEEK, GEMMA2, LLAMA, MIXTRAL, NEXT, edited, path

GPT_OSS = json.loads(path("openai--gpt-oss-20b").read_text())
GEMMA3 = json.loads(path("google--gemma-3-12b-it").read_text())
QWEN3MOE = json.loads(path("Qwen--Qwen3-30B-A3B").read_text())


def test_first_k_dense_replace_above_the_layers_names_the_key():
    # item 1: 99 dense layers of 61 gave a negative parameter count
    with pytest.raises(ValueError, match="first_k_dense_replace.*99.*num_hidden_layers.*61"):
        km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=99))
    with pytest.raises(ValueError, match="first_k_dense_replace.*61.*num_hidden_layers.*61"):
        km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=61))  # no MoE layer left
    assert km.Model.from_hf_config(edited(DEEPSEEK, first_k_dense_replace=60)).n_dense_layers == 60


def test_model_refuses_more_dense_layers_than_layers():
    m = km.get_model("deepseek-v3")
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
