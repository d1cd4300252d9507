"""Published measurements against kvmath's lower bound: the calibration table.

``kvmath/data/measurements.csv`` holds one row per published measurement:
its source (a bibliography key, title and URL, and the source's own words),
the configuration it ran (model and chip presets, layout and link, batch,
prompt and output lengths, formats of the weights, the cache and the math),
what it measured, and what the source leaves unknown. Where an unknown
changes the bound, the row takes the value that keeps the bound lowest (the
smallest context, the fewest bytes, the most tokens per step), so that a
measurement faster than its bound is a bug in the bound, not in a guess.

:func:`bound_for` computes the bound in the unit of the measurement with the
package's own rules, nothing re-derived:

====================  =========================================================
metric                bound
====================  =========================================================
``seq_tok_s``         tokens/s per sequence over a run. With a prompt, the
                      source's timer includes its prefill (gpt-fast):
                      ``S_out / request_times(...).total_s``. Without one
                      (``llama-bench tg N``) the run is ``N`` decode steps at
                      contexts ``1 .. N``, each :meth:`kvmath.Deployment.step`.
``out_tok_s``         output tokens/s of the whole batch, prefill included:
                      ``request_times(...).output_tokens_per_s`` (``per_chip``:
                      the source divides it by the chips).
``user_tok_s``        tokens/s each sequence sees while decoding at batch B and
                      context S_in: ``tokens_per_step / step``, the step
                      verifying ``tokens_per_step`` tokens per sequence.
``s_per_token``       seconds per decode step at context S_in.
``ttft_s``            seconds to the first token: :func:`kvmath.requests.prefill_bound`.
``prefill_tok_s``     prompt tokens/s: ``B S_in / prefill_bound(...)``, in
                      micro-batches of ``chunk_tokens`` where given.
====================  =========================================================

The ratio ``measured / bound`` (rates) or ``bound / measured`` (times) is the
fraction of the bound the system reached, phi; phi <= 1 for every row is a test.

Layouts are :func:`kvmath.layout.parse_layout` text (``"tp=2"``, ``"pp=8"``,
``"dp=128,ep=128"``); ``"split=N"`` spreads the weights over N chips and
the attention by batch (``"tp=N,kv=batch"``: the 2D layouts of Pope et al.,
whose heads need not divide N).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .hardware import _RATE_COLUMN, Chip, get_chip
from .models import Model, get_model
from .layout import parse_layout
from .presets import read_rows
from .requests import prefill_bound, request_times
from .deployment import Deployment
from .results import Result
from .validation import as_scalar, choice, flag, instance, positive, whole

#: What each measurement measured (see the module text).
METRICS = ("seq_tok_s", "out_tok_s", "user_tok_s", "s_per_token", "ttft_s", "prefill_tok_s")
#: Metrics given as a time (seconds); the others are rates (tokens/s).
TIME_METRICS = ("s_per_token", "ttft_s")
#: The regimes the rows fall in, with what the book calls them.
REGIMES = {
    "batch1": "one chip, batch 1, 16-bit weights",
    "quantized": "one chip, batch 1, quantized weights (GGUF, int8/int4)",
    "large_batch": "one chip, large batch",
    "multi_chip": "several chips",
    "moe": "mixture of experts",
    "prefill": "prefill (prompt processing)",
}

#: The serving engines the rows ran on (the ``engine`` column).
ENGINES = ("gpt-fast", "TensorRT-LLM", "vLLM", "SGLang", "llama.cpp", "MLC LLM", "ExLlama", "PyTorch", "JAX",
           "DeepSeek")

#: Why a row is held out of the estimate's fit (the ``held_out`` column; "" for a row fitted on). Each is an
#: unknown the bound takes at its most favourable value, so that the bound stays a bound and holds loosely, while
#: the estimate's terms cannot recover the value the run had: fitted on, such a row would teach the estimate the
#: guess, not the system. A held-out row is still checked against the bound (a test over every row) and
#: estimated by the fit on the others, which never saw it.
HELD_OUT = {
    "unknown_prompt": "the prompts' lengths are not in the source (an MLPerf log gives samples and tokens/s), so "
                      "the row charges a 1-token prompt and no prefill: the run's prefill, a large share of an "
                      "offline run over a whole dataset, is in the measurement and in no term of the estimate",
    "unknown_acceptance": "speculative decoding with an acceptance rate the source does not give: the row charges "
                          "every draft token accepted (4 tokens a step of multi-token prediction), the most a step "
                          "can yield, and the estimate would need the tokens a step really yielded",
}

#: Shapes a measurement needs that the presets do not have (with their source).
#: LLaMA 65B: Touvron et al. 2023, Table 2 (80 layers, d = 8192, 64 heads), d_ff = 22016 from its params.json.
EXTRA_MODELS = {
    "llama-65b": Model(name="llama-65b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=64, head_dim=128,
                       d_ff=22016, vocab=32000, display_name="LLaMA 65B"),
}


@dataclass(frozen=True)
class Measurement:
    """One row of ``kvmath/data/measurements.csv`` (lengths in tokens, ``measured`` in the metric's unit)."""

    id: str
    regime: str
    source: str  # bibliography key (book/references.bib)
    title: str
    url: str
    model: str | Model  # a preset name (or one of EXTRA_MODELS), or a Model (a user's config.json)
    chip: str | Chip  # a preset name, or a Chip
    layout: str  # "" for one chip
    link: str  # "" for none counted
    batch: int
    input_tokens: int
    output_tokens: int
    chunk_tokens: int | None
    tokens_per_step: int
    weights: object  # format name, bytes per weight, or {group: format}
    kv_dtype: str
    compute_dtype: str
    metric: str
    measured: float
    per_chip: bool
    unknowns: str
    quote: str
    #: FLOP/s the math can reach where it beats the chip preset's rate for
    #: ``compute_dtype`` (the fastest mode the engine may use, e.g. fp16
    #: accumulation on a GeForce card); None: the preset's rate.
    compute_flops_per_s: float | None = None
    #: The engine keeps the whole LM head on every chip (gpt-fast's ``tp.py``
    #: splits only the attention and MLP weights), so each chip reads all of it.
    replicated_lm_head: bool = False
    #: The engine keeps only the rows that need logits before the last layer's
    #: MLP (llama.cpp's ``build_inp_out_ids``): a prompt chunk without logits
    #: skips that MLP's weights (:func:`kvmath.requests.prefill_bound`).
    last_mlp_logits_only: bool = False
    #: The software that ran the measurement (one of :data:`ENGINES`); "" where the source does not say.
    engine: str = ""
    #: How the quoted figure becomes ``measured``: an arithmetic expression of the
    #: source's numbers (``"128 / 3.530"``: tokens over a latency in seconds;
    #: ``"73e-3"``: milliseconds to seconds); "" where the figure is ``measured`` itself.
    conversion: str = ""
    #: Why the row is held out of the estimate's fit (a key of :data:`HELD_OUT`); "" where it is fitted on.
    held_out: str = ""
    #: ``batch`` is the run's number of requests, served by continuous batching (an ``out_tok_s`` run at an
    #: infinite request rate, or MLPerf's Offline scenario): how many were in flight at once is not given. The
    #: bound takes them all at once (the most a run can have); the estimate holds as many as the engine's cache
    #: admits (:func:`kvmath.estimate.in_flight_batch`).
    continuous_batching: bool = False

    def __post_init__(self):
        # checked here so that a row edited with dataclasses.replace is checked too
        where = f"measurement {self.id!r}: "
        try:
            for name in ("id", "source", "layout", "link", "kv_dtype", "metric", "regime"):
                instance(name, getattr(self, name), str, "a string")
            instance("model", self.model, (str, Model), "a model preset name or a Model")
            instance("chip", self.chip, (str, Chip), "a chip preset name or a Chip")
            choice("metric", self.metric, METRICS)
            choice("regime", self.regime, REGIMES)
            whole("batch", self.batch)
            whole("input_tokens", self.input_tokens, minimum=0 if self.metric == "seq_tok_s" else 1)
            whole("output_tokens", self.output_tokens)
            whole("tokens_per_step", self.tokens_per_step)
            if self.chunk_tokens is not None:
                whole("chunk_tokens", self.chunk_tokens)
            as_scalar("measured", positive("measured", self.measured))
            flag("per_chip", self.per_chip)
            flag("replicated_lm_head", self.replicated_lm_head)
            flag("last_mlp_logits_only", self.last_mlp_logits_only)
            flag("continuous_batching", self.continuous_batching)
            if self.continuous_batching and self.metric != "out_tok_s":
                raise ValueError(f"continuous_batching applies to whole runs of many requests (out_tok_s), "
                                 f"not {self.metric!r}")
            instance("conversion", self.conversion, str, "an arithmetic expression, or ''")
            instance("engine", self.engine, str, "an engine name")
            if self.held_out:
                choice("held_out", self.held_out, HELD_OUT)
            if self.engine and self.engine not in ENGINES:
                raise ValueError(f"engine must be one of {ENGINES} (or '' where the source does not say), "
                                 f"got {self.engine!r}")
            if self.replicated_lm_head and (not self.layout or self.layout.startswith("split=")):
                raise ValueError(f"replicated_lm_head needs a parallel layout such as 'tp=2', got {self.layout!r}")
            if self.last_mlp_logits_only and self.metric not in ("ttft_s", "prefill_tok_s"):
                raise ValueError(f"last_mlp_logits_only applies to prefill metrics (ttft_s, prefill_tok_s), "
                                 f"not {self.metric!r}")
            if self.compute_flops_per_s is not None:
                positive("compute_flops_per_s", self.compute_flops_per_s)
                instance("compute_dtype", self.compute_dtype, str, "the format whose rate compute_flops_per_s replaces")
            if self.layout.startswith("split="):
                n = self.layout.split("=", 1)[1]
                if not n.isdigit() or int(n) < 1:
                    raise ValueError(f"layout 'split=N' needs a whole number of chips N >= 1, got {self.layout!r}")
                if self.metric not in ("s_per_token", "user_tok_s") and not (
                        self.metric == "seq_tok_s" and self.input_tokens == 0):
                    raise ValueError(f"layout {self.layout!r} is supported for decode-step metrics only "
                                     f"(s_per_token, user_tok_s, seq_tok_s without a prompt), not {self.metric!r}")
        except ValueError as err:
            raise ValueError(where + str(err)) from None

    @property
    def model_preset(self) -> Model:
        """The :class:`kvmath.Model` the row names (a preset, or one of :data:`EXTRA_MODELS`)."""
        if isinstance(self.model, Model):
            return self.model
        return EXTRA_MODELS[self.model] if self.model in EXTRA_MODELS else get_model(self.model)

    @property
    def chip_preset(self) -> Chip:
        """The :class:`kvmath.Chip` the row names, at ``compute_flops_per_s`` where the row gives one."""
        chip = self.chip if isinstance(self.chip, Chip) else get_chip(self.chip)
        if self.compute_flops_per_s is None:
            return chip
        rate = positive("compute_flops_per_s", self.compute_flops_per_s)
        if rate < chip.flops(self.compute_dtype):
            raise ValueError(f"compute_flops_per_s must be at least the preset's {self.compute_dtype} rate "
                             f"{chip.flops(self.compute_dtype):g} (a bound takes the fastest mode), got {rate!r}")
        return chip.replace(flops_by_dtype={**chip.flops_by_dtype, _RATE_COLUMN[self.compute_dtype.lower()]: rate})

    @property
    def n_chips(self) -> int:
        """Chips the measurement ran on."""
        if not self.layout:
            return 1
        if self.layout.startswith("split="):
            return int(self.layout.split("=")[1])
        return parse_layout(self.layout).n_chips

    @property
    def configuration(self) -> str:
        """A short description: chips, layout, batch, lengths, formats (``describe()``, with preset ids)."""
        return self.describe()

    def describe(self, display_names: bool = False) -> str:
        """A short description: model, chips, layout, batch, lengths, formats.

        By default the model and the chip are named by their preset ids (``llama-2-7b on 1x a100-80gb``), the
        names code and the command line take; with ``display_names`` by the names a reader knows them by, the
        ``display_name`` of the preset (``Llama 2 7B on 1x NVIDIA A100-80GB SXM``; a model or chip without one
        keeps its name). The rest of the text is the same either way.

        Examples
        --------
        >>> m = get_measurement("gf-70b-tp2")
        >>> m.describe()
        'llama-2-70b on 2x a100-80gb (tp=2), B=1, in/out 5/200, bf16'
        >>> m.describe(display_names=True)
        'Llama 2 70B on 2x NVIDIA A100-80GB SXM (tp=2), B=1, in/out 5/200, bf16'
        """
        flag("display_names", display_names)
        if display_names:
            chip_spec = self.chip if isinstance(self.chip, Chip) else get_chip(self.chip)
            chip = chip_spec.display_name or chip_spec.name
            model = self.model_preset.display_name or self.model_preset.name
        else:
            chip = self.chip if isinstance(self.chip, str) else self.chip.name
            model = self.model if isinstance(self.model, str) else self.model.name
        chips = f"{self.n_chips}x {chip}" + (f" ({self.layout})" if self.layout else "")
        w = self.weights if isinstance(self.weights, str) else (
            f"{self.weights:g} B/weight" if isinstance(self.weights, float)
            else "+".join(f"{v}" for v in dict.fromkeys(self.weights.values())))
        lengths = f"{self.input_tokens}/{self.output_tokens}"
        return f"{model} on {chips}, B={self.batch}, in/out {lengths}, {w}"

    def deployment(self) -> Deployment:
        """The row's :class:`kvmath.Deployment`: model, chip, layout, link and formats, as :func:`bound_for` uses them.

        A ``split=N`` layout (Pope et al.'s) is ``tp=N,kv=batch``; ``replicated_lm_head``
        sets the layout's ``replicate_lm_head``; a row that names no link counts no
        communication (``link=None``).

        Examples
        --------
        >>> dep = get_measurement("gf-70b-tp2").deployment()
        >>> dep.layout.tp, dep.layout.replicate_lm_head, dep.link.name
        (2, True, 'nvlink3')
        """
        return _deployment(self)


def _weights(cell: str):
    """A weights cell: ``bf16``, ``0.625`` (bytes per weight) or ``default:q4_k;lm_head:q6_k``."""
    if ":" in cell:
        return dict(part.split(":") for part in cell.split(";"))
    try:
        return float(cell)
    except ValueError:
        return cell


@lru_cache(maxsize=1)
def _rows() -> tuple[Measurement, ...]:
    out = []
    for r in read_rows("measurements.csv"):
        m = Measurement(
            id=r["id"], regime=r["regime"], source=r["source"], title=r["title"], url=r["url"], model=r["model"],
            chip=r["chip"], layout=r["layout"], link=r["link"], batch=int(r["batch"]),
            input_tokens=int(r["input_tokens"]), output_tokens=int(r["output_tokens"]),
            chunk_tokens=int(r["chunk_tokens"]) if r["chunk_tokens"] else None,
            tokens_per_step=int(r["tokens_per_step"] or 1), weights=_weights(r["weights"]),
            kv_dtype=r["kv_dtype"], compute_dtype=r["compute_dtype"], metric=r["metric"],
            measured=float(r["measured"]), per_chip=r["per_chip"] == "true", unknowns=r["unknowns"],
            quote=r["quote"],
            compute_flops_per_s=float(r["compute_flops_per_s"]) if r["compute_flops_per_s"] else None,
            replicated_lm_head=r["replicated_lm_head"] == "true",
            last_mlp_logits_only=r["last_mlp_logits_only"] == "true",
            engine=r["engine"], conversion=r["conversion"], held_out=r["held_out"],
            continuous_batching=r["continuous_batching"] == "true")
        out.append(m)
    return tuple(out)


def load_measurements(regime: str | None = None) -> list[Measurement]:
    """The rows of ``kvmath/data/measurements.csv``, optionally of one regime.

    Examples
    --------
    >>> rows = load_measurements()
    >>> len(rows) >= 30, len({m.source for m in rows}) >= 10
    (True, True)
    >>> get_measurement("gf-7b-bf16").measured     # gpt-fast: Llama 2 7B, bf16, one A100
    104.9
    """
    if regime is not None and (not isinstance(regime, str) or regime not in REGIMES):
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, got {regime!r}")
    return [m for m in _rows() if regime is None or m.regime == regime]


def get_measurement(measurement_id: str) -> Measurement:
    """The row with this ``id`` (a ValueError names the closest ids otherwise)."""
    instance("measurement_id", measurement_id, str, "a row id of measurements.csv")
    for m in _rows():
        if m.id == measurement_id:
            return m
    import difflib

    close = difflib.get_close_matches(measurement_id, [m.id for m in _rows()], n=3)
    raise ValueError(f"measurement_id {measurement_id!r} is not in measurements.csv; did you mean {close}?")


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Calibration:
    """A measurement next to its bound.

    Attributes
    ----------
    measurement : Measurement
    bound : float
        kvmath's bound in the measurement's unit (a rate: the most it can be;
        a time: the least), for the whole system as the source reports it
        (per chip where the source divides by chips).
    ratio : float
        The fraction of the bound reached, phi = measured / bound for a rate,
        bound / measured for a time. At most 1 unless the bound is wrong.
    binds : str
        What sets the bound: ``"memory"``, ``"compute"``, ``"communication"``
        (or ``"mixed"`` over a run whose steps change term).
    unit_s : float
        The bound's time for one unit of the measurement (a token per
        sequence, a step, a prefill).
    """

    measurement: Measurement
    bound: float
    ratio: float
    binds: str
    unit_s: float


def _deployment(m: Measurement) -> Deployment:
    """The row's deployment: its model, chip, layout, link (none counted where the row names none) and formats."""
    layout = m.layout
    if layout.startswith("split="):  # Pope et al.'s 2D layouts: weights over N chips, attention by batch
        layout = f"tp={layout.split('=', 1)[1]},kv=batch"
    layout = dataclasses.replace(parse_layout(layout), replicate_lm_head=m.replicated_lm_head) if layout else None
    return Deployment(m.model_preset, m.chip_preset, layout, link=m.link or None,
                      weights=m.weights, kv=m.kv_dtype, compute=m.compute_dtype)


def _steps(m: Measurement, contexts):
    """Strict step bounds (and what binds) of decode steps at ``contexts``."""
    step = _deployment(m).step(m.batch, contexts, tokens_per_seq=m.tokens_per_step)
    return np.asarray(step.strict_s, dtype=float), np.atleast_1d(step.binds)


def _binds(labels) -> str:
    kinds = set(np.atleast_1d(labels).tolist())
    return kinds.pop() if len(kinds) == 1 else "mixed"


def bound_for(measurement: Measurement | str) -> Calibration:
    """kvmath's lower bound for one measurement, and the fraction of it reached.

    Parameters
    ----------
    measurement : Measurement or str
        A row of :func:`load_measurements`, or its ``id``.

    Returns
    -------
    Calibration

    Examples
    --------
    gpt-fast's Llama 2 7B in bf16 on one A100: 104.9 tokens/s against a bound
    of 153.7 (a step reads 13.3 GB at 2.039 TB/s), 68% of it:

    >>> c = bound_for("gf-7b-bf16")
    >>> round(c.bound, 1), round(c.ratio, 3), c.binds
    (153.7, 0.683, 'memory')

    The time to the first token of a 2,048-token prompt on an A100 (fp16): the
    prefill's FLOPs at peak take 88.54 ms; TensorRT-LLM measured 133 ms:

    >>> c = bound_for("trt-7b-a100-ttft")
    >>> round(c.bound * 1e3, 2), round(c.ratio, 3), c.binds
    (88.54, 0.666, 'compute')
    """
    instance("measurement", measurement, (Measurement, str), "a Measurement (get_measurement(id)) or its id")
    m = get_measurement(measurement) if isinstance(measurement, str) else measurement
    metric = m.metric
    if metric in ("ttft_s", "prefill_tok_s"):
        dep = _deployment(m)
        t = float(prefill_bound(dep, m.batch, m.input_tokens, chunk_tokens=m.chunk_tokens,
                                last_mlp_logits_only=m.last_mlp_logits_only))
        # what binds the pass the prompt runs in: the whole prompt, or its first chunk (the one rule, Step.binds)
        binds = str(dep.prefill(m.batch, min(m.input_tokens, m.chunk_tokens or m.input_tokens)).binds)
        if metric == "ttft_s":
            bound, unit_s = t, t
        else:
            bound, unit_s = m.batch * m.input_tokens / t, t / (m.batch * m.input_tokens)
    elif metric == "s_per_token":
        step, labels = _steps(m, float(m.input_tokens))
        bound = unit_s = float(step)
        binds = _binds(labels)
    elif metric == "user_tok_s":
        step, labels = _steps(m, float(m.input_tokens))
        unit_s = float(step) / m.tokens_per_step
        bound, binds = 1 / unit_s, _binds(labels)
    elif metric == "seq_tok_s" and m.input_tokens == 0:
        steps, labels = _steps(m, np.arange(1, m.output_tokens + 1, dtype=float))
        unit_s = float(np.sum(steps)) / m.output_tokens
        bound, binds = 1 / unit_s, _binds(labels)
    else:  # seq_tok_s with a prompt, out_tok_s: whole runs, prefill included
        r = request_times(_deployment(m), m.batch, m.input_tokens, m.output_tokens)
        total = float(r.total_s)
        unit_s = total / m.output_tokens
        bound = m.output_tokens / total if metric == "seq_tok_s" else float(r.output_tokens_per_s)
        contexts = m.input_tokens + np.arange(1, m.output_tokens, dtype=float)
        # one output token: the run is its prefill, and that pass says what binds
        binds = _binds(_steps(m, contexts)[1]) if m.output_tokens > 1 else \
            str(_deployment(m).prefill(m.batch, m.input_tokens).binds)
        if m.per_chip:
            bound /= m.n_chips
    ratio = bound / m.measured if metric in TIME_METRICS else m.measured / bound
    return Calibration(measurement=m, bound=float(bound), ratio=float(ratio), binds=binds, unit_s=float(unit_s))


def calibrate(regime: str | None = None) -> list[Calibration]:
    """:func:`bound_for` of every row (of one regime).

    Examples
    --------
    >>> max(c.ratio for c in calibrate()) <= 1      # no measurement beats its bound
    True
    """
    return [bound_for(m) for m in load_measurements(regime)]


# ----- a measured figure against its bound and the estimate -------------------------------------------

def user_measurement(model: Model | str, chip: Chip | str, *, metric: str, measured: float, batch: int = 1,
                     input_tokens: int = 0, output_tokens: int = 1, layout: str = "", link: str = "",
                     weights="bf16", kv_dtype: str = "bf16", compute_dtype: str | None = None,
                     chunk_tokens: int | None = None, tokens_per_step: int = 1, per_chip: bool = False,
                     engine: str = "") -> Measurement:
    """A measurement of one's own, as a row of the table (its regime by :func:`kvmath.estimate.regime_of`).

    The arguments are the table's columns (see :class:`Measurement`); ``measured`` is in the metric's unit
    (tokens/s, or seconds for ``s_per_token`` and ``ttft_s``). ``engine``: one of :data:`ENGINES` sets the
    all-reduce the estimate prices the collectives with (:data:`kvmath.estimate.ENGINE_ALGORITHMS`); another
    name is recorded in the title only.

    Examples
    --------
    >>> m = user_measurement("llama-2-7b", "a100-80gb", metric="s_per_token", measured=0.0095, input_tokens=100)
    >>> m.regime, round(bound_for(m).ratio, 3)
    ('batch1', 0.685)
    """
    from .estimate import regime_of

    m = Measurement(id="yours", regime="batch1", source="", title=f"your measurement{f' ({engine})' if engine else ''}",
                    url="", model=model, chip=chip, layout=layout, link=link, batch=batch, input_tokens=input_tokens,
                    output_tokens=output_tokens, chunk_tokens=chunk_tokens, tokens_per_step=tokens_per_step,
                    weights=weights, kv_dtype=kv_dtype, compute_dtype=compute_dtype, metric=metric, measured=measured,
                    per_chip=per_chip, unknowns="", quote="", engine=engine if engine in ENGINES else "")
    prompt = m.input_tokens if metric in ("ttft_s", "prefill_tok_s") else 0
    per_pass = min(prompt, chunk_tokens) if chunk_tokens else prompt
    return dataclasses.replace(m, regime=regime_of(_deployment(m), m.batch, per_pass))


@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Check(Result):
    """A measured figure against kvmath's bound and the estimate's interval (:func:`check`).

    Attributes
    ----------
    measurement : Measurement
        The figure and its setup.
    bound, ratio : float
        The bound in the figure's unit and the fraction of it reached (:func:`bound_for`).
    beats_bound : bool
        Whether the figure is faster than the bound: almost always a setup or unit mistake.
    likely_causes : tuple of str
        Where ``beats_bound``, the changes of setup under which the bound would hold (a wrong precision, a
        batch or a chip count misread, tokens per step, units), each as a sentence; else empty.
    measured_s : float
        Seconds per unit of the figure (a token per sequence, a step, a prefill).
    estimate : kvmath.estimate.Estimate
        The estimate in seconds per unit, its 80% interval and regime.
    against_estimate : str
        ``"inside the interval"``, ``"slower than the interval"`` or ``"faster than the interval"``.
    """

    measurement: Measurement
    bound: float
    ratio: float
    beats_bound: bool
    likely_causes: tuple
    measured_s: float
    estimate: object
    against_estimate: str


#: Weight formats of fewer bytes a mistaken precision could be (tried in order, fewest bytes last).
_FEWER_BYTES = ("fp8", "int8", "int4-g128", "q4_0")


def _causes(m: Measurement) -> tuple[str, ...]:
    """Changes of ``m``'s setup under which its figure no longer beats the bound, as sentences."""
    def holds(**change) -> bool:
        try:
            return bound_for(dataclasses.replace(m, **change)).ratio <= 1
        except ValueError:
            return False

    out = []
    if isinstance(m.weights, str):
        from .units import dtype_bytes

        given = dtype_bytes(m.weights)
        for fmt in _FEWER_BYTES:
            if dtype_bytes(fmt) < given and holds(weights=fmt):
                out.append(f"the bound at {fmt} weights is below your figure; at {m.weights} it is above: "
                           "check the weight precision")
                break
    if m.kv_dtype in ("bf16", "fp16") and holds(kv_dtype="fp8"):
        out.append("with an fp8 cache the bound holds: check the cache's format")
    rate = m.metric not in TIME_METRICS
    if rate and m.metric in ("seq_tok_s", "user_tok_s") and m.batch > 1 and holds(measured=m.measured / m.batch):
        out.append(f"divided by the batch ({m.batch}) the figure holds: it looks like the whole batch's tokens/s, "
                   "not one sequence's")
    if rate and m.metric == "out_tok_s" and m.per_chip and holds(measured=m.measured / m.n_chips):
        out.append(f"as the whole deployment's throughput (over {m.n_chips} chips) it holds: check per chip "
                   "against per node")
    if rate and m.metric == "out_tok_s" and m.n_chips == 1 and holds(measured=m.measured / 8):
        out.append("divided by 8 it holds: it may be a node's throughput, not one chip's")
    if m.tokens_per_step == 1 and m.metric in ("seq_tok_s", "user_tok_s", "s_per_token"):
        for k in range(2, 9):
            if holds(tokens_per_step=k):
                if m.metric == "seq_tok_s":  # a run's tokens per step show in its rate, not in its step
                    break
                out.append(f"at {k} tokens per step it holds: speculative decoding or multi-token prediction "
                           "yields several tokens a step")
                break
    if m.metric == "out_tok_s":  # a batch's throughput: more sequences than stated would explain it
        for b in (2, 4, 8, 16, 32, 64):
            if holds(batch=m.batch * b):
                out.append(f"at a batch of {m.batch * b} it holds: check the batch")
                break
    elif m.metric in ("seq_tok_s", "user_tok_s") and m.batch > 1:  # a sequence's rate: fewer sequences would
        for b in (2, 4, 8, 16, 32, 64):
            if holds(batch=max(1, m.batch // b)):
                out.append(f"at a batch of {max(1, m.batch // b)} it holds: check the batch")
                break
    factor = 1e3 if m.metric in TIME_METRICS else 1e-3
    if bound_for(m).ratio >= 100 and holds(measured=m.measured * factor):  # a unit slip is off by orders
        out.append("a thousand times " + ("longer" if factor > 1 else "lower") + " it holds: check the unit "
                   "(seconds and tokens/s expected)")
    return tuple(out) or ("no single change of precision, batch, chips, tokens per step or unit explains it: "
                          "an assumption of the bound may be wrong (please report it)",)


def check(measurement: Measurement | str) -> Check:
    """Whether a measured figure beats kvmath's bound (and the likely cause), and where it falls against the estimate.

    Parameters
    ----------
    measurement : Measurement or str
        A row of the table (or its id), or one's own figure (:func:`user_measurement`).

    Examples
    --------
    >>> c = check("gf-7b-bf16")
    >>> c.beats_bound, c.against_estimate, c.estimate.regime
    (False, 'inside the interval', 'batch1')

    A figure faster than its bound names the change that would explain it:

    >>> c = check(user_measurement("llama-2-7b", "a100-80gb", metric="s_per_token", measured=0.004,
    ...                            input_tokens=100))
    >>> c.beats_bound, c.likely_causes[0][:26]
    (True, 'the bound at fp8 weights i')
    """
    from .estimate import estimate_for

    instance("measurement", measurement, (Measurement, str), "a Measurement (user_measurement(...)) or a row id")
    m = get_measurement(measurement) if isinstance(measurement, str) else measurement
    c = bound_for(m)
    e = estimate_for(m)
    measured_s = c.unit_s / c.ratio
    beats = c.ratio > 1
    where = ("faster than the interval" if measured_s < e.estimate_low_s else
             "slower than the interval" if measured_s > e.estimate_high_s else "inside the interval")
    return Check(measurement=m, bound=c.bound, ratio=c.ratio, beats_bound=beats,
                 likely_causes=_causes(m) if beats else (), measured_s=float(measured_s), estimate=e,
                 against_estimate=where)
