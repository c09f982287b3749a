"""LSVI-UCB (Jin et al. 2020) and its two private versions: Luyo et al. 2021 and Ngo et al. 2022.

All three regress ``r + V_{h+1}(s')`` on phi(s, a) with ridge regression and
act greedily on ``Q_h = clip(w_h^T phi + beta ||phi||_{Lambda_h^{-1}}, 0, H)``;
they differ in when the policy is recomputed and in what is private:

* :class:`LSVIUCB` recomputes every episode from the exact statistics.
* :class:`LuyoLSVIUCB` recomputes at the public batch boundaries
  k = b ceil(K/B) + 1 from a Gram matrix released by H binary trees over
  the B batches and a target vector with fresh Gaussian noise per (b, h).
* :class:`NgoLSVIUCB` releases every episode's Gram matrices through H
  binary trees over the K episodes, recomputes when some step's *noisy*
  determinant has grown by the factor C since the last switch, and releases
  fresh target vectors at each switch; a public cap N_max stops switching
  (noisy determinants are not monotone, so only the cap bounds the
  composition; seed 002 l.53-59, ALGORITHMS.md section 10).

Departures (all documented in docs/online.md): Q is clipped to [0, H] in all
three (Jin writes min{., H}; the lower clip only raises an optimistic value to
the known lower bound of Q*, and the private versions need it for the
sensitivity); value targets use the finite next-state sums of
:class:`~privaudit.online.linear.numerics.RidgeStats`; the Gram release adds the
ridge lambda I to the shift 2 lambda-tilde I, so that rho = inf reduces to LSVI-UCB.

Noise (private versions, finite rho): exact discrete Gaussian on integer
lattice statistics (:mod:`privaudit.online.linear.lattice`): phi on 2^-12
(toward zero), rewards and V_{h+1} on 2^-VB before any sum; the Gram trees are
``TreeCounter(mechanism="goe", noise="exact")`` over integer increments and
the target vectors get exact N_Z noise in their lattice units, so the stated
rho holds for the sampler that runs (events ``noise="exact"``). With rho = inf
nothing is released and the exact float statistics are used (so that rho = inf
reduces to LSVI-UCB exactly).
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.linear.constants import JinConstants
from privaudit.online.linear.sensitivity import gram_sensitivity, target_sensitivity
from privaudit.online.counters import TreeCounter, tree_counter_event, tree_levels
from privaudit.online.linear.lattice import (Lattice, LatticeStats, NoiseSource, choose_lattice,
                                             grid_features, release)
from privaudit.online.linear.numerics import (FlooredInverse, RidgeStats, TIE_DECIMALS, bonus_table,
                                           checked_features)
from privaudit.online.linear.numerics import clip_ufunc as _CLIP
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
        self.phi_q: np.ndarray | None = None  # phi on the 2^-12 grid, integer multiples (S, A, d)

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


class _JinFamily(LinearExplorer):
    """LSVI-UCB's backward pass over released (inverse Gram, target) statistics."""

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None):
        super().__init__(phi, horizon, n_episodes, rng=rng)
        self.c = constants
        # the exact Gram carries lambda + shift on its diagonal (the public part of the release)
        self.stats = RidgeStats(self.H, self.S, self.d, constants.lam + constants.shift)
        self.Q = np.full((self.H, self.S, self.A), float(self.H))
        self.lat: LatticeStats | None = None     # integer lattice statistics of a private run with noise
        self._inverse = FlooredInverse(constants.floor)   # eigenvalue-floored inverse of a Gram release

    def _backward(self, inv: np.ndarray, target) -> None:
        """Recompute Q for h = H-1..0 from ``inv`` (H, d, d) and the target release ``target(h, v)``.

        ``target(h, v)`` returns the (released) regression target of step h,
        shape (d,), given V_{h+1} (S,) clipped to [0, H].
        Q_h = clip(index_h, 0, H) with index_h = w_h^T phi + beta ||phi||_{inv_h};
        pi_h = argmax_a index_h (rounded to TIE_DECIMALS), an argmax of Q_h
        (:func:`~privaudit.online.linear.numerics.greedy`).
        """
        H = self.H
        if target == self._exact_target:
            return self._backward_exact(inv)
        bon = self.c.beta * bonus_table(self.phi_flat, inv)           # (H, S*A)
        v = np.zeros(self.S)
        for h in range(H - 1, -1, -1):
            index = (self.phi_flat @ (inv[h] @ target(h, v)) + bon[h]).reshape(self.S, self.A)
            self.Q[h] = index
            v = np.minimum(np.maximum(index.max(axis=1), 0.0), H)
        self.pi = np.round(self.Q, TIE_DECIMALS).argmax(axis=2)
        np.clip(self.Q, 0.0, H, out=self.Q)

    def _backward_exact(self, inv: np.ndarray) -> None:
        """:meth:`_backward` with the exact float targets (non-private, or rho = inf), batched over h.

        index_h = phi^T inv_h (c_h + b_h^T V_{h+1}) + bonus_h is affine in V_{h+1}:
        index_h = [V_{h+1}, 1] @ [b_h M_h; c_h M_h + bonus_h] with M_h = inv_h phi^T (d, S*A), so the
        products for all h are formed before the loop and each step is one (1, S + 1) @ (S + 1, S*A)
        product (the same Q up to float rounding; greedy actions compare Q rounded to TIE_DECIMALS).
        """
        H, S, A = self.H, self.S, self.A
        phi_t = self.phi_flat.T
        mT = inv @ phi_t                                                          # (H, d, S*A)
        bon = self.c.beta * np.sqrt(np.maximum((mT * phi_t).sum(axis=1), 0.0))   # (H, S*A)
        aug = np.concatenate([self.stats.b @ mT, (self.stats.c[:, None, :] @ mT) + bon[:, None, :]], axis=1)
        v_aug = np.zeros(S + 1)                         # (V_{h+1}, 1); V_H = 0
        v_aug[S] = 1.0
        q = self.Q.reshape(H, S * A)
        for h in range(H - 1, -1, -1):                  # sequential in h: V_h needs V_{h+1}
            index = np.dot(v_aug, aug[h], out=q[h])
            vh = v_aug[:S]
            index.reshape(S, A).max(axis=1, out=vh)
            _CLIP(vh, 0.0, H, out=vh)
        self.pi = np.round(self.Q, TIE_DECIMALS).argmax(axis=2)
        _CLIP(self.Q, 0.0, H, out=self.Q)

    def _exact_target(self, h: int, v: np.ndarray) -> np.ndarray:
        """The exact float target sum phi (r + V_{h+1}(s')) (non-private, or rho = inf)."""
        return self.stats.target(h, v, with_reward=True)

    def _private_setup(self, n_leaves: int) -> None:
        """With noise: the lattice, its statistics and the H exact Gram trees; without: float twins."""
        c = self.c
        if c.noise_gram > 0:
            self._use_lattice(choose_lattice(math.sqrt(2.0) * c.noise_gram, c.noise_vec))
            self.lat = LatticeStats(self.H, self.S, self.d, self.lattice, self.K, 1.0, self.H + 1)
            self.tree = TreeCounter((self.H, self.d, self.d), n_leaves, "goe",
                                    math.ldexp(c.noise_gram, self.lattice.gram_bits), rng=self.rng, noise="exact")
        else:
            self.lat = None
            self.tree = TreeCounter((self.H, self.d, self.d), n_leaves, "none", rng=self.rng)
        self._public = (c.lam + c.shift) * np.eye(self.d)

    def _gram_release(self, released: np.ndarray) -> np.ndarray:
        """Real-unit Gram release (H, d, d) plus the public (lambda + shift) I (post-processing)."""
        g = released if self.lat is None else release(released, self.lattice.gram_bits)
        return g + self._public

    def exact_gram(self) -> np.ndarray:
        """The exact statistic under the Gram release, real units (H, d, d), with the public (lambda + shift) I.

        What a release adds noise to (gray-box view of the auditor; never released itself).
        """
        return self.stats.gram if self.lat is None else release(self.lat.gram, self.lattice.gram_bits) + self._public

    def _target_release(self):
        """The target function of one policy update: fresh noise for each of its H releases."""
        if self.lat is None:
            return self._exact_target
        eta = self.noise.vector("target", self.c.noise_vec, self.lattice.target_bits, self.H, self.d)
        bits = self.lattice.target_bits
        return lambda h, v: release(self.lat.target(h, v) + eta[h], bits)

    def _add(self, s, a, r) -> np.ndarray:
        """Feed the statistics; returns the Gram increment of the tree (int lattice units or float)."""
        if self.lat is None:
            phi = self.phi[s[:-1], a]
            self.stats.add(phi, s[1:], r)
            return phi[:, :, None] * phi[:, None, :]
        return self.lat.add(self.phi_q[s[:-1], a], s[1:], r)

    def update(self, states, actions, rewards) -> None:
        """Feed one episode (see :class:`LinearExplorer`)."""
        s, a, r = self._check_traj(states, actions, rewards)
        self._add(s, a, r)
        self.k += 1

class LSVIUCB(_JinFamily):
    """LSVI-UCB (Jin, Yang, Wang, Jordan, COLT 2020, Algorithm 1), non-private.

    Every episode: Lambda_h = lambda I + sum phi phi^T (Sherman-Morrison),
    w_h = Lambda_h^{-1} sum phi (r + V_{h+1}(s')), Q_h = clip(w^T phi + beta
    ||phi||_{Lambda^{-1}}, 0, H), pi_h = argmax_a Q_h.
    """

    algo = "lsvi-ucb"

    def _prepare(self) -> np.ndarray:
        """Greedy actions (H, S) of the coming episode."""
        if self.k > 0:
            self._backward(self.stats.inv, self._exact_target)
        return self.pi


class LuyoLSVIUCB(_JinFamily):
    """Private LSVI-UCB through batching (Luyo, Garcelon, Lazaric, Pirotta 2021, arXiv:2112.01585).

    The policy is recomputed at the public boundaries k = b L + 1 (L = ceil(K/B),
    b = 1, ..., ceil(K/L) - 1). At boundary b: Lambda-tilde_h = G_h + (lambda +
    shift) I + tree noise of the b batch leaves (H independent binary trees over
    B leaves, one per h), u-tilde_h = sum phi (r + V_{h+1}(s')) + eta_{b,h} with
    fresh eta ~ N(0, sigma_u^2 I), then LSVI-UCB's backward pass. rho/2 to each
    family (ALGORITHMS.md 6.1 and section 10).
    """

    algo = "luyo"

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None):
        super().__init__(phi, horizon, n_episodes, constants, rng=rng)
        self.batch_len = math.ceil(self.K / constants.n_batches)
        self._private_setup(constants.n_batches)
        self._batch_gram = np.zeros((self.H, self.d, self.d), dtype=np.int64 if self.lat is not None else float)

    def _prepare(self) -> np.ndarray:
        """Greedy actions (H, S); recomputed only at a batch boundary."""
        if self.k > 0 and self.k % self.batch_len == 0:
            # the batch that just ended is the next leaf of the H Gram trees
            gram = self._gram_release(self.tree.update(self._batch_gram))
            self._batch_gram[:] = 0
            inv, _ = self._inverse(gram, symmetric=self.lat is not None)
            self._backward(inv, self._target_release())
            self.n_switches += 1
        return self.pi

    def events(self) -> list[PrivacyEvent]:
        """Gram trees (H trees x levels nodes per user) and the H (boundaries) vector releases."""
        if self.c.noise_gram == 0:
            return []
        n_rel = math.ceil(self.K / self.batch_len) - 1
        return [_tree_event("luyo:gram", self.H, self.c.n_batches, self.c.noise_gram),
                _vec_event("luyo:target", self.H * max(n_rel, 1), self.H + 1, 1.0, self.c.noise_vec)]

    def update(self, states, actions, rewards) -> None:
        """Feed one episode; its Gram increment joins the current batch's leaf."""
        s, a, r = self._check_traj(states, actions, rewards)
        self._batch_gram += self._add(s, a, r)
        self.k += 1


class NgoLSVIUCB(_JinFamily):
    """Low-switching private LSVI-UCB (Ngo, Vietri, Wu, ICML 2022, seed 002, Algorithm 1).

    Every episode k (after k - 1 users): Lambda-tilde_{k,h} = G_h + (lambda +
    shift) I + binary-tree noise (H trees over K leaves, rho/2). The switch is
    decided once per episode before the backward pass: switch iff some h has
    logdet Lambda-tilde_{k,h} - logdet Lambda-tilde_{k_last,h} > ln C and fewer
    than N_max switches happened. At a switch, y-tilde_{k,h} = sum phi (r +
    V_{h+1}(s')) + eta_{k,h} with fresh eta (rho/2 over H N_max releases) and
    LSVI-UCB's backward pass with Lambda-tilde (eigenvalues floored).
    """

    algo = "ngo"

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None):
        super().__init__(phi, horizon, n_episodes, constants, rng=rng)
        self._private_setup(self.K)
        self._released = np.zeros((self.H, self.d, self.d))    # tree release after k users
        self._log_c = math.log(constants.switch_ratio)
        self._logdet_last: np.ndarray | None = None

    def update(self, states, actions, rewards) -> None:
        """Feed one episode: the H Gram trees take its leaf and release (every episode)."""
        s, a, r = self._check_traj(states, actions, rewards)
        self._released = self.tree.update(self._add(s, a, r))
        self.k += 1

    def _prepare(self) -> np.ndarray:
        """Greedy actions (H, S); recomputed at a (capped) determinant-doubling switch."""
        inv, logdet = self._inverse(self._gram_release(self._released), symmetric=self.lat is not None)
        if self._logdet_last is None:
            self._logdet_last = logdet
            return self.pi
        grew = (logdet - self._logdet_last > self._log_c).any()
        if grew and self.n_switches < self.c.n_max:
            self._backward(inv, self._target_release())
            self._logdet_last = logdet
            self.n_switches += 1
        return self.pi

    def events(self) -> list[PrivacyEvent]:
        """Gram trees (released every episode) and H N_max vector releases (rho/2 each)."""
        if self.c.noise_gram == 0:
            return []
        return [_tree_event("ngo:gram", self.H, self.K, self.c.noise_gram),
                _vec_event("ngo:target", self.H * self.c.n_max, self.H + 1, 1.0, self.c.noise_vec)]


def _tree_event(family: str, horizon: int, n_leaves: int, s: float) -> PrivacyEvent:
    """The Gram trees' event: one step's (H, d, d) increment changes by sqrt(2 H) in Frobenius norm."""
    return tree_counter_event(family, "goe", math.sqrt(horizon) * gram_sensitivity(1.0),
                              tree_levels(n_leaves), s, privacy_unit=PRIVACY_UNIT, noise="exact")


def _goe_event(family: str, n_per_user: int, w_max: float, s: float) -> PrivacyEvent:
    """Composition of ``n_per_user`` GOE releases a user enters, each Delta_F^2/(4 s^2)-zCDP.

    Recorded as one Gaussian event with l2 = sqrt(n) Delta_F and sigma = sqrt(2) s
    (same rho = n Delta_F^2 / (4 s^2)).
    """
    return GaussianEvent(family=f"{family} (x{n_per_user})", l2=math.sqrt(n_per_user) * gram_sensitivity(w_max),
                         sigma=math.sqrt(2.0) * s, unit=PRIVACY_UNIT, noise="exact")


def _vec_event(family: str, n_rel: int, t_max: float, w_max: float, sigma: float) -> PrivacyEvent:
    """Composition of ``n_rel`` Gaussian target releases, each Delta = 2 w_max t_max."""
    return GaussianEvent(family=f"{family} (x{n_rel})", l2=math.sqrt(n_rel) * target_sensitivity(t_max, w_max),
                         sigma=sigma, unit=PRIVACY_UNIT, noise="exact")
