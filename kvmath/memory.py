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

#: What each budget counts, in words for a table's row: ``"device"`` is the
#: marketed figure, not what the device reports (review C11-6).
BUDGET_MEANINGS = {
    "device": "the marketed capacity",
    "reported": "the total the device reports (nvidia-smi)",
    "reserve": "the runtime's total less memory outside PyTorch",
    "engine": "vLLM's gpu_memory_utilization share of the runtime's total",
}

#: vLLM's default ``gpu_memory_utilization``: 0.9 in ``vllm/config.py``
#: ``CacheConfig`` and ``vllm/engine/arg_utils.py`` ``EngineArgs`` from v0.2
#: through v0.10 (PR #2162); the newest ``vllm/config/cache.py`` uses 0.92.
GPU_MEMORY_UTILIZATION = 0.9

#: vLLM's default block (page) size on CUDA, in tokens
#: (``CacheConfig.DEFAULT_BLOCK_SIZE = 16``, ``vllm/config/cache.py``).
BLOCK_SIZE = 16

#: The block size vLLM forces for MLA layers on Hopper and for DSA layers wherever its sparse backend runs:
#: ``CudaPlatform.check_and_update_config`` (``vllm/platforms/cuda.py``, v0.8 to v0.11 and later) sets
#: ``block_size = 64`` for the FlashMLA backend, the default MLA backend where FlashMLA runs (compute capability
#: 9.x: "Forcing kv cache block size to 64 for FlashMLA backend", logged by v0.8.3 and v0.10.1), and, last of its
#: block rules, for DeepSeek-V3.2's sparse backend whatever was asked and whatever the chip (``use_sparse =
#: hasattr(hf_config, "index_topk")``; ``if use_sparse and cache_config.block_size != 64: block_size = 64``,
#: "Forcing kv cache block size to 64 for FlashMLASparse backend"; read in vllm-project/vllm
#: ``vllm/platforms/cuda.py`` at commit 002db4951e0c4b326a559eb44b05698afd3e534a and in the v0.11-era versions
#: of the same file, where the rule is the same). Which chips that backend runs on: :data:`VLLM_SPARSE_MLA_MAJORS`.
MLA_BLOCK_SIZE = 64

#: Compute capability ``(major, minor)`` of each NVIDIA chip preset, which vLLM's MLA and DSA rules test (an NVIDIA
#: chip outside this table is refused by :func:`vllm_block_size`, not guessed). From NVIDIA's CUDA GPU Compute
#: Capability table (https://developer.nvidia.com/cuda/gpus; also ``nvidia-smi --query-gpu=compute_cap``, which
#: the CUDA Programming Guide's "Compute Capabilities" appendix points to): A100 8.0, RTX 3090 8.6; L4, L40S,
#: RTX 4090 8.9 (Ada); H100, H200 9.0 (Hopper); B200, GB200 10.0; B300, GB300 10.3 (Blackwell Ultra, sm_103:
#: vLLM logs "Device capability 10.3" on a B300, vllm-project/vllm issue #30630); RTX 5090 and RTX PRO 6000
#: Blackwell 12.0; GB10 (DGX Spark) 12.1 (vLLM PR #31740, "SM121/GB10"). The H800 and H20 are Hopper parts, 9.0
#: (deepseek-ai/FlashMLA, "for Hopper GPUs", gives its figures on the H800 SXM5; FlashMLA-ETAP is "for Hopper H20").
CUDA_COMPUTE_CAPABILITY = {
    "a100-40gb": (8, 0), "a100-80gb": (8, 0), "rtx-3090": (8, 6), "l4": (8, 9), "l40s": (8, 9),
    "rtx-4090": (8, 9), "h100-sxm": (9, 0), "h200": (9, 0), "h800": (9, 0), "h20": (9, 0),
    "b200": (10, 0), "b200-hgx": (10, 0), "gb200": (10, 0), "b300": (10, 3), "gb300": (10, 3),
    "rtx-5090": (12, 0), "rtx-pro-6000": (12, 0), "rtx-pro-6000-server": (12, 0), "dgx-spark": (12, 1),
}

#: The block vLLM v0.10.1-v0.11 uses for MLA (not DSA, which is :data:`MLA_BLOCK_SIZE`) on each chip preset where
#: it is not :data:`BLOCK_SIZE`, and the multiple an asked block must be or be replaced by it: derived from
#: :data:`CUDA_COMPUTE_CAPABILITY` by ``CudaPlatform.check_and_update_config``'s two rules. Compute capability 9.x:
#: FlashMLA's 64 (the default backend there; ``is_flashmla_supported``/``is_flashmla_dense_supported`` require
#: ``get_device_capability()[0] == 9``, "FlashMLA is only supported on Hopper devices", vllm/attention/ops/flashmla.py
#: at commit 9c3cc56087859a29c12a6ee4e4c62b89e4677b61 and in v0.11; ``block_size % 64 != 0`` -> 64). Compute
#: capability exactly 10.0: CUTLASS MLA's 128 ("Blackwell => Force CutlassMLA" under ``cls.is_device_capability(100)``,
#: and ``Platform.is_device_capability`` is "exactly the specified device capability", ``to_int() == 100``,
#: vllm/platforms/interface.py; the review of vLLM PR #21626, which made CUTLASS MLA the default, asked for
#: ``is_device_capability`` in place of ``has_device_capability``; ``block_size % 128 != 0`` -> 128). So the B300 and
#: GB300 (10.3) are neither: vLLM v0.10-v0.11 gives them no MLA block rule, picks Triton MLA and keeps the block asked
#: for, 16 by default, as on Ampere, Ada, consumer Blackwell and AMD (DeepSeek-V2-Lite on L4s logged 16-token
#: blocks, vLLM PR #20665). Read in the v0.10 and v0.11 versions of vllm/platforms/cuda.py (``check_and_update_config``
#: and ``get_attn_backend_cls``, where CUTLASS and FlashInfer MLA are picked only under ``is_device_capability(100)``).
#: Later vLLM differs: vLLM's SM103 support came with PR #30484 (December 2025), and at commit 002db495 the rule is
#: ``is_device_capability_family(100)`` (any 10.x), FlashInfer MLA by default (64 unless 32 or a multiple of 64 is
#: asked, for DeepSeek's ``qk_nope_head_dim`` 128; PR #32615, January 2026, which re-applied the reverted #32339) and CUTLASS MLA's 128 for other head
#: sizes or with decode context parallelism; which release first made 10.3 part of that rule was not found. kvmath
#: follows v0.10-v0.11.
MLA_BLOCK_BY_CHIP = {name: 64 if cc[0] == 9 else 128 for name, cc in CUDA_COMPUTE_CAPABILITY.items()
                     if cc[0] == 9 or cc == (10, 0)}

#: Compute capability majors on which vLLM serves DeepSeek-V3.2's DSA layers: 9 (Hopper) and 10 (datacenter
#: Blackwell), where its one sparse MLA backend for them, FlashMLASparse, runs (``is_flashmla_sparse_supported``:
#: ``get_device_capability()[0] not in (9, 10)`` -> "FlashMLA Sparse is only supported on Hopper and Blackwell
#: devices", vllm/attention/ops/flashmla.py, v0.11; later ``FlashMLASparseBackend.supports_compute_capability``,
#: ``capability.major in [9, 10]``, vllm/v1/attention/backends/mla/flashmla_sparse.py at commit 008a0c31dc02).
#: Elsewhere vLLM cannot serve the model: v0.11 selects that backend whatever the chip ("Using Sparse MLA backend")
#: and its kernels fail ("RuntimeError: Only SM90 and SM100 are supported" on an A100, vllm-project/vllm issue
#: #30036); later releases refuse at start-up ("No valid attention backend found", issue #31936 on RTX PRO 6000s).
#: A later Triton path admits 12.x under a condition (``_use_triton_sparse_mla()``, same file). v0.11's wheels built FlashMLA for sm_90a and
#: sm_100a only, which "will trigger errors on B300 (sm103a)" until PR #30705 (December 2025) built it for the 10.x
#: family: kvmath gives the block vLLM's rules set on 10.3 and does not model which build a B300 runs.
VLLM_SPARSE_MLA_MAJORS = (9, 10)

#: The one block vLLM's ROCm sparse MLA backend (DeepSeek-V3.2 on AMD chips) accepts: ``RocmPlatform
#: .get_attn_backend_cls`` asserts "Sparse MLA backend on ROCm only supports block size 1 for now"
#: (``vllm/platforms/rocm.py``), so vLLM starts only with ``--block-size 1`` there. The backend came after v0.11
#: (vLLM PR #26670), whose ROCm platform refuses sparse attention: this rule is that backend's as PR #26670 added it;
#: PR #41217 (2026) has it advertise blocks 1 and 64, which kvmath does not follow yet.
ROCM_DSA_BLOCK_SIZE = 1

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

#: Layer kinds whose vLLM sizing kvmath reproduces, and the KV-cache spec vLLM's V1 engine gives each
#: (``vllm/v1/kv_cache_interface.py``): ``full`` a ``FullAttentionSpec``, ``mla`` an ``MLAAttentionSpec``,
#: ``sliding`` a ``SlidingWindowSpec``, ``chunked`` (Llama 4's local layers) a ``ChunkedLocalAttentionSpec``,
#: ``linear`` (Gated DeltaNet, Mamba) a ``MambaSpec`` (one page per sequence holding its conv and recurrent
#: state), ``dsa`` (DeepSeek-V3.2) two ``MLAAttentionSpec``\ s, the latent's and the indexer's
#: (``DeepseekV32IndexerCache.get_kv_cache_spec``, ``vllm/model_executor/models/deepseek_v2.py``, v0.11: one
#: key vector of ``index_head_dim`` fp8 bytes plus an fp32 scale per 128, stored as uint8), and ``shared``
#: none (a layer with ``kv_sharing_target_layer_name`` gets no spec of its own in
#: ``GPUModelRunner.get_kv_cache_spec``, ``vllm/v1/worker/gpu_model_runner.py``: it reads its target's pages).
#: Every kind kvmath models is one of these; an unknown one would be refused by name.
VLLM_LAYER_KINDS = ("full", "sliding", "chunked", "linear", "mla", "dsa", "shared")

#: How vLLM caches a linear layer's state (``CacheConfig.mamba_cache_mode``; ``MambaSpec.max_memory_usage_bytes``
#: at commit 001cabc1): ``"none"`` one state page per request (prefix caching off, the default through v0.11),
#: ``"align"`` two (the running state and the one kept at the last block boundary; what vLLM selects for Gated
#: DeltaNet models when prefix caching is on, the default in later releases: "Mamba cache mode is set to 'align'"),
#: ``"all"`` one per attention block of ``max_model_len``. With ``"align"`` and ``"all"`` a state page spans an
#: attention block (``mamba_block_size``); with ``"none"``, ``max_model_len``.
VLLM_MAMBA_CACHE_MODES = ("none", "align", "all")

#: What vLLM's "GPU KV cache size: N tokens" line counts (``_report_kv_cache_config``,
#: ``vllm/v1/core/kv_cache_utils.py``): ``"blocks"``, ``num_blocks // num_groups x`` the smallest block size
#: (commit 001cabc1, v0.10-v0.20: the Qwen3.6 log of vLLM 0.20.0 prints 6,288 = 3 x 2,096 tokens);
#: ``"concurrency"``, ``int(max_concurrency x max_model_len)`` (v0.29.0, whose code says the block formula
#: "underestimates capacity" of hybrid models: it printed 314,187 = int(652 / 17 x 8,192); the switch falls between
#: v0.20 and v0.29, the releases in between are not known here).
VLLM_TOKEN_RULES = ("blocks", "concurrency")

#: Bytes per token of DeepSeek-V3.2's latent in vLLM's ``fp8_ds_mla`` cache format, which an fp8 KV cache becomes
#: for that model (``DeepseekV32ForCausalLM.verify_and_update_config``, ``vllm/model_executor/models/config.py``;
#: ``MLAAttentionSpec.real_page_size_bytes`` returns ``block_size x 656``): 512 fp8 latent values, four fp32
#: scales (16 B) and the 64 rope values in bf16 (128 B).
VLLM_FP8_DS_MLA_BYTES = 656

#: What vLLM's ``--kv-cache-dtype auto`` (its default) stores DeepSeek-V3.2's (DSA) cache in under the defaults
#: kvmath reproduces: its own fp8 format, not the model dtype. ``DeepseekV32ForCausalLM.verify_and_update_config``
#: (``vllm/model_executor/models/config.py``): "For DeepSeekV3.2, we use a custom fp8 format as default (i.e.
#: "auto")", ``if cache_dtype == "auto" or cache_dtype.startswith("fp8"): cache_dtype = "fp8_ds_mla"``, from vLLM
#: PR #25988 ("Fix default kv-cache-dtype default for DeepseekV3.2", merged 2025-09-30, in the v0.11 release cycle,
#: the first in which vLLM serves DeepSeek-V3.2; the code index holds it at commit 0144dd5b, a v0.11-era
#: file); vLLM's DeepSeek-V3.2 recipe says the same ("The default config uses a custom fp8 kvcache. You can also
#: use bfloat16 kvcache by specifying kv_cache_dtype=bfloat16"). Later versions of the same file map only an
#: explicit fp8 ("a custom fp8 format is used when fp8 kv-cache is enabled"), so "auto" there is the model's
#: bf16: pass ``kv_dtype="bf16"`` for them. Which tagged release made that change was not found.
VLLM_DSA_AUTO_KV = "fp8_ds_mla"

#: The vLLM release whose defaults kvmath's are: every default of :func:`vllm_kv_cache` and :func:`vllm_engine`
#: is what vLLM v0.10.2 to v0.11 does unless told otherwise (``gpu_memory_utilization`` 0.9, block 16 and 64 for
#: MLA, ``mamba_cache_mode`` "none", the hybrid manager off for chunked local attention, the "blocks" tokens
#: line, ``kv_dtype`` "auto": the model's dtype, and for DeepSeek-V3.2 v0.11's :data:`VLLM_DSA_AUTO_KV`); each
#: argument names what later releases do instead.
VLLM_DEFAULTS_VERSION = "v0.10.2-v0.11"

#: Where each rule of :func:`vllm_kv_cache` and :func:`vllm_engine` was read, with the release:
#:
#: * the attention block grown to hold a linear layer's state and the state padded to it:
#:   ``HybridAttentionMambaModelConfig.verify_and_update_config``, ``vllm/model_executor/models/config.py``,
#:   v0.10.2 and v0.11 (later releases moved it to ``Platform._align_hybrid_block_size``,
#:   ``vllm/platforms/interface.py``, with the same arithmetic);
#: * grouping, page unification, ``get_num_blocks``, the "blocks" tokens line and the concurrency:
#:   ``vllm/v1/core/kv_cache_utils.py`` and ``vllm/v1/kv_cache_interface.py`` at commit 001cabc1
#:   (https://github.com/vllm-project/vllm/blob/001cabc1be16a59a70d720ed61a13b678c060a18/vllm/v1/core/kv_cache_utils.py),
#:   the same arithmetic as v0.10.2 but for the group-size threshold (:data:`VLLM_GROUP_SIZE_RATIO`); the linear
#:   layers' cache modes, ``UniformTypeKVCacheSpecs`` (DSA) and the skipped shared-KV layers at the same commit;
#: * the "concurrency" tokens line: ``_report_kv_cache_config`` of a later ``kv_cache_utils.py`` ("GPU KV cache
#:   size in tokens = max_concurrency * max_model_len ... a naive num_blocks // num_groups * block_size formula
#:   underestimates capacity"), proposed after vLLM issue #40691 (v0.19.0 printing the block rule); the two
#:   published logs bracket the change: v0.20.0 prints the block rule, v0.29.0 the concurrency rule;
#: * DSA's indexer cache: ``DeepseekV32IndexerCache``, ``vllm/model_executor/models/deepseek_v2.py``, v0.11;
#: * the state's dtypes: ``MambaStateDtypeCalculator``, ``vllm/model_executor/layers/mamba/mamba_utils.py``,
#:   v0.10.2, and ``Qwen3_5ForConditionalGenerationConfig`` (``models/config.py``, the Qwen3.5 releases);
#: * the model dtype: ``_resolve_auto_dtype``, ``vllm/config/model.py`` ("Downcast for float32 models");
#: * the block size for MLA and DSA: ``CudaPlatform.check_and_update_config``, ``vllm/platforms/cuda.py``
#:   (v0.10- and v0.11-era versions: FlashMLA 64 on compute capability 9.x, CUTLASS MLA 128 on exactly 10.0, the
#:   sparse backend 64 wherever it runs, 9.x and 10.x: :data:`MLA_BLOCK_BY_CHIP`, :data:`VLLM_SPARSE_MLA_MAJORS`;
#:   commit 002db495 for the later family rule), and ``RocmPlatform.get_attn_backend_cls``, ``vllm/platforms/rocm.py``
#:   (DSA: block size 1 only);
#: * the hybrid manager off for chunked local attention: ``VllmConfig.__post_init__`` (vLLM PR #21761, v0.10.0),
#:   until ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` defaulted to 1 in a later release (PR #29627).
#:
#: Published start-up logs check the full-attention, MLA and Gated DeltaNet rules (tests/unit/test_memory.py,
#: tests/unit/test_vllm_hybrid.py, tests/data/vllm_logs.json); the Mamba-2 (with its group replication under TP),
#: chunked-local, sliding-window, DSA and shared-KV rules are checked by hand against the code above only.
VLLM_HYBRID_SOURCE = ("vllm-project/vllm: models/config.py v0.10.2-v0.11 (block size for linear states); "
                      "v1/core/kv_cache_utils.py and v1/kv_cache_interface.py @ 001cabc1 (groups, blocks, "
                      "concurrency, tokens line 'blocks'; a commit, not a tagged release, whose rules reproduce the "
                      "v0.10.2 and v0.20.0 logs); kv_cache_utils.py as vLLM v0.29.0 runs it (tokens line "
                      "'concurrency'; the switch falls between v0.20.0 and v0.29.0); layers/mamba/mamba_utils.py v0.10.2 (state dtypes); "
                      "config/model.py _resolve_auto_dtype (fp32 -> bf16); platforms/cuda.py v0.10-v0.11 (MLA block 64 on "
                      "compute capability 9.x, 128 on exactly 10.0; DSA 64 on 9.x and 10.x, the only chips its sparse "
                      "backend runs on); "
                      "VllmConfig.__post_init__ v0.10.0-v0.11 (no hybrid manager for chunked local attention)")

#: vLLM's threshold for grouping layers by the most of any kind rather than the fewest: the most are used where
#: they are under this many times the fewest (``_get_kv_cache_groups_uniform_page_size``). 1.5 at commit 001cabc1;
#: v0.10 to v0.11 used 1.25 (the code's comment: "gpt-oss-20b + eagle, with 12 sw + 13 full"). The two differ only
#: for layer ratios in [1.25, 1.5), which no model in tests/data has (tests/unit/test_vllm_hybrid.py checks).
VLLM_GROUP_SIZE_RATIO = 1.5

#: vLLM's model dtypes (``--dtype``): "auto" keeps a checkpoint's bf16 or fp16 and runs a float32 one in bf16
#: (``_resolve_auto_dtype``: "Downcast for float32 models" to the platform's first supported dtype, bf16 on CUDA
#: GPUs of compute capability 8.0 or more; fp16, also 2 bytes, on older ones).
VLLM_DTYPES = ("auto", "bf16", "fp16", "fp32")

#: Tokens vLLM rounds the attention block size up to a multiple of when it enlarges it to hold a linear
#: layer's state (``kernel_block_alignment_size`` in ``verify_and_update_config``): 16 for softmax
#: attention (FlashAttention's block sizes; 32 on Blackwell with FlashInfer and head size 256, which
#: ``block_alignment=32`` reproduces), 64 for MLA (128 with the CUTLASS MLA backend).
VLLM_BLOCK_ALIGNMENT = {"attention": 16, "mla": 64}


def _vllm_kv_format(model, kv_dtype, dtype: str = "auto") -> tuple[float, bool, str]:
    """``(bytes per cached element, ds_mla, name)`` of vLLM's ``--kv-cache-dtype kv_dtype`` for ``model``.

    "auto" (vLLM's default) is the model dtype (``--dtype``; "auto": a 2-byte bf16 or fp16, a float32 checkpoint
    downcast to bf16), except for a model with DSA layers, which vLLM v0.11 stores in :data:`VLLM_DSA_AUTO_KV`.
    An fp8 format makes a DSA latent ``fp8_ds_mla`` in every release (``ds_mla`` True: :data:`VLLM_FP8_DS_MLA_BYTES`
    a token and layer). Another format name, or a number of bytes, is used as given."""
    dsa = any(s.kind == "dsa" for s in model.layer_specs())
    if isinstance(kv_dtype, str) and kv_dtype.strip().lower() == "auto":
        if dsa:
            return 1.0, True, VLLM_DSA_AUTO_KV
        fmt = "bf16" if dtype == "auto" else dtype
        return float(dtype_bytes(fmt)), False, fmt
    if isinstance(kv_dtype, str):
        b = float(dtype_bytes(kv_dtype, argument="kv_dtype"))
        ds_mla = dsa and kv_dtype.lower().startswith("fp8")
        return b, ds_mla, VLLM_DSA_AUTO_KV if ds_mla else kv_dtype.strip().lower()
    b = float(positive("kv_dtype", kv_dtype))
    return b, False, f"{b:g} B an element"


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
    if np.any(util * total <= non_torch):  # vLLM's share would not even cover the process's own memory
        raise ValueError(f"gpu_memory_utilization {_show_fraction(util)} of the runtime total ({_show_bytes(total)}) "
                         f"leaves nothing for the weights, activations and KV cache after non_torch_bytes "
                         f"({_show_bytes(non_torch)}); raise it above {_show_fraction(non_torch / total)}")
    return plain(util * total - non_torch)


def _show_bytes(x: ArrayLike) -> str:
    return f"{x:.6g} B" if np.ndim(x) == 0 else f"an array of shape {np.shape(x)}"


def _show_fraction(x: ArrayLike) -> str:
    return f"{x:.4g}" if np.ndim(x) == 0 else f"(an array of shape {np.shape(x)})"


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


def _check_tensor_parallel(model, tp: int) -> None:
    """vLLM's refusals: heads not divisible by TP, KV heads neither divisible by TP nor dividing it,
    linear-attention value heads not divisible by TP.

    ``ModelConfig.verify_with_parallel_config`` ("Total number of attention heads ... must be divisible by
    tensor parallel size"); ``QKVParallelLinear`` (``vllm/model_executor/layers/linear.py``) splits
    ``n_kv_heads`` by TP, or replicates them ``tp / n_kv_heads`` times, with ``divide``, which asserts; so
    does ``MambaStateShapeCalculator.gated_delta_net_state_shape`` (``divide(num_v_heads, tp)``,
    ``vllm/model_executor/layers/mamba/mamba_utils.py``).
    """
    if model.n_heads % tp:
        raise ValueError(f"tensor_parallel {tp} does not divide the {model.n_heads} attention heads; vLLM refuses it")
    kv = model.n_kv_heads
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        raise ValueError(f"tensor_parallel {tp} neither divides the {kv} KV heads nor is a multiple of them; "
                         "vLLM refuses it")
    if model.layers is not None:
        for heads in {s.n_heads for s in model.layers if s.kind == "linear" and s.n_heads}:
            if heads % tp:
                raise ValueError(f"tensor_parallel {tp} does not divide the {heads} heads of the linear-attention "
                                 "state; vLLM refuses it")


@checked
def vllm_page_bytes(model, block_size: int | None = None, kv_dtype: str | float = "auto",
                    tensor_parallel: int = 1) -> int:
    """Bytes of one KV-cache block of one layer on one rank, as vLLM allocates it.

    Standard attention: ``2 x block_size x kv_heads_per_rank x head_size x
    dtype`` (``AttentionSpec.real_page_size_bytes``,
    ``vllm/v1/kv_cache_interface.py``), with ``kv_heads_per_rank = max(1,
    n_kv_heads // tensor_parallel)`` (``ModelConfig.get_num_kv_heads``): a
    cache with fewer KV heads than ranks is replicated. MLA: one latent of
    ``kv_lora_rank + qk_rope_dim`` per token, no factor 2
    (``MLAAttentionSpec``; ``get_head_size`` returns ``kv_lora_rank +
    qk_rope_head_dim``, ``get_num_kv_heads`` returns 1), the same on every
    rank. ``block_size``: the one asked for, as vLLM uses it on CUDA (:func:`vllm_block_size`: None gives
    vLLM's default; a DSA model's is 64 whatever was asked). ``kv_dtype``: vLLM's ``--kv-cache-dtype``, "auto"
    (the default) the model's 2-byte dtype, or for DeepSeek-V3.2 (DSA) v0.11's ``fp8_ds_mla``,
    :data:`VLLM_FP8_DS_MLA_BYTES` a token (:data:`VLLM_DSA_AUTO_KV`; the indexer's keys are a page of their own).

    Examples
    --------
    >>> from kvmath import Model
    >>> vllm_page_bytes(Model.preset("llama-3-8b"))               # 16 x 2 x 8 x 128 x 2
    65536
    >>> vllm_page_bytes(Model.preset("llama-3-8b"), tensor_parallel=16)  # 8 heads, 16 ranks: one each
    8192
    >>> vllm_page_bytes(Model.preset("deepseek-v3"), tensor_parallel=8)  # 64 x 576 x 2 on every rank
    73728

    A tensor-parallel size vLLM refuses raises ``ValueError`` (:func:`vllm_kv_cache` says which).
    """
    from .models import Model

    if not isinstance(model, Model):
        raise ValueError(f"model must be a kvmath Model, got {model!r}")
    block_size = vllm_block_size(model, None, block_size)  # the block vLLM uses (DSA: 64 whatever was asked)
    tp = one_int("tensor_parallel", tensor_parallel)
    _check_tensor_parallel(model, tp)
    b, ds_mla, _ = _vllm_kv_format(model, kv_dtype)
    if ds_mla:
        return _whole(block_size * VLLM_FP8_DS_MLA_BYTES)
    if _model(model).attention == "mla":
        elems = model.kv_elems_per_token_per_layer()
    else:
        elems = 2 * max(1, model.n_kv_heads // tp) * model.head_dim
    return _whole(block_size * elems * b)


def _cuda_capability(chip: Chip) -> tuple[int, int]:
    """An NVIDIA chip's compute capability (:data:`CUDA_COMPUTE_CAPABILITY`); ``ValueError`` for one not there."""
    cc = CUDA_COMPUTE_CAPABILITY.get(chip.name)
    if cc is None:
        raise ValueError(f"chip {chip.name!r}: kvmath knows the compute capability only of the NVIDIA presets "
                         "(kvmath.memory.CUDA_COMPUTE_CAPABILITY), and vLLM's block for MLA and DSA caches depends "
                         "on it: use a preset, or chip=None for vLLM's rules without a chip")
    return cc


def vllm_block_size(model, chip: Chip | None = None, block_size: int | None = None) -> int:
    """The block (tokens) vLLM uses for ``model`` on ``chip`` when asked for ``block_size`` (None: not asked).

    vLLM v0.10-v0.11's rules (``CudaPlatform.check_and_update_config``, ``vllm/platforms/cuda.py``): a model with
    neither MLA nor DSA layers keeps the block asked for, :data:`BLOCK_SIZE` by default. MLA: on an NVIDIA chip of
    compute capability 9.x (Hopper: FlashMLA) a block that is not a multiple of 64 becomes 64, and on one of
    exactly 10.0 (B200, GB200: CUTLASS MLA) one that is not a multiple of 128 becomes 128, the default included
    (:data:`MLA_BLOCK_BY_CHIP`); on every other chip, the B300 and GB300 (10.3) among them, the block asked for,
    16 by default; without a chip, :data:`MLA_BLOCK_SIZE` by default (Hopper's) and an asked block as given.
    DSA (DeepSeek-V3.2): 64 whatever was asked (the sparse backend's rule, applied last) on the NVIDIA chips its
    sparse backend runs on (compute capability 9.x and 10.x, :data:`VLLM_SPARSE_MLA_MAJORS`) and where no chip
    is given; on other NVIDIA chips (Ampere, Ada, consumer Blackwell) vLLM has no backend for DSA and cannot
    serve the model, and this raises ``ValueError`` naming the chip; on AMD chips vLLM's ROCm sparse backend
    takes :data:`ROCM_DSA_BLOCK_SIZE` only, so any other block (the default included) raises ``ValueError``, as
    vLLM refuses to start; on other chips vLLM's DSA block is not known to kvmath, and this raises ``ValueError``
    saying so. An NVIDIA chip kvmath has no compute capability for (not a preset) raises ``ValueError`` for MLA
    and DSA models.

    Examples
    --------
    >>> from kvmath import Chip, Model
    >>> vllm_block_size(Model.preset("llama-3-8b")), vllm_block_size(Model.preset("deepseek-v3"))
    (16, 64)
    >>> v3 = Model.preset("deepseek-v3")
    >>> [vllm_block_size(v3, Chip.preset(c)) for c in ("h100-sxm", "b200", "b300", "l4")]  # 9.0, 10.0, 10.3, 8.9
    [64, 128, 16, 16]
    >>> vllm_block_size(Model.preset("deepseek-v3.2"), Chip.preset("b200"), 16)   # DSA: 64 whatever was asked
    64
    >>> vllm_block_size(Model.preset("deepseek-v3.2"), Chip.preset("l4"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: deepseek-v3.2 has DSA layers, which vLLM cannot serve on l4 (compute capability 8.9): ...
    """
    if chip is not None:
        instance("chip", chip, Chip, "a Chip (Chip.preset(name))")
    if block_size is not None:
        block_size = int(one_int("block_size", block_size))
        if block_size not in VLLM_BLOCK_SIZES:
            raise ValueError(f"block_size must be one of vLLM's {VLLM_BLOCK_SIZES}, got {block_size}")
    kinds = {s.kind for s in _model(model).layer_specs()}
    if "dsa" in kinds:
        vendor = None if chip is None else chip.vendor
        if vendor is None:
            return MLA_BLOCK_SIZE
        if vendor == "nvidia":
            major, minor = _cuda_capability(chip)
            if major not in VLLM_SPARSE_MLA_MAJORS:
                raise ValueError(f"{model.name} has DSA layers, which vLLM cannot serve on {chip.name} (compute "
                                 f"capability {major}.{minor}): its sparse MLA backend (FlashMLASparse, the only one "
                                 "for them) runs on compute capability 9.x and 10.x only (Hopper, datacenter "
                                 "Blackwell); use such a chip")
            return MLA_BLOCK_SIZE
        if vendor == "amd":
            if block_size != ROCM_DSA_BLOCK_SIZE:
                raise ValueError(f"block_size {block_size if block_size is not None else 'default'}: vLLM's sparse MLA "
                                 f"backend on ROCm ({chip.name}), added after v0.11 (vLLM PR #26670; v0.11 has none), takes "
                                 f"block size {ROCM_DSA_BLOCK_SIZE} only (RocmPlatform.get_attn_backend_cls, "
                                 "vllm/platforms/rocm.py) and vLLM refuses to "
                                 f"start otherwise: pass block_size={ROCM_DSA_BLOCK_SIZE}")
            return ROCM_DSA_BLOCK_SIZE
        raise ValueError(f"{model.name} has DSA layers, which kvmath does not size as vLLM does on {chip.name}: it "
                         f"knows vLLM's block for them on NVIDIA chips of compute capability 9.x and 10.x "
                         f"({MLA_BLOCK_SIZE}) and on AMD chips ({ROCM_DSA_BLOCK_SIZE}) only")
    if "mla" not in kinds:
        return BLOCK_SIZE if block_size is None else block_size
    if chip is None:
        return MLA_BLOCK_SIZE if block_size is None else block_size
    if chip.vendor == "nvidia":
        _cuda_capability(chip)  # an NVIDIA chip kvmath has no compute capability for is refused, not guessed
    forced = MLA_BLOCK_BY_CHIP.get(chip.name)
    if forced is None:
        return BLOCK_SIZE if block_size is None else block_size
    return forced if block_size is None or block_size % forced else block_size


def vllm_model_dtype(stored: str, dtype: str = "auto") -> str:
    """The dtype vLLM runs weights (and states) stored in ``stored`` in, under ``--dtype dtype`` (:data:`VLLM_DTYPES`).

    "auto" keeps bf16 and fp16 and downcasts fp32 to bf16 (``_resolve_auto_dtype``); any other ``dtype`` is used
    as given. Formats that are not plain floats (fp8, mxfp4, int4 groups) are quantized and kept as stored.

    Examples
    --------
    >>> vllm_model_dtype("fp32"), vllm_model_dtype("fp16"), vllm_model_dtype("fp32", "fp32"), vllm_model_dtype("mxfp4")
    ('bf16', 'fp16', 'fp32', 'mxfp4')
    """
    from .formats import get_format

    dtype = choice("dtype", dtype, VLLM_DTYPES)
    stored = get_format(stored, argument="stored").name
    if stored not in _FLOAT_FORMATS:
        return stored
    return ("bf16" if stored == "fp32" else stored) if dtype == "auto" else dtype


#: Weight formats vLLM's ``--dtype`` applies to (the others are quantized and loaded as stored).
_FLOAT_FORMATS = ("bf16", "fp16", "fp32")


def _vllm_weights(weights, dtype: str):
    """A weights argument (a format, or ``{group: format}``) as vLLM loads it under ``--dtype dtype``."""
    def loaded(fmt):  # a number is bytes per weight, as stored
        return vllm_model_dtype(fmt, dtype) if isinstance(fmt, str) else fmt

    return {group: loaded(fmt) for group, fmt in weights.items()} if isinstance(weights, dict) else loaded(weights)


def _vllm_state_bytes(spec, dtype: str, mamba_ssm_cache_dtype: str, tp: int = 1) -> float:
    """A linear layer's state per sequence on one of ``tp`` ranks as vLLM keeps it (``MambaStateDtypeCalculator``,
    ``mamba_utils.py``, v0.10.2): the convolution's inputs in ``mamba_cache_dtype`` "auto", the model dtype; the
    recurrent state in ``mamba_ssm_cache_dtype``, whose "auto" is the convolution's, or the config's
    ``mamba_ssm_dtype`` where it names one (``Qwen3_5ForConditionalGenerationConfig``). Shards as
    ``MambaStateShapeCalculator`` does: the recurrent state's heads over ``tp``, the convolution's channels over
    ``tp`` after Mamba-2's B/C groups are replicated where ``tp`` does not divide them
    (:meth:`kvmath.layers.LayerSpec.conv_elems_per_rank`). A layer given in bytes only is split evenly."""
    from .units import dtype_bytes as width

    if not (spec.conv_elems or spec.ssm_elems):
        return spec.state_bytes / tp
    conv = vllm_model_dtype(spec.state_dtype, dtype)
    ssm = (spec.ssm_dtype or conv) if mamba_ssm_cache_dtype == "auto" else mamba_ssm_cache_dtype
    return spec.conv_elems_per_rank(tp) * width(conv) + spec.ssm_elems / tp * width(ssm)


def _hybrid_default(model) -> bool:
    """Whether vLLM v0.10-v0.11 turns its hybrid KV-cache manager on by default: yes, unless the model has chunked
    local attention (``VllmConfig.__post_init__`` turns it off for Llama 4 unless
    ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``, vLLM PR #21761: its three chunked groups cost
    latency)."""
    return not any(s.kind == "chunked" for s in model.layer_specs())


def _layer_types(model, tp: int, kv_bytes: float, hybrid: bool, ds_mla: bool = False, dtype: str = "auto",
                 mamba_ssm_cache_dtype: str = "auto") -> dict:
    """vLLM's KV-cache spec of each layer on one rank, identical layers counted, in the order the layers first
    show them (vLLM's ``same_type_layers`` keeps that order).

    Keys are ``(kind, window, bytes)``: bytes of one token in one layer for attention kinds
    (``2 x max(1, kv_heads // tp) x head_dim x kv_bytes``; MLA's latent, unsplit), of one sequence's state
    for ``linear`` (:func:`_vllm_state_bytes` on one of ``tp`` ranks: ``gated_delta_net_state_shape`` splits the
    conv channels and the value heads by TP; ``mamba2_state_shape`` first replicates the B/C groups TP does not
    divide). A ``dsa`` layer gives two: its latent (``"dsa"``; :data:`VLLM_FP8_DS_MLA_BYTES` where
    ``ds_mla``, vLLM's format for an fp8 cache of it) and its indexer's keys (``"index"``, ``index_bytes`` in
    their own format whatever the KV dtype), two layers to vLLM. A ``shared`` layer gives none. Without the
    hybrid manager, sliding and chunked layers become full attention (``unify_hybrid_kv_cache_specs``,
    ``vllm/v1/core/kv_cache_utils.py``) and linear layers cannot be unified: vLLM raises "Hybrid KV cache
    manager is disabled but failed to convert the KV cache specs to one unified type", and so does this.
    """
    types: dict = {}

    def add(key):
        types[key] = types.get(key, 0) + 1

    for spec in model.layer_specs():
        kind = spec.kind
        if kind not in VLLM_LAYER_KINDS:
            raise ValueError(f"{model.name} has {kind!r} layers, which kvmath does not size as vLLM does "
                             f"(it sizes {', '.join(VLLM_LAYER_KINDS)})")
        if kind == "shared":
            continue  # no spec of its own: it reads an earlier layer's pages
        if kind == "linear":
            if not hybrid:
                raise ValueError(f"{model.name} has linear-attention layers: vLLM keeps their state in its own "
                                 "pages and refuses to start with the hybrid KV-cache manager disabled")
            add(("linear", None, _vllm_state_bytes(spec, dtype, mamba_ssm_cache_dtype, tp)))
        elif kind == "mla":
            add(("mla", None, spec.latent_dim * kv_bytes))
        elif kind == "dsa":
            add(("dsa", None, VLLM_FP8_DS_MLA_BYTES if ds_mla else spec.latent_dim * kv_bytes))
            add(("index", None, spec.index_bytes))
        else:
            per_token = 2 * max(1, spec.n_kv_heads // tp) * spec.head_dim * kv_bytes
            add((kind, spec.window, per_token) if hybrid and kind != "full" else ("full", None, per_token))
    if not types:
        raise ValueError(f"{model.name} has no layer that holds a cache of its own")
    return types


#: Kinds of key vLLM sizes as full attention (a ``FullAttentionSpec`` or a subclass): layers of these kinds
#: alone, of whatever page sizes, form one group (``UniformTypeKVCacheSpecs``, ``vllm/v1/kv_cache_interface.py``).
_FULL_TYPE = ("full", "mla", "dsa", "index")


def _vllm_layout(model, block_size: int, kv_bytes: float, tp: int, hybrid: bool, alignment: int | None,
                 ds_mla: bool = False, dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto"):
    """vLLM V1's KV-cache groups for one rank: ``(groups, group_size, page_bytes, block_sizes, state_bytes)``.

    ``groups`` lists one ``(kind, window, bytes)`` key per KV-cache group, ``block_sizes`` each group's
    tokens per block (None for a linear group: its state page, whose span depends on the cache mode),
    ``state_bytes`` a linear layer's state before padding (None without linear layers). Layers that vLLM
    sizes as full attention but with different page sizes (DSA's latent and indexer keys) form one group of
    group size 1 whose page is one block of all of them (``UniformTypeKVCacheSpecs``). Otherwise:

    1. Linear layers present: the attention block size becomes ``align x cdiv(state, align x attention bytes
       per token)`` where the block size asked for is smaller, and the state page is padded to that
       attention page (``HybridAttentionMambaModelConfig.verify_and_update_config``, vLLM v0.10.2-v0.11).
    2. One spec for every layer: one group of all layers. Otherwise pages are unified to the largest by
       multiplying the block size of smaller ones (``unify_kv_cache_spec_page_size``; a page that does
       not divide the largest is refused, as vLLM raises NotImplementedError), and each spec's layers fill
       ``cdiv(layers, group_size)`` groups, ``group_size`` the fewest layers of any spec, or the most where
       that is under :data:`VLLM_GROUP_SIZE_RATIO` times the fewest (``_get_kv_cache_groups_uniform_page_size``).
    """
    types = _layer_types(model, tp, kv_bytes, hybrid, ds_mla, dtype, mamba_ssm_cache_dtype)
    if len(types) > 1 and all(k[0] in _FULL_TYPE for k in types):
        # one kind of attention with different page sizes (DSA's latent and indexer keys): one group whose
        # block spans every layer, num_blocks = available // (the sum of the pages) (get_kv_cache_config_from_groups)
        key = next(iter(types))
        page = sum(count * block_size * k[2] for k, count in types.items())
        return [key], 1, _whole(page, "page_bytes"), {key: block_size}, None
    attention = [k for k in types if k[0] != "linear"]
    linear = [k for k in types if k[0] == "linear"]
    state = max(k[2] for k in linear) if linear else None
    state_page = state
    if linear and attention:
        per_token = attention[0][2]  # vLLM sizes it from the model-wide heads (get_num_kv_heads, get_head_size)
        align = alignment or VLLM_BLOCK_ALIGNMENT["mla" if attention[0][0] == "mla" else "attention"]
        block_size = max(block_size, int(align * _cdiv(state, align * per_token)))
        state_page = block_size * per_token
    pages = {k: (state_page if k[0] == "linear" else block_size * k[2]) for k in types}
    blocks = {k: (None if k[0] == "linear" else block_size) for k in types}
    if len(types) == 1:
        (key, count), = types.items()
        return [key], count, _whole(pages[key], "page_bytes"), blocks, state
    largest = max(pages.values())
    for k, page in pages.items():
        if largest % page:
            raise ValueError(f"{model.name}: a {k[0]} page of {page:,.0f} B does not divide the largest page "
                             f"({largest:,.0f} B); vLLM cannot unify the page sizes and refuses to start")
        if blocks[k] is not None:
            blocks[k] *= int(largest // page)
    fewest, most = min(types.values()), max(types.values())
    size = most if most < VLLM_GROUP_SIZE_RATIO * fewest else fewest
    groups = [k for k, count in types.items() for _ in range(int(_cdiv(count, size)))]
    return groups, size, _whole(largest, "page_bytes"), blocks, state


@checked
def vllm_kv_groups(model, hybrid: bool | None = None) -> tuple[int, tuple[str, ...]]:
    """How vLLM V1 groups the layers: ``(group_size, kinds)``, one kind per KV-cache group.

    One kind of layer: one group of all of them. Mixed kinds (the hybrid KV-cache manager): each kind
    fills ``cdiv(layers, group_size)`` groups of ``group_size`` layers, the last padded, where
    ``group_size`` is the fewest layers of any kind, or the most where that is under
    :data:`VLLM_GROUP_SIZE_RATIO` times the fewest (``_get_kv_cache_groups_uniform_page_size``,
    ``vllm/v1/core/kv_cache_utils.py``). Every group draws from one pool of blocks, ``group_size`` layers'
    pages per block. ``hybrid=False`` (``--disable-hybrid-kv-cache-manager``, V0, V1 before the hybrid
    manager) sizes sliding and chunked layers as full attention; None, vLLM v0.10-v0.11's default (off for
    chunked local attention, :func:`_hybrid_default`). Groups are listed in the order their kind first appears.

    Examples
    --------
    >>> from kvmath import Model
    >>> vllm_kv_groups(Model.preset("gemma-2-9b"))        # 21 local + 21 global layers, local first
    (21, ('sliding', 'full'))
    >>> vllm_kv_groups(Model.preset("gemma-2-9b"), hybrid=False)
    (42, ('full',))

    Qwen3-Next's layout: three Gated DeltaNet layers (a 1,097,728-byte state over 32 value heads) to every
    full-attention one, 48 layers: three linear groups of 12 and one full group:

    >>> from kvmath.layers import LayerSpec
    >>> gdn, full = LayerSpec("linear", n_heads=32, state_bytes=1_097_728), LayerSpec("full", 16, 2, 256)
    >>> next80 = Model("qwen3-next-layout", 48, 2048, 16, 2, 256, 5120, 151936, attention="gqa",
    ...                layers=((gdn,) * 3 + (full,)) * 12)
    >>> vllm_kv_groups(next80)
    (12, ('linear', 'linear', 'linear', 'full'))
    """
    _model(model)
    hybrid = _hybrid_default(model) if hybrid is None else flag("hybrid", hybrid)
    groups, size, _, _, _ = _vllm_layout(model, BLOCK_SIZE, 2, 1, hybrid, None)
    return size, tuple(k[0] for k in groups)


def _blocks_per_request(key, block: int | None, mml: ArrayLike, mnbt: ArrayLike, mamba_cache_mode: str = "none",
                        attention_block: int = BLOCK_SIZE) -> ArrayLike:
    """Blocks one request of ``max_model_len`` tokens takes in one group (``max_memory_usage_bytes`` / page).

    Full, MLA and DSA: ``cdiv(max_model_len, block)`` (``FullAttentionSpec``); sliding: ``cdiv(min(window - 1
    + max_num_batched_tokens, max_model_len), block) + 1`` (``SlidingWindowSpec``); chunked: ``cdiv(min(chunk
    + max_num_batched_tokens, max_model_len), block)`` (``ChunkedLocalAttentionSpec``); linear: its state
    pages, one with ``mamba_cache_mode`` "none", two with "align", ``cdiv(max_model_len, attention block)``
    with "all" (``MambaSpec``, no speculative blocks; ``vllm/v1/kv_cache_interface.py`` at commit 001cabc1).
    """
    kind, window, _ = key
    if kind == "linear":
        if mamba_cache_mode == "all":
            return _cdiv(mml, attention_block)
        return np.full_like(np.asarray(mml), 2 if mamba_cache_mode == "align" else 1)
    if kind == "sliding":
        return _cdiv(np.minimum(window - 1 + np.asarray(mnbt), mml), block) + 1
    if kind == "chunked":
        return _cdiv(np.minimum(window + np.asarray(mnbt), mml), block)
    return _cdiv(mml, block)


def _request_blocks(groups, blocks: dict, block_size: int, mml: ArrayLike, mnbt: ArrayLike, mamba_cache_mode: str):
    """``(attention_block, blocks, per_request)``: the attention block size, each group's tokens per block (a
    linear group's state page spanning one attention block where ``mamba_cache_mode`` is not "none":
    ``mamba_block_size``), and the blocks one request of ``mml`` tokens takes summed over ``groups``."""
    attention_block = min((bs for bs in blocks.values() if bs is not None), default=block_size)
    if mamba_cache_mode != "none":
        blocks = {k: (attention_block if bs is None else bs) for k, bs in blocks.items()}
    per_request = sum(_blocks_per_request(k, blocks[k], mml, mnbt, mamba_cache_mode, attention_block)
                      for k in groups)
    return attention_block, blocks, per_request


@checked
def vllm_request_kv_bytes(
    model, tokens: ArrayLike, *, kv_dtype: str | float = "auto", block_size: int | None = None,
    tensor_parallel: int = 1, max_num_batched_tokens: ArrayLike | None = None, hybrid: bool = True,
    mamba_cache_mode: str = "none",
) -> ArrayLike:
    """Bytes of KV cache vLLM's V1 engine sets aside on one rank for one request of ``tokens`` tokens.

    The sum over the KV-cache groups of each layer spec's ``max_memory_usage_bytes`` at ``max_model_len =
    tokens`` (``vllm/v1/kv_cache_interface.py``): the most the request's pages can take from the block pool
    at any step of it, the figure vLLM's concurrency rule divides the pool by
    (``get_max_concurrency_for_kv_cache_config``, ``vllm/v1/core/kv_cache_utils.py``, ``num_layer_per_group``
    times each group's largest spec; at commit 001cabc1 the start-up check, ``check_enough_kv_cache_memory``,
    sums the layers' own specs instead, without the padding of a group that is not full). What vLLM allocates, not the elements times their width: whole
    blocks of ``page_bytes`` per layer, ``group_size`` layers a block (:func:`vllm_kv_cache` gives each
    kind's count), in each group

    - full attention, MLA and DSA (``FullAttentionSpec``): ``cdiv(tokens, block_size)`` blocks, those that
      hold the request's tokens, the last one partly filled unless ``tokens`` is a multiple of the block;
    - a sliding window of ``w`` tokens (``SlidingWindowSpec``): ``cdiv(min(w - 1 + max_num_batched_tokens,
      tokens), block_size) + 1`` blocks, the window's last ``w - 1`` tokens and one step's newly scheduled
      tokens, plus one block because the window need not start where a block does. That is more than the
      window's tokens fill (one block more even for a request shorter than the window): a bound on what
      the layer holds at any step of the request, as vLLM frees the blocks a window has passed
      (``remove_skipped_blocks``, ``vllm/v1/core/single_type_kv_cache_manager.py``);
    - chunked local attention of chunks of ``c`` (``ChunkedLocalAttentionSpec``): ``cdiv(min(c +
      max_num_batched_tokens, tokens), block_size)`` blocks;
    - linear attention (``MambaSpec``): its state pages, one with ``mamba_cache_mode`` "none", two with
      "align", ``cdiv(tokens, attention block)`` with "all".

    ``max_num_batched_tokens`` None: vLLM's default for a ``max_model_len`` of ``tokens``
    (:func:`vllm_max_num_batched_tokens`); only windowed and chunked layers depend on it. A quantized
    format's bytes are vLLM's: an fp8 cache keeps one scale per tensor in each layer (v0.10.2-v0.11; per head
    from vLLM PR #30141) outside the pages and costs 1 byte an element, but
    DeepSeek-V3.2's latent becomes ``fp8_ds_mla``, :data:`VLLM_FP8_DS_MLA_BYTES` a token and layer, with its
    indexer's keys beside it whatever the dtype. ``block_size``: the one asked for as vLLM uses it on CUDA, as for
    :func:`vllm_kv_cache` (:func:`vllm_block_size`: None gives 16, or 64 for MLA and DSA; DSA is 64 whatever was
    asked). The layout, TP and the format
    are checked as :func:`vllm_kv_cache` checks them (``ValueError`` naming the argument).

    Examples
    --------
    Llama 3.1 8B (32 layers, 8 KV heads of 128), 1,000 tokens in fp8: 63 blocks of 16, not 1,000 tokens,
    of ``2 x 8 x 128`` one-byte elements in each of 32 layers:

    >>> from kvmath import Model
    >>> vllm_request_kv_bytes(Model.preset("llama-3.1-8b"), 1000, kv_dtype="fp8")   # 63 x 16 x 2048 x 32
    66060288
    >>> vllm_request_kv_bytes(Model.preset("deepseek-v3.2"), 16, kv_dtype="fp8")   # one block of 64: 61 x 64 x (656 + 132)
    3076352
    >>> vllm_request_kv_bytes(Model.preset("llama-3.1-8b"), 0)
    Traceback (most recent call last):
    ...
    ValueError: tokens must be > 0, got 0.0
    """
    mml = positive_int("tokens", tokens)
    block_size = vllm_block_size(model, None, block_size)  # checked; what vLLM uses on CUDA
    mamba_cache_mode = choice("mamba_cache_mode", mamba_cache_mode, VLLM_MAMBA_CACHE_MODES)
    hybrid = flag("hybrid", hybrid)
    mnbt = vllm_max_num_batched_tokens(mml) if max_num_batched_tokens is None else \
        positive_int("max_num_batched_tokens", max_num_batched_tokens)
    tp = one_int("tensor_parallel", tensor_parallel)  # the model was checked by vllm_block_size, TP and the format here
    _check_tensor_parallel(model, tp)
    b, ds_mla, _ = _vllm_kv_format(model, kv_dtype)
    groups, group_size, page, blocks, _ = _vllm_layout(model, block_size, b, int(tp), hybrid, None, ds_mla)
    _, _, per_request = _request_blocks(groups, blocks, block_size, mml, mnbt, mamba_cache_mode)
    return _whole(per_request * page * group_size, "request_bytes")


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
    2048 (and 256) elsewhere; the offline ``LLM`` class 16384 and 8192
    tokens there, and early V1 used 2048 everywhere: pass the value a log
    shows. V0
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
    (vision encoders) is not covered, nor the chunks of 32,768 tokens
    (``VLLM_FUSED_MOE_CHUNK_SIZE``) in which vLLM's fused-MoE kernels work: for an
    MoE over passes well past that the estimate is too high.

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
        One block of one layer, the same in every group (vLLM unifies them; a linear layer's state is
        padded to it). Where layers of one kind have different pages (DSA's latent and indexer keys, one
        ``UniformTypeKVCacheSpecs`` group), one block of all of them, with ``group_size`` 1.
    group_size, num_groups : int
        Layers per KV-cache group, and the groups (:func:`vllm_kv_groups`).
    num_blocks : int or array
        Blocks in the shared pool ("# GPU blocks").
    tokens : int or array
        "GPU KV cache size", tokens for the whole engine (a TP group holds one copy, not N): ``num_blocks //
        num_groups x`` the smallest block size of any group through vLLM v0.20, ``int(max_concurrency x
        max_model_len)`` later (``tokens_rule``).
    blocks_per_request : int or array
        Blocks one request of ``max_model_len`` tokens takes, summed over the groups.
    max_concurrency : float or array
        "Maximum concurrency for max_model_len tokens per request": ``num_blocks / blocks_per_request``.
    max_model_len, block_size, max_num_batched_tokens : int
        The engine settings the figures are for; ``block_size`` is the attention block size vLLM uses,
        larger than the one asked for where it holds a linear layer's state ("Setting attention block size
        to N tokens").
    total_bytes, requested_bytes, weight_bytes, activation_peak_bytes, non_torch_bytes : float or None
        The memory profile :func:`vllm_engine` used (None from
        :func:`vllm_kv_cache`): runtime total, utilization x total, and the
        three costs taken from it. Defaults are estimates.
    group_kinds : tuple of str
        The kind of layer of each group (``"linear"`` groups hold one state page per request).
    state_bytes : int or None
        A linear layer's state per sequence on this rank before vLLM pads it to ``page_bytes`` (None
        without linear layers).
    hybrid_kv_cache_manager : bool
        Whether the figures are for vLLM's hybrid KV-cache manager (off: every attention layer paged as full).
    tokens_rule : str
        What ``tokens`` counts (:data:`VLLM_TOKEN_RULES`).
    tokens_by_rule : dict
        The "GPU KV cache size" line under each rule of :data:`VLLM_TOKEN_RULES` (what vLLM through v0.20 and
        v0.29 print for the same pool).
    weight_formats : str or dict or None
        :func:`vllm_engine` only: the formats the weights were sized in, as vLLM loads them (``--dtype``).
    kv_cache_dtype : str
        The format vLLM stores the cache in (its ``--kv-cache-dtype`` resolved: "auto" is the model's dtype, or
        ``fp8_ds_mla`` for DeepSeek-V3.2 under v0.11, :data:`VLLM_DSA_AUTO_KV`).
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
    group_kinds: tuple[str, ...] = ()
    state_bytes: int | None = None
    hybrid_kv_cache_manager: bool = True
    tokens_rule: str = "blocks"
    tokens_by_rule: dict | None = None
    weight_formats: str | dict | None = None
    kv_cache_dtype: str = ""

    @property
    def state_padding(self) -> float | None:
        """Fraction by which vLLM pads a linear layer's state page ("Padding mamba page size by X%"), or None."""
        return None if self.state_bytes is None else self.page_bytes / self.state_bytes - 1

    _derived = ("state_padding",)


@checked
def vllm_kv_cache(
    model,
    available_kv_bytes: ArrayLike,
    max_model_len: ArrayLike,
    *,
    block_size: int | None = None,
    kv_dtype: str | float = "auto",
    tensor_parallel: int = 1,
    layers: int | None = None,
    max_num_batched_tokens: ArrayLike | None = None,
    hybrid: bool | None = None,
    engine: str = "v1",
    block_alignment: int | None = None,
    mamba_cache_mode: str = "none",
    tokens_rule: str = "blocks",
    dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    chip: Chip | None = None,
) -> EngineBudget:
    """Blocks, tokens and maximum concurrency vLLM gets from one rank's KV memory.

    The layers are grouped as :func:`vllm_kv_groups` says, every group's page the same size (with
    linear-attention layers, the attention block size grows until a page holds a layer's state, and the
    state is padded to it: ``HybridAttentionMambaModelConfig.verify_and_update_config``,
    ``vllm/model_executor/models/config.py``, v0.10.2-v0.11). Then ``num_blocks = available // page_bytes
    // group_size`` (``get_num_blocks``, ``vllm/v1/core/kv_cache_utils.py``; V0's ``available // (page x
    layers)`` is the same integer) and ``tokens = num_blocks // num_groups x`` the smallest block size of
    any group, a linear group's being ``max_model_len`` with ``mamba_cache_mode`` "none" and the attention
    block otherwise (``_report_kv_cache_config``); v0.29 prints ``int(concurrency x max_model_len)``
    instead (``tokens_rule``, :data:`VLLM_TOKEN_RULES`). A request of ``max_model_len`` tokens takes, in each
    group, the blocks :func:`_blocks_per_request` gives (a linear group: one state page, two with
    ``mamba_cache_mode`` "align"); V1's maximum concurrency is ``num_blocks`` over their sum
    (``get_max_concurrency_for_kv_cache_config``), V0's ``num_blocks x block_size / max_model_len``. Under
    tensor parallelism vLLM keeps the fewest blocks over the ranks (``get_kv_cache_configs``): pass each
    rank's memory and take the minimum. The rules, and the release each was read from, are in
    :data:`VLLM_HYBRID_SOURCE`; the defaults are vLLM's of :data:`VLLM_DEFAULTS_VERSION`.

    Through v0.20 the "GPU KV cache size" is therefore not the tokens one could cache: for a hybrid model
    it counts ``num_blocks`` shared by all the groups, a full group's share of them, in attention blocks;
    the concurrency line is the figure that says how many ``max_model_len`` requests fit. Later releases
    print ``int(concurrency x max_model_len)`` (``tokens_rule="concurrency"``). The old line is, by
    construction, what the same memory gives with every layer paged as full attention: the unified page is
    ``block x`` a full layer's bytes per token and ``groups x group_size`` is every layer (padding layers
    aside), so ``num_blocks // groups x block`` is ``available / (layers x`` a full layer's bytes per
    token ``)`` up to whole blocks (Qwen3-Next at TP=2: 973,760 against 974,080 tokens; gpt-oss-20b: equal).
    A calculator that counts linear layers as attention or ignores the windows reproduces it, so only the
    concurrency line checks such a reading (:func:`kvmath.config_check.check_config` says so).

    Where vLLM refuses to start, this raises ``ValueError`` saying why: no
    whole block fits, one request of ``max_model_len`` tokens does not fit
    (concurrency below 1), a block size or tensor-parallel size vLLM does
    not accept, page sizes vLLM cannot unify, or layer kinds kvmath does not
    size as vLLM does (:data:`VLLM_LAYER_KINDS`).

    Parameters
    ----------
    model : Model
        The architecture (KV heads, head size, layers, windows, MLA widths, linear states).
    available_kv_bytes : float or array
        The rank's KV memory, bytes (as logged, or from
        :func:`vllm_available_kv_bytes`).
    max_model_len : int or array
        vLLM's ``--max-model-len``, tokens.
    block_size, kv_dtype, tensor_parallel :
        Tokens per block asked for, used as vLLM uses it (:func:`vllm_block_size`: by default 16, or 64 for MLA
        and DSA; DSA's is 64 whatever was asked, an MLA block on compute capability 9.x or exactly 10.0 a
        multiple of the chip's, :data:`MLA_BLOCK_BY_CHIP`), cached element format (vLLM's ``--kv-cache-dtype``:
        "auto", the default, is the model's 2-byte dtype, and for DeepSeek-V3.2 v0.11's ``fp8_ds_mla``,
        :data:`VLLM_DSA_AUTO_KV`; "bf16" keeps its latent in bf16, what later releases' "auto" does; an fp8 format
        is ``fp8_ds_mla`` for it in every release), TP ranks. A linear layer's state keeps the model's dtype (``dtype``), whatever ``kv_dtype``.
    layers : int, optional
        Attention layers on this rank (a pipeline stage's share; models
        whose layers vLLM keeps in one group only). Default: all.
    max_num_batched_tokens : int, optional
        Default :func:`vllm_max_num_batched_tokens`.
    hybrid : bool, optional
        V1's hybrid KV-cache manager: True on, False off (``--disable-hybrid-kv-cache-manager``). None (the
        default): what vLLM v0.10-v0.11 does, on, except for models with chunked local attention (Llama 4)
        (``VllmConfig.__post_init__``, vLLM PR #21761) unless
        ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``; pass True for later releases, where that
        variable defaults to 1.
    engine : str
        ``"v1"`` or ``"v0"`` (:data:`VLLM_ENGINES`; V0 sizes every attention layer as full and has no
        linear-layer pages kvmath reproduces).
    block_alignment : int, optional
        Tokens the enlarged attention block size is a multiple of (:data:`VLLM_BLOCK_ALIGNMENT`).
    mamba_cache_mode : str
        How linear layers' states are cached (:data:`VLLM_MAMBA_CACHE_MODES`): "none" (prefix caching off),
        "align" (what vLLM selects for Gated DeltaNet models with prefix caching on), "all".
    tokens_rule : str
        What the "GPU KV cache size" line counts (:data:`VLLM_TOKEN_RULES`): "blocks" (vLLM through v0.20;
        equal, up to whole blocks, to the memory over every layer paged as full attention), "concurrency"
        (``int(max_concurrency x max_model_len)``, printed by v0.29; the switch falls between v0.20 and v0.29).
    dtype : str
        vLLM's ``--dtype`` (:data:`VLLM_DTYPES`), the dtype a linear layer's state is kept in (its
        ``mamba_cache_dtype`` "auto"); "auto": the layer's own, a float32 one in bf16 (:func:`vllm_model_dtype`).
    mamba_ssm_cache_dtype : str
        vLLM's ``--mamba-ssm-cache-dtype`` for the recurrent part of a linear layer's state: "auto" (the
        convolution's dtype, or the config's ``mamba_ssm_dtype`` where it names one, as vLLM reads Qwen3.5's),
        "bf16", "fp16" or "fp32".
    chip : Chip, optional
        The chip, for vLLM's block rules on it (:func:`vllm_block_size`, which refuses DeepSeek-V3.2 on a chip
        vLLM cannot serve it on); None: CUDA's rules without the chip's MLA block (an asked block used as given).

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

    Qwen3-Next-80B-A3B at TP=2 under vLLM 0.10.2 logged "Setting attention block size to 544 tokens",
    "Padding mamba page size by 1.49%", "Available KV cache memory: 44.59 GiB", "GPU KV cache size:
    973,760 tokens" and "Maximum concurrency for 262,144 tokens per request: 14.77x":

    >>> from kvmath.layers import LayerSpec
    >>> gdn, full = LayerSpec("linear", n_heads=32, state_bytes=1_097_728), LayerSpec("full", 16, 2, 256)
    >>> next80 = Model("qwen3-next-layout", 48, 2048, 16, 2, 256, 5120, 151936, attention="gqa",
    ...                layers=((gdn,) * 3 + (full,)) * 12)
    >>> kv = vllm_kv_cache(next80, 44.59 * GiB, 262144, tensor_parallel=2, max_num_batched_tokens=8192)
    >>> kv.block_size, f"{kv.state_padding:.2%}", kv.tokens, round(kv.max_concurrency, 2)
    (544, '1.49%', 973760, 14.77)
    """
    engine = choice("engine", engine, VLLM_ENGINES)
    _model(model)
    hybrid = _hybrid_default(model) if hybrid is None else flag("hybrid", hybrid)
    dtype = choice("dtype", dtype, VLLM_DTYPES)
    mamba_ssm_cache_dtype = choice("mamba_ssm_cache_dtype", mamba_ssm_cache_dtype, VLLM_DTYPES)
    mamba_cache_mode = choice("mamba_cache_mode", mamba_cache_mode, VLLM_MAMBA_CACHE_MODES)
    tokens_rule = choice("tokens_rule", tokens_rule, VLLM_TOKEN_RULES)
    avail = non_negative("available_kv_bytes", available_kv_bytes)
    mml = positive_int("max_model_len", max_model_len)
    _whole(mml, "max_model_len")
    block_size = vllm_block_size(model, chip, block_size)  # checked; the block vLLM uses for the one asked for
    if block_alignment is not None:
        block_alignment = one_int("block_alignment", block_alignment)
    mnbt = vllm_max_num_batched_tokens(mml, engine) if max_num_batched_tokens is None else \
        positive_int("max_num_batched_tokens", max_num_batched_tokens)
    vllm_page_bytes(model, block_size, kv_dtype, tensor_parallel)  # the model, the format and TP, checked once
    tp = int(tensor_parallel)
    b, ds_mla, kv_name = _vllm_kv_format(model, kv_dtype, dtype)
    v1_only = {"linear": "linear-attention", "dsa": "DSA (sparse-attention indexer)", "shared": "shared-KV"}
    kinds = [v1_only[k] for k in v1_only if any(s.kind == k for s in model.layer_specs())]
    if engine == "v0" and kinds:
        raise ValueError(f"engine 'v0': {model.name} has {' and '.join(kinds)} layers, whose caches V0 did not "
                         "page (vLLM serves them with the V1 engine); kvmath sizes them for V1 only")
    hybrid = hybrid and engine == "v1"
    groups, group_size, page, blocks, state = _vllm_layout(model, block_size, b, tp, hybrid, block_alignment, ds_mla,
                                                           dtype, mamba_ssm_cache_dtype)
    if layers is not None:
        if len(set(groups)) > 1:
            raise ValueError("layers (a pipeline stage's share) is supported for models whose layers vLLM keeps "
                             "in one group")
        group_size = one_int("layers", layers)
        if group_size > model.n_layers:
            raise ValueError(f"layers ({group_size}) exceeds the model's {model.n_layers} layers")
    attention_block, blocks, per_request = _request_blocks(groups, blocks, block_size, mml, mnbt, mamba_cache_mode)
    num_groups = len(groups)
    num_blocks = np.maximum(np.floor(np.floor(np.asarray(avail) / page) / group_size), 0)
    if np.any(num_blocks == 0):
        raise ValueError("available_kv_bytes holds no block of block_size tokens on every layer: vLLM refuses "
                         "to start (\"No available memory for the cache blocks\")")
    smallest = attention_block if all(blocks[k] is not None for k in groups) else \
        np.minimum(np.asarray(mml), attention_block) if len(blocks) > 1 else np.asarray(mml)  # a linear group's is mml
    concurrency = num_blocks / per_request if engine == "v1" else num_blocks * block_size / np.asarray(mml)
    by_rule = {"blocks": num_blocks // num_groups * smallest,
               "concurrency": np.floor(concurrency * np.asarray(mml))}  # Python's int() of the same double product
    tokens = by_rule[tokens_rule]
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
        max_concurrency=plain(concurrency), max_model_len=_whole(mml, "max_model_len"),
        block_size=int(attention_block), max_num_batched_tokens=_whole(mnbt, "max_num_batched_tokens"),
        group_kinds=tuple(k[0] for k in groups), state_bytes=None if state is None else _whole(state, "state_bytes"),
        hybrid_kv_cache_manager=hybrid, tokens_rule=tokens_rule,
        tokens_by_rule={rule: _whole(value, "tokens") for rule, value in by_rule.items()},
        kv_cache_dtype=kv_name,
    )


@checked
def vllm_engine(
    model,
    chip: Chip | ArrayLike,
    max_model_len: ArrayLike,
    *,
    total_bytes: ArrayLike | None = None,
    gpu_memory_utilization: ArrayLike = GPU_MEMORY_UTILIZATION,
    block_size: int | None = None,
    weights="bf16",
    kv_dtype: str | float = "auto",
    tensor_parallel: int = 1,
    max_num_batched_tokens: ArrayLike | None = None,
    max_num_seqs: ArrayLike | None = None,
    weight_bytes: ArrayLike | None = None,
    activation_peak_bytes: ArrayLike | None = None,
    non_torch_bytes: ArrayLike = NON_TORCH_BYTES,
    hybrid: bool | None = None,
    engine: str = "v1",
    mamba_cache_mode: str = "none",
    tokens_rule: str = "blocks",
    dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
) -> EngineBudget:
    """The KV cache vLLM sizes on ``chip``: memory profile, then blocks, tokens, concurrency.

    ``gpu_memory_utilization x total - weights - activation peak - non-torch``
    (:func:`vllm_available_kv_bytes`) on each of ``tensor_parallel`` ranks,
    then :func:`vllm_kv_cache`. Give the figures a vLLM log prints to
    reproduce it; the defaults are estimates:

    - total: :func:`runtime_total_bytes` of the chip; ``total_bytes`` is
      the runtime total itself (what vLLM prints as ``total_gpu_memory``),
      the chip's rules (block sizes, defaults for a large GPU) kept; a
      number in place of the chip is that total on a chip kvmath does not
      know;
    - weights: ``model.weight_bytes_resident(weights) / tensor_parallel``
      (vocabulary-parallel embeddings, sharded layers; replicated norms
      ignored), ``weights`` being the formats the checkpoint stores, loaded
      as vLLM's ``dtype`` says (:func:`vllm_model_dtype`: under "auto" a
      float32 checkpoint is served in bf16, and so is a linear state);
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
    # the block vLLM uses on the chip, first: a model vLLM cannot serve there is refused before its memory is sized
    known = chip if isinstance(chip, Chip) else None
    if known is None and total_bytes is not None:
        raise ValueError(f"give the runtime total once: chip is already a number ({chip!r}), and total_bytes "
                         f"({total_bytes!r}) is given too")
    block_size = vllm_block_size(model, known, block_size)
    mml = positive_int("max_model_len", max_model_len)
    if total_bytes is not None:
        total = positive("total_bytes", total_bytes)
    else:
        total = _runtime_total(chip, "vllm_engine") if known is not None else positive("total_bytes", chip)
    util = fraction("gpu_memory_utilization", gpu_memory_utilization)
    non_torch = non_negative("non_torch_bytes", non_torch_bytes)
    _check_free_at_start(total, util, non_torch)
    large = engine == "v1" and _large_gpu(chip, total)
    mnbt = vllm_max_num_batched_tokens(mml, engine, large) if max_num_batched_tokens is None else \
        positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if max_num_seqs is None:
        max_num_seqs = 1024 if large else MAX_NUM_SEQS
    loaded = _vllm_weights(weights, choice("dtype", dtype, VLLM_DTYPES))
    w = model.weight_bytes_resident(loaded) / tp if weight_bytes is None else non_negative("weight_bytes", weight_bytes)
    act = vllm_activation_peak_bytes(model, mnbt, max_num_seqs, tensor_parallel=tp) \
        if activation_peak_bytes is None else non_negative("activation_peak_bytes", activation_peak_bytes)
    avail = vllm_available_kv_bytes(total, w, act, non_torch, util)
    kv = vllm_kv_cache(model, avail, mml, block_size=block_size, kv_dtype=kv_dtype, tensor_parallel=tp,
                       max_num_batched_tokens=mnbt, hybrid=hybrid, engine=engine,
                       mamba_cache_mode=mamba_cache_mode, tokens_rule=tokens_rule, dtype=dtype,
                       mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, chip=known)
    return EngineBudget(**{**kv.__dict__, "total_bytes": plain(total), "requested_bytes": plain(util * total),
                           "weight_bytes": plain(w), "activation_peak_bytes": plain(act),
                           "non_torch_bytes": plain(non_torch),
                           "weight_formats": None if weight_bytes is not None else loaded})
