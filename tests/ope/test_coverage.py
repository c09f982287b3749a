"""The DP lower bound of ``privaudit.ope`` covers the true value at its stated level (issue 28, item 3).

Small MDPs whose dynamics and rewards change with h, k > 1 stays per unit
(identical copies: as correlated as stays can be), the exact discrete
Gaussian noise of the mechanism. Each run draws fresh logs and noise.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from privaudit.core.spec import DomainSpec
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate
from privaudit.mdp.tabular import TabularMDP, evaluate_policy
from privaudit.ope.evaluate import PolicyEvaluation, evaluate_policy_on_logs
from privaudit.ope.model import capped_model_value, held_out_stays
from privaudit.privacy.budget import resolve_budget


def late_reward_mdp() -> TabularMDP:
    """Per-step dynamics; state 3 pays only from step h0 = 2 on (a reward that starts late)."""
    rng = np.random.default_rng(7)
    H, S, A = 4, 4, 2
    P = rng.dirichlet(np.full(S, 0.5), size=(H, S, A))
    r = np.zeros((H, S, A))
    r[2:, 3, :] = 1.0
    return TabularMDP(P=P, r=r, d0=np.full(S, 1 / S), horizon=H, terminal_states=(), name="late-reward")


def negative_reward_mdp() -> TabularMDP:
    """Per-step dynamics, rewards r_h(s, a) in [-1, 1], a terminal state 3 (declared reward 0 once there)."""
    rng = np.random.default_rng(9)
    H, S, A = 4, 4, 2
    P = rng.dirichlet(np.full(S, 0.5), size=(H, S, A))
    r = rng.uniform(-1.0, 1.0, size=(H, S, A))
    return TabularMDP(P=P, r=r, d0=np.array([1 / 3, 1 / 3, 1 / 3, 0.0]), horizon=H, terminal_states=(3,),
                      name="negative-rewards")


def spec_for(mdp: TabularMDP, k: int, reward_range=(0.0, 1.0)) -> DomainSpec:
    doc = random_tabular_spec_doc(mdp)
    doc["privacy_unit"] = {"column": "unit_id", "max_episodes": k}
    doc["reward_range"] = list(reward_range)
    return DomainSpec.from_dict(doc)


def logs_with_copies(mdp, behaviour, units: int, k: int, rng, reward_range=(0.0, 1.0)) -> pl.DataFrame:
    """``units`` units, each holding k identical copies of one simulated stay (rewards scaled to [0, 1] by the
    range, as bounding scales them)."""
    lo, hi = reward_range
    one = simulate(mdp, behaviour, units, rng).with_columns(reward=(pl.col("reward") - lo) / (hi - lo))
    copies = [one.with_columns(unit_id=pl.col("episode_id"), episode_id=pl.col("episode_id") * k + j)
              for j in range(k)]
    return pl.concat(copies)


def lower_bounds(mdp, pi, *, units, k, coverage, runs, confidence, seed, noiseless=False, reward_range=(0.0, 1.0)):
    spec = spec_for(mdp, k, reward_range)
    plan = PolicyEvaluation.plan(spec, resolve_budget(rho=1.0), coverage)
    rng = np.random.default_rng(seed)
    behaviour = np.full((mdp.horizon, spec.n_states, spec.n_actions), 1.0 / spec.n_actions)
    out = []
    for _ in range(runs):
        stays = held_out_stays(logs_with_copies(mdp, behaviour, units, k, rng, reward_range), spec)
        model = capped_model_value(stays, pi, spec, coverage)
        if noiseless:  # negative control: the plug-in value itself, no width
            out.append(model.value)
            continue
        out.append(plan.certify(plan.noisy(model, rng=rng), confidence)["lower_bound"])
    return np.array(out)


#: case -> (MDP, k, units, coverage m, declared reward range)
CASES = {"random non-stationary, k=3": (lambda: random_tabular_mdp(4, 2, 4, 11), 3, 3000, 200, (0.0, 1.0)),
         "late reward, per-step dynamics, k=1": (late_reward_mdp, 1, 10000, 1000, (0.0, 1.0)),
         "rewards in [-1, 1], terminal state, k=2": (negative_reward_mdp, 2, 3000, 200, (-1.0, 1.0))}


def _policy(mdp, seed=5):
    return np.random.default_rng(seed).dirichlet(np.ones(2), size=(mdp.horizon, 4))


def coverage_run(case, *, alpha, runs, seed, shrink=1):
    """(failures, lower bounds, true value) of ``runs`` runs of a case at level 1 - alpha."""
    make, k, units, m, reward_range = CASES[case]
    mdp = make()
    pi = _policy(mdp)
    v = evaluate_policy(mdp, pi)
    lb = lower_bounds(mdp, pi, units=units // shrink, k=k, coverage=m / shrink, runs=runs, confidence=1 - alpha,
                      seed=seed, reward_range=reward_range)
    return int(np.sum(lb > v)), lb, v


@pytest.mark.parametrize("case", list(CASES))
def test_lower_bound_covers_at_the_stated_level(case):
    """Failures <= alpha + 3 standard deviations (false failure < 0.2% if the true rate were alpha)."""
    alpha, runs = 0.2, 40
    fails, lb, v = coverage_run(case, alpha=alpha, runs=runs, seed=1)
    assert fails <= alpha * runs + 3 * math.sqrt(alpha * (1 - alpha) * runs), (fails, v, lb.max())
    lo, hi = CASES[case][4]
    floor = min(lo, 0.0) * 4  # the least value of H = 4 steps in declared units (terminal states earn 0)
    assert lb.mean() > floor + 0.5 * (v - floor), (lb.mean(), v)  # informative, not vacuous


def test_negative_control_the_plug_in_value_fails():
    """The study can fail: the plug-in value without its width is above the truth about half the time.

    60 runs; P(fewer than 12 failures) < 1e-5 if the true rate is ~0.5 (binomial)."""
    mdp = random_tabular_mdp(4, 2, 4, 11)
    pi = _policy(mdp)
    v = evaluate_policy(mdp, pi)
    est = lower_bounds(mdp, pi, units=3000, k=1, coverage=1e-9, runs=60, confidence=0.8, seed=2, noiseless=True)
    assert int(np.sum(est > v)) >= 12


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_lower_bound_coverage_long(case):
    """600 runs per case at alpha = 0.05, half the units: failures <= 5% + 3 sd (false failure < 0.2%)."""
    alpha, runs = 0.05, 600
    fails, _, _ = coverage_run(case, alpha=alpha, runs=runs, seed=3, shrink=2)
    assert fails <= alpha * runs + 3 * math.sqrt(alpha * (1 - alpha) * runs)


def test_model_value_is_the_plug_in_value_without_caps():
    """With m -> 0 no mass is absorbed and V' is the per-step certainty-equivalence value of the logs."""
    mdp = late_reward_mdp()
    spec = spec_for(mdp, 1)
    pi = _policy(mdp)
    df = simulate(mdp, np.full((4, 4, 2), 0.5), 400, np.random.default_rng(0))
    mv = capped_model_value(held_out_stays(df, spec), pi, spec, 1e-9)
    # reference: backward induction on the empirical per-step model
    H, S, A = 4, 4, 2
    a = {c: df[c].to_numpy() for c in ("step", "state", "action", "next_state", "reward")}
    n = np.zeros((H, S, A)); N = np.zeros((H, S, A, S)); Rs = np.zeros((H, S, A))
    np.add.at(n, (a["step"], a["state"], a["action"]), 1)
    np.add.at(N, (a["step"], a["state"], a["action"], a["next_state"]), 1)
    np.add.at(Rs, (a["step"], a["state"], a["action"]), a["reward"])
    V = np.zeros(S)
    for h in range(H - 1, -1, -1):
        with np.errstate(invalid="ignore", divide="ignore"):
            Q = np.where(n[h] > 0, (Rs[h] + N[h] @ V) / n[h], 0.0)
        V = (pi[h] * Q).sum(axis=1)
    d0 = np.bincount(a["state"][a["step"] == 0], minlength=S) / 400
    assert mv.lost_mass == pytest.approx(0.0, abs=1e-12) or (n == 0).any()
    assert mv.value == pytest.approx(float(d0 @ V), rel=1e-12)


@dataclass(frozen=True)
class _Bounded:
    """Logs already bounded (the ``bounded`` frame ``evaluate_policy_on_logs`` accepts from either engine)."""

    bounded: pl.LazyFrame


def _runs_with_the_default_m(case, *, units, runs, alpha, seed):
    """(lower bounds, coverages m, true value) of ``evaluate_policy_on_logs`` without a coverage."""
    make, k, _, _, reward_range = CASES[case]
    mdp = make()
    pi = _policy(mdp)
    spec = spec_for(mdp, k, reward_range)
    behaviour = np.full((mdp.horizon, spec.n_states, spec.n_actions), 1.0 / spec.n_actions)
    rng = np.random.default_rng(seed)
    lbs, ms = [], []
    for _ in range(runs):
        logs = _Bounded(logs_with_copies(mdp, behaviour, units, k, rng, reward_range).lazy())
        out = evaluate_policy_on_logs(logs, spec, pi, budget=resolve_budget(rho=1.0), confidence=1 - alpha,
                                      seed=int(rng.integers(2**31)))
        lbs.append(out["lower_bound"])
        ms.append(out["coverage"])
        assert abs(out["mechanism"]["units_released"] - units) < 6 * out["mechanism"]["units_sigma"]  # P < 1e-8
    return np.array(lbs), np.array(ms), evaluate_policy(mdp, pi)


def test_lower_bound_covers_with_m_from_a_dp_count_of_few_units():
    """``evaluate_policy_on_logs`` without a coverage on 400 units: m = coverage_rule(DP count of the evaluated
    units), here n~/2 (the cap binds), so m moves with the count. m depends on the stays only through their
    number plus independent noise, so the theorem applies given n. 60 runs at alpha = 0.2: failures <= alpha
    + 3 sd (false failure < 0.2% if the true rate were alpha)."""
    alpha, runs = 0.2, 60
    lbs, ms, v = _runs_with_the_default_m("random non-stationary, k=3", units=400, runs=runs, alpha=alpha, seed=4)
    assert int(np.sum(lbs > v)) <= alpha * runs + 3 * math.sqrt(alpha * (1 - alpha) * runs), (v, lbs.max())
    assert len(set(ms)) > 1 and ms.max() < 400 / 2 + 6 * 1.0 / math.sqrt(2 * 0.05)  # n~/2, n~ within 6 sigma
    assert lbs.mean() > 0.2 * v, (lbs.mean(), v)  # not vacuous


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_lower_bound_coverage_with_the_default_m_long(case):
    """As above on each case's own size (m = m_noise there), 300 runs at alpha = 0.05 (false failure < 0.2%)."""
    alpha, runs = 0.05, 300
    lbs, _, v = _runs_with_the_default_m(case, units=CASES[case][2], runs=runs, alpha=alpha, seed=5)
    assert int(np.sum(lbs > v)) <= alpha * runs + 3 * math.sqrt(alpha * (1 - alpha) * runs), (v, lbs.max())


def test_a_given_coverage_is_the_plain_mechanism_with_at_most_12_parameters():
    """Issue 27's limit (at most 12 parameters; the ledger's description, run and output are one
    ``LedgerEntry``) with no change of behaviour: a given m evaluates with the whole budget, as before."""
    assert len(inspect.signature(evaluate_policy_on_logs).parameters) <= 12
    mdp = late_reward_mdp()
    spec, pi = spec_for(mdp, 1), _policy(mdp)
    df = simulate(mdp, np.full((4, 4, 2), 0.5), 2000, np.random.default_rng(8))
    got = evaluate_policy_on_logs(_Bounded(df.lazy()), spec, pi, budget=resolve_budget(rho=1.0), coverage=200.0,
                                  seed=3)
    plan = PolicyEvaluation.plan(spec, resolve_budget(rho=1.0), 200.0)
    exp = plan.certify(plan.noisy(capped_model_value(held_out_stays(df, spec), pi, spec, 200.0),
                                  rng=np.random.default_rng(3)))
    assert {k: got[k] for k in exp} == exp and got["mechanism"] == plan.describe()
