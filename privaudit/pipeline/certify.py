"""Held-out certification of the pipeline's learned policies (``privaudit pipeline --hold-out``).

With ``PipelineConfig.hold_out`` the validated logs are split by a public
hash of the unit id (``ope.split``): every stage before this one (release,
behaviour value, learners) sees the training part only, and this stage
evaluates each learned tabular policy on the held-out part with
``ope.evaluate.evaluate_policy_on_logs``: a DP estimate, a one-sided lower
bound and a two-sided interval (docs/certificates.md). The parts hold
disjoint units, so the held-out evaluations compose in parallel with
everything trained on the other part; privaudit's ledger still charges them
as their own entries (the conservative, sequential reading). The budget of
this stage is the pipeline's whole budget, split evenly over the policies
(sequential composition within the held-out part).

"Improvement over the clinicians certified" is said only when a policy's
lower bound is above the upper end of the clinicians' DP interval (the
behaviour-value release, on the training part).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.prepare import PreparedLogs
from privaudit.ope.evaluate import (COVERAGE_DEFAULT, UNITS_PER_COVERAGE, LedgerEntry, PolicyEvaluation,
                                   coverage_rule, evaluate_policy_on_logs)
from privaudit.ope.split import HELD_OUT, HOLD_OUT_DEFAULT, SPLIT_HASH_SEED, part_of
from privaudit.privacy.budget import Budget
from privaudit.privacy.ledger import charge_of
from privaudit.release.behaviour_value import estimate_behaviour_value

__all__ = ["IMPROVEMENT", "NO_IMPROVEMENT", "CERTIFIED_POLICIES", "UNITS_PER_COVERAGE_OF", "split_held_out", "held_out_units_estimate",
           "certification_budgets",
           "certification_charge", "held_out_note", "improvement_certified", "certify_policies", "certification_lines", "certify_stage",
           "summary_entry"]

#: What is printed when a policy's lower bound is above the clinicians' upper bound.
IMPROVEMENT = "improvement over the clinicians certified"
#: What is printed otherwise.
NO_IMPROVEMENT = "no improvement certified"
#: The tabular policies the pipeline certifies (DP-VAPVI's table may be a placeholder).
CERTIFIED_POLICIES = ("dp-pbb", "dp-apvi")
#: The coverage rule's trusted importance ratio n / m per learner (public constants; the others use
#: ``ope.evaluate.UNITS_PER_COVERAGE`` = 50). DP-APVI's policy stays on the clinicians' support (its
#: pessimism falls back to the most-visited action), so few cells are capped and a larger m pays: read off
#: ICU-Sepsis seed 2028 (1M stays, epsilon 5; docs/results.md), like the rule's other constants.
UNITS_PER_COVERAGE_OF = {"dp-apvi": 20.0}


def split_held_out(prepared: PreparedLogs, fraction: float = HOLD_OUT_DEFAULT) -> tuple[PreparedLogs, PreparedLogs]:
    """(training part, held-out part) of prepared logs, by ``ope.split.part_of`` on the unit column.

    ``fraction`` (public, in (0, 1)) of the units are held out. ``prepared`` is polars'
    ``PreparedLogs`` or the Spark engine's prepared logs (any frozen dataclass whose ``bounded`` is a
    pyspark DataFrame): Spark then splits on the cluster, by the same hash.
    """
    if getattr(prepared, "bounded", None) is None:  # a Spark run given the logs as read, not as prepared
        raise UsageError("`hold_out` with `engine` spark needs the Spark engine's prepared logs (read, checked and "
                         "bounded once before the stages); these logs were passed as read. Nothing was charged.")
    return _part(prepared, 1 - HELD_OUT, fraction), _part(prepared, HELD_OUT, fraction)


def _part(prepared, part: int, fraction: float):
    """One side of the split: through the prepared logs' own ``restricted`` (which filters their parts
    too, so no derived frame keeps the other side's units), else (a plain frozen dataclass holding a
    frame) ``replace``."""
    def keep(frame):
        return part_of(frame, part, fraction)

    if hasattr(prepared, "restricted"):
        return prepared.restricted(keep)
    return replace(prepared, bounded=keep(prepared.bounded))


def held_out_units_estimate(value_stats, fraction: float) -> float | None:
    """Estimated number of held-out units from the training part's DP episode count (None without it).

    N'/k (at least that many training units hold N' episodes) times fraction/(1 - fraction): a
    post-processing of a release of the training part only, so it does not depend on the held-out stays.
    """
    if value_stats is None:
        return None
    return max(float(value_stats.episodes), 0.0) / int(value_stats.max_episodes) * fraction / (1.0 - fraction)


def certification_budgets(budget: Budget, names) -> dict:
    """The whole budget split evenly over the certified policies ``names`` (one part each)."""
    names = list(names)
    if len(names) == 1:
        return {names[0]: budget}
    share = 1.0 / len(names)
    return budget.split({n: share for n in names})


def certification_charge(spec: DomainSpec, budget: Budget, names, done=()) -> Fraction:
    """What the ledger will be charged for the held-out evaluations (planned, nothing read); ``done``: the
    policies whose evaluation a stopped run already charged (not charged again)."""
    total = Fraction(0)
    for name, part in certification_budgets(budget, names).items():
        if name in done:
            continue
        total += Fraction(charge_of(PolicyEvaluation.plan(spec, part, COVERAGE_DEFAULT).event, part))
    return total


def held_out_note(parts_charge, held) -> str:
    """Why a ``hold_out`` run asks the ledger for more than its budget (the message of a refusal)."""
    return (f"With `hold_out` the ledger is asked for the run's parts ({float(parts_charge):.6g}) plus the "
            f"held-out certification ({float(held):.6g}), each charged as its own entry: the ledger adds them. "
            "The two touch disjoint privacy units, so by parallel composition the run's guarantee is the budget "
            "alone (summary.json states it); the ledger adds them anyway, which stays valid even if a "
            "substitution could move a unit between the parts (docs/certificates.md, 'Held-out certification'). "
            "Give the ledger twice the budget, or run with half the budget.")


def improvement_certified(lower_bound: float, clinicians_interval) -> bool:
    """True only when the policy's lower bound is above the upper end of the clinicians' interval."""
    return clinicians_interval is not None and float(lower_bound) > float(clinicians_interval[1])


def certify_policies(held_out: PreparedLogs, spec: DomainSpec, tables: dict, budget: Budget, *,
                     ledger=None, seed: int | None = None, clinicians_interval=None,
                     units: float | None = None, done: dict | None = None, run: str | None = None,
                     output=None) -> dict:
    """Evaluate each policy table on the held-out part; the verdict against the clinicians' interval.

    Parameters
    ----------
    held_out : PreparedLogs
        The held-out part (:func:`split_held_out`).
    spec : DomainSpec
    tables : dict[str, ndarray]
        Policy name -> pi_h(a|s), shape (H, S, A), learned on the training part only.
    budget : Budget
        The budget of this stage (:func:`certification_budgets` splits it).
    ledger : path, optional
        Charged once per policy.
    seed : int, optional
        Tests only.
    clinicians_interval : [lo, hi] or None
        The clinicians' DP interval (declared units).
    units : float, optional
        Estimated number of held-out units, independent of their stays
        (:func:`held_out_units_estimate`): sets each evaluation's coverage
        scale by ``ope.evaluate.coverage_rule``.
    done : dict, optional
        Policy -> its entry from an earlier, stopped run (charged then): reused, not evaluated or charged
        again. Each new entry is added to it as soon as its evaluation is charged and done, so that a run
        stopped in the middle keeps what it paid for (``pipeline.resume``).
    run, output : optional
        The pipeline's run id and output folder, written in each ledger entry.

    Returns
    -------
    dict
        Per policy: ``estimate``, ``lower_bound``, ``interval``, ``confidence``,
        ``coverage``, ``guarantee`` (of that evaluation) and
        ``improvement_certified`` (:func:`improvement_certified`).
    """
    done = {} if done is None else done
    out = {}
    for name, part in certification_budgets(budget, tables).items():
        if name in done:
            out[name] = done[name]
            continue
        m = coverage_rule(spec, part, units, units_per_coverage=UNITS_PER_COVERAGE_OF.get(name, UNITS_PER_COVERAGE))
        entry = LedgerEntry(ledger, f"pipeline, held-out certification of {name}", run=run, output=output)
        res = evaluate_policy_on_logs(held_out, spec, tables[name], budget=part, ledger=entry, seed=seed,
                                      coverage=m)
        out[name] = {k: res[k] for k in ("estimate", "lower_bound", "interval", "confidence", "coverage",
                                         "guarantee")}
        out[name]["improvement_certified"] = improvement_certified(res["lower_bound"], clinicians_interval)
        done[name] = out[name]
    return out


#: When the stated guarantee of a --hold-out run holds (docs/certificates.md, "Held-out certification").
PARALLEL_CONDITION = ("parallel: the held-out evaluations and everything else run on disjoint privacy units, so the "
                      "run's guarantee is the larger part's, for substitution neighbours that keep the unit's id (its "
                      "id decides its part); if a replaced unit may change id, the parts add up")


def certification_lines(certification: dict, clinicians_interval, clinicians_confidence=None) -> list[str]:
    """One line per policy: certified value (lower bound), interval, and the verdict; then the clinicians'."""
    lines = []
    for name, c in certification.items():
        lo, hi = c["interval"]
        verdict = IMPROVEMENT if c["improvement_certified"] else NO_IMPROVEMENT
        if c["improvement_certified"] and clinicians_confidence is not None:  # a union bound over the two claims
            joint = 1.0 - (1.0 - float(c["confidence"])) - (1.0 - float(clinicians_confidence))
            verdict += f" (with probability >= {100 * joint:g}%: the lower bound and the clinicians' interval together)"
        lines.append(f"{name}: certified value {c['lower_bound']:.4f} (held-out lower bound, "
                     f"{100 * c['confidence']:g}%), interval [{lo:.4f}, {hi:.4f}]; {verdict}")
    if clinicians_interval is not None:
        level = "" if clinicians_confidence is None else f" (two-sided, {100 * clinicians_confidence:g}%)"
        lines.append(f"clinicians: DP interval [{clinicians_interval[0]:.4f}, {clinicians_interval[1]:.4f}]{level}")
    else:
        lines.append("clinicians: no DP interval (value share 0): no improvement can be certified")
    lines.append("composition: " + PARALLEL_CONDITION)
    return lines


def certify_stage(config, state) -> None:
    """The pipeline stage: certify ``state.policies`` on ``state.held_out`` (nothing without ``hold_out``).

    Fills ``state.certification``: the :func:`summary_entry` of the run.
    Each evaluation is charged to the ledger (if any) as its own entry.
    """
    if state.held_out is None:
        return
    spec = state.plan.spec
    tables = {n: state.policies[n].table for n in CERTIFIED_POLICIES if n in state.policies}
    clinicians = None if state.value_stats is None else estimate_behaviour_value(state.value_stats)["interval"]
    seed = None if config.seed is None else int(config.seed) + 1
    fraction = float(config.hold_out_fraction)
    results = certify_policies(state.held_out, spec, tables, state.plan.budget, ledger=config.ledger, seed=seed,
                               clinicians_interval=clinicians,
                               units=held_out_units_estimate(state.value_stats, fraction), done=state.certified,
                               run=state.run_id, output=state.out)
    state.certification = summary_entry(results, clinicians, fraction)


def summary_entry(results: dict, clinicians_interval, fraction: float = HOLD_OUT_DEFAULT) -> dict:
    """summary.json's ``held_out_certification``: the split rule, the composition, each policy, the clinicians."""
    return {"split": (f"privacy units by xxh64(unit id text, seed {SPLIT_HASH_SEED}): held out (certify) when its "
                      f"low 32 bits < {fraction:g} * 2^32, else train"),
            "hold_out_fraction": float(fraction),
            "composition": (PARALLEL_CONDITION + " (the ledger charges both parts, conservatively: what holds "
                            "without that condition)"),
            "clinicians_interval": None if clinicians_interval is None else [float(x) for x in clinicians_interval],
            "policies": results}
