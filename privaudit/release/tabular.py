"""Differentially private release of tabular counts (``privaudit release``).

Pipeline (docs/release.md, "The privacy model" and "The noise and the budget split"):

1. check the arguments and the budget (the ledger) **before** reading a row
   or drawing any noise;
2. prepare the logs (``privaudit.data.prepare.prepare_logs``): validate them
   (rules that bounding cannot repair are fatal), then bound contributions
   (k episodes per unit, H steps, rewards clipped and scaled to [0, 1]);
4. exact counts per family (``privaudit.data.counts``), dense over the
   declared domain;
5. add independent noise to **every** cell (observed or not), integers out;
6. write the folder under a temporary name, charge the ledger, rename.

Ledger order: *write-to-temporary, charge, rename*. The charge happens once
the files are complete but before they appear under the final name. If the
charge is refused (another release took the budget meanwhile) nothing is
released. If the rename failed after a successful charge, the budget would be
over-counted (safe) but never under-counted: an entry is never lost.

The mechanism itself (noise plan, budget split between families, event,
manifest, noise, E) is :class:`privaudit.release.mechanism.TabularRelease`;
this module only reads, prepares, applies it and writes.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl
import pyarrow as pa

from privaudit.data.bounding import BoundingReport
from privaudit.data.engines import ENGINES, spark_module
from privaudit.data.prepare import prepare_logs, read_failed
from privaudit.data.repairs import RepairLimit
from privaudit.core.errors import UsageError
from privaudit.core import progress
from privaudit.core.formatting import num
from privaudit.core.atomic import atomic_dir, atomic_write_text
from privaudit.core.outputs import check_sidecar_free, new_run_id, output_lock
from privaudit.privacy import budget as budget_mod
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import PrivacyEvent
from privaudit.core.spec import DomainSpec, load_spec
from privaudit.data import counts
from privaudit.release.manifest import ReleaseManifest
from privaudit.release.mechanism import TabularRelease
from privaudit.release.size import check_release_size
from privaudit.release.artifact import FILES, MANIFEST, Release, load_release
from privaudit.release.writer import TransitionWriter, write_sa_table

__all__ = ["release_logs", "ReleaseOptions", "default_stationary", "STEP_RULE", "ReleaseInfo", "load_release",
           "Release", "local_log_path"]

class _Clock:
    """Wall and CPU seconds per stage (for ReleaseInfo.timings and the benchmark).

    ``cpu`` is the calling thread's CPU time (``time.thread_time``) by
    default, or the whole process's (``time.process_time``) for stages that
    run polars' thread pool alone.
    """

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, cpu=time.thread_time):
        w, c = time.perf_counter(), cpu()
        try:
            yield
        finally:
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu() - c

    def as_dict(self) -> dict:
        return {**self.wall, **{f"{k}_cpu": v for k, v in self.cpu.items()}}


@dataclass(frozen=True)
class ReleaseInfo:
    """What :func:`release_logs` did."""

    #: The release folder.
    out: Path
    #: The release's manifest (public; ``manifest.to_dict()`` is ``manifest.json``).
    manifest: ReleaseManifest
    #: The local, NOT-for-release log of bounding facts next to ``out``.
    local_log: Path
    #: PRIVATE counts of what bounding changed (for the data holder only).
    bounding: BoundingReport = field(repr=False)
    #: Wall seconds per stage: validate, read_count, noise, write (write overlaps the noise of the next h), total;
    #: and CPU seconds per stage under ``<stage>_cpu`` (process CPU for validate and read_count, the stage's own
    #: thread for noise and write); str -> float.
    timings: dict = field(default_factory=dict, repr=False)
    #: What the release cost (the event stored in the manifest); the caller composes it with its other parts.
    event: PrivacyEvent | None = None


def local_log_path(out: Path) -> Path:
    """``<out>.local-log.json``: beside the release folder, never inside it."""
    out = Path(out)
    return out.with_name(out.name + ".local-log.json")


STEP_RULE = ("counts are pooled over the steps h unless `stationary`=False is given or the MDP given is "
             "non-stationary")


def default_stationary(mdp=None) -> tuple[bool, str]:
    """The one default for pooling counts over the steps h, used by every command.

    Rule (docs/pipeline.md, "Defaults, and why"): pool the counts over h
    (stationary tables (S, A), (S, A, S)) unless the user says
    ``stationary=False`` or an MDP is given whose dynamics change with h.
    ``release``, ``train``, ``audit`` and ``pipeline`` apply it when
    ``stationary`` is None, and print the returned sentence on stderr. The
    sentence names the parameter (```stationary`=False``); the CLI shows its
    flags instead (``privaudit.cli.common.as_flags``: ``--per-step``).

    Parameters
    ----------
    mdp : object with a boolean ``stationary`` attribute and a ``name``, optional
        The known MDP (pipeline ``--mdp``); None when none is given.

    Returns
    -------
    stationary : bool
        True to pool over h.
    said : str
        One line stating the rule that applied and how to override it.
    """
    if mdp is None:
        stationary, why = True, "no MDP is given, so the dynamics are taken as the same at every step"
    else:
        stationary = bool(mdp.stationary)
        why = f"the MDP {getattr(mdp, 'name', 'given')} is {'stationary' if stationary else 'non-stationary'}"
    said = (f"counts {'pooled over the steps h' if stationary else 'per step h'} ({why}); "
            f"`stationary`={not stationary} overrides. Default of every command: {STEP_RULE}.")
    return stationary, said


@dataclass(frozen=True)
class ReleaseOptions:
    """How :func:`release_logs` runs, beside what it releases (the budget, the cells, the output).

    The entry points (the CLI, the pipeline, ``train``) and Spark users set these; a plain
    ``release_logs(logs, spec, rho=..., out=..., seed=...)`` needs none of them.
    """

    #: An already resolved budget (an entry point that resolved it, e.g. the pipeline's part); then ``rho``,
    #: ``epsilon`` and ``delta`` must be None and ``mechanism`` is the budget's.
    budget: Budget | None = None
    #: Exact discrete Gaussian / discrete Laplace samplers (``privaudit.privacy.samplers``; the manifest's
    #: ``guarantee.sampler`` states total variation 0). ``"rounded"`` (numpy's float samplers, rounded) is refused:
    #: their output law is not certified, so no exact guarantee could be stated (docs/privacy.md, "Noise modes").
    #: The one value accepted: ``"exact"``.
    noise: str = "exact"
    #: Who validates, bounds and counts: polars on this machine (default), or Apache Spark
    #: (:mod:`privaudit.data.spark.engine`, the ``privaudit[spark]`` extra). With Spark, ``logs`` may also be a
    #: Spark DataFrame or any path Spark reads (HDFS, cloud storage); only the exact cell counts come back to this
    #: process, which adds the noise: the (H, S, A) tables once, the transition cells one step h at a time (the
    #: driver holds one (S, A, S) slice). The budget and the ledger are checked before Spark reads a row.
    #: ``"polars"`` or ``"spark"``.
    engine: str = "polars"
    #: With ``engine="spark"``: the session to use (classic or Spark Connect: a notebook's ``spark``), a master URL
    #: (``local[4]``, ``spark://host:7077``, ``yarn``), or a Spark Connect URL ``sc://HOST:PORT``
    #: (``privaudit.data.spark.session.connect_session``: an unreachable server is an ``EngineError`` before
    #: anything is read). None uses the active session or ``local[*]``. A SparkSession, a str or None.
    spark: Any = None
    #: ``echo(text)`` for messages to the data holder (stderr in the CLI).
    echo: Callable[[str], Any] | None = None
    #: Identifier of the run, recorded in the ledger entry (default: a new random one).
    run: str | None = None
    #: The output the ledger entry names (default ``out``; the pipeline passes its own folder).
    run_output: str | Path | None = None
    #: The data holder's limit on what contribution bounding may change (``privaudit.data.repairs``; default: stop
    #: above 5% unless accepted), checked on logs this call prepares (a path, or Spark) before any noise is drawn;
    #: logs passed prepared were checked by their caller.
    repairs: RepairLimit = field(default_factory=RepairLimit)


def release_logs(logs, spec, *, rho: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, mechanism: str | None = None, stationary: bool = False,
                 max_per_cell: int | None = None, out, ledger=None, seed: int | None = None,
                 options: ReleaseOptions | None = None) -> ReleaseInfo:
    """Release noisy visit, transition (and reward-sum) counts of tabular logs.

    read -> prepare -> apply -> write: the budget is resolved once
    (``privacy.budget.resolve_budget``, unless ``options.budget`` is given), the
    mechanism planned from public facts (:class:`privaudit.release.mechanism.TabularRelease`),
    the ledger checked with its event before any row is read, the logs
    validated, bounded and counted, the noise applied by the mechanism, and
    the folder written under a temporary name, charged, renamed.

    Parameters
    ----------
    logs : str, Path, PreparedLogs or SparkPreparedLogs
        A Parquet file or folder of parts (``privaudit.data.io.scan_logs``),
        prepared here once the arguments, size and budget have passed; or logs
        the caller already prepared under ``spec`` with this ``engine``
        (``privaudit.data.prepare.prepare_logs`` or, with Spark,
        ``privaudit.data.spark.prepare.prepare_spark_logs``: the pipeline's
        single pass; not read, checked or bounded again).
    spec : DomainSpec, str or Path
        The public domain spec (or its file).
    rho : float, optional
        zCDP budget (Gaussian); with ``delta``, reported as (epsilon, delta)-DP at that delta.
    epsilon, delta : float, optional
        (epsilon, delta)-DP target (Gaussian: converted exactly to rho), or
        pure epsilon (Laplace, no delta). The meaning of every entry point:
        ``privacy.budget.resolve_budget``, docs/privacy.md "Budget flags".
    mechanism : {"gaussian", "laplace"}, optional
        Default: the family the budget names (Laplace for ``epsilon`` alone).
    stationary : bool
        Pool counts over h (shapes (S, A), (S, A, S); sensitivities change:
        ``privaudit.privacy.sensitivity``).
    max_per_cell : int, optional
        c >= 1: after bounding, keep at most c steps of each unit in each
        cell ((s, a) when ``stationary``, else (h, s, a); transitions and
        rewards follow the kept steps; ``privaudit.data.bounding.cap_per_cell``)
        and plan the noise for the smaller sensitivities this gives
        (``privaudit.privacy.sensitivity``). Recorded in the manifest
        (``privacy_unit.max_per_cell``, ``bounding.per_cell``) and the event.
        Both engines (Spark: ``privaudit.data.spark.bounding.cap_per_cell``, the same kept
        steps). None: no per-cell cap.
    out : str or Path
        Release folder to create (must not exist).
    ledger : str or Path, optional
        Budget ledger: checked with the release's event before anything is
        read, charged with it on success.
    seed : int, optional
        For tests only: rng mode ``seeded-insecure`` (the value is never
        written). None draws OS entropy.
    options : ReleaseOptions, optional
        How the release runs, beside what it releases: an already resolved
        ``budget``, the ``noise`` mode, the ``engine`` (and ``spark``
        session), ``echo`` for messages, the ledger entry's ``run`` and
        ``run_output`` (:class:`ReleaseOptions`; default ``ReleaseOptions()``).

    Notes
    -----
    ``out`` is locked for the whole call (:func:`privaudit.core.outputs.output_lock`):
    a second release to the same folder at the same time is refused at once,
    and hidden temporary folders that a killed release left next to ``out``
    are removed (and reported through ``echo``).

    Returns
    -------
    ReleaseInfo

    Raises
    ------
    UsageError
        Bad budget arguments, ``out`` exists or is being written by another
        run, bad noise mode, or a domain too
        large for this machine (:func:`privaudit.release.size.check_release_size`, before any row is read).
    SpecError
        Missing or invalid spec.
    BudgetExceededError
        The ledger refuses the release (before any noise is drawn).
    ArtifactError
        A corrupt ledger (every entry is validated on each read), before any
        row is read or noise drawn.
    LogReadError, ValidationFailed
        Unreadable logs, or rules broken that bounding cannot repair.
    RepairsRefused
        Bounding would change a larger share of the logs than
        ``options.repairs`` allows (before any noise is drawn or anything written).

    References
    ----------
    Qiao & Wang (2023), Section 3: the counts, eq. (1) (Gaussian noise, sigma^2 = 2H/rho) and the
    pure-DP remark (Lap(4H/epsilon)); docs/release.md, "Where the numbers come from".
    """
    options = ReleaseOptions() if options is None else options
    if options.noise == "rounded":
        raise UsageError("noise='rounded' (numpy's float samplers, rounded) is no longer used for releases: "
                         "their output law is not certified (numpy's Laplace cannot draw beyond 36.04 b, its "
                         "normal is a float ziggurat), so the stated guarantee would be stronger than what holds. "
                         "Use noise='exact' (the default): exact discrete samplers, as fast.")
    out = Path(out)
    with output_lock(out, "out") as stale:
        if stale and options.echo is not None:
            options.echo(f"removed {len(stale)} stale temporary folder(s) of an interrupted run: "
                         + ", ".join(str(p) for p in stale))
        options = replace(options, run=options.run or new_run_id(),
                          run_output=out if options.run_output is None else options.run_output)
        return _release_locked(logs, spec, rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism,
                               stationary=stationary, max_per_cell=max_per_cell, out=out, ledger=ledger, seed=seed,
                               options=options)


def _release_locked(logs, spec, *, rho, epsilon, delta, mechanism, stationary, max_per_cell, out, ledger, seed,
                    options: ReleaseOptions) -> ReleaseInfo:
    """The body of :func:`release_logs`, under the output lock (``options.run`` and ``run_output`` set)."""
    t_start = time.perf_counter()
    budget, noise, engine, spark, echo = options.budget, options.noise, options.engine, options.spark, options.echo
    if budget is None:
        budget = budget_mod.resolve_budget(rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism)
    elif any(v is not None for v in (rho, epsilon, delta)) or not isinstance(budget, Budget):
        raise UsageError("give either `options.budget` (a resolved Budget) or `rho`/`epsilon`/`delta`, not both.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise UsageError(f"`seed` must be a non-negative integer. Found {seed!r}.")
    spec = spec if isinstance(spec, DomainSpec) else load_spec(spec)
    out = Path(out)
    if out.exists():
        raise UsageError(f"{out} already exists; choose another `out` or remove it.")
    log_path = local_log_path(out)
    check_sidecar_free(log_path, "the release's private bounding log", "release")
    if engine not in ("polars", "spark"):
        raise UsageError(f"`engine` must be 'polars' or 'spark'. Found {engine!r}.")
    prepared = logs if getattr(logs, "engine", None) in ENGINES else None  # PreparedLogs or SparkPreparedLogs
    if prepared is not None:
        if prepared.engine != engine:
            raise UsageError(f"logs prepared by {prepared.engine} cannot be counted by {engine}: pass `engine` "
                             f"{prepared.engine!r}, or the path or DataFrame.")
        prepared.check_spec(spec)
    if engine == "spark":
        spark_engine = spark_module("engine")  # an install problem is reported before anything is read
    logs = prepared.path if prepared is not None else logs if engine == "spark" else Path(logs)
    release = TabularRelease.plan(spec, budget, stationary=stationary, noise=noise,
                                  max_per_cell=max_per_cell)  # may raise on bad H, k, c
    check_release_size(spec, stationary=stationary, n_sa_families=release.n_sa_families)  # before any row
    event = release.event
    if ledger is not None:
        ledger_mod.check_event(Path(ledger), spec.dataset_id, event, budget)
    manifest = release.manifest(seeded=seed is not None)
    warning = release.negligible_noise_warning()
    if warning is not None and echo is not None:
        echo(warning)

    clock = _Clock()
    rewards = "rewards" in release.families
    quantum = release.families["rewards"].quantum if rewards else None
    if engine == "spark":
        with clock.stage("spark", cpu=time.process_time):  # the first rows read, on the cluster
            if prepared is None:  # read, checked, bounded (the repair limit checked) here, before any count
                prepared = spark_engine.prepare_spark_logs(logs, spec, spark=spark, repairs=options.repairs,
                                                           cache=False)
            _check_cap(prepared, max_per_cell, stationary)
            exact, report = spark_engine.spark_sparse_counts(prepared, spec, stationary=stationary, rewards=rewards,
                                                             quantum=quantum, max_per_cell=max_per_cell
                                                             if prepared.bounding.max_per_cell is None else None)
        logs = prepared.path
    else:
        if prepared is None:
            with clock.stage("validate", cpu=time.process_time):  # validation and bounding: the first rows read
                prepared = prepare_logs(logs, spec, repairs=options.repairs)
        if prepared.bounding.max_per_cell is not None:  # capped by the caller: it must be this plan's cap
            _check_cap(prepared, max_per_cell, stationary)
        else:
            with clock.stage("cell_cap", cpu=time.process_time):
                prepared = prepared.with_cell_cap(max_per_cell, stationary=stationary)
        report = prepared.bounding
        with clock.stage("read_count", cpu=time.process_time):  # one streaming pass: the rows stay on disk
            cols = [pl.col(c).cast(pl.Int32) for c in ("step", "state", "action", "next_state")]
            # the (capped) rows in parts of whole units, counted one after the other (issue 33)
            frame = [p.select(cols + ([pl.col("reward")] if rewards else [])) for p in prepared.bounded_parts()]
            try:
                exact = counts.sparse_counts(frame, spec, stationary=stationary, rewards=rewards, quantum=quantum)
            except pl.exceptions.PolarsError as e:
                raise read_failed(logs, e) from None
            if report.max_per_cell is not None and report.cell_steps_dropped is None:
                # the cap's drop count, from the rows it kept (validated logs have no row in a terminal state,
                # so every kept row is counted)
                report = report.with_cell_kept(int(exact.cells["n"].sum()))
    if echo is not None:
        echo(report.summary())

    noisy = None
    try:
        with atomic_dir(out) as tmp:
            with clock.stage("noise"):
                noisy = release.apply(exact, rng=np.random.default_rng(seed))
            with clock.stage("write"):
                write_sa_table(tmp / FILES["visits"], noisy.visits, stationary=stationary)
                if noisy.rewards is not None:
                    write_sa_table(tmp / FILES["rewards"], noisy.rewards, stationary=stationary)
            _write_transitions(tmp, spec, release, noisy.transitions, clock)
            manifest.write(tmp / MANIFEST)
            if ledger is not None:
                ledger_mod.charge_event(Path(ledger), spec.dataset_id, event,
                                        _ledger_description(Path(options.run_output), release), budget,
                                        run=options.run, output=options.run_output)
    finally:
        exact.close()  # Spark: drop the cells cached on the cluster
        del exact, noisy
    atomic_write_text(log_path, json.dumps({
        "WARNING": "PRIVATE: facts about the private logs. Not part of the release; do not share.",
        "release": str(out), "created": manifest.created, "spec_hash": manifest.spec_hash,
        "logs": str(logs), "bounding": report.to_dict(),
    }, indent=2) + "\n")
    timings = clock.as_dict()
    timings["total"] = time.perf_counter() - t_start
    return ReleaseInfo(out=out, manifest=manifest, local_log=log_path, bounding=report, timings=timings,
                       event=event)


def _check_cap(prepared, max_per_cell: int | None, stationary: bool) -> None:
    """Refuse prepared logs a caller capped with another cap than this release's (UsageError)."""
    b = prepared.bounding
    if b.max_per_cell is not None and (b.max_per_cell, b.cell_cap_stationary) != (max_per_cell, stationary):
        raise UsageError(f"the prepared logs are capped at c={b.max_per_cell} per "
                         f"{'(s, a)' if b.cell_cap_stationary else '(h, s, a)'} cell; "
                         f"this release asks for max_per_cell={max_per_cell} with stationary={stationary}.")


def _ledger_description(out: Path, release: TabularRelease) -> str:
    b = release.budget
    what = (f"rho={num(b.rho, 12)}" if b.mechanism == "gaussian"
            else f"laplace epsilon={num(b.epsilon, 12)} (charged rho=eps^2/2)")
    return f"release {out.name}: {b.mechanism}, {what}"


def _write_transitions(tmp: Path, spec: DomainSpec, release: TabularRelease, noisy_slices, clock: _Clock) -> None:
    """Write the noisy transition slices; writing slice h overlaps the scatter and noise of slice h+1.

    The write of each slice runs in one background thread (pyarrow releases
    the GIL); at most two noisy slices are in memory at once. Stage times go
    to ``clock`` ("noise" covers the scatter of the exact slice and its
    noise; the writer thread's CPU time goes under "write").
    """
    scale = release.families["transitions"].scale
    # int32 holds |value| < 2^31; counts are <= rows and the noise is tiny next to that,
    # but a pathological scale (epsilon ~ 1e-8) would not fit: then use int64.
    big = scale * 50 > 2**30
    writer = TransitionWriter(tmp / FILES["transitions"], spec.H, spec.S, spec.A, stationary=release.stationary,
                              value_type=pa.int64() if big else pa.int32())

    def timed_write(h, values):
        with clock.stage("write"):
            writer.write(h, values)

    pending = None
    with ThreadPoolExecutor(max_workers=1) as pool, \
            progress.bar(1 if release.stationary else spec.H, "release: noisy transition slices", "step") as shown:
        try:
            while True:
                with clock.stage("noise"):
                    item = next(noisy_slices, None)
                if item is None:
                    break
                if pending is not None:
                    pending.result()
                pending = pool.submit(timed_write, *item)
                del item
                shown.update(1)
            if pending is not None:
                pending.result()
                pending = None
        finally:
            if pending is not None:
                pending.exception()
            writer.close()
