"""Differentially private release of tabular counts (``privaudit release``).

Pipeline (DESIGN.md "The privacy model"; ALGORITHMS.md 1.2-1.4):

1. check the arguments and the budget (the ledger) **before** reading a row
   or drawing any noise;
2. prepare the logs (``privaudit.data.prepare.prepare_logs``): validate them
   (rules that bounding cannot repair are fatal), then bound contributions
   (k episodes per unit, H steps, rewards clipped and scaled to [0, 1]);
4. exact counts per family (``privaudit.stats.counts``), dense over the
   declared domain;
5. add independent noise to **every** cell (observed or not), integers out;
6. write the folder under a temporary name, charge the ledger, rename.

Ledger order: *write-to-temporary, charge, rename*. The charge happens once
the files are complete but before they appear under the final name. If the
charge is refused (another release took the budget meanwhile) nothing is
released. If the rename failed after a successful charge, the budget would be
over-counted (safe) but never under-counted: an entry is never lost.

Budget split between families: one noise scale for all families (in
scaled-reward units for rewards), computed from the combined sensitivity;
each family's share is its part of the total (Gaussian: rho_f =
l2_f^2 / (2 sigma^2), summing to rho; Laplace: eps_f = l1_f / b, summing to eps).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from privaudit import FORMAT_VERSION, __version__
from privaudit.data.bounding import BoundingReport
from privaudit.data.prepare import PreparedLogs, collect_or_raise, prepare_logs
from privaudit.errors import PrivauditError, UsageError
from privaudit import progress
from privaudit.fmt import num
from privaudit.io_utils import atomic_dir, atomic_write_text, new_run_id, output_lock
from privaudit.privacy import mechanisms, samplers, sensitivity
from privaudit.schemas import validate_or_raise
from privaudit.spec import DomainSpec, load_spec
from privaudit.stats import counts
from privaudit.stats.artifact import (FILES, MANIFEST, Release, TransitionWriter, load_release,
                                      write_sa_table)

__all__ = ["release_logs", "ReleaseInfo", "Budget", "resolve_budget", "load_release", "Release",
           "local_log_path", "REWARD_QUANTUM", "check_release_size",
           "release_memory_estimate", "physical_memory_bytes", "MEMORY_PER_SLICE_BYTE", "MAX_SLICE_CELLS"]

#: Rewards are summed in units of 1/REWARD_QUANTUM of the scaled reward, so
#: that reward sums are integers like counts (no float side channel, and the
#: exact discrete samplers apply). A public constant, not read off the data.
#: With ``noise="exact"`` and a Gaussian sigma too large for the exact sampler
#: in these units, the quantum is coarsened by powers of 10 (a function of the
#: public sigma only; see :func:`reward_quantum`).
REWARD_QUANTUM = 1000
#: Largest noise scale (stored units) for which exact Gaussian rewards keep the full quantum.
_EXACT_SIGMA_LIMIT = 1.0e4

#: delta at which (epsilon, delta) is reported when only rho is given.
DEFAULT_REPORT_DELTA = 1e-6

#: Peak working memory of a release per byte of one dense (S, A, S) int64
#: transition slice: the exact slice, the float noise, the rounded int64
#: result, the pending write and its Arrow columns. Measured 3.8-4.9 x
#: (benchmarks/bench_release_memory.py: peak RSS over the start, S = 1000 and
#: 1500, A = 10, both mechanisms and noise modes); 6 leaves a margin.
MEMORY_PER_SLICE_BYTE = 6
#: Most cells of one (S, A, S) slice: one Parquet row group of Arrow arrays
#: with int32 dictionary indices and int32 index columns (``artifact``).
MAX_SLICE_CELLS = 2**31 - 1

NEIGHBOURING = "substitution: replace all data of one privacy unit"


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
class Budget:
    """The privacy budget of one release, resolved from the user's arguments.

    Attributes
    ----------
    mechanism : {"gaussian", "laplace"}
    rho : float
        zCDP parameter of the release. Gaussian: the budget; Laplace: eps^2/2
        (pure eps-DP implies (eps^2/2)-zCDP, Bun & Steinke 2016 Prop. 1.4),
        the amount charged to the ledger.
    epsilon : float or None
        Pure-DP epsilon (Laplace only).
    requested : dict
        The arguments as given (rho, or epsilon and delta).
    """

    mechanism: str
    rho: float
    epsilon: float | None
    requested: dict


def _positive(name: str, v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise UsageError(f"`{name}` must be a number > 0. Found {v!r}.") from None
    if not (math.isfinite(x) and x > 0):
        raise UsageError(f"`{name}` must be a finite number > 0. Found {v!r}.")
    if x < sys.float_info.min:  # subnormal: no usable noise scale, and the ledger refuses it
        raise UsageError(f"`{name}` must be at least {sys.float_info.min:.6g} (a normal float). Found {v!r}.")
    return x


def check_reportable(rho: float, delta: float, name: str = "rho") -> None:
    """Refuse, before any work, a zCDP budget whose (epsilon, delta) statement is epsilon = 0.

    At a tiny rho (about 3e-12 and below at delta = 1e-6) the tight conversion
    gives epsilon = 0: the Gaussian noise is so wide that every count drowns,
    and the manifest has no positive epsilon to state.

    Raises
    ------
    UsageError
        The conversion of ``rho`` at ``delta`` gives epsilon = 0.
    """
    from privaudit.privacy import accounting

    if not float(accounting.zcdp_to_dp(rho, delta)) > 0:
        raise UsageError(f"`{name}` = {num(rho)} is too small: at delta = {num(delta)} its epsilon is 0, the noise would "
                         "drown every count and nothing useful could be released. Give a larger budget.")


def resolve_budget(*, rho=None, epsilon=None, delta=None, mechanism="gaussian") -> Budget:
    """Check the budget arguments and turn them into a :class:`Budget`.

    Gaussian: ``rho`` alone, or ``epsilon`` and ``delta`` (converted by
    ``accounting.dp_to_zcdp``: the largest rho whose tight CKS conversion
    gives at most epsilon at delta). Laplace: ``epsilon`` alone (pure DP).

    Raises
    ------
    UsageError
        Missing, conflicting or out-of-range values (rho <= 0, delta not in
        (0, 1), ...).
    """
    if mechanism not in mechanisms.MECHANISMS:
        raise UsageError(f"`mechanism` must be one of {mechanisms.MECHANISMS}. Found {mechanism!r}.")
    if mechanism == "laplace":
        if rho is not None:
            raise UsageError("the Laplace mechanism is pure epsilon-DP: give --epsilon, not --rho.")
        if epsilon is None:
            raise UsageError("the Laplace mechanism needs --epsilon E.")
        if delta not in (None, 0, 0.0):
            raise UsageError(f"the Laplace mechanism is pure epsilon-DP (delta = 0): omit --delta. Found {delta!r}.")
        eps = _positive("epsilon", epsilon)
        return Budget("laplace", eps * eps / 2.0, eps, {"epsilon": eps})
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise UsageError("give either --rho R or --epsilon E --delta D, not both.")
        r = _positive("rho", rho)
        check_reportable(r, DEFAULT_REPORT_DELTA)
        return Budget("gaussian", r, None, {"rho": r})
    if epsilon is None or delta is None:
        raise UsageError("give a budget: --rho R, or --epsilon E with --delta D.")
    eps = _positive("epsilon", epsilon)
    d = _positive("delta", delta)
    if d >= 1:
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    from privaudit.privacy import accounting

    r = float(accounting.dp_to_zcdp(eps, d))
    check_reportable(r, d, "rho converted from epsilon")
    return Budget("gaussian", r, None, {"epsilon": eps, "delta": d})


@dataclass(frozen=True)
class ReleaseInfo:
    """What :func:`release_logs` did.

    Attributes
    ----------
    out : Path
        The release folder.
    manifest : dict
        Its manifest (public).
    local_log : Path
        The local, NOT-for-release log of bounding facts next to ``out``.
    bounding : BoundingReport
        PRIVATE counts of what bounding changed (for the data holder only).
    timings : dict[str, float]
        Wall seconds per stage: validate, read_count, noise, write (write
        overlaps the noise of the next h), total; and CPU seconds per stage
        under ``<stage>_cpu`` (process CPU for validate and read_count, the
        stage's own thread for noise and write).
    """

    out: Path
    manifest: dict
    local_log: Path
    bounding: BoundingReport = field(repr=False)
    timings: dict = field(default_factory=dict, repr=False)


def local_log_path(out: Path) -> Path:
    """``<out>.local-log.json``: beside the release folder, never inside it."""
    out = Path(out)
    return out.with_name(out.name + ".local-log.json")


def _families(spec: DomainSpec) -> list[str]:
    return ["visits", "transitions"] + ([] if spec.public_reward is not None else ["rewards"])


def plan_noise(spec: DomainSpec, budget: Budget, stationary: bool, noise: str) -> dict:
    """Per-family sensitivity, noise scale and budget share, in stored value units.

    ``accounting.split_budget`` gives one noise scale (sigma or b, in natural
    units: counts, or the [0, 1]-scaled reward) from the families' combined
    sensitivity, and each family's share of the budget. Rewards are stored in
    units of 1/q, so their sensitivity and scale are multiplied by
    the quantum q (:func:`reward_quantum`); the ratio sensitivity/scale, hence the privacy cost, is
    unchanged.
    """
    from privaudit.privacy import accounting

    sens = [sensitivity.count_sensitivity(spec.H, spec.max_episodes_per_unit, stationary, f)
            for f in _families(spec)]
    total = budget.rho if budget.mechanism == "gaussian" else budget.epsilon
    split = accounting.split_budget(total, sens, mechanism=budget.mechanism)
    key = "rho" if budget.mechanism == "gaussian" else "epsilon"
    q = reward_quantum(split.scale, budget.mechanism, noise)
    plan = {}
    for s in sens:
        unit = q if s.family == "rewards" else 1
        plan[s.family] = dict(l1=s.l1 * unit, l2=s.l2 * unit, scale=split.scale * unit,
                              name="sigma" if budget.mechanism == "gaussian" else "laplace_b",
                              budget={key: split.shares[s.family]}, quantum=unit)
    return plan


def reward_quantum(scale: float, mechanism: str, noise: str) -> int:
    """Reward sums are stored in units of 1/q of the scaled reward; q from public facts only.

    q = REWARD_QUANTUM, except for exact discrete Gaussian noise, whose sampler
    is limited in sigma: then the largest power of 10 <= REWARD_QUANTUM with
    q * sigma <= 1e4 (at least 1). Rounding each row's reward to 1/q biases a
    sum of n rewards by at most n / (2q).
    """
    q = REWARD_QUANTUM
    if noise == "exact" and mechanism == "gaussian":
        while q > 1 and q * scale > _EXACT_SIGMA_LIMIT:
            q //= 10
    return q


def _guarantee(budget: Budget, noise: str) -> dict:
    from privaudit.privacy import accounting

    sampler = samplers.noise_statement(noise)
    if budget.mechanism == "laplace":
        return {"definition": "pure-DP", "rho": budget.rho, "epsilon": budget.epsilon, "delta": 0.0,
                "conversion": "none: pure epsilon-DP (implies rho = epsilon^2/2 zCDP, charged to the ledger)",
                "requested": budget.requested, "ledger_charge_rho": budget.rho, "sampler": sampler}
    delta = budget.requested.get("delta", DEFAULT_REPORT_DELTA)
    return {"definition": "zCDP", "rho": budget.rho,
            "epsilon": float(accounting.zcdp_to_dp(budget.rho, delta)), "delta": delta,
            "conversion": "Canonne-Kamath-Steinke 2020 tight zCDP -> (epsilon, delta) conversion"
                          + ("" if "delta" in budget.requested else
                             f" at the default reporting delta {DEFAULT_REPORT_DELTA:g}"),
            "epsilon_simple": float(accounting.zcdp_to_dp_simple(budget.rho, delta)),
            "requested": budget.requested, "ledger_charge_rho": budget.rho, "sampler": sampler}


def build_manifest(spec: DomainSpec, budget: Budget, plan: dict, *, stationary: bool, noise: str,
                   seeded: bool) -> dict:
    """The release's ``manifest.json`` document (schema ``release_manifest``).

    Built from public facts only: the spec, the budget, the noise plan of
    :func:`plan_noise` and the modes. ``seeded`` records the rng mode
    ``seeded-insecure`` — never the seed itself. Used by ``release_logs`` and
    by the auditor's release adapter (so both describe the same mechanism).
    """
    H, S, A = spec.H, spec.S, spec.A
    lead = [] if stationary else ["h"]
    shape_sa = [S, A] if stationary else [H, S, A]
    fam_layout = {
        "visits": (lead + ["state", "action", "value"], shape_sa),
        "transitions": (lead + ["state", "action", "next_state", "value"], shape_sa + [S]),
        "rewards": (lead + ["state", "action", "value"], shape_sa),
    }
    families = {}
    for f, p in plan.items():
        cols, shape = fam_layout[f]
        families[f] = {"file": FILES[f], "columns": cols, "shape": shape,
                       "value_unit": 1.0 / p["quantum"],
                       "l1_sensitivity": p["l1"], "l2_sensitivity": p["l2"],
                       "noise_scale": p["scale"], "noise_scale_name": p["name"], "budget": p["budget"]}
    m = {
        "format_version": FORMAT_VERSION,
        "kind": "privaudit-release",
        "software": {"name": "privaudit", "version": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "spec_hash": spec.hash(),
        "dataset_id": spec.dataset_id,
        "domain": {"H": H, "S": S, "A": A, "stationary": stationary,
                   "terminal_states": list(spec.terminal_states), "reward_range": list(spec.reward_range)},
        "privacy_unit": {"column": spec.unit_column or "episode_id", "file_column": spec.unit_file_column,
                         "max_episodes": spec.max_episodes_per_unit},
        "neighbouring": NEIGHBOURING,
        "bounding": {
            "episodes_per_unit": f"at most k={spec.max_episodes_per_unit} episodes per unit: the k with the "
                                 "smallest (hash(episode_id), episode_id) inside the unit",
            "steps": f"rows with step h >= H={H} dropped (h is 0-based)",
            "rewards": f"clipped into {list(spec.reward_range)} and scaled to [0, 1]"
                       + ("" if spec.public_reward is not None else
                          f"; rounded to a multiple of 1/{plan['rewards']['quantum']} per row before summation"),
            "terminal": "rows whose state is terminal are not counted; transitions into a terminal state are",
        },
        "mechanism": budget.mechanism,
        "noise": noise,
        "rng": "seeded-insecure" if seeded else "secure",
        "families": families,
        "guarantee": _guarantee(budget, noise),
        "budget_split": ("one noise scale for all families from their combined sensitivity "
                         + ("(L2 in quadrature); family rho_f = l2_f^2 / (2 sigma^2)"
                            if budget.mechanism == "gaussian" else "(L1 summed); family eps_f = l1_f / b")
                         + "; reward sensitivities and scales are in stored units (x reward_quantum)"),
        "values": "noisy integer counts (value * value_unit), every cell of the declared domain, "
                  "before any clipping at 0 (clipping and projection are the learner's post-processing)",
        "public_reward": spec.public_reward,
    }
    if "rewards" in plan:
        m["reward_quantum"] = plan["rewards"]["quantum"]
    validate_or_raise(m, "release_manifest", PrivauditError, "release manifest (internal error)")
    return m


def release_logs(logs, spec, *, rho: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, mechanism: str = "gaussian", stationary: bool = False,
                 noise: str = "exact", out, ledger=None, seed: int | None = None,
                 echo=None, run: str | None = None, run_output=None) -> ReleaseInfo:
    """Release noisy visit, transition (and reward-sum) counts of tabular logs.

    Parameters
    ----------
    logs : str, Path or PreparedLogs
        A Parquet file or folder of parts (``privaudit.data.io.scan_logs``),
        prepared here once the arguments, size and budget have passed; or logs
        the caller already prepared under ``spec``
        (``privaudit.data.prepare.prepare_logs``: the pipeline's single pass).
    spec : DomainSpec, str or Path
        The public domain spec (or its file).
    rho : float, optional
        zCDP budget (Gaussian).
    epsilon, delta : float, optional
        (epsilon, delta)-DP target (Gaussian: converted to rho), or pure
        epsilon (Laplace, no delta).
    mechanism : {"gaussian", "laplace"}
    stationary : bool
        Pool counts over h (shapes (S, A), (S, A, S); sensitivities change:
        ``privaudit.privacy.sensitivity``).
    noise : {"exact"}
        Exact discrete Gaussian / discrete Laplace samplers
        (``privaudit.privacy.samplers``; the manifest's ``guarantee.sampler``
        states total variation 0). ``"rounded"`` (numpy's float samplers,
        rounded) is refused: their output law is not certified, so no exact
        guarantee could be stated (docs/privacy.md, "Noise modes").
    out : str or Path
        Release folder to create (must not exist).
    ledger : str or Path, optional
        Budget ledger: checked before anything is read, charged on success.
    seed : int, optional
        For tests only: rng mode ``seeded-insecure`` (the value is never
        written). None draws OS entropy.
    echo : callable, optional
        ``echo(text)`` for messages to the data holder (stderr in the CLI).
    run : str, optional
        Identifier of the run, recorded in the ledger entry (default: a new
        random one).
    run_output : str or Path, optional
        The output the ledger entry names (default ``out``; the pipeline
        passes its own folder).

    Notes
    -----
    ``out`` is locked for the whole call (:func:`privaudit.io_utils.output_lock`):
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
        large for this machine (:func:`check_release_size`, before any row is read).
    SpecError
        Missing or invalid spec.
    BudgetExceededError
        The ledger refuses the release (before any noise is drawn).
    ArtifactError
        A corrupt ledger (every entry is validated on each read), before any
        row is read or noise drawn.
    LogReadError, ValidationFailed
        Unreadable logs, or rules broken that bounding cannot repair.

    References
    ----------
    Qiao & Wang, Offline RL with DP (seed 000), eq. (1) and Thm 3.3;
    ALGORITHMS.md 1.2 (steps 2-3), 1.3, 1.4.
    """
    if noise == "rounded":
        raise UsageError("noise='rounded' (numpy's float samplers, rounded) is no longer used for releases: "
                         "their output law is not certified (numpy's Laplace cannot draw beyond 36.04 b, its "
                         "normal is a float ziggurat), so the stated guarantee would be stronger than what holds. "
                         "Use noise='exact' (the default): exact discrete samplers, as fast.")
    out = Path(out)
    with output_lock(out, "out") as stale:
        if stale and echo is not None:
            echo(f"removed {len(stale)} stale temporary folder(s) of an interrupted run: "
                 + ", ".join(str(p) for p in stale))
        return _release_locked(logs, spec, rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism,
                               stationary=stationary, noise=noise, out=out, ledger=ledger, seed=seed, echo=echo,
                               run=run or new_run_id(), run_output=out if run_output is None else run_output)


def _release_locked(logs, spec, *, rho, epsilon, delta, mechanism, stationary, noise, out, ledger, seed, echo,
                    run, run_output) -> ReleaseInfo:
    """The body of :func:`release_logs`, under the output lock."""
    t_start = time.perf_counter()
    budget = resolve_budget(rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism)
    if noise not in mechanisms.NOISE_MODES:
        raise UsageError(f"`noise` must be one of {mechanisms.NOISE_MODES}. Found {noise!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise UsageError(f"`seed` must be a non-negative integer. Found {seed!r}.")
    spec = spec if isinstance(spec, DomainSpec) else load_spec(spec)
    out = Path(out)
    if out.exists():
        raise UsageError(f"{out} already exists; choose another --out or remove it.")
    prepared = logs if isinstance(logs, PreparedLogs) else None
    if prepared is not None:
        prepared.check_spec(spec)
    logs = prepared.path if prepared is not None else Path(logs)
    plan = plan_noise(spec, budget, stationary, noise)  # may raise on bad H, k
    check_release_size(spec, stationary=stationary, n_sa_families=len(plan) - 1)  # before any row is read
    if ledger is not None:
        from privaudit.privacy import ledger as ledger_mod

        # exact charge: rho, or eps^2/2 as an exact fraction for pure DP
        charge_rho = budget.rho if budget.mechanism == "gaussian" else ledger_mod.rho_of_pure_dp(budget.epsilon)
        ledger_mod.check_budget(Path(ledger), spec.dataset_id, charge_rho)
    manifest = build_manifest(spec, budget, plan, stationary=stationary, noise=noise, seeded=seed is not None)

    clock = _Clock()
    if prepared is None:
        with clock.stage("validate", cpu=time.process_time):  # validation and bounding: the first rows read
            prepared = prepare_logs(logs, spec)
    report = prepared.bounding
    with clock.stage("read_count", cpu=time.process_time):
        cols = [pl.col(c).cast(pl.Int32) for c in ("step", "state", "action", "next_state")]
        frame = collect_or_raise(prepared.bounded.select(cols + ([pl.col("reward")] if "rewards" in plan else [])),
                                 logs)
        exact = counts.sparse_counts(frame, spec, stationary=stationary, rewards="rewards" in plan,
                                     quantum=plan["rewards"]["quantum"] if "rewards" in plan else None)
        del frame
        visits = exact.visits()
        rewards = exact.rewards() if "rewards" in plan else None
        transitions = exact.iter_transitions()
    if echo is not None:
        echo(report.summary())

    rng = np.random.default_rng(seed)
    rng_visits, rng_trans, rng_rewards = rng.spawn(3)
    try:
        with atomic_dir(out) as tmp:
            with clock.stage("noise"):
                noisy_v = mechanisms.add_noise(visits, mechanism=budget.mechanism,
                                               scale=plan["visits"]["scale"], rng=rng_visits, noise=noise)
                noisy_r = (None if rewards is None else
                           mechanisms.add_noise(rewards, mechanism=budget.mechanism,
                                                scale=plan["rewards"]["scale"], rng=rng_rewards, noise=noise))
                del visits, rewards
            with clock.stage("write"):
                write_sa_table(tmp / FILES["visits"], noisy_v, stationary=stationary)
                if noisy_r is not None:
                    write_sa_table(tmp / FILES["rewards"], noisy_r, stationary=stationary)
            _write_transitions(tmp, spec, plan, budget, transitions, rng_trans, noise, stationary, clock)
            atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=2) + "\n")
            if ledger is not None:
                ledger_mod.charge(Path(ledger), spec.dataset_id, charge_rho,
                                  _ledger_description(Path(run_output), budget),
                                  run=run, output=run_output)
    finally:
        del exact, transitions
    log_path = local_log_path(out)
    atomic_write_text(log_path, json.dumps({
        "WARNING": "PRIVATE: facts about the private logs. Not part of the release; do not share.",
        "release": str(out), "created": manifest["created"], "spec_hash": manifest["spec_hash"],
        "logs": str(logs), "bounding": report.to_dict(),
    }, indent=2) + "\n")
    timings = clock.as_dict()
    timings["total"] = time.perf_counter() - t_start
    return ReleaseInfo(out=out, manifest=manifest, local_log=log_path, bounding=report, timings=timings)


def physical_memory_bytes() -> int | None:
    """The machine's physical memory (``SC_PAGE_SIZE * SC_PHYS_PAGES``), None where unknown."""
    try:
        n = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return n if n > 0 else None


def release_memory_estimate(spec: DomainSpec, *, stationary: bool, n_sa_families: int = 2) -> dict:
    """Estimated peak working memory of :func:`release_logs` from the public domain alone.

    Parameters
    ----------
    spec : DomainSpec
    stationary : bool
    n_sa_families : int
        (H, S, A) tables noised at once: visits, and rewards when private.

    Returns
    -------
    dict
        ``slice_cells`` = S*A*S (cells of one transition slice), ``bytes`` =
        MEMORY_PER_SLICE_BYTE x 8 x (S*A*S + n_sa_families x H*S*A) (the
        (H, S, A) tables go through the same noise path; H is 1 when
        stationary). Rows of the logs add a sparse table on top (at most one
        cell per row), not counted here.
    """
    S, A = int(spec.S), int(spec.A)
    h = 1 if stationary else int(spec.H)
    cells = S * A * S
    return {"slice_cells": cells, "bytes": MEMORY_PER_SLICE_BYTE * 8 * (cells + n_sa_families * h * S * A)}


def check_release_size(spec: DomainSpec, *, stationary: bool, n_sa_families: int = 2) -> dict:
    """Refuse a domain whose release cannot run on this machine, before any row is read.

    Raises
    ------
    UsageError
        One (S, A, S) slice holds more than MAX_SLICE_CELLS cells, or the
        estimate of :func:`release_memory_estimate` exceeds the physical
        memory (:func:`physical_memory_bytes`). The message names both figures.
    """
    est = release_memory_estimate(spec, stationary=stationary, n_sa_families=n_sa_families)
    S, A = spec.S, spec.A
    if est["slice_cells"] > MAX_SLICE_CELLS:
        raise UsageError(
            f"the domain is too large to release: one transition slice n_h(s, a, s') has S*A*S = "
            f"{S}*{A}*{S} = {est['slice_cells']:,} cells, above the {MAX_SLICE_CELLS:,} that one Parquet "
            f"row group with int32 indexing holds. Coarsen the state space (n_states) in the spec.")
    phys = physical_memory_bytes()
    if phys is not None and est["bytes"] > phys:
        raise UsageError(
            f"the domain is too large to release on this machine: the estimated peak working memory is "
            f"{est['bytes'] / 2**30:,.1f} GiB ({MEMORY_PER_SLICE_BYTE} x one dense int64 (S, A, S) slice of "
            f"{S}*{A}*{S} cells, plus the (H, S, A) tables), above the physical memory of "
            f"{phys / 2**30:,.1f} GiB. Coarsen the state space (n_states) in the spec, or use a larger machine.")
    return est


def _ledger_description(out: Path, budget: Budget) -> str:
    what = (f"rho={num(budget.rho, 12)}" if budget.mechanism == "gaussian"
            else f"laplace epsilon={num(budget.epsilon, 12)} (charged rho=eps^2/2)")
    return f"release {out.name}: {budget.mechanism}, {what}"


def _write_transitions(tmp: Path, spec: DomainSpec, plan: dict, budget: Budget, transitions, rng,
                       noise: str, stationary: bool, clock: _Clock) -> None:
    """Noise and write the transition slices; writing slice h overlaps the noise of slice h+1.

    The write of each slice runs in one background thread (pyarrow releases
    the GIL); at most two noisy slices are in memory at once. Stage times go
    to ``clock`` (the writer thread's CPU time under "write").
    """
    import pyarrow as pa

    scale = plan["transitions"]["scale"]
    # int32 holds |value| < 2^31; counts are <= rows and the noise is tiny next to that,
    # but a pathological scale (epsilon ~ 1e-8) would not fit: then use int64.
    big = scale * 50 > 2**30
    writer = TransitionWriter(tmp / FILES["transitions"], spec.H, spec.S, spec.A, stationary=stationary,
                              value_type=pa.int64() if big else pa.int32())

    def timed_write(h, values):
        with clock.stage("write"):
            writer.write(h, values)

    pending = None
    with ThreadPoolExecutor(max_workers=1) as pool, \
            progress.bar(1 if stationary else spec.H, "release: noisy transition slices", "step") as shown:
        try:
            while True:
                with clock.stage("read_count"):  # scatter of the next exact h-slice
                    item = next(transitions, None)
                if item is None:
                    break
                h, exact = item
                with clock.stage("noise"):
                    noisy = mechanisms.add_noise(exact, mechanism=budget.mechanism, scale=scale, rng=rng,
                                                 noise=noise)
                del exact
                if pending is not None:
                    pending.result()
                pending = pool.submit(timed_write, h, noisy)
                shown.update(1)
            if pending is not None:
                pending.result()
                pending = None
        finally:
            if pending is not None:
                pending.exception()
            writer.close()
