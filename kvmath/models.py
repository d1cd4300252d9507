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

import numpy as np

from .kv_cache import kv_bytes_per_token
from .presets import lookup, optional_int, read_rows
from .validation import ArrayLike, as_scalar, checked, choice, plain, positive, positive_int, whole

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape.

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
    display_name: str = ""
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        # Every field is checked and normalised here, so replace() and the
        # constructor validate alike: counts become Python ints (numpy int32
        # fields would wrap in param_count), names are lower-cased.
        def put(attr, value):
            object.__setattr__(self, attr, value)

        for attr in ("name", "display_name", "source", "note"):
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

    # ----- shape -------------------------------------------------------------

    @property
    def group_size(self) -> int:
        """g = h / h_kv: query heads that share one KV head (1 for MHA, h for MQA)."""
        return self.n_heads // self.n_kv_heads

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
        n_kv_heads = int(positive_int("n_kv_heads", n_kv_heads))
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
        total = self.n_layers * self._attention_params_per_layer()
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

    def active_param_count(self) -> int:
        """Parameters each token uses: all of them for a dense model, top-k experts for MoE."""
        return self._params(experts_per_token=self.top_k)

    # ----- KV cache ----------------------------------------------------------

    def kv_elems_per_token_per_layer(self) -> int:
        """Elements one token adds to one layer's cache (K and V, or the MLA latent)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.n_kv_heads * self.head_dim

    @checked
    def kv_bytes_per_token(self, bytes_per_elem: ArrayLike = 2, context: ArrayLike | None = None):
        """KV bytes per token, in bytes.

        Without ``context``: what one token adds to a full cache. With it:
        the average per token of a ``context``-token sequence, which is less
        where sliding-window layers keep only their last ``sliding_window``
        tokens.

        Examples
        --------
        >>> get_model("deepseek-v3").kv_bytes_per_token()
        70272.0
        >>> get_model("mistral-7b-v0.1").kv_bytes_per_token(context=8192)
        65536.0
        """
        if context is None:
            per_layer = self.kv_elems_per_token_per_layer() * positive("bytes_per_elem", bytes_per_elem)
            return self.n_layers * per_layer
        return self.kv_bytes_per_seq(context, bytes_per_elem) / positive_int("context", context)

    @checked
    def kv_bytes_per_seq(self, context: ArrayLike, bytes_per_elem: ArrayLike = 2) -> ArrayLike:
        """Bytes of cache one sequence of ``context`` tokens holds (windows applied)."""
        context = positive_int("context", context)
        per_layer_token = self.kv_bytes_per_token(bytes_per_elem) / self.n_layers
        if self.sliding_window is None:
            return self.n_layers * per_layer_token * context
        local = self.n_sliding_layers * np.minimum(context, self.sliding_window)
        full = (self.n_layers - self.n_sliding_layers) * context
        return plain(per_layer_token * (local + full))

    def standard_kv_bytes_per_token(self, bytes_per_elem: float = 2) -> float:
        """``kvmath.kv_bytes_per_token`` of this model's L, h_kv and d_h (ignores MLA and windows)."""
        return kv_bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, bytes_per_elem)


_INT_FIELDS = (
    "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab", "mlp_matrices",
    "n_positions",
)
#: Smallest value of each optional count (None means the feature is absent).
_OPTIONAL_MINIMUM = {
    "sliding_window": 1, "n_sliding_layers": 1, "n_experts": 1, "n_shared_experts": 0, "top_k": 1,
    "d_ff_expert": 1, "n_dense_layers": 0, "q_lora_rank": 1, "kv_lora_rank": 1, "qk_rope_dim": 1,
    "v_head_dim": 1,
}
_OPTIONAL_INT_FIELDS = (
    "sliding_window", "n_sliding_layers", "n_experts", "n_shared_experts", "top_k", "d_ff_expert",
    "n_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "v_head_dim",
)


def _model_from_row(row: dict[str, str]) -> Model:
    fields = {k: int(row[k]) for k in _INT_FIELDS}
    fields.update({k: optional_int(row[k]) for k in _OPTIONAL_INT_FIELDS})
    published_active = row["published_active_params"].strip()
    return Model(
        name=row["name"],
        tied_embeddings=row["tied_embeddings"] == "true",
        attention=row["attention"],
        published_params=float(row["published_params"]),
        published_active_params=float(published_active) if published_active else None,
        display_name=row["display_name"],
        source=row["source"],
        note=row["note"],
        **fields,
    )


@lru_cache(maxsize=None)
def _models() -> dict[str, Model]:
    return {row["name"]: _model_from_row(row) for row in read_rows("models.csv")}


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
