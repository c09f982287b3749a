"""What every linear explorer shares: the episode loop, the privacy unit and the privacy events.

:class:`LinearExplorer` is the agent side of the protocol of
:mod:`privaudit.online.protocol` for a linear MDP with a public feature table
phi (S, A, d): it collects the user's trajectory and hands it to the
algorithm's ``update``; each algorithm (:mod:`~privaudit.online.linear.lsvi_ucb`,
:mod:`~privaudit.online.linear.luyo`, :mod:`~privaudit.online.linear.ngo`,
:mod:`~privaudit.online.linear.lsvi_ucb_pp`) fixes the greedy policy in
``_prepare`` and says which releases it makes in ``events``.

The event builders state what a run of K episodes costs, from the public
constants alone: :func:`tree_event` (Gram matrices through binary trees),
:func:`goe_event` (fresh GOE per release), :func:`vector_event` (fresh
Gaussian target vectors); the sensitivities are those of
:mod:`privaudit.online.linear.sensitivity`.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.counters import tree_counter_event, tree_levels
from privaudit.online.linear.lattice import Lattice, LatticeStats, NoiseSource, grid_features, release
from privaudit.online.linear.numerics import checked_features
from privaudit.online.linear.sensitivity import gram_sensitivity, target_sensitivity
from privaudit.online.protocol import Agent
from privaudit.privacy.events import GaussianEvent, PrivacyEvent, PrivacyUnit

#: Privacy unit of every explorer (JDP, billboard model; as in privaudit.online.counters).
#: One user (one episode) is the privacy unit of the online explorers.
PRIVACY_UNIT = PrivacyUnit("user", 1)


class LinearExplorer(Agent):
    """Shared episode loop of the linear explorers.

    Parameters
    ----------
    phi : array_like, shape (S, A, d)
        Public feature map; norms enforced <= 1 before any statistic.
    horizon : int
        H.
    n_episodes : int
        Public K (sizes the trees and the noise).
    rng : numpy.random.Generator, optional
        Noise stream (OS entropy when omitted; pass a seeded one only in tests).

    Notes
    -----
    Protocol: ``pi = policy()`` gives the greedy actions pi[h, s] (shape
    (H, S), int) of the coming episode; ``update(states, actions, rewards)``
    feeds the episode's trajectory (states shape (H + 1,), actions and rewards
    shape (H,)). Steps are 0-based.
    """

    algo = "linear"
    acts_by_policy = True          # act(h, s) = pi[h, s]: run_episodes may use env.rollout

    def exact_sampler_paths(self) -> frozenset:
        """``{"scaled"}``: the lattice noise (``lattice.NoiseSource``) and the GOE Gram trees are drawn by
        ``fixed_point.discrete_gaussian_scaled`` (which hands scales below 2^8 lattice units to CKS rejection)."""
        return frozenset({"scaled"})

    def __init__(self, phi, horizon: int, n_episodes: int, *, rng: np.random.Generator | None = None):
        self.phi = checked_features(phi)
        self.S, self.A, self.d = self.phi.shape
        self.H = int(horizon)
        self.K = int(n_episodes)
        if self.H < 1 or self.K < 1:
            raise UsageError(f"`horizon` and `n_episodes` must be >= 1. Got {horizon}, {n_episodes}.")
        self.phi_flat = self.phi.reshape(-1, self.d)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.noise = NoiseSource(self.rng)
        self.k = 0                     # episodes completed
        self.n_switches = 0            # policy recomputations after the first policy
        self.pi = np.zeros((self.H, self.S), dtype=np.int64)
        self.lattice: Lattice | None = None   # the grids of a private run (None: no noise, float statistics)
        self.lat: LatticeStats | None = None   # integer lattice statistics of a private run with noise
        self.phi_q: np.ndarray | None = None  # phi on the 2^-12 grid, integer multiples (S, A, d)

    def _checked_reward(self, reward) -> np.ndarray:
        """The public reward function r_h(s, a) as an (H, S*A) array.

        Raises
        ------
        UsageError
            Not of shape (H, S, A), or a value outside [0, 1] (the value ranges behind the
            sensitivities and the clip of Q to [0, H] assume it).
        """
        r = np.asarray(reward, dtype=np.float64)
        if r.shape != (self.H, self.S, self.A):
            raise UsageError(f"`reward` must have shape (H, S, A) = {(self.H, self.S, self.A)}. "
                             f"Got {r.shape}.")
        if not (np.isfinite(r).all() and (r >= 0).all() and (r <= 1).all()):
            raise UsageError("`reward` must lie in [0, 1].")
        return r.reshape(self.H, -1)

    def _use_lattice(self, lattice: Lattice) -> None:
        """Put the feature table on the lattice's grid: every later statistic and Q use it."""
        self.lattice = lattice
        self.phi_q, self.phi = grid_features(self.phi)
        self.phi_flat = self.phi.reshape(-1, self.d)

    # -- agent protocol (privaudit.online.protocol) -----------------------
    def start_episode(self, k: int) -> None:
        """User ``k`` arrives: release what the algorithm releases now and fix pi_k."""
        if self.k >= self.K:
            raise UsageError(f"all K={self.K} declared episodes are used; the noise was sized for K.")
        self._prepare()
        self._traj_s = np.zeros(self.H + 1, dtype=np.int64)
        self._traj_a = np.zeros(self.H, dtype=np.int64)
        self._traj_r = np.zeros(self.H)

    def policy(self) -> np.ndarray:
        """This episode's greedy actions, shape (H, S), int."""
        return self.pi

    def act(self, h: int, s: int) -> int:
        """The action recommended at step ``h`` in state ``s``."""
        return int(self.pi[h, s])

    def observe(self, h: int, s: int, a: int, r: float, s_next: int) -> None:
        """The user's response at step ``h``."""
        self._traj_s[h], self._traj_a[h], self._traj_r[h] = s, a, r
        self._traj_s[h + 1] = s_next

    def observe_episode(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """The whole response at once: states (H + 1,), actions and rewards (H,)."""
        self._traj_s, self._traj_a, self._traj_r = states, actions, rewards

    def end_episode(self) -> None:
        """Feed the episode's trajectory to the statistics."""
        self.update(self._traj_s, self._traj_a, self._traj_r)

    def _prepare(self) -> np.ndarray:
        raise NotImplementedError

    def _check_traj(self, states, actions, rewards):
        s = np.asarray(states, dtype=np.int64)
        a = np.asarray(actions, dtype=np.int64)
        r = np.minimum(np.maximum(np.asarray(rewards, dtype=np.float64), 0.0), 1.0)
        if s.shape != (self.H + 1,) or a.shape != (self.H,) or r.shape != (self.H,):
            raise UsageError(f"a trajectory needs states ({self.H + 1},), actions and rewards "
                             f"({self.H},). Got {s.shape}, {a.shape}, {r.shape}.")
        if self.k >= self.K:
            raise UsageError(f"all K={self.K} declared episodes are used; the noise was sized for K.")
        return s, a, r

    def exact_gram(self) -> np.ndarray:
        """The exact (weighted) Gram statistic under the Gram release, real units (H, d, d).

        With the public (lambda + shift) I that every release carries: what a
        release adds noise to (gray-box view of the auditor; never released
        itself). Subclasses keep ``stats`` (float statistics), ``lat`` (the
        lattice statistics of a private run with noise, or None) and
        ``_public`` (the public diagonal part).
        """
        if self.lat is None:
            return self.stats.gram
        return release(self.lat.gram, self.lattice.gram_bits) + self._public

    def events(self) -> list[PrivacyEvent]:
        """Privacy events of a complete run of K episodes (empty for a non-private explorer).

        They follow from the public constants alone (no data, no noise), so
        they are known before the first user arrives.
        """
        return []

    @property
    def events_(self) -> list[PrivacyEvent]:
        """:meth:`events`, under the name ``privaudit explore`` reads."""
        return self.events()


def tree_event(family: str, horizon: int, n_leaves: int, s: float) -> PrivacyEvent:
    """The Gram trees' event: one step's (H, d, d) increment changes by sqrt(2 H) in Frobenius norm."""
    return tree_counter_event(family, "goe", math.sqrt(horizon) * gram_sensitivity(1.0),
                              tree_levels(n_leaves), s, privacy_unit=PRIVACY_UNIT, noise="exact")


def goe_event(family: str, n_per_user: int, w_max: float, s: float) -> PrivacyEvent:
    """Composition of ``n_per_user`` GOE releases a user enters, each Delta_F^2/(4 s^2)-zCDP.

    Recorded as one Gaussian event with l2 = sqrt(n) Delta_F and sigma = sqrt(2) s
    (same rho = n Delta_F^2 / (4 s^2)).
    """
    return GaussianEvent(family=f"{family} (x{n_per_user})", l2=math.sqrt(n_per_user) * gram_sensitivity(w_max),
                         sigma=math.sqrt(2.0) * s, unit=PRIVACY_UNIT, noise="exact")


def vector_event(family: str, n_rel: int, t_max: float, w_max: float, sigma: float) -> PrivacyEvent:
    """Composition of ``n_rel`` Gaussian target releases, each Delta = 2 w_max t_max."""
    return GaussianEvent(family=f"{family} (x{n_rel})", l2=math.sqrt(n_rel) * target_sensitivity(t_max, w_max),
                         sigma=sigma, unit=PRIVACY_UNIT, noise="exact")


__all__ = ["PRIVACY_UNIT", "LinearExplorer", "goe_event", "tree_event", "vector_event"]
