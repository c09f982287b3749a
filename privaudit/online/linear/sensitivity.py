"""Per-user sensitivities of the statistics the linear explorers release, and their noise scales.

Neighbouring relation (JDP: Ngo, Vietri & Wu 2022, definition of JDP; Sahu 2025,
Definition 2.2): two user
sequences differ in one user's whole data (replacement). Given the earlier
releases, a user enters a step-h statistic through exactly one term
``w phi (target)`` or ``w phi phi^T`` with ``||phi|| <= 1`` (enforced by
:func:`~privaudit.online.linear.numerics.checked_features`), ``0 < w <= w_max``
and the target clipped to ``[0, t_max]``; the weights and value functions of
the other users are post-processing of earlier releases and their own data
(adaptive composition). Hence, under replacement [D]:

* Gram term: ``||w phi phi^T - w' psi psi^T||_F^2 = w^2|phi|^4 + w'^2|psi|^4 - 2 w w' (phi.psi)^2
  <= 2 w_max^2``, so ``Delta_F = sqrt(2) w_max`` (Ngo et al. 2022's replacement value sqrt(2) at w_max = 1).
* Target vector: ``||w phi t - w' psi t'||_2 <= 2 w_max t_max``.

The Gaussian mechanism with sigma^2 = Delta^2/(2 rho) is rho-zCDP; a GOE
perturbation ``(Z + Z^T)/sqrt(2)``, ``Z_ij ~ N(0, s^2)``, of a symmetric
statistic is ``Delta_F^2/(4 s^2)``-zCDP (its off-diagonal entries have variance s^2, its
diagonal 2 s^2; docs/online.md, "Exact GOE nodes"), i.e. a
Gaussian mechanism of sensitivity Delta_F and equivalent sigma sqrt(2) s.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.counters import goe_node_scale, tree_levels


def gram_sensitivity(w_max: float = 1.0) -> float:
    """Frobenius sensitivity of ``sum w phi phi^T`` under replacement: sqrt(2) w_max."""
    return math.sqrt(2.0) * float(w_max)


def target_sensitivity(t_max: float, w_max: float = 1.0) -> float:
    """L2 sensitivity of ``sum w phi t`` with t in [0, t_max] under replacement: 2 w_max t_max."""
    return 2.0 * float(w_max) * float(t_max)


def _rho(rho: float) -> float:
    r = float(rho)
    if not (r > 0):
        raise UsageError(f"`rho` must be > 0 (math.inf for the non-private limit). Got {rho!r}.")
    return r


def goe_scale(delta_f: float, rho_each: float) -> float:
    """GOE entry scale s with ``Delta_F^2/(4 s^2) = rho_each``; 0 when rho_each is infinite."""
    if math.isinf(rho_each):
        return 0.0
    return float(np.nextafter(delta_f / (2.0 * math.sqrt(rho_each)), math.inf))


def gauss_scale(delta: float, rho_each: float) -> float:
    """Gaussian sigma with ``Delta^2/(2 sigma^2) = rho_each``; 0 when rho_each is infinite."""
    if math.isinf(rho_each):
        return 0.0
    return float(np.nextafter(delta / math.sqrt(2.0 * rho_each), math.inf))


def tree_gram_scale(rho_gram: float, horizon: int, n_leaves: int) -> float:
    """Node GOE scale of H binary trees of unweighted Gram matrices spending ``rho_gram`` in total.

    A user is one leaf per step, i.e. in ``levels = floor(log2 T) + 1`` nodes of
    each of the H trees; each node costs Delta_F^2/(4 s^2) with Delta_F^2 = 2:
    ``s^2 = H levels Delta_F^2 / (4 rho_gram)`` (the binary mechanism of Ngo et al. 2022,
    Section 4.2, with the replacement Delta_F).
    """
    rho_gram = _rho(rho_gram)
    if math.isinf(rho_gram):
        return 0.0
    # one time step's increment over the H trees changes by sqrt(H) * Delta_F in Frobenius norm
    return goe_node_scale(math.sqrt(int(horizon)) * gram_sensitivity(1.0), tree_levels(n_leaves), rho_gram)


def vector_scale(rho_vec: float, n_releases: int, t_max: float, w_max: float = 1.0) -> float:
    """Gaussian sigma of ``n_releases`` target-vector releases spending ``rho_vec`` in total."""
    rho_vec = _rho(rho_vec)
    return gauss_scale(target_sensitivity(t_max, w_max), rho_vec / max(int(n_releases), 1))
