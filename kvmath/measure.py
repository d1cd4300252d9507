"""Measure this machine: memory bandwidth, matmul FLOP/s and a toy decode step (measurements, set beside the
lower bounds the rest of kvmath computes).

The rest of kvmath predicts how long a decode step *must* take from two
rates, the memory bandwidth W (bytes/s) and the peak compute C (FLOP/s).
This module measures both rates on the machine it runs on, with numpy only,
and times a tiny transformer-like decode step whose bytes and FLOPs are
known exactly, so that measured points can be put next to
:func:`kvmath.formulas.min_step`'s prediction.

Everything is timed with :func:`time.perf_counter`: each measurement runs
once untimed (to fault in pages and wake up BLAS threads), then ``repeats``
times, and the **median** is returned, which ignores the odd slow run caused
by another process. Results vary from run to run and from machine to
machine; they are measurements, not constants.

Import it as a submodule (it is not re-exported by ``kvmath``)::

    import kvmath.measure as measure

Examples
--------
>>> import kvmath.measure as measure
>>> w = measure.memory_bandwidth(n_bytes=8e6, repeats=2)     # bytes/s
>>> w > 0
True
>>> cost = measure.decode_loop_cost(batch=4, context=16, d_model=64, n_layers=2)
>>> cost.weight_bytes, cost.kv_bytes, cost.flops_per_step
(131072.0, 65536.0, 294912.0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .formulas import StepBreakdown, step_breakdown
from .validation import ArrayLike, as_scalar, choice, fraction, plain, positive, positive_int

__all__ = [
    "CpuInfo",
    "DecodeLoopCost",
    "DecodeLoopResult",
    "cpu_peak_flops",
    "decode_loop",
    "decode_loop_bound",
    "decode_loop_cost",
    "decode_sweep",
    "matmul_flops",
    "memory_bandwidth",
    "parse_cpuinfo",
    "stream_verdict",
]

_DTYPES = {"float32": np.float32, "float64": np.float64}
BANDWIDTH_METHODS = ("copy", "read")


def _dtype(name: str, dtype) -> np.dtype:
    """``dtype`` as a numpy float32 or float64 dtype; anything else is a ValueError naming ``name``."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"{name} must be numpy float32 or float64, got {dtype!r}") from None
    if resolved.name not in _DTYPES:
        raise ValueError(f"{name} must be numpy float32 or float64, got {dtype!r}")
    return resolved


def _median_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    """Run ``fn`` once untimed, then ``repeats`` times; the median and all times in seconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), times


def memory_bandwidth(n_bytes: float = 256e6, repeats: int = 5, method: str = "copy", threads: int = 1) -> float:
    """Measured memory bandwidth in bytes/s (median of ``repeats`` timed passes).

    Parameters
    ----------
    n_bytes : float
        Size of the array that is streamed, in bytes (rounded down to whole
        float64 or float32 elements). Make it several times larger than the
        last-level cache, or the cache is measured instead of memory; the
        default, 256 MB (256e6 bytes), is larger than most.
    repeats : int
        Timed passes; the median is returned.
    method : {"copy", "read"}
        ``"copy"`` copies one float64 array into another (``np.copyto``):
        each pass reads ``n_bytes`` and writes ``n_bytes``, so ``2 * n_bytes``
        are counted. (A CPU that fetches each destination line before writing
        it moves a third ``n_bytes`` that is not counted; large copies
        usually avoid that with streaming stores.) ``"read"`` multiplies a
        float32 matrix of ``n_bytes`` by a vector, the access pattern of a
        decode step: ``n_bytes`` are read and only a tiny vector written, so
        ``n_bytes`` are counted.
    threads : int
        Threads that copy at once (``"copy"`` only): the arrays are cut into
        ``threads`` contiguous chunks, each copied by its own thread (numpy
        releases the interpreter lock while it copies). One thread measures
        what one core streams, which on a many-channel server is a small share
        of what all cores pull; ``"read"`` runs the BLAS library's own threads.

    Returns
    -------
    float
        Bytes moved per second.

    Raises
    ------
    ValueError
        If ``n_bytes`` is not positive, ``repeats`` or ``threads`` is not a
        whole number >= 1, or ``method`` is unknown.

    Examples
    --------
    >>> w = memory_bandwidth(n_bytes=8e6, repeats=3)
    >>> bool(np.isfinite(w) and w > 0)
    True
    >>> memory_bandwidth(n_bytes=0)
    Traceback (most recent call last):
    ...
    ValueError: n_bytes must be > 0, got 0.0
    """
    n_bytes = positive("n_bytes", n_bytes)
    repeats = int(positive_int("repeats", repeats))
    method = choice("method", method, BANDWIDTH_METHODS)
    threads = int(positive_int("threads", threads))
    if method == "copy":
        n = max(int(n_bytes // 8), 1)
        src = np.ones(n, dtype=np.float64)
        dst = np.empty_like(src)
        if threads == 1:
            median_s, _ = _median_seconds(lambda: np.copyto(dst, src), repeats)
        else:
            from concurrent.futures import ThreadPoolExecutor

            edges = np.linspace(0, n, min(threads, n) + 1).astype(int)
            chunks = [(dst[a:b], src[a:b]) for a, b in zip(edges[:-1], edges[1:])]
            with ThreadPoolExecutor(len(chunks)) as pool:
                def copy_all():
                    for future in [pool.submit(np.copyto, d, s_) for d, s_ in chunks]:
                        future.result()

                median_s, _ = _median_seconds(copy_all, repeats)
        return 2.0 * src.nbytes / median_s
    cols = 1024
    rows = max(int(n_bytes // (4 * cols)), 1)
    matrix = np.ones((rows, cols), dtype=np.float32)
    vector = np.ones(rows, dtype=np.float32)
    median_s, _ = _median_seconds(lambda: vector @ matrix, repeats)
    return matrix.nbytes / median_s


def stream_verdict(w_array: float, w_twice: float, tolerance: float = 0.2) -> str:
    """Whether passes over an array stream from memory, from two bandwidths read in turn.

    An array twice as large cannot fit in a cache where the first might. If each rate is within
    ``tolerance`` of the other, in both directions, neither pass came from cache; if the larger array
    reads slower, part of the smaller one's passes did; if it reads faster, no cache explains it and the
    timings are noise (a machine busy while the smaller one ran).

    Parameters
    ----------
    w_array, w_twice : float
        Bandwidths in bytes/s read over an array and over one twice as large.
    tolerance : float
        Fraction each rate may fall below the other, in (0, 1]; 0.2 accepts
        0.8 <= w_twice / w_array <= 1.25.

    Returns
    -------
    str
        ``"same"``, ``"slower"`` (the larger array reads slower) or ``"faster"``.

    Raises
    ------
    ValueError
        If a bandwidth is not one positive number or ``tolerance`` is not in (0, 1].

    Examples
    --------
    >>> stream_verdict(15.8e9, 16.0e9), stream_verdict(16.0e9, 12.2e9), stream_verdict(10.6e9, 15.4e9)
    ('same', 'slower', 'faster')
    """
    w_array = as_scalar("w_array", positive("w_array", w_array))
    w_twice = as_scalar("w_twice", positive("w_twice", w_twice))
    keep = 1.0 - as_scalar("tolerance", fraction("tolerance", tolerance))
    if w_twice < keep * w_array:
        return "slower"
    if w_array < keep * w_twice:
        return "faster"
    return "same"


def matmul_flops(n: int = 1024, dtype=np.float32, repeats: int = 3) -> float:
    """Measured FLOP/s of an ``n x n`` by ``n x n`` matrix product (median of ``repeats``).

    A product of two ``n x n`` matrices does ``n**3`` multiplies and as many
    adds: ``2 * n**3`` FLOPs. numpy hands it to its BLAS library, which uses
    every core it is allowed to; how close that comes to the machine's peak
    for ``dtype`` depends on the library's kernels (compare
    :func:`cpu_peak_flops`). Its arithmetic intensity, ``2 n**3 / (3 n**2 * itemsize)``
    FLOPs per byte, is far right of any ridge point for ``n`` in the
    thousands, so memory does not limit it.

    Parameters
    ----------
    n : int
        Matrix side; 1024 to 4096 is typical (larger is closer to peak, slower).
    dtype : numpy dtype
        ``np.float32`` (default) or ``np.float64``.
    repeats : int
        Timed products; the median is returned.

    Returns
    -------
    float
        FLOP/s.

    Raises
    ------
    ValueError
        If ``n`` or ``repeats`` is not a whole number >= 1, or ``dtype`` is
        not float32 or float64.

    Examples
    --------
    >>> c = matmul_flops(n=128, repeats=2)
    >>> bool(np.isfinite(c) and c > 0)
    True
    >>> matmul_flops(n=128, dtype=np.int8)
    Traceback (most recent call last):
    ...
    ValueError: dtype must be numpy float32 or float64, got <class 'numpy.int8'>
    """
    n = int(positive_int("n", n))
    dtype = _dtype("dtype", dtype)
    repeats = int(positive_int("repeats", repeats))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32).astype(dtype, copy=False)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(dtype, copy=False)
    out = np.empty((n, n), dtype=dtype)
    median_s, _ = _median_seconds(lambda: np.matmul(a, b, out=out), repeats)
    return 2.0 * n**3 / median_s


def cpu_peak_flops(cores: ArrayLike, clock_hz: ArrayLike, vector_bits: ArrayLike, fma_units: ArrayLike = 2,
                   bytes_per_elem: ArrayLike = 4) -> ArrayLike:
    """Peak vector FLOP/s of a CPU: cores x clock x FMA units x 2 x lanes.

    Each fused multiply-add (FMA) instruction does a multiply and an add
    (2 FLOPs) in every lane of a vector register; a core that issues
    ``fma_units`` of them per cycle, on vectors of ``vector_bits`` bits,
    holding ``lanes = vector_bits / (8 * bytes_per_elem)`` numbers, peaks at
    ``clock_hz * fma_units * 2 * lanes`` FLOP/s. The default of two FMA
    units per core, each as wide as the vector, is an assumption: it holds
    for AVX2 cores since Intel Haswell and AMD Zen 2, and for AVX-512 on
    Intel Xeon Gold/Platinum since Skylake-SP and AMD Zen 5 server parts;
    it overstates by 2x AMD Zen 4 (which runs a 512-bit FMA as two 256-bit
    halves: pass ``vector_bits=256``) and Intel parts with one 512-bit FMA
    unit (pass ``fma_units=1``). ``clock_hz`` is the clock the cores really
    run vector code at; boost and AVX-frequency offsets move it, so the
    result is as good as the clock given. Broadcasts over every argument.

    Parameters
    ----------
    cores : float or array
        Cores doing the arithmetic (BLAS threads, one per core).
    clock_hz : float or array
        Clock in Hz.
    vector_bits : float or array
        Width of one vector register used by the arithmetic: 128 (SSE, NEON),
        256 (AVX2) or 512 (AVX-512).
    fma_units : float or array
        FMA instructions issued per core per cycle (2 by default; see above).
    bytes_per_elem : float or array
        4 for float32 (default), 8 for float64.

    Returns
    -------
    float or array
        FLOP/s.

    Raises
    ------
    ValueError
        If any argument is not positive, naming it.

    Examples
    --------
    One core at 2.6 GHz with AVX-512 (16 float32 lanes) and two FMA units:

    >>> cpu_peak_flops(cores=1, clock_hz=2.6e9, vector_bits=512) / 1e9     # GFLOP/s
    166.4
    >>> cpu_peak_flops(cores=1, clock_hz=2.6e9, vector_bits=256) / 1e9     # AVX2: 8 lanes
    83.2
    >>> cpu_peak_flops(8, 3e9, 256, bytes_per_elem=8) / 1e9                 # float64
    384.0
    """
    cores = positive("cores", cores)
    clock_hz = positive("clock_hz", clock_hz)
    vector_bits = positive("vector_bits", vector_bits)
    fma_units = positive("fma_units", fma_units)
    bytes_per_elem = positive("bytes_per_elem", bytes_per_elem)
    lanes = vector_bits / (8.0 * bytes_per_elem)
    return plain(cores * clock_hz * fma_units * 2.0 * lanes)


@dataclass(frozen=True)
class CpuInfo:
    """What :func:`parse_cpuinfo` read; ``None`` where the text does not say.

    Attributes
    ----------
    model : str or None
        The ``model name`` line.
    clock_hz : float or None
        The first ``cpu MHz`` line, in Hz (the clock Linux reports at that
        moment, or the nominal one in many virtual machines; not the boost).
    vector_bits : int or None
        The widest vector with FMA: 512 with ``avx512f`` and ``fma``, 256
        with ``avx2`` and ``fma``; ``None`` without ``fma`` or without flags.
    flags : tuple of str
        The flags of the first processor that bear on it, of
        ``("avx2", "avx512f", "fma")``.
    threads_per_core : int or None
        ``siblings / cpu cores`` (2 with simultaneous multithreading, whose
        two threads share one core's FMA units), where both are listed.
    """

    model: str | None
    clock_hz: float | None
    vector_bits: int | None
    flags: tuple[str, ...]
    threads_per_core: int | None = None


def parse_cpuinfo(text: str) -> CpuInfo:
    r"""Model, clock and FMA vector width from the text of Linux's ``/proc/cpuinfo``.

    Only the first processor's lines are read. Nothing is guessed: a field the
    text lacks (``/proc/cpuinfo`` on ARM has no ``cpu MHz``; macOS and
    Windows have no such file) comes back as ``None``.

    Parameters
    ----------
    text : str
        The file's contents (pass ``""`` where it cannot be read).

    Returns
    -------
    CpuInfo

    Raises
    ------
    ValueError
        If ``text`` is not a string.

    Examples
    --------
    >>> info = parse_cpuinfo("model name\t: Some CPU\ncpu MHz\t\t: 2596.096\n"
    ...                      "flags\t\t: fpu sse2 fma avx2 avx512f\n")
    >>> info.model, info.clock_hz, info.vector_bits, info.flags
    ('Some CPU', 2596096000.0, 512, ('avx2', 'avx512f', 'fma'))
    >>> parse_cpuinfo("siblings : 16\ncpu cores : 8\n").threads_per_core
    2
    >>> parse_cpuinfo("").vector_bits is None
    True
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break          # end of the first processor's block
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    flags = set(fields.get("flags", fields.get("features", "")).split())
    relevant = tuple(f for f in ("avx2", "avx512f", "fma") if f in flags)
    vector_bits = None
    if "fma" in flags:
        vector_bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else None
    try:
        clock_hz = float(fields["cpu mhz"]) * 1e6
    except (KeyError, ValueError):
        clock_hz = None
    try:
        siblings, cores = int(fields["siblings"]), int(fields["cpu cores"])
        threads_per_core = siblings // cores if cores > 0 and siblings >= cores else None
    except (KeyError, ValueError):
        threads_per_core = None
    return CpuInfo(model=fields.get("model name"), clock_hz=clock_hz, vector_bits=vector_bits, flags=relevant,
                   threads_per_core=threads_per_core)


@dataclass(frozen=True)
class DecodeLoopCost:
    """What one step of :func:`decode_loop` must move and compute (floats or arrays).

    Attributes
    ----------
    param_count : weights per step, ``4 * d**2 * L`` (count).
    weight_bytes : ``param_count * bytes_per_elem`` (bytes read per step).
    kv_bytes_per_seq : one sequence's K and V cache, ``2 * L * S * d * bytes_per_elem`` (bytes).
    kv_bytes : the whole batch's cache, ``B * kv_bytes_per_seq`` (bytes read per step).
    bytes_per_step : ``weight_bytes + kv_bytes``.
    weight_flops : ``2 * B * param_count`` (FLOPs).
    attention_flops : ``4 * B * S * d * L`` (FLOPs: scores and weighted sum).
    flops_per_step : ``weight_flops + attention_flops``.
    """

    param_count: ArrayLike
    weight_bytes: ArrayLike
    kv_bytes_per_seq: ArrayLike
    kv_bytes: ArrayLike
    bytes_per_step: ArrayLike
    weight_flops: ArrayLike
    attention_flops: ArrayLike
    flops_per_step: ArrayLike


def decode_loop_cost(batch: ArrayLike, context: ArrayLike, d_model: int = 2048, n_layers: int = 2,
                     bytes_per_elem: float = 4) -> DecodeLoopCost:
    """Bytes and FLOPs of one step of :func:`decode_loop`, without running it.

    Each of the ``L = n_layers`` layers holds ``4 d**2`` weights (a ``d x 2d``
    and a ``2d x d`` matrix) and a K and a V cache of ``B x S x d`` elements.
    One step reads every weight once and every cache once; it does
    ``2 * 4 d**2`` FLOPs per sequence per layer for the weights and
    ``4 S d`` for attention (``q K^T`` and the weighted sum of V, one head of
    width ``d``: the same FLOPs and bytes as ``h`` heads of ``d / h``).
    Activations (a few ``B x 2d`` arrays) and the element-wise work
    (softmax, normalisation, residual adds) are not counted; they are a few
    percent at most. Broadcasts over ``batch`` and ``context``.

    Parameters
    ----------
    batch : float or array
        Sequences per step, B. Fractional values are accepted, as in
        :func:`kvmath.formulas.min_step`, so that a bound can be drawn as a smooth curve.
    context : float or array
        Cached tokens per sequence, S.
    d_model : int
        Model width d.
    n_layers : int
        Layers L.
    bytes_per_elem : float
        4 for float32 (default), 8 for float64.

    Returns
    -------
    DecodeLoopCost

    Raises
    ------
    ValueError
        If ``batch``, ``context`` or ``bytes_per_elem`` is not positive, or
        ``d_model`` or ``n_layers`` is not a whole number >= 1, naming the
        argument.

    Examples
    --------
    >>> c = decode_loop_cost(batch=2, context=8, d_model=16, n_layers=3)
    >>> c.param_count, c.weight_bytes, c.kv_bytes
    (3072.0, 12288.0, 6144.0)
    >>> c.weight_flops, c.attention_flops
    (12288.0, 3072.0)
    """
    batch = positive("batch", batch)
    context = positive("context", context)
    d = positive_int("d_model", d_model)
    layers = positive_int("n_layers", n_layers)
    b = positive("bytes_per_elem", bytes_per_elem)
    param_count = 4.0 * d * d * layers
    weight_bytes = param_count * b
    kv_per_seq = 2.0 * layers * context * d * b
    kv_bytes = batch * kv_per_seq
    weight_flops = 2.0 * batch * param_count
    attention_flops = 4.0 * batch * context * d * layers
    return DecodeLoopCost(
        param_count=plain(param_count),
        weight_bytes=plain(weight_bytes),
        kv_bytes_per_seq=plain(kv_per_seq),
        kv_bytes=plain(kv_bytes),
        bytes_per_step=plain(weight_bytes + kv_bytes),
        weight_flops=plain(weight_flops),
        attention_flops=plain(attention_flops),
        flops_per_step=plain(weight_flops + attention_flops),
    )


def decode_loop_bound(batch: ArrayLike, context: ArrayLike, bandwidth: ArrayLike, flops: ArrayLike,
                      d_model: int = 2048, n_layers: int = 2, bytes_per_elem: float = 4) -> StepBreakdown:
    """Both forms of the min-step bound on one step of :func:`decode_loop`, at rates W and C.

    :func:`decode_loop_cost`'s bytes and FLOPs, attention FLOPs included,
    through :func:`kvmath.formulas.step_breakdown` with ``bandwidth`` W
    (bytes/s) and ``flops`` C (FLOP/s): measured ones to put a timed step
    next to its bound, or a datasheet's for another chip. Other parameters
    are :func:`decode_loop_cost`'s; broadcasts over ``batch`` and ``context``.

    Examples
    --------
    B = 2, S = 8, d = 16, L = 3 (see :func:`decode_loop_cost`): 18,432 bytes
    and 15,360 FLOPs a step, so at 1,000 bytes/s and 500 FLOP/s the FLOPs bind.

    >>> t = decode_loop_bound(2, 8, 1000.0, 500.0, d_model=16, n_layers=3)
    >>> round(float(t.strict_s), 3), t.binds
    (30.72, 'compute')
    >>> round(float(t.kv_read_s), 3), round(float(t.weight_read_s), 3)
    (6.144, 12.288)
    """
    c = decode_loop_cost(batch, context, d_model, n_layers, bytes_per_elem)
    return step_breakdown(batch, c.kv_bytes_per_seq, c.weight_bytes, c.param_count, bandwidth, flops,
                          attention_flops_per_seq=c.attention_flops / np.asarray(batch, dtype=float))


@dataclass(frozen=True)
class DecodeLoopResult:
    """A timed run of :func:`decode_loop`.

    Attributes
    ----------
    batch, context, d_model, n_layers : the configuration (B, S, d, L).
    dtype : numpy dtype name of weights, cache and activations.
    median_step_s : median seconds per step.
    step_times_s : every timed step, in seconds.
    cost : the :class:`DecodeLoopCost` of one step (bytes and FLOPs).
    """

    batch: int
    context: int
    d_model: int
    n_layers: int
    dtype: str
    median_step_s: float
    step_times_s: tuple[float, ...]
    cost: DecodeLoopCost

    @property
    def bandwidth(self) -> float:
        """Bytes the step must move over its median time (bytes/s)."""
        return self.cost.bytes_per_step / self.median_step_s

    @property
    def flop_rate(self) -> float:
        """FLOPs the step must do over its median time (FLOP/s)."""
        return self.cost.flops_per_step / self.median_step_s


def _rms_normalise(x: np.ndarray) -> None:
    """Scale each row of ``x`` to unit root-mean-square, in place (keeps values tame)."""
    x /= np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6)


def _random_matrix(rng: np.random.Generator, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    """Uniform random weights with variance ``1 / shape[0]`` (cheaper to draw than normals)."""
    w = rng.random(shape, dtype=np.float32)
    w -= 0.5
    w *= np.float32(np.sqrt(12.0 / shape[0]))
    return w.astype(dtype, copy=False)


def _check_config(batch, context) -> tuple[int, int]:
    return int(positive_int("batch", batch)), int(positive_int("context", context))


def decode_sweep(configs, d_model: int = 2048, n_layers: int = 2, steps: int = 5,
                 dtype=np.float32, seed: int = 0) -> list[DecodeLoopResult]:
    """Time :func:`decode_loop`'s step for several ``(batch, context)`` pairs, sharing one set of weights.

    Drawing the random weights and touching a fresh cache cost more than a
    few steps; a sweep does both once (the cache buffer is sized for the
    largest ``batch * context``) and then times each configuration as
    :func:`decode_loop` would.

    Parameters
    ----------
    configs : sequence of (int, int)
        ``(batch, context)`` pairs, timed in the order given.
    d_model, n_layers, steps, dtype, seed
        As in :func:`decode_loop`.

    Returns
    -------
    list of DecodeLoopResult
        One per pair, in the same order.

    Raises
    ------
    ValueError
        If ``configs`` is empty or holds something other than pairs of
        whole numbers >= 1, or another argument is invalid (named).

    Examples
    --------
    >>> rs = decode_sweep([(1, 8), (4, 8)], d_model=64, n_layers=1, steps=2)
    >>> [(r.batch, r.context) for r in rs]
    [(1, 8), (4, 8)]
    >>> rs[1].cost.weight_bytes == rs[0].cost.weight_bytes   # weights are shared by the batch
    True
    """
    try:
        pairs = [tuple(c) for c in configs]
    except TypeError:
        raise ValueError(f"configs must be a sequence of (batch, context) pairs, got {configs!r}") from None
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"configs must be a non-empty sequence of (batch, context) pairs, got {configs!r}")
    pairs = [_check_config(b, s) for b, s in pairs]
    d = int(positive_int("d_model", d_model))
    layers = int(positive_int("n_layers", n_layers))
    steps = int(positive_int("steps", steps))
    dtype = _dtype("dtype", dtype)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")

    rng = np.random.default_rng(seed)
    w_up = [_random_matrix(rng, (d, 2 * d), dtype) for _ in range(layers)]
    w_down = [_random_matrix(rng, (2 * d, d), dtype) for _ in range(layers)]
    # One buffer for every layer's K and V, big enough for the largest
    # configuration; each configuration uses a contiguous prefix of it.
    # Constant values keep the softmax tame and cost as much to read as any.
    largest = max(b * s for b, s in pairs)
    buffer = np.full(layers * 2 * largest * d, 0.01, dtype=dtype)
    inv_sqrt_d = dtype.type(1.0 / np.sqrt(d))

    results = []
    for batch, context in pairs:
        cache = buffer[: layers * 2 * batch * context * d].reshape(layers, 2, batch, context, d)
        x0 = rng.standard_normal((batch, d), dtype=np.float32).astype(dtype, copy=False)

        def step(cache=cache, x0=x0) -> np.ndarray:
            x = x0.copy()
            for layer in range(layers):
                keys, values = cache[layer, 0], cache[layer, 1]
                scores = np.matmul(keys, x[:, :, None])[:, :, 0] * inv_sqrt_d   # (B, S): reads K
                scores -= scores.max(axis=1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=1, keepdims=True)
                x += np.matmul(scores[:, None, :], values)[:, 0, :]            # (B, d): reads V
                _rms_normalise(x)
                hidden = x @ w_up[layer]                                       # reads the d x 2d weights
                np.maximum(hidden, 0, out=hidden)
                x += hidden @ w_down[layer]                                    # reads the 2d x d weights
                _rms_normalise(x)
            return x

        step()  # warm-up: page faults, BLAS threads
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        results.append(DecodeLoopResult(
            batch=batch, context=context, d_model=d, n_layers=layers, dtype=dtype.name,
            median_step_s=float(np.median(times)), step_times_s=tuple(times),
            cost=decode_loop_cost(batch, context, d, layers, dtype.itemsize),
        ))
    return results


def decode_loop(batch: int, context: int, d_model: int = 2048, n_layers: int = 2, steps: int = 5,
                dtype=np.float32, seed: int = 0) -> DecodeLoopResult:
    """Time a tiny transformer-like decode step in numpy; return its median and its cost.

    Each layer does what a decoder layer does to the newest token of each of
    the ``B`` sequences: attention over that sequence's cached keys and
    values (``B x S x d`` each), a residual add, then an MLP of a ``d x 2d``
    and a ``2d x d`` weight matrix (``4 d**2`` weights: the same as a
    ``d x 4d`` block) with a ReLU between. So one step reads every weight
    once, shared by the batch, and every sequence's cache once, exactly the
    traffic the min-step bound counts (:func:`decode_loop_cost` gives the
    numbers). The cache does not grow while timing, so every step sees the
    same ``S``. To time many configurations, :func:`decode_sweep` is faster.

    The defaults (``d = 2048``, two layers: 128 MiB of float32 weights) are
    meant to be larger than the CPU's caches, so the weights come from
    memory. A machine with a very large last-level cache needs a larger
    ``d_model`` or more layers for that to hold.

    Parameters
    ----------
    batch : int
        Sequences decoded together, B.
    context : int
        Cached tokens per sequence, S.
    d_model : int
        Model width d.
    n_layers : int
        Layers L.
    steps : int
        Timed steps (after one untimed warm-up step); the median is reported.
    dtype : numpy dtype
        ``np.float32`` (default) or ``np.float64``.
    seed : int
        Seed of the random weights and inputs.

    Returns
    -------
    DecodeLoopResult
        Median seconds per step, every step's time, and the step's cost.

    Raises
    ------
    ValueError
        If ``batch``, ``context``, ``d_model``, ``n_layers`` or ``steps`` is
        not a whole number >= 1, or ``dtype`` is not float32 or float64.

    Examples
    --------
    >>> r = decode_loop(batch=4, context=16, d_model=64, n_layers=2, steps=2)
    >>> r.cost.bytes_per_step == decode_loop_cost(4, 16, 64, 2).bytes_per_step
    True
    >>> bool(r.median_step_s > 0), len(r.step_times_s)
    (True, 2)
    """
    batch, context = _check_config(batch, context)
    return decode_sweep([(batch, context)], d_model=d_model, n_layers=n_layers, steps=steps,
                        dtype=dtype, seed=seed)[0]
