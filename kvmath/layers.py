"""Attention per layer: what each layer of a model caches, and what it costs.

Modern models mix layer kinds. A ``full`` layer caches K and V of every
token; a ``sliding`` layer only of the last ``window`` tokens (Mistral,
Gemma, gpt-oss); a ``chunked`` layer attends within fixed chunks of
``window`` tokens and holds at most one chunk (Llama 4's local layers); a
``linear`` layer (linear attention, an SSM, Gated DeltaNet) keeps a state
of ``state_bytes`` per sequence whatever the context; an ``mla`` layer
caches one compressed latent of ``latent_dim`` elements per token, shared
by all heads (DeepSeek-V2/V3, Kimi K2).

Two different totals come out of these, and kvmath keeps them apart:

* :func:`kv_bytes_per_seq` is what one sequence of S tokens **needs**:
  every layer's held tokens times its bytes per token, plus the fixed
  states of linear layers.
* :func:`kv_bytes_per_token` is what an engine that pages every attention
  layer for every token **reserves per token** (one token's K and V in
  all attention layers; windows not freed, linear states not included
  because they are per sequence).

A :class:`kvmath.Model` built from a preset row derives its layers from
``sliding_window`` / ``n_sliding_layers``; one built from a ``config.json``
(:func:`kvmath.hf_config.model_from_hf_config`) lists them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .validation import ArrayLike, as_scalar, choice, non_negative, plain, positive_int

LAYER_KINDS = ("full", "sliding", "chunked", "linear", "mla")


@dataclass(frozen=True)
class LayerSpec:
    """One layer's attention.

    Attributes
    ----------
    kind : str
        One of :data:`LAYER_KINDS`.
    n_heads : int
        Query heads (what attention FLOPs scale with); for a ``linear``
        layer, the heads its state splits into under tensor parallelism
        (0: unknown, taken as splitting evenly over the chips).
    n_kv_heads, head_dim : int
        KV heads and their width (full, sliding and chunked layers).
    window : int or None
        Tokens a ``sliding`` layer keeps, or a ``chunked`` layer's chunk.
    latent_dim : int
        Elements an ``mla`` layer caches per token (``kv_lora_rank + qk_rope_dim``).
    score_dim : int
        MLA only: the latent width the absorbed values are summed over
        (``kv_lora_rank``).
    state_bytes : float
        Bytes of a ``linear`` layer's state per sequence (fixed, whatever
        the KV dtype: the state is kept in the model's own dtype).
    state_flops : float
        FLOPs a ``linear`` layer spends per token on its state.
    params : int
        Parameters of the layer's attention (projections), for the count.

    Examples
    --------
    >>> LayerSpec("sliding", n_heads=16, n_kv_heads=8, head_dim=256, window=4096).elems_per_token()
    4096
    """

    kind: str
    n_heads: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    window: int | None = None
    latent_dim: int = 0
    score_dim: int = 0
    state_bytes: float = 0.0
    state_flops: float = 0.0
    params: int = 0

    def __post_init__(self) -> None:
        choice("kind", self.kind, LAYER_KINDS)
        if self.kind in ("full", "sliding", "chunked"):
            for attr in ("n_heads", "n_kv_heads", "head_dim"):
                self._count(attr)
            if self.n_heads % self.n_kv_heads:
                raise ValueError(f"{self.kind} layer n_heads ({self.n_heads}) must be divisible by "
                                 f"n_kv_heads ({self.n_kv_heads})")
        if self.kind in ("sliding", "chunked"):
            if self.window is None:
                raise ValueError(f"a {self.kind} layer needs a window")
            self._count("window")
        if self.kind == "mla":
            for attr in ("n_heads", "latent_dim", "score_dim"):
                self._count(attr)
        if self.kind == "linear":
            non_negative("linear layer state_bytes", self.state_bytes)
            non_negative("linear layer state_flops", self.state_flops)
        non_negative(f"{self.kind} layer params", self.params)

    def _count(self, attr: str) -> None:
        """Check a count field (one whole number >= 1) and store it as a Python int, so sizes cannot wrap."""
        value = getattr(self, attr)
        positive_int(f"{self.kind} layer {attr}", as_scalar(f"{self.kind} layer {attr}", value))
        object.__setattr__(self, attr, int(value) if isinstance(value, (int, np.integer)) else int(float(value)))

    def elems_per_token(self) -> int:
        """Cache elements one token adds to this layer (0 for a linear layer)."""
        if self.kind == "linear":
            return 0
        if self.kind == "mla":
            return self.latent_dim
        return 2 * self.n_kv_heads * self.head_dim

    def tokens_held(self, context: ArrayLike) -> ArrayLike:
        """Tokens this layer caches for a ``context``-token sequence.

        Full and MLA layers: all of them. Sliding: ``min(S, window)``.
        Chunked: at most one chunk, ``min(S, window)`` (the most it holds
        mid-chunk, which is what must fit). Linear: 0 (its state is fixed).
        """
        context = non_negative("context", context)
        if self.kind == "linear":
            return 0 * context
        if self.kind in ("sliding", "chunked"):
            return np.minimum(context, self.window)
        return context

    def flops_per_cached_token(self) -> int:
        """FLOPs one new token spends per cached token of this layer (0 for linear).

        Softmax attention: ``4 * h * d_h`` (scores and the weighted sum of
        values over query heads). MLA, absorbed: ``2 h (r + r_rope) + 2 h r``.
        """
        if self.kind == "linear":
            return 0
        if self.kind == "mla":
            return 2 * self.n_heads * self.latent_dim + 2 * self.n_heads * self.score_dim
        return 4 * self.n_heads * self.head_dim


def _groups(layers: Iterable[LayerSpec]) -> Counter:
    """Identical layers counted once: a 62-layer model has two or three kinds."""
    return Counter(layers)


def _held_by_coefficient(layers, coefficient, context) -> dict:
    """{per-token coefficient: layers x tokens held, summed}: e.g. one entry for a model whose layers cache alike."""
    out: dict = {}
    for spec, count in _groups(layers).items():
        if spec.kind != "linear":
            c = coefficient(spec)
            out[c] = out.get(c, 0) + count * spec.tokens_held(context)
    return out


def kv_bytes_per_token(layers: tuple[LayerSpec, ...], bytes_per_elem: ArrayLike = 2) -> ArrayLike:
    """Bytes an engine reserves per token: K and V (or the latent) of one token in every attention layer.

    This is the page size per token of an engine that does not free what a
    window has passed; it leaves out linear layers' states, which are per
    sequence, not per token.

    Examples
    --------
    >>> full = LayerSpec("full", n_heads=32, n_kv_heads=8, head_dim=128)
    >>> kv_bytes_per_token((full,) * 32)
    131072
    """
    elems = sum(count * spec.elems_per_token() for spec, count in _groups(layers).items())
    return elems * bytes_per_elem


def kv_bytes_per_seq(layers: tuple[LayerSpec, ...], context: ArrayLike, bytes_per_elem: ArrayLike = 2) -> ArrayLike:
    """Bytes one sequence of ``context`` tokens needs: every layer's held tokens, plus linear states.

    Examples
    --------
    Gemma 2 9B's pattern: 21 sliding layers (4096-token window) and 21 full ones.

    >>> local = LayerSpec("sliding", n_heads=16, n_kv_heads=8, head_dim=256, window=4096)
    >>> full = LayerSpec("full", n_heads=16, n_kv_heads=8, head_dim=256)
    >>> kv_bytes_per_seq((local, full) * 21, 32768) == 8192 * (21 * 4096 + 21 * 32768)
    True
    """
    context = positive_int("context", context)
    held, states = 0, 0.0
    for elems, tokens in _held_by_coefficient(layers, LayerSpec.elems_per_token, context).items():
        held = held + elems * bytes_per_elem * tokens
    for spec, count in _groups(layers).items():
        if spec.kind == "linear":
            states += count * spec.state_bytes
    return plain(held + states)


def kv_bytes_by_kind(layers: tuple[LayerSpec, ...], context: ArrayLike, bytes_per_elem: ArrayLike = 2) -> dict:
    """:func:`kv_bytes_per_seq` split by layer kind (kinds the model has only); the values sum to it.

    Examples
    --------
    >>> local = LayerSpec("sliding", n_heads=16, n_kv_heads=8, head_dim=256, window=4096)
    >>> full = LayerSpec("full", n_heads=16, n_kv_heads=8, head_dim=256)
    >>> kv_bytes_by_kind((local, full) * 21, 32768)
    {'sliding': 704643072.0, 'full': 5637144576.0}
    """
    kinds: dict[str, list[LayerSpec]] = {}
    for spec in layers:
        kinds.setdefault(spec.kind, []).append(spec)
    return {kind: kv_bytes_per_seq(tuple(specs), context, bytes_per_elem) for kind, specs in kinds.items()}


def attention_flops_per_token(layers: tuple[LayerSpec, ...], context: ArrayLike) -> ArrayLike:
    """FLOPs one new token spends on attention over a ``context``-token cache, all layers.

    Each layer attends to the tokens it holds (:meth:`LayerSpec.tokens_held`);
    a linear layer spends its fixed ``state_flops``. ``context`` may be
    real-valued for smooth sweeps.

    Examples
    --------
    >>> full = LayerSpec("full", n_heads=32, n_kv_heads=32, head_dim=128)
    >>> attention_flops_per_token((full,) * 32, 4096) / 1e9
    2.147483648
    """
    total = 0
    for flops, tokens in _held_by_coefficient(layers, LayerSpec.flops_per_cached_token, context).items():
        total = total + flops * tokens
    for spec, count in _groups(layers).items():
        if spec.kind == "linear":
            total = total + count * spec.state_flops
    return plain(total)


def kinds(layers: tuple[LayerSpec, ...]) -> tuple[str, ...]:
    """The layer kinds a model has, in :data:`LAYER_KINDS` order."""
    present = {spec.kind for spec in layers}
    return tuple(k for k in LAYER_KINDS if k in present)
