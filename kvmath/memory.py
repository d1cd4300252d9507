"""Memory budgets: what a chip's memory really offers, and how vLLM sizes its KV cache.

Four named budgets per chip, largest first:

``"device"``
    The marketed capacity (``Chip.hbm_bytes``, "80 GB"). The book's default.
``"reported"``
    The total the device reports (``Chip.device_bytes``: ``nvidia-smi``'s
    ``memory.total``, or rocminfo's pool size on AMD).
``"reserve"``
    What one process can hold: the CUDA runtime's total
    (``Chip.runtime_bytes``, ``torch.cuda.mem_get_info()[1]``) less the
    process's memory outside PyTorch (:data:`NON_TORCH_BYTES`: CUDA context,
    cuBLAS/NCCL workspaces).
``"engine"``
    What vLLM lets its weights, activations and KV cache use:
    ``gpu_memory_utilization`` x the runtime total, less the same non-torch
    memory. :func:`vllm_engine` goes on to the KV cache itself.

Where a chip's runtime total is unknown it is estimated as the reported total
less :data:`DRIVER_RESERVE_BYTES`; where the reported total is unknown the
budgets that need it raise ``ValueError``. Every default overhead here is an
estimate and labelled so; the sizing arithmetic itself is vLLM's, quoted from
``vllm-project/vllm`` (paths in each docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .results import Result

from .hardware import Chip
from .models import Model
from .units import GiB, dtype_bytes
from .validation import (ArrayLike, checked, choice, flag, fraction, instance, non_negative, one_int, plain,
                        positive, positive_int)

#: Budget names. ``reported >= reserve >= engine`` always; the marketed
#: ``device`` figure is below the reported one on every NVIDIA preset
#: (80 GB < 81,559 MiB = 85.5 GB) and above it on none.
BUDGETS = ("device", "reported", "reserve", "engine")

#: vLLM's default ``gpu_memory_utilization``: 0.9 in ``vllm/config.py``
#: ``CacheConfig`` and ``vllm/engine/arg_utils.py`` ``EngineArgs`` from v0.2
#: through v0.10 (PR #2162); the newest ``vllm/config/cache.py`` uses 0.92.
GPU_MEMORY_UTILIZATION = 0.9

#: vLLM's default block (page) size on CUDA, in tokens
#: (``CacheConfig.DEFAULT_BLOCK_SIZE = 16``, ``vllm/config/cache.py``).
BLOCK_SIZE = 16

#: vLLM's default ``max_num_seqs`` (``EngineArgs``, ``vllm/engine/arg_utils.py``; V1's
#: API server uses 1024 on GPUs of 70 GiB or more other than the A100).
MAX_NUM_SEQS = 256

#: Estimate of one process's GPU memory outside PyTorch's allocator (CUDA
#: context, cuBLAS and attention-backend workspaces), in bytes: 0.35 GiB, the
#: ``non_torch_memory`` a vLLM V0 start-up logged on an RTX 3090 at TP=1 in the
#: version that counted all of it (``initial_memory_usage`` 15.34 GiB less
#: 14.99 GiB of weights; vllm-project/vllm issue #10517). Later vLLM versions
#: log only the increase during start-up (0.05 GiB on an A10, 0.16 GiB on an
#: H100 in eager mode); tensor parallelism adds NCCL and all-reduce buffers
#: (1.79 GiB at TP=1 became 3.58 GiB per rank at TP=2 in vLLM PR #10511),
#: which this default leaves out.
NON_TORCH_BYTES = 0.35 * GiB

#: Estimate of what the driver keeps from the reported total before the CUDA
#: runtime counts it, in bytes, for chips whose runtime total is unknown:
#: 0.5 GiB. Measured gaps (``device_bytes - runtime_bytes`` of the presets):
#: H100 0.43 GiB, RTX 4090 0.31 GiB, B200 0.71 GiB, A100-80GB 0.75 GiB.
DRIVER_RESERVE_BYTES = 0.5 * GiB

#: vLLM engine generations :func:`vllm_kv_cache` reproduces: ``"v1"`` (the
#: hybrid KV-cache manager: sliding-window layers in their own groups,
#: concurrency in whole blocks) and ``"v0"`` (every layer sized as full
#: attention, concurrency ``blocks x block_size / max_model_len``).
VLLM_ENGINES = ("v1", "v0")

#: Block sizes vLLM accepts (``BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]``, ``vllm/config/cache.py``;
#: 256 is newer, earlier releases stop at 128).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)

#: Layer kinds whose vLLM sizing kvmath reproduces. Linear-attention (Mamba, Gated DeltaNet) layers get a
#: per-sequence ``MambaSpec``, and vLLM then enlarges the attention block size until an attention page
#: covers a Mamba state and pads the Mamba page to match (``HybridAttentionMambaModelConfig
#: .verify_and_update_config``, ``vllm/model_executor/models/config.py``); chunked layers get a
#: ``ChunkedLocalAttentionSpec``. kvmath models neither yet, so it refuses them rather than size them as full.
VLLM_LAYER_KINDS = ("full", "sliding", "mla")


def _known(chip: Chip, attr: str, needed_by: str) -> float:
    value = getattr(chip, attr)
    if value is None:
        what = "reported total (device_bytes)" if attr == "device_bytes" else attr
        raise ValueError(
            f"chip {chip.name!r} has no {what} and no runtime total in its preset (unknown: see its "
            f"device_source); {needed_by} needs one: pass the bytes nvidia-smi reports instead of the chip, "
            f"or use the 'device' budget (the marketed size)"
        )
    return value


def _whole(x: ArrayLike, name: str = "count"):
    """A count as a Python int (scalar) or int64 array, refusing what int64 cannot hold instead of wrapping."""
    arr = np.asarray(x, dtype=float)
    bad = ~np.isfinite(arr) | (arr >= 2.0 ** 63)
    if bad.any():
        shown = repr(float(arr)) if arr.ndim == 0 else f"an array containing {arr.ravel()[int(np.argmax(bad.ravel()))]!r}"
        raise ValueError(f"{name} is too large to count in whole numbers (at least 2**63), got {shown}")
    return int(arr) if arr.ndim == 0 else arr.astype(np.int64)


@checked
def runtime_total_bytes(chip: Chip | ArrayLike) -> ArrayLike:
    """Total memory the CUDA runtime gives a process (``torch.cuda.mem_get_info()[1]``), bytes.

    The chip's ``runtime_bytes`` where a source gives it; otherwise its
    reported total (a chip's ``device_bytes``, or a number taken as one) less
    :data:`DRIVER_RESERVE_BYTES`, an estimate.

    Examples
    --------
    >>> from kvmath import Chip
    >>> from kvmath.units import GiB
    >>> round(runtime_total_bytes(Chip.preset("h100-sxm")) / GiB, 2)  # vLLM's 'total_gpu_memory 79.22GiB'
    79.22
    >>> round(runtime_total_bytes(Chip.preset("l4")) / GiB, 2)        # 23034 MiB less the 0.5 GiB estimate
    21.99
    """
    return _runtime_total(chip, "runtime_total_bytes")


def _runtime_total(chip: Chip | ArrayLike, needed_by: str) -> ArrayLike:
    if isinstance(chip, Chip):
        if chip.runtime_bytes is not None:
            return chip.runtime_bytes
        reported = _known(chip, "device_bytes", needed_by)
    else:
        reported = positive("chip", chip)  # a number stands for the chip: name the argument given
    total = reported - DRIVER_RESERVE_BYTES
    if np.any(total <= 0):
        raise ValueError(f"device_bytes (the reported total) must exceed the driver's reserve of "
                         f"{DRIVER_RESERVE_BYTES / GiB:.1f} GiB (an estimate), got {reported!r}")
    return total


@checked
def memory_budget(
    chip: Chip | ArrayLike,
    budget: str = "device",
    *,
    gpu_memory_utilization: ArrayLike = GPU_MEMORY_UTILIZATION,
    non_torch_bytes: ArrayLike = NON_TORCH_BYTES,
    argument: str = "chip",
) -> ArrayLike:
    """Bytes per chip that the named budget gives weights, activations and KV cache.

    Parameters
    ----------
    chip : Chip or float or array
        A chip preset, or a memory size in bytes. A number is taken as the
        marketed and the reported total alike; ``"reserve"`` and ``"engine"``
        then estimate its runtime total as the number less
        :data:`DRIVER_RESERVE_BYTES`.
    budget : str
        ``"device"`` (marketed), ``"reported"``, ``"reserve"`` or ``"engine"``
        (see the module docstring).
    gpu_memory_utilization : float or array
        vLLM's fraction of the runtime total (``"engine"`` only).
    non_torch_bytes : float or array
        Memory the process holds outside PyTorch (``"reserve"``, ``"engine"``);
        default :data:`NON_TORCH_BYTES`, an estimate.
    argument : str
        The caller's name for ``chip``, used in the error message
        (:func:`kvmath.formulas.kv_budget_bytes` passes ``"hbm_bytes"``).

    Returns
    -------
    float or array
        Bytes per chip; ``reported >= reserve >= engine``.

    Examples
    --------
    >>> from kvmath import Chip
    >>> from kvmath.units import GiB
    >>> h100 = Chip.preset("h100-sxm")
    >>> [round(memory_budget(h100, b) / GiB, 2) for b in BUDGETS]
    [74.51, 79.65, 78.87, 70.95]
    >>> memory_budget(40e9)  # a number is the device budget unchanged
    40000000000.0
    """
    budget = choice("budget", budget, BUDGETS)
    # every argument is checked, even where this budget does not use it
    util = fraction("gpu_memory_utilization", gpu_memory_utilization)
    non_torch = non_negative("non_torch_bytes", non_torch_bytes)
    if not isinstance(chip, Chip):
        chip = positive(argument, chip)  # a memory size in bytes; anything else is refused by name
    if budget == "device":
        return chip.hbm_bytes if isinstance(chip, Chip) else chip
    if budget == "reported":
        return _known(chip, "device_bytes", f"budget {budget!r}") if isinstance(chip, Chip) else chip
    total = _runtime_total(chip, f"budget {budget!r}")
    if np.any(non_torch >= total):  # a budget of 0 or less bytes would come out negative
        raise ValueError(f"non_torch_bytes must be below the runtime total ({_show_bytes(total)}), "
                         f"got {_show_bytes(non_torch)}")
    if budget == "reserve":
        return plain(total - non_torch)
    _check_free_at_start(total, util, non_torch)
    return plain(util * total - non_torch)


def _show_bytes(x: ArrayLike) -> str:
    return f"{x:.6g} B" if np.ndim(x) == 0 else f"an array of shape {np.shape(x)}"


def _model(model) -> Model:
    return instance("model", model, Model, "a Model (Model.preset(name))")


def _check_free_at_start(total: ArrayLike, util: ArrayLike, non_torch: ArrayLike) -> None:
    """vLLM V1 refuses to start when free memory is below utilization x total.

    ``vllm/v1/worker/gpu_worker.py`` ``Worker.init_device``: "Free memory on
    device ... on startup is less than desired GPU memory utilization". On an
    otherwise idle GPU the free memory is the runtime total less the
    process's own non-torch memory.
    """
    if np.any(util * total > total - non_torch):
        raise ValueError(
            "gpu_memory_utilization x the runtime total exceeds the free memory at start-up "
            "(total less non_torch_bytes); vLLM refuses to start: lower gpu_memory_utilization"
        )


# ----- vLLM ------------------------------------------------------------------


def _cdiv(a: ArrayLike, b: ArrayLike) -> ArrayLike:
    return -(-np.asarray(a) // b)


def _check_bool(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _check_tensor_parallel(model, tp: int) -> None:
    """vLLM's refusals: heads not divisible by TP, KV heads neither divisible by TP nor dividing it.

    ``ModelConfig.verify_with_parallel_config`` ("Total number of attention heads ... must be divisible by
    tensor parallel size"); ``QKVParallelLinear`` (``vllm/model_executor/layers/linear.py``) splits
    ``n_kv_heads`` by TP, or replicates them ``tp / n_kv_heads`` times, with ``divide``, which asserts.
    """
    if model.n_heads % tp:
        raise ValueError(f"tensor_parallel {tp} does not divide the {model.n_heads} attention heads; vLLM refuses it")
    kv = model.n_kv_heads
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        raise ValueError(f"tensor_parallel {tp} neither divides the {kv} KV heads nor is a multiple of them; "
                         "vLLM refuses it")


@checked
def vllm_page_bytes(model, block_size: int = BLOCK_SIZE, kv_dtype: str | float = "bf16", tensor_parallel: int = 1) -> int:
    """Bytes of one KV-cache block of one layer on one rank, as vLLM allocates it.

    Standard attention: ``2 x block_size x kv_heads_per_rank x head_size x
    dtype`` (``AttentionSpec.real_page_size_bytes``,
    ``vllm/v1/kv_cache_interface.py``), with ``kv_heads_per_rank = max(1,
    n_kv_heads // tensor_parallel)`` (``ModelConfig.get_num_kv_heads``): a
    cache with fewer KV heads than ranks is replicated. MLA: one latent of
    ``kv_lora_rank + qk_rope_dim`` per token, no factor 2
    (``MLAAttentionSpec``; ``get_head_size`` returns ``kv_lora_rank +
    qk_rope_head_dim``, ``get_num_kv_heads`` returns 1), the same on every
    rank.

    Examples
    --------
    >>> from kvmath import Model
    >>> vllm_page_bytes(Model.preset("llama-3-8b"))               # 16 x 2 x 8 x 128 x 2
    65536
    >>> vllm_page_bytes(Model.preset("llama-3-8b"), tensor_parallel=16)  # 8 heads, 16 ranks: one each
    8192
    >>> vllm_page_bytes(Model.preset("deepseek-v3"), tensor_parallel=8)  # 16 x 576 x 2 on every rank
    18432

    A tensor-parallel size vLLM refuses raises ``ValueError`` (:func:`vllm_kv_cache` says which).
    """
    from .models import Model

    if not isinstance(model, Model):
        raise ValueError(f"model must be a kvmath Model, got {model!r}")
    block_size = one_int("block_size", block_size)
    tp = one_int("tensor_parallel", tensor_parallel)
    _check_tensor_parallel(model, tp)
    b = dtype_bytes(kv_dtype, argument="kv_dtype") if isinstance(kv_dtype, str) else positive("kv_dtype", kv_dtype)
    if _model(model).attention == "mla":
        elems = model.kv_elems_per_token_per_layer()
    else:
        elems = 2 * max(1, model.n_kv_heads // tp) * model.head_dim
    return _whole(block_size * elems * b)


@checked
def vllm_kv_groups(model, hybrid: bool = True) -> tuple[int, int, int]:
    """How vLLM V1 groups the layers: ``(group_size, full_groups, sliding_groups)``.

    One attention type: one group of all its layers. Full plus sliding-window
    layers (the hybrid KV-cache manager): ``group_size`` is the smaller layer
    count, or the larger where it is under 1.5 times the smaller; each type
    fills ``cdiv(layers, group_size)`` groups, the last padded
    (``_get_kv_cache_groups_uniform_page_size``,
    ``vllm/v1/core/kv_cache_utils.py``). Every group draws from one pool of
    blocks, ``group_size`` layers' pages per block. ``hybrid=False``
    (``--disable-hybrid-kv-cache-manager``, V0, V1 before the hybrid
    manager) sizes every layer as full attention.

    Examples
    --------
    >>> from kvmath import Model
    >>> vllm_kv_groups(Model.preset("gemma-2-9b"))        # 21 global + 21 local layers
    (21, 1, 1)
    >>> vllm_kv_groups(Model.preset("gemma-2-9b"), hybrid=False)
    (42, 1, 0)

    Linear-attention and chunked layers raise ``ValueError`` (:data:`VLLM_LAYER_KINDS`).
    """
    _model(model)
    _check_bool("hybrid", hybrid)
    specs = model.layer_specs()
    other = sorted({s.kind for s in specs} - set(VLLM_LAYER_KINDS))
    if other:
        raise ValueError(f"{model.name} has {'/'.join(other)} layers: vLLM sizes those with their own specs "
                         "(MambaSpec, ChunkedLocalAttentionSpec), which kvmath does not model yet")
    sliding = sum(s.kind == "sliding" for s in specs) if hybrid else 0
    full = model.n_layers - sliding
    counts = [c for c in (full, sliding) if c]
    small, large = min(counts), max(counts)
    size = large if large < 1.5 * small else small
    return size, int(_cdiv(full, size)), int(_cdiv(sliding, size))


def _large_gpu(chip: Chip | ArrayLike, total: ArrayLike) -> bool:
    """vLLM's test for its larger V1 defaults: 70 GiB or more, and not an A100."""
    name = chip.name if isinstance(chip, Chip) else ""
    return bool(np.all(np.asarray(total) >= 70 * GiB)) and "a100" not in name


@checked
def vllm_max_num_batched_tokens(max_model_len: ArrayLike, engine: str = "v1", large_gpu: bool = False) -> ArrayLike:
    """vLLM's default tokens per forward pass for ``vllm serve`` (what the profile run and windows see).

    V1 always chunks prefills. ``EngineArgs.get_batch_defaults``
    (``vllm/engine/arg_utils.py``) gives the API server 8192 tokens (and
    ``max_num_seqs`` 1024) on a GPU of 70 GiB or more that is not an A100,
    2048 (and 256) elsewhere; the ``LLM`` class doubles the tokens, and
    early V1 used 2048 everywhere: pass the value a log shows. V0
    (``SchedulerConfig.__post_init__``, ``vllm/config.py``):
    ``max(max_model_len, 2048)``, or 2048 where chunked prefill is on, which
    ``EngineArgs`` turns on by default above ``max_model_len`` 32K.

    Examples
    --------
    >>> vllm_max_num_batched_tokens(20000, "v0"), vllm_max_num_batched_tokens(131072, "v0")
    (20000, 2048)
    >>> vllm_max_num_batched_tokens(8192), vllm_max_num_batched_tokens(8192, large_gpu=True)
    (2048, 8192)
    """
    mml = positive_int("max_model_len", max_model_len)
    large_gpu = flag("large_gpu", large_gpu)
    if choice("engine", engine, VLLM_ENGINES) == "v1":
        return _whole(np.full_like(np.asarray(mml), 8192 if large_gpu else 2048))
    return _whole(np.where(mml > 32768, 2048, np.maximum(mml, 2048)))


@checked
def vllm_activation_peak_bytes(
    model, max_num_batched_tokens: ArrayLike, max_num_seqs: ArrayLike = MAX_NUM_SEQS,
    act_bytes: float = 2, tensor_parallel: int = 1,
) -> ArrayLike:
    """Estimate of the activation peak vLLM's profile run measures, in bytes.

    An estimate, not vLLM's measurement: the peak of a forward pass over
    ``max_num_batched_tokens`` tokens is taken as one layer's MLP
    intermediates plus the residual stream, ``tokens x (2 d + m x d_ff /
    TP) x act_bytes`` (``m`` = 3 gated or 2 plain matrices; ``d_ff`` is
    ``(top_k + shared) x d_ff_expert`` for an MoE layer where larger), plus
    fp32 logits for ``min(max_num_seqs, tokens)`` sequences, ``x vocab x 4``.
    On Llama-3.1-8B it gives 2.03 and 2.89 GiB where vLLM logged 2.07 and
    2.99 GiB (issue #10517, 20,000 and 29,000 tokens). Multimodal profiling
    (vision encoders) is not covered.

    Examples
    --------
    >>> from kvmath import Model
    >>> from kvmath.units import GiB
    >>> round(vllm_activation_peak_bytes(Model.preset("llama-3-8b"), 20000) / GiB, 2)
    2.03
    """
    tokens = positive_int("max_num_batched_tokens", max_num_batched_tokens)
    seqs = positive_int("max_num_seqs", max_num_seqs)
    tp = one_int("tensor_parallel", tensor_parallel)
    width = _model(model).d_ff
    if model.n_experts:
        width = max(width if model.n_dense_layers else 0,
                    (model.top_k + (model.n_shared_experts or 0)) * model.d_ff_expert)
    per_token = (2 * model.d_model + model.mlp_matrices * width / tp) * positive("act_bytes", act_bytes)
    logits = np.minimum(seqs, tokens) * model.vocab * 4
    return plain(tokens * per_token + logits)


@checked
def vllm_available_kv_bytes(
    total_bytes: ArrayLike, weight_bytes: ArrayLike, activation_peak_bytes: ArrayLike,
    non_torch_bytes: ArrayLike, gpu_memory_utilization: ArrayLike = GPU_MEMORY_UTILIZATION,
) -> ArrayLike:
    """vLLM's "Available KV cache memory" of one rank, in bytes.

    ``gpu_memory_utilization x total - (weights + activation peak +
    non-torch)`` (``Worker.determine_available_memory``,
    ``vllm/v1/worker/gpu_worker.py``; ``memory_profiling``,
    ``vllm/utils/mem_utils.py``). ``total`` is the runtime total
    (``torch.cuda.mem_get_info()[1]``), not the free memory. Raises
    ``ValueError`` where nothing is left, as vLLM does ("No available memory
    for the cache blocks").

    Examples
    --------
    Llama-3-8B on an H100, vLLM PR #10511 (logged: 53.29 GiB):

    >>> from kvmath.units import GiB
    >>> round(vllm_available_kv_bytes(79.22 * GiB, 14.96 * GiB, 1.26 * GiB, 1.79 * GiB) / GiB, 2)
    53.29
    """
    util = fraction("gpu_memory_utilization", gpu_memory_utilization)
    spent = (non_negative("weight_bytes", weight_bytes) + non_negative("activation_peak_bytes", activation_peak_bytes)
             + non_negative("non_torch_bytes", non_torch_bytes))
    left = util * positive("total_bytes", total_bytes) - spent
    if np.any(left <= 0):
        raise ValueError(
            "no memory left for the KV cache: gpu_memory_utilization x total_bytes <= weights + activations + "
            "non-torch memory; raise gpu_memory_utilization or add chips"
        )
    return plain(left)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class EngineBudget(Result):
    """vLLM's KV cache for one engine (all figures per rank unless stated).

    Attributes
    ----------
    available_kv_bytes : float or array
        KV cache memory of the rank ("Available KV cache memory").
    page_bytes : int
        One block of one layer (:func:`vllm_page_bytes`).
    group_size, num_groups : int
        Layers per KV-cache group, and the groups (:func:`vllm_kv_groups`).
    num_blocks : int or array
        Blocks in the shared pool ("# GPU blocks").
    tokens : int or array
        "GPU KV cache size": ``num_blocks // num_groups x block_size`` tokens
        for the whole engine (a TP group holds one copy, not N).
    blocks_per_request : int or array
        Blocks one request of ``max_model_len`` tokens takes.
    max_concurrency : float or array
        "Maximum concurrency for max_model_len tokens per request".
    max_model_len, block_size, max_num_batched_tokens : int
        The engine settings the figures are for.
    total_bytes, requested_bytes, weight_bytes, activation_peak_bytes, non_torch_bytes : float or None
        The memory profile :func:`vllm_engine` used (None from
        :func:`vllm_kv_cache`): runtime total, utilization x total, and the
        three costs taken from it. Defaults are estimates.
    """

    available_kv_bytes: ArrayLike
    page_bytes: int
    group_size: int
    num_groups: int
    num_blocks: ArrayLike
    tokens: ArrayLike
    blocks_per_request: ArrayLike
    max_concurrency: ArrayLike
    max_model_len: ArrayLike
    block_size: int
    max_num_batched_tokens: ArrayLike
    total_bytes: ArrayLike | None = None
    requested_bytes: ArrayLike | None = None
    weight_bytes: ArrayLike | None = None
    activation_peak_bytes: ArrayLike | None = None
    non_torch_bytes: ArrayLike | None = None


@checked
def vllm_kv_cache(
    model,
    available_kv_bytes: ArrayLike,
    max_model_len: ArrayLike,
    *,
    block_size: int = BLOCK_SIZE,
    kv_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
    layers: int | None = None,
    max_num_batched_tokens: ArrayLike | None = None,
    hybrid: bool = True,
    engine: str = "v1",
) -> EngineBudget:
    """Blocks, tokens and maximum concurrency vLLM gets from one rank's KV memory.

    ``num_blocks = available // page_bytes // group_size``
    (``get_num_blocks``, ``vllm/v1/core/kv_cache_utils.py``; V0's
    ``available // (page x layers)`` is the same integer); ``tokens =
    num_blocks // num_groups x block_size`` (``_report_kv_cache_config``).
    A request of ``max_model_len`` tokens takes ``cdiv(max_model_len,
    block_size)`` blocks in each full-attention group and
    ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
    block_size) + 1`` in each sliding-window group
    (``SlidingWindowSpec.max_memory_usage_bytes``); V1's maximum concurrency
    is ``num_blocks`` over that sum (``get_max_concurrency_for_kv_cache_config``),
    V0's ``num_blocks x block_size / max_model_len``. Under tensor
    parallelism vLLM keeps the fewest blocks over the ranks (``get_kv_cache_configs``):
    pass each rank's memory and take the minimum.

    Where vLLM refuses to start, this raises ``ValueError`` saying why: no
    whole block fits, one request of ``max_model_len`` tokens does not fit
    (concurrency below 1), a block size or tensor-parallel size vLLM does
    not accept, or layer kinds kvmath does not size as vLLM does
    (:data:`VLLM_LAYER_KINDS`).

    Parameters
    ----------
    model : Model
        The architecture (KV heads, head size, layers, windows, MLA widths).
    available_kv_bytes : float or array
        The rank's KV memory, bytes (as logged, or from
        :func:`vllm_available_kv_bytes`).
    max_model_len : int or array
        vLLM's ``--max-model-len``, tokens.
    block_size, kv_dtype, tensor_parallel :
        Tokens per block, cached element format, TP ranks.
    layers : int, optional
        Attention layers on this rank (a pipeline stage's share; models
        without sliding-window layers only). Default: all.
    max_num_batched_tokens : int, optional
        Default :func:`vllm_max_num_batched_tokens`.
    hybrid : bool
        V1's hybrid KV-cache manager (default on since v0.10; False for
        ``--disable-hybrid-kv-cache-manager``).
    engine : str
        ``"v1"`` or ``"v0"`` (:data:`VLLM_ENGINES`).

    Examples
    --------
    Qwen3-14B (40 layers, 8 KV heads of 128), LMCache issue #1739:
    "Available KV cache memory: 6.51 GiB", "GPU KV cache size: 42,656 tokens",
    "Maximum concurrency for 32,768 tokens per request: 1.30x":

    >>> from kvmath import Model
    >>> from kvmath.units import GiB
    >>> qwen3_14b = Model("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, attention="gqa")
    >>> kv = vllm_kv_cache(qwen3_14b, 6.51 * GiB, 32768)
    >>> kv.num_blocks, kv.tokens, round(kv.max_concurrency, 2)
    (2666, 42656, 1.3)
    """
    engine = choice("engine", engine, VLLM_ENGINES)
    hybrid = flag("hybrid", hybrid)
    avail = non_negative("available_kv_bytes", available_kv_bytes)
    mml = positive_int("max_model_len", max_model_len)
    _whole(mml, "max_model_len")
    block_size = one_int("block_size", block_size)
    if block_size not in VLLM_BLOCK_SIZES:
        raise ValueError(f"block_size must be one of vLLM's {VLLM_BLOCK_SIZES}, got {block_size}")
    mnbt = vllm_max_num_batched_tokens(mml, engine) if max_num_batched_tokens is None else \
        positive_int("max_num_batched_tokens", max_num_batched_tokens)
    page = vllm_page_bytes(model, block_size, kv_dtype, tensor_parallel)
    _check_bool("hybrid", hybrid)
    group_size, full_groups, sliding_groups = vllm_kv_groups(model, hybrid=hybrid and engine == "v1")
    if layers is not None:
        if sliding_groups:
            raise ValueError("layers (a pipeline stage's share) is supported for models without sliding-window groups")
        group_size = one_int("layers", layers)
        if group_size > model.n_layers:
            raise ValueError(f"layers ({group_size}) exceeds the model's {model.n_layers} layers")
    num_groups = full_groups + sliding_groups
    num_blocks = np.maximum(np.floor(np.floor(np.asarray(avail) / page) / group_size), 0)
    if np.any(num_blocks == 0):
        raise ValueError("available_kv_bytes holds no block of block_size tokens on every layer: vLLM refuses "
                         "to start (\"No available memory for the cache blocks\")")
    tokens = num_blocks // num_groups * block_size
    full_blocks = _cdiv(mml, block_size)
    if sliding_groups:
        window_blocks = _cdiv(np.minimum(model.sliding_window - 1 + np.asarray(mnbt), mml), block_size) + 1
    else:
        window_blocks = 0
    per_request = full_groups * full_blocks + sliding_groups * window_blocks
    concurrency = num_blocks / per_request if engine == "v1" else num_blocks * block_size / np.asarray(mml)
    refused = np.asarray(concurrency < 1)
    if refused.any():
        # V1: _check_enough_kv_cache_memory (vllm/v1/core/kv_cache_utils.py); V0: "The model's max seq len
        # ... is larger than the maximum number of tokens that can be stored in KV cache". vLLM logs the
        # figures first, so the message carries them.
        i = int(np.argmax(refused.ravel()))
        pick = lambda x: np.broadcast_to(x, refused.shape).ravel()[i]  # noqa: E731 - the refused element
        shown = f"{float(pick(concurrency)):.2f}"
        shown = f"{float(pick(concurrency)):.4f}" if shown == "1.00" else shown  # 0.998 is not "1.00x"
        raise ValueError(
            f"max_model_len {int(pick(mml)):,}: one request needs more KV cache than is available "
            f"(max concurrency {shown}x; {int(pick(num_blocks)):,} blocks, "
            f"{int(pick(tokens)):,} tokens); vLLM refuses to start: lower max_model_len or give it more memory")
    return EngineBudget(
        available_kv_bytes=plain(avail), page_bytes=page, group_size=group_size, num_groups=num_groups,
        num_blocks=_whole(num_blocks, "num_blocks"), tokens=_whole(tokens, "tokens"),
        blocks_per_request=_whole(per_request, "blocks_per_request"),
        max_concurrency=plain(concurrency), max_model_len=_whole(mml, "max_model_len"), block_size=block_size,
        max_num_batched_tokens=_whole(mnbt, "max_num_batched_tokens"),
    )


@checked
def vllm_engine(
    model,
    chip: Chip | ArrayLike,
    max_model_len: ArrayLike,
    *,
    gpu_memory_utilization: ArrayLike = GPU_MEMORY_UTILIZATION,
    block_size: int = BLOCK_SIZE,
    weights="bf16",
    kv_dtype: str | float = "bf16",
    tensor_parallel: int = 1,
    max_num_batched_tokens: ArrayLike | None = None,
    max_num_seqs: ArrayLike | None = None,
    weight_bytes: ArrayLike | None = None,
    activation_peak_bytes: ArrayLike | None = None,
    non_torch_bytes: ArrayLike = NON_TORCH_BYTES,
    hybrid: bool = True,
    engine: str = "v1",
) -> EngineBudget:
    """The KV cache vLLM sizes on ``chip``: memory profile, then blocks, tokens, concurrency.

    ``gpu_memory_utilization x total - weights - activation peak - non-torch``
    (:func:`vllm_available_kv_bytes`) on each of ``tensor_parallel`` ranks,
    then :func:`vllm_kv_cache`. Give the figures a vLLM log prints to
    reproduce it; the defaults are estimates:

    - total: :func:`runtime_total_bytes` of the chip; a number is the
      runtime total itself (what vLLM prints as ``total_gpu_memory``);
    - weights: ``model.weight_bytes_resident(weights) / tensor_parallel``
      (vocabulary-parallel embeddings, sharded layers; replicated norms
      ignored);
    - activation peak: :func:`vllm_activation_peak_bytes` at
      ``max_num_batched_tokens`` and ``max_num_seqs`` (``vllm serve``'s
      defaults for the chip, :func:`vllm_max_num_batched_tokens`);
    - non-torch: :data:`NON_TORCH_BYTES` (NCCL buffers at TP > 1 not included).

    CUDA graphs are captured after the budget is fixed, so their memory is
    not in it (``compile_or_warm_up_model``, ``vllm/v1/worker/gpu_worker.py``).

    Examples
    --------
    Llama-3-8B on one H100 under V0 with the default estimates (vLLM PR
    #10511 logged 53.29 GiB of KV memory from its measured overheads, 3.4%
    less):

    >>> from kvmath import Chip, Model
    >>> from kvmath.units import GiB
    >>> e = vllm_engine(Model.preset("llama-3-8b"), Chip.preset("h100-sxm"), 8192, engine="v0")
    >>> round(e.available_kv_bytes / GiB, 2), e.num_blocks, round(e.max_concurrency, 2)
    (55.09, 28204, 55.09)
    """
    engine = choice("engine", engine, VLLM_ENGINES)
    tp = one_int("tensor_parallel", tensor_parallel)
    _check_tensor_parallel(model, tp)
    mml = positive_int("max_model_len", max_model_len)
    total = _runtime_total(chip, "vllm_engine") if isinstance(chip, Chip) else positive("total_bytes", chip)
    util = fraction("gpu_memory_utilization", gpu_memory_utilization)
    non_torch = non_negative("non_torch_bytes", non_torch_bytes)
    _check_free_at_start(total, util, non_torch)
    large = engine == "v1" and _large_gpu(chip, total)
    mnbt = vllm_max_num_batched_tokens(mml, engine, large) if max_num_batched_tokens is None else \
        positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if max_num_seqs is None:
        max_num_seqs = 1024 if large else MAX_NUM_SEQS
    w = model.weight_bytes_resident(weights) / tp if weight_bytes is None else non_negative("weight_bytes", weight_bytes)
    act = vllm_activation_peak_bytes(model, mnbt, max_num_seqs, tensor_parallel=tp) \
        if activation_peak_bytes is None else non_negative("activation_peak_bytes", activation_peak_bytes)
    avail = vllm_available_kv_bytes(total, w, act, non_torch, util)
    kv = vllm_kv_cache(model, avail, mml, block_size=block_size, kv_dtype=kv_dtype, tensor_parallel=tp,
                       max_num_batched_tokens=mnbt, hybrid=hybrid, engine=engine)
    return EngineBudget(**{**kv.__dict__, "total_bytes": plain(total), "requested_bytes": plain(util * total),
                           "weight_bytes": plain(w), "activation_peak_bytes": plain(act),
                           "non_torch_bytes": plain(non_torch)})
