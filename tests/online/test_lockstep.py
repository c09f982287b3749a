"""Vectorised rollouts and lockstep runs (issue 31 item 5): exactly the results of the one-user, one-run paths."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.online.env import make_env
from privaudit.online.explore import run_explore, validate_budget
from privaudit.online import protocol
from privaudit.online.lockstep import explore_lockstep
from privaudit.online.protocol import run_episodes, run_lockstep, stage_rollout
from privaudit.online.rollout import philox4x64
from privaudit.online.tabular.batched_ucb import BatchedUCBVI
from privaudit.privacy.budget import resolve_budget

RHO_EPS1 = resolve_budget(epsilon=1.0, delta=1e-6).rho


class OneUserAtATime(BatchedUCBVI):
    """The same explorer without ``policy_users``: ``run_episodes`` plays it user by user (``env.rollout``)."""

    policy_users = None


def _agent(env, K, seed, cls=BatchedUCBVI, rho=RHO_EPS1):
    R = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
    return cls(R, env.horizon, env.n_states, K, rho=rho, stationary=env.mdp.stationary,
               rng=np.random.default_rng(seed))


def _same(a, b):
    for f in ("regret", "initial_state", "realised_return", "actions", "states"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None and y is None) or np.array_equal(x, y), f


def test_philox_blocks_equal_numpys_including_the_counter_carry():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2 ** 64, (40, 2), dtype=np.uint64, endpoint=False)
    ctr = rng.integers(0, 2 ** 64, (40, 4), dtype=np.uint64, endpoint=False)
    ctr[0] = 2 ** 64 - 1                  # the increment carries through every word
    ctr[1, :2] = 2 ** 64 - 1              # ... through two words
    ctr[2] = 0
    out = philox4x64(keys, ctr)
    bg = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
    for i in range(len(keys)):
        st = bg.state
        st["state"], st["buffer_pos"] = {"counter": ctr[i], "key": keys[i]}, 4
        bg.state = st
        assert np.array_equal(bg.random_raw(4), out[i]), i


@pytest.mark.parametrize("name,kw", [("riverswim", {}), ("random-tabular", {}), ("icu-sepsis", {"horizon": 20})])
def test_rollout_users_equals_rollout_of_each_user(name, kw):
    # per-transition rewards (ICU-Sepsis), 716 states (bisection depth 10), a replaced user key
    env = make_env(name, **kw).with_user_key(3, 2 ** 100 + 5)
    rng = np.random.default_rng(1)
    pis = rng.integers(0, env.n_actions, (3, env.horizon, env.n_states))
    users = np.arange(60) + 2
    which = rng.integers(0, 3, len(users))
    st, ac, rw = env.rollout_users(users, pis, which)
    for i, k in enumerate(users):
        s1, a1, r1 = env.rollout(int(k), pis[which[i]])
        assert np.array_equal(s1, st[i]) and np.array_equal(a1, ac[i]) and np.array_equal(r1, rw[i]), (name, k)
    with pytest.raises(UsageError, match="pis"):
        env.rollout_users(users, np.full((env.horizon, env.n_states), env.n_actions))
    with pytest.raises(UsageError, match="which"):
        env.rollout_users(users, pis, np.full(len(users), 3))


def test_stage_rollout_reuses_only_episodes_that_agree_with_run_0():
    # run 1 = run 0's policy; run 2 differs at one (h, s) some users visit; run 3 everywhere; run 4 on another
    # environment object (its users are not assumed equal, even with the same keys)
    env = make_env("random-tabular")
    other = make_env("random-tabular", world_key=9)
    rng = np.random.default_rng(3)
    p0 = rng.integers(0, env.n_actions, (env.horizon, env.n_states))
    p2 = p0.copy()
    p2[2, 4] = (p0[2, 4] + 1) % env.n_actions
    pis = np.stack([p0, p0, p2, (p0 + 1) % env.n_actions, p0])
    users = np.arange(500) + 40
    envs = [env, env, env, env, other]
    st, ac, rw = stage_rollout(envs, users, pis)
    for r in range(5):
        s1, a1, r1 = envs[r].rollout_users(users, pis[r])
        rows = slice(r * 500, (r + 1) * 500)
        assert np.array_equal(st[rows], s1) and np.array_equal(ac[rows], a1) and np.array_equal(rw[rows], r1), r
    visits = (st[:500, 2] == 4).sum()
    assert 0 < visits < 500                      # the changed entry matters to some users, not to all
    assert not np.array_equal(st[1000:1500], st[:500])


def test_batched_explorer_played_by_batches_equals_user_by_user():
    env = make_env("riverswim", horizon=8)
    K = 3000
    fast, slow = _agent(env, K, 4), _agent(env, K, 4, OneUserAtATime)
    _same(run_episodes(env, fast, K, record=True), run_episodes(env, slow, K, record=True))
    assert np.array_equal(fast.released_, slow.released_) and fast.n_released == slow.n_released == len(fast.ends_)
    assert np.array_equal(fast.policy(), slow.policy())


def test_lockstep_seeds_and_budgets_equal_separate_runs():
    env = make_env("riverswim", horizon=10)
    K, algo = 4000, "dp-ucbvi-batched"
    budgets = [validate_budget(algo, None, RHO_EPS1, 1e-6), None, validate_budget(algo, None, 4 * RHO_EPS1, 1e-6)]
    seeds = [11, 12, 13]
    ticks = []
    runs = explore_lockstep([env], algo, K, budgets, seeds=seeds, progress=ticks.append)
    assert sum(ticks) == 3 * K
    for (ag, res), b, s in zip(runs, budgets, seeds):
        alone, res1 = run_explore(env, algo, K, b, seed=s)
        _same(res, res1)
        assert np.array_equal(ag.released_, alone.released_) and ag.sigma_ == alone.sigma_
        assert [e.sigma for e in ag.events_] == [e.sigma for e in alone.events_]   # per-run accounting
    # each run has its own noise: the two private runs' released counts differ beyond their shared data
    assert runs[0][0].sigma_ > runs[2][0].sigma_ > runs[1][0].sigma_ == 0
    assert not np.array_equal(runs[0][0].released_ - runs[1][0].released_,
                              runs[2][0].released_ - runs[1][0].released_)


def test_lockstep_independent_user_streams_equal_separate_runs(monkeypatch):
    envs = [make_env("random-tabular", world_key=w) for w in (0, 5)]
    K = 1500
    agents = [_agent(e, K, 7) for e in envs]
    monkeypatch.setattr(protocol, "STAGE_STEPS", 2 * 32 * 11)      # batches handed over in parts of 32 users
    both = run_lockstep(envs, agents, K, first_user=100, record=True)
    for e, res in zip(envs, both):
        _same(res, run_episodes(e, _agent(e, K, 7), K, first_user=100, record=True))
    assert not np.array_equal(both[0].states, both[1].states)


def test_lockstep_refuses_what_it_cannot_play_together():
    env = make_env("riverswim", horizon=4)
    with pytest.raises(UsageError, match="seeds must differ"):
        explore_lockstep([env], "dp-ucbvi-batched", 100, [None], seeds=[1, 1])
    with pytest.raises(UsageError, match="share policies"):
        explore_lockstep([env], "pucb", 100, [validate_budget("pucb", 1.0, None, None)], seeds=[1, 2])
    with pytest.raises(UsageError, match="one MDP"):
        run_lockstep([env, make_env("riverswim", horizon=5)], [_agent(env, 10, 0), _agent(env, 10, 1)], 10)
    with pytest.raises(UsageError, match="distinct agent"):
        ag = _agent(env, 10, 0)
        run_lockstep([env], [ag, ag], 10)
    ag = _agent(env, 100, 0)
    ag.start_episode(0)
    st, ac, rw = env.rollout_users(np.arange(ag.policy_users() + 1), ag.policy())
    with pytest.raises(UsageError, match="places left"):
        ag.observe_users(st, ac, rw)
