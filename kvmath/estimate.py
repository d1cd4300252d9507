"""Estimates beside the bounds: what a real system reaches, fitted on published measurements, with an interval.

Every time kvmath reports is a lower bound (:mod:`kvmath.deployment`,
:mod:`kvmath.requests`). An **estimate** prices the same terms the way
real systems run them, with a handful of parameters fitted on the
calibration table (``kvmath/data/measurements.csv``):

.. math::

    t_\\text{est} = t_\\text{step} + L\\,t_\\text{layer}
      + \\max\\Big(\\frac{t_\\text{kv}}{\\eta_\\text{mem}}, \\frac{t_\\text{attn}}{\\eta_\\text{mm}}\\Big)
      + t_\\text{w}\\big(\\tfrac{1}{\\eta_\\text{mem}} + q\\,\\tfrac{W}{C\\,b_w}\\big)
      + \\frac{t_\\text{wc}}{\\eta_\\text{mm}}
      + n_\\text{act} \\frac{T L w\\, b_\\text{act}}{W \\eta_\\text{mem}}
      + t_\\text{coll}

per pass (a decode step, a prefill or one of its chunks), with ``t_kv``,
``t_attn``, ``t_w``, ``t_wc`` the pass's ``kv_read_s``,
``attention_compute_s``, ``weight_read_s`` and ``weight_compute_s``, ``L``
its layers, ``W`` and ``C`` the chip's bandwidth and FLOP rate, ``b_w``
the bytes of a stored weight, ``T`` the pass's tokens on the chip and
``w b_act`` the bytes of one token's activations of a layer on the chip
(:func:`activation_width`: its hidden vector and its MLP's intermediate),
and ``n_act`` a fitted cost per token and layer in units of one pass over
them, one value for engines that fuse their elementwise kernels and one for
those that do not (:data:`UNFUSED_ENGINES`): the elementwise traffic between
the matmuls and whatever else grows with a pass's tokens and has no term of
its own. ``q`` is charged on the weights stored in fewer bytes than they
multiply at (:func:`_unpacked_weights`: a Q4_0 model's layers, not its
16-bit head); ``W / (C b_w)`` above writes that per byte of a weight
stored in ``b_w`` bytes. Why a sum where the
bound takes a max: a pass is a chain of kernels (the attention over the
caches, the weight matmuls, the elementwise kernels between them, the
collectives between layers), each limited by its own resource and each
waiting for the one before, so their times add, as the bound's no-overlap
form adds them (:attr:`kvmath.Step.no_overlap_s`). Inside the attention
kernel the cache's bytes and the arithmetic overlap, so it is the larger of
the two: it is seldom near its ridge (a decode step's attention is nearly all
reads, a prompt's nearly all arithmetic). The weights' matmuls are charged
their reads and their arithmetic in series, where the no-overlap form takes
the larger: a batch of a few hundred sequences puts them near the ridge,
where a matmul reaches neither roofline, and away from it the two agree. On
the 113-row table the series form predicted the rows better out of sample
than the larger of the two did (a mean absolute log error of 0.212 against
0.218 over the 102 fitted rows, lower in every regime but the quantized one;
:func:`cross_validate`). With every
efficiency at most 1 and every cost at least 0 the estimate is never below
the bound; the bounds themselves do not change. A mixture of experts is
priced reading the experts a uniform router touches (:data:`ROUTING`), not
the bound's floor, at the dense rate: no factor for the experts is fitted,
because the table's rows refute the one that was (its fit, pulled up by the
slow large-batch rows, made every batch-1 row, where no expert can be
busier than another, slower than measured) and the rows that could identify
load imbalance, those with experts spread over chips, are four, fewer than a
parameter needs.

The collectives ``t_coll`` are priced the one way kvmath estimates
collectives anywhere: the chain of :meth:`kvmath.Deployment.comm_estimate`,
each collective at its measured latency-bandwidth curve
(:func:`kvmath.links.collective_estimate`), with the all-reduce the
serving engine runs (:data:`ENGINE_ALGORITHMS`), and expert parallelism's
all-to-all at DeepEP's curve on H800 nodes where its links are those
(inside a node, and across nodes at two tiers: NVLink for the chip's own
node, the network port for the others). A layout wider than a node that
names no network takes the chip's system's (:attr:`kvmath.Chip.network`),
as the system is built; the bound does not. Where a curve is a stand-in
(NVLink 5's small messages: the NVLink 4 kernels' times scaled by the one
pair of small-message times published on both; MI300X's Infinity Fabric;
an all-to-all off DeepEP's links, at its topology's floor) the estimate's
``flags`` say so. No fitted cost per collective is added: fitted on the
table it went to a tenth of a microsecond, so the rows do not ask for one.

Each parameter has a home: the regime whose rows identify it
(:data:`PARAMETERS`); a regime holds at most one parameter per five of its
rows. Rows whose unknowns leave the estimate nothing to price
(:data:`kvmath.calibration.HELD_OUT`) are held out of the fit and still
checked against the bound. The fit (:func:`fit`) minimises a robust (Huber)
loss of the log error over the rows, deterministically (Levenberg-Marquardt on ``np.linalg.lstsq``). The fitted
values and each regime's leave-one-source-out errors are committed as data
(``kvmath/data/estimate_parameters.csv``, ``estimate_errors.csv``;
``scripts/fit_estimate.py`` rewrites them, a test checks that a refit
reproduces them), so nothing is fitted at import or on a question.

Every estimate carries an 80% interval from its regime's cross-validated
errors: the 10th and 90th percentiles of ``log(measured / estimate)`` over
the rows of the regime, each predicted by a fit that had not seen its
source. A regime with fewer than five rows states no interval of its own:
it takes the pooled residuals of every row at the 5th and 95th percentiles,
a wider interval, and says so (``pooled``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from .deployment import Deployment, Step
from .results import Result
from .validation import ArrayLike, instance, plain, positive, positive_int

#: The fitted parameters, in the fit's order: (name, unit, home regimes, physical meaning).
PARAMETERS = (
    ("memory_efficiency", "fraction", ("batch1",),
     "fraction of the datasheet bandwidth a pass's reads reach (weights streamed; the cache's reads share it: "
     "the large-batch regime, where they dominate, has too few rows for its own)"),
    ("layer_overhead_s", "s", ("batch1", "quantized"),
     "seconds per layer of every pass that no byte or FLOP explains: kernel launches, norms, synchronisation"),
    ("step_overhead_s", "s", ("quantized",),
     "seconds per pass besides the layers: sampling, the host's loop, the engine's scheduling"),
    ("dequant_flops_per_weight", "FLOP", ("quantized",),
     "work to unpack one weight stored in fewer bytes than the format it multiplies at, counted at the chip's "
     "matmul rate (block scales, bit unpacking)"),
    ("matmul_efficiency", "fraction", ("prefill",),
     "fraction of the peak FLOP rate compute-bound matmuls and attention reach"),
    ("activation_passes", "count", ("large_batch",),
     "a cost per token and layer, in units of one pass over the token's activations of the layer on the chip (its "
     "hidden vector and its MLP's intermediate) at the pass's bandwidth, in an engine that fuses its elementwise "
     "work: everything that grows with a pass's tokens and has no term of its own, the elementwise traffic between "
     "kernels (norms, residual adds, rotary embedding, the MLP's gate, quantising activations) and also attention "
     "over caches of mixed lengths; far more than the handful of passes the elementwise kernels alone make"),
    ("unfused_activation_passes", "count", ("prefill",),
     "the same cost per token and layer in an engine that runs each elementwise op as a kernel of its own "
     "(llama.cpp, eager PyTorch), each writing its output for the next to read"),
)
#: Rows per fitted parameter a regime must hold (the issue's "at most one parameter per 5 rows").
ROWS_PER_PARAMETER = 5
#: The coverage the stated intervals aim at, and the pooled fallback's quantiles.
INTERVAL = 0.8
POOLED_QUANTILES = (0.05, 0.95)


@dataclass(frozen=True)
class EstimateParameters:
    """Values of :data:`PARAMETERS` (floats; arrays broadcast, as the fit evaluates many at once)."""

    memory_efficiency: ArrayLike
    layer_overhead_s: ArrayLike
    step_overhead_s: ArrayLike
    dequant_flops_per_weight: ArrayLike
    matmul_efficiency: ArrayLike
    activation_passes: ArrayLike
    unfused_activation_passes: ArrayLike

    @staticmethod
    def fitted() -> "EstimateParameters":
        """The committed fit (``kvmath/data/estimate_parameters.csv``)."""
        return _committed()[0]


@dataclass(frozen=True)
class RegimeErrors:
    """A regime's leave-one-source-out errors (one row of ``kvmath/data/estimate_errors.csv``).

    Attributes
    ----------
    regime : str
    rows, sources : rows of the regime and the sources they come from.
    median_abs_error, p90_abs_error : median and 90th percentile of ``|measured / estimate - 1|`` over the rows,
        each estimated by a fit that did not see its source.
    log_low, log_high : the interval's ends as ``log(measured / estimate)`` (the 10th and 90th percentiles of
        the regime's residuals; the pooled 5th and 95th where ``pooled``).
    pooled : True where the regime has fewer than five rows and takes the pooled residuals.
    coverage : share of the regime's rows inside the interval computed without their own source's residuals.
    median_half_width : median over the regime's estimates of the interval's half-width relative to the estimate.
    """

    regime: str
    rows: int
    sources: int
    median_abs_error: float
    p90_abs_error: float
    log_low: float
    log_high: float
    pooled: bool
    coverage: float
    median_half_width: float


@lru_cache(maxsize=1)
def _committed() -> tuple[EstimateParameters, dict[str, RegimeErrors]]:
    from .presets import read_rows

    values = {r["name"]: float(r["value"]) for r in read_rows("estimate_parameters.csv")}
    params = EstimateParameters(**{name: values[name] for name, *_ in PARAMETERS})
    errors = {}
    for r in read_rows("estimate_errors.csv"):
        errors[r["regime"]] = RegimeErrors(
            regime=r["regime"], rows=int(r["rows"]), sources=int(r["sources"]),
            **{k: float(r[k]) for k in ("median_abs_error", "p90_abs_error", "log_low", "log_high", "coverage",
                                        "median_half_width")}, pooled=r["pooled"] == "true")
    return params, errors


def regime_errors() -> dict[str, RegimeErrors]:
    """Each regime's committed cross-validated errors (and ``"all"``: every row), by regime."""
    return dict(_committed()[1])


# ----- the regime a question falls in ---------------------------------------------------------------

def _bulk_weight_bytes(dep: Deployment) -> float:
    """Bytes of one weight of the group a pass reads most of: the routed experts of an MoE model, else the MLP."""
    from .models import _group_bytes

    per = _group_bytes(dep.formats.weights, dep.model.tied_embeddings)
    return per["experts"] if dep.model.n_experts else per["mlp"]


def regime_of(dep: Deployment, batch: float, prompt_tokens_per_pass: float = 0.0) -> str:
    """The calibration regime a pass of ``dep`` falls in (:data:`kvmath.calibration.REGIMES`).

    In order: ``"moe"`` (a model with experts), ``"prefill"`` (a pass of
    more than one prompt token: ``batch * prompt_tokens_per_pass > 1``, on
    any number of chips: its matmuls, not its collectives, set it),
    ``"multi_chip"`` (more than one chip), ``"large_batch"`` (more than one
    sequence), ``"quantized"`` (weights stored in fewer than two bytes),
    else ``"batch1"``. The calibration table's own ``regime`` column follows
    the same rule (a test checks it).

    Examples
    --------
    >>> regime_of(Deployment("llama-3-8b", "rtx-4090", weights="q4_0"), 1)
    'quantized'
    >>> regime_of(Deployment("llama-3-8b", "h100-sxm"), 1, prompt_tokens_per_pass=2048)
    'prefill'
    """
    if dep.model.n_experts:
        return "moe"
    if np.all(np.asarray(batch) * prompt_tokens_per_pass > 1):
        return "prefill"
    if dep.n_chips > 1:
        return "multi_chip"
    if np.all(np.asarray(batch) > 1):
        return "large_batch"
    return "quantized" if _bulk_weight_bytes(dep) < 2 else "batch1"


# ----- pricing the bound's terms ----------------------------------------------------------------------

#: The all-reduce each engine runs inside a node: the curve of ``kvmath/data/collectives.csv`` its collectives
#: are priced by (:func:`kvmath.links.collective_estimate`'s ``algorithm``), with why. ``"nccl"``: NCCL's own
#: choice among its algorithms; ``"auto"``: the fastest curve, an engine's custom one-shot/two-shot kernel for
#: small messages and NCCL above. An engine not listed (or none named) takes ``"auto"``.
ENGINE_ALGORITHMS = {
    "gpt-fast": ("nccl", "tp.py: torch.distributed's functional all_reduce on the NCCL backend "
                         "(https://github.com/pytorch-labs/gpt-fast/blob/main/tp.py)"),
    "PyTorch": ("nccl", "Meta's reference code: fairscale's model-parallel layers over torch.distributed (NCCL)"),
    "TensorRT-LLM": ("auto", "its AllReduce op: one-shot and two-shot custom kernels for small messages, NCCL above "
                             "(cpp/tensorrt_llm/kernels/customAllReduceKernels.cu, thop/allreduceOp.cpp)"),
    "vLLM": ("auto", "vllm/distributed/device_communicators/custom_all_reduce.py for small messages inside a node, "
                     "NCCL (pynccl) above"),
    "SGLang": ("auto", "TensorRT-LLM's kernels in sgl-kernel (sgl-project/sglang#2904), NCCL above"),
    "llama.cpp": ("nccl", "layers split over GPUs: the only collectives are the pipeline's copies"),
    "DeepSeek": ("auto", "expert parallelism's all-to-all (DeepEP): no all-reduce curve applies"),
    "JAX": ("auto", "a TPU slice: no link preset, no collective priced"),
    "MLC LLM": ("auto", "one chip in the table"),
    "ExLlama": ("auto", "one chip in the table"),
}


def engine_algorithm(engine: str | None) -> str:
    """The all-reduce curve an engine's collectives are estimated with (:data:`ENGINE_ALGORITHMS`; ``"auto"``
    for an engine not listed or none).

    Examples
    --------
    >>> engine_algorithm("gpt-fast"), engine_algorithm("vLLM"), engine_algorithm(None)
    ('nccl', 'auto', 'auto')
    """
    return ENGINE_ALGORITHMS[engine][0] if engine in ENGINE_ALGORITHMS else "auto"


class _Constants:
    """What the estimate of a deployment's passes needs besides their terms; ``flags`` collects, as passes are
    priced, each collective whose curve is a stand-in (:attr:`Estimate.flags`)."""

    __slots__ = ("dep", "layers", "unpacked", "algorithm", "flags", "act_width", "unfused")

    def __init__(self, dep: Deployment, engine: str | None):
        self.unpacked = _unpacked_weights(dep)
        self.layers = dep.model.n_layers
        self.act_width = activation_width(dep)
        self.unfused = engine in UNFUSED_ENGINES
        self.algorithm, self.flags = engine_algorithm(engine), {}
        self.dep = _estimated_links(dep, self.flags)


def _estimated_links(dep: Deployment, flags: dict) -> Deployment:
    """The deployment whose links the estimate prices collectives on, with ``flags`` saying what it assumed.

    The bound may count no link, or put a layout wider than a node on one
    fabric: either only makes the bound lower, never wrong. The chips of a
    real system still talk, over their own interconnect inside a node and
    the system's network between nodes (:attr:`kvmath.Chip.network`: one
    InfiniBand port per H100 or H800), so the estimate prices them there.
    A network the deployment names is kept.
    """
    chip, link = dep.chip, dep.link
    if dep.n_chips == 1 or (link is None and chip.link is None):
        return dep
    out = dep
    if link is None:  # the chips still talk, over their own interconnect
        out = dep.replace(link=chip.link)
        flags["link"] = f"none given: collectives estimated on the {chip.name}'s own {chip.link.name}"
    one_fabric = out.node_link is not None and out.node_link.name == out.link.name == chip.link_name
    if not (one_fabric and out.n_chips > out.chips_per_node):
        return out
    nodes = f"{out.n_chips} chips span {-(-out.n_chips // out.chips_per_node)} nodes of {out.chips_per_node}"
    if chip.network is None:
        flags["network"] = (f"none given or known: the {nodes} and share the {out.link.name}, so the collectives "
                            "between nodes are estimated too fast")
        return out
    try:
        out = out.replace(node_link=chip.network)
    except ValueError:  # a group straddles nodes unevenly: no two-tier routing to price it by
        flags["network"] = f"none given: the {nodes}, but a group straddles them unevenly; one fabric assumed"
        return out
    flags["network"] = f"none given: the {nodes}, between which the estimate takes the {chip.name}'s {chip.network.name}"
    return out


#: Bytes of an element each compute format multiplies (a weight stored in fewer is unpacked first).
_COMPUTE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5}
#: Bytes per weight standing in for "none" in :func:`_unpacked_weights`' counting deployment (a byte count must be
#: positive; this one adds a part in 10^15 to the count).
_UNCOUNTED = 1e-15


def _unpacked_weights(dep: Deployment) -> Deployment | None:
    """A deployment whose weight bytes read count the weights ``dep``'s passes unpack (None: it unpacks none).

    A group is unpacked where a weight is stored in fewer bytes than it
    multiplies at: the compute format given, or else 8- and 16-bit weights
    at their own rate and sub-byte weights at 16 bits. Bytes read are linear
    in each group's bytes per weight, so a copy of ``dep`` with one byte a
    weight in those groups, and next to none in the others, reads as many
    bytes as the passes unpack weights, sharded and routed as ``dep`` is.
    (An unquantized head beside Q4_0 layers is not unpacked.)
    """
    from .models import _group_bytes

    compute = dep.formats.compute
    per = _group_bytes(dep.formats.weights, dep.model.tied_embeddings)
    marks = {g: b < (_COMPUTE_BYTES[compute] if compute else (b if b >= 1 else 2.0)) for g, b in per.items()}
    if not any(marks.values()):
        return None
    counting = {g: 1.0 if unpacked else _UNCOUNTED for g, unpacked in marks.items()}
    return dep.replace(formats=replace(dep.formats, weights=counting, compute="bf16"))


def _unpack_s(c: "_Constants", step, tokens_per_seq=None) -> ArrayLike:
    """The weights a pass unpacks over the chip's matmul rate, seconds per FLOP of unpacking a weight: times
    :data:`PARAMETERS`' ``dequant_flops_per_weight``, the pass's unpacking.

    The share of ``step``'s weight bytes that are unpacked weights comes from
    :func:`_unpacked_weights` at the pass's sequences and tokens per sequence
    (``step.tokens_per_seq`` unless given: an MoE pass's experts change with
    them)."""
    if c.unpacked is None:
        return 0.0
    shape = dict(tokens_per_seq=step.tokens_per_seq if tokens_per_seq is None else tokens_per_seq, routing=ROUTING)
    share = (c.unpacked.step(step.batch, 1.0, **shape).weight_bytes_read
             / c.dep.step(step.batch, 1.0, **shape).weight_bytes_read)
    return share * step.weight_bytes_read / c.dep.flops


#: Engines that run each elementwise op (a norm, a residual add, the rotary embedding, the MLP's gate) as a kernel
#: of its own, so that every op writes its output to memory for the next to read, with why. Every other engine of
#: :data:`kvmath.calibration.ENGINES` fuses them into the matmuls' prologues and epilogues or into one another
#: (TensorRT-LLM's fused norm-quantise and gated-MLP plugins; vLLM's and SGLang's ``fused_add_rms_norm`` and
#: ``silu_and_mul`` kernels; gpt-fast through torch.compile's Inductor; XLA for JAX; TVM for MLC LLM; ExLlama's and
#: DeepSeek's own kernels); their passes are :data:`PARAMETERS`' ``activation_passes``.
UNFUSED_ENGINES = {
    "llama.cpp": "ggml builds one graph node per op (rms_norm, mul, add, rope, soft_max, silu, ...) and its CUDA and "
                 "Metal backends launch about one kernel per node (ggml-cuda.cu's ggml_cuda_compute_forward; later "
                 "builds fuse a few pairs, such as a norm and its multiply)",
    "PyTorch": "Meta's reference code runs eagerly: one kernel per torch op",
}


def activation_width(dep: Deployment) -> float:
    """Values of one token's activations of a layer on one chip: its hidden vector and its MLP's intermediate.

    The residual stream is ``d`` values on every chip (tensor parallelism
    replicates it between the all-reduces); the MLP's intermediate is ``d_ff``
    split over the ``tp`` chips, and in a mixture of experts the ``k`` routed
    experts' and the shared experts' intermediates (each ``d_ff_expert``), a
    layer of the model's dense ones counting its own ``d_ff``. Averaged over
    the layers.

    Examples
    --------
    Llama 2 7B (d = 4096, d_ff = 11008) on one chip and over eight; Mixtral 8x7B (two experts of 14336 a token):

    >>> one, eight = Deployment("llama-2-7b", "a100-80gb"), Deployment("llama-2-7b", "a100-80gb", "tp=8")
    >>> activation_width(one), activation_width(eight)
    (15104.0, 5472.0)
    >>> activation_width(Deployment("mixtral-8x7b", "a100-80gb"))
    32768.0
    """
    m = dep.model
    if m.n_experts:
        dense = m.n_dense_layers or 0
        experts = (m.top_k + (m.n_shared_experts or 0)) * m.d_ff_expert
        mlp = (dense * m.d_ff + (m.n_layers - dense) * experts) / m.n_layers
    else:
        mlp = m.d_ff
    return float(m.d_model + mlp / dep.layout.tp)


def _constants(dep: Deployment, engine: str | None = None) -> _Constants:
    return _Constants(dep, engine)


def _collectives(c: _Constants, step, *, stage: bool = False):
    """``(seconds, activation_s)`` of a pass: its collectives at measured curves
    (:meth:`kvmath.Deployment.comm_estimate`'s chain at the pass's tokens; ``stage``: a prefill pass of one
    pipeline stage, its group's chain over ``pp``, as the bound splits it), and one pass over each token's
    activations of each layer of the chip (:func:`activation_width` values) at its bandwidth. The one pricing of
    collectives."""
    from .requests import _without_pipeline

    dep = c.dep
    tokens = step.micro_batch * step.tokens_per_seq
    return _chain(c, tokens, _without_pipeline(dep) if stage and dep.layout.pp > 1 else dep)


def _chain(c: _Constants, tokens, group: Deployment):
    """:func:`_collectives` of a pass of ``tokens`` tokens on a chip, the collectives those of ``group`` (the
    deployment, or a prefill's stage group, whose chain a stage's chip does ``1 / pp`` of)."""
    pp = c.dep.layout.pp
    share = 1.0 / pp if group.layout.pp != pp else 1.0
    seconds, flags = group._comm_measured(tokens, c.algorithm)
    c.flags.update(flags)
    activation_s = tokens * (c.layers / pp) * c.act_width * c.dep.b_act / c.dep.chip.bandwidth
    return seconds * share, activation_s


def collective_estimate_s(dep: Deployment, step: Step, *, engine: str | None = None) -> ArrayLike:
    """The estimate's collectives in one decode pass ``step`` of ``dep``, seconds: the chain of
    :meth:`kvmath.Deployment.comm_estimate` at the step's tokens, with the all-reduce ``engine`` runs
    (:data:`ENGINE_ALGORITHMS`), on the chip's own interconnect where ``dep`` counts no link.

    Examples
    --------
    Llama 2 70B over eight H100s at batch 1: 160 all-reduces of 16 KiB, on the custom kernel in TensorRT-LLM,
    on NCCL's in-switch reduction in gpt-fast:

    >>> dep = Deployment("llama-2-70b", "h100-sxm", "tp=8")
    >>> trt = collective_estimate_s(dep, dep.step(1, 100), engine="TensorRT-LLM")
    >>> trt == dep.comm_estimate(1).estimate_s, round(trt * 1e3, 3)
    (True, 0.961)
    >>> round(collective_estimate_s(dep, dep.step(1, 100), engine="gpt-fast") * 1e3, 2)
    4.81
    """
    instance("dep", dep, Deployment, "a Deployment")
    instance("step", step, Step, "a Step of the deployment")
    return plain(_collectives(_constants(dep, engine), step)[0])


def _fixed_s(c: _Constants, p: EstimateParameters):
    return p.step_overhead_s + c.layers * p.layer_overhead_s


def _weights_s(t: Step, p: EstimateParameters, unpack_s):
    """The weights' kernels: their bytes at the fitted bandwidth, their unpacking (``unpack_s``:
    :func:`_unpack_s`) and their matmuls at the fitted rate, in series (the module text says why)."""
    read = t.weight_read_s / p.memory_efficiency + unpack_s * p.dequant_flops_per_weight
    return read + t.weight_compute_s / p.matmul_efficiency


def _pass_s(t: Step, c: _Constants, p: EstimateParameters, comm, unpack_s):
    """The estimate of one pass (the module text's equation), from its bound's terms, its collectives and the
    weights it unpacks."""
    attention = np.maximum(t.kv_read_s / p.memory_efficiency, t.attention_compute_s / p.matmul_efficiency)
    return _fixed_s(c, p) + attention + _weights_s(t, p, unpack_s) + _comm_s(comm, p, c)


def _comm_s(comm, p: EstimateParameters, c: _Constants):
    """A pass's collectives at measured curves and its tokens' activation traffic between kernels, the engine's
    fitted passes at the fitted bandwidth (:func:`_collectives`'s two figures, priced)."""
    n = p.unfused_activation_passes if c.unfused else p.activation_passes
    return comm[0] + comm[1] * n / p.memory_efficiency


# ----- what each bound runs, priced: closures of the parameters ----------------------------------------

#: The experts a pass of a mixture of experts is estimated to read: those a uniform router touches on average
#: (:func:`kvmath.moe.experts_touched`), where the bounds take the floor (every token on the same ``k``).
ROUTING = "uniform"


def _routed(dep: Deployment, step: Step) -> Step:
    """A decode step of ``dep`` with the experts :data:`ROUTING` touches (the step itself for a dense model)."""
    if not dep.model.n_experts:
        return step
    return dep.step(step.batch, step.context, tokens_per_seq=step.tokens_per_seq, routing=ROUTING)


def _step_pricer(dep: Deployment, step: Step, c: _Constants):
    comm, unpack = _collectives(c, step), _unpack_s(c, step)
    return lambda p: _pass_s(step, c, p, comm, unpack)


def _decode_pricer(dep: Deployment, batch, lo, hi, c: _Constants):
    """Decode steps over caches of ``lo .. hi`` tokens, summed in closed form (the bound's stretches and lines)."""
    from .requests import _decode_stretches, _sum_max2

    pieces = [(line(lambda t: t.kv_read_s), line(lambda t: t.attention_compute_s), t1, first, last, steps,
               _collectives(c, t1), _unpack_s(c, t1))
              for line, t1, first, last, steps in _decode_stretches(dep, batch, lo, hi, {"routing": ROUTING})]

    def price(p):
        total = 0.0
        for kv, att, t1, first, last, steps, comm, unpack in pieces:
            per_step = _fixed_s(c, p) + _weights_s(t1, p, unpack) + _comm_s(comm, p, c)
            total = total + steps * per_step + _sum_max2((kv[0] / p.memory_efficiency, kv[1] / p.memory_efficiency),
                                                         (att[0] / p.matmul_efficiency, att[1] / p.matmul_efficiency),
                                                         first, last)
        return total
    return price


def _prefill_pricer(dep: Deployment, batch, input_tokens, c: _Constants, chunk_tokens=None,
                    last_mlp_logits_only=False):
    """The prefill's passes (:func:`kvmath.requests._prefill_passes`), each priced, plus the pipeline's fill."""
    from .requests import _prefill_passes

    step, live, hop_bytes = _prefill_passes(dep, batch, input_tokens, chunk_tokens, bool(last_mlp_logits_only),
                                            {"overhead_s": 0.0, "efficiency": 1.0, "routing": ROUTING})
    comm, unpack = _collectives(c, step, stage=True), _unpack_s(c, step)
    fills = dep.layout.pp - 1
    hop_s = 0.0
    if fills:  # the fill's sends, priced as every collective is
        hop_s, flags = c.dep._comm_measured(None, c.algorithm, hops=hop_bytes)
        c.flags.update(flags)

    def price(p):
        per = _pass_s(step, c, p, comm, unpack)
        if live is None:
            total, first_read = per, step.weight_read_s
        else:
            total, first_read = np.sum(np.where(live, per, 0.0), axis=-1), step.weight_read_s[..., 0]
        if fills:  # each earlier stage reads its weights, then sends on
            total = total + fills * first_read / p.memory_efficiency + hop_s
        return total
    return price


# ----- results ----------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Estimate(Result):
    """An estimate of one time beside its bound, with its regime's 80% interval (seconds; arrays broadcast).

    Attributes
    ----------
    bound_s : the lower bound (unchanged by the estimate).
    estimate_s : the estimate (never below ``bound_s``).
    estimate_low_s, estimate_high_s : the interval's ends (the low end never below the bound).
    regime : the calibration regime whose errors set the interval (a sum's names each part's: :func:`regimes_of`).
    regime_rows : measurements of that regime the errors come from (of every regime, for a sum).
    pooled : True where the regime has too few rows for its own interval, so the pooled, wider one is used.
    flags : collective -> why its curve is a stand-in (no curve measured at its size and link: NVLink 5's and
        MI300X's small messages, an all-to-all off DeepEP's links), ``"link"`` where the deployment counts none
        and the chip's own interconnect is assumed, and ``"network"`` where a layout wider than a node names no
        network and the chip's system's is assumed; empty where every collective is priced by a measured curve.
    is_lower_bound : always False: an estimate.
    """

    bound_s: ArrayLike
    estimate_s: ArrayLike
    estimate_low_s: ArrayLike
    estimate_high_s: ArrayLike
    regime: str
    regime_rows: int
    pooled: bool
    flags: dict
    is_lower_bound: bool = False


def interval_s(bound_s, estimate_s, regimes) -> tuple:
    """``(estimate, low, high)`` seconds: an estimate kept at or above its bound, and the 80% interval that covers
    every regime in ``regimes`` (the lowest low end and the highest high end of their errors), the low end never
    below the bound. One regime gives :class:`Estimate`'s interval; several give one interval for a curve that
    crosses regimes (:mod:`kvmath.load`'s decode step over running counts), so its ends stay as convex in the
    count as the estimate is, instead of jumping where the regime changes."""
    errors = [regime_errors()[r] for r in regimes]
    estimate_s = np.maximum(estimate_s, bound_s)
    low = np.maximum(bound_s, estimate_s * math.exp(min(e.log_low for e in errors)))
    return estimate_s, low, np.maximum(low, estimate_s * math.exp(max(e.log_high for e in errors)))


def _estimate(bound_s, estimate_s, regime: str, c: _Constants) -> Estimate:
    e = regime_errors()[regime]
    estimate_s, low, high = interval_s(bound_s, estimate_s, (regime,))
    return Estimate(bound_s=plain(bound_s), estimate_s=plain(estimate_s), estimate_low_s=plain(low),
                    estimate_high_s=plain(high), regime=regime, regime_rows=e.rows, pooled=e.pooled,
                    flags=dict(c.flags))


#: How an :class:`Estimate` of a sum (a request's prefill and decode) names the regimes of its parts.
REGIME_JOIN = " + "


def regimes_of(estimate: Estimate) -> tuple:
    """The regimes whose errors set ``estimate``'s interval: one, or each part's of a sum (:data:`REGIME_JOIN`).

    Examples
    --------
    >>> r = estimate_request(Deployment("llama-3-8b", "h100-sxm"), 1, 8000, 16)
    >>> regimes_of(r.total), regimes_of(r.decode)
    (('prefill', 'batch1'), ('batch1',))
    """
    instance("estimate", estimate, Estimate, "an Estimate")
    return tuple(str(estimate.regime).split(REGIME_JOIN))


def _sum_ends(parts) -> tuple:
    """``(estimate, low, high)`` seconds of a time that is the sum of ``parts`` (:class:`Estimate`): each the sum
    of the parts'. The parts' errors are taken as moving together (a fast prefill beside a fast decode), the
    widest reading short of adding their worst cases by hand: a sum's interval is then never narrower than a
    part's, and where one part dominates it is nearly that part's interval."""
    return tuple(sum(getattr(e, f) for e in parts) for f in ("estimate_s", "estimate_low_s", "estimate_high_s"))


def _sum(bound_s, parts) -> Estimate:
    """An :class:`Estimate` of a sum of ``parts`` beside its bound (:func:`_sum_ends`), named by their regimes."""
    estimate_s, low, high = _sum_ends(parts)
    regimes = tuple(dict.fromkeys(e.regime for e in parts))
    low = np.maximum(bound_s, low)
    flags = {}
    for e in parts:
        flags.update(e.flags)
    return Estimate(bound_s=plain(bound_s), estimate_s=plain(np.maximum(estimate_s, bound_s)),
                    estimate_low_s=plain(low), estimate_high_s=plain(np.maximum(low, high)),
                    regime=REGIME_JOIN.join(regimes), regime_rows=sum(regime_errors()[r].rows for r in regimes),
                    pooled=any(e.pooled for e in parts), flags=flags)


def estimate_step(dep: Deployment, batch: ArrayLike, context: ArrayLike, *, tokens_per_seq: ArrayLike = 1,
                  engine: str | None = None) -> Estimate:
    """An estimate of one decode step of ``batch`` sequences of ``context`` cached tokens (beside ``strict_s``).

    ``engine`` (every estimate function takes it): the serving engine, which sets the all-reduce its
    collectives are priced by (:data:`ENGINE_ALGORITHMS`); default the fastest measured curve.

    Examples
    --------
    gpt-fast's Llama 2 7B in bf16 on one A100 measured 9.53 ms a token:

    >>> e = estimate_step(Deployment("llama-2-7b", "a100-80gb"), 1, 105)
    >>> e.regime, e.bound_s < e.estimate_low_s <= e.estimate_s <= e.estimate_high_s
    ('batch1', True)
    """
    instance("dep", dep, Deployment, "a Deployment")
    step = dep.step(batch, context, tokens_per_seq=tokens_per_seq)
    c = _constants(dep, engine)
    price = _step_pricer(dep, _routed(dep, step), c)
    return _estimate(step.strict_s, price(EstimateParameters.fitted()), regime_of(dep, batch), c)


def estimate_terms(dep: Deployment, batch: ArrayLike, context: ArrayLike, *, tokens_per_seq: ArrayLike = 1,
                   engine: str | None = None) -> dict:
    """The terms of :func:`estimate_step`'s estimate of one decode step, seconds, by name.

    ``fixed`` (the step's and its layers' overheads), ``attention`` (the
    cache's kernel: its read or its math, the longer), ``weight_read`` and
    ``unpacking`` (the weights' bytes at the fitted bandwidth, and the
    unpacking of those stored below the width they multiply at),
    ``weight_compute`` (their matmuls at the fitted rate), ``activations``
    (the fitted cost per token and layer) and ``collectives``; the step's
    estimate is their sum, before it is kept at or above the bound.

    Examples
    --------
    Llama 3 8B in Q4_0 on an RTX 4090 at batch 1: the bytes, not their unpacking, set the weights' kernel:

    >>> t = estimate_terms(Deployment("llama-3-8b", "rtx-4090", weights="q4_0"), 1, 256)
    >>> bool(t["unpacking"] < t["weight_read"]), sorted(t)[:3]
    (True, ['activations', 'attention', 'collectives'])
    """
    instance("dep", dep, Deployment, "a Deployment")
    step = _routed(dep, dep.step(batch, context, tokens_per_seq=tokens_per_seq))
    c, p = _constants(dep, engine), EstimateParameters.fitted()
    comm = _collectives(c, step)
    n = p.unfused_activation_passes if c.unfused else p.activation_passes
    return {"fixed": plain(_fixed_s(c, p)),
            "attention": plain(np.maximum(step.kv_read_s / p.memory_efficiency,
                                          step.attention_compute_s / p.matmul_efficiency)),
            "weight_read": plain(step.weight_read_s / p.memory_efficiency),
            "unpacking": plain(_unpack_s(c, step) * p.dequant_flops_per_weight),
            "weight_compute": plain(step.weight_compute_s / p.matmul_efficiency),
            "activations": plain(comm[1] * n / p.memory_efficiency), "collectives": plain(comm[0])}


def estimate_pass(dep: Deployment, step: Step, *, prompt_tokens_per_pass: float = 0.0,
                  engine: str | None = None) -> Estimate:
    """An estimate of a pass the deployment already bounded (a :meth:`~kvmath.Deployment.step` or
    :meth:`~kvmath.Deployment.prefill` of ``dep``, beside its ``strict_s``); ``prompt_tokens_per_pass``
    picks the regime (:func:`regime_of`)."""
    instance("dep", dep, Deployment, "a Deployment")
    instance("step", step, Step, "a Step of the deployment")
    regime = regime_of(dep, step.batch, prompt_tokens_per_pass)
    c = _constants(dep, engine)
    if prompt_tokens_per_pass > 1 and dep.layout.pp > 1:  # a prefill pass: one stage's share of its group's chain
        comm = _collectives(c, step, stage=True)
        return _estimate(step.strict_s, _pass_s(step, c, EstimateParameters.fitted(), comm, _unpack_s(c, step)),
                         regime, c)
    priced = _routed(dep, step) if prompt_tokens_per_pass <= 1 else step
    return _estimate(step.strict_s, _step_pricer(dep, priced, c)(EstimateParameters.fitted()), regime, c)


def estimate_prefill(dep: Deployment, batch: ArrayLike, input_tokens: ArrayLike, *,
                     chunk_tokens: int | None = None, engine: str | None = None) -> Estimate:
    """An estimate of the time to the first token (beside :func:`kvmath.requests.prefill_bound`)."""
    from .requests import prefill_bound

    instance("dep", dep, Deployment, "a Deployment")
    bound = prefill_bound(dep, batch, input_tokens, chunk_tokens=chunk_tokens)
    c = _constants(dep, engine)
    price = _prefill_pricer(dep, positive("batch", batch), positive_int("input_tokens", input_tokens), c,
                            chunk_tokens)
    per_pass = np.minimum(input_tokens, chunk_tokens) if chunk_tokens else input_tokens
    return _estimate(bound, price(EstimateParameters.fitted()), regime_of(dep, batch, float(np.min(per_pass))), c)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class RequestEstimate(Result):
    """Estimates of every time :class:`kvmath.Request` reports, each beside its bound.

    Attributes
    ----------
    ttft, decode, total, time_per_output_token : :class:`Estimate` of ``ttft_s``, ``decode_s``, ``total_s`` and
        ``time_per_output_token_s``: the prefill's regime for the first, the decode steps' for the second and
        the last; the total is their sum, its interval the sum of theirs (:func:`regimes_of` names both).
    """

    ttft: Estimate
    decode: Estimate
    total: Estimate
    time_per_output_token: Estimate


def estimate_request(dep: Deployment, batch: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
                     chunk_tokens: int | None = None, engine: str | None = None) -> RequestEstimate:
    """Estimates of a batch of whole requests: the prefill, then ``output_tokens - 1`` decode steps.

    Examples
    --------
    >>> r = estimate_request(Deployment("llama-2-7b", "a100-80gb", weights="fp16"), 60, 128, 2048)
    >>> r.total.regime, r.total.bound_s < r.total.estimate_s
    ('prefill + large_batch', True)
    """
    instance("dep", dep, Deployment, "a Deployment")
    req = dep.request(batch, input_tokens, output_tokens, chunk_tokens=chunk_tokens)
    p = EstimateParameters.fitted()
    s_in, s_out = np.asarray(req.input_tokens, dtype=float), np.asarray(req.output_tokens, dtype=float)
    c = _constants(dep, engine)
    ttft = _prefill_pricer(dep, req.batch, req.input_tokens, c, chunk_tokens)(p)
    decode = _decode_pricer(dep, req.batch, s_in + 1.0, s_in + s_out - 1.0, c)(p)
    per_pass = np.minimum(s_in, chunk_tokens) if chunk_tokens else s_in
    decode_regime = regime_of(dep, batch)
    steps = np.maximum(s_out - 1, 1)
    parts = (_estimate(req.ttft_s, ttft, regime_of(dep, batch, float(np.min(per_pass))), c),
             _estimate(req.decode_s, decode, decode_regime, c))
    return RequestEstimate(
        ttft=parts[0], decode=parts[1], total=_sum(req.total_s, parts),
        time_per_output_token=_estimate(req.time_per_output_token_s, decode / steps, decode_regime, c))


def _mixed_step_s(dep: Deployment, step, p: EstimateParameters, c: _Constants):
    """The estimate of a continuous-batching step (:class:`kvmath.batching.MixedStep`).

    A mixed step keeps only its totals (bytes, FLOPs), so its bytes and its
    arithmetic are priced as the weights' kernels are, in series (the pass's
    form with the attention folded into the weights' term). Its
    collectives carry the step's decode and prompt tokens, a pipeline's
    ``1 / pp`` of them at a time.
    """
    comm = _chain(c, (step.batch + step.prefill_tokens) / dep.layout.pp, c.dep)
    unpack = _unpack_s(c, step, tokens_per_seq=1 + step.prefill_tokens / step.batch)
    read = (step.weight_bytes_read + step.kv_bytes_read) / step.bandwidth / p.memory_efficiency \
        + unpack * p.dequant_flops_per_weight
    work = read + step.total_flops / step.flops / p.matmul_efficiency
    return _fixed_s(c, p) + work + _comm_s(comm, p, c)


def estimate_steady_state(dep: Deployment, batch: ArrayLike, input_tokens: ArrayLike,
                          output_tokens: ArrayLike, *, engine: str | None = None) -> Estimate:
    """An estimate of a continuous-batching steady state's step, its time per output token (beside
    :func:`kvmath.batching.steady_state`'s ``time_per_output_token_s``).

    Examples
    --------
    >>> e = estimate_steady_state(Deployment("llama-3-8b", "h100-sxm"), 64, 1000, 200)
    >>> e.regime, e.bound_s < e.estimate_s
    ('large_batch', True)
    """
    instance("dep", dep, Deployment, "a Deployment")
    state = dep.steady_state(batch, input_tokens, output_tokens)
    c = _constants(dep, engine)
    return _estimate(state.time_per_output_token_s, _mixed_step_s(dep, state.step, EstimateParameters.fitted(), c),
                     regime_of(dep, batch), c)


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class FrontierEstimate(Result):
    """The serving frontier's best operating point, estimated: per request shape (arrays over the shapes).

    The memory cap is the bound's (:class:`kvmath.Frontier`'s ``fits``); the
    batch is the one of highest estimated throughput per chip among those that
    fit and whose estimated time per output token meets the limit.

    Attributes
    ----------
    best_batch : the batch (0 where none fits or meets the limit).
    throughput_per_chip_estimate, throughput_per_chip_estimate_low, throughput_per_chip_estimate_high :
        output tokens/s per chip at it, and the ends of the 80% interval (the total time's).
    time_per_output_token : :class:`Estimate` of the time per output token at it (its ``regime`` and
        ``regime_rows`` per shape, as ``regime``).
    regime : the decode steps' regime at the batch picked, per shape (``"batch1"`` where it is one sequence on one
        chip, the large-batch regime above): the regime whose errors set the interval of its time per token.
    """

    best_batch: np.ndarray
    throughput_per_chip_estimate: np.ndarray
    throughput_per_chip_estimate_low: np.ndarray
    throughput_per_chip_estimate_high: np.ndarray
    time_per_output_token: Estimate
    regime: np.ndarray


def estimate_frontier(dep: Deployment, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
                      batch: ArrayLike | None = None, tpot_limit_s: float | None = None,
                      budget: str = "device", engine: str | None = None) -> FrontierEstimate:
    """The frontier's best batch and throughput per chip as estimated (beside :func:`kvmath.requests.serving_frontier`).

    Examples
    --------
    >>> dep = Deployment("llama-3-70b", "h100-sxm", "tp=8", link="nvlink4")
    >>> f = dep.frontier(1000, 1000, tpot_limit_s=0.015)
    >>> e = estimate_frontier(dep, 1000, 1000, tpot_limit_s=0.015)
    >>> bool(e.throughput_per_chip_estimate[0] < f.best_throughput_per_chip[0]), e.regime.tolist()
    (True, ['multi_chip'])
    """
    instance("dep", dep, Deployment, "a Deployment")
    f = dep.frontier(input_tokens, output_tokens, batch=batch, tpot_limit_s=tpot_limit_s, budget=budget)
    r = f.requests
    b = np.asarray(r.batch, dtype=float)
    s_in, s_out = np.asarray(r.input_tokens, dtype=float), np.asarray(r.output_tokens, dtype=float)
    p = EstimateParameters.fitted()
    c = _constants(dep, engine)
    ttft = _estimate(r.ttft_s, _prefill_pricer(dep, b, r.input_tokens, c)(p),
                     regime_of(dep, b, float(np.min(s_in))), c)
    decode = _decode_pricer(dep, b, s_in + 1.0, s_in + s_out - 1.0, c)(p)
    many = np.broadcast_to(b > 1, np.shape(decode))

    def by_batch(bound_s, estimate_s):
        # each batch's decode regime: batch 1 on one chip is the small-batch regime, not the large one
        one, more = (_estimate(bound_s, estimate_s, regime_of(dep, x), c) for x in (1.0, 2.0))
        return Estimate(**{k: (np.where(many, v, getattr(one, k)) if k not in ("flags", "is_lower_bound") else v)
                           for k, v in vars(more).items()})

    tpot = by_batch(r.time_per_output_token_s, decode / np.maximum(s_out - 1, 1))
    total_s, total_low, total_high = _sum_ends((ttft, by_batch(r.decode_s, decode)))
    tokens = b * s_out / dep.n_chips
    allowed = f.fits if tpot_limit_s is None else f.fits & ((s_out == 1) | (tpot.estimate_s <= tpot_limit_s))
    score = np.where(allowed, tokens / total_s, -np.inf)
    pick = np.argmax(score, axis=0)
    found = np.any(allowed, axis=0)

    def at(x):
        return np.where(found, np.take_along_axis(np.broadcast_to(x, score.shape), pick[None, :], 0)[0], 0.0)

    cols = np.arange(score.shape[1])
    picked = Estimate(**{k: (np.broadcast_to(v, score.shape)[pick, cols] if isinstance(v, np.ndarray) else v)
                         for k, v in vars(tpot).items()})
    return FrontierEstimate(best_batch=np.where(found, np.broadcast_to(b, score.shape)[pick, cols], 0),
                            throughput_per_chip_estimate=at(tokens / total_s),
                            throughput_per_chip_estimate_low=at(tokens / total_high),
                            throughput_per_chip_estimate_high=at(tokens / total_low),
                            time_per_output_token=picked, regime=picked.regime)


# ----- the calibration rows, priced as bound_for bounds them --------------------------------------------

#: The share of the memory beside the weights that a serving engine gives its cache: TensorRT-LLM's
#: ``kv_cache_free_gpu_mem_fraction`` default, 0.90 (its performance overview, docs/source/performance/perf-overview.md:
#: "the default setting of 0.90"; some of its runs set 0.95).
KV_CACHE_FRACTION = 0.9


def in_flight_batch(dep: Deployment, requests: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike) -> ArrayLike:
    """Requests a continuous-batching run holds at once: all of them, or as many as the cache holds at full length.

    A run of ``requests`` requests at an infinite rate (TensorRT-LLM's
    ``trtllm-bench throughput``, MLPerf's Offline scenario, vLLM's throughput
    benchmark) starts a request when its cache fits, reserving it to
    completion: TensorRT-LLM's default capacity policy, ``GUARANTEED_NO_EVICT``
    (``SchedulerConfig`` in tensorrt_llm/llmapi/llm_args.py), and trtllm-bench's
    own sizing, which divides the cache memory by each request's
    ``input + output`` tokens (``calc_engine_setting`` in
    tensorrt_llm/bench/build/tuning.py); an engine that allocates as it goes
    (vLLM) must preempt beyond it. The cache memory is
    :data:`KV_CACHE_FRACTION` of what the busiest chip holds beside its
    weights, its memory as the device reports it (the marketed size where the
    chip preset has no reported total). The bound takes every request at once;
    the estimate of such a run prices this many (:func:`_row_pricer`).

    Examples
    --------
    Llama 3.1 70B in FP8 on one H200 (150.75 GB reported, 70.55 GB of weights) at 128 tokens in and 2,048 out:
    each request's FP8 cache holds 2,176 x 160 KiB (356.5 MB), and 0.9 x 80.20 GB holds 202 of them, so of
    3,000 requests 202 run at once.

    >>> int(in_flight_batch(Deployment("llama-3.1-70b", "h200", weights="fp8", kv="fp8"), 3000, 128, 2048))
    202
    """
    from .memory import memory_budget

    instance("dep", dep, Deployment, "a Deployment")
    requests = positive("requests", requests)
    try:
        memory = memory_budget(dep.chip, "reported")
    except ValueError:  # no reported total: the marketed size, a little less
        memory = dep.chip.hbm_bytes
    full = positive_int("input_tokens", input_tokens) + positive_int("output_tokens", output_tokens)
    weights = dep.capacity(full, hbm_bytes=memory).weight_bytes_per_chip
    held = dep.capacity(full, hbm_bytes=weights + KV_CACHE_FRACTION * (memory - weights)).max_batch
    return plain(np.minimum(requests, np.maximum(held, 1.0)))


def _row_pricer(m):
    """``(price, constants)``: ``price(params)`` the estimate of one measurement in seconds per unit
    (``bound_for``'s ``unit_s``), its collectives priced with the row's engine's all-reduce."""
    from .calibration import _deployment

    dep = _deployment(m)
    c = _constants(dep, m.engine)
    if m.metric in ("ttft_s", "prefill_tok_s"):
        price = _prefill_pricer(dep, float(m.batch), m.input_tokens, c, m.chunk_tokens, m.last_mlp_logits_only)
        per_unit = 1.0 if m.metric == "ttft_s" else m.batch * m.input_tokens
        return (lambda p: price(p) / per_unit), c
    if m.metric in ("s_per_token", "user_tok_s"):
        step = dep.step(m.batch, float(m.input_tokens), tokens_per_seq=m.tokens_per_step, routing=ROUTING)
        price = _step_pricer(dep, step, c)
        per_unit = 1.0 if m.metric == "s_per_token" else m.tokens_per_step
        return (lambda p: price(p) / per_unit), c
    if m.metric == "seq_tok_s" and m.input_tokens == 0:  # llama-bench tg N: steps at contexts 1 .. N
        price = _decode_pricer(dep, float(m.batch), 1.0, float(m.output_tokens), c)
        return (lambda p: price(p) / m.output_tokens), c
    # a continuous-batching run holds as many requests at once as its cache admits, in waves of that many
    batch = float(in_flight_batch(dep, m.batch, m.input_tokens, m.output_tokens)) if m.continuous_batching \
        else float(m.batch)
    waves = m.batch / batch
    prefill = _prefill_pricer(dep, batch, m.input_tokens, c)
    decode = _decode_pricer(dep, batch, m.input_tokens + 1.0, m.input_tokens + m.output_tokens - 1.0, c)
    return (lambda p: waves * (prefill(p) + decode(p)) / m.output_tokens), c


def estimate_for(measurement) -> Estimate:
    """The estimate of one calibration row in seconds per unit of its measurement, beside ``bound_for``'s ``unit_s``.

    Examples
    --------
    >>> e = estimate_for("gf-7b-bf16")
    >>> e.regime, round(1 / e.bound_s, 1)          # the bound: 153.7 tokens/s
    ('batch1', 153.7)
    """
    from .calibration import bound_for

    b = bound_for(measurement)
    m = b.measurement
    price, c = _row_pricer(m)
    return _estimate(b.unit_s, price(EstimateParameters.fitted()), m.regime, c)


# ----- the fit -----------------------------------------------------------------------------------------

def _to_params(x: np.ndarray) -> EstimateParameters:
    """Unconstrained coordinates (last axis: one per parameter) -> parameters in their ranges."""
    values = {}
    for i, (name, unit, *_rest) in enumerate(PARAMETERS):
        v = x[..., i, None]  # a trailing axis, so that a chunk axis of a pass broadcasts beside it
        if unit == "fraction":
            values[name] = 1 / (1 + np.exp(-v))
        else:
            values[name] = np.exp(v)
    return EstimateParameters(**values)


def _to_coordinates(p: EstimateParameters) -> np.ndarray:
    out = []
    for name, unit, *_rest in PARAMETERS:
        v = float(getattr(p, name))
        out.append(math.log(v / (1 - v)) if unit == "fraction" else math.log(v))
    return np.array(out)


#: Where the fit starts: round physical values (datasheet-level efficiencies, microseconds of overhead).
_START = EstimateParameters(memory_efficiency=0.85, layer_overhead_s=30e-6, step_overhead_s=300e-6,
                            dequant_flops_per_weight=10.0,
                            matmul_efficiency=0.6, activation_passes=8.0,
                            unfused_activation_passes=8.0)


#: Where Huber's loss turns linear, in log units: a row more than about 20% off counts by its distance.
_HUBER_LOG = 0.2
#: The pull towards :data:`_START` (in squared log units per squared coordinate).
_RIDGE = 1e-4


@lru_cache(maxsize=1)
def _table():
    """Every calibration row with its pricer and measured seconds per unit (``unit_s / ratio``)."""
    from .calibration import calibrate

    return tuple((c.measurement, _row_pricer(c.measurement)[0], c.unit_s / c.ratio) for c in calibrate())


def _fitted():
    """The rows of :func:`_table` the fit sees: all but those :data:`kvmath.calibration.HELD_OUT` names."""
    return tuple(row for row in _table() if not row[0].held_out)


def _log_residuals(pricers, measured_s, x: np.ndarray) -> np.ndarray:
    """``log(measured / estimate)`` of each row (columns) at each coordinate vector (rows of ``x``)."""
    x = np.atleast_2d(x)
    p = _to_params(x)
    est = np.column_stack([np.broadcast_to(np.reshape(price(p), (len(x), -1))[:, :1], (len(x), 1))[:, 0]
                           for price in pricers])
    return np.log(measured_s)[None, :] - np.log(est)


def _huber(r: np.ndarray) -> np.ndarray:
    """Twice the Huber loss of log residuals: squares within :data:`_HUBER_LOG`, linear beyond."""
    a = np.abs(r)
    return np.where(a <= _HUBER_LOG, r * r, 2 * _HUBER_LOG * a - _HUBER_LOG**2)


def _fit(pricers, measured_s, iterations: int = 100) -> np.ndarray:
    """Levenberg-Marquardt on the log residuals from :data:`_START`: coordinates of the robust least squares.

    The loss is Huber's on ``log(measured / estimate)``: a row the terms
    cannot explain (a reference implementation in eager PyTorch, a
    production day's average) counts linearly, not quadratically, so it
    does not drag every parameter towards itself (the loss's weights
    enter the Gauss-Newton step, iteratively reweighted). A weak pull towards
    the start (:data:`_RIDGE`) keeps a parameter that no row moves (a fold
    without multi-chip rows, say) where it started. The Jacobian is central
    differences, every probe priced in one broadcast call per row.
    """
    x0 = _to_coordinates(_START)
    x, n, h, lam = x0.copy(), len(x0), 1e-5, 1e-3
    pull = math.sqrt(_RIDGE)

    def cost(r, at):
        return float(np.sum(_huber(r)) + _RIDGE * (at - x0) @ (at - x0))

    r = _log_residuals(pricers, measured_s, x)[0]
    for _ in range(iterations):
        probes = np.vstack([x + h * np.eye(n), x - h * np.eye(n)])
        rp = _log_residuals(pricers, measured_s, probes)
        w = np.sqrt(np.minimum(1.0, _HUBER_LOG / np.maximum(np.abs(r), 1e-300)))
        jac = (rp[:n] - rp[n:]).T / (2 * h) * w[:, None]
        now = cost(r, x)
        while True:
            a = np.vstack([jac, pull * np.eye(n), math.sqrt(lam) * np.eye(n)])
            b = np.concatenate([-r * w, -pull * (x - x0), np.zeros(n)])
            step = np.linalg.lstsq(a, b, rcond=None)[0]
            r_new = _log_residuals(pricers, measured_s, x + step)[0]
            if cost(r_new, x + step) < now or lam > 1e10:
                break
            lam *= 10
        if cost(r_new, x + step) >= now:
            break
        x, r, lam = x + step, r_new, max(lam / 10, 1e-12)
        if now - cost(r, x) < 1e-14 * max(now, 1e-300):
            break
    return x


def fit(exclude_sources: frozenset = frozenset()) -> EstimateParameters:
    """Fit :data:`PARAMETERS` on the calibration table, leaving out the rows of ``exclude_sources``."""
    rows = [(m, price, t) for m, price, t in _fitted() if m.source not in exclude_sources]
    return _plain_params(_fit([price for _, price, _ in rows], np.array([t for *_, t in rows])))


def _plain_params(x: np.ndarray) -> EstimateParameters:
    return EstimateParameters(**{k: float(np.ravel(v)[0]) for k, v in vars(_to_params(x[None, :])).items()})


@dataclass(frozen=True)
class CrossValidation:
    """Leave-one-source-out errors of the estimate: every row estimated by a fit that did not see its source.

    Attributes
    ----------
    ids, regimes, sources : each row's id, regime and source.
    log_residuals : ``log(measured / estimate)`` of each row, out of sample.
    low, high : each row's interval ends as log residuals, from the residuals of the other sources' rows.
    by_regime : :class:`RegimeErrors` of each regime and of ``"all"`` rows.
    folds : the parameters fitted without each source, by source (their spread is each parameter's
        uncertainty under a change of sources).
    held_out : the rows held out of every fit (:data:`kvmath.calibration.HELD_OUT`): id -> ``log(measured /
        estimate)`` under the fit on all the other rows, which never saw them.
    """

    ids: tuple
    regimes: tuple
    sources: tuple
    log_residuals: np.ndarray
    low: np.ndarray
    high: np.ndarray
    by_regime: dict
    folds: dict
    held_out: dict


def _interval(residuals: np.ndarray, pooled: np.ndarray, n_rows: int) -> tuple[float, float, bool]:
    """An interval's ends (log residuals): the regime's own 10th and 90th percentiles, or the pooled 5th and 95th."""
    if n_rows < ROWS_PER_PARAMETER:
        lo, hi = np.quantile(pooled, POOLED_QUANTILES, method="weibull")
        return float(lo), float(hi), True
    tail = (1 - INTERVAL) / 2
    # order statistics at ranks p (n + 1): a new exchangeable residual falls between them with probability 0.8
    # (the plain sample quantiles of n = 8 rows would cover about 62%)
    lo, hi = np.quantile(residuals, (tail, 1 - tail), method="weibull")
    return float(lo), float(hi), False


def cross_validate() -> CrossValidation:
    """Leave each source out in turn, fit on the rest, estimate its rows; then each regime's errors and intervals.

    A row's interval for the coverage is computed from the residuals of
    the rows of *other* sources (the same rule as the stated interval,
    without its own source), so coverage is measured out of sample too.
    """
    table = _fitted()
    ids = tuple(m.id for m, *_ in table)
    regimes = np.array([m.regime for m, *_ in table])
    sources = np.array([m.source for m, *_ in table])
    measured = np.array([t for *_, t in table])
    resid = np.empty(len(table))
    folds = {}
    for source in sorted(set(sources)):
        held = sources == source
        x = _fit([price for (m, price, _t), keep in zip(table, ~held) if keep], measured[~held])
        folds[source] = _plain_params(x)
        resid[held] = _log_residuals([price for (m, price, _t), h in zip(table, held) if h], measured[held], x)[0]
    low, high = np.empty(len(table)), np.empty(len(table))
    for i in range(len(table)):
        other = sources != sources[i]
        mine = other & (regimes == regimes[i])
        low[i], high[i], _ = _interval(resid[mine], resid[other], int(np.sum(regimes == regimes[i])))
    by_regime = {}
    from .calibration import REGIMES

    for regime in (*REGIMES, "all"):
        sel = np.ones(len(table), bool) if regime == "all" else regimes == regime
        err = np.abs(np.expm1(resid[sel]))
        lo, hi, pooled = _interval(resid[sel], resid, int(np.sum(sel)))
        inside = (resid[sel] >= low[sel]) & (resid[sel] <= high[sel])
        by_regime[regime] = RegimeErrors(
            regime=regime, rows=int(np.sum(sel)), sources=len(set(sources[sel])),
            median_abs_error=float(np.median(err)), p90_abs_error=float(np.quantile(err, 0.9)),
            log_low=lo, log_high=hi, pooled=pooled, coverage=float(np.mean(inside)),
            median_half_width=float(np.median((np.exp(high[sel]) - np.exp(low[sel])) / 2)))
    x = _fit([price for _m, price, _t in table], measured)
    out = [(m, price, t) for m, price, t in _table() if m.held_out]
    held_out = dict(zip((m.id for m, *_ in out), _log_residuals([price for _m, price, _t in out],
                                                                np.array([t for *_, t in out]), x)[0].tolist()))
    return CrossValidation(ids=ids, regimes=tuple(regimes), sources=tuple(sources), log_residuals=resid,
                           low=low, high=high, by_regime=by_regime, folds=folds, held_out=held_out)


def _rows_moved_by(name: str, params: EstimateParameters, table) -> list[str]:
    """Ids of the rows of ``table`` whose estimate changes when parameter ``name`` moves from ``params``."""
    i = [n for n, *_ in PARAMETERS].index(name)
    x = _to_coordinates(params)
    probe = _to_params(np.vstack([x, x + 1e-3 * np.eye(len(x))[i]]))
    out = []
    for m, price, _t in table:
        v = np.reshape(price(probe), (2, -1))[:, 0]
        if abs(v[1] / v[0] - 1) > 1e-9:
            out.append(m.id)
    return out


def parameter_rows(name: str) -> list[str]:
    """The calibration rows whose estimate a parameter changes: the rows it was fitted on.

    Examples
    --------
    >>> "gf-7b-int4" in parameter_rows("dequant_flops_per_weight"), "gf-7b-bf16" in parameter_rows("dequant_flops_per_weight")
    (True, False)
    """
    names = [n for n, *_ in PARAMETERS]
    if name not in names:
        raise ValueError(f"name must be one of {names}, got {name!r}")
    return _rows_moved_by(name, EstimateParameters.fitted(), _fitted())


def parameter_table() -> list[dict]:
    """Each fitted parameter: its name, unit, home regimes, meaning, fitted value and the rows it was fitted on."""
    p = EstimateParameters.fitted()
    return [{"name": name, "unit": unit, "home": list(home), "meaning": meaning, "value": float(getattr(p, name)),
             "rows": parameter_rows(name)} for name, unit, home, meaning in PARAMETERS]


__all__ = ["PARAMETERS", "ENGINE_ALGORITHMS", "KV_CACHE_FRACTION", "in_flight_batch", "REGIME_JOIN", "regimes_of", "estimate_terms", "UNFUSED_ENGINES", "activation_width", "engine_algorithm", "Estimate", "EstimateParameters", "RegimeErrors", "RequestEstimate", "CrossValidation",
           "collective_estimate_s", "cross_validate", "estimate_for", "estimate_pass", "estimate_prefill", "estimate_request",
           "estimate_step", "estimate_steady_state", "estimate_frontier", "FrontierEstimate", "fit", "parameter_rows", "parameter_table", "regime_errors", "regime_of"]
