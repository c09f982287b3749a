"""Fixed-point encodings and an exact discrete Gaussian for wide scales (no float side channel).

Why. A float statistic plus float noise leaks through its low-order bits
(Mironov 2012; Jin et al. 2022), and numpy's float samplers are not the continuous
distributions the accounting assumes (bounded support, 2^-53 grids). The
remedy used by DP-VAPVI (``learners.linear``): put every input of a
statistic on a power-of-two grid *before* the statistic (rounding the
pessimistic way, so every norm bound behind a sensitivity still holds on the
grid), compute the statistic exactly as an integer multiple of its lattice
step, and add exact discrete Gaussian noise N_Z(0, sigma^2 / step^2) to that
integer. The release is then an integer; its zCDP cost is exactly
Delta^2 / (2 sigma^2) (Canonne, Kamath & Steinke 2020, Thm 14, independent
coordinates), the same as the continuous Gaussian's, with Delta the
sensitivity in real units (the lattice rescales Delta and sigma alike).

The lattices of DP-VAPVI make sigma / step reach 2^46, beyond the
table sampler ``privacy.samplers`` (sigma up to 2^15). Two exact samplers
serve such scales: :func:`discrete_gaussian_wide` /
:func:`discrete_gaussian_batch`, the rejection sampler of
``privaudit.privacy.rejection`` (Canonne, Kamath & Steinke 2020, Algorithm 3,
with an exact banded acceptance test), re-exported here; and
:func:`discrete_gaussian_scaled`, a coarse table draw plus a uniform fine
part per trial, several times faster at sigma >= 2^8 lattice units.

:func:`exact_gaussian` draws N_Z(0, scale^2) for a float scale from the
table sampler when a call draws many values at that scale and by this
rejection sampler otherwise (no table to build: issue 19); both are exact.

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Algorithms 2, 3; Thm 14). Mironov, CCS 2012;
Jin, McMurtry, Rubinstein & Ohrimenko, IEEE S&P 2022 (floating-point attacks).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.privacy.exact_sampler import uniform_words
from privaudit.privacy.rejection import (MAX_SIGMA_UNITS, U_BITS, accept_exact, discrete_gaussian_batch,
                                         discrete_gaussian_wide, variance_parts)
from privaudit.privacy.samplers import (TABLE_MIN_DRAWS_PER_T, exact_noise, gaussian_sampler_for_variance,
                                        table_half_width)

__all__ = ["to_grid_toward_zero", "to_grid_nearest", "gaussian_path", "exact_gaussian", "discrete_gaussian_scaled",
           "discrete_gaussian_wide", "discrete_gaussian_batch", "MAX_SIGMA_UNITS"]

#: :func:`discrete_gaussian_scaled`: the coarse part J is drawn from the table sampler at
#: sigma / 2^m in [2^_COARSE_BITS, 2^(_COARSE_BITS + 1)) (a table of about 6.6 x 2^8 entries at most,
#: below the guide-table limit of ``exact_sampler.ExactSampler.add_into``, built once per variance in milliseconds;
#: about 0.4 / 2^_COARSE_BITS of the trials are rejected by the fine test).
_COARSE_BITS = 7
#: Coarse values J above this are assembled in Python integers (int64 products stay below 2^62);
#: with sigma / 2^m < 2^9 that is beyond 2^11 standard deviations of J: never in practice.
_COARSE_SAFE = 1 << 20
#: Trials per round of :func:`discrete_gaussian_scaled` (cache-sized temporaries).
_SCALED_CHUNK = 1 << 15
#: Its fast-path band in units of 2^-53: exp(-x) 2^53 is within 2^4 (1 + x) of the float value and
#: d = exp(-x) 2^53 - u within one more unit; 2^14 (for x <= 1, the rest goes to the exact path)
#: is 2^9 times wider, as the band of :func:`discrete_gaussian_batch`.
_SCALED_BAND = float(2**14)


def to_grid_toward_zero(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded toward zero to a multiple of 2^-bits, as the integer multiple (int64).

    |result| * 2^-bits <= |x| coordinate-wise, so every norm bound of x holds
    for the rounded vector. Exact: ``ldexp`` scales by a power of two.
    """
    return np.trunc(np.ldexp(np.asarray(x, dtype=np.float64), bits)).astype(np.int64)


def to_grid_nearest(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded to the nearest multiple of 2^-bits (ties to even), as the integer multiple (int64).

    If lo <= x <= hi with lo and hi multiples of 2^-bits (0, 1, H, H^2 ...),
    the rounded value stays in [lo, hi]: bounds with grid-point ends hold on
    the grid, and the rounding adds no systematic bias.
    """
    return np.rint(np.ldexp(np.asarray(x, dtype=np.float64), bits)).astype(np.int64)


def gaussian_path(scale: float, n: int) -> str:
    """The exact sampler :func:`exact_gaussian` uses for ``n`` draws at sigma = ``scale``.

    Returns
    -------
    {"table", "rejection"}
        ``"table"`` when n >= :data:`privaudit.privacy.samplers.TABLE_MIN_DRAWS_PER_T`
        times the table half-width T (``samplers.table_half_width``), else
        ``"rejection"``. A function of the public scale and count only.

    Raises
    ------
    UsageError
        As ``samplers.get_sampler`` (bad scale, sigma above ``GAUSSIAN_SIGMA_MAX``).
    """
    T = table_half_width("gaussian", scale)
    return "table" if n >= TABLE_MIN_DRAWS_PER_T * T else "rejection"


def exact_gaussian(scale: float, n: int, *, rng: np.random.Generator) -> np.ndarray:
    """n exact draws of N_Z(0, scale^2), from the table sampler or by rejection, whichever is cheaper.

    Parameters
    ----------
    scale : float
        sigma (> 0, finite, at most ``samplers.GAUSSIAN_SIGMA_MAX``), read as
        the exact rational the float represents: the law has P(y) proportional
        to exp(-y^2 / (2 scale^2)) exactly, on both paths.
    n : int
        Number of draws (>= 0).
    rng : np.random.Generator
        OS-seeded for a real release.

    Returns an int64 array of shape (n,); raises UsageError on a bad scale
    or n (as ``samplers.exact_noise``).

    Notes
    -----
    Both paths are exact (total variation 0 to the target law), so the
    mechanism's guarantee is the ideal discrete Gaussian's (CKS 2020 Thm 14)
    whichever runs; the path (:func:`gaussian_path`, a function of the
    public scale and n) only sets the cost. ``"table"``:
    ``samplers.exact_noise`` (about 30 ns per draw after a build of about
    7 us per unit of the half-width T ~ 6.6 sigma, cached per scale).
    ``"rejection"``: :func:`discrete_gaussian_batch` with sigma2 = scale^2
    (CKS Algorithm 3, about 0.4-0.5 us per draw, no set-up): at sigma ~ 8,000
    and 17,900 draws (a DP-PBB backup on the ICU-Sepsis domain) 13 ms
    against 0.35 s for the table. Releases record the paths they used
    (``samplers.noise_statement("exact", paths=...)``).

    References
    ----------
    Canonne, Kamath, Steinke 2020, Algorithm 3 and Thm 14; the table sampler:
    ``privaudit.privacy.samplers``.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise UsageError(f"`n` must be an integer >= 0. Found {n!r}.")
    if gaussian_path(scale, int(n)) == "table":
        return exact_noise("gaussian", scale, int(n), rng=rng)
    return discrete_gaussian_batch([(Fraction(float(scale)) ** 2, int(n))], rng=rng)[0]


def discrete_gaussian_scaled(sigma2: Fraction, size, *, rng: np.random.Generator) -> np.ndarray:
    """Exact draws of N_Z(0, sigma2) for wide sigma, a coarse table draw plus a uniform fine part per trial.

    The same law as :func:`discrete_gaussian_wide` (total variation 0 to the
    discrete Gaussian) at a fraction of its cost for sigma >= 2^8 lattice
    units (0.06-0.1 against 0.35-0.4 microseconds per draw at sigma ~ 2^45
    in calls of 10^5-10^6 draws, measured under load); a different
    algorithm, so a different random stream for the same seed.

    Parameters, Returns, Raises: as :func:`discrete_gaussian_wide` (int64
    array of shape ``size``; sigma2 an exact rational in lattice units,
    0 < sigma2, sigma <= 2^47; ``rng`` supplies uniform 64-bit words).

    Notes
    -----
    Let M = 2^m with sigma / M in [2^7, 2^8) (m >= 1; a smaller sigma goes
    to :func:`discrete_gaussian_batch`). One trial:

    1. J ~ N_Z(0, sigma2 / M^2), exactly, from the table sampler
       (``samplers.gaussian_sampler_for_variance``); the trial is rejected
       if J < 0, so J has P(J = j) proportional to g(j) = exp(-M^2 j^2 / (2 sigma2)), j >= 0;
    2. F uniform on {0, ..., M - 1} and a fair sign bit B (one 64-bit word);
       |Y| = M J + F + B;
    3. accept with probability exp(-(|Y|^2 - M^2 J^2) / (2 sigma2)) (<= 1:
       |Y| >= M J), decided exactly: a 53-bit uniform against exp(-x) in
       float64 outside a band of 2^-39 (for x <= 1; always the exact path
       for x > 1), interval arithmetic on the exact rational x inside it
       (:func:`accept_exact`, as :func:`discrete_gaussian_batch`);
    4. output Y = |Y| if B = 0, else -|Y|.

    For y >= 0 (B = 0, y = M j + f) the trial outputs y with probability
    proportional to g(j) exp(-(y^2 - M^2 j^2) / (2 sigma2)) / M = exp(-y^2 / (2 sigma2)) / M;
    for y <= -1 (B = 1, |y| = M j + f + 1) likewise exp(-y^2 / (2 sigma2)) / M.
    Every integer is reached by exactly one (B, J, F), so an accepted trial
    is an exact N_Z(0, sigma2) draw; trials are i.i.d., and the first n
    accepted (in order) are n i.i.d. draws. The acceptance probability is
    about 1 - 0.4 M / sigma >= 0.996, and about half the table draws
    are spent on J < 0.

    Float error of the fast path: x = (2 M J + o) o c with o = F + B, the
    integer 2 M J + o converted once, c = 1 / (2 sigma2) rounded once: four
    roundings, |x_hat - x| <= 2^-51 x; with exp's own error (< 2^-52) and the
    subtraction of the 53-bit integer u, d = exp(-x) 2^53 - u is known to
    within 9 units; the trial is decided by the float d only when it is more
    than 2^14 units from the decision interval [0, 1] and x <= 1 (else
    interval arithmetic on the exact rational x, :func:`accept_exact`).

    References
    ----------
    Canonne, Kamath, Steinke 2020 (the discrete Gaussian, Bernoulli(exp(-x))
    by comparison); von Neumann rejection against the envelope
    g(J) >= exp(-y^2 / (2 sigma2)) on the cell of (B, J).
    """
    sigma2 = Fraction(sigma2)
    p, q, t = variance_parts(sigma2)
    floor_sigma = t - 1
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    n = int(np.prod(shape))
    m = floor_sigma.bit_length() - 1 - _COARSE_BITS   # 2^(m + CB) <= floor(sigma) <= sigma < 2^(m + CB + 1)
    if m < 1:
        return discrete_gaussian_batch([(sigma2, shape)], rng=rng)[0]
    M = 1 << m
    coarse = gaussian_sampler_for_variance(sigma2 / (M * M))
    c = float(1 / (2 * sigma2))               # one rounding
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        J = coarse.add_into(np.zeros(min(2 * need + 64, _SCALED_CHUNK), dtype=np.int64), rng)
        J = J[J >= 0]                                                  # trials with J < 0 are rejected
        k = J.size
        w = uniform_words(rng, k)
        neg = (w & np.uint64(1)).view(np.int64)                        # the sign bit B
        off = (w >> np.uint64(64 - m)).view(np.int64)                  # F, uniform on [0, M)
        off += neg                                                     # |Y| = M J + off
        ya = np.left_shift(J, m)                                       # M J
        # x = (|Y|^2 - M^2 J^2) / (2 sigma2) = off (2 M J + off) / (2 sigma2)
        x = (2 * ya + off).astype(np.float64)
        x *= off
        x *= c
        ya += off
        # accept iff U < exp(-x), U = (u + V) 2^-53, V uniform on [0, 1): d = exp(-x) 2^53 - u
        u = uniform_words(rng, k) >> np.uint64(64 - U_BITS)
        d = np.exp(-x)
        d *= 2.0 ** U_BITS
        d -= u.astype(np.float64)
        unsure = np.abs(d - 0.5) < _SCALED_BAND + 0.5                  # -band < d < 1 + band
        unsure |= x > 1.0
        accept = d >= _SCALED_BAND + 1.0
        big = J > _COARSE_SAFE
        for i in np.flatnonzero(unsure | big):  # unsure: probability ~2^-38 each; big: never in practice
            j_i, o_i = int(J[i]), int(off[i])
            if unsure[i]:
                accept[i] = accept_exact(o_i * (2 * M * j_i + o_i) * q, 2 * p, int(u[i]), rng)
            if big[i] and accept[i]:
                if M * j_i + o_i >= 1 << 63:
                    raise RuntimeError("discrete_gaussian_scaled: a draw beyond int64; report this")
                ya[i] = M * j_i + o_i
        y = np.where(neg.astype(bool), -ya, ya)[accept][:need]
        out[filled:filled + y.size] = y
        filled += y.size
    return out.reshape(shape)
