"""Model presets: the architecture numbers that decide weights and KV cache.

The numbers live in ``kvmath/data/models.csv``, one row per model with its
source (usually the model's published ``config.json``). Parameter counts
are computed from the configuration, counting the matrices of attention,
MLP (or experts), embeddings and two norms per layer plus a final one;
biases and any extra norms are left out (well under 0.1% for every preset).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Union

import numpy as np

from . import layers as _layers
from .layers import LayerSpec
from .moe import ROUTINGS, experts_touched
from .presets import PresetTable, lookup, optional_int
from .units import dtype_bytes
from .validation import ArrayLike, as_scalar, checked, choice, finite, one_int, plain, positive, positive_int, whole

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")

#: Tensor groups of a model's weights. ``lm_head`` is the output projection
#: (the shared table when embeddings are tied), ``embedding`` the input
#: table, ``positions`` a learned position table.
WEIGHT_GROUPS = ("attention", "mlp", "experts", "shared_experts", "router", "lm_head", "embedding", "positions", "norms")

#: How weights are stored: one format name (``"bf16"``, ``"q4_0"``), bytes
#: per weight, or a mapping from group to either with an optional
#: ``"default"`` (e.g. ``{"default": "fp8", "lm_head": "bf16"}``).
Precision = Union[str, float, Mapping[str, Union[str, float]]]


def group_formats(weights: Precision, tied_embeddings: bool = False) -> dict[str, Union[str, float]]:
    """The format (name, or bytes per weight) of every group under ``weights``.

    With ``tied_embeddings`` the input table *is* the LM head, stored once:
    it takes the ``lm_head`` format in both roles.

    Examples
    --------
    >>> group_formats({"default": "q4_0", "lm_head": "q6_k"}, tied_embeddings=True)["embedding"]
    'q6_k'
    """
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(WEIGHT_GROUPS) - {"default"}
        if unknown:
            raise ValueError(f"weights has unknown group(s) {sorted(unknown)}; groups are {WEIGHT_GROUPS} and 'default'")
        missing = [g for g in WEIGHT_GROUPS if g not in weights]
        if missing and "default" not in weights:
            raise ValueError(f"weights gives no format for {missing}: add them or a 'default'")
        formats = {g: weights.get(g, weights.get("default")) for g in WEIGHT_GROUPS}
    else:
        formats = dict.fromkeys(WEIGHT_GROUPS, weights)
    if tied_embeddings:
        formats["embedding"] = formats["lm_head"]
    return formats


def _group_bytes(weights: Precision, tied_embeddings: bool) -> dict[str, float]:
    """Bytes per weight of every group under ``weights``."""
    def one(value, where: str) -> float:
        if isinstance(value, str):
            return dtype_bytes(value, argument=where)
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            raise ValueError(f"{where} must be a format name or bytes per weight, got {value!r}")
        return float(positive(where, value))

    where = "weights" if not isinstance(weights, Mapping) else "weights[{!r}]"
    return {g: one(f, where.format(g)) for g, f in group_formats(weights, tied_embeddings).items()}


def _kept(method):
    """A no-argument method of the frozen :class:`Model` computed once per instance (its fields never change),
    kept in the instance's ``__dict__`` (not a field: not compared or shown); a dict result is returned as a copy."""
    key = "_kept_" + method.__name__

    def call(self):
        value = self.__dict__.get(key)
        if value is None:
            value = method(self)
            object.__setattr__(self, key, value)
        return dict(value) if isinstance(value, dict) else value

    call.__name__, call.__qualname__, call.__doc__ = method.__name__, method.__qualname__, method.__doc__
    call.__wrapped__ = method
    return call


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape (a description, not a bound: a :class:`kvmath.Deployment` of it gives
    lower bounds; its byte and FLOP counts are exact for the shape given).

    Attributes
    ----------
    name : str
        Preset name, e.g. ``"llama-2-70b"``.
    n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab : int
        L, d, h, h_kv, d_h, the MLP width and the vocabulary size.
    tied_embeddings : bool
        Whether the LM head reuses the input embedding matrix.
    mlp_matrices : int
        3 for gated MLPs (SwiGLU, GeGLU), 2 for plain ones (GELU).
    attention : str
        ``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``.
    n_positions : int
        Rows of a learned position embedding (0 for rotary).
    sliding_window, n_sliding_layers : int or None
        Window (tokens) of the layers that attend locally, and how many do.
    n_experts, n_shared_experts, top_k, d_ff_expert, n_dense_layers : int or None
        Mixture of experts: routed experts per layer, always-on shared
        experts, experts each token uses, their width, and how many leading
        layers are dense instead.
    q_lora_rank, kv_lora_rank, qk_rope_dim, v_head_dim : int or None
        Multi-head latent attention (MLA): the compressed widths. The cache
        holds ``kv_lora_rank + qk_rope_dim`` elements per token per layer.
    published_params, published_active_params : float or None
        The totals the model's authors state, to check ours against.
    supported_context : int or None
        The context length the model's authors document as supported or
        trained (not a config's ``max_position_embeddings``, which is a hint,
        nor ``n_positions``). Longer contexts still compute.
    context_source : str
        Where ``supported_context`` comes from.
    family : str
        Model family, e.g. ``"llama"``, ``"qwen"`` (for filtering presets).
    layers : tuple of LayerSpec or None
        Attention of each layer (:mod:`kvmath.layers`) where layers differ
        in kind, KV heads or head_dim (a model read from a ``config.json``).
        None: every layer is alike, except the ``n_sliding_layers`` that use
        ``sliding_window``; :meth:`layer_specs` derives them.

    Examples
    --------
    >>> m = get_model("codellama-7b")
    >>> m.param_count()
    6738546688
    >>> m.kv_bytes_per_token()
    524288.0
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    tied_embeddings: bool = False
    mlp_matrices: int = 3
    attention: str = "mha"
    n_positions: int = 0
    sliding_window: int | None = None
    n_sliding_layers: int | None = None
    n_experts: int | None = None
    n_shared_experts: int | None = None
    top_k: int | None = None
    d_ff_expert: int | None = None
    n_dense_layers: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_dim: int | None = None
    v_head_dim: int | None = None
    published_params: float | None = None
    published_active_params: float | None = None
    supported_context: int | None = None
    context_source: str = ""
    display_name: str = ""
    source: str = ""
    note: str = ""
    family: str = ""
    layers: tuple[LayerSpec, ...] | None = None

    def __post_init__(self) -> None:
        # Every field is checked and normalised here, so replace() and the
        # constructor validate alike: counts become Python ints (numpy int32
        # fields would wrap in param_count), names are lower-cased.
        def put(attr, value):
            object.__setattr__(self, attr, value)

        for attr in ("name", "display_name", "source", "note", "context_source", "family"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"{attr} must be a string, got {getattr(self, attr)!r}")
        if not self.name.strip():
            raise ValueError("name must not be empty")
        for attr in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab"):
            put(attr, whole(attr, getattr(self, attr)))
        put("mlp_matrices", whole("mlp_matrices", self.mlp_matrices))
        put("n_positions", whole("n_positions", self.n_positions, minimum=0))
        for attr, minimum in _OPTIONAL_MINIMUM.items():
            value = getattr(self, attr)
            if value is not None:
                put(attr, whole(attr, value, minimum))
        for attr in ("published_params", "published_active_params"):
            if getattr(self, attr) is not None:
                put(attr, positive(attr, as_scalar(attr, getattr(self, attr))))
        if not isinstance(self.tied_embeddings, (bool, np.bool_)):
            raise ValueError(f"tied_embeddings must be True or False, got {self.tied_embeddings!r}")
        put("tied_embeddings", bool(self.tied_embeddings))
        put("attention", choice("attention", self.attention, ATTENTION_KINDS))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})"
            )
        if self.mlp_matrices not in (2, 3):
            raise ValueError(f"mlp_matrices must be 2 or 3, got {self.mlp_matrices!r}")
        mla_fields = ("kv_lora_rank", "qk_rope_dim", "v_head_dim")
        if self.attention == "mla" and any(getattr(self, f) is None for f in mla_fields):
            raise ValueError("an MLA model needs kv_lora_rank, qk_rope_dim and v_head_dim")
        if self.attention != "mla":
            for attr in mla_fields + ("q_lora_rank",):
                if getattr(self, attr) is not None:
                    raise ValueError(f"{attr} is for MLA models only; attention is {self.attention!r}")
        moe_fields = ("n_shared_experts", "top_k", "d_ff_expert", "n_dense_layers")
        if self.n_experts is None:
            for attr in moe_fields:
                if getattr(self, attr) is not None:
                    raise ValueError(f"{attr} is for mixture-of-experts models only; set n_experts")
        else:
            if self.top_k is None or self.d_ff_expert is None:
                raise ValueError("a mixture-of-experts model needs top_k and d_ff_expert")
            if self.top_k > self.n_experts:
                raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
            if self.n_dense_layers is not None and self.n_dense_layers >= self.n_layers:
                raise ValueError(
                    f"n_dense_layers ({self.n_dense_layers}) must be < n_layers ({self.n_layers})"
                )
        if (self.sliding_window is None) != (self.n_sliding_layers is None):
            raise ValueError("sliding_window and n_sliding_layers go together")
        if self.n_sliding_layers is not None and not 0 < self.n_sliding_layers <= self.n_layers:
            raise ValueError(f"n_sliding_layers must be in 1..n_layers, got {self.n_sliding_layers}")
        if self.layers is not None:
            if len(self.layers) != self.n_layers or not all(isinstance(x, LayerSpec) for x in self.layers):
                raise ValueError(f"layers must be {self.n_layers} LayerSpec (one per layer), got {len(self.layers)} items")
            if self.sliding_window is not None:
                raise ValueError("give windows either in layers or in sliding_window/n_sliding_layers, not both")

    # ----- shape -------------------------------------------------------------

    @property
    def group_size(self) -> int:
        """g = h / h_kv: query heads that share one KV head (1 for MHA, h for MQA)."""
        return self.n_heads // self.n_kv_heads

    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """Every layer's attention (:class:`kvmath.layers.LayerSpec`), derived from the fields where ``layers`` is None.

        Examples
        --------
        >>> specs = get_model("gemma-2-9b").layer_specs()
        >>> len(specs), sorted({(s.kind, s.window) for s in specs}, key=str)
        (42, [('full', None), ('sliding', 4096)])
        """
        if self.layers is not None:
            return self.layers
        cached = self.__dict__.get("_specs")
        if cached is None:  # a frozen model's layers never change: built once (not a field: not compared or shown)
            cached = self._derived_layer_specs()
            object.__setattr__(self, "_specs", cached)
        return cached

    @_kept
    def cache_terms(self) -> _layers.CacheTerms:
        """The cache's and attention's terms of every layer, grouped by kind (:func:`kvmath.layers.cache_terms`)."""
        return _layers.cache_terms(self.layer_specs())

    def _derived_layer_specs(self) -> tuple[LayerSpec, ...]:
        params = self._attention_params_per_layer()
        if self.attention == "mla":
            spec = LayerSpec("mla", n_heads=self.n_heads, latent_dim=self.kv_lora_rank + self.qk_rope_dim,
                             score_dim=self.kv_lora_rank, params=params)
            return (spec,) * self.n_layers
        full = LayerSpec("full", self.n_heads, self.n_kv_heads, self.head_dim, params=params)
        if self.sliding_window is None:
            return (full,) * self.n_layers
        local = LayerSpec("sliding", self.n_heads, self.n_kv_heads, self.head_dim, window=self.sliding_window,
                          params=params)
        return (local,) * self.n_sliding_layers + (full,) * (self.n_layers - self.n_sliding_layers)

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Kinds of attention layer the model has (``"full"``, ``"sliding"``, ``"linear"``, ...)."""
        return _layers.kinds(self.layer_specs())

    def with_kv_heads(self, n_kv_heads: int) -> "Model":
        """The same model with ``n_kv_heads`` KV heads (MHA, GQA or MQA by the count).

        Only the K and V projections shrink; the parameter count follows.

        Examples
        --------
        >>> mqa = get_model("codellama-7b").with_kv_heads(1)
        >>> mqa.name, mqa.attention, mqa.kv_bytes_per_token()
        ('codellama-7b-kv1', 'mqa', 16384.0)
        """
        if self.attention == "mla":
            raise ValueError(f"{self.name} uses MLA; its cache has no KV heads to change")
        if self.layers is not None:
            raise ValueError(f"{self.name} lists its layers; change n_kv_heads in each LayerSpec instead")
        n_kv_heads = one_int("n_kv_heads", n_kv_heads)
        kind = "mha" if n_kv_heads == self.n_heads else "mqa" if n_kv_heads == 1 else "gqa"
        if n_kv_heads == self.n_kv_heads:
            return self
        # A derived model is not the preset: say so in its name and note.
        return dataclasses.replace(
            self,
            n_kv_heads=n_kv_heads,
            attention=kind,
            name=f"{self.name}-kv{n_kv_heads}",
            display_name=f"{self.display_name or self.name} with {n_kv_heads} KV heads",
            note=f"derived from the {self.name} preset by changing n_kv_heads only",
            published_params=None,
            published_active_params=None,
        )

    def with_chunked_local_layers(self) -> "Model":
        """The same model with its ``n_sliding_layers`` local layers attending within chunks of
        ``sliding_window`` tokens instead of over a sliding window (Llama 4's local layers).

        A chunked layer holds at most one chunk, as a sliding one holds at most
        its window, so the cache a sequence needs is the same; the kind differs
        where an engine pages the two differently (vLLM groups chunked local
        layers apart). The layers are listed (``layers``), local ones first.

        Examples
        --------
        >>> get_model("gemma-2-9b").with_chunked_local_layers().layer_kinds
        ('full', 'chunked')
        """
        if self.sliding_window is None:
            raise ValueError(f"{self.name} has no local layers (sliding_window) to make chunked")
        specs = tuple(dataclasses.replace(s, kind="chunked") if s.kind == "sliding" else s for s in self.layer_specs())
        return dataclasses.replace(self, sliding_window=None, n_sliding_layers=None, layers=specs)

    def with_indexer(self, index_n_heads: int, index_head_dim: int, index_topk: int) -> "Model":
        """The same MLA model with DeepSeek Sparse Attention's lightning indexer on every layer (DeepSeek-V3.2).

        Each layer becomes a ``dsa`` layer (:mod:`kvmath.layers`). The
        indexer's weights (DeepSeek-V3.2-Exp inference/model.py, ``Indexer``):
        ``wq_b`` (``q_lora_rank -> index_n_heads x index_head_dim``), ``wk``
        (``d -> index_head_dim``) and ``weights_proj`` (``d -> index_n_heads``);
        its norm left out. Its cache: ``index_head_dim`` fp8 bytes and one
        fp32 scale per :data:`DSA_SCALE_BLOCK` per token, in every layer.
        Its FLOPs per cached token: ``2 H_I d_I`` for the scores and ``2 H_I``
        for their weighted sum. Attention then reads ``index_topk`` tokens' latents.

        Examples
        --------
        >>> m = get_model("deepseek-v3").with_indexer(64, 128, 2048)
        >>> m.kv_bytes_per_token() - get_model("deepseek-v3").kv_bytes_per_token()  # 61 x (128 + 4) B
        8052.0
        """
        if self.attention != "mla" or self.q_lora_rank is None:
            raise ValueError(f"{self.name}: the DSA indexer needs an MLA model with a q_lora_rank "
                             "(its queries come from the compressed query)")
        heads, width, topk = (one_int(n, v) for n, v in (("index_n_heads", index_n_heads),
                                                          ("index_head_dim", index_head_dim), ("index_topk", index_topk)))
        indexer = self.q_lora_rank * heads * width + self.d_model * width + self.d_model * heads
        spec = LayerSpec("dsa", n_heads=self.n_heads, latent_dim=self.kv_lora_rank + self.qk_rope_dim,
                         score_dim=self.kv_lora_rank, topk=topk,
                         index_bytes=float(width + 4 * -(-width // DSA_SCALE_BLOCK)),
                         index_flops=float(2 * heads * width + 2 * heads),
                         params=self._attention_params_per_layer() + indexer)
        return dataclasses.replace(self, layers=(spec,) * self.n_layers)

    @classmethod
    def from_hf_config(cls, config) -> "Model":
        """The model a Hugging Face ``config.json`` describes (a path, its directory, or a dict).

        See :func:`kvmath.hf_config.model_from_hf_config` for the families read and the rules.
        """
        from .hf_config import model_from_hf_config

        return model_from_hf_config(config)

    @staticmethod
    def preset(name: str) -> "Model":
        """The model preset called ``name`` (case-insensitive; an unknown name suggests the closest).

        Examples
        --------
        >>> Model.preset("llama-3-8b").name
        'llama-3-8b'
        """
        return get_model(name)

    @staticmethod
    def presets() -> list[str]:
        """Names of every model preset, in table order (each row cites its source in ``kvmath/data``)."""
        return model_names()

    def replace(self, **changes) -> "Model":
        """A copy with some fields changed (validated like a preset)."""
        return dataclasses.replace(self, **changes)

    # ----- parameters --------------------------------------------------------

    def _attention_params_per_layer(self) -> int:
        d, h, d_h = self.d_model, self.n_heads, self.head_dim
        if self.attention == "mla":
            qk = self.head_dim + self.qk_rope_dim  # head_dim is the non-rotary part
            q = d * self.q_lora_rank + self.q_lora_rank * h * qk if self.q_lora_rank else d * h * qk
            kv_down = d * (self.kv_lora_rank + self.qk_rope_dim)
            kv_up = self.kv_lora_rank * h * (self.head_dim + self.v_head_dim)
            return q + kv_down + kv_up + h * self.v_head_dim * d
        return d * h * d_h + 2 * d * self.n_kv_heads * d_h + h * d_h * d

    def _attention_params(self) -> int:
        if self.layers is None:
            return self.n_layers * self._attention_params_per_layer()
        return sum(spec.params for spec in self.layers)

    def _mlp_params(self, width: int) -> int:
        return self.mlp_matrices * self.d_model * width

    def _embedding_params(self) -> int:
        tables = 1 if self.tied_embeddings else 2
        return tables * self.vocab * self.d_model + self.n_positions * self.d_model

    def _layer_split(self) -> tuple[int, int]:
        """(dense layers, MoE layers)."""
        if not self.n_experts:
            return self.n_layers, 0
        dense = self.n_dense_layers or 0
        return dense, self.n_layers - dense

    def _params(self, experts_per_token: int | None) -> int:
        dense_layers, moe_layers = self._layer_split()
        total = self._attention_params()
        total += dense_layers * self._mlp_params(self.d_ff)
        if moe_layers:
            experts = (experts_per_token or self.n_experts) + (self.n_shared_experts or 0)
            router = self.d_model * self.n_experts
            total += moe_layers * (experts * self._mlp_params(self.d_ff_expert) + router)
        norms = (2 * self.n_layers + 1) * self.d_model
        return total + norms + self._embedding_params()

    def param_count(self) -> int:
        """Total parameters P computed from the configuration (a count, not bytes)."""
        return self._params(experts_per_token=None)

    @_kept
    def param_groups(self) -> dict[str, int]:
        """Parameters resident in memory, by tensor group (see :data:`WEIGHT_GROUPS`); they sum to P.

        ``experts`` counts every routed expert of every MoE layer; with tied
        embeddings the one table is counted under ``embedding`` and
        ``lm_head`` is 0.

        Examples
        --------
        >>> g = get_model("llama-3-8b").param_groups()
        >>> g["embedding"], g["lm_head"], sum(g.values()) == get_model("llama-3-8b").param_count()
        (525336576, 525336576, True)
        """
        dense_layers, moe_layers = self._layer_split()
        expert = self._mlp_params(self.d_ff_expert) if moe_layers else 0
        table = self.vocab * self.d_model
        return {
            "attention": self._attention_params(),
            "mlp": dense_layers * self._mlp_params(self.d_ff),
            "experts": moe_layers * (self.n_experts or 0) * expert,
            "shared_experts": moe_layers * (self.n_shared_experts or 0) * expert,
            "router": moe_layers * self.d_model * (self.n_experts or 0),
            "lm_head": 0 if self.tied_embeddings else table,
            "embedding": table,
            "positions": self.n_positions * self.d_model,
            "norms": (2 * self.n_layers + 1) * self.d_model,
        }

    def matmul_params_by_group(self) -> dict[str, int]:
        """Parameters each token multiplies by, by group: 2x each is that group's FLOPs per token.

        The active parameters less what costs no FLOPs: the input embedding
        and position tables are only looked up, and norms scale elementwise.
        The LM head counts (tied or not), routed experts count ``top_k``.
        """
        g = self.param_groups()
        return {
            "attention": g["attention"],
            "mlp": g["mlp"],
            "experts": g["experts"] * (self.top_k or 0) // (self.n_experts or 1),
            "shared_experts": g["shared_experts"],
            "router": g["router"],
            "lm_head": self.vocab * self.d_model,
        }

    @_kept
    def matmul_params_per_token(self) -> int:
        """Parameters each token multiplies by: the sum of :meth:`matmul_params_by_group`.

        Examples
        --------
        >>> m = get_model("llama-3-8b")
        >>> m.matmul_params_per_token() == m.param_count() - m.param_groups()["embedding"] - m.param_groups()["norms"]
        True
        """
        return sum(self.matmul_params_by_group().values())

    def matmul_params_resident(self) -> int:
        """Parameters held in matrices a step multiplies by: :meth:`matmul_params_per_token` with every routed expert.

        What a step that touches every expert reads (the looked-up tables and
        the norms aside), against the :meth:`matmul_params_per_token` each token
        multiplies by: their ratio is the MoE critical batch's limit over the
        dense figure (:func:`kvmath.formulas.saturated_critical_batch`).

        Examples
        --------
        >>> m = get_model("mixtral-8x7b")  # the input table (131M) is only looked up
        >>> m.param_count() - m.matmul_params_resident() == m.param_groups()["embedding"] + m.param_groups()["norms"]
        True
        """
        by_group = self.matmul_params_by_group()
        return sum(by_group.values()) - by_group["experts"] + self.param_groups()["experts"]

    @checked
    def weight_bytes_resident(self, weights: Precision = "bf16") -> float:
        """Bytes the weights occupy in memory: every group, every expert.

        Examples
        --------
        >>> get_model("llama-2-7b").weight_bytes_resident("q4_0") / 1e9  # 4.5 bits per weight
        3.79...
        """
        return sum(self.weight_bytes_resident_by_group(weights).values())

    @checked
    def weight_bytes_resident_by_group(self, weights: Precision = "bf16") -> dict[str, float]:
        """Bytes each tensor group (:data:`WEIGHT_GROUPS`) occupies in memory, every expert.

        Examples
        --------
        >>> r = get_model("mixtral-8x7b").weight_bytes_resident_by_group()
        >>> round(r["experts"] / 1e9, 2), round(r["attention"] / 1e9, 2)
        (90.19, 2.68)
        """
        per_weight = _group_bytes(weights, self.tied_embeddings)
        return {g: n * per_weight[g] for g, n in self.param_groups().items()}

    @checked
    def weight_bytes_read_by_group(
        self, batch: ArrayLike = 1, weights: Precision = "bf16", routing: str = "floor", tokens_per_seq: ArrayLike = 1
    ) -> dict[str, ArrayLike]:
        """Bytes of weights one decode step reads, by tensor group.

        A step reads every weight matrix once, except that the input
        embedding (and a learned position table) is only looked up: one row
        per token, ``T = batch * tokens_per_seq`` rows. A tied LM head reads
        the shared table once, which holds those rows too. MoE layers read
        the routed experts the batch touches (:func:`kvmath.formulas.experts_touched`
        with ``routing``: ``"floor"`` for a strict lower bound, ``"uniform"``
        for the estimate, ``"ceiling"``), plus shared experts and the router.

        ``batch`` and ``tokens_per_seq`` may be real-valued for smooth sweeps.

        Examples
        --------
        >>> r = get_model("llama-3-8b").weight_bytes_read_by_group(batch=1)
        >>> r["embedding"], r["lm_head"]  # one row of 4096 bf16, and the whole head
        (8192.0, 1050673152.0)
        """
        tokens = finite(positive("batch", batch) * positive("tokens_per_seq", tokens_per_seq), nonzero=True)
        routing = choice("routing", routing, ROUTINGS)  # checked on dense models too, where it is unused
        per_weight = _group_bytes(weights, self.tied_embeddings)
        g = self.param_groups()
        read = {name: float(g[name] * per_weight[name])
                for name in ("attention", "mlp", "shared_experts", "router", "norms")}
        if self.n_experts:
            per_expert = g["experts"] / self.n_experts
            read["experts"] = plain(experts_touched(self.n_experts, self.top_k, tokens, routing) * per_expert
                                    * per_weight["experts"])
        else:
            read["experts"] = 0.0
        table = self.vocab * self.d_model
        read["lm_head"] = float(table * per_weight["lm_head"])
        rows = 0 if self.tied_embeddings else np.minimum(tokens, self.vocab)
        read["embedding"] = plain(rows * self.d_model * per_weight["embedding"])
        read["positions"] = plain(np.minimum(tokens, self.n_positions) * self.d_model * per_weight["positions"])
        return {name: read[name] for name in WEIGHT_GROUPS}

    @checked
    def weight_bytes_read(
        self, batch: ArrayLike = 1, weights: Precision = "bf16", routing: str = "floor", tokens_per_seq: ArrayLike = 1
    ) -> ArrayLike:
        """Bytes of weights one decode step reads: the sum of :meth:`weight_bytes_read_by_group`.

        With ``routing="floor"`` (the default) this is what a strict lower
        bound charges; it never exceeds :meth:`weight_bytes_resident`. With
        tied embeddings the one table is stored, and read, in the ``lm_head``
        format.

        Examples
        --------
        >>> m = get_model("mixtral-8x7b")
        >>> round(m.weight_bytes_read(1) / 1e9, 2), round(m.weight_bytes_resident() / 1e9, 2)
        (25.5, 93.41)
        """
        by_group = self.weight_bytes_read_by_group(batch, weights, routing, tokens_per_seq)
        return plain(sum(by_group.values()))

    @checked
    def attention_flops_per_token(self, context: ArrayLike) -> ArrayLike:
        """FLOPs one new token spends attending to a cache of ``context`` tokens, all layers.

        MHA, GQA and MQA: ``4 * h * d_h`` per cached token per layer (scores
        and the weighted sum of values, over query heads: sharing KV heads
        saves bytes, not FLOPs). A sliding-window layer attends to at most
        ``sliding_window`` tokens. MLA in its absorbed form scores each query
        head against the latent plus the rotary part and sums values over the
        latent: ``2 * h * (r + r_rope) + 2 * h * r`` per cached token per layer.
        Each layer counts by its own kind (:func:`kvmath.layers.attention_flops_per_token`):
        a linear-attention layer spends a fixed count per token.

        ``context`` may be real-valued for smooth sweeps.

        Examples
        --------
        >>> get_model("llama-2-7b").attention_flops_per_token(4096) / 1e9
        2.147483648
        >>> m = get_model("deepseek-v3")  # about 242 FLOPs per byte of bf16 latent
        >>> round(m.attention_flops_per_token(1) / m.kv_bytes_per_token(2), 1)
        241.8
        """
        return _layers.attention_flops_per_token(self.layer_specs(), positive("context", context))

    def active_param_count(self) -> int:
        """Parameters each token uses: all of them for a dense model, top-k experts for MoE."""
        return self._params(experts_per_token=self.top_k)

    # ----- KV cache ----------------------------------------------------------

    def kv_elems_per_token_per_layer(self) -> int:
        """Elements one token adds to one layer's cache (K and V, or the MLA latent), from the model-wide fields."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.n_kv_heads * self.head_dim

    @checked
    def kv_bytes_per_token(self, bytes_per_elem: ArrayLike = 2, context: ArrayLike | None = None):
        """KV bytes per token, in bytes.

        Without ``context``: what an engine reserves per token, i.e. what one
        token adds to the cache of every attention layer (windows not freed,
        linear layers' fixed states left out: they are per sequence). With
        it: what one sequence needs, averaged per token,
        ``kv_bytes_per_seq(context) / context``, which is less where
        sliding-window layers keep only their last ``sliding_window`` tokens.

        Examples
        --------
        >>> get_model("deepseek-v3").kv_bytes_per_token()
        70272.0
        >>> get_model("mistral-7b-v0.1").kv_bytes_per_token(context=8192)
        65536.0
        """
        if context is None:
            if self.layers is not None:
                return _layers.kv_bytes_per_token(self.layers, positive("bytes_per_elem", bytes_per_elem))
            per_layer = self.kv_elems_per_token_per_layer() * positive("bytes_per_elem", bytes_per_elem)
            return self.n_layers * per_layer
        return self.kv_bytes_per_seq(context, bytes_per_elem) / positive_int("context", context)

    @checked
    def kv_bytes_per_seq(self, context: ArrayLike, bytes_per_elem: ArrayLike = 2) -> ArrayLike:
        """Bytes of cache one sequence of ``context`` tokens needs: each layer's held tokens
        (windows applied) plus the fixed state of any linear-attention layer.

        Examples
        --------
        >>> get_model("mistral-7b-v0.1").kv_bytes_per_seq(8192) == 4096 * 131072
        True
        """
        return _layers.kv_bytes_per_seq(self.layer_specs(), context, positive("bytes_per_elem", bytes_per_elem))

    @checked
    def kv_bytes_by_kind(self, context: ArrayLike, bytes_per_elem: ArrayLike = 2) -> dict:
        """:meth:`kv_bytes_per_seq` split by layer kind (``"full"``, ``"sliding"``, ``"linear"``, ...).

        Examples
        --------
        >>> get_model("gemma-2-9b").kv_bytes_by_kind(32768)
        {'sliding': 704643072.0, 'full': 5637144576.0}
        """
        return _layers.kv_bytes_by_kind(self.layer_specs(), context, positive("bytes_per_elem", bytes_per_elem))


#: DeepSeek-V3.2's indexer keys: fp8 (one byte each) with one fp32 scale per block of this many
#: (DeepSeek-V3.2-Exp inference/model.py, ``Indexer``: ``k_cache`` float8_e4m3fn, ``k_scale_cache``
#: float32 of ``head_dim // block_size``, ``block_size = 128``).
DSA_SCALE_BLOCK = 128

_INT_FIELDS = (
    "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab", "mlp_matrices",
    "n_positions",
)
#: Smallest value of each optional count (None means the feature is absent).
_OPTIONAL_MINIMUM = {
    "sliding_window": 1, "n_sliding_layers": 1, "n_experts": 1, "n_shared_experts": 0, "top_k": 1,
    "d_ff_expert": 1, "n_dense_layers": 0, "q_lora_rank": 1, "kv_lora_rank": 1, "qk_rope_dim": 1,
    "v_head_dim": 1, "supported_context": 1,
}
#: The optional counts read from a preset row as they are (supported_context has a reader of its own).
_OPTIONAL_INT_FIELDS = tuple(k for k in _OPTIONAL_MINIMUM if k != "supported_context")


def _model_from_row(row: dict[str, str]) -> Model:
    """A preset from its row. Two columns say what the model-wide fields cannot: ``local_kind``
    (``chunked``: the ``n_sliding_layers`` local layers attend within chunks of ``sliding_window``
    tokens, Llama 4; empty: sliding windows) and ``index_n_heads`` / ``index_head_dim`` /
    ``index_topk`` (an MLA model with DeepSeek Sparse Attention's indexer, DeepSeek-V3.2)."""
    fields = {k: int(row[k]) for k in _INT_FIELDS}
    fields.update({k: optional_int(row[k]) for k in _OPTIONAL_INT_FIELDS})
    published_active = row["published_active_params"].strip()
    model = Model(
        supported_context=optional_int(row["supported_context"]),
        context_source=row["context_source"],
        name=row["name"],
        tied_embeddings=row["tied_embeddings"] == "true",
        attention=row["attention"],
        published_params=float(row["published_params"]),
        published_active_params=float(published_active) if published_active else None,
        display_name=row["display_name"],
        source=row["source"],
        note=row["note"],
        family=row["family"],
        **fields,
    )
    if row["local_kind"] == "chunked":
        model = model.with_chunked_local_layers()
    if row["index_topk"].strip():
        model = model.with_indexer(int(row["index_n_heads"]), int(row["index_head_dim"]), int(row["index_topk"]))
    return model


@lru_cache(maxsize=None)
def _models() -> PresetTable:
    return PresetTable("models.csv", _model_from_row)


def model_names() -> list[str]:
    """Names of every model preset, in table order."""
    return list(_models())


def get_model(name: str) -> Model:
    """The model preset called ``name`` (case-insensitive).

    Examples
    --------
    >>> get_model("Llama-2-70B").group_size
    8
    >>> get_model("llama2-7b")
    Traceback (most recent call last):
    ...
    ValueError: unknown model 'llama2-7b'; did you mean 'llama-2-7b'...
    """
    return lookup(name, _models(), "model")
