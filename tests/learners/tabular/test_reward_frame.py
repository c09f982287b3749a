"""Issue 13 item 1: the learned policy is the one for the reward the user declared.

Rewards are scaled by the declared range into [0, 1] for the release; terminal
states are worth reward 0 in the declared units. Before the fix, terminal
states kept value 0 in the *scaled* units, so with r_min < 0 every step still
alive was worth more than dying and the learners kept patients in the ICU.

The MDP below ("ICU"): live states 0, 1; terminal states 2 (survival, reward
+1 on entering) and 3 (death, -1 on entering); 0 otherwise. Treating (action
1) is worth about +0.2 per attempt; waiting (action 0) postpones the outcome.
The optimal policy for the declared reward treats; the policy for the
mis-scaled reward (each live step worth +0.5, terminal 0) waits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.linear import train_from_logs as train_linear
from privaudit.learners.options import BudgetRequest
from privaudit.learners.tabular.pessimism import reward_frame
from privaudit.learners.tabular.counts import exact_counts
from privaudit.learners.tabular.train import train_from_logs
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.mdp.tabular import TabularMDP, evaluate_policy, value_iteration
from privaudit.data.prepare import prepare_logs
from privaudit.core.spec import load_spec

H, S, A = 6, 4, 2
SURVIVE, DIE = 2, 3
N_EPISODES = 20_000


def icu_mdp(reward_scale: float = 1.0, shift: float = 0.0, terminal_zero_in_shifted: bool = False) -> TabularMDP:
    P = np.zeros((S, A, S))
    P[0, 0] = [0.85, 0.10, 0.00, 0.05]   # wait
    P[0, 1] = [0.00, 0.20, 0.50, 0.30]   # treat
    P[1, 0] = [0.10, 0.75, 0.00, 0.15]
    P[1, 1] = [0.25, 0.00, 0.35, 0.40]
    P[SURVIVE, :, SURVIVE] = 1.0
    P[DIE, :, DIE] = 1.0
    r = np.zeros((S, A, S))
    r[:, :, SURVIVE], r[:, :, DIE] = 1.0, -1.0
    r = reward_scale * r + shift
    return TabularMDP(P=P, r=r, d0=np.array([0.7, 0.3, 0.0, 0.0]), horizon=H,
                      terminal_states=(SURVIVE, DIE), name="icu-toy")


def _spec_doc(reward_range, features=False):
    doc = {"format_version": 1, "dataset_id": "icu-toy", "horizon": H, "n_states": S, "n_actions": A,
           "terminal_states": [SURVIVE, DIE], "reward_range": list(reward_range),
           "privacy_unit": {"column": None, "max_episodes": 1}}
    if features:
        doc["features"] = {"map": "one-hot"}
    return doc


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("frame")
    mdp = icu_mdp()
    logs = simulate(mdp, np.full((S, A), 0.5), N_EPISODES, np.random.default_rng(13))
    write_logs(logs, d / "logs.parquet")
    # the same logs with rewards x 3 (range x 3), and with the 0/1 coding (survival 1, otherwise 0)
    write_logs(logs.with_columns(logs["reward"] * 3.0), d / "logs_x3.parquet")
    write_logs(logs.with_columns((logs["reward"] > 0).cast(float).alias("reward")), d / "logs01.parquet")
    specs = {}
    for name, rr, feats in (("pm1", (-1, 1), False), ("pm3", (-3, 3), False), ("pm1_lin", (-1, 1), True),
                            ("01", (0, 1), False), ("01_wide", (-1, 1), False), ("pm1_wide", (-2, 4), False)):
        (d / f"{name}.json").write_text(json.dumps(_spec_doc(rr, feats)))
        specs[name] = load_spec(d / f"{name}.json")
    return {"dir": d, "mdp": mdp, "specs": specs}


def _greedy(table):
    return np.asarray(table).argmax(-1)


def _live_actions(table):
    """The greedy actions at the live states over steps that matter (h < H-1: the last step has no future)."""
    return _greedy(table)[:, :2]


def test_the_mis_scaled_reward_has_another_optimal_policy():
    """Sanity check that the tests below can fail: planning with r' = (r + 1) / 2 and terminal value 0
    (the old behaviour) prefers waiting; the declared reward prefers treating."""
    pi_true, _, _ = value_iteration(icu_mdp())
    bad = icu_mdp(0.5, 0.5)  # r' on every transition, terminal states still 0
    pi_bad, _, _ = value_iteration(bad)
    assert (_greedy(pi_true)[:H - 1, :2] == 1).all()
    assert (_greedy(pi_bad)[:H - 2, :2] == 0).all()
    gap = evaluate_policy(icu_mdp(), pi_true) - evaluate_policy(icu_mdp(), pi_bad)
    assert gap > 0.1


def test_reward_frame_values():
    f = reward_frame((-1, 1))
    assert (f.scale, f.shift, f.terminal, f.low, f.width) == (1.0, 0.0, 0.5, -1.0, 2.0)
    f = reward_frame((1, 2))  # 0 below the range: rewards r'' = (r - 0) / 2, terminal 0
    assert (f.scale, f.shift, f.terminal) == (0.5, 0.5, 0.0)
    assert reward_frame((0, 1)) == reward_frame(None)


@pytest.mark.parametrize("algo", ["ve", "apvi", "apvi-hoeffding"])
def test_tabular_learners_find_the_optimum_for_the_declared_reward(world, algo):
    """On 20k episodes every tabular learner's policy is within 0.01 of the exact optimum v* = 0.14
    (the mis-scaled optimum is > 0.1 below it; see the sanity test)."""
    pol = train_from_logs(world["dir"] / "logs.parquet", world["specs"]["pm1"], algo=algo)
    pi_star, _, v_star = value_iteration(world["mdp"])
    assert evaluate_policy(world["mdp"], pol.table) == pytest.approx(v_star, abs=0.01), algo
    assert (_greedy(pol.table)[0, :2] == _greedy(pi_star)[0, :2]).all()  # first decision: treat


def test_dp_apvi_at_zero_noise_finds_the_optimum(world):
    spec = world["specs"]["pm1"]
    counts = exact_counts(prepare_logs(world["dir"] / "logs.parquet", spec).bounded, spec)
    learner = DPAPVI(noise_bound=0.0).fit(counts, terminal_states=spec.terminal_states,
                                          reward_range=spec.reward_range)
    pi_star, _, v_star = value_iteration(world["mdp"])
    assert evaluate_policy(world["mdp"], learner.policy_.table) == pytest.approx(v_star, abs=0.01)
    # its value estimate is in the declared units (in planning units it would be (v + H) / 2 ~ 3.07);
    # not a strict lower bound here: the Bernstein term covers P's error, not the random reward's
    assert learner.value_estimate(world["mdp"].d0) == pytest.approx(v_star, abs=0.02)


@pytest.mark.parametrize("algo,rho", [("pevi", None), ("vapvi", None), ("dp-vapvi", 1e9)])
def test_linear_learners_find_the_optimum_for_the_declared_reward(world, algo, rho):
    """One-hot features make the linear learners tabular; DP-VAPVI at rho = 1e9 has negligible noise."""
    params = {"beta": 0.05} if algo == "pevi" else None  # the default beta is the loose theory constant
    pol = train_linear(world["dir"] / "logs.parquet", world["specs"]["pm1_lin"], algo,
                       budget=BudgetRequest(rho=rho) if rho else None, seed=1 if rho else None, params=params)
    pi_star, _, v_star = value_iteration(world["mdp"])
    assert evaluate_policy(world["mdp"], pol.table) == pytest.approx(v_star, abs=0.01), algo


def test_widening_the_declared_range_does_not_change_the_policy(world):
    """Same 0/1-coded logs declared [0, 1] or [-1, 1]: certainty equivalence learns the same policy
    exactly (its values are the same increasing affine function of the declared values); so does
    APVI on these 20k episodes (its penalties differ only by the range's width)."""
    logs = world["dir"] / "logs01.parquet"
    for algo in ("ve", "apvi"):
        narrow = train_from_logs(logs, world["specs"]["01"], algo=algo)
        wide = train_from_logs(logs, world["specs"]["01_wide"], algo=algo)
        assert (_live_actions(narrow.table)[:H - 1] == _live_actions(wide.table)[:H - 1]).all(), algo
    wider = train_from_logs(world["dir"] / "logs.parquet", world["specs"]["pm1_wide"], algo="ve")
    base = train_from_logs(world["dir"] / "logs.parquet", world["specs"]["pm1"], algo="ve")
    assert (_live_actions(wider.table)[:H - 1] == _live_actions(base.table)[:H - 1]).all()


@pytest.mark.parametrize("algo", ["ve", "apvi", "apvi-hoeffding"])
def test_scaling_rewards_and_range_by_a_positive_factor_keeps_the_policy(world, algo):
    a = train_from_logs(world["dir"] / "logs.parquet", world["specs"]["pm1"], algo=algo)
    b = train_from_logs(world["dir"] / "logs_x3.parquet", world["specs"]["pm3"], algo=algo)
    np.testing.assert_array_equal(a.table, b.table)
