"""A calculator's or an engine's figure for a ``config.json``, against kvmath's, and which term differs.

The same errors recur from calculator to calculator (issue threads of LMCache, ollama, gguf-parser, vLLM
and AIConfigurator): hybrid linear-attention layers counted as full attention, shared-KV layers counted
twice, sliding windows ignored, MLA read as full attention, the stored precision ignored. Each is a
*reading* of the config here: the model rebuilt as that calculator reads it, and the same quantity computed
from it. :func:`check_config` computes kvmath's figure and every reading's, and names the readings that
give the figure it was handed.

Quantities (base units, as the command line's options name them):

``kv_bytes_per_token``
    What an engine reserves per token: one token's K and V (or latent) in every attention layer
    (:meth:`kvmath.Model.kv_bytes_per_token`).
``seq_bytes``
    What one sequence of ``tokens`` tokens needs: windows applied, linear states added
    (:meth:`kvmath.Model.kv_bytes_per_seq`).
``vllm_tokens``
    vLLM's "GPU KV cache size: N tokens" for ``available_kv_bytes`` of KV memory
    (:func:`kvmath.memory.vllm_kv_cache`).
``vllm_concurrency``
    vLLM's "Maximum concurrency for N tokens per request: X x" for the same memory: the figure that tells the
    hybrid misreadings apart where the tokens line cannot (below).

Where a misreading gives kvmath's own figure it cannot be told from the right reading by that figure, and
:class:`ConfigCheck` lists it under ``indistinguishable``, not as an explanation. vLLM's tokens line of v0.10 to
v0.20 is such a figure by construction for every hybrid model: with unified pages a block holds one page of
every layer of a group, ``page = block x`` a full-attention layer's bytes per token, and the groups times the
group size are all the layers (padding layers aside), so ``num_blocks // groups x block`` is ``available /
(layers x`` a full layer's bytes per token``)``, up to whole blocks: the memory over every layer paged as full
attention, which is what "linear layers as full attention", "windows ignored" and "the hybrid manager off" give
too. The concurrency line counts each group's real blocks a request and separates them.
``weight_bytes``
    The weights in memory, in the formats the config stores them in
    (:func:`kvmath.hf_config.weights_from_hf_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layers import LayerSpec
from .results import Result
from .validation import positive, positive_int

#: The quantities :func:`check_config` compares.
QUANTITIES = ("kv_bytes_per_token", "seq_bytes", "vllm_tokens", "vllm_concurrency", "weight_bytes")

#: Relative difference under which two figures are taken as equal: bytes (calculators print rounded
#: figures: "13.7 GB" is 0.4% wide), and vLLM's token counts (exact integers from a memory figure printed to
#: 0.01 GiB: 0.011% of 44.59 GiB).
RTOL = {"bytes": 0.005, "tokens": 1e-4}

#: vLLM prints its concurrency to two decimals ("14.77x"): figures within half of that are taken as equal.
CONCURRENCY_ATOL = 0.005


@dataclass(frozen=True, eq=False)  # a result: compared by its figures
class ConfigCheck(Result):
    """A figure for a config, kvmath's, and the readings of the config that give it.

    Attributes
    ----------
    quantity : str
        One of :data:`QUANTITIES`.
    figure, kvmath : float
        The figure handed in, and kvmath's (bytes, or tokens for ``vllm_tokens``).
    matches : bool
        Whether they agree within :data:`RTOL`.
    readings : dict
        ``{reading: figure}``: the quantity under each way of misreading the config that applies to it.
    explained_by : list of str
        The readings whose figure agrees with the one handed in (empty where kvmath's does, or none does).
    indistinguishable : list of str
        The readings whose figure equals kvmath's own: this quantity cannot tell them from the right reading
        (vLLM's old tokens line for a hybrid model, by construction; compare ``vllm_concurrency`` instead).
    explanation : str
        One sentence: equal, equal under which reading, or by how much it differs from kvmath's.
    terms : dict
        kvmath's figure split by layer kind (bytes; ``seq_bytes`` and ``kv_bytes_per_token``), or the engine's
        terms behind it (``vllm_tokens``: block size, page, groups, blocks, blocks a request).
    """

    quantity: str
    figure: float
    kvmath: float
    matches: bool
    readings: dict
    explained_by: list
    explanation: str
    terms: dict
    indistinguishable: list = ()


# ----- readings: the config as a calculator reads it -------------------------------------------

def _as_full(spec: LayerSpec, n_kv_heads: int, head_dim: int) -> LayerSpec:
    return LayerSpec("full", n_heads=spec.n_heads or n_kv_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
                     params=spec.params)


def _linear_as_full(model, spec):
    """A linear-attention (or Mamba) layer given the K and V of the model's attention layers."""
    if spec.kind != "linear":
        return spec
    return LayerSpec("full", n_heads=model.n_heads, n_kv_heads=model.n_kv_heads, head_dim=model.head_dim)


def _windows_ignored(model, spec):
    """A sliding-window or chunked layer holding every token."""
    if spec.kind not in ("sliding", "chunked"):
        return spec
    return _as_full(spec, spec.n_kv_heads, spec.head_dim)


def _mla_as_full(model, spec):
    """An MLA (or DSA) layer caching every head's K (``qk_nope + qk_rope``) and V (``v_head_dim``), as multi-head
    attention: what an engine without MLA support keeps, ``h x (d_nope + d_rope + d_v)`` per token (and no
    indexer: an engine without MLA has no sparse attention either)."""
    if spec.kind not in ("mla", "dsa"):
        return spec
    width = model.head_dim + model.qk_rope_dim + model.v_head_dim
    if width % 2:
        return None
    return LayerSpec("full", n_heads=spec.n_heads, n_kv_heads=spec.n_heads, head_dim=width // 2)


def _indexer_dropped(model, spec):
    """A DSA layer read as plain MLA: DeepSeek-V3.2 read as DeepSeek-V3, its indexer's keys and top-k left out."""
    if spec.kind != "dsa":
        return spec
    return LayerSpec("mla", n_heads=spec.n_heads, latent_dim=spec.latent_dim, score_dim=spec.score_dim,
                     params=spec.params)


def _shared_counted(model, spec):
    """A layer that reads an earlier layer's cache (kind ``shared``) counted with a cache of its own."""
    if spec.kind != "shared":
        return spec
    return _as_full(spec, spec.n_kv_heads, spec.head_dim)


#: Readings of a config's layers, by the sentence that names them: each maps one layer to the layer as
#: that reading counts it (None: the reading does not apply to this model).
LAYER_READINGS = {
    "linear-attention layers are counted as full attention": _linear_as_full,
    "shared-KV layers are counted with a cache of their own": _shared_counted,
    "sliding windows and chunks are ignored (every layer holds every token)": _windows_ignored,
    "MLA is read as full multi-head attention": _mla_as_full,
    "the DSA indexer's keys are dropped (DeepSeek-V3.2 read as DeepSeek-V3)": _indexer_dropped,
}


def _read_layers(model, reading):
    """The model's layers under ``reading``, or None where it changes nothing or does not apply."""
    specs = model.layer_specs()
    read = tuple(reading(model, s) for s in specs)
    if any(s is None for s in read) or read == specs:
        return None
    return read


def _model_with(model, layers):
    return model.replace(layers=layers, sliding_window=None, n_sliding_layers=None) if layers is not None else None


# ----- the check -------------------------------------------------------------------------------

def _kv_terms(model, layers, quantity, tokens, kv_bytes):
    from .layers import kv_bytes_by_kind, kv_bytes_per_token

    if quantity == "kv_bytes_per_token":
        kinds: dict = {}
        for s in layers:
            kinds.setdefault(s.kind, []).append(s)
        return {k: float(kv_bytes_per_token(tuple(v), kv_bytes)) for k, v in kinds.items()
                if kv_bytes_per_token(tuple(v), kv_bytes)}
    return {k: float(v) for k, v in kv_bytes_by_kind(layers, tokens, kv_bytes).items()}


def check_config(config, quantity: str, figure: float, *, tokens: int | None = None,
                 available_kv_bytes: float | None = None, max_model_len: int = 8192, block_size: int | None = None,
                 tensor_parallel: int = 1, max_num_batched_tokens: int | None = None, kv_dtype: str | None = None,
                 rtol: float | None = None, mamba_cache_mode: str | None = None,
                 tokens_rule: str | None = None, hybrid: bool | None = None, dtype: str | None = None,
                 mamba_ssm_cache_dtype: str | None = None) -> ConfigCheck:
    """Compare a figure for ``config`` with kvmath's and name the readings of the config that give it.

    Parameters
    ----------
    config : str, path or mapping
        A ``config.json``, its directory, or the dict loaded from it.
    quantity : str
        One of :data:`QUANTITIES`.
    figure : float
        The other calculator's or engine's figure (bytes; tokens for ``vllm_tokens``; requests of
        ``max_model_len`` tokens for ``vllm_concurrency``).
    tokens : int
        ``seq_bytes`` only: the sequence's length.
    available_kv_bytes, max_model_len, block_size, tensor_parallel, max_num_batched_tokens :
        ``vllm_tokens`` and ``vllm_concurrency`` only: the engine's KV memory per rank ("Available KV cache
        memory") and settings.
    mamba_cache_mode, tokens_rule, hybrid, dtype, mamba_ssm_cache_dtype : optional
        ``vllm_tokens`` and ``vllm_concurrency`` only: the vLLM rules that differ between releases (how vLLM caches linear layers'
        states, what its tokens line counts, its hybrid KV-cache manager, ``--dtype`` and
        ``--mamba-ssm-cache-dtype``; default :func:`kvmath.memory.vllm_kv_cache`'s).
    kv_dtype : str, optional
        The cached element format (default bf16; for ``vllm_tokens``, vLLM's default ``--kv-cache-dtype
        auto``: the model dtype, or ``fp8_ds_mla`` for DeepSeek-V3.2 under v0.11).
    rtol : float, optional
        Relative difference taken as equal (default :data:`RTOL` for the quantity).

    Examples
    --------
    gpt-oss-20b's layers (12 sliding of 128 tokens + 12 full, 8 KV heads of 64, 2,048 B per token and
    layer): a 131,072-token sequence needs 12 x 2,048 x (128 + 131,072) B, and a calculator that says
    24 x 2,048 x 131,072 has ignored the windows:

    >>> cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...        "head_dim": 64, "num_hidden_layers": 24, "intermediate_size": 2880, "vocab_size": 201088,
    ...        "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
    ...        "layer_types": ["sliding_attention", "full_attention"] * 12}
    >>> r = check_config(cfg, "seq_bytes", 24 * 2048 * 131072, tokens=131072)
    >>> r.kvmath == 12 * 2048 * (128 + 131072), r.explained_by[0]
    (True, 'sliding windows and chunks are ignored (every layer holds every token)')
    """
    from .hf_config import model_from_hf_config, weights_from_hf_config
    from .units import dtype_bytes
    from .validation import choice

    quantity = choice("quantity", quantity, QUANTITIES)
    rules = {k: v for k, v in (("mamba_cache_mode", mamba_cache_mode), ("tokens_rule", tokens_rule),
                               ("hybrid", hybrid), ("dtype", dtype), ("mamba_ssm_cache_dtype", mamba_ssm_cache_dtype))
             if v is not None}
    vllm = quantity in ("vllm_tokens", "vllm_concurrency")
    if rules and not vllm:  # they would change nothing: refused, not ignored
        raise ValueError(f"{next(iter(rules))} applies to vllm_tokens and vllm_concurrency only, got quantity "
                         f"{quantity!r}")
    figure = float(positive("figure", figure))
    rtol = (0.0 if quantity == "vllm_concurrency" else RTOL["tokens" if vllm else "bytes"]) if rtol is None \
        else float(positive("rtol", rtol))
    atol = CONCURRENCY_ATOL if quantity == "vllm_concurrency" else 0.0
    model = model_from_hf_config(config)  # a refusal names the file
    kv_bytes = dtype_bytes(kv_dtype or "bf16", argument="kv_dtype")
    readings: dict = {}
    terms: dict = {}
    if quantity in ("kv_bytes_per_token", "seq_bytes"):
        if quantity == "seq_bytes":
            if tokens is None:
                raise ValueError("tokens (the sequence's length) is needed for seq_bytes")
            tokens = int(positive_int("tokens", tokens))
        def value(m, b=kv_bytes):
            return float(m.kv_bytes_per_token(b) if quantity == "kv_bytes_per_token" else m.kv_bytes_per_seq(tokens, b))
        ours = value(model)
        terms = _kv_terms(model, model.layer_specs(), quantity, tokens, kv_bytes)
        for name, reading in LAYER_READINGS.items():
            read = _model_with(model, _read_layers(model, reading))
            if read is not None:
                readings[name] = value(read)
        everything = _every_layer_full(model)
        if everything is not None:
            readings["every layer is full attention (2 x layers x KV heads x head_dim x bytes)"] = value(everything)
        for other in (1, 4):
            if other != kv_bytes:
                readings[f"the cache is stored in {other} byte(s) per element instead of {kv_bytes:g}"] = \
                    value(model, other)
    elif vllm:
        from .memory import vllm_kv_cache

        if available_kv_bytes is None:
            raise ValueError(f"available_kv_bytes (vLLM's 'Available KV cache memory') is needed for {quantity}")
        avail = float(positive("available_kv_bytes", available_kv_bytes))
        kw = dict(block_size=block_size, kv_dtype=kv_dtype or "auto", tensor_parallel=tensor_parallel,
                  max_num_batched_tokens=max_num_batched_tokens, **rules)

        def engine(m, **more):
            return vllm_kv_cache(m, avail, max_model_len, **{**kw, **more})

        def value(m, **more):
            kv = engine(m, **more)
            return float(kv.tokens if quantity == "vllm_tokens" else kv.max_concurrency)
        kv = engine(model)
        ours = value(model)
        terms = {f"block size (tokens, {kv.block_size})": kv.block_size, "page per layer and block (B)": kv.page_bytes,
                 f"groups ({', '.join(kv.group_kinds)})": kv.num_groups, "layers per group": kv.group_size,
                 "blocks": kv.num_blocks, "blocks a max_model_len request takes": kv.blocks_per_request}
        for name, reading in LAYER_READINGS.items():
            read = _model_with(model, _read_layers(model, reading))
            if read is not None:
                readings[name] = _or_refused(value, read)
        readings["the hybrid KV-cache manager is off (--disable-hybrid-kv-cache-manager)"] = \
            _or_refused(value, model, hybrid=False)
        per_token = model.kv_bytes_per_token(kv_bytes) / tensor_parallel
        tokens = float(np.floor(avail / per_token)) if per_token else None
        readings["tokens are the memory over the bytes per token (no pages, no groups)"] = \
            tokens if tokens is None or quantity == "vllm_tokens" else tokens / max_model_len
        readings = {k: v for k, v in readings.items() if v is not None}
    else:
        stored = weights_from_hf_config(config)
        ours = float(model.weight_bytes_resident(stored))
        readings = weight_readings(model, stored)
    matches = _close(figure, ours, rtol, atol)
    same = [name for name, v in readings.items() if _close(ours, v, rtol, atol)]
    explained = [] if matches else [name for name, v in readings.items() if _close(figure, v, rtol, atol)]
    return ConfigCheck(quantity=quantity, figure=figure, kvmath=ours, matches=matches, readings=readings,
                       explained_by=explained, explanation=_explain(quantity, figure, ours, matches, explained, same),
                       terms=terms, indistinguishable=same)


def weight_readings(model, stored) -> dict:
    """``{reading: bytes}``: the weights in memory under each way of ignoring how the config stores them
    (``stored``, :func:`kvmath.hf_config.weights_from_hf_config`'s formats).

    Examples
    --------
    >>> from kvmath import Model
    >>> r = weight_readings(Model.preset("llama-3.1-8b"), "bf16")
    >>> r == {"every weight is sized in fp32": 2 * Model.preset("llama-3.1-8b").weight_bytes_resident("bf16")}
    True
    """
    readings = {}
    base = stored if isinstance(stored, str) else stored["default"]
    if stored != base:
        readings[f"every weight is sized in the config's torch_dtype ({base}), not as stored"] = \
            float(model.weight_bytes_resident(base))
    for fmt in ("fp32", "bf16"):
        if fmt not in (base, stored):
            readings[f"every weight is sized in {fmt}"] = float(model.weight_bytes_resident(fmt))
    return readings


def _every_layer_full(model):
    """The textbook formula's model: every layer a full-attention layer with the model-wide KV heads."""
    full = LayerSpec("full", n_heads=model.n_heads, n_kv_heads=model.n_kv_heads, head_dim=model.head_dim)
    if model.attention == "mla" or all(s.kind == "full" for s in model.layer_specs()):
        return None
    return _model_with(model, (full,) * model.n_layers)


def _or_refused(value, model, **more):
    """The reading's vLLM figure, or None where vLLM would refuse to start under it."""
    try:
        return value(model, **more)
    except ValueError:
        return None


def _close(a: float, b: float | None, rtol: float, atol: float = 0.0) -> bool:
    return b is not None and abs(a - b) <= max(rtol * max(abs(a), abs(b)), atol + 1e-12)


def shown(quantity: str, value: float) -> str:
    """A figure of ``quantity`` as the check prints it, with its unit ("973,760 tokens", "14.77x", "24,576 B")."""
    if quantity == "vllm_concurrency":
        return f"{value:,.2f}x"
    return f"{value:,.0f} {'tokens' if quantity == 'vllm_tokens' else 'B'}"


def _explain(quantity, figure, ours, matches, explained, same=()) -> str:
    if matches:
        text = f"your figure equals kvmath's ({shown(quantity, ours)})"
        if same:
            other = " or vllm_concurrency" if quantity == "vllm_tokens" else ""
            text += (f"; so does the config when {'; or when '.join(same)}: this figure cannot tell those readings "
                     f"from the right one (compare kv_bytes_per_token, seq_bytes{other})")
        return text
    if explained:
        return (f"kvmath gives {shown(quantity, ours)}; your {shown(quantity, figure)} is what the config gives when "
                + "; or when ".join(explained))
    where = "the engine's terms above" if quantity.startswith("vllm") else "the terms by layer kind above"
    return (f"kvmath gives {shown(quantity, ours)}; yours is {100 * (figure / ours - 1):+.1f}%, which no single "
            f"reading explains: compare {where}")


def readings_for(model) -> list[str]:
    """The layer readings that change ``model``'s figures (what a conformance file lists for it)."""
    return [name for name, reading in LAYER_READINGS.items() if _read_layers(model, reading) is not None]
