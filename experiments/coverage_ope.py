"""Issue 28, item 5, study 4: coverage of the DP policy evaluation from logs (``privaudit.ope``).

The one-sided lower bound and the two-sided interval of ``privaudit evaluate --logs`` (and of
``pipeline --hold-out``, which calls the same evaluation on held-out units), at their stated 95%, on:

* every MDP kind of ``certificate_coverage.KINDS`` (stationary, reward that varies with h,
  non-stationary, the two MDPs of issue 28's failures), plus rewards in [-1, 1] (the random
  non-stationary MDP with r -> 2r - 1 and a spec declaring reward_range [-1, 1]);
* k in {1, 5, 20} stays per privacy unit, identical copies (as correlated as stays can be);
* 2,000 or 20,000 stays (stays // k units); budgets rho in {1, 100} (both on the same logs, each with
  its own noise; 100 makes the bounds informative at these small sizes);
* two policies: a fixed random policy pi_h(a|s), and the **held-out** case of the pipeline: DP-PBB
  (rho 1, per-step or pooled counts as the kind needs) trained on as many *other* units of the same
  MDP (the pipeline's split is a fixed public function of the unit id, so its two parts are
  independent samples of units), then evaluated on these;
* m = units / 50, the coverage rule's bias term (``ope.evaluate.UNITS_PER_COVERAGE``) without its noise
  floor, fixed before the stays are drawn (the floor would absorb all the mass at these sizes: valid and
  empty bounds, and a negative control that cannot fail).

Negative control: the capped model's value V' itself (no noise, no width) as a "lower bound": it is
above the truth about half the time where the caps absorb little.

Run by ``experiments/certificate_coverage.py --studies ope``; the rows go to
``experiments/results/certificate_coverage_ope.{json,md}``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.core.spec import DomainSpec
from privaudit.learners.tabular.dp_pbb import DPPBB
from privaudit.mdp.random_tabular import random_tabular_spec_doc
from privaudit.mdp.simulate import simulate
from privaudit.mdp.tabular import TabularMDP, evaluate_policy
from privaudit.ope.evaluate import UNITS_PER_COVERAGE, PolicyEvaluation
from privaudit.ope.model import capped_model_value, held_out_stays
from privaudit.privacy.budget import resolve_budget

#: Budgets (rho) of the evaluation.
RHOS = (1.0, 100.0)
#: Stays per log (units = stays // k), as study 1.
SIZES = (2000, 20000)


def ope_kind(kind: str, seed: int, make_mdp) -> tuple[TabularMDP, np.ndarray, bool, tuple[float, float]]:
    """(MDP, reward for DP-PBB, pooled counts?, declared reward range) of a kind (``make_mdp`` for the
    shared kinds; "rewards-in-[-1,1]" is the non-stationary kind with r -> 2r - 1)."""
    if kind != "rewards-in-[-1,1]":
        mdp, reward, pooled = make_mdp(kind, seed)
        return mdp, reward, pooled, (0.0, 1.0)
    base, _, _ = make_mdp("non-stationary", seed)
    mdp = TabularMDP(P=base.P, r=2.0 * base.r - 1.0, d0=base.d0, horizon=base.horizon)
    return mdp, base.r, False, (-1.0, 1.0)


def _spec(mdp: TabularMDP, k: int, reward_range) -> DomainSpec:
    doc = random_tabular_spec_doc(mdp)
    doc.update(reward_range=list(reward_range), privacy_unit={"column": "unit_id", "max_episodes": k})
    doc.pop("return_bound", None)
    return DomainSpec.from_dict(doc)


def _logs(mdp, units: int, k: int, reward_range, rng) -> pl.DataFrame:
    """``units`` units of k identical stays (uniform behaviour), rewards scaled as bounding scales them."""
    lo, hi = reward_range
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    one = simulate(mdp, np.full((H, S, A), 1.0 / A), units, rng).with_columns(
        reward=(pl.col("reward") - lo) / (hi - lo))
    return pl.concat([one.with_columns(unit_id=pl.col("episode_id"), episode_id=pl.col("episode_id") * k + j)
                      for j in range(k)])


def study_ope(runs: int, seed: int, kinds, ks, make_mdp, simulate_counts, clopper_pearson) -> list[dict]:
    """Every cell of study 4 (module docstring): failures of the lower bound and of the interval."""
    rows, root = [], np.random.default_rng(seed)
    for kind in kinds:
        for k in ks:
            for stays_n in SIZES:
                units, cells = stays_n // k, {}
                for i, child in enumerate(root.spawn(runs)):
                    mdp, reward, pooled, rr = ope_kind(kind, 2000 + i, make_mdp)
                    spec = _spec(mdp, k, rr)
                    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
                    fixed = np.random.default_rng(i).dirichlet(np.ones(A), size=(H, S))
                    train = simulate_counts(mdp, units, 1, pooled, child)   # other units: the training part
                    learned = DPPBB(rho=1.0, failure_prob=0.05).fit(
                        train, reward, terminal_states=mdp.terminal_states, rng=child.spawn(1)[0]).policy_.table
                    stays = held_out_stays(_logs(mdp, units, k, rr, child), spec)
                    for pname, pi in (("fixed policy", fixed), ("held-out DP-PBB policy", learned)):
                        v = evaluate_policy(mdp, pi)
                        for rho in RHOS:
                            budget = resolve_budget(rho=rho)
                            m = units / UNITS_PER_COVERAGE
                            plan = PolicyEvaluation.plan(spec, budget, m)
                            model = capped_model_value(stays, pi, spec, m)
                            res = plan.certify(plan.noisy(model, rng=child), 0.95)
                            lo, hi = res["interval"]
                            c = cells.setdefault((pname, rho), np.zeros(6))
                            plug_in = plan.certify({"value": model.value, "lost_mass": 0.0, "variance": 0.0})
                            c += (res["lower_bound"] > v + 1e-9, not (lo - 1e-9 <= v <= hi + 1e-9),
                                  plug_in["estimate_unclipped"] > v + 1e-9, v, res["lower_bound"], m)
                for (pname, rho), c in cells.items():
                    for name, f in ((f"ope lower bound, {pname}", c[0]), (f"ope 95% interval, {pname}", c[1]),
                                    (f"NEGATIVE CONTROL: ope plug-in V', {pname}", c[2])):
                        rows.append({"study": "ope", "certificate": name, "kind": kind, "k": k, "rho": rho,
                                     "stays": stays_n, "units": units, "runs": runs, "failures": int(f), "stated": 0.05,
                                     "cp95": clopper_pearson(int(f), runs), "mean_value": c[3] / runs,
                                     "mean_certified": c[4] / runs, "mean_m": c[5] / runs})
    return rows
