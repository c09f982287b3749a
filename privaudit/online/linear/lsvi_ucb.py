"""LSVI-UCB (Jin, Yang, Wang & Jordan 2020, Algorithm 1) and the backward pass its private versions share.

LSVI-UCB regresses ``r + V_{h+1}(s')`` on phi(s, a) with ridge regression and
acts greedily on ``Q_h = clip(w_h^T phi + beta ||phi||_{Lambda_h^{-1}}, 0, H)``.
:class:`LSVIUCBFamily` is that backward pass over *released* statistics (an
inverse Gram matrix and a target function per step), with the lattice set-up
and the Gram / target releases of a private run; :class:`LSVIUCB`
recomputes the policy every episode from the exact statistics. The two
private versions differ in when the policy is recomputed and in what is
released: :class:`~privaudit.online.linear.luyo.LuyoLSVIUCB` (Luyo, Garcelon,
Lazaric & Pirotta 2021: batches) and :class:`~privaudit.online.linear.ngo.NgoLSVIUCB`
(Ngo, Vietri & Wu 2022: rare switches).

Departures from Jin et al. (2020) (all in docs/online.md, "Linear MDPs"):
Q is clipped to [0, H] (Algorithm 1 writes min{., H}; the lower clip only
raises an optimistic value to the known lower bound 0 of Q*, and the private
versions need it for the sensitivity of the targets); value targets use the
finite next-state sums of :class:`~privaudit.online.linear.numerics.RidgeStats`
instead of a pass over the past; the Gram release adds the ridge lambda I to
the shift 2 lambda-tilde I of the private versions, so that rho = inf reduces
to LSVI-UCB exactly; greedy ties are broken as in
:func:`~privaudit.online.linear.numerics.greedy`.

Noise (private versions, finite rho): exact discrete Gaussian on integer
lattice statistics (:mod:`privaudit.online.linear.lattice`): phi on 2^-12
(toward zero), rewards and V_{h+1} on 2^-VB before any sum; the Gram trees are
``TreeCounter(mechanism="goe", noise="exact")`` over integer increments and
the target vectors get exact N_Z noise in their lattice units, so the stated
rho holds for the sampler that runs (events ``noise="exact"``). With rho = inf
nothing is released and the exact float statistics are used.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.online.counters import TreeCounter
from privaudit.online.linear.base import LinearExplorer, tree_event, vector_event
from privaudit.online.linear.constants import JinConstants
from privaudit.online.linear.lattice import LatticeStats, choose_lattice, release
from privaudit.online.linear.numerics import FlooredInverse, RidgeStats, TIE_DECIMALS, bonus_table
from privaudit.online.linear.numerics import clip_ufunc as _CLIP
from privaudit.privacy.events import PrivacyEvent


class LSVIUCBFamily(LinearExplorer):
    """LSVI-UCB's backward pass over released (inverse Gram, target) statistics.

    ``reward`` (optional, shape (H, S, A), values in [0, 1]): the public reward function. Given, Q_h =
    r_h + w_h^T phi + bonus with w_h regressing V_{h+1}(s') alone, as LSVI-UCB++ and DP-LSVI-UCB++ do
    (He et al. 2023; Sahu 2025), so that every explorer of a comparison has the same information
    (issue 31, D3); omitted (the default, Jin et al. 2020's Algorithm 1), w_h regresses r + V_{h+1}(s').
    The private versions keep the target sensitivity 2 (H + 1) either way (V alone lies in [0, H]:
    conservative), so the noise and the guarantee do not depend on it.
    """

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None, reward=None):
        super().__init__(phi, horizon, n_episodes, rng=rng)
        self.r_known = None if reward is None else self._checked_reward(reward)   # (H, S*A) or None
        self.c = constants
        # the exact Gram carries lambda + shift on its diagonal (the public part of the release)
        self.stats = RidgeStats(self.H, self.S, self.d, constants.lam + constants.shift)
        self.Q = np.full((self.H, self.S, self.A), float(self.H))
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
        if self.r_known is not None:
            bon = bon + self.r_known
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
        const = (self.stats.c[:, None, :] @ mT)[:, 0] if self.r_known is None else self.r_known   # (H, S*A)
        aug = np.concatenate([self.stats.b @ mT, (const + bon)[:, None, :]], axis=1)
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
        """The exact float target sum phi (r + V_{h+1}(s')) (non-private, or rho = inf); sum phi V_{h+1}(s')
        when the reward function is known."""
        return self.stats.target(h, v, with_reward=self.r_known is None)

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

    def _target_release(self):
        """The target function of one policy update: fresh noise for each of its H releases."""
        if self.lat is None:
            return self._exact_target
        eta = self.noise.vector("target", self.c.noise_vec, self.lattice.target_bits, self.H, self.d)
        bits, with_reward = self.lattice.target_bits, self.r_known is None
        return lambda h, v: release(self.lat.target(h, v, with_reward) + eta[h], bits)

    def _switch(self, inv: np.ndarray) -> None:
        """A policy update of a private version: fresh target releases and the backward pass over ``inv``."""
        self._backward(inv, self._target_release())
        self.n_switches += 1

    def _private_events(self, n_leaves: int, n_target_releases: int) -> list[PrivacyEvent]:
        """The events of a private version: the H Gram trees over ``n_leaves`` leaves and
        ``n_target_releases`` Gaussian target releases (targets in [0, H + 1], weights 1);
        empty without noise."""
        if self.c.noise_gram == 0:
            return []
        return [tree_event(f"{self.algo}:gram", self.H, n_leaves, self.c.noise_gram),
                vector_event(f"{self.algo}:target", n_target_releases, self.H + 1, 1.0, self.c.noise_vec)]

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


class LSVIUCB(LSVIUCBFamily):
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


__all__ = ["LSVIUCB", "LSVIUCBFamily"]
