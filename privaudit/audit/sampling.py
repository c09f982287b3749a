"""Drawing the runs of an audit: independent runs of one mechanism on one dataset.

Batched mechanisms (keyword ``n_runs``) are called in chunks of about
:data:`CHUNK_CELLS` output cells; unbatched ones run in this process, or in a
pool of spawned worker processes once a timed first run shows that the serial
work would exceed :data:`PARALLEL_MIN_SERIAL_S` seconds, if a spawned process
can receive the mechanism (:func:`spawn_can_receive`: not a function defined in
a notebook, an interactive session or an ``exec``'d namespace, which a worker
cannot import; those run in this process). Every chunk gets its
own child of the audit's generator, so the runs are independent whatever the
chunking.
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import types

import numpy as np
import polars as pl

from privaudit.audit.protocol import flatten_runs, numeric_output
from privaudit.core.errors import UsageError, UserCodeError

#: Cells per batched chunk (memory of one chunk ~ 8 bytes x this).
CHUNK_CELLS = 4_000_000
#: Serial work (seconds) below which unbatched runs stay in this process.
PARALLEL_MIN_SERIAL_S = 20.0

#: In a pool worker: the main process's abort event (``Sampler.close(abort=True)`` sets it); None elsewhere.
_ABORT = None


#: Appended to a "fixed shape" error: the way to audit a mechanism whose runs differ in length (an SVT).
VARIABLE_LENGTH_HINT = (" A run of variable length (an SVT's answered prefix, the indices of answered queries) is "
                        "audited through privaudit.audit.inputs.sequence_output(fn, max_length), e.g. "
                        "`svt_runs = sequence_output(svt, max_length=10)` in the file, then FILE.py:svt_runs "
                        "(docs/audit.md, \"Auditing your own mechanism\").")


class _Aborted(Exception):
    """A worker's chunk stopped between two runs because the main process is aborting."""


def _run_serial(fn, logs, rng, n, who="the mechanism"):
    outs = []
    for _ in range(n):
        if _ABORT is not None and _ABORT.is_set():  # the main process is unwinding: stop between runs
            raise _Aborted()
        outs.append(numeric_output(fn(logs, rng), who))
    shapes = {o.shape for o in outs}
    if len(shapes) != 1:
        raise UsageError(f"{who} must return a fixed shape; got shapes {sorted(shapes)}.{VARIABLE_LENGTH_HINT}")
    if outs and outs[0].size == 0:
        raise UserCodeError(f"{who} returned an empty output (shape {outs[0].shape}): there is nothing to audit. "
                            "Return at least one number per run.")
    return np.stack(outs).reshape(n, -1).astype(np.float64), outs[0].shape


def _worker_init(abort) -> None:
    """Initializer of the pool's workers: Ctrl-C and SIGTERM sent to the whole process group (a terminal,
    a job scheduler) are left to the main process, which stops the pool itself (``Sampler.close``); a
    worker killed by the signal mid-task would break the pool and leak its semaphores (Python's
    resource_tracker then warns at exit). ``abort`` (a multiprocessing Event) is checked between two runs
    of a chunk, so an abort waits for one run per worker, not for whole chunks (minutes for DP-APVI)."""
    global _ABORT
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _ABORT = abort


def spawn_can_receive(fn) -> bool:
    """Whether a spawned worker process can be sent ``fn``: it pickles here, and it is not defined in an
    interactive ``__main__`` (a notebook cell, the REPL, ``python -c``, a script read from stdin), whose
    functions pickle by a name a spawned worker cannot import (nor can it re-run such a ``__main__``). A function defined at the top of a script run as ``python script.py`` is
    sendable (the worker re-imports the script as ``__mp_main__``).

    Parameters
    ----------
    fn : callable
        The mechanism.

    Returns
    -------
    bool
        False when the runs must stay in this process.
    """
    pickler = _MainReferences(io.BytesIO())
    try:
        pickler.dump(fn)
    except Exception:  # noqa: BLE001 - any failure to pickle (closures, lambdas, exec'd code) means: serial
        return False
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return not (pickler.found and not (main_file and os.path.isfile(main_file)))


class _MainReferences(pickle.Pickler):
    """A pickler that notes whether anything it pickles (the mechanism, or a function or class a wrapper
    holds) is a function or class of ``__main__``, which pickle sends by name."""

    found = False

    def reducer_override(self, obj):
        if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == "__main__":
            self.found = True
        return NotImplemented


class Sampler:
    """Draws independent runs of one mechanism on one dataset.

    Parameters
    ----------
    fn : callable
        The mechanism (:mod:`privaudit.audit.protocol`); a ``FileFunction`` stays wrapped.
    batched : bool
        ``fn`` takes ``n_runs`` (one call per chunk of :data:`CHUNK_CELLS` cells).
    n_jobs : int
        Worker processes for unbatched runs (used only when the serial work would exceed
        :data:`PARALLEL_MIN_SERIAL_S`).
    progress : callable
        ``progress(k)`` after k runs (a progress bar's update).
    who : str
        Names the mechanism in error messages.
    """

    def __init__(self, fn, batched: bool, n_jobs: int, progress, who: str = "the mechanism"):
        self.fn, self.batched, self.n_jobs, self.progress, self.who = fn, batched, n_jobs, progress, who
        self.shape = None
        self.per_run_s = None
        self._pool = None
        self._abort = None
        self._sendable = None  # spawn_can_receive(fn), decided before the first pool

    def close(self, abort: bool = False):
        """Shut the worker pool down (idempotent).

        ``abort`` (an exception is unwinding: Ctrl-C, SIGTERM, an error): the queued chunks are cancelled
        and the chunks already running (at most one per worker) stop after their current run (the abort
        event the workers check between runs). The workers are not killed: a worker killed mid-task
        leaves the pool's semaphores registered, and Python's resource_tracker then warns of "leaked
        semaphore objects" at exit.
        """
        pool, self._pool = self._pool, None
        if pool is not None:
            if abort:
                self._abort.set()
            pool.shutdown(wait=True, cancel_futures=abort)

    def draw(self, logs: pl.DataFrame, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent runs on ``logs`` (any dataset the mechanism takes), flattened.

        Returns
        -------
        ndarray, shape (n, d), float64
            One row per run; the output shape of a run is kept in ``self.shape``.

        Raises
        ------
        UsageError
            The mechanism's output shape changes between runs.
        UserCodeError
            A mechanism that returns no real-valued array (or not ``n`` runs when batched).
        """
        if self.batched:
            parts, done = [], 0
            while done < n:
                per = 256 if self.shape is None else max(1, CHUNK_CELLS // max(1, int(np.prod(self.shape))))
                size = min(per, n - done)
                out = numeric_output(self.fn(logs, rng.spawn(1)[0], n_runs=size), self.who)
                flat = flatten_runs(out, size, self.who)
                if self.shape is None:
                    self.shape = out.shape[1:]
                elif out.shape[1:] != self.shape:
                    raise UsageError(f"{self.who} must return a fixed shape; got {out.shape[1:]} after {self.shape}."
                                     f"{VARIABLE_LENGTH_HINT}")
                parts.append(flat)
                done += size
                self.progress(size)
            return np.concatenate(parts)
        if self.per_run_s is None:  # time one run: processes only pay off for slow mechanisms
            t = time.perf_counter()
            first, shape = _run_serial(self.fn, logs, rng, 1, self.who)
            self.per_run_s = time.perf_counter() - t
            self.shape = shape
            self.progress(1)
            rest = self.draw(logs, n - 1, rng) if n > 1 else first[:0]
            return np.concatenate([first, rest])
        parallel = self.n_jobs > 1 and n >= 2 * self.n_jobs and self.per_run_s * n >= PARALLEL_MIN_SERIAL_S
        if parallel and self._sendable is None:
            self._sendable = spawn_can_receive(self.fn)
        if not (parallel and self._sendable):
            out, shape = _run_serial(self.fn, logs, rng, n, self.who)
            self.progress(n)
        else:
            if self._pool is None:
                ctx = mp.get_context("spawn")
                self._abort = ctx.Event()
                self._pool = cf.ProcessPoolExecutor(self.n_jobs, mp_context=ctx, initializer=_worker_init,
                                                    initargs=(self._abort,))
            k = min(n, 4 * self.n_jobs)
            sizes = [n // k + (i < n % k) for i in range(k)]
            futs = [self._pool.submit(_run_serial, self.fn, logs, c, s, self.who)
                    for s, c in zip(sizes, rng.spawn(k))]
            parts = []
            for f, s in zip(futs, sizes):
                part, shape = f.result()
                parts.append(part)
                self.progress(s)
            out = np.concatenate(parts)
        if self.shape is None:
            self.shape = shape
        if shape != self.shape or out.shape[1] != int(np.prod(self.shape)):
            raise UsageError(f"{self.who} must return a fixed shape; got {out.shape[1]} cells, expected {self.shape}."
                             f"{VARIABLE_LENGTH_HINT}")
        return out


def pair_unchanged_warning(sampler, pair, alpha: float = 0.05) -> str | None:
    """The "useless pair" warning, or None: only when it is true at confidence 1 - ``alpha``.

    D and D' are run under the same random draws (the same generator state on both sides), run by run,
    up to :data:`PROBE_RUNS` times (fewer for a slow unbatched mechanism: about
    :data:`PROBE_BUDGET_S` seconds); the probe stops at the first run whose outputs differ (the usual
    case: no warning). A batched mechanism is drawn in the growing chunks of :func:`probe_chunks`
    (10, 30, 100, then the rest), each side's chunk from its own generator in the same state, and the
    probe stops after the first chunk with a difference: the online explorers are batched but run one
    episode stream at a time, and drawing all 300 runs per side was a third of their audits' time. Equal outputs in all m runs bound the probability p that the pair changes the
    output under this coupling: p <= 1 - alpha^(1/m) with confidence 1 - alpha, and the total variation
    distance between the output laws on D and D' is at most p (coupling inequality). The warning is
    given only when that bound is at most :data:`PROBE_MAX_TV`: then only an event of probability at most
    p can tell D from D'. An argmax or a vector of SVT bits, equal in most single runs but different in a
    few percent of them, is not warned about (before, three equal runs sufficed and 9 of 10 such audits were told the pair
    was useless, including ones then flagged). The probe outputs are compared and discarded, never
    reported; the progress bar is not advanced.

    Returns
    -------
    str or None
        The warning (it states m and the total-variation bound), or None.
    """
    m = PROBE_RUNS
    if not sampler.batched and sampler.per_run_s:
        m = int(min(PROBE_RUNS, max(3, PROBE_BUDGET_S // max(sampler.per_run_s, 1e-9))))
    p_max = 1.0 - alpha ** (1.0 / m)
    if p_max > PROBE_MAX_TV:  # too few runs to say anything true and useful
        return None
    update, sampler.progress = sampler.progress, (lambda k: None)
    try:
        if sampler.batched:  # in growing chunks, each side from its own generator in the same state
            rng_d, rng_d_prime = np.random.default_rng(PROBE_SEED), np.random.default_rng(PROBE_SEED)
            for n in probe_chunks(m):  # stops after the first chunk with a difference
                a = sampler.draw(pair.d, n, rng_d)
                b = sampler.draw(pair.d_prime, n, rng_d_prime)
                if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                    return None
        else:
            for i in range(m):  # stops at the first difference
                a = sampler.draw(pair.d, 1, np.random.default_rng([PROBE_SEED, i]))
                b = sampler.draw(pair.d_prime, 1, np.random.default_rng([PROBE_SEED, i]))
                if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                    return None
    finally:
        sampler.progress = update
    return (f"the pair does not change the mechanism's output: with the same random draws, D and D' gave "
            f"identical outputs in all {m} probe runs, so (confidence {1 - alpha:g}) the pair changes the output "
            f"in at most {p_max:.2g} of runs and only an event that rare can tell D from D' (their output laws "
            f"are within total variation {p_max:.2g}): the bound says little about the claim. Use a pair that "
            "changes what the mechanism computes (another `pair` D D2, or another `canary`).")


def probe_chunks(m: int) -> list[int]:
    """Sizes of the batched probe's chunks: :data:`PROBE_CHUNKS` (10, 30, 100) cut to ``m`` runs, then the rest.

    They add up to ``m``; the warning needs all ``m`` runs equal, so the chunking changes only when the probe
    stops (after the first chunk with a difference), never its answer.
    """
    sizes, done = [], 0
    for c in PROBE_CHUNKS:
        if done + c >= m:
            break
        sizes.append(c)
        done += c
    return sizes + [m - done]


#: Seed of the probe draws of ``pair_unchanged_warning`` (compared, then discarded).
PROBE_SEED = 20_250_101
#: Most probe runs per side of ``pair_unchanged_warning``.
PROBE_RUNS = 300
#: Seconds of probe runs an unbatched mechanism gets (at least 3 runs).
PROBE_BUDGET_S = 10.0
#: Largest total-variation bound for which the "useless pair" warning is given (m >= 59 equal runs).
PROBE_MAX_TV = 0.05
#: First chunk sizes of the batched probe (:func:`probe_chunks`); the last chunk is the rest of the m runs.
PROBE_CHUNKS = (10, 30, 100)
