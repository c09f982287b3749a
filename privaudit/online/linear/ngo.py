"""Low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022, Algorithm 1).

Every episode's Gram matrices are released through H binary trees over the K
episodes; the policy is recomputed with fresh target vectors at each switch.
The paper switches when some step's determinant has grown by the factor C
since the last switch. On *noisy* determinants that test fires on noise alone
(they are not monotone), so a public cap N_max had to bound the target
releases, and the cap was used up early and froze the policy (issue 31, D2).
With noise the switches are therefore at public episodes fixed before the run
(:func:`~privaudit.online.linear.constants.ngo_switch_schedule`, the episodes
at which the test would fire under isotropic growth) [D]; the paper's test stays
available (``switching="determinant"``, the default without noise). Constants:
:func:`privaudit.online.linear.constants.ngo_constants`; docs/online.md,
"Linear MDPs" and "Departures from the papers".
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
    decided once per episode before the backward pass: with a public schedule
    (``constants.switch_at``, the default with noise) switch iff k is in it;
    with the paper's test switch iff some h has logdet Lambda-tilde_{k,h} -
    logdet Lambda-tilde_{k_last,h} > ln C and fewer than N_max switches happened. At a switch, y-tilde_{k,h} = sum phi (r +
    V_{h+1}(s')) + eta_{k,h} with fresh eta (rho/2 over H N_max releases) and
    LSVI-UCB's backward pass with Lambda-tilde (eigenvalues floored).

    Departures from Ngo et al. (2022), Algorithm 1 (docs/online.md,
    "Departures from the papers"): Q is clipped to [0, H], not only at H (the
    target sensitivity 2 (H + 1) needs V >= 0); the ridge lambda is added to
    the shift 2 lambda-tilde (rho = inf is then LSVI-UCB); N_max is a public cap
    fixed before the run, which alone bounds the target releases because noisy
    determinants are not monotone; with noise the test is replaced by the public
    schedule (the noisy test fired on noise and used up the cap early); eps is reported with a tight zCDP conversion
    (their Section 4.2 misses a factor 2 in rho + 2 sqrt(rho ln(1/delta))).
    """

    algo = "ngo"

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None, reward=None):
        super().__init__(phi, horizon, n_episodes, constants, rng=rng, reward=reward)
        self._private_setup(self.K)
        self._released = np.zeros((self.H, self.d, self.d))    # tree release after k users
        self._log_c = math.log(constants.switch_ratio)
        self._logdet_last: np.ndarray | None = None
        self._schedule = frozenset(constants.switch_at)

    def update(self, states, actions, rewards) -> None:
        """Feed one episode: the H Gram trees take its leaf and release (every episode)."""
        s, a, r = self._check_traj(states, actions, rewards)
        self._released = self.tree.update(self._add(s, a, r))
        self.k += 1

    def _prepare(self) -> np.ndarray:
        """Greedy actions (H, S); recomputed at a public switch episode, or a (capped) determinant-doubling one."""
        if self._schedule:
            if self.k in self._schedule:
                self._switch(self._inverse(self._gram_release(self._released), symmetric=self.lat is not None)[0])
            return self.pi
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
        """Gram trees (released every episode) and H N_max vector releases (rho/2 each; N_max = the
        schedule's length with a public schedule)."""
        return self._private_events(self.K, self.H * self.c.n_max)


__all__ = ["NgoLSVIUCB"]
