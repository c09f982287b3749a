"""The agent protocol of online exploration, and a runner that measures exact regret.

Every online algorithm (tabular PUCB / UCB-VI here, the linear explorers of
``privaudit.online.linear``) implements :class:`Agent`:

1. ``start_episode(k)``: user k arrives; the agent fixes the deterministic
   Markov policy pi_k it will follow for the whole episode. Under joint DP
   pi_k may depend on users 0..k-1 only through privatized releases
   (billboard model: Vietri et al. 2020, proof of Theorem 1; Hsu et al. 2016).
2. ``policy()``: that policy as a table of actions, shape (H, S), int.
3. ``act(h, s) -> a``: the action recommended to the user at step h in state s
   (must equal ``policy()[h, s]``; the runner checks it).
4. ``observe(h, s, a, r, s_next)``: the user's response.
5. ``end_episode()``: the agent updates its statistics (private counters).

:func:`run_episodes` plays users first_user..first_user+K-1 of an
:class:`~privaudit.online.env.EpisodicEnv` and returns the per-episode exact
regret V*_0(s_0^k) - V^{pi_k}_0(s_0^k) (0-based steps; the papers'
V*_1(s_1^k) - V^{pi_k}_1(s_1^k)) computed from the known MDP. Policies are
buffered in a fixed-size batch and evaluated together by one vectorised
backward induction, so the evaluation's memory does not grow with K;
consecutive episodes with the same policy share one evaluation.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.tabular import TabularMDP, value_iteration
from privaudit.online.env import EpisodicEnv

#: Memory allowed to one evaluation batch (the (B, S, S) gathered transitions and the
#: (B, H, S) policy tables), bytes; at most EVAL_MAX_SLOTS policies per batch.
EVAL_BATCH_BYTES = 16 * 2 ** 20
EVAL_MAX_SLOTS = 4096
#: User-steps (users of all runs times H + 1) played together by :func:`run_lockstep` at most: bounds
#: its trajectory arrays (24 bytes per user-step, about 50 MB); an agent cannot tell a batch handed over in parts.
STAGE_STEPS = 1 << 21


class Agent(abc.ABC):
    """An online agent: one deterministic Markov policy per episode.

    Subclasses implement :meth:`start_episode`, :meth:`observe`,
    :meth:`end_episode` and :meth:`policy`; :meth:`act` reads the policy
    table by default.
    """

    @abc.abstractmethod
    def start_episode(self, k: int) -> None:
        """User ``k`` arrives: fix this episode's policy (from released statistics only)."""

    @abc.abstractmethod
    def policy(self) -> np.ndarray:
        """This episode's policy, shape (H, S), integer actions in [0, A)."""

    def act(self, h: int, s: int) -> int:
        """The action at step ``h`` (0-based) in state ``s``."""
        return int(self.policy()[h, s])

    @abc.abstractmethod
    def observe(self, h: int, s: int, a: int, r: float, s_next: int) -> None:
        """The user's response at step ``h``: reward ``r`` in [0, 1] and next state."""

    @abc.abstractmethod
    def end_episode(self) -> None:
        """The episode is over: update (and release) the statistics."""

    def exact_sampler_paths(self) -> frozenset:
        """The exact samplers of this agent's ``"exact"`` noise (``samplers.noise_statement``'s ``paths``).

        The release manifest names them (``guarantee.sampler``). Default
        ``{"table"}`` (``samplers.exact_noise``); agents drawing otherwise
        override it.
        """
        return frozenset({"table"})

    #: True when :meth:`act` always returns ``policy()[h, s]`` (the default :meth:`act` does), so
    #: that :func:`run_episodes` may play the episode in one ``env.rollout`` call and hand the
    #: trajectory over with :meth:`observe_episode`.
    acts_by_policy = False

    def observe_episode(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The whole response of the user: states (H + 1,), actions (H,), rewards (H,).

        Default: :meth:`observe` step by step (the same calls the step loop makes).
        """
        for h in range(len(actions)):
            self.observe(h, int(states[h]), int(actions[h]), float(rewards[h]), int(states[h + 1]))


@dataclass(frozen=True, repr=False)
class RunResult:
    """What one run of K episodes produced.

    Attributes
    ----------
    regret : ndarray, shape (K,), float64
        V*_0(s_0^k) - V^{pi_k}_0(s_0^k), exact (reward units, in [0, H]).
    initial_state : ndarray, shape (K,), int64
        s_0^k.
    realised_return : ndarray, shape (K,), float64
        Sum of the rewards user k received.
    actions : ndarray, shape (K, H), int64, or None
        The actions recommended to each user (with ``record=True``): under
        JDP, the output that other users may see.
    states : ndarray, shape (K, H + 1), int64, or None
        s_0..s_H of each user (with ``record=True``).
    first_user : int
        Index of the first user played.
    """

    regret: np.ndarray
    initial_state: np.ndarray
    realised_return: np.ndarray
    actions: np.ndarray | None
    states: np.ndarray | None
    first_user: int

    def __repr__(self) -> str:
        return (f"RunResult(K={len(self.regret)}, first_user={self.first_user}, "
                f"recorded={self.actions is not None})")


class RegretEvaluator:
    """Exact per-episode regret of deterministic Markov policies, in batches.

    Parameters
    ----------
    mdp : TabularMDP
    n_episodes : int
        K, the length of the output arrays.
    batch_bytes : int
        Memory for one batch: B * (S * S float64 + H * S int32) bytes, B <= 4096.

    Notes
    -----
    Episodes are added in order; a run of consecutive episodes with the same
    policy is one *slot*. When B slots are pending they are evaluated by one
    backward induction over h, vectorised over (slot, s):
    V_h[b, s] = r_h(s, pi_b(h, s)) + sum_s' P_h(s' | s, pi_b(h, s)) V_{h+1}[b, s'].
    """

    def __init__(self, mdp: TabularMDP, n_episodes: int, batch_bytes: int = EVAL_BATCH_BYTES):
        self.mdp = mdp
        H, S = mdp.horizon, mdp.n_states
        self.batch = max(1, min(EVAL_MAX_SLOTS, int(batch_bytes) // (8 * S * S + 4 * H * S)))
        _, V, _ = value_iteration(mdp)
        self._v_star0 = V[0]
        self.regret = np.full(int(n_episodes), np.nan)
        self._tables = np.empty((self.batch, H, S), dtype=np.int32)
        self._starts: list[int] = []  # first episode of each pending slot
        self._s0 = np.empty(int(n_episodes), dtype=np.int64)
        self._next = 0

    def add(self, pi: np.ndarray, s0: int) -> None:
        """Record the next episode: its policy (H, S) and initial state."""
        i = self._next
        n = len(self._starts)
        if n == 0 or not (pi == self._tables[n - 1]).all():    # same shape (H, S): checked by the runner
            if n == self.batch:
                self._flush(i)
                n = 0
            self._tables[n] = pi
            self._starts.append(i)
        self._s0[i] = s0
        self._next = i + 1

    def add_many(self, pi: np.ndarray, s0: np.ndarray) -> None:
        """Record the next n episodes, all with the policy ``pi`` (H, S): initial states ``s0`` (n,)."""
        n = len(s0)
        if n:
            self.add(pi, int(s0[0]))
            self._s0[self._next:self._next + n - 1] = s0[1:]
            self._next += n - 1

    def finish(self) -> np.ndarray:
        """Evaluate what is pending; returns ``regret`` (K,) (NaN where no episode was added)."""
        self._flush(self._next)
        return self.regret

    def _flush(self, end: int) -> None:
        n = len(self._starts)
        if n == 0:
            return
        mdp, pi = self.mdp, self._tables[:n]
        H, S = mdp.horizon, mdp.n_states
        rows = np.arange(S)[None, :]
        V = np.zeros((n, S))
        for h in range(H - 1, -1, -1):  # backward over steps; vectorised over (slot, state)
            a = pi[:, h, :]  # (n, S)
            V = mdp.expected_reward(h)[rows, a] + np.einsum("bst,bt->bs", mdp.transition(h)[rows, a], V)
        starts = np.asarray(self._starts + [end])
        slot = np.repeat(np.arange(n), np.diff(starts))
        s0 = self._s0[starts[0]:end]
        self.regret[starts[0]:end] = self._v_star0[s0] - V[slot, s0]
        self._starts = []


def run_lockstep(envs, agents, n_episodes: int, *, first_user: int = 0, record: bool = False,
                 progress: Callable[[int], None] | None = None, batch_bytes: int = EVAL_BATCH_BYTES
                 ) -> list[RunResult]:
    """R independent runs in lockstep: each agent plays users first_user .. first_user + K - 1 of its env.

    Every agent must share policies (:func:`shares_policies`). At each stage the runner asks each
    agent for its policy and how many users get it (``policy_users``), takes the smallest count n
    (at most :data:`STAGE_STEPS` / (R (H + 1))), plays those n users of all R runs along a leading
    axis of R x n users (:func:`stage_rollout`: ``EpisodicEnv.rollout_users``, episodes shared by runs
    that agree) and hands each agent its own n trajectories (``observe_users``). Releases and planning stay per agent (each with its own noise and its own privacy events), and
    an agent cannot tell a block of n users from n single users, so run r's result EQUALS
    ``run_episodes(envs[r], agents[r], K)`` (tested).

    Parameters
    ----------
    envs : sequence of EpisodicEnv, length R (or 1: shared)
        Environments over the same MDP (their user keys may differ: independent user streams).
    agents : sequence of Agent, length R
        Independent agents (distinct objects; their noise generators independent).
    n_episodes, first_user, record, progress, batch_bytes
        As :func:`run_episodes` (``progress`` counts the users of all runs).

    Returns
    -------
    list of RunResult, one per run

    Raises
    ------
    UsageError
        An agent that does not share policies, environments over different MDPs, a policy of the
        wrong shape, ``n_episodes`` < 1.
    """
    K, R = int(n_episodes), len(agents)
    envs = list(envs) * R if len(envs) == 1 else list(envs)
    if K < 1 or R < 1 or len(envs) != R or len({id(a) for a in agents}) != R:
        raise UsageError(f"lockstep runs need K >= 1 and one distinct agent per environment. Got K={n_episodes}, "
                         f"{R} agents, {len(envs)} environments.")
    bad = [type(a).__name__ for a in agents if not shares_policies(a)]
    if bad or any(e.mdp is not envs[0].mdp and not _same_tables(e, envs[0]) for e in envs):
        raise UsageError(f"lockstep runs need agents that share policies (policy_users, observe_users) and "
                         f"environments over one MDP. Got agents {sorted(set(bad))} that do not share.")
    H, S, A = envs[0].horizon, envs[0].n_states, envs[0].n_actions
    evs = [RegretEvaluator(e.mdp, K, batch_bytes) for e in envs]
    initial = np.empty((R, K), dtype=np.int64)
    returns = np.empty((R, K))
    rec = [(np.empty((K, H), dtype=np.int64), np.empty((K, H + 1), dtype=np.int64)) for _ in range(R)] if record else []
    i = 0
    while i < K:   # stages are sequential: a stage's policies depend on the releases before it
        n = min(K - i, max(1, STAGE_STEPS // (R * (H + 1))))
        for ag in agents:
            ag.start_episode(first_user + i)
            n = min(n, ag.policy_users())
        if n < 1:
            raise UsageError(f"an agent announced {n} users for its current policy; it must be at least 1.")
        pis = np.stack([declared_policy(ag, H, S, A) for ag in agents])
        st, ac, rw = stage_rollout(envs, np.arange(first_user + i, first_user + i + n), pis)
        total = np.zeros(R * n)
        for h in range(H):       # left to right from 0.0, as the step loop adds
            total += rw[:, h]
        for r, ag in enumerate(agents):
            rows = slice(r * n, (r + 1) * n)
            initial[r, i:i + n], returns[r, i:i + n] = st[rows, 0], total[rows]
            evs[r].add_many(pis[r], st[rows, 0])
            if record:
                rec[r][0][i:i + n], rec[r][1][i:i + n] = ac[rows], st[rows]
            ag.observe_users(st[rows], ac[rows], rw[rows])
        i += n
        if progress is not None:
            progress(R * n)
    return [RunResult(evs[r].finish(), initial[r], returns[r], rec[r][0] if record else None,
                      rec[r][1] if record else None, int(first_user)) for r in range(R)]


def stage_rollout(envs, users: np.ndarray, pis: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same users in R runs, run r under ``pis[r]``: rows r * n .. (r + 1) * n - 1 are run r's.

    Runs on the same environment object share their users, and a user's episode is a function of
    her key and of the actions taken along it. So the runner plays run 0's policy once, and a run
    whose policy takes run 0's action at every (h, s_h) that user visited under run 0's policy has
    that user's very episode (by induction over h: the same state, the same action, the same block);
    only the other (run, user) pairs are played again, in one call. Converged runs (late batches)
    therefore cost one rollout between them. Returns states (R n, H + 1), actions (R n, H),
    rewards (R n, H), equal to ``envs[r].rollout_users(users, pis[r])`` stacked (tested).
    """
    R, n, H = len(pis), len(users), pis.shape[1]
    st0, ac0, rw0 = envs[0].rollout_users(users, pis[0])
    st, ac, rw = (np.empty((R,) + x.shape, dtype=x.dtype) for x in (st0, ac0, rw0))
    st[0], ac[0], rw[0] = st0, ac0, rw0
    h = np.arange(H)
    todo = []
    for r in range(1, R):
        if envs[r] is envs[0]:
            same = (pis[r][h, st0[:, :H]] == ac0).all(axis=1)
            st[r][same], ac[r][same], rw[r][same] = st0[same], ac0[same], rw0[same]
        else:
            same = np.zeros(n, dtype=bool)
        todo.append((r, np.flatnonzero(~same)))
    if any(len(idx) for _, idx in todo):
        keys = np.concatenate([envs[r].keys(users[idx]) for r, idx in todo])
        which = np.concatenate([np.full(len(idx), r) for r, idx in todo])
        s2, a2, r2 = envs[0].rollout_users(np.concatenate([users[idx] for _, idx in todo]), pis, which, keys=keys)
        at = 0
        for r, idx in todo:
            st[r][idx], ac[r][idx], rw[r][idx] = s2[at:at + len(idx)], a2[at:at + len(idx)], r2[at:at + len(idx)]
            at += len(idx)
    return st.reshape(R * n, -1), ac.reshape(R * n, -1), rw.reshape(R * n, -1)


def _same_tables(a: EpisodicEnv, b: EpisodicEnv) -> bool:
    """Two environments over equal MDPs (transition and reward tables, initial law)."""
    m, n = a.mdp, b.mdp
    return (m.horizon == n.horizon and np.array_equal(m.P, n.P) and np.array_equal(m.r, n.r)
            and np.array_equal(m.d0, n.d0))


def shares_policies(agent: Agent) -> bool:
    """True when the agent serves runs of users one policy it announces (``policy_users``, ``observe_users``).

    Such an agent (a batched explorer) acts by its declared policy and says how many users from the
    current one on get it; :func:`run_episodes` then plays them together (``EpisodicEnv.rollout_users``).
    """
    return bool(getattr(agent, "acts_by_policy", False)) and callable(getattr(agent, "policy_users", None))


def declared_policy(agent: Agent, H: int, S: int, A: int) -> np.ndarray:
    """The agent's current policy, checked: shape (H, S), integer actions in [0, A).

    Raises
    ------
    UsageError
        Another shape or dtype, or an action outside [0, A).
    """
    pi = np.asarray(agent.policy())
    if pi.shape != (H, S) or not np.issubdtype(pi.dtype, np.integer) or pi.min() < 0 or pi.max() >= A:
        raise UsageError(f"agent {type(agent).__name__} declared a policy of shape {pi.shape}, dtype "
                         f"{pi.dtype}; it must be ({H}, {S}) integers in [0, {A}).")
    return pi


def run_episodes(env: EpisodicEnv, agent: Agent, n_episodes: int, *, first_user: int = 0,
                 record: bool = False, progress: Callable[[int], None] | None = None,
                 batch_bytes: int = EVAL_BATCH_BYTES) -> RunResult:
    """Play users first_user .. first_user + K - 1 and measure exact regret.

    An agent that shares policies over runs of users (:func:`shares_policies`: the batched
    explorers) is played a block of users at a time (:func:`run_lockstep` with R = 1, one
    ``EpisodicEnv.rollout_users`` call per block); any other user by user. Both give the same
    result for the same agent (tested).

    Parameters
    ----------
    env : EpisodicEnv
    agent : Agent
    n_episodes : int
        K >= 1.
    first_user : int, default 0
    record : bool, default False
        Also return every user's actions (K, H) and states (K, H + 1).
    progress : callable, optional
        Called with the number of episodes done since the last call (e.g.
        ``tqdm.update``), every 1% of the run (an agent that shares policies,
        :func:`shares_policies`: after each block of users played together).
    batch_bytes : int
        Memory of one regret-evaluation batch (see :class:`RegretEvaluator`).

    Returns
    -------
    RunResult

    Raises
    ------
    UsageError
        ``n_episodes`` < 1, or the agent acts off the policy it declared, or
        declares a policy of the wrong shape or with actions outside [0, A).
    """
    K = int(n_episodes)
    if K < 1:
        raise UsageError(f"`n_episodes` must be >= 1. Got {n_episodes}.")
    if shares_policies(agent):
        (res,) = run_lockstep([env], [agent], K, first_user=first_user, record=record, progress=progress,
                              batch_bytes=batch_bytes)
        return res
    H, S, A = env.horizon, env.n_states, env.n_actions
    ev = RegretEvaluator(env.mdp, K, batch_bytes)
    initial = np.empty(K, dtype=np.int64)
    returns = np.empty(K)
    actions = np.empty((K, H), dtype=np.int64) if record else None
    states = np.empty((K, H + 1), dtype=np.int64) if record else None
    tick = max(1, K // 100)
    fast = bool(getattr(agent, "acts_by_policy", False))
    for i in range(K):  # episodes are sequential: episode k's policy depends on releases after k - 1
        k = first_user + i
        agent.start_episode(k)
        pi = declared_policy(agent, H, S, A)
        if fast:   # the agent acts by its declared policy: one call plays the episode (same responses)
            st, ac, rw = env.rollout(k, pi)
            initial[i] = st[0]
            ev.add(pi, int(st[0]))
            agent.observe_episode(st, ac, rw)
            if record:
                actions[i], states[i] = ac, st
            returns[i] = sum(rw.tolist())   # left to right from 0.0, as the step loop adds
            agent.end_episode()
            if progress is not None and ((i + 1) % tick == 0 or i + 1 == K):
                progress(tick if (i + 1) % tick == 0 else (i + 1) % tick)
            continue
        s = env.reset(k)
        initial[i] = s
        ev.add(pi, s)
        total = 0.0
        for h in range(H):
            a = agent.act(h, s)
            if a != pi[h, s]:
                raise UsageError(f"agent {type(agent).__name__} acted {a} at (h={h}, s={s}) but its declared "
                                 f"policy says {int(pi[h, s])}; the regret would be wrong.")
            r, s_next = env.step(a)
            agent.observe(h, s, a, r, s_next)
            if record:
                actions[i, h] = a
                states[i, h] = s
            total += r
            s = s_next
        if record:
            states[i, H] = s
        returns[i] = total
        agent.end_episode()
        if progress is not None and ((i + 1) % tick == 0 or i + 1 == K):
            progress(tick if (i + 1) % tick == 0 else (i + 1) % tick)
    return RunResult(ev.finish(), initial, returns, actions, states, int(first_user))
