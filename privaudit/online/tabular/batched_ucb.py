"""Batched DP-UCBVI: a tabular explorer that learns under (1, 1e-6)-JDP (docs/online.md, "Batched DP-UCBVI").

The users are cut into public geometric batches (sizes ``first_batch * growth^j``,
fixed by K alone). During batch j the agent plays one policy, computed from the
released counts of batches 0..j-1; at the end of batch j it releases the
transition counts of batch j's users only, each cell plus fresh exact discrete
Gaussian noise, and adds them to the running sums. Every user is in exactly one
batch and every batch's release reads only its own users, so the releases compose
in parallel: the whole run costs the zCDP budget rho of one release per user
(billboard lemma, Hsu et al. 2016 as used by Vietri et al. 2020: the policy of a
user is a function of earlier batches' releases and of data-independent coins).

One counter family: the transition counts m(s, a, s'), pooled over the step h
when the simulator is stationary (a public fact), else per h. Visit counts are
their sums over s' (no second family) and the rewards are public (the
environment's reward function, :func:`public_reward`: r_h(s, a), or r(s, a, s')
when the reward depends on the next state, never E[r | s, a] then): neither costs budget. Pooled, a user may visit a
pair (s, a) many times; only her first ``per_user_cap`` visits of each pair enter
the counts (the later ones are dropped, which keeps the transitions kept an
unbiased sample: each is drawn from P(. | s, a) given the past), so her count
vector x has sum_{s,a} (sum_{s'} x)^2 <= floor(H / c) c^2 + (H mod c)^2 and one
user's replacement moves it by l2 <= sqrt(2) times the square root of that.

Planning (post-processing of the releases): the noisy counts of each (s, a) are
clipped at 0 and projected onto the simplex of the noisy visit count
n~(s, a) = sum_{s'} m~(s, a, s') (``privaudit.privacy.projection.project_counts``,
Qiao & Wang (2023), eq. (2), with E = 0); optimistic backward induction with the
Bernstein bonus of UCB-VI (Azar, Osband & Munos 2017, UCB-VI-BF, its first two terms,
the second with the practical weight :data:`SECOND_ORDER`) plus a Gaussian privacy
bonus z sd ||V_{h+1} - (P~ V_{h+1}) 1||_2 / n~, the high-probability size of what this
pair's summed noise (sd = sigma sqrt(releases)) does to P~ V_{h+1} (Qiao & Wang (2023b),
DP-UCBVI, use a worst-case l1 bound instead). Every Q is capped at
max_s' (r + V_{h+1}(s')) >= Q* (P V <= max V), and a pair whose n~ is within z sd sqrt(S)
of 0 gets that cap (the optimistic cap; before session 11, H - h). [D] docs/online.md, "Batched DP-UCBVI".
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.protocol import Agent
from privaudit.privacy.noise import gaussian_sigma
from privaudit.privacy.events import GaussianEvent, PrivacyUnit
from privaudit.privacy.projection import project_counts
from privaudit.privacy.samplers import exact_noise

#: Default failure probability of the confidence bounds (sampling and noise).
DEFAULT_BETA = 0.05
#: Default schedule: the first batch's size and the growth ratio of the sizes. Growth 1.25 (27 batches at
#: K = 10^5; 2.0 until session 13: 11), measured on RiverSwim at (1, 1e-6)-JDP, K = 10^5 (docs/online.md,
#: "Batched DP-UCBVI", "Measured"). The trade-off: smaller batches let the policy change sooner once the counts
#: clear the noise (with 2.0 the batch that first clears it could hold 16,000-32,000 users played at uniform
#: regret), but every batch adds a fresh draw to the running sums (noise sd sigma sqrt(j) after j releases)
#: and widens the union bound of z. Privacy is unchanged: each user's data enters one release only, so the
#: run costs rho whatever the number of batches (parallel composition; ``sigma_`` does not depend on it).
DEFAULT_FIRST_BATCH = 64
DEFAULT_GROWTH = 1.25
#: Practical weight of the Bernstein bonus's second-order term c2 L span / n (Azar et al. 2017: 7/3; 0.5
#: here, measured on RiverSwim: docs/online.md, "Batched DP-UCBVI"). The first-order term keeps its constant.
SECOND_ORDER = 0.5
#: Default per-user cap on the visits of one (s, a) that enter pooled counts.
DEFAULT_CAP = 2


def batch_ends(n_episodes: int, first_batch: int, growth: float) -> np.ndarray:
    """The public batch schedule: the end (exclusive) of each batch, shape (J,), int64, last = K.

    Batch j has ceil(first_batch * growth^j) users (the last one truncated at K);
    growth 1 gives equal batches, ``first_batch`` 1 and growth 1 an update after every user.

    Raises
    ------
    UsageError
        K < 1, ``first_batch`` < 1 or ``growth`` < 1.
    """
    K = int(n_episodes)
    if K < 1 or int(first_batch) < 1 or not (math.isfinite(growth) and growth >= 1.0):
        raise UsageError(f"the batch schedule needs K >= 1, `first_batch` >= 1 and `growth` >= 1. Got K={K}, "
                         f"first_batch={first_batch}, growth={growth}.")
    if growth == 1.0:
        return np.minimum(np.arange(1, -(-K // int(first_batch)) + 1, dtype=np.int64) * int(first_batch), K)
    ends, size, t = [], float(first_batch), 0
    while t < K:  # O(log K) batches
        t = min(K, t + math.ceil(size))
        ends.append(t)
        size *= growth
    return np.asarray(ends, dtype=np.int64)


def pooled_l2(horizon: int, cap: int) -> float:
    """Replacement l2 sensitivity of one user's pooled, capped transition counts.

    A user's count vector x >= 0 over (s, a, s') has at most ``cap`` entries on each (s, a) and
    H in all, so ||x||_2^2 <= sum_{(s, a)} n(s, a)^2 <= floor(H / c) c^2 + (H mod c)^2; two users'
    vectors are non-negative, so ||x - x'||_2^2 <= ||x||_2^2 + ||x'||_2^2 (docs/online.md).
    """
    H, c = int(horizon), int(cap)
    return math.sqrt(2.0 * ((H // c) * c * c + (H % c) ** 2))


def capped_counts(states: np.ndarray, actions: np.ndarray, S: int, A: int, *, pooled: bool,
                  cap: int) -> np.ndarray:
    """The transition counts of a batch of users, each user's contribution bounded.

    Parameters
    ----------
    states : ndarray, shape (B, H + 1), int
        s_0..s_H of each user of the batch.
    actions : ndarray, shape (B, H), int
    S, A : int
    pooled : bool
        True: counts over (s, a, s') summed over h, each user's first ``cap`` visits of each (s, a)
        only. False: counts over (h, s, a, s') (one entry per step and user: no cap needed).
    cap : int

    Returns
    -------
    ndarray, shape (S, A, S) (pooled) or (H, S, A, S), int64
    """
    B, H = actions.shape
    sa = states[:, :H].astype(np.int64) * A + actions
    cell = sa * S + states[:, 1:]
    if not pooled:
        cell = cell + np.arange(H, dtype=np.int64)[None, :] * (S * A * S)
        return np.bincount(cell.ravel(), minlength=H * S * A * S).reshape(H, S, A, S)
    key = (np.arange(B, dtype=np.int64)[:, None] * (S * A) + sa).ravel()
    order = np.argsort(key, kind="stable")            # by user and pair, steps in order within a group
    k = key[order]
    first = np.r_[True, k[1:] != k[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(k.size), 0))
    keep = np.empty(k.size, dtype=bool)
    keep[order] = (np.arange(k.size) - start) < cap   # rank of the visit within (user, pair)
    return np.bincount(cell.ravel()[keep], minlength=S * A * S).reshape(S, A, S)


class BatchedUCBVI(Agent):
    """Batched DP-UCBVI (module docstring); with ``rho`` = inf, its non-private twin (exact counts).

    Parameters
    ----------
    reward : array_like, shape (H, S, A) or (H or 1, S, A, S)
        The public reward in [0, 1]: r_h(s, a), or r(s, a, s') (:func:`public_reward`).
    horizon : int
        H.
    n_states : int
        S (A is read off ``reward``).
    n_episodes : int
        K, the public number of users (fixes the schedule and the union bounds).
    rho : float
        zCDP budget of the whole run (each user's data enters one release); ``math.inf``: no noise.
    stationary : bool
        Pool the counts over h (a public fact of the environment).
    per_user_cap : int
        c, the visits of one (s, a) per user that enter pooled counts (ignored unpooled).
    first_batch, growth : int, float
        The schedule (:func:`batch_ends`).
    beta : float
        Failure probability of the bonuses.
    rng : numpy.random.Generator
        Noise and tie-breaking (independent child streams).

    Attributes
    ----------
    ends_ : ndarray (J,)
        Batch ends (public).
    schedule_ : dict
        The public schedule, as the manifest records it: ``first_batch``, ``growth`` and the number of batches.
    sigma_ : float
        Noise sd per cell of one release (0 for the twin).
    l2_ : float
        Replacement l2 sensitivity of one user's counts.
    events_ : list of PrivacyEvent
        One Gaussian event (empty for the twin).
    released_ : ndarray
        Sum of the released (noisy) counts so far, (S, A, S) or (H, S, A, S).
    Q_ : ndarray (H, S, A)
        The optimistic Q of the current policy.
    bonus_terms_ : ndarray (H, 3, S, A)
        Diagnostics of the last plan: the Bernstein first- and second-order terms and the privacy term at
        the known pairs (NaN elsewhere); ``at_cap_`` (H, S, A): where Q sits at its optimistic cap.
    """

    acts_by_policy = True

    def __init__(self, reward, horizon: int, n_states: int, n_episodes: int, *, rho: float,
                 stationary: bool, per_user_cap: int = DEFAULT_CAP, first_batch: int = DEFAULT_FIRST_BATCH,
                 growth: float = DEFAULT_GROWTH, beta: float = DEFAULT_BETA, rng: np.random.Generator):
        H, S, K = int(horizon), int(n_states), int(n_episodes)
        R = np.asarray(reward, dtype=np.float64)
        ok = (R.ndim == 3 and R.shape[:2] == (H, S)) or (R.ndim == 4 and R.shape[0] in (1, H) and R.shape[1] == S
                                                         and R.shape[3] == S)
        if not ok or not np.isfinite(R).all() or R.min() < 0 or R.max() > 1:
            raise UsageError(f"`reward` must be an (H, S, A) = ({H}, {S}, A) table r_h(s, a), or an (H or 1, S, A, S) "
                             f"table r(s, a, s'), in [0, 1]. Got shape {R.shape}.")
        if not (rho > 0) or (isinstance(per_user_cap, bool) or int(per_user_cap) != per_user_cap
                             or per_user_cap < 1) or not 0 < beta < 1:
            raise UsageError(f"`rho` must be > 0, `per_user_cap` an integer >= 1 and `beta` in (0, 1). Got "
                             f"rho={rho}, per_user_cap={per_user_cap}, beta={beta}.")
        A = R.shape[2]
        self.H, self.S, self.A, self.K, self.R = H, S, A, K, R
        self.pooled, self.cap, self.rho, self.beta = bool(stationary), int(per_user_cap), float(rho), float(beta)
        self.ends_ = batch_ends(K, first_batch, growth)
        self.schedule_ = {"first_batch": int(first_batch), "growth": float(growth), "batches": len(self.ends_)}
        self.l2_ = pooled_l2(H, self.cap) if self.pooled else math.sqrt(2.0 * H)
        self.sigma_ = 0.0 if math.isinf(rho) else gaussian_sigma(self.l2_, rho)
        self._noise_rng, self._tie_rng = rng.spawn(2)
        shape = (S, A, S) if self.pooled else (H, S, A, S)
        self.released_ = np.zeros(shape)
        self.events_ = [] if self.sigma_ == 0 else [GaussianEvent(
            family="batched-ucbvi:transitions", unit=PrivacyUnit("user", 1), l2=self.l2_, sigma=self.sigma_,
            noise="exact")]
        size = int(np.diff(np.r_[0, self.ends_]).max())
        self._states = np.empty((size, H + 1), dtype=np.int64)   # the current batch's trajectories
        self._actions = np.empty((size, H), dtype=np.int64)
        self._log = math.log(S * A * H * K / self.beta)
        cells = S * A * (1 if self.pooled else H) * len(self.ends_)   # union bound: pairs x releases
        self._z = math.sqrt(2 * math.log(2 * cells / self.beta))   # two-sided Gaussian tail, union bound
        self._episodes, self._batch, self._row = 0, 0, 0
        self._pi = self._plan()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(S={self.S}, A={self.A}, H={self.H}, K={self.K}, rho={self.rho:g}, "
                f"pooled={self.pooled}, batches={len(self.ends_)}, episodes={self._episodes})")

    # -- the protocol -------------------------------------------------------------------
    def start_episode(self, k: int) -> None:
        """User ``k`` arrives: she gets the current batch's policy."""
        if self._episodes >= self.K:
            raise UsageError(f"this agent was calibrated for K={self.K} users; it cannot serve more.")

    def policy(self) -> np.ndarray:
        """The current batch's policy, shape (H, S), int."""
        return self._pi

    def observe(self, h: int, s: int, a: int, r: float, s_next: int) -> None:
        """Record step h of the current user (rewards are public: not kept)."""
        self._states[self._row, h], self._actions[self._row, h] = s, a
        self._states[self._row, h + 1] = s_next

    def observe_episode(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The whole trajectory of the current user."""
        self._states[self._row], self._actions[self._row] = states, actions

    def end_episode(self) -> None:
        """Close the user; at the end of a batch, release its noisy counts and plan the next policy."""
        self._episodes += 1
        self._row += 1
        self._close_batch()

    def policy_users(self) -> int:
        """How many users from the current one on get the current policy: the rest of the batch (public)."""
        return int(self.ends_[self._batch]) - self._episodes

    def observe_users(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The next n users' whole trajectories at once (n <= :meth:`policy_users`), each closed.

        The same as ``start_episode``, ``observe_episode`` and ``end_episode`` for each of them in
        turn: rows states (n, H + 1), actions (n, H) (rewards (n, H) are public: not kept).

        Raises
        ------
        UsageError
            More users than the rest of the batch.
        """
        n = len(actions)
        if n > self.policy_users():
            raise UsageError(f"{n} users were given the policy of a batch with {self.policy_users()} places left.")
        self._states[self._row:self._row + n], self._actions[self._row:self._row + n] = states, actions
        self._episodes += n
        self._row += n
        self._close_batch()

    def _close_batch(self) -> None:
        """At the end of a batch: release its noisy counts and plan the next policy."""
        if self._episodes == self.ends_[self._batch]:
            counts = capped_counts(self._states[:self._row], self._actions[:self._row], self.S, self.A,
                                   pooled=self.pooled, cap=self.cap)
            self.released_ += counts
            if self.sigma_ > 0:   # fresh noise for every release: batches are disjoint in users
                self.released_ += self.noise(counts.shape)
            self._batch += 1
            self._row = 0
            if self._episodes < self.K:
                self._pi = self._plan()

    def noise(self, shape: tuple) -> np.ndarray:
        """Fresh exact discrete Gaussian noise N_Z(0, sigma^2) for one release, int64 of ``shape``."""
        return exact_noise("gaussian", self.sigma_, math.prod(shape), rng=self._noise_rng).reshape(shape)

    @property
    def n_released(self) -> int:
        """Number of batches released so far."""
        return self._batch

    # -- planning (post-processing of the releases) ----------------------------------------
    def _plan(self) -> np.ndarray:
        """Greedy policy of the optimistic Q on the released counts, ties broken at random."""
        H, S, A = self.H, self.S, self.A
        m = self.released_
        n = m.sum(-1)                                    # n~(s, a) = sum_s' m~(s, a, s')
        x, _ = project_counts(np.maximum(m, 0.0), np.maximum(n, 0.0), 0.0)
        sd = self.sigma_ * math.sqrt(self._batch)        # noise sd per cell after `_batch` releases
        known = n > max(self._z * sd * math.sqrt(S), 0.5)   # |noise of n~| below n~, w.h.p.
        n_pos = np.where(known, n, 1.0)
        P = x / n_pos[..., None]
        Q = np.empty((H, S, A))
        self.bonus_terms_ = np.full((H, 3, S, A), np.nan)   # diagnostics: the three terms at known pairs
        self.at_cap_ = np.zeros((H, S, A), dtype=bool)
        V = np.zeros(S)
        for h in range(H - 1, -1, -1):   # backward over steps; vectorised over (s, a, s')
            Ph, nh, kh = (P, n_pos, known) if self.pooled else (P[h], n_pos[h], known[h])
            span = float(H - h - 1)
            mean, var, dev, cap = self._moments(h, Ph, V)
            # the noise moves P~ W by z . (W - P~ W) / n~: Gaussian, sd = sd ||W - P~ W||_2 / n~
            terms = (np.sqrt(2 * var * self._log / nh), SECOND_ORDER * self._log * span / nh, self._z * sd * dev / nh)
            q = np.where(kh, mean + sum(terms), np.inf)
            self.bonus_terms_[h] = np.where(kh, terms, np.nan)
            self.at_cap_[h] = q >= cap
            Q[h] = np.clip(np.minimum(q, cap), 0.0, float(H - h))   # Q*_h <= max_s' (r + V*_{h+1}) <= cap
            V = Q[h].max(-1)
        keys = np.where(Q == Q.max(-1, keepdims=True), self._tie_rng.random(Q.shape), -1.0)
        self.Q_ = Q
        return keys.argmax(-1)

    def _moments(self, h: int, Ph: np.ndarray, V: np.ndarray) -> tuple:
        """Under P~_h(. | s, a), of W(s') = r(s, a, s') + V(s'): mean, variance, ||W - mean||_2 and max W, each (S, A).

        With rewards r_h(s, a) (``reward`` of shape (H, S, A)) W = r_h(s, a) + V; with rewards r(s, a, s')
        (shape (H or 1, S, A, S)) the expected reward is P~'s, so its error is covered by the same bonuses.
        ``max W`` is the optimistic cap of the pair: Q*_h(s, a) <= max_s' (r + V*_{h+1}(s')) <= max W when
        V >= V*_{h+1} (a pair that is not yet known gets it instead of H - h).
        """
        R, S = self.R, self.S
        if R.ndim == 3:
            pv = Ph @ V
            var = np.maximum(Ph @ (V * V) - pv * pv, 0.0)
            dev = np.sqrt(np.maximum(V @ V - 2 * pv * V.sum() + S * pv * pv, 0.0))
            return R[h] + pv, var, dev, R[h] + V.max()
        W = R[h if R.shape[0] > 1 else 0] + V                       # (S, A, S)
        mean = np.einsum("sat,sat->sa", Ph, W)
        var = np.maximum(np.einsum("sat,sat,sat->sa", Ph, W, W) - mean * mean, 0.0)
        dev = np.sqrt(np.maximum(np.einsum("sat,sat->sa", W, W) - 2 * mean * W.sum(-1) + S * mean * mean, 0.0))
        return mean, var, dev, W.max(-1)


def public_reward(mdp) -> np.ndarray:
    """The reward function an explorer may read: what the simulator's rewards are a function of, no more.

    r_h(s, a), shape (H, S, A), when the MDP's reward does not depend on the next state (RiverSwim, the
    random tabular MDPs); else r(s, a, s'), shape (H or 1, S, A, S), 0 on the rows of terminal states as the
    environment pays it (ICU-Sepsis: 1 on entering survival). Never E[r | s, a] of such an MDP: that is
    P(. | s, a) . r(s, a, .), which would hand the explorer part of the unknown transitions.
    """
    if not mdp.reward_next_state:
        return np.stack([mdp.expected_reward(h) for h in range(mdp.horizon)])
    r = np.asarray(mdp.r, dtype=np.float64)
    rew = np.array(r if r.ndim == 4 else r[None])
    if mdp.terminal_states:
        rew[:, list(mdp.terminal_states)] = 0.0
    return rew


def build(env, n_episodes: int, budget, constants: str, beta: float, rng, *, algo: str,
          growth: float = DEFAULT_GROWTH) -> BatchedUCBVI:
    """The builder of ``privaudit explore --algo dp-ucbvi-batched`` and of its twin ``ucbvi-batched``.

    The environment supplies the public reward function (:func:`public_reward`) and whether it is
    stationary (``env.mdp.stationary``: the counts are pooled over h). ``budget``: a Gaussian
    :class:`~privaudit.privacy.budget.Budget` (its rho), or None (no noise: the twin). ``growth``: the
    schedule's ratio (:func:`batch_ends`; the CLI uses the default, benchmarks may compare others).

    Raises
    ------
    UsageError
        A pure-epsilon (Laplace) budget, or ``constants`` other than ``"practical"``.
    """
    if constants != "practical":
        raise UsageError(f"`algo` {algo} has one constant set, 'practical' (docs/online.md, \"Batched DP-UCBVI\"). "
                         f"Got {constants!r}.")
    if budget is not None and budget.family.pure:
        raise UsageError(f"`algo` {algo} adds Gaussian noise (rho-zCDP): give `rho` (reported as (eps, delta)-JDP "
                         "at `delta`), not a pure `epsilon`.")
    reward = public_reward(env.mdp)
    rho = math.inf if budget is None else float(budget.rho)
    return BatchedUCBVI(reward, env.horizon, env.n_states, n_episodes, rho=rho, stationary=env.mdp.stationary,
                        growth=growth, beta=beta, rng=rng)
