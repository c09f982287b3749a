"""Episodic environments (users as response trees) and the regret runner."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.mdp.riverswim import riverswim_mdp
from privaudit.mdp.tabular import TabularMDP, policy_values, value_iteration
from privaudit.online.env import EpisodicEnv, make_env
from privaudit.online.protocol import Agent, RegretEvaluator, run_episodes


class FixedAgent(Agent):
    """Plays a fixed sequence of policies (one per episode, cycling)."""

    def __init__(self, policies):
        self.policies = policies
        self.k = None
        self.seen = []

    def start_episode(self, k):
        self.k = k
        self.pi = self.policies[k % len(self.policies)]

    def policy(self):
        return self.pi

    def observe(self, h, s, a, r, s_next):
        self.seen.append((self.k, h, s, a, r, s_next))

    def end_episode(self):
        pass


def _random_policies(env, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, env.n_actions, size=(env.horizon, env.n_states)) for _ in range(n)]


def test_same_keys_same_responses_and_one_user_replaced():
    env = make_env("random-tabular", world_key=7)
    acts = np.random.default_rng(1).integers(0, 5, size=(6, 10))
    base = [env.respond(k, acts[k]) for k in range(6)]
    again = [make_env("random-tabular", world_key=7).respond(k, acts[k]) for k in range(6)]
    for (s1, r1), (s2, r2) in zip(base, again):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(r1, r2)
    nb = env.with_user_key(3, 2 ** 100 + 5)
    diff = [not np.array_equal(nb.respond(k, acts[k])[0], base[k][0]) for k in range(6)]
    assert diff == [False, False, False, True, False, False]


def test_response_depends_on_action_history_only_through_the_tree():
    """Two action sequences sharing a prefix share the responses along it."""
    env = make_env("random-tabular")
    a = np.zeros(10, dtype=int)
    b = a.copy()
    b[6] = 3
    sa, ra = env.respond(2, a)
    sb, rb = env.respond(2, b)
    np.testing.assert_array_equal(sa[:7], sb[:7])
    np.testing.assert_array_equal(ra[:6], rb[:6])


def test_transition_frequencies_match_P():
    """Empirical next-state frequencies over many users match P_h(. | s, a).

    Chi-square over the S outcomes of one (h, s, a) cell, 20000 users; with
    the cell forced by a fixed action sequence from the fixed start of
    RiverSwim, the test fails with probability 1e-6 under the null.
    """
    from scipy import stats
    env = make_env("riverswim", horizon=2)
    n = 20000
    nxt = np.array([env.respond(k, [1, 1])[0][1] for k in range(n)])  # s_1 after "right" from s_0 = 0
    p = env.mdp.transition(0)[0, 1]
    counts = np.bincount(nxt, minlength=env.n_states)
    support = p > 0
    assert counts[~support].sum() == 0
    chi2 = ((counts[support] - n * p[support]) ** 2 / (n * p[support])).sum()
    assert chi2 < stats.chi2.isf(1e-6, support.sum() - 1)


def test_initial_state_frequencies_match_d0():
    """Chi-square of s_0 over 20000 users of the random MDP (false failure 1e-6)."""
    from scipy import stats
    env = make_env("random-tabular")
    n = 20000
    s0 = np.array([env.reset(k) for k in range(n)])
    counts = np.bincount(s0, minlength=env.n_states)
    e = n * env.mdp.d0
    assert ((counts - e) ** 2 / e).sum() < stats.chi2.isf(1e-6, env.n_states - 1)


def test_rewards_outside_unit_interval_refused():
    P = np.full((2, 2, 2), 0.5)
    mdp = TabularMDP(P=P, r=np.array([[0.0, 2.0], [0.0, 0.0]]), d0=np.array([1.0, 0.0]), horizon=3)
    with pytest.raises(UsageError, match=r"\[0, 1\]"):
        EpisodicEnv(mdp)


def test_make_env_options_and_features():
    assert make_env("synthetic-linear").phi.shape == (2, 100, 10)
    assert np.linalg.norm(make_env("synthetic-linear").phi, axis=-1).max() <= 1 + 1e-12
    assert make_env("riverswim").phi is None
    with pytest.raises(UsageError, match="`actions` does not apply"):
        make_env("riverswim", actions=3)
    with pytest.raises(UsageError, match="unknown environment"):
        make_env("nope")


def test_riverswim_optimal_policy_swims_right():
    mdp = riverswim_mdp(horizon=20)
    pi, V, v = value_iteration(mdp)
    assert (pi[:10, :, 1] == 1).all()  # far from the end every state swims right
    assert 0 < v < 20


def test_regret_matches_slow_reference_across_batches():
    """Batched, deduplicated evaluation equals per-episode backward induction."""
    env = make_env("random-tabular", world_key=3)
    pols = _random_policies(env, 3, 0)
    seq = [pols[0]] * 3 + [pols[1]] + [pols[2]] * 2 + [pols[0]]  # runs of equal policies
    agent = FixedAgent(seq)
    S, H = env.n_states, env.horizon
    res = run_episodes(env, agent, 7 * 5, batch_bytes=2 * (8 * S * S + 4 * H * S))  # 2 slots per batch
    _, Vstar, _ = value_iteration(env.mdp)
    S, A, H = env.n_states, env.n_actions, env.horizon
    for i in range(35):
        onehot = np.zeros((H, S, A))
        pi = seq[i % 7]
        onehot[np.arange(H)[:, None], np.arange(S)[None, :], pi] = 1
        V = policy_values(env.mdp, onehot)
        s0 = res.initial_state[i]
        assert res.regret[i] == pytest.approx(Vstar[0, s0] - V[0, s0], abs=1e-12)
    assert (res.regret >= -1e-12).all()


def test_runner_records_what_users_saw_and_rejects_off_policy_agents():
    env = make_env("riverswim", horizon=5)
    agent = FixedAgent(_random_policies(env, 2, 4))
    res = run_episodes(env, agent, 4, record=True)
    for k in range(4):
        s, r = env.respond(k, res.actions[k])
        np.testing.assert_array_equal(s, res.states[k])
        assert r.sum() == pytest.approx(res.realised_return[k])

    class Liar(FixedAgent):
        def act(self, h, s):
            return 1 - int(self.pi[h, s])

    with pytest.raises(UsageError, match="declared"):
        run_episodes(env, Liar(_random_policies(env, 1, 0)), 1)


def test_evaluator_memory_is_bounded():
    ev = RegretEvaluator(make_env("random-tabular").mdp, 10_000, batch_bytes=4 * (8 * 100 + 4 * 100))
    assert ev.batch == 4 and ev._tables.shape[0] == 4
    big = RegretEvaluator(make_env("random-tabular").mdp, 1000)
    assert big._tables.nbytes <= 16 * 2 ** 20 and big.batch <= 4096


def test_rollout_equals_reset_and_steps_and_the_fast_runner_equals_the_step_loop():
    """env.rollout(k, pi) returns what reset(k) + step(pi[h, s]) return (RiverSwim, the random MDP and the
    synthetic linear MDP: shared and per-step transitions); an agent that acts by its policy
    (acts_by_policy = True) gets the same run from run_episodes' rollout path as from the step loop:
    regret, initial states, returns, recorded actions and states, and the observed responses."""
    for name, kw in (("riverswim", {"horizon": 7}), ("random-tabular", {}), ("synthetic-linear", {})):
        env = make_env(name, world_key=5, **kw)
        for k, pi in enumerate(_random_policies(env, 4, 9)):
            st, ac, rw = env.rollout(k, pi)
            s = env.reset(k)
            assert st[0] == s
            for h in range(env.horizon):
                assert ac[h] == pi[h, s]
                r, s = env.step(int(ac[h]))
                assert (r, s) == (rw[h], st[h + 1])
        pols = _random_policies(env, 3, 1)

        class ByPolicy(FixedAgent):
            acts_by_policy = True

        slow, fast = FixedAgent(pols), ByPolicy(pols)
        a = run_episodes(env, slow, 9, record=True)
        b = run_episodes(env, fast, 9, record=True)
        for f in ("regret", "initial_state", "realised_return", "actions", "states"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert slow.seen == fast.seen
    with pytest.raises(UsageError, match="pi"):
        env.rollout(0, np.full((env.horizon, env.n_states), env.n_actions))
    with pytest.raises(UsageError, match="pi"):
        env.rollout(0, np.zeros((env.horizon + 1, env.n_states), dtype=int))
