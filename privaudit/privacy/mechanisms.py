"""Noise mechanisms for integer count vectors: Gaussian (rho-zCDP) and Laplace (eps-DP).

Two noise modes, both giving integer outputs (no floating-point side channel:
a float count plus float noise leaks the count through its low-order bits,
Mironov 2012 for Laplace, Jin et al. 2022 for Gaussian noise):

``"rounded"`` (default)
    Draw continuous noise Z (numpy's ``Generator.normal`` / ``laplace``),
    round it to the nearest integer and add it to the integer count:
    ``n + round(Z)``, which equals ``round(n + Z)`` exactly because n is an
    integer. The output is a function of Z alone shifted by n, i.e.
    post-processing of the continuous mechanism, so it keeps its guarantee
    (rho = Delta_2^2 / (2 sigma^2), eps = Delta_1 / b) *as far as numpy's
    float sampler matches the ideal distribution*: the sampler itself is a
    float approximation (ziggurat), whose deviation from the ideal law in the
    far tails is not accounted for.
``"exact"``
    The exact discrete Gaussian N_Z(0, sigma^2) / discrete Laplace with
    P(y) proportional to exp(-|y| / b), drawn by the table sampler of
    ``privaudit.privacy.samplers`` (one uniform 64-bit word per draw through an
    alias table whose integer weights are the exact CDF cut into 2^-64 cells;
    the rare draws in cells that contain a CDF boundary, and the tails, are
    finished exactly): total-variation distance 0 to the target law, at
    numpy speed. sigma and b are the float scales themselves (no rounding).
    By Canonne, Kamath & Steinke 2020, Thm 14 (multivariate, independent coordinates) the discrete
    Gaussian gives rho = Delta_2^2 / (2 sigma^2) for integer-valued
    statistics, and the discrete Laplace gives eps = Delta_1 / b, the same
    guarantees as the continuous mechanisms. Supports sigma up to 2^15
    (:data:`privaudit.privacy.samplers.GAUSSIAN_SIGMA_MAX`).

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Thm 14; Cor. 9 for the sub-Gaussian tail used
by ``noise_bound``).
Qiao & Wang (2023), eq. (1) (Gaussian noise on every visit and transition
count) and the paragraph "Apply Laplace Mechanism to achieve pure DP".
Mironov, "On Significance of the Least Significant Bits for Differential
Privacy", CCS 2012. Jin, McMurtry, Rubinstein & Ohrimenko, "Are We There Yet?
Timing and Floating-Point Attacks on Differential Privacy Systems", IEEE S&P 2022.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError, positive_finite
from privaudit.privacy.noise import NOISE_FAMILY_NAMES, gaussian_sigma, laplace_scale, noise_family

__all__ = ["add_noise", "noise_bound", "gaussian_sigma", "laplace_scale", "NOISE_FAMILY_NAMES", "NOISE_MODES"]
NOISE_MODES = ("rounded", "exact")

#: cells drawn per chunk: bounds the temporary memory of add_noise to a few MB
_CHUNK = 1 << 20


# ----------------------------------------------------------------------------
# add_noise


def add_noise(values: np.ndarray, *, mechanism: str, scale: float,
              rng: np.random.Generator, noise: str = "rounded", inplace: bool = False) -> np.ndarray:
    """Add one independent integer noise draw to every cell of an integer array.

    Parameters
    ----------
    values : np.ndarray of int, any shape
        Exact counts (e.g. one h-slice of n_h(s, a, s'), shape (S, A, S)).
        Every cell gets noise, zero or not.
    mechanism : {"gaussian", "laplace"}
        Gaussian (rho-zCDP) or Laplace (eps-DP).
    scale : float
        sigma (Gaussian standard deviation) or b (Laplace scale), > 0.
    rng : np.random.Generator
        Source of randomness (seeded from the OS for a real release).
    noise : {"rounded", "exact"}
        See the module docstring.
    inplace : bool
        ``noise="exact"`` with an int64, C-contiguous, writeable ``values``
        only: add the noise into ``values`` itself and return it (no copy;
        the caller gives up the exact values). Otherwise a new array.

    Returns
    -------
    np.ndarray of int64, same shape as ``values``
        Noisy counts (may be negative; clipping at 0 is the learner's
        post-processing).

    Raises
    ------
    UsageError
        Unknown mechanism or noise mode, non-integer values, bad scale, or a
        sigma too large for the exact sampler.

    Notes
    -----
    ``exact``: the noise is drawn in place into the int64 output
    (``samplers.ExactSampler.add_into``: chunks of 2^15 cells through
    cache-resident scratch buffers, no array the size of ``values`` besides
    the output). ``rounded``: chunks of 2^20 cells, so temporary memory is a
    few MB on top of the int64 output.
    """
    family = noise_family(mechanism)
    if noise not in NOISE_MODES:
        raise UsageError(f"`noise` must be one of {NOISE_MODES}. Found {noise!r}.")
    scale = positive_finite("scale", scale)
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise UsageError(f"`values` must be an integer array (exact counts). "
                         f"Found dtype {values.dtype}.")
    if noise == "exact":
        sampler = family.exact_sampler(scale)
        own = (inplace and values.dtype == np.int64 and values.flags.c_contiguous and values.flags.writeable)
        return sampler.add_into(values if own else np.array(values, dtype=np.int64, order="C"), rng)
    flat = values.reshape(-1)
    out = np.empty(flat.shape, dtype=np.int64)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        out[start:stop] = flat[start:stop]
        out[start:stop] += family.rounded_noise(rng, scale, stop - start)
    return out.reshape(values.shape)


# ----------------------------------------------------------------------------
# high-probability bound on all noise draws


def noise_bound(mechanism: str, scale: float, n_counts: int, delta: float,
                rounded: bool = True, *, noise: str | None = None) -> float:
    """E such that all ``n_counts`` noise draws satisfy |noise| <= E/2 at once w.p. >= 1 - delta.

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
    scale : float
        sigma or b of the release (from its manifest).
    n_counts : int
        Number of noisy cells the bound must cover (e.g. 2 H S^2 A for
        visits + transitions, as in Qiao & Wang 2023's E_rho).
    delta : float
        Failure probability, in (0, 1).
    rounded : bool
        True for ``noise="rounded"`` releases: |round(Z)| <= |Z| + 1/2, so E
        grows by 1. False for continuous (unrounded) noise.
    noise : {"rounded", "exact", "continuous"}, optional
        Overrides ``rounded``. ``"exact"`` (discrete samplers): the discrete
        Gaussian is sub-Gaussian with parameter sigma (Canonne, Kamath &
        Steinke 2020, Cor. 9), so the
        continuous bound holds without the +1; the discrete Laplace has
        P(|Y| > x) <= c exp(-x/b) with c = 2 / (1 + exp(-1/b)), which is used.

    Returns
    -------
    float
        Gaussian: E = 2 sigma sqrt(2 log(2 n / delta)) (from
        P(|Z| > x) <= 2 exp(-x^2 / (2 sigma^2)) and a union bound); with
        n = 2HS^2A and sigma^2 = 2H/rho this is Qiao & Wang (2023)'s
        E_rho = 4 sqrt(H log(4HS^2A/delta) / rho).
        Laplace: E = 2 b log(n / delta) (from P(|Lap(b)| > x) = exp(-x/b));
        with b = 4H/eps and n = 2HS^2A, E = (8H/eps) log(2HS^2A/delta). The
        paper gives only E_eps = O~(H/eps); E_eps = (8H/eps) log(4HS^2A/delta),
        this bound at failure probability delta/2 (the allocation of E_rho),
        is our choice (docs/privacy.md, "E_rho and E_eps").

    Raises
    ------
    UsageError
        Bad arguments.

    References
    ----------
    Qiao & Wang (2023): E_rho in the text of eq. (2); E_eps = O~(H/eps) in the
    paragraph "Apply Laplace Mechanism to achieve pure DP" (the constant here
    is ours, as above).
    """
    family = noise_family(mechanism)
    scale = positive_finite("scale", scale)
    if isinstance(n_counts, bool) or int(n_counts) != n_counts or n_counts < 1:
        raise UsageError(f"`n_counts` must be an integer >= 1. Found {n_counts!r}.")
    if not (0 < delta < 1):
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    mode = noise if noise is not None else ("rounded" if rounded else "continuous")
    if mode not in ("rounded", "exact", "continuous"):
        raise UsageError(f"`noise` must be 'rounded', 'exact' or 'continuous'. Found {noise!r}.")
    n = float(n_counts)
    half = family.tail_half_width(scale, n, delta, exact=mode == "exact")
    if mode == "rounded":
        half += 0.5
    return float(np.nextafter(2.0 * half, math.inf))
