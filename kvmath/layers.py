"""Attention per layer: what each layer of a model caches, and what it costs.

Modern models mix layer kinds. A ``full`` layer caches K and V of every
token; a ``sliding`` layer only of the last ``window`` tokens (Mistral,
Gemma, gpt-oss); a ``chunked`` layer attends within fixed chunks of
``window`` tokens and holds at most one chunk (Llama 4's local layers); a
``linear`` layer (linear attention, an SSM, Gated DeltaNet) keeps a state
of ``state_bytes`` per sequence whatever the context; an ``mla`` layer
caches one compressed latent of ``latent_dim`` elements per token, shared
by all heads (DeepSeek-V2/V3, Kimi K2); a ``dsa`` layer is an MLA layer
with DeepSeek Sparse Attention's indexer (DeepSeek-V3.2): the indexer keeps
``index_bytes`` of its own keys per token (stored in its own format, fp8
with a scale in the released model, whatever the KV dtype) and reads all of
them, while the attention reads the latents of at most ``topk`` tokens; a
``shared`` layer attends over the cache of an earlier layer (Gemma 3n's
last ``num_kv_shared_layers``): it holds nothing of its own but still reads
that cache and spends attention FLOPs on it.

Two different totals come out of these, and kvmath keeps them apart:

* :func:`kv_bytes_per_seq` is what one sequence of S tokens **needs**:
  every layer's held tokens times its bytes per token, plus the fixed
  states of linear layers.
* :func:`kv_bytes_per_token` is what an engine that pages every attention
  layer for every token **reserves per token** (one token's K and V in
  all attention layers; windows not freed, linear states not included
  because they are per sequence).

And a third, what a decode step **reads**, :func:`kv_bytes_read_per_seq`:
the held bytes, except that a ``shared`` layer reads its source's cache
and a ``dsa`` layer reads only ``topk`` tokens' latents (plus every
token's indexer keys).

A :class:`kvmath.Model` built from a preset row derives its layers from
``sliding_window`` / ``n_sliding_layers``; one built from a ``config.json``
(:func:`kvmath.hf_config.model_from_hf_config`) lists them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

from .validation import ArrayLike, as_scalar, choice, non_negative, plain, positive_int

LAYER_KINDS = ("full", "sliding", "chunked", "linear", "mla", "dsa", "shared")

#: Kinds that cache K and V per KV head (``shared``: an earlier layer's, read, not held).
_KV_HEAD_KINDS = ("full", "sliding", "chunked", "shared")


@dataclass(frozen=True)
class LayerSpec:
    """One layer's attention.

    Attributes
    ----------
    kind : str
        One of :data:`LAYER_KINDS`, in any case (stored lower-case).
    n_heads : int
        Query heads (what attention FLOPs scale with); for a ``linear``
        layer, the heads its state splits into under tensor parallelism
        (0: unknown, taken as splitting evenly over the chips).
    n_kv_heads, head_dim : int
        KV heads and their width (full, sliding, chunked and shared
        layers; a shared layer's are those of the layer it reads).
    window : int or None
        Tokens a ``sliding`` layer keeps, or a ``chunked`` layer's chunk
        (a ``shared`` layer: its source's window, None for a full one).
    latent_dim : int
        Elements an ``mla`` or ``dsa`` layer caches per token (``kv_lora_rank + qk_rope_dim``).
    score_dim : int
        MLA and DSA: the latent width the absorbed values are summed over
        (``kv_lora_rank``).
    topk : int
        ``dsa`` only: tokens whose latents attention reads per new token
        (``index_topk``).
    index_bytes : float
        ``dsa`` only: bytes of indexer keys per token (in the indexer's own
        format: 128 fp8 elements and one fp32 scale are 132 bytes).
    index_flops : float
        ``dsa`` only: FLOPs the indexer spends per cached token (scoring every one).
    state_bytes : float
        Bytes of a ``linear`` layer's state per sequence, as the model stores
        it (fixed, whatever the KV dtype).
    conv_elems, ssm_elems : int
        ``linear`` only, optional: the state's elements, the convolution's
        last inputs and the recurrent (SSM) state, so that an engine that
        keeps the state in another format can resize it
        (:meth:`state_bytes_as`; 0 and 0: given in bytes only).
    state_dtype, ssm_dtype : str
        With ``conv_elems`` / ``ssm_elems``: the format the state is stored
        in (the model's dtype), and the recurrent state's where the config
        names another (``mamba_ssm_dtype``; '' for the same).
        ``state_bytes`` must then equal ``conv_elems x state_dtype +
        ssm_elems x (ssm_dtype or state_dtype)`` bytes.
    conv_groups, group_conv_elems : int
        ``linear`` Mamba-2 layers only, optional: the B/C groups of the
        convolution (``n_groups``) and the convolution elements one group
        adds (``2 d_state (d_conv - 1)``), which tensor parallelism
        replicates rather than splits where the ranks do not divide the
        groups (:meth:`conv_elems_per_rank`; 0 and 0: the convolution splits
        evenly, as Gated DeltaNet's does).
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
    topk: int = 0
    index_bytes: float = 0.0
    index_flops: float = 0.0
    conv_elems: int = 0
    ssm_elems: int = 0
    state_dtype: str = ""
    ssm_dtype: str = ""
    conv_groups: int = 0
    group_conv_elems: int = 0

    def __post_init__(self) -> None:
        # stored lower-cased: every rule below compares kind with the lower-case names
        object.__setattr__(self, "kind", choice("kind", self.kind, LAYER_KINDS))
        if self.kind in _KV_HEAD_KINDS:
            for attr in ("n_heads", "n_kv_heads", "head_dim"):
                self._count(attr)
            if self.n_heads % self.n_kv_heads:
                raise ValueError(f"{self.kind} layer n_heads ({self.n_heads}) must be divisible by "
                                 f"n_kv_heads ({self.n_kv_heads})")
        if self.kind in ("sliding", "chunked"):
            if self.window is None:
                raise ValueError(f"a {self.kind} layer needs a window")
            self._count("window")
        if self.kind == "shared" and self.window is not None:
            self._count("window")
        if self.kind in ("mla", "dsa"):
            for attr in ("n_heads", "latent_dim", "score_dim"):
                self._count(attr)
        if self.kind == "dsa":
            self._count("topk")
            non_negative("dsa layer index_bytes", self.index_bytes)
            non_negative("dsa layer index_flops", self.index_flops)
        if self.kind == "linear":
            non_negative("linear layer state_bytes", self.state_bytes)
            non_negative("linear layer state_flops", self.state_flops)
            self._check_state_parts()
        non_negative(f"{self.kind} layer params", self.params)

    def _check_state_parts(self) -> None:
        """The optional split of a linear layer's state: whole counts in named formats that add up to state_bytes."""
        if not (self.conv_elems or self.ssm_elems or self.state_dtype or self.ssm_dtype):
            return
        for attr in ("conv_elems", "ssm_elems"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"linear layer {attr} must be a whole number >= 0, got {value!r}")
            object.__setattr__(self, attr, int(value))
        for attr in ("conv_groups", "group_conv_elems"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"linear layer {attr} must be a whole number >= 0, got {value!r}")
            object.__setattr__(self, attr, int(value))
        if bool(self.conv_groups) != bool(self.group_conv_elems) or \
                self.conv_groups * self.group_conv_elems > self.conv_elems:
            raise ValueError(f"linear layer conv_groups ({self.conv_groups}) and group_conv_elems "
                             f"({self.group_conv_elems}) go together, and their product cannot exceed conv_elems "
                             f"({self.conv_elems})")
        if not self.state_dtype:
            raise ValueError("linear layer state_dtype is needed with conv_elems / ssm_elems (the format they are "
                             "stored in)")
        parts = self.state_bytes_as(self.state_dtype, self.ssm_dtype or self.state_dtype)
        if parts != self.state_bytes:
            raise ValueError(f"linear layer state_bytes ({self.state_bytes:,.0f}) must equal conv_elems x "
                             f"{self.state_dtype} + ssm_elems x {self.ssm_dtype or self.state_dtype} ({parts:,.0f})")

    def state_bytes_as(self, conv_dtype: str, ssm_dtype: str) -> float:
        """Bytes of this linear layer's state kept with its convolution inputs in ``conv_dtype`` and its recurrent
        state in ``ssm_dtype`` (format names), from :attr:`conv_elems` and :attr:`ssm_elems`.

        Examples
        --------
        >>> gdn = LayerSpec("linear", state_bytes=2 * (24_576 + 524_288), conv_elems=24_576, ssm_elems=524_288,
        ...                 state_dtype="bf16")
        >>> gdn.state_bytes_as("bf16", "fp32")   # 24,576 x 2 + 524,288 x 4
        2146304.0
        """
        from .units import dtype_bytes

        if not (self.conv_elems or self.ssm_elems):
            raise ValueError("this linear layer gives its state in bytes only (no conv_elems / ssm_elems): it "
                             "cannot be resized to another format")
        return (self.conv_elems * dtype_bytes(conv_dtype, argument="conv_dtype")
                + self.ssm_elems * dtype_bytes(ssm_dtype, argument="ssm_dtype"))

    def conv_elems_per_rank(self, tensor_parallel: int) -> int:
        """Convolution elements of this linear layer's state on one of ``tensor_parallel`` ranks, as vLLM shards it.

        The channels split evenly over the ranks, except that Mamba-2's B/C groups are first replicated so
        that every rank holds the groups its heads need: ``n_groups`` grows by ``tp - n_groups`` where ``tp``
        does not divide it (``MambaStateShapeCalculator.mamba2_state_shape`` and
        ``extra_groups_for_head_shards``, ``vllm/model_executor/layers/mamba/mamba_utils.py``, vllm-project/vllm
        at commit 02d71083, the same rule as ``HybridAttentionMambaModelConfig`` of v0.10.2-v0.11): per rank
        ``(conv_elems + extra x group_conv_elems) / tp``. Raises ``ValueError`` where that does not divide, as
        vLLM's ``divide`` does.

        Examples
        --------
        Granite 4.0 H Micro's Mamba-2 layer (d_inner 4,096, one group, d_state 128, d_conv 4): at TP=2 each rank
        keeps both halves' B and C: (4,096 + 2 x 2 x 128) / 2 x 3 = 6,912 elements, not 13,056 / 2 = 6,528.

        >>> m2 = LayerSpec("linear", n_heads=64, state_bytes=2 * (13_056 + 524_288), conv_elems=13_056,
        ...                ssm_elems=524_288, state_dtype="bf16", conv_groups=1, group_conv_elems=768)
        >>> m2.conv_elems_per_rank(1), m2.conv_elems_per_rank(2), m2.conv_elems_per_rank(8)
        (13056, 6912, 2304)
        """
        tp = int(positive_int("tensor_parallel", as_scalar("tensor_parallel", tensor_parallel)))
        groups = self.conv_groups
        extra = 0 if not groups or groups % tp == 0 else tp - groups
        elems = self.conv_elems + extra * self.group_conv_elems
        if elems % tp:
            raise ValueError(f"tensor_parallel {tp} does not divide the {elems:,} convolution-state elements of the "
                             "linear layer (after vLLM's group replication); vLLM refuses it")
        return elems // tp

    def _count(self, attr: str) -> None:
        """Check a count field (one whole number >= 1) and store it as a Python int, so sizes cannot wrap."""
        value = getattr(self, attr)
        positive_int(f"{self.kind} layer {attr}", as_scalar(f"{self.kind} layer {attr}", value))
        object.__setattr__(self, attr, int(value) if isinstance(value, (int, np.integer)) else int(float(value)))

    def elems_per_token(self) -> int:
        """Cache elements (in the KV dtype) one token adds to this layer (0 for linear and shared layers;
        a dsa layer's indexer keys are :attr:`index_bytes`, apart)."""
        if self.kind in ("linear", "shared"):
            return 0
        if self.kind in ("mla", "dsa"):
            return self.latent_dim
        return 2 * self.n_kv_heads * self.head_dim

    def read_elems_per_token(self) -> int:
        """Cache elements (in the KV dtype) a step reads per token this layer attends to: its own, or for a
        shared layer those of the cache it reads (a dsa layer's attended tokens are its top-k)."""
        if self.kind == "shared":
            return 2 * self.n_kv_heads * self.head_dim
        return self.elems_per_token()

    def held_window(self) -> int | None:
        """The most tokens this layer caches (None: every token of the context; 0: none).

        Full, MLA and DSA layers: every token. Sliding: the window. Chunked:
        one chunk (the most it holds mid-chunk, which is what must fit).
        Linear and shared: none (a fixed state; an earlier layer's cache).
        Every total in this module applies this rule (:func:`cache_terms`).
        """
        if self.kind in ("linear", "shared"):
            return 0
        if self.kind in ("sliding", "chunked"):
            return self.window
        return None

    def read_window(self) -> int | None:
        """The most tokens whose cache this layer's attention reads per new token (None: every token): what it
        holds, except a shared layer's source's (its window) and a dsa layer's ``topk``."""
        if self.kind == "dsa":
            return self.topk
        if self.kind == "shared":
            return self.window
        return self.held_window()

    def tokens_read(self, context: ArrayLike) -> ArrayLike:
        """Tokens whose cache (latent, or K and V) this layer's attention reads for a ``context``-token sequence:
        ``min(S, read_window())``."""
        return _within(non_negative("context", context), self.read_window())

    def tokens_held(self, context: ArrayLike) -> ArrayLike:
        """Tokens this layer caches for a ``context``-token sequence: ``min(S, held_window())``."""
        return _within(non_negative("context", context), self.held_window())

    def flops_per_cached_token(self) -> int:
        """FLOPs one new token spends per cached token of this layer (0 for linear).

        Softmax attention: ``4 * h * d_h`` (scores and the weighted sum of
        values over query heads). MLA (and DSA), absorbed: ``2 h (r + r_rope) + 2 h r``,
        over the tokens :meth:`tokens_read`. A shared layer's are a softmax layer's.
        """
        if self.kind == "linear":
            return 0
        if self.kind in ("mla", "dsa"):
            return 2 * self.n_heads * self.latent_dim + 2 * self.n_heads * self.score_dim
        return 4 * self.n_heads * self.head_dim


def _within(context, window):
    """``min(context, window)`` tokens; all of them where ``window`` is None."""
    return context if window is None else np.minimum(context, window)


def _groups(layers: Iterable[LayerSpec]) -> Counter:
    """Identical layers counted once: a 62-layer model has two or three kinds."""
    return Counter(layers)


class CacheTerms(NamedTuple):
    """A model's cache and attention, each layer kind counted once: what every total here is built from.

    ``held``, ``read`` and ``flops`` map ``(coefficient, window)`` to a count
    of layers: elements (in the KV dtype) or FLOPs per token, over
    ``min(S, window)`` tokens (window None: all ``S``; a dsa layer's reads:
    its ``topk``). ``token_bytes`` and ``token_flops`` are per token over all
    ``S`` tokens, in no KV dtype (a dsa indexer's keys, stored and scored
    whole); ``state_bytes`` and ``state_flops`` per sequence (linear layers).
    """

    held: dict
    read: dict
    flops: dict
    token_bytes: float
    token_flops: float
    state_bytes: float
    state_flops: float


def cache_terms(layers: tuple[LayerSpec, ...]) -> CacheTerms:
    """The :class:`CacheTerms` of ``layers``: each layer over its :meth:`LayerSpec.held_window` and
    :meth:`LayerSpec.read_window`."""
    held: Counter = Counter()
    read: Counter = Counter()
    flops: Counter = Counter()
    token_bytes = token_flops = state_bytes = state_flops = 0.0
    for spec, count in _groups(layers).items():
        if spec.kind == "linear":
            state_bytes += count * spec.state_bytes
            state_flops += count * spec.state_flops
            continue
        held_window, read_window = spec.held_window(), spec.read_window()
        if held_window != 0:  # a shared layer holds nothing of its own
            held[(spec.elems_per_token(), held_window)] += count
        read[(spec.read_elems_per_token(), read_window)] += count
        flops[(spec.flops_per_cached_token(), read_window)] += count
        if spec.kind == "dsa":
            token_bytes += count * spec.index_bytes
            token_flops += count * spec.index_flops
    return CacheTerms(dict(held), dict(read), dict(flops), token_bytes, token_flops, state_bytes, state_flops)


def _over(terms: dict, context, scale=1) -> ArrayLike:
    """Sum of ``coefficient * scale * layers * min(context, window)`` over ``terms``."""
    total = 0
    for (coefficient, window), count in terms.items():
        total = total + coefficient * scale * count * _within(context, window)
    return total


def kv_bytes_per_token(layers: tuple[LayerSpec, ...], bytes_per_elem: ArrayLike = 2) -> ArrayLike:
    """Bytes an engine reserves per token: K and V (or the latent, and a dsa indexer's keys) of one token in
    every layer that holds a cache.

    This is the page size per token of an engine that does not free what a
    window has passed; it leaves out linear layers' states, which are per
    sequence, not per token, and shared layers, which hold nothing.

    Examples
    --------
    >>> full = LayerSpec("full", n_heads=32, n_kv_heads=8, head_dim=128)
    >>> kv_bytes_per_token((full,) * 32)
    131072
    """
    terms = cache_terms(layers)
    elems = sum(coefficient * count for (coefficient, _), count in terms.held.items())
    return elems * bytes_per_elem + terms.token_bytes if terms.token_bytes else elems * bytes_per_elem


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
    terms = cache_terms(layers)
    return plain(_over(terms.held, context, bytes_per_elem) + terms.token_bytes * context + terms.state_bytes)


def kv_bytes_read_per_seq(layers: tuple[LayerSpec, ...], context: ArrayLike,
                          bytes_per_elem: ArrayLike = 2) -> ArrayLike:
    """Bytes of cache one decode step reads for one sequence of ``context`` tokens.

    :func:`kv_bytes_per_seq`, except that a shared layer reads the cache it
    shares (held once, read by each layer that attends over it) and a dsa
    layer reads ``min(S, topk)`` latents and every token's indexer keys.

    Examples
    --------
    Two layers own a cache and two more read the second one's: held twice, read four times.

    >>> own = LayerSpec("full", n_heads=8, n_kv_heads=2, head_dim=256)
    >>> shared = LayerSpec("shared", n_heads=8, n_kv_heads=2, head_dim=256)
    >>> kv_bytes_per_seq((own, own, shared, shared), 100), kv_bytes_read_per_seq((own, own, shared, shared), 100)
    (409600.0, 819200.0)
    """
    context = positive_int("context", context)
    terms = cache_terms(layers)
    return plain(_over(terms.read, context, bytes_per_elem) + terms.token_bytes * context + terms.state_bytes)


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

    Each layer attends to the tokens it reads (:meth:`LayerSpec.tokens_read`);
    a linear layer spends its fixed ``state_flops``, a dsa indexer
    ``index_flops`` on every token. ``context`` may be real-valued for
    smooth sweeps.

    Examples
    --------
    >>> full = LayerSpec("full", n_heads=32, n_kv_heads=32, head_dim=128)
    >>> attention_flops_per_token((full,) * 32, 4096) / 1e9
    2.147483648
    """
    terms = cache_terms(layers)
    total = _over(terms.flops, context)
    if terms.token_flops:
        total = total + terms.token_flops * context
    return plain(total + terms.state_flops) if terms.state_flops else plain(total)


def kinds(layers: tuple[LayerSpec, ...]) -> tuple[str, ...]:
    """The layer kinds a model has, in :data:`LAYER_KINDS` order."""
    present = {spec.kind for spec in layers}
    return tuple(k for k in LAYER_KINDS if k in present)
