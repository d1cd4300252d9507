"""Serving under load: requests arriving at a rate, a queue for the prefill, and continuous batching.

The engine modelled is a prefill-priority continuous-batching scheduler
(vLLM V0's default and SGLang's without chunking): at each step boundary a
waiting prompt, if any, is prefilled whole (first come, first served);
otherwise every running sequence takes one decode step. Requests arrive as a
Poisson process of rate ``lambda`` per data-parallel replica ``lambda / dp``
(each replica an engine of its own). With the step model's bounds as service
times:

- **prefill**: a prompt of ``S_in`` tokens takes ``t_p`` (:func:`kvmath.requests.prefill_bound`
  for one prompt), so the prefill load is ``rho_p = lambda E[t_p]``;
- **decode**: ``N`` running sequences take a step of ``t_d(N)``, the strict
  bound of :meth:`kvmath.Deployment.step` at the mean context
  ``E[S_in] + E[S_out] / 2``, a maximum of lines in ``N`` (memory, compute,
  communication): ``t_d(N) = max_i (a_i + b_i N)``. Decode gets the time the
  prefills leave, so a request's ``S_out - 1`` steps last ``(S_out - 1) t_d / (1 - rho_p)``
  and the step a decoding request is in holds it and the others running:
  under Poisson arrivals ``N`` on the mean, so it lasts ``t_d(N + 1)``. By
  Little's law ``N = lambda (S_out - 1) t_d(N + 1) / (1 - rho_p)``. With
  ``k = lambda (S_out - 1) / (1 - rho_p)`` its least root is
  ``N = max_i k (a_i + b_i) / (1 - k b_i)`` (each line's own root; the largest
  is the max's), finite while the **utilisation**
  ``rho = rho_p + lambda (S_out - 1) max_i b_i`` is below 1. The time per
  output token is ``t_d(N + 1) / (1 - rho_p)``: at a light load the step of one
  sequence, ``t_d(1)``, stretched by the prefills;
- **queueing**: a prompt waits for the prompts ahead of it and for the decode
  step in progress. As an M/G/1 queue with a second, lower-priority class of
  work (Cobham's non-preemptive priority formula), the mean wait is
  ``W = (lambda E[t_p^2] + f_d t_d) / (2 (1 - rho_p))``, ``f_d`` the fraction of
  time spent decoding. Without decode steps it is the Pollaczek-Khinchine
  formula, exact for M/M/1 (``W = rho / (mu - lambda)``) and M/D/1
  (``W = rho / (2 mu (1 - rho))``).
- **percentiles** of the wait: ``P(W > t) = pi exp(-pi t / W)``, ``pi`` the
  chance an arrival finds the engine busy: the M/M/1 law exactly
  (``pi = rho``, ``W / pi = 1 / (mu - lambda)``), an approximation otherwise
  that :func:`simulate` checks: with decode steps the closed forms' p99 TTFT
  and mean TPOT fall short of the simulated scheduler's at moderate loads
  (:data:`CLOSED_FORM_BANDS`, up to 17% and 6% for a dense model), but they are
  no bound either way. For a mixture of experts, whose step climbs steeply over
  its first sequences, the chord through ``t_d(N + 1)`` lies above the step's
  mean over the others' count, and the mean TPOT can come out above the
  simulation's: by 5.5% for Mixtral 8x7B on two H100s with the estimates at
  0.5 requests/s.
- **the first step**: a request's first decode step waits for the prompts its
  own prefill left queued, ``L = rho_p + lambda^2 E[t_p^2] / (2 (1 - rho_p))``
  of them (an M/G/1 queue's count left behind a departure), each a busy period
  ``E[t_p] / (1 - rho_p)``; the time per output token adds that wait spread
  over the request's steps, ``E[1 / (S_out - 1)]``, and Little's law counts
  the request as running through it. It matters for short outputs.

:func:`simulate` runs the same scheduler request by request (vectorised over
independent replicas, seeded) for what the closed forms leave out: lengths
that vary, the steps' granularity, percentiles of the time per output token.
The service times are the step model's lower bounds by default
(``times="bound"``), or the estimates of :mod:`kvmath.estimate`
(``times="estimate"``: :func:`~kvmath.estimate.estimate_prefill` per prompt,
and the decode step's :func:`~kvmath.estimate.estimate_step` as the lines
through it at running counts 1, 2, 4, ... 4,096 per pipeline stage:
the chords of a curve that is convex for a dense model and concave for a
mixture of experts, whose steps read more experts as they grow: ``t_d`` is
their interpolation, ``N`` the least root of ``N = k t_d(N + 1)``, and the
utilisation takes the last chord's slope). With the estimates, the answer is given again at
the ends of their 80% intervals (``at_low``, ``at_high``: every prefill at
its ``estimate_low_s``, then at its ``estimate_high_s``, and the decode step
at the ends of one interval that covers every running count's regime, so the
ends keep the estimate's shape), so the
estimate's error bar reaches the queue instead of being dropped. Bounds make
a real engine look faster than it is, and its queue shorter: compare a
measured sweep with the estimates. Either
way the queueing model is an **estimate** (``is_lower_bound`` False): no
bound on a queue's wait follows from bounds on its service times alone being
exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .deployment import Deployment
from .results import Result
from .validation import (ArrayLike, ResultOverflow, as_number, as_scalar, choice, instance, one_int, plain, positive,
                         positive_int)

#: The percentiles reported by default.
PERCENTILES = (50.0, 90.0, 99.0)

#: The service times the load model takes: the step model's bounds, or kvmath.estimate's estimates.
TIMES = ("bound", "estimate")
#: The times of the answers at the estimate's interval ends (``at_low``, ``at_high``), and the Estimate field each
#: reads: an estimated engine is priced by one of these three.
_ESTIMATE_FIELDS = {"estimate": "estimate_s", "estimate_low": "estimate_low_s", "estimate_high": "estimate_high_s"}

#: How far the closed forms fall from :func:`simulate` of the same scheduler, as (closed form / simulated - 1)
#: bands: Llama 3 8B on an H100, 2,000 tokens in and 200 out, at utilisations 0.18, 0.46 and 0.78 (4, 10 and 17
#: requests/s; 8 replicas of 1,000 requests, seed 0). tests/unit/test_load.py holds them to these bands. Measured:
#: mean TTFT -1.0 / +0.3 / -0.3%, p90 +12.6 / -9.9 / -4.5%, p99 -17.3 / -13.3 / -7.2%, mean TPOT -0.9 / -3.0 /
#: -6.3%. The tail and the time per output token come out short at these loads, but the closed forms are not a
#: bound either way: at utilisation 0.9 the mean TPOT is 0.4% above the simulation's, for a mixture of experts at
#: light load up to 6% above (the step's curve), and with outputs of 2 to 20 tokens from -9% to +10% (2,000 in,
#: utilisations 0.3 and 0.6; the first step's wait included).
CLOSED_FORM_BANDS = {"ttft_mean": (-0.02, 0.02), "ttft_p90": (-0.15, 0.15), "ttft_p99": (-0.22, 0.0),
                     "tpot_mean": (-0.08, 0.0)}

#: The most requests one simulation runs, over all its replicas: it keeps about a dozen float64 arrays of
#: replicas x requests (about 0.1 GB at this size), and its time grows with the square of the requests per replica.
MAX_SIMULATED_REQUESTS = 1_000_000
#: Replicas :func:`simulate` runs by default.
REPLICAS = 8

#: Where each field's value sits in :func:`kvmath.estimate.interval_s`'s answer.
_INTERVAL_INDEX = {"estimate_s": 0, "estimate_low_s": 1, "estimate_high_s": 2}

#: Running sequences per pipeline stage at which the estimate's decode step is priced (its lines join them).
_ESTIMATE_RUNNING = 2.0 ** np.arange(13)


# ----- closed forms ----------------------------------------------------------------------------

def mm1_wait_s(arrival_rate: ArrayLike, service_rate: ArrayLike, percentile: ArrayLike | None = None) -> ArrayLike:
    """M/M/1 waiting time in the queue (before service), seconds: the mean, or a percentile.

    Mean ``rho / (mu - lambda)``; ``P(W > t) = rho exp(-(mu - lambda) t)``, so the
    ``p``-th percentile is ``ln(rho / (1 - p)) / (mu - lambda)`` where ``1 - p < rho``, else 0.

    Examples
    --------
    >>> round(mm1_wait_s(8.0, 10.0), 3), round(mm1_wait_s(8.0, 10.0, 90), 3)   # rho 0.8: 0.8 / 2; ln(8) / 2
    (0.4, 1.04)
    """
    lam, mu = _rates(arrival_rate, service_rate)
    rho = lam / mu
    if percentile is None:
        return plain(rho / (mu - lam))
    p = _percentile(percentile) / 100
    with np.errstate(divide="ignore"):
        return plain(np.where(1 - p < rho, np.log(rho / (1 - p)) / (mu - lam), 0.0))


def md1_wait_s(arrival_rate: ArrayLike, service_s: ArrayLike) -> ArrayLike:
    """M/D/1 mean waiting time in the queue, seconds: ``rho / (2 mu (1 - rho))`` for a fixed service time ``1 / mu``.

    Examples
    --------
    >>> round(md1_wait_s(8.0, 0.1), 3)   # half the M/M/1 wait
    0.2
    """
    lam, mu = _rates(arrival_rate, 1.0 / positive("service_s", service_s))
    rho = lam / mu
    return plain(rho / (2 * mu * (1 - rho)))


def _rates(arrival_rate, service_rate):
    lam, mu = positive("arrival_rate", arrival_rate), positive("service_rate", service_rate)
    if np.any(np.asarray(lam) >= np.asarray(mu)):
        raise ValueError(f"arrival_rate must be below the service rate (a stable queue), got arrival_rate="
                         f"{arrival_rate!r} and a service rate of {service_rate!r}")
    return lam, mu


def _percentile(percentile) -> ArrayLike:
    p = as_number("percentile", percentile)
    if np.any((np.asarray(p) <= 0) | (np.asarray(p) >= 100)):
        raise ValueError(f"percentile must be strictly between 0 and 100, got {percentile!r}")
    return p


def wait_percentile_s(mean_wait_s: ArrayLike, busy: ArrayLike, percentile: ArrayLike) -> ArrayLike:
    """The ``percentile`` of a queue's wait from its mean and the chance an arrival waits at all, seconds.

    ``P(W > t) = pi exp(-pi t / W)`` (M/M/1's law; ``pi = busy``).
    """
    p = np.asarray(percentile, dtype=float) / 100
    pi = np.clip(busy, 1e-300, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(1 - p < pi, mean_wait_s / pi * np.log(pi / (1 - p)), 0.0)


# ----- the engine model -------------------------------------------------------------------------

class _Engine:
    """One replica's service times for a request shape: what the closed forms and the simulation share.

    ``prefill_s`` for each prompt length given, the decode step's lines
    ``(a_i, b_i)`` in the replica's running sequences at the mean context,
    and the sequences its memory holds. ``times``: ``"bound"``, or a key of
    :data:`_ESTIMATE_FIELDS` (the estimate, or one end of its interval).
    """

    def __init__(self, dep: Deployment, input_tokens, output_tokens, prefix=None, times="bound"):
        from .requests import _prefill_bound

        self.dep = dep
        self.times = times
        self.s_in = np.atleast_1d(np.asarray(input_tokens, dtype=float))
        self.s_out = np.atleast_1d(np.asarray(output_tokens, dtype=float))
        lengths, back = np.unique(self.s_in, return_inverse=True)
        self.field = _ESTIMATE_FIELDS.get(times)
        # One prompt per replica, all replicas at once: replicas that share an expert-parallel group share its
        # chips, so a replica's prefill gets its own tp x pp chips' worth of compute, not the group's (a batch of
        # one on the deployment would hand each replica every expert chip at the same time).
        batch = float(dep.layout.dp)
        if self.field:
            from .estimate import estimate_prefill

            t_p = np.atleast_1d(getattr(estimate_prefill(dep, batch, lengths.astype(int)), self.field))
        else:
            t_p = np.atleast_1d(_prefill_bound(dep, batch, lengths, None, 0.0, 1.0, False, prefix))
        self.prefill_s = t_p[back]
        self.mean_prefill_s = float(np.mean(self.prefill_s))
        self.prefill_s2 = float(np.mean(self.prefill_s ** 2))
        self.steps = float(np.mean(self.s_out - 1))                      # decode steps per request
        decodes = self.s_out > 1
        self.decoding_share = float(np.mean(decodes))                    # requests with a decode step
        self.inverse_steps = float(np.mean(1 / (self.s_out[decodes] - 1))) if decodes.any() else 0.0
        self.context = float(np.mean(self.s_in) + np.mean(self.s_out) / 2)
        lay = dep.layout
        self.dp = lay.dp
        n1 = float(lay.pp)                                               # a full micro-batch per stage: affine above
        cap = dep.capacity(max(1, math.ceil(self.context)), **({} if prefix is None else dict(
            prefix_tokens=prefix[0], prefix_hit_rate=prefix[1], block_size=prefix[2])))
        self.max_running = float(cap.max_batch) / lay.dp
        self.knots = None
        if self.field:
            from .estimate import regime_of

            # the regimes the running counts fall in (one sequence a stage, and more), whose widest interval every
            # count takes: fixed for the engine, so found once, not at each of the simulation's steps
            self.regimes = sorted({regime_of(dep, lay.dp * n) for n in (n1, 2 * n1)})
            self.lines = self._estimate_lines(n1)
            self.slope = self.lines[-1][1]
        else:
            s1, s2 = (dep.step(n * lay.dp, self.context) for n in (n1, 2 * n1))
            self.lines = []
            for name in ("memory_s", "compute_s", "comm_s"):
                slope = (getattr(s2, name) - getattr(s1, name)) / n1
                self.lines.append((getattr(s1, name) - slope * n1, slope))
            # below a full micro-batch a stage's pass costs what one sequence's does: the lines extended under n1
            # would price less than that floor (review R25c-2: pp=2, 4.531 ms a token against a 4.563 ms step)
            self.lines.append((float(s1.strict_s), 0.0))
            self.slope = max(b for _, b in self.lines)

    def _estimate_lines(self, n1):
        """The chords of the estimated decode step between running counts ``n1 x 1, 2, 4, ...``, up to the first
        count past what the replica's memory holds (steeper chords beyond it would set the utilisation by batches
        that cannot run). ``t_d(N)`` is their interpolation (``self.knots``: each priced count on it, the first and
        last chords extended beyond), not their max: a mixture of experts' estimated step is concave in the count
        (the experts a step reads saturate), and the max of its chords would extend the steepest, first one to
        every count."""
        running = n1 * _ESTIMATE_RUNNING
        running = running[: max(2, int(np.searchsorted(running, self.max_running)) + 1)]
        t = self._estimated_step_s(running, self.context)
        self.knots = running
        slopes = np.diff(t) / np.diff(running)
        return [(float(t[i] - b * running[i]), float(b)) for i, b in enumerate(slopes)]

    def _estimated_step_s(self, running, context):
        """The estimated decode step of ``running`` sequences per replica: the estimate, or one end of its interval.

        The interval is one for every count, the widest of the regimes the counts fall in (one sequence per stage
        on one chip is ``batch1``, more are ``large_batch``): its ends are then as convex in the count as the
        estimate. Priced in each count's own regime, the high end jumps between one sequence and two, and the
        chord through that jump, extended to every count by the max of lines, would set every step and the
        utilisation (for Llama 3 8B on an H100, a slope 8 times the others').
        """
        from .estimate import estimate_step, interval_s

        e = estimate_step(self.dep, np.maximum(running, 1.0) * self.dp, context)
        return np.asarray(interval_s(e.bound_s, e.estimate_s, self.regimes)[_INTERVAL_INDEX[self.field]])

    def strict_s(self, running, context):
        """A decode step of ``running`` sequences per replica at ``context``: the bound, or the estimate."""
        if self.field:
            return self._estimated_step_s(running, context)
        return self.dep.strict_s(np.maximum(running, 1.0) * self.dp, context)

    def step_s(self, running):
        """``t_d(N)``: the decode step of ``running`` sequences on the replica, seconds (the bound's max of lines, or
        the estimate's interpolation of its priced counts, flat below the first: a micro-batch's floor)."""
        if self.knots is not None:
            piece = np.clip(np.searchsorted(self.knots, running) - 1, 0, len(self.lines) - 1)
            a, b = (np.array([line[k] for line in self.lines])[piece] for k in (0, 1))
            return a + b * np.maximum(running, self.knots[0])
        out = 0.0
        for a, b in self.lines:
            out = np.maximum(out, a + b * running)
        return out

    def _running(self, k, extra, stable):
        """The least root of ``N = k t_d(N + 1) + extra`` where ``stable`` (inf elsewhere): the sequences decoding.

        For the max of lines, the largest of each line's own root ``(k (a + b) + extra) / (1 - k b)``. For the
        interpolation, the least of the roots whose ``N + 1`` lies on their own piece, the flat one below the
        first knot included (the first crossing of ``N - k t_d(N + 1) - extra`` from below: it starts below 0,
        and stability, ``k`` times the last slope below 1, makes a crossing exist).
        """
        if self.knots is None:
            running = np.zeros_like(k)
            for a, b in self.lines:
                root = (k * (a + b) + extra) / np.maximum(1 - k * b, 1e-300)
                running = np.maximum(running, np.where(stable, root, np.inf))
            return running
        first = self.knots[0]
        flat = k * self.step_s(np.float64(first)) + extra           # N + 1 at or below the first knot
        running = np.where(stable & (flat + 1 <= first * (1 + 1e-9)), flat, np.inf)
        edges = np.concatenate([[first], self.knots[1:-1], [np.inf]])
        for i, (a, b) in enumerate(self.lines):
            free = 1 - k * b
            root = np.where(free > 0, (k * (a + b) + extra) / np.where(free > 0, free, 1.0), np.inf)
            slack = 1e-9 * np.maximum(np.abs(root + 1), 1.0)  # a root on a shared knot belongs to both pieces
            on = (root + 1 >= edges[i] - slack) & (root + 1 <= edges[i + 1] + slack)
            running = np.minimum(running, np.where(stable & on, root, np.inf))
        return running

    def at_rate(self, rate):
        """The closed forms at ``rate`` requests/s (the whole deployment's): a dict of arrays."""
        with np.errstate(all="ignore"):  # an unstable rate's infinities are masked by ``stable``
            return self._at_rate(np.asarray(rate, dtype=float) / self.dp)

    def _at_rate(self, lam):
        rho_p = lam * self.mean_prefill_s
        rho = rho_p + lam * self.steps * self.slope    # the step's cost per added sequence at a full batch
        stable = rho < 1
        free = np.where(stable, 1 - rho_p, 1.0)
        k = lam * self.steps / free
        # A decoding request is in the batch it waits on, with the others running: under Poisson arrivals their
        # number, seen by a running request, is distributed as the time average's, so its step holds N + 1 on the
        # mean, and Little's law N = k t_d(N + 1). Priced at t_d(N), a light load gets a fraction of a sequence's
        # step (review R25b-1: Mixtral on two H100s at 0.01 req/s, 2.90 ms a token against the simulation's
        # 6.16 ms), and a mixture of experts, whose step climbs steeply over its first sequences, a step without
        # the experts its own tokens read (at 0.5 req/s, 6.41 ms against 9.27 ms simulated).
        # A request's first decode step also waits for the prompts its own prefill left queued (prefill priority):
        # as many as an M/G/1 queue of prefills leaves behind a departure, L = rho_p + lam^2 E[t_p^2] / (2 (1 -
        # rho_p)), each a busy period E[t_p] / (1 - rho_p). Spread over a request's steps it is small for long
        # outputs and most of the time per output token for short ones (review R25c-1: 2,000 in and 2 out at
        # utilisation 0.6, 11.4 ms a token without it against 87.3 ms simulated).
        left = rho_p + lam ** 2 * self.prefill_s2 / (2 * free)
        first_wait = np.where(stable, left * self.mean_prefill_s / free, 0.0)
        running = self._running(k, lam * first_wait * self.decoding_share, stable)
        seen = np.where(stable, self.step_s(np.where(stable, running + 1.0, 1.0)), np.inf)
        step = np.where(stable, self.step_s(np.where(stable, np.maximum(running, 1.0), 1.0)), np.inf)
        tpot = seen / free + first_wait * self.inverse_steps
        # the fraction of time in decode steps: each of a request's steps is a 1 / (N + 1) share of the one it is in
        decoding = np.where(stable, np.minimum(lam * self.steps * seen / (running + 1.0), 1 - rho_p), 1.0)
        wait = np.where(stable, (lam * self.prefill_s2 + decoding * step) / (2 * free), np.inf)
        fits = stable & (running <= self.max_running)
        return dict(utilisation=rho, prefill_utilisation=rho_p, running=running, step_s=step, tpot_s=tpot,
                    wait_s=wait, busy=np.minimum(rho_p + decoding, 1.0), stable=stable, fits=fits)


# ----- the result -------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # a result: compared by its figures, not as a whole
class Load(Result):
    """Serving at an arrival rate (:func:`serving_load`): seconds, requests/s; arrays over the rates.

    An **estimate** built from the step model's bounds (see the module text).

    Attributes
    ----------
    arrival_rate : requests/s offered to the whole deployment.
    input_tokens, output_tokens : the mean request shape.
    n_chips : chips of the deployment.
    utilisation, prefill_utilisation : ``rho`` and ``rho_p`` of one replica (below 1: stable). ``rho`` is a
        stability margin, the work a request adds at a full batch's rate; not the time the engine is busy.
    busy : the fraction of time a replica is prefilling or decoding (the chance an arrival finds it busy): near 1
        long before ``rho`` is, where batches form (review R25c-5).
    running : mean sequences decoding on a replica (``N``).
    fits : stable, and ``N`` within what the replica's memory holds.
    queue_wait_s : mean wait before a prompt's prefill starts (NaN, JSON null, where the load is unstable;
        so are ``running``, ``ttft_s``, ``tpot_s`` and the percentiles there).
    ttft_s, tpot_s : mean time to first token (wait + prefill) and time per output token.
    percentiles : the percentiles of ``ttft_percentiles_s`` (and the simulation's).
    ttft_percentiles_s : the closed form's percentiles of TTFT, one row per percentile.
    simulated : :class:`SimulatedLoad` where asked for, else None.
    times : the service times used: ``"bound"`` or ``"estimate"`` (:data:`TIMES`); ``"estimate_low"`` and
        ``"estimate_high"`` in ``at_low`` and ``at_high``.
    at_low, at_high : with ``times="estimate"``, the same load (closed forms only, no simulation) with every
        prefill and decode step at the low and at the high end of its estimate's 80% interval; None otherwise.
    is_lower_bound : always False (an estimate).
    """

    arrival_rate: ArrayLike
    input_tokens: float
    output_tokens: float
    n_chips: int
    utilisation: ArrayLike
    prefill_utilisation: ArrayLike
    busy: ArrayLike
    running: ArrayLike
    fits: ArrayLike
    queue_wait_s: ArrayLike
    ttft_s: ArrayLike
    tpot_s: ArrayLike
    percentiles: list
    ttft_percentiles_s: ArrayLike
    simulated: object = None
    times: str = "bound"
    at_low: object = None
    at_high: object = None
    is_lower_bound: bool = False

    _derived = ("goodput_tokens_per_s_per_chip",)

    @property
    def goodput_tokens_per_s_per_chip(self) -> ArrayLike:
        """Output tokens/s per chip where the load is served (``fits``), else 0."""
        return plain(np.where(self.fits, self.arrival_rate * self.output_tokens / self.n_chips, 0.0))


@dataclass(frozen=True, eq=False)
class SimulatedLoad(Result):
    """The scheduler simulated request by request (:func:`simulate`): percentiles over the requests served.

    Attributes
    ----------
    arrival_rate : requests/s offered to the whole deployment.
    n_requests, replicas, seed : requests per simulated replica, replicas, and the seed.
    percentiles : as in :class:`Load`.
    queue_wait_s, ttft_s, tpot_s : means over the requests (the first tenth of each replica left out: warm-up).
    queue_wait_percentiles_s, ttft_percentiles_s, tpot_percentiles_s : one row per percentile.
    """

    arrival_rate: float
    n_requests: int
    replicas: int
    seed: int
    percentiles: list
    queue_wait_s: float
    ttft_s: float
    tpot_s: float
    queue_wait_percentiles_s: ArrayLike
    ttft_percentiles_s: ArrayLike
    tpot_percentiles_s: ArrayLike


def _prefix_args(prefix_tokens, prefix_hit_rate, block_size):
    from .prefix import check_prefix

    return check_prefix(prefix_tokens, prefix_hit_rate, block_size)


def serving_load(dep: Deployment, arrival_rate: ArrayLike, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
                 percentiles: ArrayLike = PERCENTILES, simulate_requests: int | None = None, seed: int = 0,
                 prefix_tokens: ArrayLike | None = None, prefix_hit_rate: ArrayLike | None = None,
                 block_size: int | None = None, times: str = "bound") -> Load:
    """Utilisation, queueing and latency percentiles of ``dep`` serving requests that arrive at ``arrival_rate``.

    Parameters
    ----------
    dep : Deployment
    arrival_rate : float or array
        Requests/s offered to the whole deployment (split evenly over its data-parallel replicas).
    input_tokens, output_tokens : int or 1-D array
        The request lengths: one shape, or samples of a length distribution
        (drawn uniformly; the two paired where both are arrays).
    percentiles : sequence
        In (0, 100) (default 50, 90, 99).
    simulate_requests : int, optional
        Also run :func:`simulate` with that many requests per replica at each rate (a 1-D rate of a few values).
    seed : int
        The simulation's seed.
    prefix_tokens, prefix_hit_rate, block_size : optional
        A cached shared prefix (:mod:`kvmath.prefix`).
    times : str
        ``"bound"`` (default): the steps' lower bounds as service times; ``"estimate"``: the estimates of
        :mod:`kvmath.estimate` (not with a cached prefix, which the estimate does not price), with the answer
        at the ends of their 80% intervals in ``at_low`` and ``at_high``.

    Returns
    -------
    Load

    Examples
    --------
    Llama 3 8B on one H100, 2,000 tokens in and 200 out, 4 requests a second:

    >>> from kvmath import Deployment
    >>> load = serving_load(Deployment("llama-3-8b", "h100-sxm"), 4.0, 2000, 200)
    >>> round(float(load.utilisation), 3), round(float(load.ttft_s) * 1e3, 1), round(float(load.tpot_s) * 1e3, 2)
    (0.183, 33.2, 5.6)
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    rate = positive("arrival_rate", arrival_rate)
    pct = [float(p) for p in np.atleast_1d(_percentile(percentiles))]
    s_in, s_out = _lengths(input_tokens, output_tokens)
    times = _times(times, prefix_tokens)
    engine = _Engine(dep, s_in, s_out, _prefix_args(prefix_tokens, prefix_hit_rate, block_size), times)
    simulated = None
    if simulate_requests is not None:
        simulated_requests("simulate_requests", simulate_requests)
        seed = seed_value("seed", seed)
        if np.ndim(rate) > 1 or np.size(rate) > 16:
            raise ValueError(f"simulate_requests runs one simulation per rate: give at most 16 rates, got "
                             f"arrival_rate of shape {np.shape(rate)}")
        simulated = [simulate(dep, r, s_in, s_out, n_requests=simulate_requests, seed=seed, percentiles=pct,
                              _engine=engine) for r in np.atleast_1d(rate)]
        simulated = simulated[0] if np.ndim(rate) == 0 else simulated
    ends = {}
    if times == "estimate":
        ends = {f"at_{end}": _load(_Engine(dep, s_in, s_out, None, f"estimate_{end}"), rate, pct, s_in, s_out)
                for end in ("low", "high")}
    return _load(engine, rate, pct, s_in, s_out, simulated=simulated, **ends)


def _load(engine: _Engine, rate, pct, s_in, s_out, **extra) -> Load:
    """The closed forms of ``engine`` at ``rate`` as a :class:`Load` (``extra``: its simulation and interval ends)."""
    f = engine.at_rate(rate)
    if not (np.all(np.isfinite(f["utilisation"])) and np.all(np.isfinite(f["prefill_utilisation"]))):
        # a finite rate so high that rho overflows float64: refused naming it, never an inf utilisation
        raise ResultOverflow(f"serving_load: the utilisation overflows float64 (it would be inf) for "
                             f"arrival_rate={rate!r}")
    f = {k: np.where(f["stable"], v, np.nan) if k in ("running", "step_s", "tpot_s", "wait_s") else v
         for k, v in f.items()}  # an unstable rate has no steady state: undefined (NaN, JSON null), not inf
    ttft = f["wait_s"] + engine.mean_prefill_s
    rows = np.stack([wait_percentile_s(f["wait_s"], f["busy"], p) + engine.mean_prefill_s for p in pct])
    return Load(arrival_rate=rate, input_tokens=float(np.mean(s_in)), output_tokens=float(np.mean(s_out)),
                n_chips=engine.dep.n_chips, utilisation=plain(f["utilisation"]),
                prefill_utilisation=plain(f["prefill_utilisation"]), busy=plain(f["busy"]), running=plain(f["running"]),
                fits=bool(f["fits"]) if np.ndim(f["fits"]) == 0 else f["fits"], queue_wait_s=plain(f["wait_s"]),
                ttft_s=plain(ttft), tpot_s=plain(f["tpot_s"]), percentiles=pct, ttft_percentiles_s=plain(rows),
                times=engine.times, **extra)


def _times(times, prefix_tokens) -> str:
    times = choice("times", times, TIMES)
    if times == "estimate" and prefix_tokens is not None:
        raise ValueError("times='estimate' prices no cached prefix: give prefix_tokens with times='bound', or drop it")
    return times


def _lengths(input_tokens, output_tokens):
    s_in = np.asarray(positive_int("input_tokens", input_tokens), dtype=float)
    s_out = np.asarray(positive_int("output_tokens", output_tokens), dtype=float)
    for name, x in (("input_tokens", s_in), ("output_tokens", s_out)):
        if x.ndim > 1:
            raise ValueError(f"{name} must be a number or a 1-D array of samples, got shape {x.shape}")
    if s_in.ndim and s_out.ndim and s_in.size != s_out.size:
        raise ValueError(f"input_tokens and output_tokens must pair up: {s_in.size} and {s_out.size} samples")
    return s_in, s_out


# ----- the simulation ---------------------------------------------------------------------------

def simulate(dep: Deployment, arrival_rate: float, input_tokens: ArrayLike, output_tokens: ArrayLike, *,
             n_requests: int = 2000, replicas: int = REPLICAS, seed: int = 0, percentiles: ArrayLike = PERCENTILES,
             times: str = "bound", _engine: _Engine | None = None) -> SimulatedLoad:
    """The prefill-priority scheduler of the module text, run request by request on ``replicas`` seeded replicas.

    Each replica draws ``n_requests`` Poisson arrivals at ``arrival_rate / dp``
    (and a quarter as many after them, which keep the batch loaded while the
    last measured requests decode and are not measured; the first tenth is a
    warm-up, not measured either)
    and request lengths uniformly from ``input_tokens`` / ``output_tokens``;
    prefills take :func:`kvmath.requests.prefill_bound`'s time for their
    prompt, decode steps the replica's ``t_d(N)`` at its running sequences'
    mean context (``times``: the bounds, or the estimates, as in :func:`serving_load`).
    The replicas advance together (numpy over the replica axis),
    event by event: a prefill, or as many decode steps as pass before the next
    arrival or completion. Deterministic for a seed.
    """
    instance("dep", dep, Deployment, "a kvmath.Deployment")
    rate = float(positive("arrival_rate", arrival_rate))
    r = one_int("replicas", replicas)
    n = simulated_requests("n_requests", n_requests, r)
    seed = seed_value("seed", seed)
    pct = [float(p) for p in np.atleast_1d(_percentile(percentiles))]
    s_in, s_out = _lengths(input_tokens, output_tokens)
    engine = _Engine(dep, s_in, s_out, times=_times(times, None)) if _engine is None else _engine
    # the clocks are absolute seconds: past a span of 2**52 x 1e-3 of the shortest prefill, float64 keeps less
    # than a thousandth of it, and the waits and times to first token it returns would be silently rounded
    # arrivals go on past the n measured requests (a quarter more, not measured), so the last measured ones decode
    # in a loaded batch and not in one that drains once arrivals stop (review R25c-4: near saturation the drain
    # made the mean TPOT grow with n_requests, 29.4 ms at 400 against 39.5 ms at 1,000)
    total = n + n // 4
    span = total * dep.layout.dp / rate
    shortest = float(np.min(engine.prefill_s))
    if not span * 2.0**-52 <= 1e-3 * shortest:
        raise ValueError(f"arrival_rate {arrival_rate!r} is too low to simulate: {total:,} arrivals span "
                         f"{span:.3g} s, where float64 cannot resolve the {shortest:.3g} s prefill; give at least "
                         f"{total * dep.layout.dp * 2.0**-52 / (1e-3 * shortest):.3g} requests/s")
    rng = np.random.default_rng(int(seed))
    arrivals = np.cumsum(rng.exponential(dep.layout.dp / rate, size=(r, total)), axis=1)
    pick = rng.integers(0, max(engine.prefill_s.size, engine.s_out.size), size=(r, total))
    prefill = engine.prefill_s[pick % engine.prefill_s.size]
    steps = (engine.s_out - 1)[pick % engine.s_out.size]
    contexts = engine.s_in[pick % engine.s_in.size]

    wait, ttft, tpot = run_scheduler(arrivals, prefill, steps, contexts, engine.strict_s)
    keep = slice(n // 10, n)
    w, t, d = (x[:, keep].ravel() for x in (wait, ttft, tpot))
    d = d[np.isfinite(d)]
    if d.size == 0:
        d = np.array([np.nan])
    return SimulatedLoad(arrival_rate=rate, n_requests=n, replicas=r, seed=int(seed), percentiles=pct,
                         queue_wait_s=float(w.mean()), ttft_s=float(t.mean()), tpot_s=float(np.mean(d)),
                         queue_wait_percentiles_s=np.percentile(w, pct), ttft_percentiles_s=np.percentile(t, pct),
                         tpot_percentiles_s=np.percentile(d, pct))


def simulated_requests(name: str, n_requests, replicas: int = REPLICAS) -> int:
    """``n_requests`` per replica as an int, refused by ``name`` past :data:`MAX_SIMULATED_REQUESTS` over the replicas."""
    n = one_int(name, n_requests)
    if n * replicas > MAX_SIMULATED_REQUESTS:
        raise ValueError(f"{name} must be at most {MAX_SIMULATED_REQUESTS // replicas:,} requests per replica "
                         f"({replicas} replicas, at most {MAX_SIMULATED_REQUESTS:,} requests in all, which the "
                         f"simulation holds in memory at once), got {n_requests!r}")
    return n


def seed_value(name: str, seed) -> int:
    """A seed as a Python int: a whole number, 0 or more (numpy's generators take no other)."""
    x = as_scalar(name, seed)
    if not np.isfinite(x) or x < 0 or x != np.floor(x) or x >= 2.0**63:
        raise ValueError(f"{name} must be a whole number, 0 or more, got {seed!r}")
    return int(x)


def run_scheduler(arrival_s, prefill_s, decode_steps, input_tokens, step_s):
    """Prefill-priority continuous batching on replicas (rows) of requests (columns), event by event.

    ``arrival_s`` (sorted along each row), ``prefill_s`` and ``decode_steps``
    (each request's steps after its first token) and ``input_tokens`` are
    ``(replicas, requests)`` arrays; ``step_s(running, mean_context)`` gives the
    decode step for arrays over the replicas. Returns ``(wait, ttft, tpot)``
    per request: the wait before its prefill, its time to first token, and its
    mean time per output token (NaN without a decode step).
    """
    arrival_s = np.asarray(arrival_s, dtype=float)
    r, n = arrival_s.shape
    rows = np.arange(r)
    clock = np.zeros(r)
    nxt = np.zeros(r, dtype=int)             # the next prompt to prefill (first come, first served)
    done = np.zeros(r)                       # decode steps run so far
    running = np.zeros(r)
    base = np.zeros(r)                       # sum over running sequences of (prompt - steps done at admission)
    finish_step = np.full((r, n), np.inf)
    start = np.full((r, n), np.nan)
    first = np.full((r, n), np.nan)
    last = np.full((r, n), np.nan)
    steps = np.asarray(decode_steps, dtype=float)
    prompt = np.asarray(input_tokens, dtype=float)
    while True:
        pending = nxt < n
        head = np.minimum(nxt, n - 1)
        next_arrival = np.where(pending, arrival_s[rows, head], np.inf)
        if not (pending.any() or running.any()):
            break
        prefill = pending & (next_arrival <= clock)
        decode = ~prefill & (running > 0)
        idle = ~prefill & ~decode & pending
        # a prefill: the head of the queue, whole
        if prefill.any():
            i, j = rows[prefill], head[prefill]
            start[i, j] = clock[i]
            clock[i] += prefill_s[i, j]
            first[i, j] = clock[i]
            has = steps[i, j] > 0
            finish_step[i[has], j[has]] = done[i[has]] + steps[i[has], j[has]]
            last[i[~has], j[~has]] = clock[i[~has]]
            running[i] += has
            base[i] += np.where(has, prompt[i, j] - done[i], 0.0)
            nxt[i] += 1
        # decode steps: up to the next completion, or to the step in which the next prompt arrives
        if decode.any():
            i = rows[decode]
            context = base[i] / running[i] + done[i]
            t = step_s(running[i], context)
            to_finish = np.min(finish_step[i], axis=1) - done[i]
            to_arrival = np.where(np.isfinite(next_arrival[i]), np.ceil((next_arrival[i] - clock[i]) / t), np.inf)
            k = np.maximum(np.minimum(to_finish, to_arrival), 1.0)
            t = step_s(running[i], context + (k - 1) / 2)   # the cache grows a token a step: its mean over them
            clock[i] += k * t
            done[i] += k
            ended = finish_step[i] <= done[i][:, None]
            if ended.any():
                ii, jj = np.nonzero(ended)
                rr = i[ii]
                last[rr, jj] = clock[rr]
                np.add.at(running, rr, -1.0)
                np.add.at(base, rr, -(prompt[rr, jj] - (finish_step[rr, jj] - steps[rr, jj])))
                finish_step[rr, jj] = np.inf
        if idle.any():
            clock[idle] = next_arrival[idle]
    wait = start - arrival_s
    ttft = first - arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (last - first) / np.maximum(steps, 1), np.nan)
    return wait, ttft, tpot
