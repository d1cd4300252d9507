"""`kvmath capacity` / `models` / `hardware` / `decode`: the review's CLI items 16-18 and 21-24.

Each bad input exits 2 with one line on stderr naming the option; figures are checked against the library.
"""

import json

import pytest

import kvmath as km
from kvmath.cli import main

NEXT = "tests/data/hf_configs/reconstructed/Qwen--Qwen3-Next-80B-A3B-Instruct.json"
CAP = ["capacity", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--context", "8192"]


def fails(capsys, *argv):
    """The one stderr line of a command that must exit 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def text(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_engine_refuses_params_and_kv_overrides(capsys):
    # item 16: both were silently ignored by the vLLM block
    assert "--params does not apply with --engine vllm" in fails(capsys, *CAP, "--engine", "vllm", "--params", "1e9")
    assert "--kv-bytes-per-token does not apply" in fails(capsys, *CAP, "--engine", "vllm", "--kv-bytes-per-token", "1")


def test_engine_tp_defaults_to_the_chips_the_command_chose(capsys):
    # item 16: llama-3.1-70b needs 2 H100s; the engine ran at TP=1 and failed
    assert main(["capacity", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--context", "8192",
                 "--engine", "vllm", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["chips"] == 2 and r["engine"]["tensor_parallel"] == 2
    e = km.vllm_engine(km.get_model("llama-3.1-70b"), km.get_chip("h100-sxm"), 8192, tensor_parallel=2)
    assert r["engine"]["num_blocks"] == e.num_blocks


def test_engine_errors_name_the_tp_and_chips(capsys):
    err = fails(capsys, *CAP, "--engine", "vllm", "--chips", "3")
    assert "TP=3 (--chips)" in err and "does not divide the 32 attention heads" in err


def test_hbm_bytes_is_the_reported_total_for_the_engine_too(capsys):
    # item 17: 80e9 was taken as the runtime total by the engine and as the reported total by --budget
    r = json.loads(text(capsys, "capacity", "--model", "llama-3-8b", "--hbm-bytes", "80e9", "--context", "8192",
                        "--engine", "vllm", "--json"))
    assert r["engine"]["total_bytes"] == 80e9 - 0.5 * km.GiB and r["engine"]["total_is_estimate"]
    out = text(capsys, "capacity", "--model", "llama-3-8b", "--hbm-bytes", "80e9", "--context", "8192",
               "--engine", "vllm")
    assert "CUDA runtime total" in out and "estimate: reported total less 0.5 GiB" in out


@pytest.mark.parametrize("extra", [["--engine", "vllm"], ["--budget", "reserve"], ["--budget", "reported"]])
def test_chip_without_a_reported_total_points_to_hbm_bytes(capsys, extra):
    # item 18: named a budget 'runtime' that does not exist, and the phrase twice for --budget reported
    err = fails(capsys, "capacity", "--model", "llama-3-8b", "--hardware", "h200", "--context", "8192", *extra)
    assert "--hbm-bytes" in err and "--budget device" in err and "'runtime'" not in err
    assert err.count("--budget reported") <= 1


def test_engine_text_output_labels(capsys):
    # item 21: duplicated "54.72x at 8,192" phrase; "device total" is the CUDA runtime total; engine-wide lines
    out = text(capsys, *CAP, "--engine", "vllm")
    assert "54.72x at 8,192 tokens\n" in out and "54.72x at 8,192 tokens, " not in out
    assert "device total" not in out and "CUDA runtime total" in out
    assert out.index("engine (all ranks)") < out.index("KV cache size") < out.index("max concurrency")
    # the value column is aligned whatever the label
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert lines["KV budget on 1 chip(s)"].index("63.94") == lines["weights"].index("16.06")
    # a different --max-model-len still shows both
    out = text(capsys, *CAP, "--engine", "vllm", "--max-model-len", "16384")
    assert "x at 16,384 tokens, " in out and "x at 8,192\n" in out


def test_context_past_max_model_len_is_refused(capsys):
    assert "--context 8,192 exceeds --max-model-len 4,096" in fails(capsys, *CAP, "--engine", "vllm",
                                                                     "--max-model-len", "4096")


def test_engine_refuses_what_vllm_refuses(capsys):
    # items 11, 14, 15 through the CLI: linear layers, a max_model_len that does not fit, TP over the heads
    assert "linear layers" in fails(capsys, "capacity", "--config", NEXT, "--hardware", "b200", "--context", "131072",
                                    "--engine", "vllm")
    assert "vLLM refuses" in fails(capsys, *CAP, "--engine", "vllm", "--max-model-len", "4e6")
    assert "too large" in fails(capsys, *CAP, "--engine", "vllm", "--max-model-len", "1e30")
    assert "block_size must be one of" in fails(capsys, *CAP, "--engine", "vllm", "--block-size", "7")
    assert "block_size must be one of" in fails(capsys, *CAP, "--engine", "vllm", "--block-size", "1e12")


def test_kv_per_token_is_labelled_an_average(capsys):
    # item 22: gpt-oss-20b at 131,072 tokens averages 24,600 B/token; it reserves 49,152
    out = text(capsys, "capacity", "--model", "gpt-oss-20b", "--hardware", "h100-sxm", "--context", "131072")
    assert "KV per token (average over S = 131,072)" in out and "24,600 B" in out
    assert "tokens that fit at that average" in out


@pytest.mark.parametrize("argv, hint", [
    (["models", "--family", "lama"], "unknown --family 'lama'; did you mean 'llama'"),
    (["models", "--attention", "slidng"], "unknown --attention 'slidng'; did you mean 'sliding'"),
    (["hardware", "--vendor", "nvidai"], "unknown --vendor 'nvidai'; did you mean 'nvidia'"),
])
def test_unknown_filters_exit_2_with_a_hint(capsys, argv, hint):
    # item 23: printed an empty table, exit 0
    assert hint in fails(capsys, *argv)
    assert main(["models", "--attention", "linear", "--json"]) == 0  # a known kind no preset has: empty, fine
    assert json.loads(capsys.readouterr().out) == []


def test_overflow_messages_name_the_options(capsys):
    # item 24
    err = fails(capsys, "decode", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1e300",
                "--context", "8000")
    assert "--batch" in err and "--context" in err
    assert "--bandwidth" in fails(capsys, "decode", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1",
                                  "--context", "8", "--bandwidth", "1e-320")
    err = fails(capsys, "capacity", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--chips", "1",
                "--context", "8")
    assert "--chips 1 cannot hold" in err and "--chips 11 or more" in err
    assert "--kv-bytes-per-token" in fails(capsys, "capacity", "--params", "1e10", "--kv-bytes-per-token", "1e-300",
                                           "--hbm-bytes", "1e12", "--context", "1")
