"""Private LSVI-UCB through batching (Luyo, Garcelon, Lazaric & Pirotta 2021).

The policy is recomputed only at public batch boundaries, from a Gram matrix
released by H binary trees over the B batches (one leaf per batch) and a
target vector with fresh Gaussian noise per (boundary, step); in between it
stays fixed. Constants: :func:`privaudit.online.linear.constants.luyo_constants`;
notes: docs/online.md, "Linear MDPs".
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.online.linear.constants import JinConstants
from privaudit.online.linear.lsvi_ucb import LSVIUCBFamily
from privaudit.privacy.events import PrivacyEvent


class LuyoLSVIUCB(LSVIUCBFamily):
    """Private LSVI-UCB through batching (Luyo, Garcelon, Lazaric, Pirotta 2021, arXiv:2112.01585).

    The policy is recomputed at the public boundaries k = b L + 1 (L = ceil(K/B),
    b = 1, ..., ceil(K/L) - 1). At boundary b: Lambda-tilde_h = G_h + (lambda +
    shift) I + tree noise of the b batch leaves (H independent binary trees over
    B leaves, one per h), u-tilde_h = sum phi (r + V_{h+1}(s')) + eta_{b,h} with
    fresh eta ~ N(0, sigma_u^2 I), then LSVI-UCB's backward pass. rho/2 to each
    family (this project's zCDP form of Luyo et al.'s calibration; docs/online.md).

    Departures from Luyo et al. (2021): the calibration is rho-zCDP (the paper
    states (eps, delta)); B is the formula Sahu's public code reads from the
    paper, not checked against it; Q is clipped to [0, H] and the ridge lambda
    is added to the shift, as in :class:`~privaudit.online.linear.ngo.NgoLSVIUCB`.
    """

    algo = "luyo"

    def __init__(self, phi, horizon, n_episodes, constants: JinConstants, *, rng=None, reward=None):
        super().__init__(phi, horizon, n_episodes, constants, rng=rng, reward=reward)
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
            self._switch(inv)
        return self.pi

    def events(self) -> list[PrivacyEvent]:
        """Gram trees (H trees x levels nodes per user) and the H (boundaries) vector releases."""
        n_rel = math.ceil(self.K / self.batch_len) - 1
        return self._private_events(self.c.n_batches, self.H * max(n_rel, 1))

    def update(self, states, actions, rewards) -> None:
        """Feed one episode; its Gram increment joins the current batch's leaf."""
        s, a, r = self._check_traj(states, actions, rewards)
        self._batch_gram += self._add(s, a, r)
        self.k += 1


__all__ = ["LuyoLSVIUCB"]
