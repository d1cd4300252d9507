"""Write tests/data/conformance-v1.json: kvmath's figures for every config.json it is tested on.

A file other calculators can test against: for each config in tests/data/hf_configs, the KV bytes per
token by layer kind, the bytes one sequence needs at 1,024 / 8,192 / 131,072 tokens (by kind), what each
common misreading of the config gives instead (kvmath.config_check.LAYER_READINGS), the weights as stored,
and vLLM's KV cache for a stated memory and block size, with the engine's own log lines where a published
log is in tests/data/vllm_logs.json. tests/unit/test_conformance.py checks that the committed file is what
this writes now, so it cannot drift from the code.

The file lives beside the configs it describes (tests/data/), not in the package: its entries name those
files by path, and a figure is only worth checking against together with the config it came from.
Bump VERSION when a key's meaning changes; a changed figure alone is a new kvmath, not a new format.

    python scripts/write_conformance.py          # rewrite the file
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kvmath, not an installed one
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
LOGS = ROOT / "tests" / "data" / "vllm_logs.json"
OUT = ROOT / "tests" / "data" / "conformance-v1.json"
VERSION = 1
CONTEXTS = (1_024, 8_192, 131_072)
GiB = 2**30
#: The engine setting every entry is sized at: one rank with 40 GiB of KV memory, vLLM's defaults otherwise (the
#: block vLLM picks: 16, or 64 for MLA on Hopper and for DSA; dtype "auto"; --kv-cache-dtype "auto", the model's
#: bf16 except DeepSeek-V3.2's fp8_ds_mla under v0.11, which each entry's kv_cache_dtype names; the hybrid manager
#: as v0.10.2-v0.11 sets it).
VLLM_SETTINGS = {"available_kv_gib": 40, "block_size": None, "max_model_len": 8192, "tensor_parallel": 1,
                 "max_num_batched_tokens": 2048, "kv_dtype": "auto"}


def config_paths() -> list[Path]:
    """Every config the tests read: one config.json per folder, and reconstructed/*.json."""
    return sorted(CONFIGS.glob("*/config.json")) + sorted((CONFIGS / "reconstructed").glob("*.json"))


def _number(x):
    x = float(x)
    return int(x) if x.is_integer() else x


def _vllm(model, **settings) -> dict:
    from kvmath.memory import vllm_kv_cache

    s = {**VLLM_SETTINGS, **settings}
    try:
        kv = vllm_kv_cache(model, s["available_kv_gib"] * GiB, s["max_model_len"], block_size=s["block_size"],
                           tensor_parallel=s["tensor_parallel"], max_num_batched_tokens=s["max_num_batched_tokens"],
                           kv_dtype=s["kv_dtype"])
    except ValueError as err:
        return {"refused": str(err)}
    return {"tokens": kv.tokens, "tokens_by_rule": kv.tokens_by_rule,
            "max_concurrency": round(float(kv.max_concurrency), 4), "num_blocks": kv.num_blocks,
            "block_size": kv.block_size, "page_bytes": kv.page_bytes, "group_size": kv.group_size,
            "group_kinds": list(kv.group_kinds), "blocks_per_request": kv.blocks_per_request,
            "state_bytes": kv.state_bytes, "hybrid_kv_cache_manager": kv.hybrid_kv_cache_manager,
            "kv_cache_dtype": kv.kv_cache_dtype}


def _logs_for(rel: str, model) -> list[dict]:
    out = []
    for log in json.loads(LOGS.read_text())["logs"]:
        if log["config"] != rel:
            continue
        s, f = log["settings"], log["figures"]
        settings = dict(tensor_parallel=s["tensor_parallel"], max_model_len=s["max_model_len"],
                        max_num_batched_tokens=s["max_num_batched_tokens"] or 2048,
                        kv_dtype="fp8" if s["kv_cache_dtype"].startswith("fp8") else s["kv_cache_dtype"],
                        block_size=s["block_size_asked"])
        entry = {"id": log["id"], "source": log["source"], "vllm_version": log["vllm_version"], "lines": log["lines"]}
        if f["available_kv_gib"] is not None:
            entry["kvmath"] = _vllm(model, available_kv_gib=f["available_kv_gib"], **settings)
        else:  # no memory line: what kvmath gives that does not depend on it
            one = _vllm(model, available_kv_gib=VLLM_SETTINGS["available_kv_gib"], **settings)
            entry["kvmath"] = {k: one[k] for k in ("block_size", "page_bytes", "group_kinds", "blocks_per_request")}
        out.append(entry)
    return out


def entry(path: Path) -> dict:
    """kvmath's figures for one config."""
    from collections import Counter

    from kvmath.config_check import LAYER_READINGS, _model_with, _read_layers, weight_readings
    from kvmath.hf_config import _load, _text_config, model_from_hf_config, weights_from_hf_config
    from kvmath.layers import kv_bytes_per_token

    rel = path.relative_to(ROOT).as_posix()
    data, _, _ = _load(path)
    model = model_from_hf_config(path)  # from the path: named after its folder, as the tests name it
    specs = model.layer_specs()
    kinds = Counter(s.kind for s in specs)
    by_kind = {k: _number(kv_bytes_per_token(tuple(s for s in specs if s.kind == k), 2)) for k in kinds}
    states = sum(s.state_bytes for s in specs if s.kind == "linear")
    try:
        stored = weights_from_hf_config(data)
        weights = {"formats": stored, "bytes": _number(model.weight_bytes_resident(stored)),
                   "misreadings": {k: _number(v) for k, v in weight_readings(model, stored).items()}}
    except ValueError as err:
        weights = {"refused": str(err)}
    misread = {}
    for name, reading in LAYER_READINGS.items():
        read = _model_with(model, _read_layers(model, reading))
        if read is not None:
            misread[name] = {"kv_bytes_per_token": _number(read.kv_bytes_per_token()),
                             f"seq_bytes_{CONTEXTS[-1]}": _number(read.kv_bytes_per_seq(CONTEXTS[-1]))}
    return {
        "config": rel,
        "file": "reconstructed" if "reconstructed/" in rel else "copied (upstream, third-party copy or derivative)",
        "name": model.name,
        "model_type": _text_config(data)[1],
        "layers": dict(kinds),
        "kv_bytes_per_token": _number(model.kv_bytes_per_token()),
        "kv_bytes_per_token_by_kind": {k: v for k, v in by_kind.items() if v},
        "state_bytes_per_seq": _number(states),
        "seq_bytes": {str(s): {"total": _number(model.kv_bytes_per_seq(s)),
                               "by_kind": {k: _number(v) for k, v in model.kv_bytes_by_kind(s).items()}}
                      for s in CONTEXTS},
        "misreadings": misread,
        "weights": weights,
        "vllm": _vllm(model),
        "vllm_logs": _logs_for(rel, model),
    }


def build() -> dict:
    """The whole file, as a dict."""
    import kvmath
    from kvmath.memory import VLLM_DEFAULTS_VERSION, VLLM_HYBRID_SOURCE

    return {
        "format": "kvmath-conformance",
        "version": VERSION,
        "kvmath_version": kvmath.__version__,
        "written_by": "scripts/write_conformance.py (checked by tests/unit/test_conformance.py)",
        "units": "bytes; the cache in bf16 (2 bytes per element) unless an entry says otherwise; a linear "
                 "layer's state in its config's dtype; GiB = 2**30",
        "definitions": {
            "kv_bytes_per_token": "one token's K and V (or MLA latent) in every attention layer: what an engine "
                                  "that pages every layer reserves per token (linear states excluded: per sequence)",
            "seq_bytes": "what one sequence of that many tokens needs: sliding and chunked layers hold at most "
                         "their window, linear layers their state",
            "misreadings": "the same figures for the config misread the way calculators commonly do",
            "file": "how the config file was obtained; tests/data/hf_configs/README.md says, for each, its source "
                    "and what differs from the published file",
            "weights": "the weights in memory as THIS FILE stores them (torch_dtype, quantization_config): a re-save "
                       "or a reconstruction may store them otherwise than the published checkpoint; 'misreadings': "
                       "the same with the stored precision ignored",
            "vllm": f"vLLM V1's KV cache with the defaults of vLLM {VLLM_DEFAULTS_VERSION} for {VLLM_SETTINGS} "
                    "(block_size null: vLLM's, 16 or 64 for MLA and DSA; kv_dtype auto: vLLM's --kv-cache-dtype "
                    "auto, the model's bf16 except DeepSeek-V3.2's fp8_ds_mla as vLLM v0.11 stores it, named by "
                    "'kv_cache_dtype'; weights and states in vLLM's --dtype auto, "
                    "float32 as bf16; the hybrid manager off for chunked local attention); 'tokens' is its 'GPU KV "
                    "cache size' as vLLM up to v0.20 prints it, 'tokens_by_rule' that and v0.29's (the switch falls "
                    "between v0.20 and v0.29) "
                    "int(max_concurrency x max_model_len), 'max_concurrency' its 'Maximum concurrency' for "
                    "max_model_len",
        },
        "vllm_rules": VLLM_HYBRID_SOURCE,
        "contexts": list(CONTEXTS),
        "models": [entry(p) for p in config_paths()],
    }


def text() -> str:
    return json.dumps(build(), indent=1, sort_keys=False) + "\n"


def main() -> None:
    OUT.write_text(text())
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
