"""Coverage of the clinicians' DP value estimate on ICU-Sepsis (issue 13 item 2), at the pipeline's scale.

Simulates R independent logs of N stays of the clinicians' policy on ICU-Sepsis
(H = 20, the sample's spec: reward 1 on survival, range [0, 1]), runs the
pipeline's behaviour-value release (``privaudit.release.behaviour_value``) on
each with a fresh noise stream, and reports how often the 95% interval covers
the exact clinicians' value (0.6920), the mean half-width and its sampling
and noise parts. The sample's spec declares ``return_bound`` [0, 1] (a stay
has one outcome); ``--no-return-bound`` drops it (the range is then H x [0, 1]).

Usage::

    python experiments/behaviour_value_icu.py [--logs 100] [--stays 20000] [--rho 0.1] [--k 1]
        [--no-return-bound] [--seed 1]

Prints one Markdown row and the CPU time (``resource.getrusage``).
"""

from __future__ import annotations

import argparse
import resource

import numpy as np

from privaudit.data.bounding import bound_contributions
from privaudit.mdp.evaluation import resolve_mdp
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.mdp.simulate import behaviour_policy, simulate
from privaudit.mdp.tabular import evaluate_policy
from privaudit.privacy.budget import resolve_budget
from privaudit.core.package_data import sample_dir
from privaudit.core.spec import DomainSpec, load_spec
from privaudit.release.behaviour_value import BehaviourValueRelease, estimate_behaviour_value


def run(logs: int, stays: int, rho: float, k: int, return_bound: bool, seed: int) -> dict:
    """Coverage and widths over ``logs`` simulated logs (see the module docstring)."""
    mdp = resolve_mdp("icu-sepsis", 20)
    pi = behaviour_policy("clinicians", mdp, MDP_REGISTRY["icu-sepsis"])
    v = float(evaluate_policy(mdp, pi))
    doc = load_spec(sample_dir() / "icu_sepsis_spec.json").to_dict()
    doc["privacy_unit"] = {"column": None, "max_episodes": k}
    if not return_bound:
        doc.pop("return_bound", None)
    spec = DomainSpec.from_dict(doc)
    rel = BehaviourValueRelease.plan(spec, resolve_budget(rho=rho))
    sim_rng, noise_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    res = []
    for _ in range(logs):
        bounded, _ = bound_contributions(simulate(mdp, pi, stays, sim_rng).lazy(), spec)
        res.append(estimate_behaviour_value(rel.apply(bounded, rng=noise_rng)))
    covered = sum(r["interval"][0] <= v <= r["interval"][1] for r in res)
    return {"exact": v, "covered": covered, "logs": logs, "stays": stays, "rho": rho, "k": k,
            "range": rel.describe()["return_range"],
            "half_width": float(np.mean([(r["interval"][1] - r["interval"][0]) / 2 for r in res])),
            "sampling_sd": float(np.mean([r["sampling_sd"] for r in res])),
            "noise_sd": float(np.mean([r["noise_sd"] for r in res])),
            "mean_estimate": float(np.mean([r["estimate"] for r in res]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=100)
    ap.add_argument("--stays", type=int, default=20000)
    ap.add_argument("--rho", type=float, default=0.1, help="the behaviour-value part's rho (pipeline: 0.1 of rho)")
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--no-return-bound", dest="return_bound", action="store_false")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = run(a.logs, a.stays, a.rho, a.k, a.return_bound, a.seed)
    print("| stays | value rho | k | return range | logs | covered | mean estimate | exact | mean half-width "
          "| sampling sd | noise sd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {r['stays']} | {r['rho']:g} | {r['k']} | {r['range']} | {r['logs']} | {r['covered']} "
          f"({r['covered'] / r['logs']:.2f}) | {r['mean_estimate']:.4f} | {r['exact']:.4f} | {r['half_width']:.4f} "
          f"| {r['sampling_sd']:.4f} | {r['noise_sd']:.4f} |")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"CPU {ru.ru_utime + ru.ru_stime:.1f} s")


if __name__ == "__main__":
    main()
