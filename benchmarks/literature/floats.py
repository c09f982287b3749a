"""Textbook floating-point Laplace and Gaussian releases of a count, and their exact integer twins.

A count x (sensitivity 1: neighbouring datasets give x and x + 1) released as the float64 ``x +
rng.laplace(0, 1/eps)`` or ``x + rng.normal(0, sigma)`` is not DP at any epsilon: the set of doubles
reachable from x differs from the set reachable from x + 1, so some outputs are possible under one dataset
and impossible under the other (Mironov 2012, "On Significance of the Least Significant Bits for
Differential Privacy", for the Laplace mechanism; Jin, McMurtry, Rubinstein & Ohrimenko 2022 for the
Gaussian). The attack works for every pair, not only (0, 1): the lattice of reachable doubles changes with
the magnitude of x, so the suite audits several pairs.

Correct twins: integer noise added to the integer count, so that no low-order bit exists to leak. The
discrete Laplace (P[z] proportional to e^(-eps |z|), the difference of two geometric draws) is eps-DP; the
discrete Gaussian N_Z(0, sigma^2) is 1/(2 sigma^2)-zCDP (Canonne, Kamath & Steinke 2020), drawn exactly by
``privaudit.privacy.rejection.discrete_gaussian_wide``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privaudit.privacy.rejection import discrete_gaussian_wide

#: The Gaussian releases' noise scale: 1/(2 sigma^2) = 0.005-zCDP for a count.
SIGMA = 10.0


def float_laplace(x, rng, n_runs=1, eps=0.1):
    """BROKEN: ``x + rng.laplace(0, 1/eps)`` in float64, claimed eps-DP (Bichsel et al. 2021's
    floating-point experiment uses eps = 0.1). Output (n_runs,)."""
    return float(x) + rng.laplace(0.0, 1.0 / eps, n_runs)


def dlap(rng, scale: float, shape) -> np.ndarray:
    """Discrete Laplace noise, P[z] proportional to e^(-|z| / scale) on the integers (the difference of two
    geometric draws): on integer answers of sensitivity 1 it is (1/scale)-DP, like Laplace(scale), and has no
    low-order bits to leak. Shape ``shape``, float64 holding integers."""
    p = 1.0 - np.exp(-1.0 / scale)
    return (rng.geometric(p, shape) - rng.geometric(p, shape)).astype(np.float64)


def discrete_laplace(x, rng, n_runs=1, eps=0.1):
    """Correct twin: the integer count plus discrete Laplace noise, eps-DP. Output (n_runs,) integer-valued."""
    return np.rint(float(x)) + dlap(rng, 1.0 / eps, n_runs)


def float_gaussian(x, rng, n_runs=1, sigma=SIGMA):
    """BROKEN: ``x + rng.normal(0, sigma)`` in float64, claimed 1/(2 sigma^2)-zCDP. Output (n_runs,)."""
    return float(x) + rng.normal(0.0, sigma, n_runs)


def discrete_gaussian(x, rng, n_runs=1, sigma=SIGMA):
    """Correct twin: the integer count plus exact N_Z(0, sigma^2), 1/(2 sigma^2)-zCDP. Output (n_runs,)."""
    z = discrete_gaussian_wide(Fraction(sigma) ** 2, n_runs, rng=rng)
    return np.rint(float(x)) + z.astype(np.float64)
