"""The chip's side of a step: the FLOP rate a model's matmuls run at, and the batch where they catch up.

The step itself is :meth:`kvmath.Deployment.step` (one step model for
every question); this module holds the rules it takes from the chip:
:func:`compute_rate` (each weight format at its native rate) and
:func:`model_critical_batch` (where the weight matmuls take as long as
the weights they read).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from .hardware import Chip
from .models import Model, Precision, _group_bytes, group_formats
from .moe import ROUTINGS
from .results import Result
from .validation import checked, choice, instance, positive




def format_rate(chip: Chip, fmt) -> float:
    """The rate a chip runs matmuls of one weight format at (a bytes-per-weight number: bf16)."""
    return chip.flops_for_format(fmt) if isinstance(fmt, str) else chip.flops("bf16")


@checked
def compute_rate(chip: Chip, weights: Precision, compute_dtype: str | None = None, model: Model | None = None) -> float:
    """FLOP/s of a step's matmuls: ``compute_dtype`` if given, else each weight group's own format's rate.

    A format runs at its native rate where the chip has it, else at bf16
    (:meth:`kvmath.Chip.flops_for_format`); bytes per weight given as a
    number run at bf16. With a ``model`` and a mapping of formats, groups
    at different rates combine into the one rate that gives the same total
    time, ``sum(P_g) / sum(P_g / C_g)`` over the model's matmul parameters;
    attention's own math runs at that rate too.

    Examples
    --------
    >>> from kvmath import Chip, Model
    >>> h100 = Chip.preset("h100-sxm")
    >>> compute_rate(h100, "fp8") / 1e12, compute_rate(h100, "fp8", "bf16") / 1e12
    (1978.9, 989.4)
    >>> mixed = {"default": "bf16", "experts": "fp8"}  # Mixtral: most matmul parameters are experts
    >>> round(compute_rate(h100, mixed, model=Model.preset("mixtral-8x7b")) / 1e12)
    1774
    """
    instance("chip", chip, Chip, "a Chip (Chip.preset(name))")
    if model is not None:
        instance("model", model, Model, "a Model (Model.preset(name)) or None")
    _group_bytes(weights, False)  # refuse a bad weights even where compute_dtype makes it unused
    return _compute_rate(chip, weights, compute_dtype, model)


def _compute_rate(chip: Chip, weights: Precision, compute_dtype: str | None, model: Model | None) -> float:
    """:func:`compute_rate` on checked arguments (a Deployment checks them when it is built)."""
    formats = group_formats(weights, model.tied_embeddings if model is not None else False)
    if compute_dtype is not None:
        return chip.flops(compute_dtype)

    def rate(fmt) -> float:
        return format_rate(chip, fmt)

    if model is None:
        if isinstance(weights, Mapping) and len({rate(f) for f in formats.values()}) > 1:
            raise ValueError("weights mixes formats of different compute rates: pass the model to combine them")
        return rate(formats["mlp"])
    params = model.matmul_params_by_group()
    time_per_flop = sum(n / rate(formats[g]) for g, n in params.items())
    return sum(params.values()) / time_per_flop


@checked
def model_critical_batch(
    model: Model,
    chip: Chip,
    weights: Precision = "bf16",
    compute_dtype: str | None = None,
    routing: str = "uniform",
) -> float:
    """Batch at which the weight matmuls take as long as reading the weights the batch touches.

    Solves ``weight_bytes_read(B) / W = 2 * P_matmul * B / C``. For a dense
    model this is about ``C * b_w / (2 W)``, a property of the chip and the
    dtypes. For an MoE model the bytes read grow with B until every expert is
    touched, so it depends on the model: about ``P_total / P_active`` times
    the dense figure once saturated (uniform routing by default, an
    estimate; ``routing="floor"`` gives the k-expert floor's batch).

    Examples
    --------
    >>> from kvmath import Chip, Model
    >>> h100 = Chip.preset("h100-sxm")
    >>> round(model_critical_batch(Model.preset("llama-2-70b"), h100))  # C * b_w / (2 W) = 295.3
    295
    >>> round(model_critical_batch(Model.preset("mixtral-8x7b"), h100))
    1079
    """
    routing = choice("routing", routing, ROUTINGS)
    instance("model", model, Model, "a Model (Model.preset(name))")
    flops = compute_rate(chip, weights, compute_dtype, model)
    bandwidth = chip.bandwidth
    matmul = model.matmul_params_per_token()

    def excess(b: float) -> float:
        return 2 * matmul * b / flops - model.weight_bytes_read(b, weights, routing) / bandwidth

    crossing = _solve_crossing(excess)
    if crossing == float("inf"):
        raise ValueError(f"{model.name}: the weight math never catches up with the reads below a batch of 1e9")
    return crossing


def _solve_crossing(excess) -> float:
    """The batch where ``excess(B)`` (math time less read time) turns positive, by bisection on a log scale (the
    reads grow at most linearly in B, the math exactly so); inf if it does not below a batch of 1e9."""
    lo, hi = 1e-6, 1e9
    if excess(hi) < 0:
        return float("inf")
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
        if hi / lo < 1 + 1e-12:
            break
    return float(hi)


@checked
def group_critical_batches(
    model: Model,
    chip: Chip,
    weights: Precision = "bf16",
    compute_dtype: str | None = None,
    routing: str = "uniform",
) -> dict[str, float]:
    """The batch at which each weight group's matmuls take as long as reading that group's weights.

    Kernels run matrix by matrix, so each group of matrices crosses from
    memory-bound to compute-bound at its own batch:
    ``read_g(B) / W = 2 P_g B / C_g``, with ``read_g`` the group's bytes a
    step of ``B`` sequences reads (:meth:`kvmath.Model.weight_bytes_read_by_group`),
    ``P_g`` the parameters each token multiplies by in it and ``C_g`` the
    rate of its format. A dense group crosses at ``C_g b_g / (2 W)``; the
    routed experts of an MoE model, where each expert sees only about
    ``B k / E`` of the tokens, cross near ``E / k`` times that once every
    expert is touched. :func:`model_critical_batch` is one aggregate crossing
    of all bytes against all FLOPs, which lies between the groups' figures.

    Parameters
    ----------
    model, chip : Model, Chip
    weights : str, float or mapping
        Weight formats (by group).
    compute_dtype : str, optional
        The dtype the matmuls run in (default: each group's own format's rate).
    routing : str
        How tokens pick experts: ``"uniform"`` (the estimate, default),
        ``"floor"`` or ``"ceiling"`` (:func:`kvmath.moe.experts_touched`).

    Returns
    -------
    dict
        Group name (``"attention"``, ``"mlp"``, ``"experts"``, ``"shared_experts"``,
        ``"router"``, ``"lm_head"``) to its critical batch (sequences), for each
        group that has matmul parameters. Under ``"floor"`` routing every token
        picks the same experts, which then cross where a dense group does.

    Examples
    --------
    >>> from kvmath import Chip, Model
    >>> b = group_critical_batches(Model.preset("mixtral-8x7b"), Chip.preset("h100-sxm"))
    >>> round(b["attention"]), round(b["experts"])  # 8 experts, 2 per token: 295 x 4, less what 4 tokens touch
    (295, 1181)
    """
    routing = choice("routing", routing, ROUTINGS)
    instance("model", model, Model, "a Model (Model.preset(name))")
    formats = group_formats(weights, model.tied_embeddings)
    matmul = model.matmul_params_by_group()
    bandwidth = chip.bandwidth
    out = {}
    for group, params in matmul.items():
        if params == 0:
            continue
        rate = chip.flops(compute_dtype) if compute_dtype is not None else format_rate(chip, formats[group])

        def excess(b: float, group=group, params=params, rate=rate) -> float:
            read = model.weight_bytes_read_by_group(b, weights, routing)[group]
            return 2 * params * b / rate - read / bandwidth

        out[group] = _solve_crossing(excess)
    return out


@dataclasses.dataclass(frozen=True)
class GroupTimes(Result):
    """Read and math times of a decode step's weight matmuls, group by group (one chip's, in seconds).

    ``grouped_s`` runs the groups one after the other, each at the larger of
    its read and its math time, as kernels do matrix by matrix;
    ``aggregate_s`` is the one fused ``max`` of all reads against all math
    that the critical batch of :func:`model_critical_batch` balances. The
    first is never below the second.
    """

    read_s: dict
    math_s: dict
    _derived = ("grouped_s", "aggregate_s")

    @property
    def grouped_s(self) -> float:
        return float(sum(max(self.read_s[g], self.math_s[g]) for g in self.read_s))

    @property
    def aggregate_s(self) -> float:
        return float(max(sum(self.read_s.values()), sum(self.math_s.values())))


@checked
def group_weight_times(
    model: Model,
    chip: Chip,
    batch: float,
    weights: Precision = "bf16",
    compute_dtype: str | None = None,
    routing: str = "uniform",
) -> GroupTimes:
    """Each weight group's read time and matmul time at ``batch`` sequences (:class:`GroupTimes`).

    The groups of :func:`group_critical_batches`, with the same bytes, FLOPs
    and rates. Attention over the cache is not a weight matmul and is left out.

    Examples
    --------
    >>> from kvmath import Chip, Model
    >>> t = group_weight_times(Model.preset("deepseek-v3"), Chip.preset("h100-sxm"), 5404, "fp8")
    >>> round(t.grouped_s / t.aggregate_s, 2)  # the experts still read-bound, the rest math-bound
    1.42
    """
    routing = choice("routing", routing, ROUTINGS)
    instance("model", model, Model, "a Model (Model.preset(name))")
    batch = float(positive("batch", batch))
    formats = group_formats(weights, model.tied_embeddings)
    read = model.weight_bytes_read_by_group(batch, weights, routing)
    read_s, math_s = {}, {}
    for group, params in model.matmul_params_by_group().items():
        if params == 0:
            continue
        rate = chip.flops(compute_dtype) if compute_dtype is not None else format_rate(chip, formats[group])
        read_s[group] = float(read[group] / chip.bandwidth)
        math_s[group] = 2 * params * batch / rate
    return GroupTimes(read_s, math_s)
