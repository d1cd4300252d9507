"""`--config path/to/config.json` in every command that takes --model; filters and --json of the listings."""

import json
from pathlib import Path

import pytest

import kvmath as km
from kvmath.cli import main

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
LLAMA31 = str(DATA / "meta-llama--Llama-3.1-8B" / "config.json")
NEXT = str(DATA / "reconstructed" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json")


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_decode_with_a_config_equals_decode_with_the_same_model_as_a_preset(capsys):
    # Llama 3.1 8B's config has Llama 3 8B's shape: every number but the name is the same.
    args = ["--hardware", "h100-sxm", "--batch", "16", "--context", "4096"]
    by_config = run_json(capsys, "decode", "--config", LLAMA31, *args)
    by_preset = run_json(capsys, "decode", "--model", "llama-3-8b", *args)
    assert by_config["model"] == "meta-llama--Llama-3.1-8B" and by_config["supported_context"] is None
    for key in ("kv_cache_bytes", "weight_bytes_read", "attention_flops", "step_s", "kv_bytes_per_token"):
        assert by_config[key] == by_preset[key], key


def test_capacity_and_decode_charge_linear_layers_their_fixed_state(capsys):
    r = run_json(capsys, "decode", "--config", NEXT, "--hardware", "h200", "--batch", "8", "--context", "8192")
    # 24,576 B/token in the 12 full layers + 39,518,208 B of state per sequence (tests/test_hf_config.py)
    assert r["kv_cache_bytes"] == 8 * (24_576 * 8192 + 39_518_208)
    c = run_json(capsys, "capacity", "--config", NEXT, "--hardware", "h200", "--context", "8192", "--chips", "2")
    assert c["kv_bytes_per_token"] == (24_576 * 8192 + 39_518_208) / 8192


@pytest.mark.parametrize("command", [
    ["decode", "--hardware", "h100-sxm", "--batch", "1", "--context", "10"],
    ["capacity", "--hardware", "h100-sxm", "--context", "10"],
    ["critical-batch", "--hardware", "h100-sxm"],
])
def test_a_bad_config_exits_2_with_one_line(capsys, tmp_path, command):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    assert main([command[0], "--config", str(bad), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_attention_heads" in err
    assert main([command[0], "--config", str(tmp_path / "none.json"), *command[1:]]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_config_and_model_are_exclusive(capsys):
    with pytest.raises(SystemExit) as e:
        main(["decode", "--config", LLAMA31, "--model", "llama-3-8b", "--hardware", "h100-sxm",
              "--batch", "1", "--context", "10"])
    assert e.value.code == 2
    assert "not allowed" in capsys.readouterr().err


def test_models_filter_by_family_and_attention(capsys):
    llama = run_json(capsys, "models", "--family", "llama")
    assert {r["name"] for r in llama} == {n for n in km.model_names() if km.get_model(n).family == "llama"}
    assert "llama-3-8b" in {r["name"] for r in llama}
    sliding = {r["name"] for r in run_json(capsys, "models", "--attention", "sliding")}
    assert {"mistral-7b-v0.1", "gemma-2-9b"} <= sliding and "llama-3-8b" not in sliding
    assert {r["name"] for r in run_json(capsys, "models", "--attention", "MLA")} >= {"deepseek-v3"}
    assert main(["models", "--family", "nobody"]) == 2  # an unknown family is an error, not an empty table
    assert "unknown --family 'nobody'" in capsys.readouterr().err


def test_hardware_filter_by_vendor(capsys):
    google = run_json(capsys, "hardware", "--vendor", "Google")
    assert {r["name"] for r in google} >= {"tpu-v4", "tpu-v5e", "tpu-v5p"}
    assert all(r["vendor"] == "google" for r in google)
    assert main(["hardware", "--vendor", "amd"]) == 0
    assert "mi300x" in capsys.readouterr().out
