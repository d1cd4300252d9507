"""Size of the KV cache: bytes per token, per sequence, per batch.

During decoding every layer keeps the key and value vectors of every past
token so they need not be recomputed. For multi-head (MHA), grouped-query
(GQA) and multi-query (MQA) attention that is two vectors of
``n_kv_heads * head_dim`` elements per layer per token.
"""

from __future__ import annotations

from .validation import ArrayLike, checked, positive, positive_int


@checked
def kv_bytes_per_token(
    n_layers: ArrayLike, n_kv_heads: ArrayLike, head_dim: ArrayLike, bytes_per_elem: ArrayLike = 2
) -> ArrayLike:
    """Bytes of KV cache one token adds: ``2 * L * h_kv * d_h * b_kv``.

    Parameters
    ----------
    n_layers : int or array
        Transformer layers L.
    n_kv_heads : int or array
        Key/value heads h_kv (= query heads for MHA, 1 for MQA).
    head_dim : int or array
        Elements per head d_h.
    bytes_per_elem : float or array
        Bytes per cached element b_kv (2 for bf16, 1 for int8/fp8).

    Returns
    -------
    float or ndarray
        Bytes per token (the leading 2 counts K and V).

    Examples
    --------
    >>> kv_bytes_per_token(32, 32, 128)  # codellama-7b in bf16
    524288.0
    >>> kv_bytes_per_token(32, 1, 128)   # the same with one KV head (MQA)
    16384.0
    """
    n_layers = positive_int("n_layers", n_layers)
    n_kv_heads = positive_int("n_kv_heads", n_kv_heads)
    head_dim = positive_int("head_dim", head_dim)
    bytes_per_elem = positive("bytes_per_elem", bytes_per_elem)
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_elem


@checked
def kv_bytes_per_seq(kv_bytes_per_token: ArrayLike, context: ArrayLike) -> ArrayLike:
    """Bytes of KV cache one sequence of ``context`` tokens holds, in bytes.

    Examples
    --------
    >>> kv_bytes_per_seq(524288, 8192) / 2**30  # GiB
    4.0
    """
    return positive("kv_bytes_per_token", kv_bytes_per_token) * positive_int("context", context)


@checked
def kv_cache_bytes(kv_bytes_per_token: ArrayLike, context: ArrayLike, batch: ArrayLike) -> ArrayLike:
    """Bytes of KV cache for ``batch`` sequences of ``context`` tokens each.

    Both are counts of whole sequences and tokens (4.0 is fine, 4.5 is not).

    Examples
    --------
    >>> kv_cache_bytes(524288, 8192, 16) / 1e9  # the thread's "67 GB"
    68.719476736
    """
    return kv_bytes_per_seq(kv_bytes_per_token, context) * positive_int("batch", batch)
