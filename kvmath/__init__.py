"""kvmath: the arithmetic of LLM inference, exact and vectorised.

Every quantity is in base units: bytes, seconds, FLOPs, FLOP/s, bytes/s.
Cost functions broadcast over numpy arrays, so one call evaluates a whole
grid of batch sizes and contexts. The package needs numpy only: the book's
figures, tables and build tools live in the separate ``kvbook`` package.
The tools that time this machine (:mod:`kvmath.measure`) serve one chapter
only and are imported on first use, not here.
"""

from .batching import MixedStep, SteadyState, cost_per_million_tokens, mixed_step, steady_state
from .calibration import Calibration, Measurement, bound_for, calibrate, get_measurement, load_measurements
from .capacity import kv_budget_bytes, max_batch, max_kv_tokens, min_chips_for_weights, weight_bytes
from .decode import (
    StepBreakdown,
    arithmetic_intensity,
    attention_flops_per_step,
    compute_ceiling_steps_per_s,
    critical_batch,
    critical_batch_beta_alpha,
    min_step,
    min_step_simple,
    step_breakdown,
    strict_step,
    tokens_per_s,
    tokens_per_s_per_seq,
    weight_flops_per_step,
)
from .formatting import (
    fmt_bandwidth,
    fmt_bytes,
    fmt_count,
    fmt_flop_rate,
    fmt_flops,
    fmt_number,
    fmt_seconds,
    group_digits,
)
from .formats import Format, format_names, get_format
from .hardware import Chip, chip_names, get_chip
from .kv_cache import kv_bytes_per_seq, kv_bytes_per_token, kv_cache_bytes
from .layers import LAYER_KINDS, LayerSpec
from .memory import (
    BUDGETS,
    EngineBudget,
    memory_budget,
    runtime_total_bytes,
    vllm_activation_peak_bytes,
    vllm_available_kv_bytes,
    vllm_engine,
    vllm_kv_cache,
    vllm_kv_groups,
    vllm_max_num_batched_tokens,
    vllm_page_bytes,
)
from .links import (
    Link,
    all_to_all_time,
    allreduce_estimate,
    allreduce_time,
    get_link,
    link_names,
    p2p_time,
    ring_allreduce_bytes,
)
from .models import WEIGHT_GROUPS, Model, get_model, model_names
from .hf_config import weights_from_hf_config
from .moe import experts_touched, saturated_critical_batch
from .parallel import (
    ChipStep,
    ParallelLayout,
    chip_step,
    expert_parallel_comm_s,
    kv_bytes_per_chip,
    parse_layout,
    tensor_parallel_comm_s,
    tensor_parallel_step,
)
from .prefill import prefill_flops, prefill_time
from .requests import Frontier, RequestTimes, prefill_attention_flops, prefill_bound, request_times, serving_frontier
from .speculative import (Speculation, expected_tokens_per_step, speculation_break_even_batch, speculative_decode,
                          speculative_improvement_factor)
from .step import (
    DecodeStep,
    StepWork,
    compute_rate,
    decode_step,
    layout_step_time,
    model_critical_batch,
    step_time,
    step_work,
)
from .units import DTYPE_BYTES, GB, KB, MB, TB, GiB, KiB, MiB, TiB, dtype_bytes

__version__ = "0.1.0"


def __getattr__(name: str):
    # measure serves one chapter; load it only when asked.
    if name == "measure":
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'kvmath' has no attribute {name!r}")


__all__ = [
    "Chip", "DTYPE_BYTES", "DecodeStep", "Format", "GB", "GiB", "KB", "KiB", "LAYER_KINDS", "LayerSpec", "MB", "MiB", "Model",
    "Speculation", "StepBreakdown", "StepWork", "TB", "TiB", "WEIGHT_GROUPS",
    "fmt_number", "group_digits",
    "arithmetic_intensity", "attention_flops_per_step", "chip_names", "compute_ceiling_steps_per_s",
    "compute_rate", "critical_batch", "critical_batch_beta_alpha", "decode_step", "dtype_bytes",
    "expected_tokens_per_step", "experts_touched", "fmt_bandwidth", "fmt_bytes",
    "fmt_count", "fmt_flop_rate", "fmt_flops", "fmt_seconds", "format_names", "get_chip", "get_format",
    "get_model", "kv_budget_bytes", "kv_bytes_per_chip", "kv_bytes_per_seq", "kv_bytes_per_token",
    "kv_cache_bytes", "max_batch", "max_kv_tokens", "min_chips_for_weights", "min_step", "min_step_simple",
    "model_critical_batch", "model_names", "prefill_flops", "prefill_time", "saturated_critical_batch",
    "speculation_break_even_batch", "speculative_decode", "speculative_improvement_factor", "step_breakdown", "step_time", "step_work", "strict_step", "tensor_parallel_step", "tokens_per_s",
    "tokens_per_s_per_seq", "weight_bytes", "weight_flops_per_step", "weights_from_hf_config",
    "BUDGETS", "EngineBudget", "memory_budget", "runtime_total_bytes", "vllm_activation_peak_bytes",
    "vllm_available_kv_bytes", "vllm_engine", "vllm_kv_cache", "vllm_kv_groups", "vllm_max_num_batched_tokens",
    "vllm_page_bytes",
    # parallelism and links
    "ChipStep", "Link", "ParallelLayout", "all_to_all_time", "allreduce_estimate", "allreduce_time", "chip_step",
    "get_link", "link_names", "p2p_time", "parse_layout", "ring_allreduce_bytes", "tensor_parallel_comm_s",
    "expert_parallel_comm_s",
    # published measurements against the bound
    "Calibration", "Measurement", "bound_for", "calibrate", "get_measurement", "load_measurements",
    # whole requests and the serving frontier
    "layout_step_time", "Frontier", "RequestTimes", "prefill_attention_flops", "prefill_bound", "request_times", "serving_frontier",
    # continuous batching
    "MixedStep", "SteadyState", "cost_per_million_tokens", "mixed_step", "steady_state",
]
