"""The kvmath command line: results, JSON keys, --config, the listings, and exit status 2 on bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvmath as km
from kvmath.cli import main

from kvmath import Deployment

#: kvmath.formulas.StepBreakdown's to_dict(): the keys of `decode --json` with --params and no model
NOTES_KEYS = {"kv_read_s", "weight_read_s", "weight_compute_s", "attention_compute_s", "overhead_s", "no_overlap_s",
              "strict_s", "weights_bind", "attention_binds", "binds"}


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_notes_30b_example_from_the_command_line(capsys):
    common = ["decode", "--params", "30e9", "--weight-dtype", "int8", "--kv-bytes-per-token", "100e3",
              "--bandwidth", "8.2e11", "--flops", "1.97e14", "--chips", "16", "--context", "8192"]
    small = run_json(capsys, *common, "--batch", "4")
    assert set(small) == NOTES_KEYS
    # the notes' 2.536 ms: memory-bound, so both forms agree
    assert small["no_overlap_s"] * 1e3 == pytest.approx(2.536, abs=5e-4)
    assert small["strict_s"] * 1e3 == pytest.approx(2.536, abs=5e-4)
    assert small["binds"] == "memory"
    big = run_json(capsys, *common, "--batch", "256")
    # the notes' 20.86 ms is the no-overlap form: 15.98 ms of KV + 4.87 ms of weight math
    assert big["no_overlap_s"] * 1e3 == pytest.approx(20.86, abs=5e-3)
    assert big["weights_bind"] == "compute"
    # strict: (256 * 8192 * 100e3 + 30e9) B / (16 * 8.2e11 B/s) = 18.271 ms, memory-bound
    assert big["strict_s"] * 1e3 == pytest.approx((256 * 8192 * 100e3 + 30e9) / (16 * 8.2e11) * 1e3, rel=1e-12)
    assert big["strict_s"] * 1e3 == pytest.approx(18.27, abs=5e-3)
    assert big["binds"] == "memory"
    assert big["attention_compute_s"] == 0  # no model: no heads to count
    # the same figures are the notes' formula called directly
    assert big == km.formulas.step_breakdown(256, 8192 * 100e3, 30e9, 30e9, 16 * 8.2e11, 16 * 1.97e14).to_dict()
    out = text(capsys, *common, "--batch", "256")
    assert "critical batch B_crit    120.1" in out  # 1.97e14 x 1 B / (2 x 8.2e11)


def test_thread_example_mha_vs_mqa_with_tp2(capsys):
    common = ["decode", "--hardware", "a100-80gb", "--chips", "2", "--batch", "16", "--efficiency", "0.7"]
    mha = run_json(capsys, *common, "--model", "codellama-7b", "--context", "8192")
    # the cache: 16 x 8192 tokens x 32 layers x 2 x 4096 x 2 B = 68.72 GB, half on each of the two GPUs
    assert mha["kv_bytes_read"] == 16 * 8192 * 32 * 2 * 4096 * 2 / 2
    assert mha["kv_read_s"] == pytest.approx(mha["kv_bytes_read"] / (0.7 * 2.039e12), rel=1e-12)
    assert mha["is_lower_bound"] is False  # an efficiency below 1 makes it an estimate
    # falcon-7b's 71 heads do not split 2 ways (review item 5): the MQA case uses StarCoder (48 heads, 1 KV head)
    assert main([*common, "--model", "falcon-7b", "--context", "8192"]) == 2
    assert "--parallel pp=2" in capsys.readouterr().err
    mqa_model = ["--model", "starcoder", "--context", "262144"]
    heads = run_json(capsys, *common, *mqa_model)
    batch = run_json(capsys, *common, *mqa_model, "--kv-shard", "batch")
    whole = 16 * 262144 * 40 * 2 * 128 * 2  # 40 layers, one KV head of 128, bf16
    assert heads["kv_bytes_read"] == whole  # one KV head: no split
    assert batch["kv_bytes_read"] == whole / 2  # --kv-shard batch is --parallel tp=2,kv=batch
    assert batch == run_json(capsys, "decode", "--hardware", "a100-80gb", "--parallel", "tp=2,kv=batch", "--batch", "16",
                             "--efficiency", "0.7", *mqa_model)


def test_llama_70b_on_8_h100(capsys):
    r = run_json(capsys, "decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8",
                 "--batch", "64", "--context", "4096")
    # KV: 64 * 4096 * 327680 B over 8 chips. Weights read: the 68,976,648,192 parameters less the
    # 32,000 x 8,192 input table, plus the 64 rows looked up, at 2 B each over 8 chips; all at 3.35e12 B/s
    assert r["kv_read_s"] == pytest.approx(64 * 4096 * 327_680 / 8 / 3.35e12, rel=1e-9)
    read = (68_976_648_192 - 32_000 * 8192 + 64 * 8192) * 2
    assert r["weight_bytes_read"] == pytest.approx(read / 8, rel=1e-15)
    assert r["weight_bytes_resident"] == pytest.approx(68_976_648_192 * 2 / 8, rel=1e-15)
    assert r["weight_read_s"] == pytest.approx(read / 8 / 3.35e12, rel=1e-12)
    # attention: 4 * B * S * L * h * d_h FLOPs, split 8 ways
    assert r["attention_flops"] == 4 * 64 * 4096 * 80 * 64 * 128 / 8
    # the default link is the H100's own NVLink 4: 2 all-reduces per layer are counted without --link
    assert r["comm_s"] > 0 and r["n_chips"] == 8
    none = run_json(capsys, "decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8",
                    "--batch", "64", "--context", "4096", "--link", "none")
    assert none["comm_s"] == 0 and none["kv_read_s"] == r["kv_read_s"]
    assert r["strict_s"] == max(r["memory_s"], r["compute_s"], r["comm_s"])
    out = text(capsys, "decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8",
               "--batch", "64", "--context", "4096")
    assert "critical batch B_crit    295.3" in out and "link nvlink4" in out


def test_llama_3_8b_bound_is_not_beaten_by_llama_cpp(capsys):
    # llama.cpp PR #15131: Llama 3 8B in bf16 on an RTX 4090, pp512 at micro-batch 1 (each step a full
    # pass over the weights): 65.21 tokens/s. The bound must be at least that, even at S = 512.
    r = run_json(capsys, "decode", "--model", "llama-3-8b", "--hardware", "rtx-4090", "--batch", "1", "--context", "512")
    # hand: (8,030,261,248 - 128,256 x 4,096 + 4,096) x 2 B of weights, 512 x 131,072 B of KV, at 1.008e12 B/s
    weights = (8_030_261_248 - 128_256 * 4096 + 4096) * 2
    assert r["strict_s"] == pytest.approx((weights + 512 * 131_072) / 1.008e12, rel=1e-12)
    assert r["tokens_per_s"] > 65.21


def test_moe_weight_bytes_floor_estimate_and_resident(capsys):
    r = run_json(capsys, "decode", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--batch", "8", "--context", "1024")
    m = km.Model.preset("mixtral-8x7b")
    expert = 3 * 4096 * 14336  # one expert's gated MLP
    resident = m.param_count() * 2
    # floor: 2 of 8 experts per layer; resident: all 8
    assert r["weight_bytes_resident"] == resident
    assert r["weight_bytes_read"] == pytest.approx(resident - 32 * 6 * expert * 2 - (32000 - 8) * 4096 * 2, rel=1e-12)
    # the step bound charges the floor; capacity holds every expert
    assert r["weight_read_s"] == pytest.approx(r["weight_bytes_read"] / 3.35e12, rel=1e-12)
    # Mixtral's own B_crit is about P_total / P_active times the dense 295
    c = run_json(capsys, "critical-batch", "--model", "mixtral-8x7b", "--hardware", "h100-sxm")
    assert 1000 < c["model_critical_batch"] < 1100 and c["critical_batch"] == pytest.approx(295.3, abs=0.05)


def test_every_decode_key_is_documented(capsys):
    from kvmath.cli import DECODE_KEYS
    r = run_json(capsys, "decode", "--model", "deepseek-v3", "--hardware", "h200", "--chips", "8", "--batch", "4",
                 "--context", "4096")
    assert list(r) == list(DECODE_KEYS) == list(Deployment("deepseek-v3", "h200", "tp=8").step(4, 4096).to_dict())
    with pytest.raises(SystemExit):
        main(["decode", "--help"])
    help_text = capsys.readouterr().out
    for key in DECODE_KEYS:
        assert key in help_text


def test_context_beyond_supported_warns_on_stderr(capsys):
    assert main(["decode", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--batch", "1", "--context", "8192"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and "4,096" in captured.err
    assert main(["decode", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--batch", "1", "--context", "4096"]) == 0
    assert capsys.readouterr().err == ""


def test_text_output_has_units(capsys):
    assert main(["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8", "--batch", "64", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "ms" in out and "GB" in out and "GiB" in out and "tokens/s" in out and "B_crit" in out


def test_capacity_52b(capsys):
    r = run_json(capsys, "capacity", "--params", "52e9", "--kv-bytes-per-token", "2097152", "--hbm-bytes", "40e9", "--context", "2048")
    assert (r["min_chips"], r["max_tokens"], r["max_batch"]) == (3, 7629, 3)
    assert r == km.formulas.fit(52e9, 2, 2097152, 2048, 40e9).to_dict()


def test_critical_batch_and_listings(capsys):
    assert run_json(capsys, "critical-batch", "--hardware", "a100-40gb", "--bandwidth", "1.5e12")["critical_batch"] == 208.0
    names = [m["name"] for m in run_json(capsys, "models")]
    assert "deepseek-v3" in names
    chips = {c["name"]: c for c in run_json(capsys, "hardware")}
    assert chips["h100-sxm"]["bandwidth"] == 3.35e12


@pytest.mark.parametrize(
    "argv, words",
    [
        (["decode", "--model", "llama2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "1"], "llama-2-70b"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100", "--batch", "1", "--context", "1"], "hardware"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "-1", "--context", "1"], "--batch"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "nan", "--context", "1"], "--batch"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "0"], "--context"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "1", "--chips", "0"], "--chips"),
        (["decode", "--model", "llama-2-70b", "--bandwidth", "0", "--flops", "1e15", "--batch", "1", "--context", "1"], "--bandwidth"),
        (["decode", "--model", "llama-2-70b", "--hardware", "a100-80gb", "--compute-dtype", "fp8", "--batch", "1", "--context", "1"], "fp8"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--weight-dtype", "int3", "--batch", "1", "--context", "1"], "--weight-dtype"),
        (["decode", "--hardware", "h100-sxm", "--batch", "1", "--context", "1"], "--model"),
        (["decode", "--model", "llama-2-70b", "--batch", "1", "--context", "1"], "--hardware"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "one", "--context", "1"], "--batch"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--batch", "1", "--context", "1", "--efficiency", "1.5"], "--efficiency"),
        (["capacity", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--chips", "2", "--context", "1"], "--chips 2 cannot hold"),
        (["critical-batch"], "--hardware"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8", "--link", "nvlink9", "--batch", "1", "--context", "1"], "--link"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--parallel", "tp=3", "--batch", "1", "--context", "1"], "--parallel"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--parallel", "tp=8", "--chips", "4", "--batch", "1", "--context", "1"], "--chips"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--chips", "8", "--chips-per-node", "0", "--batch", "1", "--context", "1"], "--chips-per-node"),
        (["decode", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--params", "7e9", "--batch", "1", "--context", "1"], "--params"),
        (["run", "--model", "llama-2-70b", "--hardware", "h100-sxm", "--input", "1", "--output", "2", "--budget", "reserve", "--json"], "--budget"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        code = main(argv)
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert words in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_python_dash_m_and_console_script():
    # the console script pip installed beside this interpreter (the venv's bin/)
    script = str(Path(sys.executable).with_name("kvmath"))
    for cmd in ([sys.executable, "-m", "kvmath"], [script]):
        ok = subprocess.run([*cmd, "critical-batch", "--hardware", "h100-sxm"], capture_output=True, text=True)
        assert ok.returncode == 0 and "295.3" in ok.stdout
        bad = subprocess.run([*cmd, "decode", "--model", "nope"], capture_output=True, text=True)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_closed_pipe_is_not_an_error():
    # `kvmath models | head -1`: the reader goes away before the output ends
    proc = subprocess.Popen([sys.executable, "-m", "kvmath", "models"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    assert proc.wait() == 0
    assert b"Traceback" not in proc.stderr.read()


def test_mla_latent_cache_is_not_split_by_heads(capsys):
    # DeepSeek-V3 caches one 576-element latent per token per layer, shared by all 128 heads:
    # tensor parallelism over heads cannot split it, so every chip holds all of it.
    common = ["decode", "--model", "deepseek-v3", "--hardware", "h200", "--chips", "8", "--batch", "8",
              "--context", "4096", "--weight-dtype", "fp8"]
    heads = run_json(capsys, *common)
    batch = run_json(capsys, *common, "--kv-shard", "batch")
    total = 8 * 4096 * 70_272
    assert heads["kv_bytes_read"] == total
    assert batch["kv_bytes_read"] == total / 8


# ----- capacity, models, hardware and decode: bad options and figures -----------------------------
# Each bad input exits 2 with one line on stderr naming the option; figures are checked against the library.

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
    assert "--params does not combine with --model" in fails(capsys, *CAP, "--engine", "vllm", "--params", "1e9")
    assert "--kv-bytes-per-token does not combine" in fails(capsys, *CAP, "--engine", "vllm", "--kv-bytes-per-token", "1")


def test_engine_tp_defaults_to_the_chips_the_command_chose(capsys):
    # item 16: llama-3.1-70b needs 2 H100s; the engine ran at TP=1 and failed
    assert main(["capacity", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--context", "8192",
                 "--engine", "vllm", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["n_chips"] == 2
    e = km.memory.vllm_engine(km.Model.preset("llama-3.1-70b"), km.Chip.preset("h100-sxm"), 8192, tensor_parallel=2)
    assert r["engine"]["num_blocks"] == e.num_blocks
    # 405B: 811.71 GB is 10.1 chips of 80 GB, but its 128 heads do not split 11 or 12 ways, and by layers
    # 11 stages leave one of ceil(126 / 11) = 12 layers plus the 4.2 GB LM head (80.9 GB): 12 stages hold it
    err = fails(capsys, "capacity", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--chips", "8", "--context", "8")
    assert "--chips 8 cannot hold" in err and "--parallel pp=12" in err  # --chips 12 would split the heads 12 ways


def test_engine_errors_name_the_tp_and_chips(capsys):
    err = fails(capsys, *CAP, "--engine", "vllm", "--chips", "3")
    assert "--chips 3" in err and "must divide the 32 heads" in err
    # TP = 14 splits Qwen2.5 7B's 28 heads, but vLLM also needs its 4 KV heads to divide 14 or 14 to divide them
    err = fails(capsys, "capacity", "--model", "qwen2.5-7b", "--hardware", "h100-sxm", "--context", "8192",
                "--engine", "vllm", "--chips", "14")
    assert "TP=14 (--chips)" in err and "vLLM refuses" in err


def test_hbm_bytes_is_the_reported_total_for_the_engine_too(capsys):
    # item 17: 80e9 was taken as the runtime total by the engine and as the reported total by --budget
    r = json.loads(text(capsys, "capacity", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--hbm-bytes", "80e9",
                        "--context", "8192", "--engine", "vllm", "--json"))
    assert r["engine"]["total_bytes"] == 80e9 - 0.5 * km.units.GiB and r["memory_per_chip_bytes"] == 80e9
    out = text(capsys, "capacity", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--hbm-bytes", "80e9",
               "--context", "8192", "--engine", "vllm")
    assert "CUDA runtime total" in out and "estimate: reported total less 0.5 GiB" in out


@pytest.mark.parametrize("extra", [["--engine", "vllm"], ["--budget", "reserve"], ["--budget", "reported"]])
def test_chip_without_a_reported_total_points_to_hbm_bytes(capsys, extra):
    # item 18: named a budget 'runtime' that does not exist, and the phrase twice for --budget reported
    err = fails(capsys, "capacity", "--model", "llama-3-8b", "--hardware", "h800", "--context", "8192", *extra)
    assert "--hbm-bytes" in err and "--budget device" in err and "'runtime'" not in err
    assert err.count("--budget reported") <= 1


def test_engine_text_output_labels(capsys):
    # item 21: duplicated "54.72x at 8,192" phrase; "device total" is the CUDA runtime total; engine-wide lines
    out = text(capsys, *CAP, "--engine", "vllm")
    assert "54.72x at 8,192 tokens\n" in out
    assert "device total" not in out and "CUDA runtime total" in out
    assert out.index("engine (all ranks)") < out.index("KV cache size") < out.index("max concurrency")
    # the value column is aligned whatever the label
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert lines["KV budget on 1 chip(s)"].index("63.94") == lines["weights"].index("16.06")
    # a different --max-model-len: the engine's concurrency is at its max_model_len, the batch at --context
    out = text(capsys, *CAP, "--engine", "vllm", "--max-model-len", "16384")
    assert "x at 16,384 tokens\n" in out and "batch at S = 8,192" in out


def test_context_past_max_model_len_is_refused(capsys):
    assert "--context 8,192 exceeds --max-model-len 4,096" in fails(capsys, *CAP, "--engine", "vllm",
                                                                     "--max-model-len", "4096")


def test_engine_refuses_what_vllm_refuses(capsys):
    # items 11, 14, 15 through the CLI: a max_model_len that does not fit, TP over the heads. Linear layers
    # were refused; vLLM sizes them in their own groups, and so does kvmath now (issue 23 item 5)
    hybrid = json.loads(text(capsys, "capacity", "--config", NEXT, "--hardware", "b200", "--context", "131072",
                             "--engine", "vllm", "--json"))["engine"]
    assert hybrid["group_kinds"] == ["linear"] * 3 + ["full"] and hybrid["state_bytes"] is not None
    assert "vLLM refuses" in fails(capsys, *CAP, "--engine", "vllm", "--max-model-len", "4e6")
    assert "too large" in fails(capsys, *CAP, "--engine", "vllm", "--max-model-len", "1e30")
    assert "block_size must be one of" in fails(capsys, *CAP, "--engine", "vllm", "--block-size", "7")
    assert "block_size must be one of" in fails(capsys, *CAP, "--engine", "vllm", "--block-size", "1e12")


@pytest.mark.parametrize("extra", [["--hardware", "a100-80gb"], ["--hardware", "l4", "--chips", "64"],
                                   ["--hardware", "a100-80gb", "--hbm-bytes", "85e9"],
                                   ["--hardware", "rtx-pro-6000", "--chips", "16", "--block-size", "64"]])
def test_engine_refuses_deepseek_v32_where_vllm_has_no_sparse_backend(capsys, extra):
    # review R26e-4: vLLM's sparse MLA backend runs on compute capability 9.x and 10.x only; elsewhere it cannot
    # serve the model, and the command says so in one line naming the chip, exit status 2 (a memory size given
    # in place of the preset's keeps the chip's rule)
    err = fails(capsys, "capacity", "--model", "deepseek-v3.2", "--context", "8192", "--engine", "vllm", *extra)
    assert f"vLLM cannot serve on {extra[1]} (compute capability" in err and "9.x and 10.x only" in err
    # on Hopper and on the B200 it is sized, in blocks of 64
    for chip in ("h100-sxm", "b200"):
        engine = json.loads(text(capsys, "capacity", "--model", "deepseek-v3.2", "--hardware", chip, "--context",
                                 "8192", "--engine", "vllm", "--json"))["engine"]
        assert engine["block_size"] == 64


#: Qwen3-Next on 4 H100s, sized by vLLM (issue 23: --mamba-cache-mode and --tokens-rule)
NEXT_TP4 = ["capacity", "--config", NEXT, "--hardware", "h100-sxm", "--chips", "4", "--context", "32768",
            "--engine", "vllm"]


@pytest.mark.parametrize("mode, linear_pages", [("none", 1), ("align", 2), ("all", 121)])
@pytest.mark.parametrize("rule", ["blocks", "concurrency"])
def test_engine_mamba_cache_mode_and_tokens_rule_by_hand(capsys, mode, linear_pages, rule):
    """From the config's rows, per rank at TP=4: 2 KV heads over 4 ranks keep 1 (vLLM replicates them), 1 x 256
    x 2 (K, V) x 2 B = 1,024 B per token and full layer; a Gated DeltaNet state of conv (2 x 16 x 128 + 32 x
    128) / 4 = 2,048 channels x (kernel 4 - 1) + 32 / 4 = 8 heads x 128 x 128 = 137,216 elements x 2 B =
    274,432 B. Attention block 16 x cdiv(274,432, 16 x 1,024) = 16 x 17 = 272 tokens, page 272 x 1,024 =
    278,528 B. 12 full + 36 linear layers: groups of 12, 1 full + 3 linear. A 32,768-token request takes
    cdiv(32,768, 272) = 121 full blocks and, in each linear group, 1 state page ("none"), 2 ("align") or one per
    attention block, cdiv(32,768, 272) = 121 ("all"). Blocks floor(floor(KV bytes / 278,528) / 12), the KV bytes
    being the engine's memory profile (tested in test_memory); tokens blocks // 4 x 272 ("blocks") or
    floor(concurrency x 32,768) ("concurrency")."""
    r = json.loads(text(capsys, *NEXT_TP4, "--mamba-cache-mode", mode, "--tokens-rule", rule, "--json"))["engine"]
    assert (r["state_bytes"], r["block_size"], r["page_bytes"]) == (274_432, 272, 278_528)
    assert (r["num_groups"], r["group_size"]) == (4, 12)
    blocks = int(r["available_kv_bytes"] // 278_528) // 12
    assert r["num_blocks"] == blocks and r["blocks_per_request"] == 121 + 3 * linear_pages
    assert r["max_concurrency"] == pytest.approx(blocks / (121 + 3 * linear_pages), rel=1e-15)
    hand = blocks // 4 * 272 if rule == "blocks" else blocks * 32768 // (121 + 3 * linear_pages)
    assert r["tokens"] == hand
    out = text(capsys, *NEXT_TP4, "--mamba-cache-mode", mode, "--tokens-rule", rule)
    assert f"mamba_cache_mode {mode}, tokens_rule {rule}, hybrid KV-cache manager on;" in out
    assert f"{r['max_concurrency']:.2f}x at 32,768 tokens" in out and f"{r['tokens']:,} tokens" in out


def test_engine_rules_default_to_the_librarys(capsys):
    import inspect

    defaults = {k: inspect.signature(km.memory.vllm_engine).parameters[k].default
                for k in ("mamba_cache_mode", "tokens_rule")}
    assert defaults == {"mamba_cache_mode": "none", "tokens_rule": "blocks"}
    plain = json.loads(text(capsys, *NEXT_TP4, "--json"))
    given = json.loads(text(capsys, *NEXT_TP4, "--mamba-cache-mode", "none", "--tokens-rule", "blocks", "--json"))
    assert plain == given
    assert plain["engine"]["blocks_per_request"] == 121 + 3  # one state page per linear group
    # the text names the cache mode of a hybrid model, given or not; a model without linear layers shows neither
    assert "mamba_cache_mode none, hybrid KV-cache manager on;" in text(capsys, *NEXT_TP4)
    assert "mamba_cache_mode" not in text(capsys, *CAP, "--engine", "vllm")
    with pytest.raises(SystemExit):
        main(["capacity", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    mode = usage.partition("--mamba-cache-mode {none,align,all} with --engine vllm:")[2].partition("--tokens-rule")[0]
    rule = usage.partition("--tokens-rule {blocks,concurrency} with --engine vllm:")[2].partition(
        "--hybrid-kv-cache-manager")[0]
    assert mode.endswith("(default: none) ") and "MambaSpec.max_memory_usage_bytes" in mode
    assert rule.endswith("(default: blocks) ") and "_report_kv_cache_config" in rule


@pytest.mark.parametrize("argv, named", [
    (["--mamba-cache-mode", "aligned"], "argument --mamba-cache-mode: invalid choice: 'aligned'"),
    (["--mamba-cache-mode", ""], "argument --mamba-cache-mode: invalid choice"),
    (["--tokens-rule", "tokens"], "argument --tokens-rule: invalid choice: 'tokens'"),
    (["--tokens-rule", "1"], "argument --tokens-rule: invalid choice"),
    (["--mamba-cache-mode", "align", "--mamba-cache-mode", "all"], "--mamba-cache-mode given twice"),
])
def test_engine_rules_refuse_what_is_not_a_choice(capsys, argv, named):
    with pytest.raises(SystemExit) as exit_info:
        main([*NEXT_TP4, *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err and "Traceback" not in err


def test_engine_rules_without_the_engine_are_refused(capsys):
    # they would size nothing: refused by name, not ignored
    assert "--mamba-cache-mode needs --engine vllm" in fails(capsys, *CAP, "--mamba-cache-mode", "align")
    assert "--tokens-rule needs --engine vllm" in fails(capsys, *CAP, "--tokens-rule", "concurrency")
    # and in Python: an engine option without the engine
    with pytest.raises(ValueError, match="mamba_cache_mode applies with engine='vllm' only"):
        Deployment("llama-3-8b", "h100-sxm").capacity(8192, mamba_cache_mode="align")


def test_kv_per_token_is_labelled_an_average(capsys):
    # gpt-oss-20b at 131,072 tokens averages 24,600 B/token (half its 24 layers keep a 128-token window);
    # a token in every layer would take 49,152: the label says which one is shown
    out = text(capsys, "capacity", "--model", "gpt-oss-20b", "--hardware", "h100-sxm", "--context", "131072")
    assert "KV per token (average over S = 131,072)" in out and "24,600 B" in out and "49,152" not in out


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
    assert "--chips 1 cannot hold" in err and "--parallel pp=12" in err
    assert "--kv-bytes-per-token" in fails(capsys, "capacity", "--params", "1e10", "--kv-bytes-per-token", "1e-300",
                                           "--hbm-bytes", "1e12", "--context", "1")


# ----- --config in every command that takes --model; the listings' filters and --json -------------

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
LLAMA31 = str(DATA / "meta-llama--Llama-3.1-8B" / "config.json")
NEXT = str(DATA / "reconstructed" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json")


def test_decode_with_a_config_equals_decode_with_the_same_model_as_a_preset(capsys):
    # Llama 3.1 8B's config has Llama 3 8B's shape: every number but the name is the same.
    args = ["--hardware", "h100-sxm", "--batch", "16", "--context", "4096"]
    by_config = run_json(capsys, "decode", "--config", LLAMA31, *args)
    by_preset = run_json(capsys, "decode", "--model", "llama-3-8b", *args)
    for key in ("kv_bytes_read", "weight_bytes_read", "attention_flops", "strict_s", "no_overlap_s"):
        assert by_config[key] == by_preset[key], key


def test_capacity_and_decode_charge_linear_layers_their_fixed_state(capsys):
    r = run_json(capsys, "decode", "--config", NEXT, "--hardware", "h200", "--batch", "8", "--context", "8192")
    # 24,576 B/token in the 12 full layers + 39,518,208 B of state per sequence (tests/unit/test_hf_config.py)
    assert r["kv_bytes_read"] == 8 * (24_576 * 8192 + 39_518_208)
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
    assert {r["name"] for r in llama} == {n for n in km.Model.presets() if km.Model.preset(n).family == "llama"}
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


# ----- --json is the result's to_dict(), for the same inputs in Python ------------------------

@pytest.mark.parametrize("model, chip, argv, layout, kwargs", [
    ("llama-3-8b", "h100-sxm", [], None, {}),
    ("mixtral-8x7b", "a100-80gb", ["--chips", "4", "--weight-dtype", "fp8", "--kv-dtype", "fp8"], "tp=4",
     dict(weights="fp8", kv="fp8")),
    ("llama-2-70b", "h100-sxm", ["--parallel", "tp=4,pp=2", "--link", "pcie5-x16"], "tp=4,pp=2", dict(link="pcie5-x16")),
    # a lone network link is the link between nodes; the chip's NVLink stays inside each node of 8
    ("llama-3.1-405b", "h100-sxm", ["--parallel", "tp=8,pp=2", "--link", "ib-ndr400"], "tp=8,pp=2",
     dict(node_link="ib-ndr400")),
    ("deepseek-v3", "h800", ["--parallel", "dp=144,ep=144,redundant=32,dispatch=fp8", "--link", "ib-ndr400",
                             "--weight-dtype", "fp8"], km.ParallelLayout(dp=144, ep=144, redundant_experts=32),
     dict(node_link="ib-ndr400", formats=km.Formats(weights="fp8", dispatch="fp8"))),
    ("deepseek-v3", "h200", ["--parallel", "dp=16,ep=16", "--chips-per-node", "8", "--node-link", "ib-ndr400",
                             "--weight-dtype", "fp8"], "dp=16,ep=16",
     dict(weights="fp8", chips_per_node=8, node_link="ib-ndr400")),
])
def test_json_is_the_deployments_to_dict(capsys, model, chip, argv, layout, kwargs):
    dep = Deployment(model, chip, layout, **kwargs)
    common = ["--model", model, "--hardware", chip, *argv]
    assert run_json(capsys, "decode", *common, "--batch", "32", "--context", "4096") == dep.step(32, 4096).to_dict()
    r = dep.request(8, 2048, 128, chunk_tokens=512)
    assert run_json(capsys, "run", *common, "--batch", "8", "--input", "2048", "--output", "128",
                    "--chunk-tokens", "512") == r.to_dict()
    p = run_json(capsys, "prefill", *common, "--batch", "8", "--input", "2048")
    assert p["prefill"] == dep.prefill(8, 2048).to_dict()
    one = dep.request(8, 2048, 1).to_dict()
    assert one["time_per_output_token_s"] is None and one["tokens_per_s_per_user"] is None  # NaN: no decode step
    assert p["request"] == one
    if layout is None or isinstance(layout, str) and "pp" not in layout and "ep" not in layout:
        assert run_json(capsys, "capacity", *common, "--context", "8192") == dep.capacity(8192).to_dict()


def test_capacity_json_with_the_engine_is_the_capacitys(capsys):
    c = Deployment("llama-3.1-70b", "h100-sxm", "tp=2").capacity(8192, engine="vllm", block_size=32)
    r = run_json(capsys, "capacity", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--context", "8192",
                 "--engine", "vllm", "--block-size", "32")
    assert r == c.to_dict() and r["engine"]["block_size"] == 32


def test_help_lists_every_command_with_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    from kvmath.cli import _COMMANDS
    for command in _COMMANDS:
        lines = [line for line in out.splitlines() if line.strip().startswith(command + " ")]
        assert len(lines) == 1, command
        assert len(lines[0].split(None, 1)) == 2, command  # the name and its help on the same line


def test_the_cli_defaults_are_the_librarys(capsys):
    from kvmath import memory
    with pytest.raises(SystemExit):
        main(["capacity", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"CUDA runtime total (default: {memory.GPU_MEMORY_UTILIZATION})" in out
    assert f"tokens per vLLM block asked for (default: {memory.BLOCK_SIZE}; for MLA the block vLLM sets on the chip, " \
           f"{memory.MLA_BLOCK_BY_CHIP['h200']} on Hopper, {memory.MLA_BLOCK_BY_CHIP['b200']} on the B200 and GB200 " \
           f"(compute capability 10.0); for DSA {memory.MLA_BLOCK_SIZE} on Hopper and datacenter Blackwell, whatever " \
           "is asked, as vLLM forces it; vLLM v0.10-v0.11's rules, kvmath.memory.vllm_block_size)" in out


def test_capacity_engine_says_and_switches_the_hybrid_manager_and_the_dtype(capsys):
    # Llama 4 Maverick (chunked local attention): vLLM v0.10-v0.11 runs it without the hybrid manager unless told;
    # the text says so and --hybrid-kv-cache-manager on gives the grouped figures (test_vllm_hybrid by hand)
    maverick = str(Path(__file__).parents[1] / "data" / "hf_configs" / "reconstructed" /
                   "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json")
    argv = ["capacity", "--config", maverick, "--hardware", "h200", "--chips", "8", "--context", "131072",
            "--engine", "vllm", "--weight-dtype", "fp8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "hybrid KV-cache manager off for chunked local attention" in out and "1 of 48 layers (1 full)" in out
    assert main([*argv, "--hybrid-kv-cache-manager", "on", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["hybrid_kv_cache_manager"] and data["engine"]["group_kinds"] == ["chunked"] * 3 + ["full"]
    # OLMo-2 32B's float32 file: vLLM loads 32,233,886,720 weights in bf16 (64.47 GB); --vllm-dtype fp32 twice that
    olmo = str(Path(__file__).parents[1] / "data" / "hf_configs" / "allenai--OLMo-2-0325-32B")
    base = ["capacity", "--config", olmo, "--hardware", "h200", "--context", "4096", "--engine", "vllm", "--json"]
    assert main(base) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["weight_bytes"] == 2 * 32_233_886_720 and data["weight_bytes_per_chip"] == 4 * 32_233_886_720
    assert data["weights_formats"]["attention"] == "fp32" and set(data["engine"]["weight_formats"].values()) == {"bf16"}
    assert main([*base, "--vllm-dtype", "fp32", "--chips", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["weight_bytes"] == 4 * 32_233_886_720 / 2
