"""Exact discrete Gaussian and discrete Laplace noise at numpy speed.

:func:`exact_noise` draws ``n`` samples of the discrete Gaussian N_Z(0, sigma^2)
(P(y) proportional to exp(-y^2 / (2 sigma^2))) or of the discrete Laplace
(P(y) proportional to exp(-|y| / b)), y in Z, **exactly**: the output law is the
target law, with total-variation distance 0 (:func:`sampler_total_variation`).
The parameter is the float ``scale`` itself, read as the exact rational it
represents (sigma^2 = scale^2, b = scale); nothing is rounded.

The exact laws and their CDF tables (rigorous fixed point, mpmath) are in
``privaudit.privacy.sampler_laws``; the table sampler (one uniform 64-bit word
per draw through an alias or guide table, boundary cells and tails finished
exactly) in ``privaudit.privacy.exact_sampler``, whose docstring gives the
construction and its proof of exactness. This module is the dispatch: the
public entry points, the cached sampler per (mechanism, scale), and the
statements manifests make about each noise mode.

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (definitions; Algorithm 1 for Bernoulli(exp(-g))).
Walker, "An efficient method for generating discrete random variables with
general distributions", ACM TOMS 1977; Vose, IEEE TSE 1991 (alias method).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.privacy.exact_sampler import ExactSampler, cached_sampler
from privaudit.privacy.sampler_laws import (GAUSSIAN_SIGMA_MAX, NOISE_FAMILY_NAMES, bernoulli_exp, half_width,
                                            law_parameter)

__all__ = ["exact_noise", "sampler_total_variation", "noise_statement", "get_sampler",
           "gaussian_sampler_for_variance", "ExactSampler", "NOISE_FAMILY_NAMES",
           "GAUSSIAN_SIGMA_MAX", "bernoulli_exp", "table_half_width", "EXACT_PATHS",
           "TABLE_MIN_DRAWS_PER_T"]


# public interface


def exact_noise(mechanism: str, scale: float, n: int, *, rng: np.random.Generator) -> np.ndarray:
    """n independent exact draws of discrete Gaussian or discrete Laplace noise.

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
        ``"gaussian"``: N_Z(0, scale^2), P(y) proportional to
        exp(-y^2 / (2 scale^2)). ``"laplace"``: P(y) proportional to
        exp(-|y| / scale). y ranges over all integers.
    scale : float
        sigma or b (> 0, finite), used as the exact rational value of the float.
    n : int
        Number of draws (>= 0).
    rng : np.random.Generator
        Source of uniform 64-bit words (OS-seeded for a real release).

    Returns
    -------
    np.ndarray of int64, shape (n,)

    Raises
    ------
    UsageError
        Unknown mechanism, bad scale or n.

    Notes
    -----
    Total-variation distance to the target law: 0 (module docstring). So the
    discrete Gaussian with sigma = Delta_2 / sqrt(2 rho) gives rho-zCDP for
    integer statistics (CKS 2020 Thm 14), the discrete Laplace with
    b = Delta_1 / eps gives pure eps-DP (CKS 2020 Sec. 2.2; Ghosh, Roughgarden,
    Sundararajan 2012), as the continuous mechanisms do.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise UsageError(f"`n` must be an integer >= 0. Found {n!r}.")
    return get_sampler(mechanism, scale).sample(int(n), rng)


def sampler_total_variation(mechanism: str, scale: float) -> float:
    """Certified total-variation distance between one draw of :func:`exact_noise` and its target law.

    Returns
    -------
    float
        0.0: the sampler is exact (module docstring), for every mechanism and scale.
    """
    get_sampler(mechanism, scale)  # validates the arguments
    return 0.0


#: What each noise mode of ``privaudit.privacy.mechanisms.add_noise`` delivers, for manifests.
_STATEMENTS = {
    "exact": {
        "sampler": "privaudit.privacy.samplers: exact discrete Gaussian / discrete Laplace (the exact CDF cut "
                   "into 2^-64 cells; each 64-bit word mapped to an outcome with probability exactly its number "
                   "of full cells / 2^64 by a guide table or an alias table; boundary cells and tails finished "
                   "exactly)",
        "total_variation_per_draw": 0.0,
        "extra_delta": 0.0,
        "derivation": "the sampler's output law is the target law (total variation 0), so the mechanism is the "
                      "ideal discrete Gaussian (rho = l2^2 / (2 sigma^2), CKS 2020 Thm 14) or discrete Laplace "
                      "(eps = l1 / b) mechanism: nothing is added to delta",
    },
    "rounded": {
        "sampler": "numpy Generator.normal / Generator.laplace, rounded to the nearest integer",
        "total_variation_per_draw": None,
        "extra_delta": None,
        "derivation": "not certified: numpy's Laplace inverts a uniform on a 2^-53 grid (|Z| <= 36.04 b, so "
                      "no pure epsilon-DP) and its normal is a float ziggurat with bounded support and float "
                      "tables; the guarantee holds only for the ideal continuous mechanism. Releases refuse "
                      "this mode; it is kept for audits of float samplers",
    },
    "continuous": {
        "sampler": "numpy Generator.normal (float64 ziggurat), added to float statistics (GOE matrices as "
                   "(Z + Z^T)/sqrt(2)); no lattice, no rounding",
        "total_variation_per_draw": None,
        "extra_delta": None,
        "derivation": "not certified: the stated rho is that of the ideal continuous Gaussian mechanism "
                      "(rho = l2^2 / (2 sigma^2)); numpy's normal is a float ziggurat with bounded support and "
                      "float tables, and a float statistic plus float noise leaks through its low-order bits "
                      "(Mironov 2012; Jin et al. 2022), so the guarantee is not established for the sampler that ran",
    },
}


#: The exact discrete Gaussian without a table (``privaudit.privacy.fixed_point.exact_gaussian``).
_REJECTION = ("privaudit.privacy.fixed_point: exact discrete Gaussian by rejection, no table (Canonne, Kamath & "
              "Steinke 2020, Algorithm 3: discrete Laplace proposal of scale t = floor(sigma) + 1, accepted with "
              "probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)), the acceptance decided exactly: a float "
              "comparison outside a rigorous 2^-40 band, interval arithmetic inside)")
#: The exact discrete Gaussian of wide scales (``privaudit.privacy.fixed_point.discrete_gaussian_scaled``).
_SCALED = ("privaudit.privacy.fixed_point.discrete_gaussian_scaled: exact discrete Gaussian of a wide scale "
           "sigma, one trial = a coarse part J ~ N_Z(0, sigma^2 / M^2) from this module's table sampler (M = 2^m, "
           "sigma / M in [2^7, 2^8); trials with J < 0 rejected), a uniform fine part F on [0, M) and a sign bit, "
           "|y| = M J + F (+ 1 for the negative side), accepted with probability "
           "exp(-(|y|^2 - M^2 J^2) / (2 sigma^2)), decided exactly (a float comparison outside a rigorous band, "
           "interval arithmetic inside); scales below 2^8 lattice units by rejection from a discrete Laplace "
           "(Canonne, Kamath & Steinke 2020, Algorithm 3)")
#: the ways ``exact`` noise is drawn: the table sampler of this module, rejection (few draws at a scale),
#: or the scaled sampler (wide scales: the online counters' GOE and wide Gaussian nodes, the linear
#: explorers' lattice statistics)
EXACT_PATHS = ("table", "rejection", "scaled")
#: ``fixed_point.exact_gaussian`` builds (or reuses) the table when a call draws at least this many values
#: per unit of the table's half-width T: building costs about 7 us per unit of T, a draw about 0.03 us from
#: the table and 0.4-0.5 us by rejection, so the two break even near 15 T draws
TABLE_MIN_DRAWS_PER_T = 16


def noise_statement(noise: str, *, paths=("table",)) -> dict:
    """What a noise mode delivers: sampler, certified total variation per draw and extra delta.

    Parameters
    ----------
    noise : {"exact", "rounded", "continuous"}
    paths : collection of {"table", "rejection", "scaled"}, default ("table",)
        ``"exact"`` only: the exact samplers that drew the noise, named in
        ``sampler`` (``fixed_point.exact_gaussian`` uses ``"rejection"`` for
        a scale drawn fewer than :data:`TABLE_MIN_DRAWS_PER_T` T times in a
        call, the table otherwise; ``"scaled"`` is
        ``fixed_point.discrete_gaussian_scaled``, the online explorers' wide
        scales: GOE matrices, Gaussian nodes above :data:`GAUSSIAN_SIGMA_MAX`
        lattice units, the linear explorers' lattice statistics).
        All have total variation 0, so nothing else changes.

    Returns
    -------
    dict
        ``sampler`` (text), ``total_variation_per_draw`` (float, or None when
        not certified), ``extra_delta`` (the delta added to the ideal
        mechanism's guarantee for a whole release: 0.0 for ``"exact"``; None
        when not certified) and ``derivation`` (text).

    Raises
    ------
    UsageError
        Unknown mode or path, no path, or paths with a mode other than ``"exact"``.
    """
    if noise not in _STATEMENTS:
        raise UsageError(f"`noise` must be one of {tuple(_STATEMENTS)}. Found {noise!r}.")
    paths = set(paths)
    if not paths or not paths <= set(EXACT_PATHS) or (noise != "exact" and paths != {"table"}):
        raise UsageError(f"`paths` must be a non-empty subset of {EXACT_PATHS} (with noise 'exact'). "
                         f"Found {sorted(paths)} with noise {noise!r}.")
    out = dict(_STATEMENTS[noise])
    if paths == {"rejection"}:
        out["sampler"] = _REJECTION
    elif "rejection" in paths:
        out["sampler"] = (f"{out['sampler']}; for the Gaussian scales drawn fewer than "
                          f"{TABLE_MIN_DRAWS_PER_T} T times in one call "
                          f"(T: that table's half-width, about 6.6 sigma): {_REJECTION}")
    if paths == {"scaled"}:
        out["sampler"] = _SCALED
    elif "scaled" in paths:
        if paths == {"scaled", "rejection"}:
            out["sampler"] = _REJECTION
        out["sampler"] = (f"{out['sampler']}; for the GOE matrices and the Gaussian scales above "
                          f"{GAUSSIAN_SIGMA_MAX:.0f} lattice units: {_SCALED}")
    return out


def get_sampler(mechanism: str, scale: float) -> "ExactSampler":
    """The (cached) :class:`ExactSampler` of a mechanism and scale.

    Raises
    ------
    UsageError
        Unknown mechanism; scale not positive and finite; a Gaussian sigma
        above :data:`GAUSSIAN_SIGMA_MAX` (budget too small); a scale so small
        (budget so large, e.g. rho = 1e12) that the table cannot be built
        exactly (a CDF value within 2^-16000 of a cell edge).
    """
    x = law_parameter(mechanism, scale)
    s = float(scale)
    try:
        return cached_sampler(mechanism, x)
    except RuntimeError:  # P(Z != 0) so far below 2^-64 that a CDF value cannot be told from a cell edge
        if s >= 1:  # a huge scale: the law is nearly flat (a tiny budget)
            raise UsageError(f"the exact {mechanism} sampler cannot draw at scale {s!r}: the noise is so large "
                             "(the privacy budget so small) that its table cannot be built exactly. "
                             "Use a larger privacy budget (rho or epsilon).") from None
        raise UsageError(f"the exact {mechanism} sampler cannot draw at scale {s!r}: the noise is so small "
                         "(the privacy budget so large) that its CDF lies within 2^-16000 of a 2^-64 cell edge. "
                         "Use a smaller privacy budget (rho or epsilon).") from None


def gaussian_sampler_for_variance(sigma2: Fraction) -> "ExactSampler":
    """The (cached) table sampler of N_Z(0, sigma2) for an exact rational variance.

    :func:`get_sampler` reads sigma from a float; a variance such as
    2 s^2 (a GOE diagonal) or sigma^2 / 4^m (the coarse part of
    ``privacy.fixed_point.discrete_gaussian_scaled``) need not be the square of
    a float, so this entry takes the rational itself: P(y) proportional to
    exp(-y^2 / (2 sigma2)) exactly.

    Parameters
    ----------
    sigma2 : Fraction
        Variance parameter, > 0, sigma = sqrt(sigma2) <= :data:`GAUSSIAN_SIGMA_MAX`.

    Returns
    -------
    ExactSampler

    Raises
    ------
    UsageError
        sigma2 not positive or sigma above :data:`GAUSSIAN_SIGMA_MAX`.
    """
    sigma2 = Fraction(sigma2)
    if not sigma2 > 0 or sigma2 > Fraction(GAUSSIAN_SIGMA_MAX) ** 2:
        raise UsageError(f"`sigma2` must be in (0, {GAUSSIAN_SIGMA_MAX:g}^2]. Found {float(sigma2):.6g}.")
    return cached_sampler("gaussian", 1 / (2 * sigma2))


def table_half_width(mechanism: str, scale: float) -> int:
    """Half-width T of the table :func:`get_sampler` builds for this law, without building it.

    Building the table costs O(T) Python integer operations (about 7
    microseconds per unit of T: 0.35 s at sigma ~ 8,000, T ~ 54,000), one
    draw from it about 30 ns; ``privaudit.privacy.fixed_point.exact_gaussian``
    uses T to decide whether a table pays off.

    Raises
    ------
    UsageError
        As :func:`get_sampler` (unknown mechanism, bad scale, sigma above
        :data:`GAUSSIAN_SIGMA_MAX`).
    """
    return half_width(mechanism, law_parameter(mechanism, scale))
