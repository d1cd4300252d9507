"""Read a Hugging Face ``config.json`` into a :class:`kvmath.Model`, offline (a description: the bounds are a
:class:`kvmath.Deployment`'s).

Families read: Llama 1/2/3/3.1/3.2, Mistral, Mixtral, Qwen2/2.5/3 dense and
MoE, Qwen3-Next (linear-attention layers), Gemma 2 and Gemma 3 (its text
config, nested under ``text_config`` or not), gpt-oss, DeepSeek-V2/V3 and
Kimi K2 (MLA), DeepSeek-V3.2 (MLA with the DSA indexer), GLM-4.5/4.6/4.7
(``glm4_moe``), MiniMax-M2 (``minimax_m2``), Llama 4 (chunked local and
NoPE global layers, MoE interleaved with dense layers), OLMo 2, Granite 4
hybrid (Mamba-2 and attention layers), SmolLM3 (``smollm3``: Llama's layout
with NoPE layers, which cache the same keys), OLMo 3 (``olmo3``: OLMo 2's
layers, three sliding-window to one full), Falcon (old ``RefinedWebModel``
keys and new ``falcon`` keys) and Phi-3/4.

Rules:

* An explicit ``head_dim`` always wins over ``hidden_size / num_attention_heads``.
* Layer kinds come from ``layer_types`` where the config lists them, else
  from the family's own rule (Gemma 2 alternates, Gemma 3 follows
  ``sliding_window_pattern``, Qwen3-Next ``full_attention_interval``,
  Qwen2/3 ``use_sliding_window`` from ``max_window_layers`` on).
* Where a config leaves a value out, the default is the one the family's
  ``transformers`` configuration class documents (named at each use); where
  there is none, the key is required.
* A config kvmath cannot read raises ``ValueError`` naming the key; so does
  a key that changes the sizes in a family whose reader does not read it
  (``_SIZE_KEYS``, the table of what each reader reads, :func:`reads`: a
  config relabelled to another family, Mixtral as ``mistral`` or Qwen3.5 as
  ``qwen3_next``, is refused, not read minus its features). Keys that are
  only hints (multi-token-prediction layers) are noted and warned about.
* A linear layer's state is kept in the config's dtype, its recurrent part
  in ``mamba_ssm_dtype`` where the config names one (Qwen3.5's float32).
* ``max_position_embeddings`` is what the checkpoint's position code is set
  up for, a hint, not the context its authors document as supported: it
  is kept in the note and ``supported_context`` is left None (no
  ``config.json`` field is authoritative for it; presets carry it with a
  source).
* Parameters count the matrices as :mod:`kvmath.models` does (attention,
  MLP or experts, router, embeddings, two norms per layer); biases,
  attention sinks, q/k norms and vision towers are left out.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import re
import stat
import sys
import warnings
from typing import TYPE_CHECKING, Any, Mapping, Union

from .layers import LayerSpec

if TYPE_CHECKING:
    from .models import Precision

PathOrDict = Union[str, "os.PathLike[str]", Mapping[str, Any]]

_MISSING = object()

#: Most layers a config may list: far above any published model (DeepSeek-V3 has 61, Llama-3.1-405B 126),
#: low enough that building the per-layer tuple stays instant.
MAX_LAYERS = 10_000

#: Largest file read as a config.json: published ones are a few KB (under 100 KB with a long
#: ``quantization_config``); the cap keeps a wrong path (a disk image, a log) from filling the memory.
MAX_CONFIG_BYTES = 16 * 2**20

#: Longest integer literal read as a number: 309 digits already exceed what a float64 holds.
_MAX_INT_DIGITS = 309


class _Unrepresentable:
    """A number literal of a config file beyond what a float64 holds (more than :data:`_MAX_INT_DIGITS` digits,
    or a float such as ``1e400``), kept unconverted: no size is that large, so a key holding one is refused by
    name where it is read (past 4,300 digits Python's ``int()`` would refuse it naming neither file nor key)."""

    def __init__(self, shown: str):
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


def _parse_int(literal: str):
    if len(literal) <= _MAX_INT_DIGITS:
        return int(literal)
    return _Unrepresentable(f"an integer of {len(literal.lstrip('-')):,} digits")


def _parse_float(literal: str):
    value = float(literal)
    return value if math.isfinite(value) else _Unrepresentable(f"{literal[:40]} (beyond a float64)")


#: The experts key of each mixture-of-experts model_type. Where it is missing the config is refused:
#: the transformers classes do have defaults (MixtralConfig 8, GptOssConfig 128, DeepseekV3Config 256)
#: but a checkpoint that leaves its expert count out is more likely broken than default-sized.
_EXPERTS_KEY = {
    "mixtral": "num_local_experts", "gpt_oss": "num_local_experts", "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts", "qwen3_next": "num_experts", "deepseek_v2": "n_routed_experts",
    "deepseek_v3": "n_routed_experts", "kimi_k2": "n_routed_experts", "deepseek_v32": "n_routed_experts",
    "glm4_moe": "n_routed_experts", "minimax_m2": "num_local_experts", "llama4_text": "num_local_experts",
}

#: Families whose attention is multi-head latent attention (one latent per token, all heads).
_MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32")

#: kvmath's format for each ``torch_dtype`` / ``dtype`` a config may name.
_DTYPE_FORMAT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

#: ``tie_word_embeddings`` where a config leaves it out: the default of the
#: family's transformers configuration class (``PretrainedConfig`` defaults
#: to True; LlamaConfig, MistralConfig, MixtralConfig, Qwen2/3 configs,
#: Phi3Config, GptOssConfig, DeepseekV2/V3Config and Qwen3NextConfig set
#: False; Gemma2Config, Gemma3TextConfig and FalconConfig keep True).
_TIED_DEFAULT = {
    "llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen2_moe": False, "qwen3": False,
    "qwen3_moe": False, "qwen3_next": False, "phi3": False, "gpt_oss": False, "deepseek_v2": False,
    "deepseek_v3": False, "kimi_k2": False, "gemma2": True, "gemma3_text": True, "falcon": True,
    "deepseek_v32": False, "glm4_moe": False, "minimax_m2": False, "llama4_text": False, "olmo2": False,
    "granitemoehybrid": False, "smollm3": True,  # SmolLM3Config(tie_word_embeddings=True)
    "olmo3": False,  # Olmo3Config(tie_word_embeddings=False)
}

_FAMILY = {
    "llama": "llama", "mistral": "mistral", "mixtral": "mistral", "qwen2": "qwen", "qwen2_moe": "qwen",
    "qwen3": "qwen", "qwen3_moe": "qwen", "qwen3_next": "qwen", "phi3": "phi", "gpt_oss": "gpt-oss",
    "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "kimi_k2": "kimi", "gemma2": "gemma",
    "gemma3_text": "gemma", "falcon": "falcon", "deepseek_v32": "deepseek", "glm4_moe": "glm",
    "minimax_m2": "minimax", "llama4_text": "llama", "olmo2": "olmo", "granitemoehybrid": "granite",
    "smollm3": "smollm", "olmo3": "olmo",
}

#: model_type spellings that mean the same reader.
_ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon", "gemma3": "gemma3_text", "llama4": "llama4_text"}

_MOE_QWEN = ("qwen2_moe", "qwen3_moe", "qwen3_next")
_MOE_DEEPSEEK = _MLA + ("glm4_moe",)
_MAMBA2 = ("granitemoehybrid",)

#: Every key kvmath knows to change a model's sizes, and the families whose reader reads it: the table of what
#: each reader reads. A key present in a config of any other family is refused by name (:func:`_refuse_foreign_keys`):
#: a config relabelled to a family kvmath reads (Mixtral as ``mistral``, Qwen3-30B-A3B as ``qwen3``, Qwen3.5 as
#: ``qwen3_next``) must not load minus what that family's reader ignores. "Present" means not null, 0, false,
#: empty, or the value that switches the feature off (:data:`_INERT`). An empty tuple: no reader kvmath has reads
#: it (Gemma 3n / 4, Nemotron-H and Nemotron-NAS, Falcon-H1, Jamba, DeepSeek-V4). Sliding windows and chunks are
#: checked apart (whether a family uses its window depends on other keys).
_SIZE_KEYS = {
    # mixture of experts: the expert count, the experts per token and their width, shared experts, dense layers
    "num_local_experts": ("mixtral", "gpt_oss", "minimax_m2", "llama4_text") + _MAMBA2,
    "num_experts": _MOE_QWEN, "n_routed_experts": _MOE_DEEPSEEK,
    "num_experts_per_tok": ("mixtral", "gpt_oss", "minimax_m2", "llama4_text") + _MAMBA2 + _MOE_QWEN + _MOE_DEEPSEEK,
    "moe_intermediate_size": _MOE_QWEN + _MOE_DEEPSEEK, "shared_expert_intermediate_size": _MOE_QWEN,
    "decoder_sparse_step": _MOE_QWEN, "mlp_only_layers": _MOE_QWEN,
    "n_shared_experts": _MOE_DEEPSEEK, "first_k_dense_replace": _MOE_DEEPSEEK, "moe_layer_freq": _MOE_DEEPSEEK,
    "interleave_moe_layer_step": ("llama4_text",), "moe_layers": ("llama4_text",),
    "intermediate_size_mlp": ("llama4_text",), "shared_intermediate_size": _MAMBA2 + ("minimax_m2",),
    # multi-head latent attention and DeepSeek's sparse-attention indexer
    "kv_lora_rank": _MLA, "q_lora_rank": _MLA, "qk_rope_head_dim": _MLA, "qk_nope_head_dim": _MLA, "v_head_dim": _MLA,
    "index_topk": ("deepseek_v32",), "index_n_heads": ("deepseek_v32",), "index_head_dim": ("deepseek_v32",),
    # linear attention (Gated DeltaNet), Mamba-2, the recurrent state's dtype, MiniMax's lightning layers
    "linear_num_key_heads": ("qwen3_next",), "linear_num_value_heads": ("qwen3_next",),
    "linear_key_head_dim": ("qwen3_next",), "linear_value_head_dim": ("qwen3_next",),
    "linear_conv_kernel_dim": ("qwen3_next",), "full_attention_interval": ("qwen3_next",),
    "mamba_n_heads": _MAMBA2, "mamba_d_head": _MAMBA2, "mamba_d_state": _MAMBA2, "mamba_n_groups": _MAMBA2,
    "mamba_d_conv": _MAMBA2, "mamba_expand": _MAMBA2,
    "mamba_ssm_dtype": ("qwen3_next",) + _MAMBA2, "attn_type_list": ("minimax_m2",),
    # no reader: KV shared with earlier layers and per-layer inputs (Gemma 3n / 4), Gemma 4's global layers,
    # Mamba hybrids kvmath does not read (Nemotron-H, Falcon-H1, Jamba), per-layer NAS blocks (Nemotron-NAS),
    # DeepSeek-V4's compressed cache and output projection
    "num_kv_shared_layers": (), "kv_sharing_layer_map": (), "hidden_size_per_layer_input": (), "laurel_rank": (),
    "altup_num_inputs": (), "num_global_key_value_heads": (), "global_head_dim": (), "attention_k_eq_v": (),
    "hybrid_override_pattern": (), "mamba_num_heads": (), "mamba_head_dim": (), "ssm_state_size": (),
    "mamba_d_ssm": (), "attn_layer_period": (), "expert_layer_period": (), "block_configs": (),
    "compress_ratios": (), "o_lora_rank": (),
}

#: Values of a size key that switch its feature off (MoE on every layer, as a dense config may say).
_INERT = {"moe_layer_freq": 1, "decoder_sparse_step": 1, "interleave_moe_layer_step": 1}


def reads(model_type: str) -> tuple[str, ...]:
    """The size-changing keys of :data:`_SIZE_KEYS` that the reader of ``model_type`` reads (every other one is
    refused in its configs).

    Examples
    --------
    >>> reads("mistral")
    ()
    >>> "mamba_ssm_dtype" in reads("qwen3_next"), "num_experts" in reads("qwen3")
    (True, False)
    """
    if not isinstance(model_type, str) or _ALIASES.get(model_type, model_type) not in _FAMILY:
        raise ValueError(f"model_type {model_type!r} is not one kvmath reads; it reads {sorted(_FAMILY)}")
    model_type = _ALIASES.get(model_type, model_type)
    return tuple(key for key, readers in _SIZE_KEYS.items() if model_type in readers)


#: Keys that only hint at something kvmath leaves out (the sizes it gives stand): a note and a warning.
_HINT_KEYS = {
    "num_nextn_predict_layers": "multi-token-prediction layers (used for speculative decoding) not counted",
    "num_mtp_modules": "multi-token-prediction modules (used for speculative decoding) not counted",
}

#: Gemma3TextConfig defaults for keys a Gemma 3 config.json may leave out:
#: transformers src/transformers/models/gemma3/configuration_gemma3.py,
#: ``Gemma3TextConfig.__init__`` (huggingface/transformers @ 008f5c8c):
#: vocab_size=262_208, head_dim=256, num_key_value_heads=4 (the class's
#: own default, not num_attention_heads), sliding_window=4096,
#: sliding_window_pattern=6 ("5:1 attention pattern": layer i is local
#: unless (i + 1) % 6 == 0), tie_word_embeddings=True,
#: max_position_embeddings=131_072, hidden_size=2304,
#: intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
    "sliding_window_pattern": 6, "max_position_embeddings": 131_072, "tie_word_embeddings": True,
}


class _Config:
    """A config mapping whose reads name the key (with its ``text_config.`` prefix) when they fail."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "", defaults: Mapping[str, Any] | None = None):
        self.data, self.prefix, self.defaults = data, prefix, defaults or {}

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is not None:
            return value
        if key in self.defaults:
            return self.defaults[key]
        if default is _MISSING:
            raise ValueError(f"config.json has no {self.name(key)!r}")
        return default

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        value = self.raw(key, default)
        if isinstance(value, numbers.Integral) and value > sys.float_info.max:
            value = _Unrepresentable(f"an integer of {int(value).bit_length():,} bits")  # from a dict config
        if isinstance(value, _Unrepresentable):
            raise ValueError(f"config.json {self.name(key)!r} is too large to be a size (more than a float64 "
                             f"holds), got {value!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise ValueError(f"config.json {self.name(key)!r} must be a whole number >= {minimum}, got {value!r}")
        return int(value)  # a numpy integer in a dict config becomes a Python int (no int64 wrap later)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"config.json {self.name(key)!r} must be true or false, got {value!r}")
        return value

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"


def _config_path(config: PathOrDict) -> str:
    """The file a path names: itself, or a directory's ``config.json``."""
    if not isinstance(config, (str, os.PathLike)) or config == "":  # os.fspath would raise TypeError
        raise ValueError(f"config must be a path to a config.json, its directory, or a dict, got {config!r}")
    path = os.fspath(config)
    try:
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
    except ValueError:  # a NUL byte in the path
        raise ValueError(f"config path {path!r} contains a NUL byte") from None
    return path


#: What a path that is not a regular file is, for the message.
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _read_config_bytes(path: str) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_CONFIG_BYTES`; anything else refused by name.

    Opened without blocking and checked on the open file (no race with the path): a FIFO nobody
    writes would otherwise hang the read, and ``/dev/zero`` would never end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ValueError(f"cannot read config file {path!r}: {err.strerror}") from None
    except ValueError:
        raise ValueError(f"config path {path!r} contains a NUL byte") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
        raise ValueError(f"config file {path!r} is {what}, not a regular file: not a config.json")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"config file {path!r} is larger than {MAX_CONFIG_BYTES // 2**20} MiB: not a config.json "
                         "(a published one is a few KB)")
    return data


def _load(config: PathOrDict) -> tuple[dict, str, str]:
    """(the config dict, its name, its source path) from a path, a directory or a dict."""
    if isinstance(config, Mapping):
        data = dict(config)
        return data, str(data.get("_name_or_path") or "config"), "dict"
    path = _config_path(config)
    raw = _read_config_bytes(path)
    try:
        data = json.loads(raw.decode("utf-8-sig"), parse_int=_parse_int, parse_float=_parse_float)  # -sig: a BOM from a Windows editor
    except json.JSONDecodeError as err:
        raise ValueError(f"config file {path!r} is not JSON: {err.msg} at line {err.lineno}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"config file {path!r} is not UTF-8 text (byte {err.start}): not a config.json") from None
    except RecursionError:
        raise ValueError(f"config file {path!r} is nested too deeply to be a config.json") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {path!r} holds a JSON {type(data).__name__}, not an object")
    # A file called config.json is named after its folder (the Hub's layout); any other file after itself.
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = data.get("_name_or_path") or (folder if os.path.basename(path) == "config.json" else stem)
    return data, str(name), path


def _naming_the_file(read):
    """``read`` (a reader of a config), whose refusals of a file's contents name the file they are in."""

    @functools.wraps(read)
    def reader(config: PathOrDict):
        try:
            return read(config)
        except ValueError as err:
            if isinstance(config, Mapping):
                raise
            try:
                path = _config_path(config)
            except ValueError:  # not a path at all: the refusal says so
                raise err from None
            text = str(err)
            if repr(path) in text or type(err) is not ValueError:  # _load's own refusals already name it
                raise
            raise ValueError(f"config file {path!r}: {text.removeprefix('config.json ')}") from None

    return reader


def _text_config(data: dict) -> tuple[_Config, str]:
    """The language model's config (``text_config`` of a multimodal one) and its model_type."""
    outer_type = data.get("model_type")
    if data.get("text_config") is not None and not isinstance(data["text_config"], Mapping):
        raise ValueError(f"config.json 'text_config' must be an object, got {data['text_config']!r}")
    if isinstance(data.get("text_config"), Mapping):
        inner = data["text_config"]
        model_type = inner.get("model_type") or outer_type
        prefix = "text_config."
    else:
        inner, model_type, prefix = data, outer_type, ""
    if model_type is None:
        raise ValueError(f"config.json has no '{prefix}model_type'")
    if not isinstance(model_type, str):
        raise ValueError(f"config.json '{prefix}model_type' must be a string, got {model_type!r}")
    model_type = _ALIASES.get(model_type, model_type)
    if model_type not in _FAMILY:
        raise ValueError(f"config.json '{prefix}model_type' {model_type!r} is not one kvmath reads; "
                         f"it reads {sorted(_FAMILY)}")
    if model_type == "gemma3_text":
        if "sliding_window" in inner and inner["sliding_window"] is None:
            # transformers reads an explicit null as no window; kvmath's Gemma 3 reader needs one.
            raise ValueError(f"config.json {prefix}'sliding_window' is null: kvmath reads Gemma 3 with a window "
                             "(leave the key out for the default 4096)")
        # torch_dtype of a multimodal Gemma 3 sits in the outer config.
        merged = dict(inner)
        merged.setdefault("torch_dtype", data.get("torch_dtype"))
        return _Config(merged, prefix, GEMMA3_TEXT_DEFAULTS), model_type
    if prefix:  # a multimodal config's torch_dtype sits in the outer config
        inner = dict(inner)
        inner.setdefault("torch_dtype", data.get("torch_dtype"))
    return _Config(inner, prefix), model_type


def _present(value: Any) -> bool:
    """Whether a config value switches its feature on (not null, 0, false or empty)."""
    return value is not None and value is not False and value != 0 and value != [] and value != {} and value != ""


def _refuse_foreign_keys(c: _Config, model_type: str) -> list[str]:
    """Refuse a size-changing key the family does not read (by name); the hints' notes, each also warned."""
    for key, readers in _SIZE_KEYS.items():
        value = c.data.get(key)
        if _present(value) and value != _INERT.get(key, _MISSING) and model_type not in readers:
            where = (f"which kvmath reads in only {', '.join(readers)} configs, not in a {model_type!r} config"
                     if readers else "which no kvmath reader reads")
            raise ValueError(f"config.json has {c.name(key)!r}, which changes the model's sizes and {where}: "
                             "kvmath would size it without it")
    window = c.data.get("sliding_window")
    types = c.data.get("layer_types") if isinstance(c.data.get("layer_types"), list) else []
    if (_present(window) and model_type not in _SLIDING_READERS and "sliding_attention" not in types
            and not (model_type in _QWEN_WINDOW_FLAG and not c.data.get("use_sliding_window"))):
        raise ValueError(f"config.json has {c.name('sliding_window')!r} ({window!r}) but a {model_type!r} config "
                         "says no layer uses it: kvmath reads sliding windows from layer_types or the family's rule")
    chunk = c.data.get("attention_chunk_size")
    if _present(chunk) and model_type != "llama4_text" and "chunked_attention" not in types:
        raise ValueError(f"config.json has {c.name('attention_chunk_size')!r} but no chunked layer in a "
                         f"{model_type!r} config: kvmath would size every layer as full attention")
    notes = []
    for key, hint in _HINT_KEYS.items():
        if _present(c.data.get(key)):
            notes.append(f"{key} {c.data[key]!r}: {hint}")
            warnings.warn(f"config.json {c.name(key)} {c.data[key]!r}: {hint}", stacklevel=4)  # past _naming_the_file
    return notes


#: Families that read sliding_window by their own rule (the rest only through layer_types).
_SLIDING_READERS = ("mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2",
                    "gemma3_text", "gpt_oss", "smollm3", "olmo3")

#: Qwen families whose published configs carry a ``sliding_window`` that ``use_sliding_window: false`` switches off
#: (Qwen3-Next's too, whose reader reads no window: with ``use_sliding_window`` true it is refused).
_QWEN_WINDOW_FLAG = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next")


def _heads(c: _Config, model_type: str) -> tuple[int, int, int, int]:
    """(d_model, query heads, KV heads, head_dim); an explicit head_dim wins."""
    if model_type == "falcon":
        d = c.int("hidden_size")
        h = c.int("num_attention_heads") if c.has("num_attention_heads") else c.int("n_head")
        if c.bool("new_decoder_architecture", False):
            # FalconConfig: num_kv_heads (old RW configs: n_head_kv) counts the KV groups.
            kv = c.int("num_kv_heads") if c.has("num_kv_heads") else c.int("n_head_kv")
        else:
            # FalconConfig default multi_query=True: one KV head.
            kv = 1 if c.bool("multi_query", True) else h
    else:
        d = c.int("hidden_size")
        h = c.int("num_attention_heads")
        if model_type in _MLA:
            kv = h  # MLA: every query head has its own keys and values, rebuilt from the latent
        else:
            # LlamaConfig and its descendants: num_key_value_heads defaults to
            # num_attention_heads when left out (Gemma3TextConfig: 4, via its defaults).
            kv = c.int("num_key_value_heads", h)
    if h % kv:
        kv_key = "num_kv_heads" if c.has("num_kv_heads") else "n_head_kv" if c.has("n_head_kv") else "num_key_value_heads"
        raise ValueError(f"config.json {c.name('num_attention_heads')} ({h}) must be divisible by "
                         f"{c.name(kv_key)} ({kv})")
    if model_type in _MLA:
        return d, h, kv, c.int("qk_nope_head_dim")
    if c.has("head_dim") or "head_dim" in c.defaults:
        return d, h, kv, c.int("head_dim")
    if model_type == "gemma2":
        return d, h, kv, 256  # Gemma2Config's documented default head_dim=256 (not d / h)
    if d % h:
        raise ValueError(f"config.json has no {c.name('head_dim')!r} and {c.name('hidden_size')} ({d}) is not "
                         f"divisible by {c.name('num_attention_heads')} ({h})")
    return d, h, kv, d // h


_LAYER_TYPE_KINDS = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
                     "linear_attention": "linear"}


def _layer_kinds(c: _Config, model_type: str, n_layers: int) -> list[str]:
    """The kind of each layer: from ``layer_types`` where listed, else the family's rule."""
    if c.has("layer_types") and model_type != "granitemoehybrid":
        types = c.raw("layer_types")
        if not isinstance(types, list) or len(types) != n_layers:
            raise ValueError(f"config.json {c.name('layer_types')} must list {n_layers} layers "
                             f"(num_hidden_layers), got {len(types) if isinstance(types, list) else types!r}")
        for i, t in enumerate(types):
            if not isinstance(t, str):
                raise ValueError(f"config.json {c.name('layer_types')}[{i}] must be a string, got {t!r}")
        unknown = sorted({t for t in types if t not in _LAYER_TYPE_KINDS}, key=str)
        if unknown:
            raise ValueError(f"config.json {c.name('layer_types')} has unknown type(s) {unknown}; "
                             f"kvmath reads {sorted(_LAYER_TYPE_KINDS)}")
        return [_LAYER_TYPE_KINDS[t] for t in types]
    if model_type == "llama4_text":
        # Llama4TextConfig: no_rope_layers[i] == 1 (RoPE) marks a chunked local layer, 0 a global NoPE one;
        # left out, every no_rope_layer_interval-th (default 4) layer is NoPE.
        flags = c.raw("no_rope_layers", None) or [int((i + 1) % c.int("no_rope_layer_interval", 4) != 0)
                                                  for i in range(n_layers)]
        if not isinstance(flags, list) or len(flags) != n_layers or any(f not in (0, 1) for f in flags):
            raise ValueError(f"config.json {c.name('no_rope_layers')} must list {n_layers} flags of 0 or 1")
        chunked = c.has("attention_chunk_size")
        return ["chunked" if f and chunked else "full" for f in flags]
    if model_type == "olmo3":
        # Olmo3Config (vllm/transformers_utils/configs/olmo3.py, as transformers'): layer_types left out, every
        # 4th layer full attention and the others sliding over sliding_window (default 4096)
        return ["full" if (i + 1) % 4 == 0 else "sliding" for i in range(n_layers)]
    if model_type == "smollm3":
        # SmolLM3Config: layer_types left out, a NoPE layer (no_rope_layers[i] == 0; default every
        # no_rope_layer_interval-th) is sliding where use_sliding_window and sliding_window are set, else full.
        flags = c.raw("no_rope_layers", None) or [int((i + 1) % c.int("no_rope_layer_interval", 4) != 0)
                                                  for i in range(n_layers)]
        if not isinstance(flags, list) or len(flags) != n_layers or any(f not in (0, 1) for f in flags):
            raise ValueError(f"config.json {c.name('no_rope_layers')} must list {n_layers} flags of 0 or 1")
        if c.bool("use_sliding_window", False) and c.has("sliding_window"):
            return ["full" if f else "sliding" for f in flags]
        return ["full"] * n_layers
    if model_type == "granitemoehybrid":
        types = c.raw("layer_types", None)
        kinds = {"mamba": "linear", "attention": "full"}
        if not isinstance(types, list) or len(types) != n_layers or any(t not in kinds for t in types):
            raise ValueError(f"config.json {c.name('layer_types')} must list {n_layers} layers, each 'mamba' or "
                             f"'attention', got {types!r:.80}")
        return [kinds[t] for t in types]
    if model_type == "qwen3_next":
        interval = c.int("full_attention_interval")
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n_layers)]
    if model_type == "gemma2":
        # Gemma2: layers alternate, local first (modeling_gemma2: is_sliding = not bool(layer_idx % 2)).
        return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
    if model_type == "gemma3_text":
        pattern = c.int("sliding_window_pattern")
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers)]
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        # Qwen2/3: sliding window only when use_sliding_window, from layer max_window_layers on.
        if c.bool("use_sliding_window", False):
            first = c.int("max_window_layers", minimum=0)
            return ["sliding" if i >= first else "full" for i in range(n_layers)]
        return ["full"] * n_layers
    if model_type in ("mistral", "mixtral", "phi3") and c.has("sliding_window"):
        return ["sliding"] * n_layers  # every layer attends over the window
    return ["full"] * n_layers


def _moe(c: _Config, model_type: str, d_ff: int, n_layers: int) -> dict:
    """Mixture-of-experts fields of :class:`kvmath.Model` (empty for a dense model)."""
    if model_type not in _EXPERTS_KEY:
        return {}
    experts_key = _EXPERTS_KEY[model_type]
    if not c.has(experts_key):
        raise ValueError(f"config.json has no {c.name(experts_key)!r}: a {model_type} model is a mixture of experts")
    n_experts = c.int(experts_key)
    if not c.has("num_experts_per_tok"):
        raise ValueError(f"config.json has {c.name(experts_key)} but no {c.name('num_experts_per_tok')!r} "
                         "(experts each token uses)")
    top_k = c.int("num_experts_per_tok")
    if top_k > n_experts:
        raise ValueError(f"config.json {c.name('num_experts_per_tok')} ({top_k}) exceeds {c.name(experts_key)} ({n_experts})")
    fields = dict(n_experts=n_experts, top_k=top_k, n_shared_experts=0, n_dense_layers=0)
    if model_type in ("mixtral", "gpt_oss", "minimax_m2"):
        # MixtralConfig, GptOssConfig, MiniMaxM2Config: intermediate_size is each expert's width
        fields["d_ff_expert"] = d_ff
        return fields
    if model_type == "llama4_text":
        # Llama4TextConfig: MoE on moe_layers (default every interleave_moe_layer_step-th layer, counting from
        # step - 1), each with one shared expert of the routed experts' width; the other layers are dense MLPs
        # of intermediate_size_mlp. Only how many of each changes a size, not where they sit.
        step = c.int("interleave_moe_layer_step", 1)
        moe_layers = c.raw("moe_layers", None) or list(range(step - 1, n_layers, step))
        if not isinstance(moe_layers, list) or not all(isinstance(i, int) and 0 <= i < n_layers for i in moe_layers):
            raise ValueError(f"config.json {c.name('moe_layers')} must list layer indices below {n_layers}")
        fields.update(d_ff_expert=c.int("intermediate_size"), n_shared_experts=1,
                      n_dense_layers=n_layers - len(set(moe_layers)))
        return fields
    width = c.int("moe_intermediate_size")
    fields["d_ff_expert"] = width
    if model_type in _MLA + ("glm4_moe",):
        if c.raw("moe_layer_freq", 1) != 1:
            raise ValueError(f"config.json {c.name('moe_layer_freq')} must be 1 (kvmath reads MoE on every "
                             f"layer after the dense ones), got {c.raw('moe_layer_freq')!r}")
        fields["n_shared_experts"] = c.int("n_shared_experts", 0, minimum=0)
        fields["n_dense_layers"] = c.int("first_k_dense_replace", 0, minimum=0)
        if fields["n_dense_layers"] >= n_layers:
            raise ValueError(f"config.json {c.name('first_k_dense_replace')} ({fields['n_dense_layers']}) must be below "
                             f"{c.name('num_hidden_layers')} ({n_layers}): a mixture-of-experts model needs an MoE layer")
        return fields
    if c.raw("decoder_sparse_step", 1) != 1 or c.raw("mlp_only_layers", []):
        raise ValueError(f"config.json {c.name('decoder_sparse_step')}/{c.name('mlp_only_layers')}: kvmath reads "
                         "MoE on every layer only (decoder_sparse_step 1, mlp_only_layers [])")
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared % width:
        raise ValueError(f"config.json {c.name('shared_expert_intermediate_size')} ({shared}) must be a multiple "
                         f"of {c.name('moe_intermediate_size')} ({width})")
    fields["n_shared_experts"] = shared // width
    return fields


def _gated_deltanet(c: _Config, d: int) -> LayerSpec:
    """A Qwen3-Next linear-attention (Gated DeltaNet) layer: its fixed state, FLOPs and parameters.

    State per sequence: the recurrent state, ``n_v`` heads of ``d_k x d_v``,
    plus the causal convolution's last ``kernel - 1`` inputs over
    ``conv_dim = 2 n_k d_k + n_v d_v`` channels, in the config's dtype (the
    recurrent state in ``mamba_ssm_dtype`` where the config names one, as
    Qwen3.5's do: float32).
    FLOPs per token: 2 per state element for each of ``k^T S``, the rank-1
    update and ``q^T S`` (a count of the state matmuls; gates left out).
    Parameters: ``in_proj_qkvz``, ``in_proj_ba``, the convolution, ``A_log``,
    ``dt_bias``, the gated norm and ``out_proj`` (transformers
    modeling_qwen3_next ``Qwen3NextGatedDeltaNet``).
    """
    n_k, n_v = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    d_k, d_v = c.int("linear_key_head_dim"), c.int("linear_value_head_dim")
    kernel = c.int("linear_conv_kernel_dim")
    key_dim, value_dim = n_k * d_k, n_v * d_v
    conv_dim = 2 * key_dim + value_dim
    params = (d * (2 * key_dim + 2 * value_dim) + d * 2 * n_v + conv_dim * kernel + 2 * n_v + d_v
              + value_dim * d)
    # n_heads: the value heads the recurrent state splits into under tensor parallelism.
    return _linear_state(c, n_heads=n_v, conv_elems=conv_dim * (kernel - 1), ssm_elems=n_v * d_k * d_v,
                         state_flops=float(6 * n_v * d_k * d_v), params=params)


def _state_format(c: _Config, key: str) -> str:
    """kvmath's format for the dtype a config's ``key`` names (``torch_dtype`` / ``dtype``, or ``mamba_ssm_dtype``)."""
    if key == "torch_dtype":
        key = "torch_dtype" if c.has("torch_dtype") or not c.has("dtype") else "dtype"
    dtype = c.raw(key)
    if dtype not in _DTYPE_FORMAT:
        raise ValueError(f"config.json {c.name(key)} must be one of {sorted(_DTYPE_FORMAT)}, got {dtype!r}")
    return _DTYPE_FORMAT[dtype]


def _linear_state(c: _Config, *, conv_elems: int, ssm_elems: int, **spec) -> LayerSpec:
    """A linear layer whose state is ``conv_elems`` convolution inputs in the config's dtype and ``ssm_elems``
    recurrent-state elements in ``mamba_ssm_dtype`` where the config names one, else the same dtype."""
    from .units import dtype_bytes

    stored = _state_format(c, "torch_dtype")
    ssm = _state_format(c, "mamba_ssm_dtype") if c.has("mamba_ssm_dtype") else stored
    state = conv_elems * dtype_bytes(stored) + ssm_elems * dtype_bytes(ssm)
    return LayerSpec("linear", state_bytes=float(state), conv_elems=conv_elems, ssm_elems=ssm_elems,
                     state_dtype=stored, ssm_dtype="" if ssm == stored else ssm, **spec)


def _mamba2(c: _Config, d: int) -> LayerSpec:
    """A Mamba-2 layer (Granite 4 hybrid's ``mamba`` layers): its fixed state, FLOPs and parameters.

    State per sequence, in the config's dtype (the SSM state in
    ``mamba_ssm_dtype`` where the config names one): the SSM state,
    ``n_heads`` heads of ``d_head x d_state``, plus the causal convolution's
    last ``d_conv - 1`` inputs over ``conv_dim = d_inner + 2 n_groups d_state``
    channels (``d_inner = n_heads d_head``): what vLLM caches
    (``MambaStateShapeCalculator.mamba2_state_shape``, ``d_conv - 1``
    columns; transformers' ``GraniteMoeHybridMambaLayer`` keeps ``d_conv``).
    Under tensor parallelism vLLM replicates the ``n_groups`` B/C groups
    where the ranks do not divide them (:meth:`kvmath.layers.LayerSpec.conv_elems_per_rank`).
    FLOPs per token: 2 per state element for the decayed rank-1 update and 2
    for the readout ``C h`` (the convolution and gates left out).
    Parameters: ``in_proj`` (``d -> 2 d_inner + 2 n_groups d_state + n_heads``),
    the convolution (``conv_dim x d_conv``), ``A_log``, ``D``, ``dt_bias``,
    the gated norm and ``out_proj``; biases left out.
    """
    n_heads, d_head = c.int("mamba_n_heads"), c.int("mamba_d_head")
    d_state, groups, d_conv = c.int("mamba_d_state"), c.int("mamba_n_groups", 1), c.int("mamba_d_conv")
    d_inner = n_heads * d_head
    if d_inner != c.int("mamba_expand", 2) * d:
        raise ValueError(f"config.json {c.name('mamba_n_heads')} x {c.name('mamba_d_head')} ({d_inner}) must equal "
                         f"{c.name('mamba_expand')} x hidden_size ({c.int('mamba_expand', 2) * d})")
    conv_dim = d_inner + 2 * groups * d_state
    params = (d * (2 * d_inner + 2 * groups * d_state + n_heads) + conv_dim * d_conv + 3 * n_heads + d_inner
              + d_inner * d)
    # conv_groups / group_conv_elems: the B/C groups, which vLLM replicates across TP ranks that do not divide them
    return _linear_state(c, n_heads=n_heads, conv_elems=conv_dim * (d_conv - 1), ssm_elems=n_heads * d_head * d_state,
                         state_flops=float(4 * n_heads * d_head * d_state), params=params, conv_groups=groups,
                         group_conv_elems=2 * d_state * (d_conv - 1))


def _granite_moe(c: _Config, d_ff: int) -> dict:
    """Granite 4 hybrid's MLP: a dense one (no experts), or routed experts plus a shared MLP."""
    n_experts = c.int("num_local_experts", 0, minimum=0)
    if not n_experts:
        return {}
    top_k, width = c.int("num_experts_per_tok"), d_ff
    shared = c.int("shared_intermediate_size", 0, minimum=0)
    if shared % width:
        raise ValueError(f"config.json {c.name('shared_intermediate_size')} ({shared}) must be a multiple of "
                         f"{c.name('intermediate_size')} ({width})")
    return dict(n_experts=n_experts, top_k=top_k, d_ff_expert=width, n_shared_experts=shared // width,
                n_dense_layers=0)


@_naming_the_file
def model_from_hf_config(config: PathOrDict):
    """A :class:`kvmath.Model` from a Hugging Face ``config.json`` (a path, its directory, or a dict).

    See the module docstring for the families read and the rules. The
    model's name is the config's ``_name_or_path``, else its directory's
    name; its source is the path read.

    Examples
    --------
    >>> m = model_from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    ...     "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256,
    ...     "max_position_embeddings": 131072})
    >>> m.kv_bytes_per_token(), m.param_count(), m.supported_context
    (131072.0, 8030261248, None)
    >>> model_from_hf_config({"model_type": "llama", "hidden_size": 4096})
    Traceback (most recent call last):
    ...
    ValueError: config.json has no 'num_attention_heads'
    """
    from .models import Model

    data, name, source = _load(config)
    c, model_type = _text_config(data)
    d, h, kv, head_dim = _heads(c, model_type)
    layers_key = "num_hidden_layers" if c.has("num_hidden_layers") or model_type != "falcon" else "n_layer"
    n_layers = c.int(layers_key)
    if n_layers > MAX_LAYERS:
        raise ValueError(f"config.json {c.name(layers_key)} ({n_layers}) is above the {MAX_LAYERS:,} layers "
                         "kvmath reads (no published model has more than a few hundred)")
    hints = _refuse_foreign_keys(c, model_type)
    if model_type == "falcon":
        d_ff = c.int("ffn_hidden_size", 4 * d)  # FalconConfig: ffn_hidden_size defaults to 4 * hidden_size
    elif model_type == "llama4_text":
        d_ff = c.int("intermediate_size_mlp")  # the dense layers' MLP; intermediate_size is the experts'
    elif model_type == "granitemoehybrid" and not c.raw("num_local_experts", 0):
        d_ff = c.int("shared_intermediate_size")  # a dense Granite 4 hybrid's one MLP is its shared_mlp
    else:
        d_ff = c.int("intermediate_size")
    if model_type == "minimax_m2" and c.raw("shared_intermediate_size", 0):
        raise ValueError(f"config.json {c.name('shared_intermediate_size')} must be 0 (kvmath reads MiniMax-M2 "
                         f"without a shared expert), got {c.raw('shared_intermediate_size')!r}")
    if model_type == "minimax_m2" and c.has("attn_type_list") and set(c.raw("attn_type_list")) != {1}:
        raise ValueError(f"config.json {c.name('attn_type_list')} must be all 1 (softmax attention): kvmath "
                         "does not read MiniMax's lightning-attention layers (0)")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", _TIED_DEFAULT[model_type])
    fields: dict[str, Any] = {}
    mla = model_type in _MLA
    if mla:
        q_lora = c.raw("q_lora_rank", None)
        if q_lora is not None:
            q_lora = c.int("q_lora_rank")
        fields.update(q_lora_rank=q_lora, kv_lora_rank=c.int("kv_lora_rank"),
                      qk_rope_dim=c.int("qk_rope_head_dim"), v_head_dim=c.int("v_head_dim"))
        attention = "mla"
    else:
        attention = "mha" if kv == h else "mqa" if kv == 1 else "gqa"
    if model_type == "granitemoehybrid":
        fields.update(_granite_moe(c, d_ff))
    else:
        fields.update(_moe(c, model_type, d_ff, n_layers))
    kinds = _layer_kinds(c, model_type, n_layers)
    notes = list(hints)
    if c.raw("max_position_embeddings", None) is not None:
        notes.append(f"config max_position_embeddings {c.raw('max_position_embeddings')} (a hint, not a "
                     "documented supported context)")
    if model_type == "gpt_oss":
        notes.append("attention sinks (one learned logit per head per layer) and biases not counted")
    if model_type == "gemma3_text" and "vision_config" in data:
        notes.append("text model only: the vision tower is not counted")
    if isinstance(data.get("quantization_config"), Mapping):
        notes.append(f"weights stored as quantization_config.quant_method "
                     f"{data['quantization_config'].get('quant_method')!r} (weights_from_hf_config reads it)")
    base = Model(name=name, n_layers=n_layers, d_model=d, n_heads=h, n_kv_heads=kv, head_dim=head_dim,
                 d_ff=d_ff, vocab=vocab, tied_embeddings=tied, mlp_matrices=2 if model_type == "falcon" else 3,
                 attention=attention, family=_FAMILY[model_type], source=source, display_name=name,
                 note="; ".join(notes), **fields)
    if mla and set(kinds) != {"full"}:
        raise ValueError(f"config.json {c.name('layer_types')}: kvmath reads MLA layers as full attention only")
    if model_type == "deepseek_v32":
        if base.q_lora_rank is None:
            raise ValueError(f"config.json has no {c.name('q_lora_rank')!r}: DeepSeek-V3.2's indexer queries come from it")
        return base.with_indexer(c.int("index_n_heads"), c.int("index_head_dim"), c.int("index_topk"))
    if set(kinds) == {"full"}:
        return base
    if set(kinds) == {"full", "sliding"} or set(kinds) == {"sliding"}:
        # Layers alike but for the window: the preset fields say it (as the presets do).
        window = c.int("sliding_window", 4096) if model_type == "olmo3" else c.int("sliding_window")  # Olmo3Config's
        return base.replace(sliding_window=window, n_sliding_layers=kinds.count("sliding"))
    attn_params = base._attention_params_per_layer()
    specs = []
    # Each local kind has its own window: sliding layers sliding_window, chunked layers attention_chunk_size.
    windows = {"full": None}
    if "sliding" in kinds:
        windows["sliding"] = c.int("sliding_window", 4096) if model_type == "olmo3" else c.int("sliding_window")
    if "chunked" in kinds:
        windows["chunked"] = c.int("attention_chunk_size")
    if "linear" in kinds:
        linear = _mamba2(c, d) if model_type == "granitemoehybrid" else _gated_deltanet(c, d)
    for kind in kinds:
        if kind == "linear":
            specs.append(linear)
        else:
            params = attn_params
            if model_type == "qwen3_next" and c.bool("attn_output_gate", True):
                params += d * h * head_dim  # q_proj doubles for the output gate (Qwen3NextConfig default True)
            specs.append(LayerSpec(kind, h, kv, head_dim, window=windows[kind], params=params))
    return base.replace(layers=tuple(specs))


#: The weight groups each ``quant_method`` converts, before ``modules_to_not_convert``:
#: mxfp4: transformers' Mxfp4HfQuantizer replaces only the gpt-oss expert modules
#: (``replace_with_mxfp4_linear`` -> ``Mxfp4GptOssExperts``; docs/source/en/quantization/mxfp4.md:
#: "MXFP4 quantisation currently only works for OpenAI GPT-OSS"); attention, router, embeddings and
#: LM head are the ``modules_to_not_convert`` of the published config and stay in bf16.
#: fp8 (transformers FineGrainedFP8Config, DeepSeek-V3's checkpoint): every ``nn.Linear`` of the layers,
#: i.e. attention, dense MLP, routed and shared experts; the LM head is left out by the quantizer's
#: default and DeepSeek's router (``MoEGate``, a bare parameter, not a Linear) and the embedding,
#: norms and position tables are not Linear layers, so they keep ``torch_dtype``.
#: gptq, awq: every Linear of the decoder layers (AutoGPTQ / AutoAWQ leave the LM head and embeddings out).
_QUANTIZED_GROUPS = {"mxfp4": ("experts",), "fp8": ("attention", "mlp", "experts", "shared_experts"),
                     "gptq": ("attention", "mlp", "experts", "shared_experts"),
                     "awq": ("attention", "mlp", "experts", "shared_experts")}

#: fp8 element formats by ``quantization_config.fmt`` (FineGrainedFP8Config default "e4m3").
_FP8_FMT = {"e4m3": "fp8-e4m3", "e5m2": "fp8-e5m2", "float8_e4m3fn": "fp8-e4m3", "float8_e5m2": "fp8-e5m2"}

#: Module-name fragments of ``modules_to_not_convert`` and the weight group each names
#: (first match wins: "shared_expert" before "experts").
_MODULE_GROUPS = (("self_attn", "attention"), ("shared_expert", "shared_experts"), ("experts", "experts"),
                  ("router", "router"), ("mlp.gate", "router"), ("embed_tokens", "embedding"),
                  ("lm_head", "lm_head"))

#: ``modules_to_not_convert`` entries that name no weight matrix kvmath counts: a router's bias, norms, and
#: Qwen's shared-expert gate (one d x 1 vector per layer, left out of the count as biases are).
_NOT_A_GROUP = ("e_score_correction_bias", "norm", "shared_expert_gate")

#: An entry naming one layer (``model.layers.0.self_attn``): transformers matches entries as substrings of each
#: module's name (``Mxfp4HfQuantizer``, ``replace_with_*_linear``), so it leaves that layer alone unconverted.
_ONE_LAYER = re.compile(r"layers\.\d+(\.|$)")

#: An entry naming one matrix of a group (``experts.gate_up_proj``, ``self_attn.q_proj``): transformers leaves that
#: matrix unconverted and converts the rest of the group.
_ONE_MATRIX = re.compile(r"\.(q_proj|k_proj|v_proj|o_proj|qkv_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|"
                         r"gate_proj|up_proj|down_proj|gate_up_proj|w1|w2|w3)$")


#: The matrices of a decoder block, by the names GPTQ's ``modules_in_block_to_quantize`` gives them, and the
#: weight group each whole set makes: a group is quantized where every matrix of one of its sets is listed.
_BLOCK_MODULE_SETS = {"attention": ({"q_proj", "k_proj", "v_proj", "o_proj"}, {"qkv_proj", "o_proj"}),
                      "mlp": ({"gate_proj", "up_proj", "down_proj"}, {"gate_up_proj", "down_proj"})}


def _gptq_block_groups(quant: Mapping) -> set:
    """The groups GPTQ's ``modules_in_block_to_quantize`` quantizes (``[["self_attn.q_proj", ...], ...]``, the
    modules of each block, in sequential order): whole attention and MLP sets only, else ``ValueError`` by name."""
    key = "quantization_config.modules_in_block_to_quantize"
    listed = quant["modules_in_block_to_quantize"]
    if not isinstance(listed, list) or not all(isinstance(step, list) and all(isinstance(m, str) for m in step)
                                               for step in listed):
        raise ValueError(f"config.json '{key}' must be a list of lists of module names, got {listed!r}")
    names = {m.rsplit(".", 1)[-1] for step in listed for m in step}
    if any("expert" in m for step in listed for m in step):
        raise ValueError(f"config.json '{key}' names expert modules: kvmath reads it for dense attention and MLP "
                         "matrices only; give the formats yourself (--weight-dtype, or weights= in Python)")
    groups, covered = set(), set()
    for group, sets in _BLOCK_MODULE_SETS.items():
        whole = next((full for full in sets if full <= names), None)
        if whole is not None:
            groups.add(group)
            covered |= whole
    partial = sorted(names - covered)
    if partial:
        raise ValueError(f"config.json '{key}' quantizes {', '.join(partial)} without the rest of its group: kvmath "
                         "sizes each weight group (attention, MLP) in one format; give the formats yourself "
                         "(--weight-dtype, or weights= in Python)")
    return groups


def _int_quant_bits(quant: Mapping, method: str) -> Union[str, float]:
    """Bytes per weight (or the format's name) of a gptq / awq checkpoint from its bits and group_size.

    A group of ``g`` weights stores one fp16 scale and, where the format keeps
    one, a zero point of ``bits`` bits: ``bits + 16 / g (+ bits / g)`` bits per
    weight. GPTQ's checkpoint format always packs ``qzeros`` (AutoGPTQ
    ``QuantLinear``, symmetric or not); AWQ's only with ``zero_point``
    (AutoAWQ's default true). ``group_size`` -1 (one scale per output row)
    adds a negligible fraction and is counted as no groups.
    """
    bits, group = quant.get("bits", quant.get("w_bit")), quant.get("group_size", quant.get("q_group_size"))
    if not isinstance(bits, int) or isinstance(bits, bool) or bits not in (2, 3, 4, 8):
        raise ValueError(f"config.json 'quantization_config.bits' must be 2, 3, 4 or 8, got {bits!r}")
    if not isinstance(group, int) or isinstance(group, bool) or not (group == -1 or group >= 1):
        raise ValueError(f"config.json 'quantization_config.group_size' must be -1 or a whole number >= 1, "
                         f"got {group!r}")
    zero = True if method == "gptq" else bool(quant.get("zero_point", True))
    if group == -1:
        return bits / 8
    if bits == 4 and group == 128 and not zero:
        return "int4-g128"
    return (bits + 16 / group + (bits / group if zero else 0)) / 8


@_naming_the_file
def weights_from_hf_config(config: PathOrDict) -> "Precision":
    """How a checkpoint stores its weights, read from its ``config.json``: the ``weights=`` to size it with.

    * No ``quantization_config``: every group in ``torch_dtype`` (or the newer
      key ``dtype``): ``"bf16"``, ``"fp16"`` or ``"fp32"``.
    * ``quant_method`` ``"mxfp4"`` (gpt-oss): the experts in ``"mxfp4"``
      (32 E2M1 elements share one E8M0 scale: 4.25 bits per weight), the rest
      in ``torch_dtype``, bf16 where the config names none (gpt-oss's does not;
      its checkpoint keeps those tensors in bf16). Groups listed in
      ``modules_to_not_convert`` stay unconverted.
    * ``quant_method`` ``"fp8"`` (DeepSeek-V3): attention, MLP and expert
      matrices in ``"fp8-e4m3"`` (or ``"fp8-e5m2"`` per ``fmt``); router, LM
      head, embedding and norms in ``torch_dtype``. The block scales of
      ``weight_block_size`` [128, 128] are one fp32 per 16,384 weights:
      4 / 16,384 = 0.024 % of a byte per weight, below what any figure here
      shows, so they are not counted (the format's 8 bits are).

    * ``quant_method`` ``"gptq"`` or ``"awq"``: attention, MLP and expert
      matrices at ``bits`` with a fp16 scale (and a zero point, GPTQ always,
      AWQ with ``zero_point``) per ``group_size`` weights, in bytes per
      weight (``"int4-g128"`` where that is the layout); the rest in
      ``torch_dtype``. GPTQ's ``lm_head`` true (GPTQModel) quantizes the LM
      head too; its ``modules_in_block_to_quantize`` quantizes only the
      attention or MLP sets it lists whole (a set left part-quantized, or
      expert modules, raise ``ValueError`` naming the key).
    * ``quant_method`` ``"mxfp4"`` on a config without experts, and
      GPTQModel's per-module ``dynamic`` overrides, raise ``ValueError``
      naming the key: they would size the weights wrong, not roughly.

    Any other ``quant_method`` (compressed-tensors, bitsandbytes, ...) raises
    ``ValueError`` naming ``quantization_config.quant_method``: its bits depend
    on fields kvmath does not read; pass ``weights=`` yourself.

    Parameters
    ----------
    config : str, path or mapping
        A ``config.json``, its directory, or the dict loaded from it.

    Returns
    -------
    str or dict
        A format name, or ``{group: format, "default": format}`` (groups of
        :data:`kvmath.WEIGHT_GROUPS`).

    Examples
    --------
    >>> weights_from_hf_config({"torch_dtype": "bfloat16"})
    'bf16'
    >>> weights_from_hf_config({"num_local_experts": 32, "quantization_config": {"quant_method": "mxfp4",
    ...     "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
    ...                                "lm_head"]}})
    {'default': 'bf16', 'experts': 'mxfp4'}
    >>> weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8",
    ...     "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}})
    {'default': 'bf16', 'attention': 'fp8-e4m3', 'mlp': 'fp8-e4m3', 'experts': 'fp8-e4m3', 'shared_experts': 'fp8-e4m3'}
    >>> weights_from_hf_config({"torch_dtype": "float16", "quantization_config": {"quant_method": "gptq", "bits": 4,
    ...     "group_size": 128, "sym": True}})["attention"]  # (4 + 16/128 + 4/128) / 8
    0.51953125
    >>> weights_from_hf_config({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "bitsandbytes"}})
    Traceback (most recent call last):
    ...
    ValueError: config.json 'quantization_config.quant_method' 'bitsandbytes' is not one kvmath reads (['awq', 'fp8', 'gptq', 'mxfp4']); ...
    """
    data, _, _ = _load(config)
    c = _Config(data)
    if isinstance(data.get("text_config"), Mapping) and not c.has("torch_dtype") and not c.has("dtype"):
        c = _Config(data["text_config"], "text_config.")
    quant = data.get("quantization_config")
    dtype = c.raw("torch_dtype", None) or c.raw("dtype", None)
    if dtype is None and quant is None:
        raise ValueError(f"config.json has no {c.name('torch_dtype')!r} (or 'dtype'): the weights' stored precision")
    if dtype is not None and dtype not in _DTYPE_FORMAT:
        raise ValueError(f"config.json {c.name('torch_dtype')} must be one of {sorted(_DTYPE_FORMAT)}, got {dtype!r}")
    base = _DTYPE_FORMAT.get(dtype, "bf16")
    if quant is None:
        return base
    if not isinstance(quant, Mapping):
        raise ValueError(f"config.json 'quantization_config' must be an object, got {quant!r}")
    method = quant.get("quant_method")
    if method not in _QUANTIZED_GROUPS:
        raise ValueError(f"config.json 'quantization_config.quant_method' {method!r} is not one kvmath reads "
                         f"({sorted(_QUANTIZED_GROUPS)}); pass weights= with the checkpoint's format instead")
    if method == "fp8":
        fmt = quant.get("fmt", "e4m3")
        if fmt not in _FP8_FMT:
            raise ValueError(f"config.json 'quantization_config.fmt' must be one of {sorted(_FP8_FMT)}, got {fmt!r}")
        stored = _FP8_FMT[fmt]
        block = quant.get("weight_block_size")
        if block is not None and not (isinstance(block, list) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in block)):
            raise ValueError(f"config.json 'quantization_config.weight_block_size' must be two whole numbers "
                             f">= 1, got {block!r}")
    elif method in ("gptq", "awq"):
        stored = _int_quant_bits(quant, method)
    else:
        stored = "mxfp4"
        experts = [k for k in ("num_local_experts", "num_experts", "n_routed_experts") if c.int(k, 0, minimum=0)]
        if not experts:  # Mxfp4HfQuantizer converts experts only (gpt-oss): on a dense model it would change nothing
            raise ValueError("config.json 'quantization_config.quant_method' 'mxfp4' quantizes expert weights only "
                             "(transformers' Mxfp4 quantizer, for gpt-oss), and this config has no experts "
                             f"({c.name('num_local_experts')!r}); give the formats yourself (--weight-dtype, or "
                             "weights= in Python)")
    quantized = set(_QUANTIZED_GROUPS[method])
    for key in ("dynamic",):
        if quant.get(key):  # GPTQModel's per-module overrides: bits, group sizes or skips by regex
            raise ValueError(f"config.json 'quantization_config.{key}' sets formats module by module, which kvmath "
                             "does not read; give the formats yourself (--weight-dtype, or weights= in Python)")
    if quant.get("modules_in_block_to_quantize") is not None:
        if method != "gptq":
            raise ValueError(f"config.json 'quantization_config.modules_in_block_to_quantize' is a GPTQ option, "
                             f"not read for quant_method {method!r}")
        quantized = _gptq_block_groups(quant) | {"experts", "shared_experts"}
    head = quant.get("lm_head", False)
    if not isinstance(head, bool):
        raise ValueError(f"config.json 'quantization_config.lm_head' must be true or false, got {head!r}")
    if head:
        if method != "gptq":
            raise ValueError(f"config.json 'quantization_config.lm_head' true is read for quant_method 'gptq' "
                             f"(GPTQModel's option) only, not {method!r}")
        if data.get("tie_word_embeddings", c.raw("tie_word_embeddings", False)):
            raise ValueError("config.json 'quantization_config.lm_head' true with 'tie_word_embeddings' true: "
                             "kvmath cannot tell whether the tied table is stored once quantized or twice; give "
                             "the formats yourself (--weight-dtype, or weights= in Python)")
        quantized.add("lm_head")
    kept = quant.get("modules_to_not_convert") or []
    if not isinstance(kept, list) or not all(isinstance(k, str) for k in kept):
        raise ValueError(f"config.json 'quantization_config.modules_to_not_convert' must be a list of module "
                         f"names, got {kept!r}")
    unconverted = set()
    for module in kept:
        # kvmath sizes a group in one format in every layer: an entry that leaves part of a group unconverted
        # (one layer's, one matrix's) would widen to the whole group, so it is refused, not rounded
        part = ("one layer" if _ONE_LAYER.search(module) else
                "one matrix of a group" if _ONE_MATRIX.search(module) else None)
        if part and not any(fragment in module for fragment in _NOT_A_GROUP):
            raise ValueError(f"config.json 'quantization_config.modules_to_not_convert' names {module!r}, {part}: "
                             "kvmath sizes each weight group in one format in every layer; give the formats "
                             "yourself (--weight-dtype, or weights= in Python)")
        group = next((g for fragment, g in _MODULE_GROUPS if fragment in module), None)
        if group is None and (module == "gate" or module.endswith(".gate")):
            group = "router"  # MiniMax-M2's router is called gate (not gate_proj, an MLP matrix)
        if any(fragment in module for fragment in _NOT_A_GROUP):
            continue
        if group is None:
            raise ValueError(f"config.json 'quantization_config.modules_to_not_convert' names {module!r}, "
                             "which kvmath cannot map to a weight group")
        unconverted.add(group)
    weights = {"default": base}
    order = (*_QUANTIZED_GROUPS[method], "lm_head")
    weights.update({g: stored for g in order if g in quantized and g not in unconverted})
    return weights
