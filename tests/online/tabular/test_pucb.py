"""PUCB: sensitivity of its counter families, releases, the non-private twin, neighbouring runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.online.tabular.pucb_constants import PRACTICAL, THEORY, calibrate
from privaudit.online.counters import tree_error_bound, tree_levels
from privaudit.online.env import make_env
from privaudit.online.protocol import run_episodes
from privaudit.online.tabular.pucb import FAMILIES, PUCB, UCBVI, episode_increments, privq
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
    # consecutive releases differ in (almost) every counter (fresh noise even where the increment is
    # zero). The noise is integer (node scale b = 180 here), so a counter repeats its value with
    # probability below 1/b per release: pooled over all releases, far above 0.99 change
    for f in range(3):
        changed = np.mean([(a[f] != b[f]).mean() for a, b in zip(seen, seen[1:])])
        assert changed > 0.99
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
    """PUCB(eps = inf) is UCBVI; PUCB at a huge eps acts identically too.

    At eps = 240 * 2^12 the node scale is b = 2^-12 (visits, transitions: P(noise != 0) = 2 e^-4096 per
    draw) and 2^-4 lattice units for the rewards (P(noise != 0) < 2 e^-16 = 2.3e-7 per draw; about 9000
    draws, and a +-1 lattice unit, 1/256, would still rarely change an argmax): the exact discrete noise
    is zero, so the runs coincide. (A far larger eps leaves the exact sampler's range: refused.)"""
    env = make_env("random-tabular", horizon=5, states=4, actions=3, world_key=9)
    K = 150
    runs = []
    for agent in (UCBVI(4, 3, 5, K, rng=np.random.default_rng(3)),
                  PUCB(4, 3, 5, K, epsilon=math.inf, rng=np.random.default_rng(3)),
                  PUCB(4, 3, 5, K, epsilon=240.0 * 2 ** 12, rng=np.random.default_rng(3))):
        runs.append(run_episodes(env, agent, K, record=True))
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].actions, other.actions)
        np.testing.assert_allclose(runs[0].regret, other.regret, atol=1e-12)
    assert runs[0].regret[-50:].mean() < runs[0].regret[:50].mean()  # it learns
    with pytest.raises(UsageError, match="exact laplace sampler"):
        PUCB(4, 3, 5, K, epsilon=1e13, rng=np.random.default_rng(3))


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


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.05}])
def test_counters_are_integers_on_the_lattice_with_exact_noise(budget):
    """Visits and transitions are integers; reward sums are multiples of 2^-8 (the lattice), in real
    units; every counter draws exact discrete noise whose lattice scale is the real scale times 2^bits,
    and the events state noise 'exact' at the real scale (the same eps or rho)."""
    env = make_env("random-tabular", horizon=4, states=3, actions=2, world_key=2)
    K = 40
    ag = PUCB(3, 2, 4, K, rng=np.random.default_rng(5), **budget)
    run_episodes(env, ag, K)
    n, r, m = ag._released
    cal = ag.calibration_
    u = 2 ** cal.reward_bits
    assert 1 <= cal.reward_bits <= 8 and cal.scale * u <= 16384  # fast-path lattice scale
    np.testing.assert_array_equal(n, np.round(n))
    np.testing.assert_array_equal(m, np.round(m))
    np.testing.assert_array_equal(r * u, np.round(r * u))
    assert not np.array_equal(r, np.round(r))  # finer than integers
    for f, c in ag.counters_.items():
        assert c.noise == "exact" and c.mechanism == cal.mechanism
        assert c.scale == cal.scale * (u if f == "rewards" else 1)
        assert c._exact.dtype == np.int64
    assert all(e.noise == "exact" for e in ag.events_)
    if "rho" in budget:
        assert sum(event_rho(e) for e in ag.events_) == pytest.approx(0.05)


def test_rewards_rounded_to_the_grid_before_any_sum():
    zn, zr, zm = episode_increments(3, 2, 1, [0, 1, 0], [0, 0, 0], [0.3, 1.7, -0.2], [1, 0, 1])
    assert zr[0, 0, 0] == round(0.3 * 256) / 256 and zr[1, 1, 0] == 1.0 and zr[2, 0, 0] == 0.0


def test_reward_lattice_bits_and_unbiased_stochastic_rounding():
    """8 bits for small scales, coarser for wide ones (scale 2^bits stays <= 4096 for Laplace); the
    stochastic rounding is unbiased: mean of 200000 rounded 0.3 on the 2^-1 grid has sd
    0.5 sqrt(0.6 * 0.4 / 2e5) = 5.5e-4, tolerance 6 sd (false failure 2e-9)."""
    from privaudit.online.tabular.pucb_constants import reward_lattice_bits
    assert reward_lattice_bits("laplace", 1.0) == 8 and reward_lattice_bits("none", 0.0) == 8
    assert reward_lattice_bits("laplace", 360.0) == 3 and reward_lattice_bits("laplace", 1e5) == 0
    assert reward_lattice_bits("gaussian", 100.0) == 7
    rng = np.random.default_rng(4)
    n = 200_000
    z = np.zeros(n, dtype=np.int64)
    q = episode_increments(n, 1, 1, z, z, np.full(n, 0.3), z, reward_bits=1, rng=rng)[1].ravel()
    assert set(np.unique(q)) == {0.0, 0.5}
    assert abs(q.mean() - 0.3) < 6 * 0.5 * math.sqrt(0.6 * 0.4 / n)
    ends = episode_increments(2, 1, 1, [0, 0], [0, 0], [0.0, 1.0], [0, 0], reward_bits=0, rng=rng)[1]
    assert ends[0, 0, 0] == 0.0 and ends[1, 0, 0] == 1.0  # grid points stay put
