"""DP-PBB on logs: the whole run of ``DPPBB.train_on_logs`` (plan and ledger check from public facts,
then prepare, count, noise, learn, charge); the learner itself is :mod:`privaudit.learners.tabular.dp_pbb`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.core.outputs import new_run_id
from privaudit.data.engines import ENGINES, prepare_on
from privaudit.learners.options import BudgetRequest, RunContext
from privaudit.learners.tabular.pbb_counts import capped_counts_from_logs
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.budget import Budget, accepted_budgets
from privaudit.privacy.noise import GAUSSIAN

__all__ = ["PBBRun", "train_on_logs"]


@dataclass(frozen=True)
class PBBRun:
    """What :func:`train_on_logs` returns: the fitted learner (its ``policy_``, ``event_``,
    ``certified_value()``) and the per-cell cap it used."""

    learner: object
    max_per_cell: int



def train_on_logs(cls: type, logs, spec, *, stationary: bool = True, budget: BudgetRequest | Budget | None = None,
              seed: int | None = None, params: dict | None = None, max_per_cell: int | None = None,
              context: RunContext | None = None) -> PBBRun:
    """DP-PBB on logs: plan (and check the ledger) from public facts, then count, noise, learn, charge.

    Parameters
    ----------
    cls : type
        The learner class (:class:`privaudit.learners.tabular.dp_pbb.DPPBB`, whose classmethod
        ``train_on_logs`` this is): its ``plan_for`` and ``algorithm``.
    logs : path, pyspark DataFrame, PreparedLogs or SparkPreparedLogs
        Logs to prepare here with ``context.engine`` (polars, or Spark:
        ``privaudit.data.engines.prepare_on``), or logs a caller prepared.
        On Spark, the per-unit per-cell capped transition counts and the
        start counts are aggregated by Spark and only the observed cells
        reach the driver, one step h at a time
        (:func:`privaudit.learners.tabular.pbb_counts.capped_counts_from_logs`):
        the same :class:`CappedCounts` as polars, hence the same policy.
    spec : DomainSpec
        Must declare a public reward; its ``return_bound`` (if any) bounds the backed-up values.
    stationary : bool
        Pool over h (the MDP is time-homogeneous).
    budget : BudgetRequest or Budget
        The learner's whole budget (Gaussian): as given, or already resolved.
    seed : int, optional
        TESTS ONLY: seeds the noise (policy marked not private, rng seeded-insecure).
    params : dict, optional
        Constructor parameters.
    max_per_cell : int, optional
        c (default :data:`MAX_PER_CELL_DEFAULT`).
    context : RunContext, optional
        The ledger (checked before any row is read; charged with the learner's event once it is
        fitted), the run and output named in its entry, the messages.

    Returns
    -------
    PBBRun

    Raises
    ------
    UsageError
        No budget, a Laplace request, no public reward, bad parameters.
    BudgetExceededError
        The ledger's remaining budget is below rho (before any row is read).
    RepairsRefused
        Logs given as a path whose bounding changes more than ``context.repairs`` allows
        (``privaudit.data.repairs``), before any noise is drawn.
    EngineError
        With Spark: Spark failed (one line); nothing was noised or charged.
    """
    ctx = context or RunContext()
    if budget is None or (isinstance(budget, BudgetRequest) and not budget.given):
        raise UsageError(f"{cls.algorithm} releases private Bellman backups: give a budget: "
                         f"{accepted_budgets((GAUSSIAN.name,))}.")
    if isinstance(budget, BudgetRequest):
        budget = budget.resolve(families=(GAUSSIAN.name,))  # zCDP only: `epsilon` alone is refused
    learner, plan, c = cls.plan_for(spec, budget, stationary=stationary, params=params,
                                    max_per_cell=max_per_cell)
    reward = spec.public_reward_scaled()
    rb = spec.return_bound[1] if getattr(spec, "return_bound", None) is not None else None
    if ctx.ledger is not None:  # before any row is read or noise drawn
        ledger_mod.check_event(Path(ctx.ledger), spec.dataset_id, plan.event, budget)
    if getattr(logs, "engine", None) in ENGINES:  # prepared by the caller (polars or Spark)
        prepared = logs
        prepared.check_spec(spec)
        counts = capped_counts_from_logs(prepared, spec, stationary=stationary, max_per_cell=c)
    else:  # validated, bounded and checked against the data holder's repair limit here, by ctx.engine
        prepared = prepare_on(ctx.engine, logs, spec, spark=ctx.spark, repairs=ctx.repairs)
        try:
            ctx.say(prepared.bounding.summary())
            counts = capped_counts_from_logs(prepared, spec, stationary=stationary, max_per_cell=c)
        finally:
            prepared.close()  # Spark: the cached rows dropped; only the exact counts are needed now
    ctx.say(f"{cls.algorithm}: private Bellman backups of {prepared.path} ({len(plan.backups)} backups, c={c} per "
            f"{'(s, a)' if stationary else '(h, s, a)'} cell, {budget.text}): "
            "this spends privacy budget."
            + (" Counts pooled over h assume time-homogeneous dynamics: the certified value holds only then "
               "(--per-step otherwise)." if stationary else ""))
    learner.fit(counts, reward, terminal_states=spec.terminal_states, reward_range=spec.reward_range,
                return_bound=rb, budget=budget, spec_hash=spec.hash(), rng=np.random.default_rng(seed),
                seeded=seed is not None)
    if ctx.ledger is not None:
        ledger_mod.charge_event(Path(ctx.ledger), spec.dataset_id, learner.event_,
                                f"train {cls.algorithm}: gaussian, rho={budget.rho!r} "
                                f"({len(plan.backups)} private backups)",
                                budget, run=ctx.run or new_run_id(), output=ctx.output)
    return PBBRun(learner, c)
