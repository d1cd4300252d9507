"""The chip's side of a step: the FLOP rate a model's matmuls run at, and the batch where they catch up.

The step itself is :meth:`kvmath.Deployment.step` (one step model for
every question); this module holds the rules it takes from the chip:
:func:`compute_rate` (each weight format at its native rate) and
:func:`model_critical_batch` (where the weight matmuls take as long as
the weights they read).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .hardware import Chip
from .models import Model, Precision, _group_bytes, group_formats
from .moe import ROUTINGS
from .validation import checked, choice, instance




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

    lo, hi = 1e-6, 1e9
    if excess(hi) < 0:
        raise ValueError(f"{model.name}: the weight math never catches up with the reads below a batch of 1e9")
    # Bisection on a log scale: the reads grow at most linearly in B, the math exactly so.
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
        if hi / lo < 1 + 1e-12:
            break
    return float(hi)
