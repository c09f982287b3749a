"""Issue 31, D2 and D3: Ngo's public switching schedule; the reward function given to every linear explorer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.mdp.synthetic_linear import raw_features
from privaudit.mdp.tabular import TabularMDP, reference_regrets
from privaudit.online.env import make_env
from privaudit.online.linear.build import make_linear_agent
from privaudit.online.linear.constants import Problem, lsvi_ucb_constants, ngo_constants, ngo_switch_schedule
from privaudit.online.linear.lsvi_ucb import LSVIUCB
from privaudit.online.protocol import run_episodes
from privaudit.privacy.accounting import dp_to_zcdp, event_rho

PHI = raw_features() / math.sqrt(7.0)


def _switch_episodes(agent) -> list[int]:
    """Wrap the agent's policy update so that it records the episode of every switch."""
    seen, update = [], agent._switch

    def recorded(inv):
        seen.append(agent.k)
        update(inv)
    agent._switch = recorded
    return seen


def test_ngo_switches_at_public_episodes_and_keeps_learning_to_the_end():
    """D2: at eps = 1, H = 5 the noisy determinant test used the public cap up by user 1,024-2,010 of
    3,000 (then froze the policy) and its switch times depended on the noise. With noise the switches
    now fall on the public schedule: the same episodes for every user population and noise seed, the
    last one in the final 10% of the run, and exactly the schedule's length of target releases."""
    K, H = 3000, 5
    rho = dp_to_zcdp(1.0, 1e-5)
    runs = []
    for world, seed in ((0, 1), (7, 2)):
        env = make_env("synthetic-linear", horizon=H, world_key=world)
        reward = np.stack([env.mdp.expected_reward(h) for h in range(H)])
        agent = make_linear_agent("ngo", PHI, reward, H, K, rho=rho, delta=1e-5, rng=np.random.default_rng(seed))
        seen = _switch_episodes(agent)
        run_episodes(env, agent, K)
        runs.append((agent, seen))
    (a, s1), (_, s2) = runs
    assert s1 == s2 == list(a.c.switch_at)
    assert len(s1) == a.n_switches == a.c.n_max >= 3
    assert s1[-1] >= 0.9 * K
    # the accounting: H * (schedule length) target releases at rho/2 in total, the Gram trees rho/2
    assert {e.family for e in a.events()} == {"ngo:gram", f"ngo:target (x{H * len(s1)})"}
    assert sum(event_rho(e) for e in a.events()) == pytest.approx(rho, rel=1e-9)


@pytest.mark.parametrize("K, d, base, C", [(3000, 10, 545.2, 2.0), (500, 3, 0.7, 1.5), (40, 2, 0.1, 2.0)])
def test_ngo_schedule_is_where_the_isotropic_determinant_grows_by_c(K, d, base, C):
    """k_j is the first integer k with d ln(1 + k / (d b)) >= j ln C (det(b I + (k/d) I) >= C^j b^d),
    checked by brute force over every k < K."""
    k = np.arange(1, K)
    level = np.floor(d * np.log1p(k / (d * base)) / math.log(C) + 1e-12)
    brute = k[np.diff(np.concatenate([[0.0], level])) > 0]
    assert ngo_switch_schedule(K, d, base, C) == tuple(int(x) for x in brute)
    assert ngo_switch_schedule(K, d, base, 1.0) == tuple(range(1, K))


def test_ngo_schedule_options():
    pb = Problem(5, 2, 100, 10, 3000)
    c = ngo_constants(pb, 1.0, "practical")
    assert c.switch_at and c.n_max == len(c.switch_at)
    thin = ngo_constants(pb, 1.0, "practical", n_max=3)
    assert len(thin.switch_at) == thin.n_max == 3 and set(thin.switch_at) <= set(c.switch_at)
    assert thin.switch_at[0] == c.switch_at[0] and thin.switch_at[-1] == c.switch_at[-1]
    # the paper's test on request, and without noise by default (its N_max cap)
    assert ngo_constants(pb, 1.0, "practical", switching="determinant").switch_at == ()
    assert ngo_constants(pb, math.inf, "practical").switch_at == ()
    with pytest.raises(UsageError, match="switching"):
        ngo_constants(pb, 1.0, "practical", switching="sometimes")


def test_reference_regrets_of_a_bandit():
    """One state, H = 1, rewards (0.2, 0.9): uniform 0.9 - 0.55, action 0 0.7, reward-greedy 0."""
    P = np.ones((1, 2, 1))
    mdp = TabularMDP(P=P, r=np.array([[0.2, 0.9]]), d0=np.ones(1), horizon=1)
    ref = reference_regrets(mdp)
    assert ref == pytest.approx({"uniform": 0.35, "action0": 0.7, "reward_greedy": 0.0}, abs=1e-12)


def test_lsvi_ucb_given_the_reward_regresses_values_only():
    """D3: with the reward function, Q = r + w^T phi + bonus, w regressing V_{h+1} alone: on a one-step
    problem (V_1 = 0) Q minus the bonus is r exactly, whatever rewards were observed; the generic
    backward pass (private runs) and the batched exact one agree."""
    H, K = 1, 30
    phi = np.eye(2)[None]                                  # (S = 1, A = 2, d = 2), one-hot
    r = np.array([[[0.2, 0.9]]])
    pb = Problem(H, 1, 2, 2, K)
    agent = LSVIUCB(phi, H, K, lsvi_ucb_constants(pb, "practical"), reward=r)
    for k in range(5):
        agent.start_episode(k)
        agent.observe(0, 0, k % 2, 0.5, 0)                 # observed rewards are not the function's
        agent.end_episode()
    agent.start_episode(5)
    inv = agent.stats.inv
    bonus = agent.c.beta * np.sqrt(np.einsum("ad,de,ae->a", phi[0], inv[0], phi[0]))
    np.testing.assert_allclose(np.clip(r[0, 0] + bonus, 0, H), agent.Q[0, 0], atol=1e-12)
    q_exact = agent.Q.copy()
    agent._backward(inv, lambda h, v: agent.stats.target(h, v, with_reward=False))   # the generic pass
    np.testing.assert_allclose(agent.Q, q_exact, atol=1e-12)
    # without the reward function the regression learns the observed 0.5
    plain = LSVIUCB(phi, H, K, lsvi_ucb_constants(pb, "practical"))
    for k in range(5):
        plain.start_episode(k)
        plain.observe(0, 0, k % 2, 0.5, 0)
        plain.end_episode()
    plain.start_episode(5)
    assert not np.allclose(plain.Q, agent.Q)


def test_reward_is_checked():
    pb = Problem(1, 1, 2, 2, 10)
    with pytest.raises(UsageError, match=r"\[0, 1\]"):
        LSVIUCB(np.eye(2)[None], 1, 10, lsvi_ucb_constants(pb, "practical"), reward=np.array([[[0.2, 1.5]]]))
    with pytest.raises(UsageError, match="shape"):
        LSVIUCB(np.eye(2)[None], 1, 10, lsvi_ucb_constants(pb, "practical"), reward=np.zeros((2, 1, 2)))
