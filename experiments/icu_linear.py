"""DP-VAPVI (state features x action) against DP-APVI on ICU-Sepsis logs at the same budgets.

Budgets: epsilon in {1, 5, 20} at delta = 1e-6 (converted to rho by
``accounting.dp_to_zcdp``, the tight CKS conversion). Logs: the 20k-episode
clinicians' sample (``sample_data/icu_sepsis_clinicians_20k.parquet``).
DP-VAPVI uses the public ICU-Sepsis state table (716 x 47 clinical variables,
``state_cluster_centers``) standardised, projected to 8 dimensions by a public
Gaussian projection (projection seed 0), plus a bias, times one-hot(action):
d = 9 * 25 = 225. DP-APVI uses its defaults with --stationary. Values are exact
(backward induction on the ICU-Sepsis MDP, H = 20); clinicians 0.6920,
optimal 0.7922.

Usage: python experiments/icu_linear.py [--runs 3] [--logs PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from privaudit.learners.linear import train_from_logs as linear_train
from privaudit.learners.options import BudgetRequest
from privaudit.mdp.icu_sepsis import default_data_dir, load_icu_sepsis
from privaudit.mdp.tabular import evaluate_policy
from privaudit.core.spec import DomainSpec, load_spec

EPSILONS = (1.0, 5.0, 20.0)
DELTA = 1e-6


def linear_spec(base: DomainSpec) -> DomainSpec:
    doc = base.to_dict()
    doc["features"] = {"map": "state-table-x-action",
                       "state_table": str(default_data_dir() / "dynamics.npz") + ":state_cluster_centers",
                       "projection_dim": 8, "projection_seed": 0, "norm": "rescale"}
    return DomainSpec.from_dict(doc)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--logs", type=Path, default=Path("sample_data/icu_sepsis_clinicians_20k.parquet"))
    ap.add_argument("--spec", type=Path, default=Path("sample_data/icu_sepsis_spec.json"))
    ap.add_argument("--json", type=Path, default=Path("experiments/results/icu_linear.json"))
    args = ap.parse_args(argv)
    from privaudit.learners.tabular.train import train_from_logs as tabular_train

    mdp = load_icu_sepsis()
    spec = load_spec(args.spec)
    lspec = linear_spec(spec)
    res = {"logs": str(args.logs), "delta": DELTA, "runs": args.runs, "rows": []}
    t0 = time.perf_counter()
    vals = [evaluate_policy(mdp, linear_train(args.logs, lspec, "vapvi").table)]
    res["rows"].append({"algo": "VAPVI (not private)", "epsilon": None, "values": vals})
    seed = 0
    for eps in EPSILONS:
        for algo in ("dp-vapvi", "dp-apvi"):
            vals = []
            for _ in range(args.runs):
                seed += 1
                if algo == "dp-vapvi":
                    pol = linear_train(args.logs, lspec, algo, budget=BudgetRequest(epsilon=eps, delta=DELTA), seed=seed)
                else:
                    with tempfile.TemporaryDirectory() as tmp:
                        pol = tabular_train(args.logs, spec, algo=algo, stationary=True,
                                            budget=BudgetRequest(epsilon=eps, delta=DELTA),
                                            release_out=Path(tmp) / "rel", seed=seed)
                vals.append(evaluate_policy(mdp, pol.table))
            res["rows"].append({"algo": algo, "epsilon": eps, "values": vals})
            print(algo, eps, np.round(vals, 4), flush=True)
    res["wall_seconds"] = time.perf_counter() - t0
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1) + "\n")
    print("| algorithm | epsilon (delta = 1e-6) | value (mean ± sd over runs) |\n|---|---|---|")
    for row in res["rows"]:
        v = np.array(row["values"])
        sd = f" ± {v.std(ddof=1):.4f}" if len(v) > 1 else ""
        print(f"| {row['algo']} | {row['epsilon'] if row['epsilon'] else '-'} | {v.mean():.4f}{sd} |")
    print(f"clinicians 0.6920, optimal 0.7922; {res['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
