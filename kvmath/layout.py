"""How a model spreads over chips: tensor, context, data, pipeline and expert parallelism.

:class:`ParallelLayout` says how many ways each kind of parallelism splits
the model, and checks that a model can be split so; :func:`parse_layout`
reads its text form (``"tp=8,pp=2"``), the one the command line takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .models import Model, get_model  # noqa: F401  (get_model: doctests)
from .validation import choice, instance, non_negative, positive_int

from .formulas import KV_SHARDINGS  # how a tensor-parallel group splits the cache: by KV heads, or by sequences


@dataclass(frozen=True)
class ParallelLayout:
    """How a model is spread over ``tp * cp * dp * pp`` chips (a description: the lower bounds are a
    :class:`kvmath.Deployment`'s on it).

    Attributes
    ----------
    tp : int
        Tensor parallelism by heads: query heads, and the weights, split
        ``tp`` ways; each chip holds ``ceil(h_kv / tp)`` KV heads (a cache
        with fewer KV heads than ``tp`` is replicated; an MLA latent, shared
        by all heads, is replicated on every chip). Only the query heads
        are checked: ``tp = 7`` on 28 heads with 4 KV heads is accepted
        (one KV head per chip), a layout vLLM refuses (it needs
        ``tp % h_kv == 0`` or ``h_kv % tp == 0``); optimistic, as a bound may be.
    cp : int
        Context parallelism: each sequence's cache is split by position
        ``cp`` ways; every chip attends to its slice and the partial outputs
        are combined by their log-sum-exp. The ``cp`` chips also split the
        weight matmuls (the weights shard ``tp * cp`` ways).
    dp : int
        Data-parallel attention: the sequences split ``dp`` ways; attention,
        dense MLPs and shared experts are replicated on every group.
    pp : int
        Pipeline stages, by layers (``ceil(L / pp)`` on the largest).
    ep : int
        Expert parallelism: routed experts split by expert over ``ep``
        chips, which must be every chip of a stage (``ep = tp * cp * dp``);
        ``ep = 1`` splits them like the other weights.
    redundant_experts : int
        Extra copies of routed experts spread over the ``ep`` chips (default
        0): ``ep`` must divide ``E + redundant_experts``, and each chip
        holds that many over ``ep`` (DeepSeek-V3's decode: 256 + 32 experts
        on 144 chips, 2 each). Reads and FLOPs are unchanged: the experts a
        batch touches, split ``ep`` ways, stay a lower bound on the busiest
        chip's, wherever the copies are.
    kv_split : str
        How a tensor-parallel group splits the cache: ``"heads"`` (the
        default: ``ceil(h_kv / tp)`` heads each) or ``"batch"`` (each chip
        keeps the caches of ``ceil(B / tp)`` whole sequences and attends to
        them, while the weights still split ``tp`` ways: data-parallel
        attention inside the group, which keeps a multi-query or MLA cache
        from being replicated). Text: ``"tp=2,kv=batch"``.
    replicate_lm_head : bool
        Every chip holds, reads and multiplies by the whole LM head instead
        of its ``1 / (tp cp)`` share (default False). gpt-fast's ``tp.py``
        splits the attention and MLP weights only and leaves ``output``
        whole on every GPU.

    Examples
    --------
    >>> ParallelLayout(tp=4, pp=2).n_chips
    8
    >>> ParallelLayout(tp=3).check(get_model("kipply-52b"))  # 64 heads do not split 3 ways
    Traceback (most recent call last):
    ...
    ValueError: tp (3) must divide the 64 heads of kipply-52b; try pp=3 (pipeline by layers)
    >>> ParallelLayout(pp=3).check(get_model("kipply-52b")).n_chips
    3
    >>> ParallelLayout(dp=144, ep=144, redundant_experts=32).check(get_model("deepseek-v3")).ep
    144
    """

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    redundant_experts: int = 0
    kv_split: str = "heads"
    replicate_lm_head: bool = False

    def __post_init__(self) -> None:
        choice("kv_split", self.kv_split, KV_SHARDINGS)
        if not isinstance(self.replicate_lm_head, (bool, np.bool_)):
            raise ValueError(f"replicate_lm_head must be True or False, got {self.replicate_lm_head!r}")
        object.__setattr__(self, "replicate_lm_head", bool(self.replicate_lm_head))
        for name in ("tp", "cp", "dp", "pp", "ep", "redundant_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
            (non_negative if name == "redundant_experts" else positive_int)(name, value)
            object.__setattr__(self, name, int(value))  # numpy int32 would wrap in n_chips and not encode as JSON
        if self.redundant_experts and self.ep == 1:
            raise ValueError(f"redundant_experts ({self.redundant_experts}) needs expert parallelism (ep > 1)")

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)}" for n in ("tp", "cp", "dp", "pp", "ep"))
        extra = f", redundant_experts={self.redundant_experts}" if self.redundant_experts else ""
        extra += f", kv_split={self.kv_split!r}" if self.kv_split != "heads" else ""
        extra += ", replicate_lm_head=True" if self.replicate_lm_head else ""
        return f"ParallelLayout({fields}{extra})"

    @property
    def n_chips(self) -> int:
        """Chips the layout uses: tp * cp * dp * pp."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def weight_shards(self) -> int:
        """Ways the (non-routed) weights split within one data-parallel group: tp * cp."""
        return self.tp * self.cp

    def check(self, model: Model) -> "ParallelLayout":
        """This layout, if ``model`` can run on it; else ``ValueError`` naming the field."""
        instance("model", model, Model, "a Model (Model.preset(name))")
        if self.kv_split == "heads" and model.n_heads % self.tp:
            raise ValueError(f"tp ({self.tp}) must divide the {model.n_heads} heads of {model.name}; "
                             f"try pp={self.tp} (pipeline by layers)")
        if self.pp > model.n_layers:
            raise ValueError(f"pp ({self.pp}) must not exceed the {model.n_layers} layers of {model.name}")
        if self.ep > 1:
            if not model.n_experts:
                raise ValueError(f"ep ({self.ep}) needs a mixture-of-experts model; {model.name} is dense")
            if self.ep != self.tp * self.cp * self.dp:
                raise ValueError(f"ep ({self.ep}) must equal tp * cp * dp ({self.tp * self.cp * self.dp}): "
                                 "routed experts split over every chip of a stage")
            slots = model.n_experts + self.redundant_experts
            if slots % self.ep:
                extra = f" + {self.redundant_experts} redundant" if self.redundant_experts else ""
                raise ValueError(f"ep ({self.ep}) must divide the {model.n_experts}{extra} experts of {model.name}")
        return self


_LAYOUT_TEXT = ("parallel layout must look like 'tp=2,pp=4' (tp, cp, dp, pp, ep; kv=heads or kv=batch; "
                "redundant=N extra experts and dispatch=FORMAT with ep)")


def parse_parallel(text: str) -> tuple[ParallelLayout, str | None]:
    """A layout and expert parallelism's dispatch format from text such as ``"dp=144,ep=144,redundant=32,dispatch=fp8"``.

    Fields: ``tp``, ``cp``, ``dp``, ``pp``, ``ep`` (omitted ones are 1),
    ``kv=heads`` or ``kv=batch`` (:attr:`ParallelLayout.kv_split`),
    ``redundant=N`` (:attr:`ParallelLayout.redundant_experts`) and
    ``dispatch=FORMAT``, the format the experts' tokens travel in (a
    :class:`kvmath.Formats` field, returned beside the layout; None where
    not given). The command line's ``--parallel`` takes this text.

    Examples
    --------
    >>> parse_parallel("dp=144,ep=144,redundant=32,dispatch=fp8")
    (ParallelLayout(tp=1, cp=1, dp=144, pp=1, ep=144, redundant_experts=32), 'fp8')
    >>> parse_parallel("tp=8,pp=2")[1] is None
    True
    """
    fields, dispatch = {}, None
    for part in str(text).replace(" ", "").split(","):
        key, _, value = part.partition("=")
        if key == "kv" and value in KV_SHARDINGS and "kv_split" not in fields:
            fields["kv_split"] = value
            continue
        if key == "dispatch" and value and dispatch is None:
            from .units import dtype_bytes

            try:
                dtype_bytes(value, argument="dispatch")
            except ValueError as err:
                raise ValueError(f"parallel layout {text!r}: {err}") from None
            dispatch = value.lower()
            continue
        name = "redundant_experts" if key == "redundant" else key
        if name not in ("tp", "cp", "dp", "pp", "ep", "redundant_experts") or name in fields \
                or not (value.isascii() and value.isdigit()):
            raise ValueError(f"{_LAYOUT_TEXT}, got {text!r}")
        fields[name] = int(value)
    try:
        layout = ParallelLayout(**fields)
    except ValueError as err:  # "tp=0": say which text the field came from
        raise ValueError(f"parallel layout {text!r}: {err}") from None
    if dispatch is not None and layout.ep == 1:
        raise ValueError(f"parallel layout {text!r}: dispatch={dispatch} needs expert parallelism (ep > 1)")
    return layout, dispatch


def parse_layout(text: str) -> ParallelLayout:
    """A layout from ``"tp=2,pp=4"`` (:func:`parse_parallel`'s fields; a dispatch format is refused: it is a format).

    Examples
    --------
    >>> parse_layout("tp=8")
    ParallelLayout(tp=8, cp=1, dp=1, pp=1, ep=1)
    """
    layout, dispatch = parse_parallel(text)
    if dispatch is not None:
        raise ValueError(f"parallel layout {text!r}: dispatch={dispatch} is a format; give it as "
                         f"Formats(dispatch={dispatch!r})")
    return layout


def as_layout(layout) -> ParallelLayout:
    """``layout`` as a :class:`ParallelLayout`: None is one chip, text is parsed (:func:`parse_layout`).

    Examples
    --------
    >>> as_layout("tp=2,pp=2").n_chips
    4
    """
    if layout is None:
        return ParallelLayout()
    if isinstance(layout, ParallelLayout):
        return layout
    if isinstance(layout, str):
        return parse_layout(layout)
    raise ValueError(f"layout must be a ParallelLayout or text such as 'tp=2,pp=4', got {layout!r}")
