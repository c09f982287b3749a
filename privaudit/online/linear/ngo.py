"""Low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022, Algorithm 1).

Every episode's Gram matrices are released through H binary trees over the K
episodes; the policy is recomputed when some step's *noisy* determinant has
grown by the factor C since the last switch, with fresh target vectors at each
switch. Noisy determinants are not monotone, so the number of switches is not
bounded by the doubling argument of the non-private analysis: a public cap
N_max stops switching and alone bounds the composition of the target releases
(docs/online.md, "Linear MDPs"). Constants:
:func:`privaudit.online.linear.constants.ngo_constants`.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.online.linear.constants import JinConstants
from privaudit.online.linear.lsvi_ucb import LSVIUCBFamily
from privaudit.privacy.events import PrivacyEvent


class NgoLSVIUCB(LSVIUCBFamily):
    """Low-switching private LSVI-UCB (Ngo, Vietri & Wu, ICML 2022, Algorithm 1).

    Every episode k (after k - 1 users): Lambda-tilde_{k,h} = G_h + (lambda +
    shift) I + binary-tree noise (H trees over K leaves, rho/2). The switch is
    decided once per episode before the backward pass: switch iff some h has
    logdet Lambda-tilde_{k,h} - logdet Lambda-tilde_{k_last,h} > ln C and fewer
    than N_max switches happened. At a switch, y-tilde_{k,h} = sum phi (r +
    V_{h+1}(s')) + eta_{k,h} with fresh eta (rho/2 over H N_max releases) and
    LSVI-UCB's backward pass with Lambda-tilde (eigenvalues floored).

    Departures from Ngo et al. (2022), Algorithm 1 (docs/online.md,
    "Departures from the papers"): Q is clipped to [0, H], not only at H (the
    target sensitivity 2 (H + 1) needs V >= 0); the ridge lambda is added to
    the shift 2 lambda-tilde (rho = inf is then LSVI-UCB); N_max is a public cap
    fixed before the run, which alone bounds the target releases because noisy
    determinants are not monotone; eps is reported with a tight zCDP conversion
    (their Section 4.2 misses a factor 2 in rho + 2 sqrt(rho ln(1/delta))).
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
            self._switch(inv)
            self._logdet_last = logdet
        return self.pi

    def events(self) -> list[PrivacyEvent]:
        """Gram trees (released every episode) and H N_max vector releases (rho/2 each)."""
        return self._private_events(self.K, self.H * self.c.n_max)


__all__ = ["NgoLSVIUCB"]
