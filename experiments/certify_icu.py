"""Held-out certified values of learned policies on ICU-Sepsis clinicians' logs, no MDP given (issue 28).

Reproduce::

    python experiments/certify_icu.py --sizes 200000 1000000 --epsilons 1 5 --hold-outs 0.5 0.3 \
        --failure-probs 0.05 1e-6 --seed 2029 --out experiments/results/certify_icu_rule_seed2029.json
    python experiments/certify_icu.py --sizes 1000000 200000 --epsilons 5 1 --hold-outs 0.2 0.3 \
        --failure-probs 1e-6 --learners dp-apvi-c2-0 dp-pbb --coverages 10000 --seed 2029 \
        --out experiments/results/certify_icu_apvi_seed2029.json
    python experiments/certify_icu.py --sizes 200000 --epsilons 5 1 --hold-outs 0.3 --failure-probs 0.05 1e-6 \
        --learners dp-pbb dp-apvi dp-apvi-c2-0 apvi apvi-hoeffding apvi-lower-order ve --seed 2032 \
        --out experiments/results/certify_icu_learners_200k_seed2032.json     # every learner (issue 28 item 6)

Protocol
--------
* Logs: ``n`` stays simulated with the clinicians' policy (``mdp.simulate``),
  one stay per privacy unit, written to Parquet and prepared (validated,
  bounded) once.
* Split: units by ``ope.split.unit_part`` (a public hash of the unit id and
  the public fraction f, ``--hold-outs``): part 0 trains, part 1 (held out,
  about f n units) certifies.
* At each (epsilon, delta = 1e-6): each learner of ``--learners`` trained on
  part 0 with the whole budget: DP-PBB (pooled counts, its defaults;
  ``--failure-probs`` adds more pessimistic alternatives, each its own run),
  and/or DP-APVI with C2 = 0 (``dp-apvi-c2-0``: a pooled count release of
  part 0, then DP-APVI without its privacy term, as ``pipeline --dp-apvi-c2 0``), DP-APVI with the paper's
  constants (``dp-apvi``), and the non-private learners (``apvi``, ``apvi-hoeffding``,
  ``apvi-lower-order``: APVI with 16 H iota / n, ``ve``) on part 0's exact pooled counts (no budget: only
  their certificate is private); on part 1, 3/4 of the budget to
  ``ope.evaluate`` (the policy's DP lower bound at 95% and its interval) and
  1/4 to the clinicians' DP value interval (``release.behaviour_value``).
  The parts hold disjoint units, so the run is (epsilon, delta)-DP by
  parallel composition (docs/certificates.md, "Held-out certification").
* The coverage scale m: ``ope.evaluate.coverage_rule`` from the evaluation's
  budget, the clinicians' DP episode count of part 1 (k = 1, released
  before the evaluation reads a stay) and the learner's public constant
  (``pipeline.certify.UNITS_PER_COVERAGE_OF``); ``--coverages`` adds fixed values of
  m for comparison (a choice among them after the fact would be a
  selection).
* The true values come from the MDP (exact backward induction).

Writes ``experiments/results/certify_icu.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import unit_column_of
from privaudit.data.prepare import prepare_logs
from privaudit.learners.options import BudgetRequest
from privaudit.learners.tabular.train import train_dp_pbb, train_from_logs
from privaudit.mdp.icu_sepsis import clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.mdp.tabular import evaluate_policy
from privaudit.ope.evaluate import UNITS_PER_COVERAGE, coverage_rule, evaluate_policy_on_logs
from privaudit.ope.split import HELD_OUT, in_part
from privaudit.pipeline.certify import UNITS_PER_COVERAGE_OF
from privaudit.privacy.budget import resolve_budget
from privaudit.release.behaviour_value import BehaviourValueRelease, estimate_behaviour_value


def run(sizes, epsilons, coverages, seed, out, failure_probs=(0.05,), hold_outs=(0.5,), learners=("dp-pbb",)):
    mdp = load_icu_sepsis()
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    clin = clinicians_policy()
    rows = []
    rng = np.random.default_rng(seed)
    for n in sizes:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = write_logs(simulate(mdp, clin, n, rng), Path(tmp) / "logs.parquet")
            prepared = prepare_logs(path, spec)
            unit = unit_column_of(prepared.bounded)
            print(f"n={n}: simulated and prepared in {time.perf_counter() - t0:.0f}s", flush=True)
            for f in hold_outs:
                train = replace(prepared, bounded=prepared.bounded.filter(in_part(unit, 1 - HELD_OUT, f))
                                .collect().lazy())
                held = replace(prepared, bounded=prepared.bounded.filter(in_part(unit, HELD_OUT, f)).collect().lazy())
                for eps in epsilons:
                    rows += _at_budget(mdp, spec, clin, train, held, n, f, eps, coverages, failure_probs, rng,
                                       learners)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print("| n | held out | eps | learner | m | true value | lower bound (95%) | interval "
          "| clinicians' DP interval | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {r['hold_out']:g} | {r['epsilon']} | {r['learner']} | {r['coverage']:,.0f}"
              f"{' (rule)' if r['coverage_rule'] else ''} | {r['true_value']:.3f} | "
              f"{r['lower_bound']:.3f} | [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}] | "
              f"[{r['clinicians_interval'][0]:.3f}, {r['clinicians_interval'][1]:.3f}] | "
              f"{r['gap_to_improvement']:.3f} |")


def _at_budget(mdp, spec, clin, train, held, n, f, eps, coverages, failure_probs, rng, learners=("dp-pbb",)):
    """The rows of one (size, hold-out fraction, epsilon): one policy per learner (DP-PBB: per failure_prob),
    each at the rule's m and each of ``coverages``."""
    rows = []
    budget = resolve_budget(epsilon=eps, delta=1e-6)
    parts = budget.split({"evaluate": 0.75, "clinicians": 0.25})
    bv = BehaviourValueRelease.plan(spec, parts["clinicians"])
    stats = bv.apply(held.bounded, rng=rng)
    clin_ci = estimate_behaviour_value(stats)
    for name, fp, pi in _policies(train, spec, budget, learners, failure_probs, rng):
        # the rule's m: from the clinicians' DP episode count of the held-out part (k = 1: units = episodes),
        # released before the evaluation reads any stay, and the learner's public constant
        rule_m = coverage_rule(spec, parts["evaluate"], units=stats.episodes,
                               units_per_coverage=UNITS_PER_COVERAGE_OF.get(name.split(" ")[0], UNITS_PER_COVERAGE))
        t1 = time.perf_counter()
        true = evaluate_policy(mdp, pi)
        for m in [rule_m] + [c for c in coverages if c]:
            res = evaluate_policy_on_logs(held, spec, pi, budget=parts["evaluate"], coverage=m,
                                          seed=int(rng.integers(2**31)))
            row = {"n": n, "epsilon": eps, "hold_out": f, "learner": name, "coverage": m,
                   "coverage_rule": m == rule_m, "failure_prob": fp, "true_value": true,
                   "estimate": res["estimate"], "lower_bound": res["lower_bound"],
                   "interval": res["interval"], "sampling_width": res["sampling_width"],
                   "noise_width": res["noise_width"], "absorbed_mass": res["absorbed_mass"],
                   "clinicians_interval": clin_ci["interval"], "clinicians_true": evaluate_policy(mdp, clin),
                   "gap_to_improvement": clin_ci["interval"][1] - res["lower_bound"],
                   "seconds": time.perf_counter() - t1}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _policies(train, spec, budget, learners, failure_probs, rng):
    """(name, failure_prob, pi) of each learner trained on the training part with the whole budget."""
    for name in learners:
        if name == "dp-pbb":
            for fp in failure_probs:
                pbb = train_dp_pbb(train, spec, stationary=True, budget=budget, seed=int(rng.integers(2**31)),
                                   params={"failure_prob": fp})
                yield f"dp-pbb fp={fp:g}", fp, pbb.learner.policy_.table
        elif name in _RELEASE_LEARNERS:  # DP-APVI on a count release of the training part
            with tempfile.TemporaryDirectory() as tmp:
                pol = train_from_logs(train, spec, algo="dp-apvi", stationary=True,
                                      budget=BudgetRequest(rho=budget.rho, delta=1e-6),
                                      release_out=Path(tmp) / "release", seed=int(rng.integers(2**31)),
                                      params=_RELEASE_LEARNERS[name])
            yield _NAMES[name], None, pol.table
        elif name in _EXACT_LEARNERS:  # not private: trained on the training part's exact counts
            algo, params = _EXACT_LEARNERS[name]
            yield _NAMES[name], None, train_from_logs(train, spec, algo=algo, stationary=True, params=params).table
        else:
            raise SystemExit(f"unknown learner {name!r}: one of {', '.join(LEARNERS)}")


#: DP-APVI variants: constructor parameters (a pooled count release of the training part first).
_RELEASE_LEARNERS = {"dp-apvi": None, "dp-apvi-c2-0": {"C2": 0.0}}
#: Non-private learners: (registry algo, parameters), on the training part's exact pooled counts.
_EXACT_LEARNERS = {"apvi": ("apvi", None), "apvi-hoeffding": ("apvi-hoeffding", None),
                   "apvi-lower-order": ("apvi", {"lower_order": True}), "ve": ("ve", None)}
_NAMES = {"dp-apvi": "dp-apvi", "dp-apvi-c2-0": "dp-apvi C2=0", "apvi": "apvi", "apvi-hoeffding": "apvi-hoeffding",
          "apvi-lower-order": "apvi+16Hι/n", "ve": "ve"}
LEARNERS = ["dp-pbb", *_RELEASE_LEARNERS, *_EXACT_LEARNERS]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0])
    p.add_argument("--coverages", type=float, nargs="*", default=[],
                   help="fixed coverage scales m reported next to the rule's (ope.evaluate.coverage_rule)")
    p.add_argument("--failure-probs", type=float, nargs="+", default=[0.05],
                   help="DP-PBB's failure_prob: smaller = more pessimistic = closer to the clinicians' support")
    p.add_argument("--hold-outs", type=float, nargs="+", default=[0.5],
                   help="fractions of the units held out to certify (ope.split)")
    p.add_argument("--learners", nargs="+", default=["dp-pbb"], choices=LEARNERS,
                   help="learners trained on the training part (dp-apvi-c2-0: DP-APVI on a count release with "
                        "C2 = 0; apvi, apvi-hoeffding, apvi-lower-order, ve: not private, on exact counts)")
    p.add_argument("--seed", type=int, default=2028)
    p.add_argument("--out", type=Path, default=Path("experiments/results/certify_icu.json"))
    a = p.parse_args()
    run(a.sizes, a.epsilons, a.coverages, a.seed, a.out, a.failure_probs, a.hold_outs, a.learners)


if __name__ == "__main__":
    main()
