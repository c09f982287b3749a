"""PUCB (Vietri, Balle, Krishnamurthy & Wu, ICML 2020), tabular online eps-JDP, and its non-private twin.

PUCB is a private UBEV (Vietri et al. 2020, Algorithm 2): three families of per-step
counters, n_h(s, a) (visits), r_h(s, a) (reward sums) and m_h(s, a, s')
(transitions), 2SAH + S^2AH counters in all, each family a binary-tree
counter stream fed **every** episode with that episode's increments (zeros
included) and released after every episode. The policy of user k is greedy
in the optimistic Q~ = PrivQ(releases after user k - 1) (Vietri et al.
2020, Algorithm 3 and the proof of Theorem 1), so users < k reach user k
only through the released counters (billboard lemma, Hsu et al. 2016, as
used in that proof): if the counter streams are eps-DP, the
actions recommended to all users and the final policy are eps-JDP.

Budget (docs/online.md, "PUCB"): one user's replacement changes each
family's one-step increments by l1 <= 2H (at every step h one counter loses a
unit and another gains it; rewards lie in [0, 1]), so each family gets eps/3
with node scale b = 2H L / (eps/3) = 6HL/eps, i.e. eps/(6H) per counter
(Vietri et al. 2020, proof of Theorem 1 and Claim 1, state eps/(3H) per
counter from a total l1 sensitivity H, which holds for add/remove neighbours
only; their JDP neighbours replace a user).
Gaussian counters: rho/3 per family, l2 <= sqrt(2H), sigma^2 = 3HL/rho.

PrivQ and the bonuses (derived here from the structure Vietri et al. 2020
describe, Algorithm 3: a sampling bonus and a counter-error bonus; docs/online.md)
live in ``privaudit.online.tabular.pucb_constants`` with the theory and practical
constant sets. Ties in argmax_a Q~ (all actions at the optimistic cap) are
broken uniformly at random with the agent's own generator, drawn once per
episode (data-independent randomness; a fixed lowest-index rule would make
RiverSwim's "left" the default action).

Exact noise (no float side channel, issue 10). Every counter is an integer in
its lattice unit: visits and transitions count in units of 1; each reward is
rounded to a multiple of 2^-bits *before* any sum, bits =
``calibration_.reward_bits`` (8, i.e. 2^-8, unless the node scale is so wide
that a coarser grid keeps the exact sampler fast:
``privaudit.online.tabular.pucb_constants.reward_lattice_bits``, a function of public
facts), and the reward sums count in units of 2^-bits. The rounding is
stochastic (floor(r 2^bits + U), U uniform from the agent's own generator:
unbiased, and 0 and 1 stay fixed), so every rounded reward lies in [0, 1]
whatever the coins and the sensitivity 2H holds on the grid for every coin
sequence, hence unconditionally. The node noise is the exact discrete
Laplace (``epsilon``) or discrete Gaussian (``rho``) of
``privaudit.privacy.samplers`` with the node scale in lattice units (b 2^bits
or sigma 2^bits for the rewards: the lattice multiplies the sensitivity and
the scale alike, so each family still costs eps/3 or rho/3), total variation 0
to the target law; so the stated eps-JDP / rho-zCDP holds for the sampler that
runs, not only for an ideal continuous one. The non-private twin rounds the
rewards the same way (it stays the same code).

The non-private twin (``UCBVI``, ``privaudit explore --algo ucb-vi``) is the
same code with exact counts: E = 0, no counter bonus.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.tabular.pucb_constants import DEFAULT_BETA, PUCBCalibration, calibrate
from privaudit.online.counters import TreeCounter, tree_counter_event
from privaudit.online.protocol import Agent
from privaudit.privacy.fixed_point import to_grid_nearest

#: Counter families of PUCB, in the order of their noise streams.
FAMILIES = ("visits", "rewards", "transitions")
#: Finest reward grid 2^-REWARD_BITS (the calibration may choose a coarser one; module docstring).
REWARD_BITS = 8


def episode_increments(H: int, S: int, A: int, states, actions, rewards, next_states, *,
                       reward_bits: int = REWARD_BITS, rng: np.random.Generator | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One user's increments to the three counter families.

    Parameters
    ----------
    H, S, A : int
    states, actions, next_states : array of int, shape (H,)
        s_h, a_h, s_{h+1} for h = 0..H-1.
    rewards : array of float, shape (H,)
        r_h in [0, 1] (clipped here: the sensitivity assumes the range), then
        rounded to a multiple of 2^-reward_bits (the grid keeps [0, 1]).
    reward_bits : int, default 8
    rng : numpy.random.Generator, optional
        Coins of the stochastic rounding floor(r 2^bits + U) (unbiased); without
        it, to the nearest grid point.

    Returns
    -------
    zn : ndarray, shape (H, S, A)
        1 at (h, s_h, a_h), else 0.
    zr : ndarray, shape (H, S, A)
        r_h (on the 2^-reward_bits grid) at (h, s_h, a_h), else 0.
    zm : ndarray, shape (H, S, A, S)
        1 at (h, s_h, a_h, s_{h+1}), else 0.

    Notes
    -----
    Each family's increment has exactly one non-zero per step h, of absolute
    value <= 1, so replacing the user changes it by l1 <= 2H and l2 <= sqrt(2H).
    """
    h = np.arange(H)
    s, a, s2 = np.asarray(states), np.asarray(actions), np.asarray(next_states)
    zn = np.zeros((H, S, A))
    zr = np.zeros((H, S, A))
    zm = np.zeros((H, S, A, S))
    zn[h, s, a] = 1.0
    r = np.clip(np.asarray(rewards, dtype=np.float64), 0.0, 1.0)
    if rng is None:
        q = to_grid_nearest(r, reward_bits)
    else:  # U < 1, so 0 and 1 (grid points) stay put and every rounded reward lies in [0, 1]
        q = np.floor(np.ldexp(r, reward_bits) + rng.random(H)).astype(np.int64)
    zr[h, s, a] = np.ldexp(q.astype(np.float64), -reward_bits)
    zm[h, s, a, s2] = 1.0
    return zn, zr, zm


def privq(n: np.ndarray, r: np.ndarray, m: np.ndarray, cal: PUCBCalibration) -> np.ndarray:
    """Optimistic backward induction on (private) counts: PrivQ.

    Parameters
    ----------
    n, r : ndarray, shape (H, S, A)
        Released visit counts n~ and reward sums r~.
    m : ndarray, shape (H, S, A, S)
        Released transition counts m~.
    cal : PUCBCalibration
        E, lambda and the constant set (``privaudit.online.tabular.pucb_constants``).

    Returns
    -------
    ndarray, shape (H, S, A)
        Q~_h(s, a) in [0, H - h] (0-based h).

    References
    ----------
    Vietri, Balle, Krishnamurthy & Wu (2020), Algorithm 3 (PrivQ, "a standard
    batch Q-learning update" with the bonus phi~ + psi~). The
    formulas of E, phi~ and psi~ are this project's derivation (docs/online.md,
    "PrivQ"): a departure only in that the paper's constants are not used.
    """
    H, S, A = n.shape
    c, E = cal.constants, cal.E
    low = n <= c.c_threshold * E
    n_pos = np.where(low, 1.0, n)  # low cells are set to the cap below; avoid dividing by <= 0
    n_eff = np.where(low, 1.0, np.maximum(n - E, 1e-12))
    base = (np.minimum(np.maximum(r / n_pos, 0.0), 1.0)  # r^ = clip(r~/n~, 0, 1)
            + c.c_phi * (H + 1) * np.sqrt(2.0 * cal.log_term / n_eff)
            + c.c_psi * (2 + (S + 1) * H) * E / n_pos)
    base[low] = np.inf  # maximal optimism: min(inf, H - h) = H - h
    m_pos = np.maximum(m, 0.0)  # P^(s') = max(m~(s'), 0) / n~, applied as (m_pos @ V) / n~
    Q = np.empty((H, S, A))
    V = np.zeros(S)
    for h in range(H - 1, -1, -1):  # backward over steps; vectorised over (s, a, s')
        q = Q[h]
        np.minimum(base[h] + (m_pos[h] @ V) / n_pos[h], float(H - h), out=q)
        np.maximum(q, 0.0, out=q)
        V = q.max(-1)
    return Q


class PUCB(Agent):
    """PUCB with private tree counters (or exact counts: the non-private twin).

    Parameters
    ----------
    n_states, n_actions, horizon : int
        S, A, H (public).
    n_episodes : int
        K, the public number of users: fixes the trees' depth and the
        union bounds. The agent refuses to serve more users.
    epsilon : float, optional
        Pure eps-JDP budget (Laplace counters). ``math.inf``: no noise.
    rho : float, optional
        rho-zCDP budget of the counters (Gaussian), i.e. (eps, delta)-JDP by
        conversion. Exactly one of ``epsilon`` and ``rho``.
    beta : float, default 0.05
        Failure probability of the confidence bounds.
    constants : {"practical", "theory"}
        See ``privaudit.online.tabular.pucb_constants``.
    rng : numpy.random.Generator
        Noise and tie-breaking (independent child streams).

    Attributes
    ----------
    calibration_ : PUCBCalibration
    counters_ : dict[str, TreeCounter]
        Integer counters in lattice units (``lattice_bits_``), exact
        discrete noise of scale ``calibration_.scale * 2^bits``.
    lattice_bits_ : dict[str, int]
        Each family's lattice: its counter holds the value times 2^bits.
    events_ : list of PrivacyEvent
        One per family (empty for the twin), noise ``"exact"``, in real units.
    """

    def exact_sampler_paths(self) -> frozenset:
        """``"table"`` and/or ``"scaled"``: the samplers of the counters' node noises (``TreeCounter.sampler_path``)."""
        return frozenset(c.sampler_path for c in self.counters_.values() if c.sampler_path) or frozenset({"table"})

    def __init__(self, n_states: int, n_actions: int, horizon: int, n_episodes: int, *,
                 epsilon: float | None = None, rho: float | None = None, beta: float = DEFAULT_BETA,
                 constants="practical", rng: np.random.Generator):
        S, A, H, K = int(n_states), int(n_actions), int(horizon), int(n_episodes)
        self.S, self.A, self.H, self.K = S, A, H, K
        self.calibration_ = cal = calibrate(S, A, H, K, epsilon=epsilon, rho=rho, beta=beta, constants=constants)
        noise_rngs = rng.spawn(len(FAMILIES) + 2)
        self._tie_rng = noise_rngs[len(FAMILIES)]
        self._round_rng = noise_rngs[len(FAMILIES) + 1]  # coins of the reward rounding
        self.lattice_bits_ = {"visits": 0, "rewards": cal.reward_bits, "transitions": 0}
        shapes = {"visits": (H, S, A), "rewards": (H, S, A), "transitions": (H, S, A, S)}
        # node scale in lattice units: times 2^bits, exact (a power of two), like the sensitivity
        self.counters_ = {f: TreeCounter(shapes[f], K, cal.mechanism, math.ldexp(cal.scale, self.lattice_bits_[f]),
                                         rng=g, noise="exact")
                          for f, g in zip(FAMILIES, noise_rngs)}
        self.events_ = [] if cal.mechanism == "none" else [
            tree_counter_event(f"pucb:{f}", cal.mechanism, cal.step_sensitivity, cal.n_levels, cal.scale,
                               noise="exact")
            for f in FAMILIES]
        self._released = (np.zeros((H, S, A)), np.zeros((H, S, A)), np.zeros((H, S, A, S)))
        self._traj = np.zeros((4, H))  # s, a, r, s' of the current episode
        self._episodes = 0
        self._pi = None
        self.Q_ = None

    def __repr__(self) -> str:
        c = self.calibration_
        return (f"{type(self).__name__}(S={self.S}, A={self.A}, H={self.H}, K={self.K}, mechanism={c.mechanism!r}, "
                f"constants={c.constants.name!r}, episodes={self._episodes})")

    def start_episode(self, k: int) -> None:
        """Fix pi_k = greedy(PrivQ(released counters)), ties broken at random."""
        if self._episodes >= self.K:
            raise UsageError(f"this agent was calibrated for K={self.K} users; it cannot serve more "
                             "(the counters' trees and union bounds cover K releases).")
        Q = privq(*self._released, self.calibration_)
        best = Q == Q.max(-1, keepdims=True)
        keys = np.where(best, self._tie_rng.random(Q.shape), -1.0)
        self._pi = keys.argmax(-1)
        self.Q_ = Q

    def policy(self) -> np.ndarray:
        """This episode's greedy policy, shape (H, S), int."""
        return self._pi

    def act(self, h: int, s: int) -> int:
        """pi_k(h, s)."""
        return int(self._pi[h, s])

    def observe(self, h: int, s: int, a: int, r: float, s_next: int) -> None:
        """Record step h of the current user's episode."""
        self._traj[:, h] = (s, a, r, s_next)

    def end_episode(self) -> None:
        """Feed the user's increments to every counter and release all of them."""
        t = self._traj
        s, a, s2 = t[0].astype(np.int64), t[1].astype(np.int64), t[3].astype(np.int64)
        bits = self.lattice_bits_
        incs = episode_increments(self.H, self.S, self.A, s, a, t[2], s2, reward_bits=bits["rewards"],
                                  rng=self._round_rng)
        # to lattice units (exact: the increments are multiples of 2^-bits), release back in real units
        self._released = tuple(
            np.ldexp(self.counters_[f].update(np.ldexp(z, bits[f]).astype(np.int64)).astype(np.float64), -bits[f])
            for f, z in zip(FAMILIES, incs))
        self._episodes += 1


class UCBVI(PUCB):
    """The non-private twin of PUCB: the same code with exact counts (E = 0, no counter bonus).

    A UBEV-style optimistic baseline; equivalent to ``PUCB(epsilon=math.inf)``.
    """

    def __init__(self, n_states: int, n_actions: int, horizon: int, n_episodes: int, *,
                 beta: float = DEFAULT_BETA, constants="practical", rng: np.random.Generator):
        super().__init__(n_states, n_actions, horizon, n_episodes, epsilon=math.inf, beta=beta,
                         constants=constants, rng=rng)
