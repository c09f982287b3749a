"""PUCB: sensitivity of its counter families, releases, the non-private twin, neighbouring runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privaudit.errors import UsageError
from privaudit.online.constants import PRACTICAL, THEORY, calibrate
from privaudit.online.counters import tree_error_bound, tree_levels
from privaudit.online.env import make_env
from privaudit.online.protocol import run_episodes
from privaudit.online.pucb import FAMILIES, PUCB, UCBVI, episode_increments, privq
from privaudit.privacy.accounting import event_epsilon, event_rho


def _user_increments(env, k, actions):
    s, r = env.respond(k, actions)
    return episode_increments(env.horizon, env.n_states, env.n_actions, s[:-1], actions, r, s[1:])


def test_replacing_one_user_changes_each_family_by_at_most_2H():
    """Enumerate random user pairs (and random action sequences): l1 <= 2H per family, attained."""
    env = make_env("random-tabular", horizon=6, states=4, actions=3)
    H = env.horizon
    rng = np.random.default_rng(0)
    worst = np.zeros(3)
    for trial in range(400):
        u, v = rng.integers(0, 10_000, size=2)
        au, av = rng.integers(0, env.n_actions, size=(2, H))
        zu = _user_increments(env, u, au)
        zv = _user_increments(env.with_user_key(u, int(rng.integers(1, 2 ** 62))), u, av)
        for f, (a, b) in enumerate(zip(zu, zv)):
            d = np.abs(a - b).sum()
            assert d <= 2 * H + 1e-12
            worst[f] = max(worst[f], d)
            assert np.sqrt(((a - b) ** 2).sum()) <= math.sqrt(2 * H) + 1e-12
    assert worst[0] == 2 * H and worst[2] == 2 * H  # the bound is attained by some pair


def test_every_counter_released_every_episode_with_fresh_noise():
    env = make_env("riverswim", horizon=5)
    K = 37
    ag = PUCB(env.n_states, env.n_actions, env.horizon, K, epsilon=1.0, rng=np.random.default_rng(1))
    seen = []
    orig = ag.end_episode

    def spy():
        orig()
        seen.append(tuple(x.copy() for x in ag._released))

    ag.end_episode = spy
    run_episodes(env, ag, K)
    L = tree_levels(K)
    for c in ag.counters_.values():
        assert c.t == K and c.draws == K  # one release and one fresh node draw per episode
        assert c.n_levels == L == math.floor(math.log2(K)) + 1
    # consecutive releases differ in every counter (fresh noise even where the increment is zero)
    for a, b in zip(seen, seen[1:]):
        for x, y in zip(a, b):
            assert (x != y).mean() > 0.99
    with pytest.raises(UsageError, match="K=37"):
        ag.start_episode(K)


def test_budget_split_is_eps_over_6H_per_counter():
    H, K, eps = 7, 1000, 2.0
    cal = calibrate(3, 2, H, K, epsilon=eps)
    L = tree_levels(K)
    assert cal.scale == pytest.approx(6 * H * L / eps)
    ag = PUCB(3, 2, H, K, epsilon=eps, rng=np.random.default_rng(0))
    assert [event_epsilon(e) for e in ag.events_] == pytest.approx([eps / 3] * 3)
    assert sum(event_epsilon(e) for e in ag.events_) <= eps * (1 + 1e-12)
    g = PUCB(3, 2, H, K, rho=0.3, rng=np.random.default_rng(0))
    assert sum(event_rho(e) for e in g.events_) == pytest.approx(0.3)
    assert g.calibration_.scale ** 2 == pytest.approx(3 * H * L / 0.3)


def test_theory_error_bound_is_the_union_bound():
    S, A, H, K = 3, 2, 4, 500
    cal = calibrate(S, A, H, K, epsilon=1.0, beta=0.1, constants="theory")
    C = 2 * S * A * H + S * S * A * H
    assert cal.n_counters == C
    assert cal.E == tree_error_bound("laplace", cal.scale, tree_levels(K), 0.05, n_counters=C, n_releases=K)
    p = calibrate(S, A, H, K, epsilon=1.0, constants="practical")
    assert p.E == pytest.approx(p.scale * math.sqrt(2 * tree_levels(K)))


def test_privq_against_hand_computation():
    """H = 2, S = 2, A = 1, exact counts (E = 0): one backward step by hand."""
    cal = calibrate(2, 1, 2, 10, epsilon=math.inf, constants=PRACTICAL)
    n = np.array([[[4.0], [0.0]], [[2.0], [1.0]]])
    r = np.array([[[2.0], [0.0]], [[2.0], [0.0]]])
    m = np.zeros((2, 2, 1, 2))
    m[0, 0, 0] = [1, 3]
    m[1, 0, 0] = [2, 0]
    m[1, 1, 0] = [0, 1]
    Q = privq(n, r, m, cal)
    bonus = lambda k: 0.1 * 3 * math.sqrt(2 * cal.log_term / k)
    q1 = [min(1.0, 1.0 + bonus(2)), min(1.0, 0.0 + bonus(1))]
    assert Q[1, :, 0] == pytest.approx(q1)
    V1 = np.array(q1)
    assert Q[0, 0, 0] == pytest.approx(min(2.0, 0.5 + (1 * V1[0] + 3 * V1[1]) / 4 + bonus(4)))
    assert Q[0, 1, 0] == 2.0  # unvisited: maximal optimism


def test_theory_constants_stay_optimistic_where_counts_are_below_2E():
    cal = calibrate(2, 2, 3, 100, epsilon=1.0, constants=THEORY)
    n = np.full((3, 2, 2), 1.9 * cal.E)
    Q = privq(n, n * 0.5, np.ones((3, 2, 2, 2)) * n[..., None] / 2, cal)
    assert (Q == np.array([3.0, 2.0, 1.0])[:, None, None]).all()


def test_epsilon_infinity_equals_the_non_private_twin():
    """PUCB(eps = inf) is UCBVI; PUCB at a huge eps acts identically too (noise ~1e-9 changes no argmax)."""
    env = make_env("random-tabular", horizon=5, states=4, actions=3, world_key=9)
    K = 150
    runs = []
    for agent in (UCBVI(4, 3, 5, K, rng=np.random.default_rng(3)),
                  PUCB(4, 3, 5, K, epsilon=math.inf, rng=np.random.default_rng(3)),
                  PUCB(4, 3, 5, K, epsilon=1e13, rng=np.random.default_rng(3))):
        runs.append(run_episodes(env, agent, K, record=True))
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].actions, other.actions)
        np.testing.assert_allclose(runs[0].regret, other.regret, atol=1e-12)
    assert runs[0].regret[-50:].mean() < runs[0].regret[:50].mean()  # it learns


def test_same_keys_identical_runs_and_one_user_replaced_changes_only_that_user():
    """Same keys and agent seed: identical. Replace user j: users < j see the same actions and
    states; user j's own data differs; later users differ only through the released counters."""
    env = make_env("riverswim", horizon=6, world_key=4)
    K, j = 60, 25

    def play(e):
        return run_episodes(e, PUCB(6, 2, 6, K, epsilon=2.0, rng=np.random.default_rng(8)), K, record=True)

    a, b = play(env), play(env)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.regret, b.regret)
    nb = env.with_user_key(j, 123456789)
    c = play(nb)
    np.testing.assert_array_equal(a.actions[:j], c.actions[:j])
    np.testing.assert_array_equal(a.states[:j], c.states[:j])
    # user j's own response tree changed: her response to the same actions differs
    assert not np.array_equal(env.respond(j, a.actions[j])[0], nb.respond(j, a.actions[j])[0])
    # every other user's data (response tree) is unchanged
    for k in list(range(j)) + list(range(j + 1, K)):
        np.testing.assert_array_equal(env.respond(k, c.actions[k])[0], nb.respond(k, c.actions[k])[0])


def test_bad_budgets_refused():
    with pytest.raises(UsageError, match="exactly one"):
        PUCB(2, 2, 2, 10, epsilon=1.0, rho=1.0, rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="> 0"):
        PUCB(2, 2, 2, 10, epsilon=-1.0, rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="constants"):
        PUCB(2, 2, 2, 10, epsilon=1.0, constants="fast", rng=np.random.default_rng(0))
    assert FAMILIES == ("visits", "rewards", "transitions")
